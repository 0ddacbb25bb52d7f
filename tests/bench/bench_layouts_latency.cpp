// bench_layouts_latency: how responsive the window stays while the Layouts dock searches — the
// event loop's latency (the longest wait of a 1 ms timer beyond its interval) during each search
// of GPT-3 175B on 1,024 x 8 GPUs, the search itself included and the result shown (model, chart
// of every layout, table), and the time of one constraint change (re-filter, chart, table,
// repaint) as a person types.
//
//   bench_layouts_latency [SEARCHES] [CONFIG]     defaults: 5, configs/gpt3-175b-1024x8.yaml
//
// Prints a table; asserts nothing about time.
#include <QApplication>
#include <QCheckBox>
#include <QElapsedTimer>
#include <QSpinBox>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "layouts/LayoutSearch.h"
#include "layouts/LayoutsChart.h"
#include "layouts/LayoutsModel.h"
#include "layouts/LayoutsView.h"
#include "mainwindow/MainWindow.h"

namespace {

struct Stats {
  double median = 0, p99 = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)], v.back()};
}

double msSince(const QElapsedTimer& t) { return static_cast<double>(t.nsecsElapsed()) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("StagecraftBench"));
  const int searches = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const QString config = argc > 2 ? QString::fromLocal8Bit(argv[2]) : QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/gpt3-175b-1024x8.yaml");

  MainWindow window;
  window.resize(1600, 1000);
  window.show();
  if (!window.openFile(config)) {
    std::fprintf(stderr, "bench_layouts_latency: %s\n", qPrintable(window.lastError()));
    return 2;
  }
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
    const double now = msSince(clock);
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
    last = msSince(clock);
    probe.start();
    QElapsedTimer wall;
    wall.start();
    window.findLayouts();
    while (!done || view->chart()->isRebuildPending()) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    // The shown result: let the chart and table paint once.
    const double until = msSince(clock) + 50;
    while (msSince(clock) < until) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    probe.stop();
    QObject::disconnect(c);
    const Stats s = stats(lateness);
    maxima.push_back(s.max);
    std::printf("%7d %12zu %12.1f %10.1f %10.2f %10.2f %10.2f\n", i + 1, view->search()->layouts()->size(),
                view->search()->seconds() * 1e3, msSince(wall) - 50, s.median, s.p99, s.max);
  }

  // A constraint change as typed (the fits-only box, a fixed pp): its whole time (re-filter, table,
  // chart, repaint), and the event loop's longest wait meanwhile (the table and the chart update
  // in separate turns).
  std::vector<double> edits, editLag;
  auto* fits = qobject_cast<QCheckBox*>(view->field(QStringLiteral("fitsOnly")));
  auto* pp = qobject_cast<QSpinBox*>(view->field(QStringLiteral("pp")));
  for (int i = 0; i < 10; ++i) {
    lateness.clear();
    last = msSince(clock);
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
    edits.push_back(msSince(t));
    const double until = msSince(clock) + 30;
    while (msSince(clock) < until) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
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
