// StageEditor: dragging a stage boundary with the mouse moves layers between the two stages it
// separates and emits every layer's stage id; no drag can empty a stage; the buttons emit their
// signals; the strip and bars show the plan's split and cost (memory is the
// Estimates dock's chart alone).
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QtTest>

#include "stages/StageBars.h"
#include "stages/StageEditor.h"
#include "stages/StageStrip.h"
#include "views_test_plans.h"

using Ids = QList<int>;
Q_DECLARE_METATYPE(std::vector<int>)

class TestStageEditor : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase();
  void dragBoundary_data();
  void dragBoundary();
  void dragPreviewsAndSetPlanResets();
  void buttonsEmit();
  void barsFollowPlan();
};

void TestStageEditor::initTestCase() { qRegisterMetaType<std::vector<int>>(); }

void TestStageEditor::dragBoundary_data() {
  QTest::addColumn<int>("pp");
  QTest::addColumn<QStringList>("overrides");
  QTest::addColumn<int>("boundary");
  QTest::addColumn<int>("layersMoved");  // + right, - left, in layer widths
  QTest::addColumn<Ids>("expected");     // empty: nothing emitted

  // 8 layers, pp = 2, uniform [4,4].
  QTest::newRow("boundary 0 two layers right") << 2 << QStringList{} << 0 << 2 << Ids{0, 0, 0, 0, 0, 0, 1, 1};
  QTest::newRow("boundary 0 two layers left") << 2 << QStringList{} << 0 << -2 << Ids{0, 0, 1, 1, 1, 1, 1, 1};
  QTest::newRow("past the end stops at one layer left") << 2 << QStringList{} << 0 << 9 << Ids{0, 0, 0, 0, 0, 0, 0, 1};
  QTest::newRow("past the start stops at one layer left") << 2 << QStringList{} << 0 << -9 << Ids{0, 1, 1, 1, 1, 1, 1, 1};
  QTest::newRow("press and release in place emits nothing") << 2 << QStringList{} << 0 << 0 << Ids{};
  // 8 layers, pp = 4, uniform [2,2,2,2]: a boundary stops before emptying its right neighbour.
  QTest::newRow("pp4 boundary 0 cannot empty stage 1") << 4 << QStringList{} << 0 << 3 << Ids{0, 0, 0, 1, 2, 2, 3, 3};
  QTest::newRow("pp4 boundary 2 cannot empty stage 2") << 4 << QStringList{} << 2 << -5 << Ids{0, 0, 1, 1, 2, 3, 3, 3};
  QTest::newRow("pp4 boundary 1 one layer right") << 4 << QStringList{} << 1 << 1 << Ids{0, 0, 1, 1, 1, 2, 3, 3};
  // Interleaved, pp = 2, v = 2: four chunks [2,2,2,2]; boundary 1 separates chunks 1 and 2.
  QTest::newRow("interleaved chunk boundary 1 right")
      << 2 << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"} << 1 << 1 << Ids{0, 0, 1, 1, 1, 2, 3, 3};
}

void TestStageEditor::dragBoundary() {
  QFETCH(int, pp);
  QFETCH(QStringList, overrides);
  QFETCH(int, boundary);
  QFETCH(int, layersMoved);
  QFETCH(Ids, expected);
  std::vector<std::string> extra;
  for (const auto& o : overrides) extra.push_back(o.toStdString());
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 8 / pp, 1, pp, "tp-dp-pp", extra, &ok);
  QVERIFY(ok);

  StageEditor editor;
  editor.resize(900, 320);
  editor.show();
  QVERIFY(QTest::qWaitForWindowExposed(&editor));
  editor.setPlan(plan);
  StageStrip* strip = editor.strip();
  QSignalSpy spy(&editor, &StageEditor::partitionEdited);

  const int y = strip->stripCenterY();
  const double x0 = strip->boundaryX(boundary);
  const double target = x0 + layersMoved * strip->layerWidth();
  QTest::mousePress(strip, Qt::LeftButton, Qt::NoModifier, QPoint(qRound(x0), y));
  QVERIFY(strip->dragging());
  // Move in steps, as a hand does.
  const int steps = 6;
  for (int i = 1; i <= steps; ++i) QTest::mouseMove(strip, QPoint(qRound(x0 + (target - x0) * i / steps), y));
  QTest::mouseRelease(strip, Qt::LeftButton, Qt::NoModifier, QPoint(qRound(target), y));
  QVERIFY(!strip->dragging());

  if (expected.isEmpty()) {
    QCOMPARE(spy.count(), 0);
    return;
  }
  QCOMPARE(spy.count(), 1);
  const auto ids = spy.at(0).at(0).value<std::vector<int>>();
  QCOMPARE(Ids(ids.begin(), ids.end()), expected);
  // Every stage keeps at least one layer.
  for (int c = 0; c < plan.num_stages(); ++c) QVERIFY2(std::count(ids.begin(), ids.end(), c) >= 1, qPrintable(QString("stage %1").arg(c)));
}

void TestStageEditor::dragPreviewsAndSetPlanResets() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 4, 1, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  StageEditor editor;
  editor.resize(900, 320);
  editor.show();
  QVERIFY(QTest::qWaitForWindowExposed(&editor));
  editor.setPlan(plan);
  StageStrip* strip = editor.strip();
  QCOMPARE(strip->counts(), (std::vector<int>{4, 4}));
  const int y = strip->stripCenterY();
  const double x0 = strip->boundaryX(0);
  QTest::mousePress(strip, Qt::LeftButton, Qt::NoModifier, QPoint(qRound(x0), y));
  QTest::mouseMove(strip, QPoint(qRound(x0 - strip->layerWidth()), y));
  // While dragging the strip shows the preview: the boundary followed the mouse.
  QCOMPARE(strip->counts(), (std::vector<int>{3, 5}));
  QVERIFY(qAbs(strip->boundaryX(0) - (x0 - strip->layerWidth())) < 1.0);
  // A press away from every boundary starts no drag.
  QTest::mouseRelease(strip, Qt::LeftButton, Qt::NoModifier, QPoint(qRound(x0 - strip->layerWidth()), y));
  QTest::mousePress(strip, Qt::LeftButton, Qt::NoModifier, QPoint(qRound(strip->layerX(1) + strip->layerWidth() / 2), y));
  QVERIFY(!strip->dragging());
  QTest::mouseRelease(strip, Qt::LeftButton, Qt::NoModifier, QPoint(qRound(strip->layerX(1) + strip->layerWidth() / 2), y));
  // The document re-plans; the strip shows the new plan.
  editor.setPlan(plan);
  QCOMPARE(strip->counts(), (std::vector<int>{4, 4}));
  QCOMPARE(strip->stageIds(), plan.layer_stage);
}

void TestStageEditor::buttonsEmit() {
  StageEditor editor;
  QSignalSpy balance(&editor, &StageEditor::balanceRequested);
  QSignalSpy uniform(&editor, &StageEditor::uniformRequested);
  QTest::mouseClick(editor.balanceButton(), Qt::LeftButton);
  QCOMPARE(balance.count(), 1);
  QCOMPARE(uniform.count(), 0);
  QTest::mouseClick(editor.uniformButton(), Qt::LeftButton);
  QCOMPARE(uniform.count(), 1);
  QCOMPARE(balance.count(), 1);
}

void TestStageEditor::barsFollowPlan() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 1, 4, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  StageEditor editor;
  editor.setPlan(plan);
  const auto& cost = editor.bars()->relativeCosts();
  QCOMPARE(static_cast<int>(cost.size()), 4);
  for (int s = 0; s < 4; ++s) QCOMPARE(cost[static_cast<size_t>(s)], plan.stages[static_cast<size_t>(s)].relative_cost);
  // Uniform [2,2,2,2]: the last stage also runs the head and loss, so it is the costliest.
  QVERIFY(cost[3] > cost[1]);
  auto* summary = editor.findChild<QLabel*>("stageSummary");
  QVERIFY(summary);
  QVERIFY2(summary->text().startsWith("8 layers on 4 stages (uniform): 2,2,2,2"), qPrintable(summary->text()));
  // Paints without a plan and with one.
  editor.resize(700, 300);
  QImage img(editor.size(), QImage::Format_RGB32);
  editor.render(&img);
  StageEditor empty;
  empty.resize(700, 300);
  empty.render(&img);
}

QTEST_MAIN(TestStageEditor)
#include "tst_stage_editor.moc"
