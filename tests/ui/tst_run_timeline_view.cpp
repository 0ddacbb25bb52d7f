// tst_run_timeline_view: the Runs view's Timeline tab over a real history. A tiny GPT run (dp 2 x
// pp 2, 1F1B, m = 2) is recorded with timing events whose ops are the Schedule view's worked
// example (ScheduleTimeline.h) scaled to u ms with u = the step number, twice as slow on replica
// dp 1: pp 0 runs F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9], pp 1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7],
// so step 10 of replica 0 spans 90 ms with a third of the ranks' time idle. The tab must draw
// those blocks at those times, change with the chosen step and replica, draw the prediction from
// the estimate beside them, compare the parts, and say why when a run has no timing events.
#include <QComboBox>
#include <QLineSeries>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <memory>

#include "run_timing_support.h"
#include "runs/RunTimelineView.h"
#include "runs/RunsView.h"
#include "schedule/ScheduleTimeline.h"

namespace launch = stagecraft::launch;
namespace plan = stagecraft::plan;
namespace store = stagecraft::store;
using stagecraft::runtime::PipeOp;
using timing_test::Parts;

namespace {

// The worked example's blocks of one pp rank: backward?, micro-batch, start, end (units).
struct Block {
  bool backward;
  int mb;
  double start, end;
};
const std::vector<Block> kPp0 = {{false, 0, 0, 1}, {false, 1, 1, 2}, {true, 0, 4, 6}, {true, 1, 7, 9}};
const std::vector<Block> kPp1 = {{false, 0, 1, 2}, {true, 0, 2, 4}, {false, 1, 4, 5}, {true, 1, 5, 7}};

// Every step: 50 ms of which forward 10, backward 20, waits 15, optimizer 3.
Parts steadyParts(int, int, int64_t) {
  Parts p;
  p.step = 50;
  p.forward = 10;
  p.backward = 20;
  p.ppWait = 15;
  p.optimizer = 3;
  return p;
}

double unitMs(int dp, int64_t step) { return double(step) * (1 + dp); }

bool near(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max(1.0, std::fabs(b)); }

// The drawn blocks of `pp` rank equal the worked example's at `u` ms a unit.
void checkBlocks(const ScheduleTimeline& t, double u) {
  int checked = 0;
  for (int pp = 0; pp < 2; ++pp) {
    const auto& expected = pp == 0 ? kPp0 : kPp1;
    std::vector<ScheduleBlock> row;
    for (const auto& b : t.blocks) {
      if (b.ppRank == pp) row.push_back(b);
    }
    QCOMPARE(row.size(), expected.size());
    for (size_t i = 0; i < row.size(); ++i) {
      const QString what = QStringLiteral("pp %1 op %2").arg(pp).arg(i);
      QVERIFY2((row[i].op.kind == PipeOp::Kind::kBackward) == expected[i].backward, qPrintable(what));
      QCOMPARE(row[i].op.micro_batch, expected[i].mb);
      QCOMPARE(row[i].op.chunk, pp);
      QVERIFY2(near(row[i].start, expected[i].start * u) && near(row[i].end, expected[i].end * u),
               qPrintable(what + QStringLiteral(": [%1, %2] ms").arg(row[i].start).arg(row[i].end)));
      ++checked;
    }
  }
  QCOMPARE(checked, 8);
}

}  // namespace

class TestRunTimelineView : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_dir;
  QString m_db;
  std::unique_ptr<store::RunStore> m_store;
  qint64 m_timed = 0;  // the run with timing events
  stagecraft::config::RunConfig m_config;

  std::unique_ptr<RunsView> makeView() {
    auto v = std::make_unique<RunsView>();
    v->setDatabasePath(m_db);
    v->setPollInterval(0);
    v->resize(1200, 500);
    v->show();
    return v;
  }

  // The Timeline tab of `v` showing run `id`.
  RunTimelineView* showTimeline(RunsView& v, qint64 id) {
    if (!v.selectRun(id)) return nullptr;
    v.tabs()->setCurrentWidget(v.timelineView());
    return v.timelineView();
  }

 private Q_SLOTS:
  void init() {
    m_store = timing_test::newHistory(m_dir, &m_db);
    m_config = timing_test::tinyConfig();
    const plan::Plan p = timing_test::planOf(m_config);
    QCOMPARE(p.pp, 2);
    QCOMPARE(p.dp, 2);
    QCOMPARE(p.micro_batches, 2);
    m_timed = timing_test::recordRun(*m_store, m_config, 10, steadyParts, [&p](int rank, int ppRank, int64_t step) {
      std::vector<launch::TimingEvent::Op> ops;
      const double u = unitMs(p.topology.coord(rank).dp, step);
      for (const Block& b : ppRank == 0 ? kPp0 : kPp1) ops.push_back({b.backward, ppRank, b.mb, b.start * u, b.end * u});
      return ops;
    });
  }
  void cleanup() { m_store.reset(); }

  void timelineTabShowsTheMeasuredOps() {
    auto v = makeView();
    RunTimelineView* t = showTimeline(*v, m_timed);
    QVERIFY(t);
    QCOMPARE(t->runId(), m_timed);
    QVERIFY2(t->messageText().isEmpty(), qPrintable(t->messageText()));
    // Steps with ops: the first three, every tenth and the last (launch::has_timeline); the last
    // is shown first.
    QCOMPARE(t->stepChoices(), (QList<qint64>{1, 2, 3, 10}));
    QCOMPARE(t->step(), 10);
    QCOMPARE(t->stepChooser()->currentData().toLongLong(), 10);
    const ScheduleTimeline& measured = t->measuredTimeline();
    QCOMPARE(measured.pp, 2);
    checkBlocks(measured, 10.0);
    QVERIFY2(near(measured.makespan, 90.0), qPrintable(QString::number(measured.makespan)));
    // Busy 2 x 6 units of 2 x 9: a third idle, printed.
    QVERIFY2(near(t->measuredIdleFraction(), 1.0 / 3.0), qPrintable(QString::number(t->measuredIdleFraction())));
    QVERIFY2(t->measuredTitle().contains(QStringLiteral("33.3%")) && t->measuredTitle().contains(QStringLiteral("step 10")),
             qPrintable(t->measuredTitle()));

    // The prediction: the estimate's micro-batch times through the same 1F1B simulation.
    const plan::Plan p = timing_test::planOf(m_config);
    const auto [f, b] = RunTimelineView::predictedMicroBatchTimes(p);
    const ScheduleTimeline& predicted = t->predictedTimeline();
    QCOMPARE(int(predicted.blocks.size()), 8);
    QVERIFY2(near(predicted.makespan, 3 * (f + b) * 1e3), qPrintable(QString::number(predicted.makespan)));
    QVERIFY(!t->predictedTitle().isEmpty());

    // Predicted vs measured parts: the step row holds the estimate's and the 50 ms recorded.
    const auto& rows = t->comparison();
    QVERIFY(!rows.empty());
    QCOMPARE(t->comparisonTable()->rowCount(), int(rows.size()));
    int stepRow = -1;
    for (int r = 0; r < int(rows.size()); ++r) {
      if (rows[size_t(r)].part == "step") stepRow = r;
    }
    QVERIFY(stepRow >= 0);
    QVERIFY2(near(rows[size_t(stepRow)].measured, 0.050), qPrintable(QString::number(rows[size_t(stepRow)].measured)));
    QVERIFY(near(rows[size_t(stepRow)].predicted, p.estimate.step_time_s));
    QVERIFY(near(rows[size_t(stepRow)].error, (p.estimate.step_time_s - 0.050) / 0.050));
    QCOMPARE(t->comparisonTable()->item(stepRow, 0)->text(), QStringLiteral("step"));
    QVERIFY2(t->comparisonTable()->item(stepRow, 2)->text().startsWith(QStringLiteral("50")),
             qPrintable(t->comparisonTable()->item(stepRow, 2)->text()));
    if (const QString dir = qEnvironmentVariable("STAGECRAFT_TEST_GRAB_DIR"); !dir.isEmpty()) {
      QTest::qWait(100);
      QVERIFY(v->grab().save(dir + QStringLiteral("/runs-timeline.png")));
    }
  }

  void choosingAStepOrReplicaChangesIt() {
    auto v = makeView();
    RunTimelineView* t = showTimeline(*v, m_timed);
    QVERIFY(t);
    QComboBox* steps = t->stepChooser();
    const int at = steps->findData(QVariant::fromValue<qint64>(2));
    QVERIFY(at >= 0);
    steps->setCurrentIndex(at);
    Q_EMIT steps->activated(at);  // as a person's choice does
    QCOMPARE(t->step(), 2);
    checkBlocks(t->measuredTimeline(), 2.0);
    QVERIFY(near(t->measuredTimeline().makespan, 18.0));
    QVERIFY(t->measuredTitle().contains(QStringLiteral("step 2")));
    // Replica dp 1 ran twice as slowly.
    QVERIFY(t->setReplica(1));
    checkBlocks(t->measuredTimeline(), 4.0);
    QVERIFY(!t->setReplica(2));
    QVERIFY(!t->setStep(7));  // no timeline of step 7
    QCOMPARE(t->step(), 2);
  }

  // A run still training: steps written later are read again while the tab is shown, at most
  // every reloadInterval(), and the step shown stays the person's choice.
  void aLiveRunIsReadAgain() {
    const plan::Plan p = timing_test::planOf(m_config);
    const timing_test::OpsOf ops = [&p](int rank, int ppRank, int64_t step) {
      std::vector<launch::TimingEvent::Op> out;
      const double u = unitMs(p.topology.coord(rank).dp, step);
      for (const Block& b : ppRank == 0 ? kPp0 : kPp1) out.push_back({b.backward, ppRank, b.mb, b.start * u, b.end * u});
      return out;
    };
    const qint64 id = timing_test::createRun(*m_store, m_config, 10);
    timing_test::appendSteps(*m_store, id, m_config, 1, 3, 10, steadyParts, ops);
    auto v = makeView();
    RunTimelineView* t = showTimeline(*v, id);
    QVERIFY(t);
    t->setReloadInterval(300);
    QCOMPARE(t->stepChoices(), (QList<qint64>{1, 2, 3}));
    QVERIFY(t->setStep(2));
    // Another connection writes steps 4..10, as the run's recorder would.
    auto other = store::RunStore::open(m_db.toStdString());
    QVERIFY(other.ok());
    timing_test::appendSteps(*other.value(), id, m_config, 4, 10, 10, steadyParts, ops);
    v->refresh();
    QTRY_COMPARE_WITH_TIMEOUT(t->stepChoices(), (QList<qint64>{1, 2, 3, 10}), 5000);
    QCOMPARE(t->step(), 2);
    checkBlocks(t->measuredTimeline(), 2.0);
    QVERIFY(t->setStep(10));
    checkBlocks(t->measuredTimeline(), 10.0);
  }

  // A run without timing events (an older Stagecraft's, another program's) shows the engine's
  // reason and still the prediction; a run without a recorded config says that too.
  void aRunWithoutTimingEventsSaysWhy() {
    store::NewRun n;
    n.name = "no-timing";
    n.config_yaml = stagecraft::config::to_yaml(m_config);
    n.world_size = 4;
    n.total_steps = 10;
    n.supervisor = store::this_process_identity();
    auto id = m_store->create_run(n);
    QVERIFY(id.ok());
    store::Batch b;
    store::MetricRow m;
    m.step = 1;
    m.loss = 5.0;
    m.tokens_per_s = 1000;
    b.metrics.push_back(m);
    QVERIFY(m_store->append(id.value(), b));

    auto v = makeView();
    RunTimelineView* t = showTimeline(*v, id.value());
    QVERIFY(t);
    QVERIFY2(t->messageText().contains(QStringLiteral("run %1").arg(id.value())), qPrintable(t->messageText()));
    QVERIFY(t->measuredTimeline().blocks.empty());
    QVERIFY(!t->stepChooser()->isEnabled());
    QVERIFY(t->comparison().empty());
    // The prediction still comes from the recorded config.
    QCOMPARE(int(t->predictedTimeline().blocks.size()), 8);

    // Without a recorded config there is nothing to predict either, and the tab says so.
    store::NewRun bare;
    bare.name = "bare";
    bare.world_size = 1;
    bare.supervisor = store::this_process_identity();
    auto bareId = m_store->create_run(bare);
    QVERIFY(bareId.ok());
    v->refresh();
    t = showTimeline(*v, bareId.value());
    QVERIFY(t);
    QVERIFY2(t->messageText().contains(QStringLiteral("recorded no config")), qPrintable(t->messageText()));
    QVERIFY(t->predictedTimeline().blocks.empty());

    // Back to the timed run: all of it again.
    t = showTimeline(*v, m_timed);
    QVERIFY(t);
    QVERIFY(t->messageText().isEmpty());
    QCOMPARE(int(t->measuredTimeline().blocks.size()), 8);
  }

  void predictedTimesSplitTheEstimate_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("tiny dp 2 x pp 2, 1f1b") << QStringList{};
    QTest::newRow("pp 4, gpipe") << QStringList{"parallel.dp=1", "parallel.pp=4", "pipeline.schedule=gpipe"};
    QTest::newRow("interleaved v 2") << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"};
    QTest::newRow("full recompute") << QStringList{"train.recompute=full"};
  }
  void predictedTimesSplitTheEstimate() {
    QFETCH(QStringList, overrides);
    std::vector<std::string> o;
    for (const QString& s : overrides) o.push_back(s.toStdString());
    const plan::Plan p = timing_test::planOf(timing_test::tinyConfig(o));
    const auto& br = p.estimate.breakdown;
    const auto [f, b] = RunTimelineView::predictedMicroBatchTimes(p);
    // Together they are the bottleneck stage's micro-batch; the backward is twice the forward's
    // compute plus the recompute.
    QVERIFY(near((f + b) * p.micro_batches, br.compute_s + br.recompute_s + br.tp_comm_s));
    QVERIFY(near(b - 2 * f, (br.recompute_s - br.tp_comm_s / 2) / p.micro_batches));
    const ScheduleTimeline t = RunTimelineView::predictedSchedule(p);
    QVERIFY(t.ok);
    QCOMPARE(int(t.blocks.size()), 2 * p.pp * p.virtual_stages * p.micro_batches);
    // Every rank is busy m (f + b), in milliseconds.
    QVERIFY(near(t.busyTime, p.pp * p.micro_batches * (f + b) * 1e3));
  }

  void measuredOpsBecomeBlocksInMilliseconds() {
    launch::MeasuredTimeline m;
    m.step = 4;
    m.ops = {{2, 1, false, 1, 0, 0.0015, 0.0025}, {0, 0, true, 0, 1, 0.004, 0.006}};
    m.makespan_s = 0.007;  // a rank may end after its last op is drawn
    m.busy_s = 0.003;
    m.ranks = 2;
    const ScheduleTimeline t = RunTimelineView::toScheduleTimeline(m, 2, 1);
    QCOMPARE(int(t.blocks.size()), 2);
    QCOMPARE(t.blocks[0].ppRank, 1);
    QCOMPARE(t.blocks[0].op.kind, PipeOp::Kind::kForward);
    QCOMPARE(t.blocks[0].op.chunk, 1);
    QVERIFY(near(t.blocks[0].start, 1.5) && near(t.blocks[0].end, 2.5));
    QCOMPARE(t.blocks[1].op.kind, PipeOp::Kind::kBackward);
    QCOMPARE(t.blocks[1].op.micro_batch, 1);
    QVERIFY(near(t.makespan, 7.0));
    QVERIFY(near(t.busyTime, 3.0));
    QCOMPARE(t.microBatches, 2);
  }
};

QTEST_MAIN(TestRunTimelineView)
#include "tst_run_timeline_view.moc"
