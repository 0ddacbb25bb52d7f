// bench_gui_update: the desktop application's whole update for one edit on a 1024 x 8 GPU plan —
// the edit through the document (validate, re-plan, re-estimate), every view's setPlan, then one
// offscreen render of the whole window — as min / median / max milliseconds over N edits.
//
//   bench_gui_update [EDITS] [CONFIG]     defaults: 20, configs/gpt3-175b-1024x8.yaml
//
// Each edit flips parallel.tp between 8 and 16 (dp auto), so every GPU's coordinates, every TP
// group and every stage's estimate change: the topology rebuilds all 8192 tiles. Prints a table;
// asserts nothing about time.
#include <QImage>
#include <QPainter>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_window.h"
#include "document/PlanDocument.h"
#include "stagecraft/plan/plan.h"

using bench::ms_since;

int main(int argc, char** argv) {
  bench::offscreen_by_default();
  QApplication app(argc, argv);
  bench::own_settings();
  const int edits = argc > 1 ? std::max(2, std::atoi(argv[1])) : 20;
  const QString config = bench::config_argument(argc, argv);

  MainWindow window;
  if (!bench::open_window(window, 1400, 900, config, "bench_gui_update")) return 2;
  PlanDocument* doc = window.document();
  if (!doc->applyEdit(QStringLiteral("parallel.dp"), QStringLiteral("auto"))) {
    std::fprintf(stderr, "bench_gui_update: cannot set parallel.dp=auto\n");
    return 2;
  }
  QImage frame(window.size(), QImage::Format_ARGB32_Premultiplied);
  auto render = [&] {
    QPainter p(&frame);
    window.render(&p);
  };
  render();  // first paint: fonts, style, caches

  std::vector<double> planMs, editMs, renderMs, totalMs;
  for (int i = 0; i < edits; ++i) {
    const int tp = doc->config().parallel.tp == 8 ? 16 : 8;
    QElapsedTimer t;
    t.start();
    auto plan = stagecraft::plan::make_plan([&] {
      auto c = doc->config();
      c.parallel.tp = tp;
      return c;
    }());
    planMs.push_back(ms_since(t));
    if (!plan.ok()) {
      std::fprintf(stderr, "bench_gui_update: %s\n", plan.status().message().c_str());
      return 1;
    }

    t.restart();
    QString error;
    if (!doc->applyEdit(QStringLiteral("parallel.tp"), QString::number(tp), &error)) {
      std::fprintf(stderr, "bench_gui_update: %s\n", qPrintable(error));
      return 1;
    }
    editMs.push_back(ms_since(t));  // validate + plan + estimate + every view's setPlan + status bar
    QElapsedTimer r;
    r.start();
    render();
    renderMs.push_back(ms_since(r));
    totalMs.push_back(ms_since(t));
  }

  const auto& p = doc->plan();
  std::printf("bench_gui_update: %s, %d nodes x %d GPUs = %d ranks, %d edits (tp 8 <-> 16, dp auto), window %dx%d offscreen\n",
              qPrintable(config), p.config.cluster.nodes, p.config.cluster.gpus_per_node, p.topology.world_size(), edits,
              window.width(), window.height());
  std::printf("%-44s %9s %9s %9s\n", "part", "min ms", "median ms", "max ms");
  auto row = [](const char* name, const std::vector<double>& v) {
    const bench::Stats s = bench::stats(v);
    std::printf("%-44s %9.2f %9.2f %9.2f\n", name, s.min, s.median, s.max);
  };
  row("make_plan alone (validate, topology, estimate)", planMs);
  row("edit -> document -> every view's setPlan", editMs);
  row("one offscreen render of the window", renderMs);
  row("whole update (edit + render)", totalMs);
  return 0;
}
