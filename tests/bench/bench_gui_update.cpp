// bench_gui_update: the desktop application's whole update for one edit on a 1024 x 8 GPU plan —
// the edit through the document (validate, re-plan, re-estimate), every view's setPlan, then one
// offscreen render of the whole window — as min / median / max milliseconds over N edits.
//
//   bench_gui_update [EDITS] [CONFIG]     defaults: 20, configs/gpt3-175b-1024x8.yaml
//
// Each edit flips parallel.tp between 8 and 16 (dp auto), so every GPU's coordinates, every TP
// group and every stage's estimate change: the topology rebuilds all 8192 tiles. Prints a table;
// asserts nothing about time.
#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QPainter>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "document/PlanDocument.h"
#include "mainwindow/MainWindow.h"
#include "stagecraft/plan/plan.h"

namespace {

struct Stats {
  double min = 0, median = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

double msSince(const QElapsedTimer& t) { return static_cast<double>(t.nsecsElapsed()) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("StagecraftBench"));
  const int edits = argc > 1 ? std::max(2, std::atoi(argv[1])) : 20;
  const QString config = argc > 2 ? QString::fromLocal8Bit(argv[2]) : QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/gpt3-175b-1024x8.yaml");

  MainWindow window;
  window.resize(1400, 900);
  window.show();
  if (!window.openFile(config)) {
    std::fprintf(stderr, "bench_gui_update: %s\n", qPrintable(window.lastError()));
    return 2;
  }
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
    planMs.push_back(msSince(t));
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
    editMs.push_back(msSince(t));  // validate + plan + estimate + every view's setPlan + status bar
    QElapsedTimer r;
    r.start();
    render();
    renderMs.push_back(msSince(r));
    totalMs.push_back(msSince(t));
  }

  const auto& p = doc->plan();
  std::printf("bench_gui_update: %s, %d nodes x %d GPUs = %d ranks, %d edits (tp 8 <-> 16, dp auto), window %dx%d offscreen\n",
              qPrintable(config), p.config.cluster.nodes, p.config.cluster.gpus_per_node, p.topology.world_size(), edits,
              window.width(), window.height());
  std::printf("%-44s %9s %9s %9s\n", "part", "min ms", "median ms", "max ms");
  auto row = [](const char* name, const std::vector<double>& v) {
    const Stats s = stats(v);
    std::printf("%-44s %9.2f %9.2f %9.2f\n", name, s.min, s.median, s.max);
  };
  row("make_plan alone (validate, topology, estimate)", planMs);
  row("edit -> document -> every view's setPlan", editMs);
  row("one offscreen render of the window", renderMs);
  row("whole update (edit + render)", totalMs);
  return 0;
}
