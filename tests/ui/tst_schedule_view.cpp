// ScheduleView, ScheduleTimelineItem and simulateSchedule(): block times of the dependency-driven
// simulation, the item's time scale and shared span, the bubble (idle share) against the closed
// forms, capping of huge m, export.
//
// What the bubble rows compare, and why: with forward 1 and backward 2 time units per full
// stage and no communication, GPipe and 1F1B both finish in (m + p - 1)(f + b) — the last
// micro-batch's forward reaches the last stage after p - 1 forwards, and its backward returns
// after p - 1 backwards — while every rank is busy m (f + b). The idle share of all ranks' time
// is therefore (p - 1)/(m + p - 1), the form of the bubble (p - 1)/m measured against the whole
// step instead of the ideal one. Megatron's interleaved schedule shrinks the fill and drain to
// (p - 1)(f + b)/v, giving (p - 1)/(v m + p - 1). The test computes these from p, m, v alone,
// never from the simulation.
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QSvgRenderer>
#include <QTemporaryDir>
#include <QtTest>

#include <map>
#include <tuple>

#include "schedule/ScheduleTimeline.h"
#include "schedule/ScheduleTimelineItem.h"
#include "schedule/ScheduleView.h"
#include "views_test_plans.h"

using stagecraft::config::Schedule;
using stagecraft::runtime::PipeOp;
Q_DECLARE_METATYPE(stagecraft::config::Schedule)

class TestScheduleView : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void bubbleMatchesClosedForm_data();
  void bubbleMatchesClosedForm();
  void workedExampleBlockTimes();
  void timeScaleAndSharedSpan();
  void dependenciesHold_data();
  void dependenciesHold();
  void viewFollowsPlan();
  void hugeMicroBatchCountIsCapped();
  void exportWritesFiles();
};

void TestScheduleView::bubbleMatchesClosedForm_data() {
  QTest::addColumn<Schedule>("schedule");
  QTest::addColumn<int>("p");
  QTest::addColumn<int>("v");
  QTest::addColumn<int>("m");
  QTest::addColumn<double>("expected");
  auto plain = [](int p, int m) { return double(p - 1) / (m + p - 1); };
  auto inter = [](int p, int v, int m) { return double(p - 1) / (v * m + p - 1); };
  QTest::newRow("gpipe p=4 m=8") << Schedule::kGpipe << 4 << 1 << 8 << plain(4, 8);
  QTest::newRow("1f1b p=4 m=8") << Schedule::k1f1b << 4 << 1 << 8 << plain(4, 8);
  QTest::newRow("interleaved p=4 v=2 m=8") << Schedule::kInterleaved << 4 << 2 << 8 << inter(4, 2, 8);
  QTest::newRow("1f1b p=8 m=32") << Schedule::k1f1b << 8 << 1 << 32 << plain(8, 32);
  QTest::newRow("gpipe p=2 m=1") << Schedule::kGpipe << 2 << 1 << 1 << plain(2, 1);
  QTest::newRow("1f1b p=1 has no bubble") << Schedule::k1f1b << 1 << 1 << 4 << 0.0;
}

void TestScheduleView::bubbleMatchesClosedForm() {
  QFETCH(Schedule, schedule);
  QFETCH(int, p);
  QFETCH(int, v);
  QFETCH(int, m);
  QFETCH(double, expected);
  const ScheduleTimeline t = simulateSchedule(schedule, p, v, m);
  QVERIFY(t.ok);
  QCOMPARE(static_cast<int>(t.blocks.size()), 2 * p * v * m);
  // Every rank is busy m (f + b) = 3m units.
  QVERIFY(qAbs(t.busyTime - 3.0 * m * p) < 1e-9);
  QVERIFY2(qAbs(t.idleFraction() - expected) < 1e-12,
           qPrintable(QString("simulated %1, closed form %2, makespan %3").arg(t.idleFraction()).arg(expected).arg(t.makespan)));
}

void TestScheduleView::workedExampleBlockTimes() {
  // The header's example: 1f1b, p = 2, m = 2.
  const ScheduleTimeline t = simulateSchedule(Schedule::k1f1b, 2, 1, 2);
  QVERIFY(t.ok);
  struct Want {
    int rank;
    PipeOp::Kind kind;
    int mb;
    double start, end;
  };
  const auto F = PipeOp::Kind::kForward;
  const auto B = PipeOp::Kind::kBackward;
  const std::vector<Want> want = {{0, F, 0, 0, 1}, {0, F, 1, 1, 2}, {0, B, 0, 4, 6}, {0, B, 1, 7, 9},
                                  {1, F, 0, 1, 2}, {1, B, 0, 2, 4}, {1, F, 1, 4, 5}, {1, B, 1, 5, 7}};
  QCOMPARE(t.blocks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& b = t.blocks[i];
    QCOMPARE(b.ppRank, want[i].rank);
    QVERIFY(b.op.kind == want[i].kind);
    QCOMPARE(b.op.micro_batch, want[i].mb);
    QCOMPARE(b.start, want[i].start);
    QCOMPARE(b.end, want[i].end);
  }
  QCOMPARE(t.makespan, 9.0);
}

// The Runs view draws milliseconds: its own scale, and one span for two timelines stacked on one
// axis. The default stays one forward pass per kUnit.
void TestScheduleView::timeScaleAndSharedSpan() {
  ScheduleTimelineItem item;
  item.setTimeline(simulateSchedule(Schedule::k1f1b, 2, 1, 2));  // makespan 9
  const ScheduleBlock& b0 = item.timeline().blocks[2];           // pp 0's B0 [4, 6]
  QCOMPARE(item.blockRect(b0).left(), ScheduleTimelineItem::kLabelWidth + 4 * ScheduleTimelineItem::kUnit);
  QCOMPARE(item.boundingRect().width(), ScheduleTimelineItem::kLabelWidth + 10 * ScheduleTimelineItem::kUnit);
  item.setTimeScale(10.0);
  QCOMPARE(item.blockRect(b0).left(), ScheduleTimelineItem::kLabelWidth + 40.0);
  QCOMPARE(item.blockRect(b0).width(), 20.0);
  QCOMPARE(item.span(), 9.0);
  item.setSpan(25.0);  // a longer timeline drawn beside it
  QCOMPARE(item.span(), 25.0);
  QCOMPARE(item.boundingRect().width(), ScheduleTimelineItem::kLabelWidth + 250.0 + ScheduleTimelineItem::kUnit);
  item.setSpan(3.0);  // never shorter than its own makespan
  QCOMPARE(item.span(), 9.0);
  item.setTimeScale(0.0);  // refused
  QCOMPARE(item.timeScale(), 10.0);
}

void TestScheduleView::dependenciesHold_data() {
  QTest::addColumn<Schedule>("schedule");
  QTest::addColumn<int>("p");
  QTest::addColumn<int>("v");
  QTest::addColumn<int>("m");
  QTest::newRow("gpipe p=4 m=8") << Schedule::kGpipe << 4 << 1 << 8;
  QTest::newRow("1f1b p=4 m=8") << Schedule::k1f1b << 4 << 1 << 8;
  QTest::newRow("interleaved p=4 v=2 m=8") << Schedule::kInterleaved << 4 << 2 << 8;
  QTest::newRow("interleaved p=2 v=3 m=6") << Schedule::kInterleaved << 2 << 3 << 6;
}

void TestScheduleView::dependenciesHold() {
  QFETCH(Schedule, schedule);
  QFETCH(int, p);
  QFETCH(int, v);
  QFETCH(int, m);
  const ScheduleTimeline t = simulateSchedule(schedule, p, v, m);
  QVERIFY(t.ok);
  const int chunks = p * v;
  std::map<std::tuple<int, int, int>, const ScheduleBlock*> at;  // (kind, chunk, mb)
  for (const auto& b : t.blocks) {
    QCOMPARE(b.ppRank, b.op.chunk % p);  // chunk c runs on pp rank c mod p
    const double want = (b.op.kind == PipeOp::Kind::kForward ? 1.0 : 2.0) / v;
    QVERIFY(qAbs((b.end - b.start) - want) < 1e-12);  // backward twice a forward, 1/v per chunk
    at[std::make_tuple(int(b.op.kind), b.op.chunk, b.op.micro_batch)] = &b;
  }
  QCOMPARE(static_cast<int>(at.size()), 2 * chunks * m);
  const int F = int(PipeOp::Kind::kForward), B = int(PipeOp::Kind::kBackward);
  auto get = [&](int kind, int c, int mb) { return at[std::make_tuple(kind, c, mb)]; };
  for (int c = 0; c < chunks; ++c) {
    for (int mb = 0; mb < m; ++mb) {
      if (c > 0) QVERIFY(get(F, c, mb)->start >= get(F, c - 1, mb)->end - 1e-12);
      if (c < chunks - 1) QVERIFY(get(B, c, mb)->start >= get(B, c + 1, mb)->end - 1e-12);
      QVERIFY(get(B, c, mb)->start >= get(F, c, mb)->end - 1e-12);
    }
  }
  // No two blocks of one rank overlap.
  for (size_t i = 1; i < t.blocks.size(); ++i) {
    if (t.blocks[i].ppRank == t.blocks[i - 1].ppRank) QVERIFY(t.blocks[i].start >= t.blocks[i - 1].end - 1e-12);
  }
}

void TestScheduleView::viewFollowsPlan() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 1, 4, "tp-dp-pp", {"train.global_batch=16"}, &ok);
  QVERIFY(ok);
  QCOMPARE(plan.micro_batches, 8);
  ScheduleView view;
  view.setPlan(plan);
  QCOMPARE(view.timeline().pp, 4);
  QCOMPARE(view.timeline().microBatches, 8);
  const QString header = view.headerText();
  // (p - 1)/(m + p - 1) = 3/11 = 27.3%; the formula's (p - 1)/m = 37.5%.
  QVERIFY2(header.startsWith("1f1b · p = 4 · m = 8"), qPrintable(header));
  QVERIFY2(header.contains("simulated bubble 27.3%"), qPrintable(header));
  QVERIFY2(header.contains("(p-1)/m = 37.5%"), qPrintable(header));
  QVERIFY(!header.contains("showing the first"));

  const auto inter = views_test::makePlan(1, 8, 2, 1, 4, "tp-dp-pp",
                                          {"train.global_batch=16", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}, &ok);
  QVERIFY(ok);
  view.setPlan(inter);
  QCOMPARE(view.timeline().virtualStages, 2);
  // (p - 1)/(v m + p - 1) = 3/19 = 15.8%.
  QVERIFY2(view.headerText().contains("simulated bubble 15.8%"), qPrintable(view.headerText()));
  QVERIFY2(view.headerText().contains("v = 2"), qPrintable(view.headerText()));
}

void TestScheduleView::hugeMicroBatchCountIsCapped() {
  bool ok = false;
  const auto plan = views_test::examplePlan("gpt3-175b-1024x8", {}, &ok);  // interleaved p=8 v=2 m=24
  QVERIFY(ok);
  const auto big = views_test::examplePlan("gpt3-175b-1024x8", {"train.global_batch=1572864"}, &ok);
  QVERIFY(ok);
  QCOMPARE(big.micro_batches, 12288);
  ScheduleView view;
  QElapsedTimer timer;
  timer.start();
  view.setPlan(big);
  qInfo("ScheduleView::setPlan, interleaved p=8 v=2 m=12288 (capped): %.2f ms", timer.nsecsElapsed() / 1e6);
  const int drawn = view.timeline().microBatches;
  QVERIFY(drawn < big.micro_batches);
  QCOMPARE(drawn % big.pp, 0);  // interleaving needs a multiple of p
  QVERIFY(view.timeline().ok);
  QVERIFY2(view.headerText().contains(QString("showing the first %1 of 12288 micro-batches").arg(drawn)), qPrintable(view.headerText()));
  view.setPlan(plan);
  QCOMPARE(view.timeline().microBatches, plan.micro_batches);
}

void TestScheduleView::exportWritesFiles() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 1, 4, "tp-dp-pp", {"train.global_batch=16"}, &ok);
  QVERIFY(ok);
  ScheduleView view;
  QTemporaryDir dir;
  QString error;
  QVERIFY(!view.exportImage(dir.filePath("empty.png"), &error));  // nothing drawn yet
  QVERIFY2(error.contains("load a plan"), qPrintable(error));
  view.setPlan(plan);
  QVERIFY2(view.exportImage(dir.filePath("schedule.png"), &error), qPrintable(error));
  QImage image(dir.filePath("schedule.png"));
  QVERIFY(!image.isNull());
  QVERIFY(image.width() > image.height());  // a timeline is wide
  // Forward and backward blocks are in the picture.
  bool sawForward = false, sawBackward = false;
  ScheduleBlock f{0, {PipeOp::Kind::kForward, 0, 0}, 0, 1}, b{0, {PipeOp::Kind::kBackward, 0, 0}, 0, 1};
  const QRgb fc = ScheduleTimelineItem::blockColor(f, 4).rgb() & 0xFFFFFF, bc = ScheduleTimelineItem::blockColor(b, 4).rgb() & 0xFFFFFF;
  for (int y = 0; y < image.height(); y += 2)
    for (int x = 0; x < image.width(); x += 2) {
      sawForward |= (image.pixel(x, y) & 0xFFFFFF) == fc;
      sawBackward |= (image.pixel(x, y) & 0xFFFFFF) == bc;
    }
  QVERIFY(sawForward && sawBackward);
  QVERIFY2(view.exportImage(dir.filePath("schedule.svg"), &error), qPrintable(error));
  QTest::failOnWarning(QRegularExpression(".*"));  // the renderer understands every element
  QSvgRenderer svg(dir.filePath("schedule.svg"));
  QVERIFY(svg.isValid());
  QFile file(dir.filePath("schedule.svg"));
  QVERIFY(file.open(QIODevice::ReadOnly));
  QVERIFY(file.readAll().contains("simulated bubble 27.3%"));  // the header line is in the image
  QVERIFY(!view.exportImage(dir.filePath("schedule.jpg"), &error));
  QVERIFY2(error.contains(".png or .svg"), qPrintable(error));
}

QTEST_MAIN(TestScheduleView)
#include "tst_schedule_view.moc"
