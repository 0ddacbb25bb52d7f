// bench_layouts_latency: how responsive the window stays while the Layouts dock searches — the
// event loop's latency (the longest wait of a 1 ms timer beyond its interval) during each search
// of GPT-3 175B on 1,024 x 8 GPUs, the search itself included and the result shown (model, chart
// of every layout, table), and the time of one constraint change (re-filter, chart, table,
// repaint) as a person types.
//
//   bench_layouts_latency [SEARCHES] [CONFIG]     defaults: 5, configs/gpt3-175b-1024x8.yaml
//
// Prints a table; asserts nothing about time.
#include <QCheckBox>
#include <QSpinBox>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_window.h"
#include "layouts/LayoutSearch.h"
#include "layouts/LayoutsChart.h"
#include "layouts/LayoutsModel.h"
#include "layouts/LayoutsView.h"

using bench::ms_since;
using bench::Stats;
using bench::stats;

int main(int argc, char** argv) {
  bench::offscreen_by_default();
  QApplication app(argc, argv);
  bench::own_settings();
  const int searches = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const QString config = bench::config_argument(argc, argv);

  MainWindow window;
  if (!bench::open_window(window, 1600, 1000, config, "bench_layouts_latency")) return 2;
  LayoutsView* view = window.layoutsView();
  QCoreApplication::processEvents();

  // The probe: a 1 ms timer; each gap beyond 1 ms is time the event loop could not answer.
  constexpr int kTickMs = 1;
  QElapsedTimer clock;
  clock.start();
  double last = 0;
  std::vector<double> lateness;
  QTimer probe;
  probe.setTimerType(Qt::PreciseTimer);
  probe.setInterval(kTickMs);
  QObject::connect(&probe, &QTimer::timeout, [&] {
    const double now = ms_since(clock);
    lateness.push_back(std::max(0.0, now - last - kTickMs));
    last = now;
  });

  std::printf("Layouts dock on %s (%s)\n\n", qPrintable(config), "offscreen");
  std::printf("%7s %12s %12s %10s %10s %10s %10s\n", "search", "layouts", "engine ms", "wall ms", "lag med", "lag p99", "lag max");
  std::vector<double> maxima;
  for (int i = 0; i < searches; ++i) {
    bool done = false;
    auto c = QObject::connect(view->search(), &LayoutSearch::finished, [&] { done = true; });
    lateness.clear();
    last = ms_since(clock);
    probe.start();
    QElapsedTimer wall;
    wall.start();
    window.findLayouts();
    while (!done || view->chart()->isRebuildPending()) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    // The shown result: let the chart and table paint once.
    const double until = ms_since(clock) + 50;
    while (ms_since(clock) < until) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    probe.stop();
    QObject::disconnect(c);
    const Stats s = stats(lateness);
    maxima.push_back(s.max);
    std::printf("%7d %12zu %12.1f %10.1f %10.2f %10.2f %10.2f\n", i + 1, view->search()->layouts()->size(),
                view->search()->seconds() * 1e3, ms_since(wall) - 50, s.median, s.p99, s.max);
  }

  // A constraint change as typed (the fits-only box, a fixed pp): its whole time (re-filter, table,
  // chart, repaint), and the event loop's longest wait meanwhile (the table and the chart update
  // in separate turns).
  std::vector<double> edits, editLag;
  auto* fits = qobject_cast<QCheckBox*>(view->field(QStringLiteral("fitsOnly")));
  auto* pp = qobject_cast<QSpinBox*>(view->field(QStringLiteral("pp")));
  for (int i = 0; i < 10; ++i) {
    lateness.clear();
    last = ms_since(clock);
    probe.start();
    QElapsedTimer t;
    t.start();
    bool changed = false;
    QTimer::singleShot(5, [&] {
      t.restart();
      if (i % 2 == 0) fits->setChecked(!fits->isChecked());
      else pp->setValue(pp->value() == 0 ? 16 : 0);
      changed = true;
    });
    while (!changed || view->chart()->isRebuildPending()) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    view->repaint();
    edits.push_back(ms_since(t));
    const double until = ms_since(clock) + 30;
    while (ms_since(clock) < until) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    probe.stop();
    editLag.push_back(stats(lateness).max);
  }
  const Stats e = stats(edits);
  const Stats l = stats(editLag);
  std::printf("\nconstraint change (re-filter, chart of up to %zu points, table, repaint): median %.1f ms, max %.1f ms;\n"
              "  event-loop lag meanwhile: median %.1f ms, max %.1f ms\n",
              view->model()->allLayouts().size(), e.median, e.max, l.median, l.max);
  std::printf("event-loop lag while searching: worst %.1f ms over %d searches\n", *std::max_element(maxima.begin(), maxima.end()),
              searches);
  return 0;
}
