// EstimatesView: the peak memory line, the memory bars and step-time parts are the estimate's
// numbers; a plan over the device's memory is flagged; figures and warnings are shown; a pinned
// plan stands beside the current one with the differences.
#include <QElapsedTimer>
#include <QLabel>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "estimates/EstimateCharts.h"
#include "estimates/EstimatesView.h"
#include "views_test_plans.h"

using stagecraft::plan::format_bytes;

class TestEstimatesView : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void peakMemoryText_data();
  void peakMemoryText();
  void chartsHoldTheEstimate();
  void figuresAndWarnings();
  void memoryAxisFitsTheBars_data();
  void memoryAxisFitsTheBars();
  void stepLegendRowsAllShow_data();
  void stepLegendRowsAllShow();
  void setPlanIsCheap();
  void pinComparesTwoPlans();
};

void TestEstimatesView::peakMemoryText_data() {
  QTest::addColumn<QStringList>("overrides");
  QTest::addColumn<int>("pp");
  QTest::addColumn<bool>("fits");
  QTest::newRow("small model fits") << QStringList{} << 2 << true;
  // 8 layers of hidden 8192 is 6.4 B parameters: 16 bytes each in fp32 Adam is ~100 GB on one
  // 80 GB GPU without pipeline stages.
  QTest::newRow("6.4B parameters on one A100-80GB do not fit") << QStringList{"model.hidden=8192", "model.heads=64"} << 1 << false;
}

void TestEstimatesView::peakMemoryText() {
  QFETCH(QStringList, overrides);
  QFETCH(int, pp);
  QFETCH(bool, fits);
  std::vector<std::string> extra;
  for (const auto& o : overrides) extra.push_back(o.toStdString());
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 8 / pp, 1, pp, "tp-dp-pp", extra, &ok);
  QVERIFY(ok);
  QCOMPARE(plan.estimate.fits, fits);
  EstimatesView view;
  view.setPlan(plan);
  const QString text = view.peakMemoryText();
  const QString peak = QString::fromStdString(format_bytes(plan.estimate.peak_memory_bytes));
  const QString device = QString::fromStdString(format_bytes(plan.estimate.device_memory_bytes));
  QVERIFY2(text.contains("Peak memory " + peak), qPrintable(text));
  QVERIFY2(text.contains(QString("pp rank %1").arg(plan.estimate.peak_pp_rank)), qPrintable(text));
  QVERIFY2(text.contains("of " + device + " A100-80GB"), qPrintable(text));
  QVERIFY2(text.endsWith(fits ? "(fits)" : "(does not fit)"), qPrintable(text));
  // The label the person reads shows the same text.
  auto* label = view.findChild<QLabel*>("peakMemory");
  QVERIFY(label);
  QCOMPARE(label->text(), text);
  QCOMPARE(view.memoryChart()->isOver(plan.estimate.peak_pp_rank), !fits);
}

void TestEstimatesView::chartsHoldTheEstimate() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 1, 4, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  EstimatesView view;
  view.setPlan(plan);
  const auto& e = plan.estimate;
  const auto& bars = view.memoryChart()->bars();
  QCOMPARE(static_cast<int>(bars.size()), 4);
  for (int r = 0; r < 4; ++r) {
    const auto& m = e.memory[static_cast<size_t>(r)];
    const auto& b = bars[static_cast<size_t>(r)];
    QCOMPARE(b[0], m.weights);
    QCOMPARE(b[1], m.grads);
    QCOMPARE(b[2], m.optimizer);
    QCOMPARE(b[3], m.activations);
    QCOMPARE(b[4], m.workspace);
    QVERIFY(!view.memoryChart()->isOver(r));
  }
  QCOMPARE(view.memoryChart()->deviceBytes(), e.device_memory_bytes);
  const auto& s = view.stepTimeChart()->seconds();
  QCOMPARE(s[0], e.breakdown.compute_s);
  QCOMPARE(s[2], e.breakdown.tp_comm_s);
  QCOMPARE(s[3], e.breakdown.cp_comm_s);
  QCOMPARE(s[4], e.breakdown.moe_a2a_s);
  QCOMPARE(s[7], e.breakdown.bubble_s);
  // The parts add up to the step time the estimate reports.
  QVERIFY(qAbs(view.stepTimeChart()->total() - e.step_time_s) <= 1e-9 * e.step_time_s);
  // Both paint.
  view.resize(700, 600);
  QImage img(view.size(), QImage::Format_RGB32);
  view.render(&img);
}

void TestEstimatesView::figuresAndWarnings() {
  bool ok = false;
  // pp = 4 with m = 4 micro-batches: bubble (4-1)/4 = 75% > 25%, a warning.
  const auto plan = views_test::makePlan(1, 8, 2, 1, 4, "tp-dp-pp", {"train.global_batch=8", "train.micro_batch=1"}, &ok);
  QVERIFY(ok);
  QCOMPARE(plan.micro_batches, 4);
  QVERIFY(!plan.warnings.empty());
  EstimatesView view;
  view.setPlan(plan);
  const QString fig = view.figuresText();
  // The unit follows the magnitude (core/units.h): this small model runs under 1 TFLOP/s per
  // GPU, BERT-Large on 8 A100s above it.
  QVERIFY(plan.estimate.tflops_per_gpu < 1.0);
  QVERIFY2(fig.contains(QString::number(plan.estimate.tflops_per_gpu * 1e3, 'f', 1) + " GFLOP/s per GPU"), qPrintable(fig));
  const auto bert = views_test::examplePlan("bert-large-3d", {}, &ok);
  QVERIFY(ok);
  QVERIFY(bert.estimate.tflops_per_gpu >= 1.0 && bert.estimate.tflops_per_gpu < 1000.0);
  EstimatesView bertView;
  bertView.setPlan(bert);
  QVERIFY2(bertView.figuresText().contains(QString::number(bert.estimate.tflops_per_gpu, 'f', 1) + " TFLOP/s per GPU"),
           qPrintable(bertView.figuresText()));
  // The tiny GPT on CPU ranks runs at tens of GFLOP/s: shown in GFLOP/s, never as "0.0 TFLOP/s".
  const auto tiny = views_test::examplePlan("tiny-gpt", {}, &ok);
  QVERIFY(ok);
  QVERIFY(tiny.estimate.tflops_per_gpu > 1e-3 && tiny.estimate.tflops_per_gpu < 1.0);
  EstimatesView tinyView;
  tinyView.setPlan(tiny);
  const QString tinyFig = tinyView.figuresText();
  QVERIFY2(tinyFig.contains(QString::number(tiny.estimate.tflops_per_gpu * 1e3, 'f', 1) + " GFLOP/s per GPU"), qPrintable(tinyFig));
  QVERIFY2(!tinyFig.contains("TFLOP/s"), qPrintable(tinyFig));
  QVERIFY2(fig.contains("MFU " + QString::number(100 * plan.estimate.mfu, 'f', 1) + "%"), qPrintable(fig));
  QVERIFY2(fig.contains("schedule formula 75.0%"), qPrintable(fig));
  QVERIFY2(fig.contains("m = 4 micro-batches"), qPrintable(fig));
  // The model the figures are of, from its description.
  QVERIFY2(tinyFig.startsWith("gpt2: 4 layers, hidden 128, 4 heads, FFN 512 (GELU), vocabulary 256, tied head · "), qPrintable(tinyFig));
  const auto llama = views_test::examplePlan("llama3-8b-1x8", {}, &ok);
  QVERIFY(ok);
  EstimatesView llamaView;
  llamaView.setPlan(llama);
  QVERIFY2(llamaView.figuresText().startsWith("llama: 32 layers, hidden 4096, 32 heads (8 key/value), FFN 14336 (SwiGLU), vocabulary 128256, "
                                              "untied head · "),
           qPrintable(llamaView.figuresText()));
  QVERIFY2(llamaView.figuresText().contains("8.03 B parameters ·"), qPrintable(llamaView.figuresText()));
  QVERIFY2(!llamaView.figuresText().contains("active"), qPrintable(llamaView.figuresText()));
  // A mixture of experts: every parameter and those one token passes (Mixtral 8x7B: 46.7 B, 12.9 B).
  const auto mixtral = views_test::examplePlan("mixtral-8x7b-8x8", {}, &ok);
  QVERIFY(ok);
  EstimatesView mixtralView;
  mixtralView.setPlan(mixtral);
  QVERIFY2(mixtralView.figuresText().contains("46.7 B parameters, 12.88 B active per token ·"), qPrintable(mixtralView.figuresText()));
  QVERIFY2(mixtralView.figuresText().contains("8 experts of FFN 14336, top 2"), qPrintable(mixtralView.figuresText()));
  // ep 8: the dispatch and combine all-to-alls are a part of their own, in the legend, and the
  // parts still add up to the step.
  const auto* steps = mixtralView.stepTimeChart();
  QVERIFY(mixtral.estimate.breakdown.moe_a2a_s > 0);
  QCOMPARE(steps->seconds()[4], mixtral.estimate.breakdown.moe_a2a_s);
  QCOMPARE(StepTimeChart::partName(4), QStringLiteral("EP all-to-all"));
  const auto legend = steps->legendIndices();
  QVERIFY(std::find(legend.begin(), legend.end(), 4) != legend.end());
  QVERIFY(qAbs(steps->total() - mixtral.estimate.step_time_s) <= 1e-9 * mixtral.estimate.step_time_s);
  const auto dense = view.stepTimeChart()->legendIndices();
  QVERIFY(std::find(dense.begin(), dense.end(), 4) == dense.end());
  const QString warn = view.warningsText();
  for (const auto& w : plan.warnings) QVERIFY2(warn.contains(QString::fromStdString(w)), qPrintable(warn));
  QCOMPARE(warn.count('\n'), static_cast<int>(plan.warnings.size()) - 1);
}

void TestEstimatesView::memoryAxisFitsTheBars_data() {
  QTest::addColumn<QString>("example");  // a configs/ example, or "" for the views' test plan
  QTest::addColumn<QStringList>("overrides");
  QTest::addColumn<bool>("deviceOnAxis");
  QTest::addColumn<QString>("unit");
  QTest::newRow("BERT-Large 3.7 GiB on 80 GiB: device above a break") << "bert-large-3d" << QStringList{} << false << "GiB";
  QTest::newRow("tiny GPT on the cpu device: MiB, device above a break") << "tiny-gpt" << QStringList{} << false << "MiB";
  QTest::newRow("BERT-Large on a 5 GiB device: near, on the axis")
      << "bert-large-3d" << QStringList{"cluster.device={base: A100-80GB, memory_gib: 5}"} << true << "GiB";
  QTest::newRow("6.4B parameters over 80 GiB: on the axis") << "" << QStringList{"model.hidden=8192", "model.heads=64"} << true << "GiB";
}

void TestEstimatesView::memoryAxisFitsTheBars() {
  QFETCH(QString, example);
  QFETCH(QStringList, overrides);
  QFETCH(bool, deviceOnAxis);
  QFETCH(QString, unit);
  std::vector<std::string> extra;
  for (const auto& o : overrides) extra.push_back(o.toStdString());
  bool ok = false;
  const auto plan = example.isEmpty() ? views_test::makePlan(1, 8, 8, 1, 1, "tp-dp-pp", extra, &ok)
                                      : views_test::examplePlan(example.toStdString(), extra, &ok);
  QVERIFY(ok);
  EstimatesView view;
  view.setPlan(plan);
  const MemoryChart* chart = view.memoryChart();
  const double device = plan.estimate.device_memory_bytes;
  const double tallest = plan.estimate.peak_memory_bytes;
  QCOMPARE(chart->deviceOnAxis(), deviceOnAxis);
  QCOMPARE(chart->deviceOnAxis(), tallest >= MemoryChart::kNearDevice * device);
  QCOMPARE(chart->axisUnit(), unit);
  QVERIFY(chart->axisMaxBytes() >= tallest);
  // Whole ticks: the top is a multiple of the tick, about four of them.
  const double ticks = chart->axisMaxBytes() / chart->axisTickBytes();
  QVERIFY2(std::abs(ticks - std::round(ticks)) < 1e-6 && ticks >= 2 && ticks <= 10, qPrintable(QString::number(ticks)));
  if (deviceOnAxis) {
    QVERIFY(chart->axisMaxBytes() >= device);
  } else {
    // The bars fill the plot: the tallest reaches at least half the axis (at 80 GiB it was 5%).
    QVERIFY2(tallest >= 0.5 * chart->axisMaxBytes(), qPrintable(QString("%1 of %2").arg(tallest).arg(chart->axisMaxBytes())));
  }
  view.resize(420, 600);
  QImage img(view.size(), QImage::Format_RGB32);
  view.render(&img);
}

// Every legend entry of the step-time chart shows whole at any width: its columns are as wide as
// the widest entry, and the chart's height holds every row (it clipped below about 436 px).
void TestEstimatesView::stepLegendRowsAllShow_data() {
  QTest::addColumn<int>("width");
  for (int w : {240, 320, 380, 436, 520, 700, 1000}) QTest::newRow(qPrintable(QString("%1 px").arg(w))) << w;
}

void TestEstimatesView::stepLegendRowsAllShow() {
  QFETCH(int, width);
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  EstimatesView view;
  view.setPlan(plan);
  view.resize(width, 700);
  view.show();
  QVERIFY(QTest::qWaitForWindowExposed(&view));
  QCoreApplication::processEvents();
  const StepTimeChart* chart = view.stepTimeChart();
  const int columns = chart->legendColumns(chart->width());
  const int rows = (chart->legendParts() + columns - 1) / columns;
  QVERIFY(columns >= 1);
  // The chart got the height its legend needs from the view's layout.
  QVERIFY2(chart->height() >= chart->heightForWidth(chart->width()),
           qPrintable(QString("height %1 < %2 at width %3").arg(chart->height()).arg(chart->heightForWidth(chart->width())).arg(chart->width())));
  QVERIFY(chart->heightForWidth(chart->width()) >= rows * 16);
  // More width never needs more rows.
  QVERIFY(chart->legendColumns(chart->width() + 200) >= columns);
}

// Pin keeps a plan beside the next one: both plans' charts and figures, and a line of differences
// in both plans' numbers; unpin returns to one plan.
void TestEstimatesView::pinComparesTwoPlans() {
  bool ok = false;
  const auto pinned = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  const auto current = views_test::makePlan(1, 8, 8, 1, 1, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  QVERIFY(pinned.estimate.step_time_s != current.estimate.step_time_s);
  EstimatesView view;
  QVERIFY(!view.pin());  // nothing shown yet
  view.setPlan(pinned);
  QVERIFY(view.pin());
  QVERIFY(view.isPinned());
  view.setPlan(current);
  // Each side holds its own plan.
  QCOMPARE(static_cast<int>(view.pinnedMemoryChart()->bars().size()), 2);
  QCOMPARE(static_cast<int>(view.memoryChart()->bars().size()), 1);
  QVERIFY(std::abs(view.pinnedStepTimeChart()->total() - pinned.estimate.step_time_s) < 1e-9 * pinned.estimate.step_time_s + 1e-12);
  QVERIFY(std::abs(view.stepTimeChart()->total() - current.estimate.step_time_s) < 1e-9 * current.estimate.step_time_s + 1e-12);
  QVERIFY2(view.pinnedFiguresText().contains("MFU " + QString::number(100 * pinned.estimate.mfu, 'f', 1) + "%"),
           qPrintable(view.pinnedFiguresText()));
  QVERIFY2(view.figuresText().contains("MFU " + QString::number(100 * current.estimate.mfu, 'f', 1) + "%"), qPrintable(view.figuresText()));
  const QString cmp = view.comparisonText();
  const QString nowStep = QString::fromStdString(stagecraft::plan::format_seconds(current.estimate.step_time_s));
  const QString thenStep = QString::fromStdString(stagecraft::plan::format_seconds(pinned.estimate.step_time_s));
  QVERIFY2(cmp.contains("step " + nowStep + " vs " + thenStep), qPrintable(cmp));
  QVERIFY2(cmp.contains(QString::fromStdString(format_bytes(current.estimate.peak_memory_bytes)) + " vs " +
                        QString::fromStdString(format_bytes(pinned.estimate.peak_memory_bytes))),
           qPrintable(cmp));
  // pp 2 against pp 1: the bubble is a part that differs.
  QVERIFY2(cmp.contains("Step parts that differ:"), qPrintable(cmp));
  view.unpin();
  QVERIFY(!view.isPinned());
  QVERIFY(view.comparisonText().isEmpty());
  QVERIFY(view.pinnedFiguresText().isEmpty());
}

void TestEstimatesView::setPlanIsCheap() {
  bool ok = false;
  const auto plan = views_test::examplePlan("gpt3-175b-1024x8", {}, &ok);
  QVERIFY(ok);
  EstimatesView view;
  view.resize(800, 600);
  view.show();
  QVERIFY(QTest::qWaitForWindowExposed(&view));
  const int rounds = 200;
  QElapsedTimer timer;
  timer.start();
  for (int i = 0; i < rounds; ++i) view.setPlan(plan);
  qInfo("EstimatesView::setPlan, 1024 x 8 GPT-3 plan: %.3f ms each", timer.nsecsElapsed() / 1e6 / rounds);
  QVERIFY(view.peakMemoryText().startsWith("Peak memory"));
  // setPlan followed by a full repaint of the view (charts and labels).
  timer.restart();
  for (int i = 0; i < 20; ++i) {
    view.setPlan(plan);
    view.repaint();
  }
  qInfo("EstimatesView::setPlan + repaint: %.3f ms each", timer.nsecsElapsed() / 1e6 / 20);
}

QTEST_MAIN(TestEstimatesView)
#include "tst_estimates_view.moc"
