// tst_runs_view: the runs view over a real temporary SQLite history written through the store
// API — rows, sorting, filters by state and name, a run added by another connection appearing
// after a poll, the selected run's loss / throughput / memory curves holding exactly its metric
// points, two runs' losses overlaid, per-rank state from events, log search and filters, and
// the cancel path's refusals (ended run, supervisor gone, supervisor on another host), and the
// charts' legends and axis labels whole (not elided) in the window at its default size.
#include <QAction>
#include <QChart>
#include <QChartView>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QComboBox>
#include <QSignalSpy>
#include <QDockWidget>
#include <QMenu>
#include <QSettings>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPushButton>
#include <QTableView>
#include <QTemporaryDir>
#include <QLabel>
#include <QtTest>

#include <sqlite3.h>

#include <cmath>
#include <memory>

#include "document/PlanDocument.h"
#include "hosts/HostsEditor.h"
#include "mainwindow/MainWindow.h"
#include "run_timing_support.h"
#include "runs/ExpertLoadMap.h"
#include "runs/LaunchDialog.h"
#include "runs/RankStateGrid.h"
#include "runs/RunManager.h"
#include "runs/RunCharts.h"
#include "runs/RunLogView.h"
#include "runs/RunsModel.h"
#include "runs/RunsView.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/run_store.h"

namespace store = stagecraft::store;
using RankState = RankStateGrid::RankState;

namespace {

struct Spec {
  const char* name;
  store::RunState state;
  int world;
  double lastLoss;  // NaN: no metrics
};

// Runs 1..4, created in this order.
const Spec kRuns[] = {
    {"bert-large-3d", store::RunState::kSucceeded, 2, 2.5},
    {"gpt-tiny", store::RunState::kRunning, 4, 4.25},
    {"gpt-tiny-sweep", store::RunState::kFailed, 2, NAN},
    {"Llama-probe", store::RunState::kCancelled, 1, 1.75},
};

// A run in `state`, supervised by this (living) process so no refresh marks it lost.
qint64 addRun(store::RunStore& st, const Spec& spec) {
  store::NewRun n;
  n.name = spec.name;
  n.hosts = {"localhost"};
  n.world_size = spec.world;
  n.total_steps = 10;
  n.supervisor = store::this_process_identity();
  auto id = st.create_run(n);
  if (!id.ok()) qFatal("%s", id.status().message().c_str());
  if (spec.state != store::RunState::kQueued) {
    if (spec.state != store::RunState::kFailed) (void)st.transition(id.value(), store::RunState::kRunning, "started");
    if (spec.state != store::RunState::kRunning && !st.transition(id.value(), spec.state, "test")) qFatal("transition");
  }
  if (!std::isnan(spec.lastLoss)) {
    store::Batch b;
    store::MetricRow m;
    m.rank = 0;
    m.step = 3;
    m.loss = spec.lastLoss;
    b.metrics.push_back(m);
    if (!st.append(id.value(), b)) qFatal("append");
  }
  return id.value();
}

QList<qint64> shownIds(const RunsView& view) {
  QList<qint64> ids;
  const QAbstractItemModel* m = view.table()->model();
  for (int r = 0; r < m->rowCount(); ++r) ids << m->index(r, 0).data(RunsModel::IdRole).toLongLong();
  return ids;
}

QList<QPointF> pointsOf(const QLineSeries* s) { return s ? s->points() : QList<QPointF>(); }

// Runs `statement` on the history file through a connection of its own.
bool sql(const QString& path, const char* statement) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.toUtf8().constData(), &db) != SQLITE_OK) {
    sqlite3_close(db);
    return false;
  }
  sqlite3_busy_timeout(db, 5000);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, statement, nullptr, nullptr, &err);
  if (err) qWarning("%s", err);
  sqlite3_free(err);
  sqlite3_close(db);
  return rc == SQLITE_OK;
}

}  // namespace

class TestRunsView : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_dir;
  QString m_db;
  std::unique_ptr<store::RunStore> m_store;

  // A view over the fixture's history, polling fast.
  std::unique_ptr<RunsView> makeView() {
    auto v = std::make_unique<RunsView>();
    v->setDatabasePath(m_db);
    v->setPollInterval(50);
    return v;
  }

  // A queued 4-rank run of `config` (the tiny GPT) in the fixture's history, its config recorded
  // so that the charts can plan it.
  qint64 tinyGptRun(const stagecraft::config::RunConfig& config, const std::string& name = "tiny-gpt") {
    store::NewRun n;
    n.name = name;
    n.config_yaml = stagecraft::config::to_yaml(config);
    n.world_size = 4;
    n.supervisor = store::this_process_identity();
    auto id = m_store->create_run(n);
    if (!id.ok()) qFatal("%s", id.status().message().c_str());
    return id.value();
  }

 private Q_SLOTS:
  void init() {
    m_store = timing_test::newHistory(m_dir, &m_db);
    for (const Spec& s : kRuns) addRun(*m_store, s);
  }
  void cleanup() { m_store.reset(); }

  void rowsShowEachRun() {
    auto v = makeView();
    RunsModel* m = v->model();
    QCOMPARE(m->rowCount(), 4);
    QCOMPARE(m->columnCount(), int(RunsModel::ColumnCount));
    // Newest first.
    QCOMPARE(m->index(0, RunsModel::IdColumn).data().toLongLong(), 4);
    const int row = m->rowOf(2);
    QCOMPARE(m->index(row, RunsModel::NameColumn).data().toString(), QStringLiteral("gpt-tiny"));
    QCOMPARE(m->index(row, RunsModel::StateColumn).data().toString(), QStringLiteral("running"));
    QCOMPARE(m->index(row, RunsModel::HostsColumn).data().toString(), QStringLiteral("localhost"));
    QCOMPARE(m->index(row, RunsModel::StepsColumn).data().toString(), QStringLiteral("3/10"));
    QCOMPARE(m->index(row, RunsModel::LossColumn).data().toString(), QStringLiteral("4.2500"));
    QCOMPARE(m->index(m->rowOf(3), RunsModel::LossColumn).data().toString(), QStringLiteral("-"));
    QVERIFY(!m->index(row, RunsModel::CreatedColumn).data().toString().isEmpty());
    QCOMPARE(m->index(row, RunsModel::JobColumn).data().toString(), QString());
  }

  // A run submitted to Slurm shows its job, Slurm's state and reason, and follows their changes.
  void slurmJobColumn() {
    auto v = makeView();
    RunsModel* m = v->model();
    QVERIFY(m_store->set_job(2, "4711", "PENDING", "Priority").ok());
    QVERIFY(m->refresh());
    QCOMPARE(m->index(m->rowOf(2), RunsModel::JobColumn).data().toString(), QStringLiteral("4711 PENDING (Priority)"));
    QVERIFY(m_store->set_job(2, "4711", "RUNNING", "None").ok());
    QVERIFY(m->refresh());
    QCOMPARE(m->index(m->rowOf(2), RunsModel::JobColumn).data().toString(), QStringLiteral("4711 RUNNING"));
    QCOMPARE(m->headerData(RunsModel::JobColumn, Qt::Horizontal).toString(), QStringLiteral("Slurm job"));
  }

  void sorting_data() {
    QTest::addColumn<int>("column");
    QTest::addColumn<int>("order");
    QTest::addColumn<QList<qint64>>("ids");
    QTest::newRow("id ascending") << int(RunsModel::IdColumn) << int(Qt::AscendingOrder) << QList<qint64>{1, 2, 3, 4};
    QTest::newRow("id descending") << int(RunsModel::IdColumn) << int(Qt::DescendingOrder) << QList<qint64>{4, 3, 2, 1};
    // Case-insensitive: Llama between gpt-tiny-sweep and nothing after it.
    QTest::newRow("name ascending") << int(RunsModel::NameColumn) << int(Qt::AscendingOrder) << QList<qint64>{1, 2, 3, 4};
    // A run without a loss sorts below every loss.
    QTest::newRow("loss ascending") << int(RunsModel::LossColumn) << int(Qt::AscendingOrder) << QList<qint64>{3, 4, 1, 2};
    QTest::newRow("loss descending") << int(RunsModel::LossColumn) << int(Qt::DescendingOrder) << QList<qint64>{2, 1, 4, 3};
    QTest::newRow("state ascending") << int(RunsModel::StateColumn) << int(Qt::AscendingOrder) << QList<qint64>{4, 3, 2, 1};
  }
  void sorting() {
    QFETCH(int, column);
    QFETCH(int, order);
    QFETCH(QList<qint64>, ids);
    auto v = makeView();
    v->table()->sortByColumn(column, Qt::SortOrder(order));
    QCOMPARE(shownIds(*v), ids);
  }

  void filters_data() {
    QTest::addColumn<QString>("state");
    QTest::addColumn<QString>("name");
    QTest::addColumn<QList<qint64>>("ids");
    QTest::newRow("no filter") << QString() << QString() << QList<qint64>{4, 3, 2, 1};
    QTest::newRow("state running") << QStringLiteral("running") << QString() << QList<qint64>{2};
    QTest::newRow("state lost: none") << QStringLiteral("lost") << QString() << QList<qint64>{};
    QTest::newRow("name substring") << QString() << QStringLiteral("gpt") << QList<qint64>{3, 2};
    QTest::newRow("name ignores case") << QString() << QStringLiteral("LLAMA") << QList<qint64>{4};
    QTest::newRow("state and name") << QStringLiteral("failed") << QStringLiteral("gpt") << QList<qint64>{3};
  }
  void filters() {
    QFETCH(QString, state);
    QFETCH(QString, name);
    QFETCH(QList<qint64>, ids);
    auto v = makeView();
    v->setStateFilter(state);
    v->setNameFilter(name);
    QCOMPARE(shownIds(*v), ids);
  }

  // Opening the view over a history shows the newest run without a click, once: the person's
  // later choice is not overridden when a newer run appears at the next poll.
  void newestRunIsShownFirst() {
    auto v = makeView();
    QCOMPARE(v->selectedRunId(), 4);
    QVERIFY(v->selectRun(2));
    auto other = store::RunStore::open(m_db.toStdString());
    QVERIFY(other.ok());
    QCOMPARE(addRun(*other.value(), {"newer", store::RunState::kRunning, 2, 3.0}), 5);
    QTRY_COMPARE_WITH_TIMEOUT(v->model()->rowCount(), 5, 5000);
    QCOMPARE(v->selectedRunId(), 2);
  }

  void runWrittenByAnotherConnectionAppearsAfterThePoll() {
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    // Another connection to the same file, as another process (stagecraft-cli run) would write.
    auto other = store::RunStore::open(m_db.toStdString());
    QVERIFY(other.ok());
    const qint64 id = addRun(*other.value(), {"late-run", store::RunState::kRunning, 2, 3.0});
    QCOMPARE(id, 5);
    QTRY_COMPARE_WITH_TIMEOUT(v->model()->rowCount(), 5, 5000);
    QVERIFY(v->model()->run(5));
    QCOMPARE(v->model()->index(v->model()->rowOf(5), RunsModel::NameColumn).data().toString(), QStringLiteral("late-run"));
    // The selection survives the refresh.
    QCOMPARE(v->selectedRunId(), 2);
    const QModelIndex current = v->table()->selectionModel()->currentIndex();
    QCOMPARE(current.data(RunsModel::IdRole).toLongLong(), 2);
  }

  void stateChangeShowsAfterThePoll() {
    auto v = makeView();
    QVERIFY(m_store->transition(2, store::RunState::kSucceeded, "every rank finished"));
    QTRY_COMPARE_WITH_TIMEOUT(v->model()->index(v->model()->rowOf(2), RunsModel::StateColumn).data().toString(),
                              QStringLiteral("succeeded"), 5000);
  }

  void selectingARunFillsItsCurvesExactly() {
    // Run 2 (4 ranks, pp 2 in spirit): ranks 2 and 3 report the loss, every rank throughput and
    // memory. Run 1 has other points that must not leak in.
    store::Batch b;
    const double loss[] = {5.5, 5.25, 4.75, 4.5};
    for (int step = 1; step <= 4; ++step) {
      for (int rank = 0; rank < 4; ++rank) {
        store::MetricRow m;
        m.rank = rank;
        m.step = step + 3;  // steps 4..7, after the fixture's step 3
        m.loss = rank >= 2 ? loss[step - 1] + 0.01 * (rank - 2) : NAN;
        m.tokens_per_s = 1000.0 * step + rank;
        m.mem_bytes = (int64_t(rank) + 1) * 1024 * 1024 * 10 + step * 1024 * 1024;
        b.metrics.push_back(m);
      }
    }
    QVERIFY(m_store->append(2, b));
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    QCOMPARE(v->charts()->runId(), 2);
    // Step 3 comes from the fixture (rank 0, 4.25); steps 4..7 from rank 2, the lowest with a loss.
    const QList<QPointF> expectedLoss{{3, 4.25}, {4, 5.5}, {5, 5.25}, {6, 4.75}, {7, 4.5}};
    QCOMPARE(pointsOf(v->charts()->lossSeries()), expectedLoss);
    const QList<QPointF> expectedTput{{4, 1000}, {5, 2000}, {6, 3000}, {7, 4000}};
    QCOMPARE(pointsOf(v->charts()->throughputSeries()), expectedTput);
    const auto memory = v->charts()->memorySeries();
    QCOMPARE(memory.size(), 4);
    QCOMPARE(memory[3]->count(), 4);
    QCOMPARE(memory[3]->at(0), QPointF(4, 41.0));  // rank 3, step 4: 40 MiB + 1 MiB
    QCOMPARE(memory[0]->at(3), QPointF(7, 14.0));

    // Another run selected: its own points only.
    QVERIFY(v->selectRun(1));
    QCOMPARE(pointsOf(v->charts()->lossSeries()), (QList<QPointF>{{3, 2.5}}));
  }

  // The plan of the run's recorded config predicts tokens/s and each pp rank's peak: dashed lines
  // named "predicted" at the estimate's values across the run's steps, in the colour of each pp
  // rank's lowest rank. A run without a recorded config has none, and the charts say why.
  void predictedLinesAreTheEstimate() {
    auto config = stagecraft::config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml");
    QVERIFY(config.ok());
    auto plan = stagecraft::plan::make_plan(config.value());
    QVERIFY(plan.ok());
    const auto& e = plan->estimate;
    QCOMPARE(int(e.memory.size()), 2);
    const qint64 id = tinyGptRun(config.value());
    store::Batch b;
    for (int step = 2; step <= 6; ++step) {
      for (int rank = 0; rank < 4; ++rank) {
        store::MetricRow m;
        m.rank = rank;
        m.step = step;
        m.tokens_per_s = 12000.0 + step;
        m.mem_bytes = 8 * 1024 * 1024;
        b.metrics.push_back(m);
      }
    }
    QVERIFY(m_store->append(id, b));
    auto v = makeView();
    QVERIFY(v->selectRun(id));
    RunCharts* charts = v->charts();
    QLineSeries* tput = charts->predictedThroughputSeries();
    QVERIFY(tput);
    QCOMPARE(tput->name(), QStringLiteral("predicted"));
    QCOMPARE(tput->pen().style(), Qt::DashLine);
    QCOMPARE(pointsOf(tput), (QList<QPointF>{{2, e.tokens_per_s}, {6, e.tokens_per_s}}));
    QVERIFY(charts->findChild<QChartView*>(QStringLiteral("throughputChart"))->chart()->legend()->isVisible());
    const auto memory = charts->predictedMemorySeries();
    QCOMPARE(memory.size(), 2);
    for (int pp = 0; pp < 2; ++pp) {
      const double mib = e.memory[size_t(pp)].total() / (1024.0 * 1024.0);
      QCOMPARE(memory[pp]->name(), pp == 0 ? QStringLiteral("predicted") : QStringLiteral("predicted pp 1"));
      QCOMPARE(memory[pp]->pen().style(), Qt::DashLine);
      QCOMPARE(pointsOf(memory[pp]), (QList<QPointF>{{2, mib}, {6, mib}}));
      // Ranks 0 and 1 are pp 0, ranks 2 and 3 pp 1 (tp-dp-pp order).
      QCOMPARE(memory[pp]->color(), charts->memorySeries()[2 * pp]->color());
    }
    QVERIFY(charts->predictionNote().isEmpty());

    // Each legend has one "predicted" entry; the memory legend keeps the ranks' names. (Markers
    // are laid out, and so visible, once the charts are shown.)
    v->resize(1400, 400);
    v->show();
    QVERIFY(QTest::qWaitForWindowExposed(v.get()));
    QTest::qWait(100);
    QStringList legends;
    for (const char* name : {"throughputChart", "memoryChart"}) {
      QChart* chart = charts->findChild<QChartView*>(QString::fromLatin1(name))->chart();
      QVERIFY(chart->legend()->isVisible());
      for (QLegendMarker* marker : chart->legend()->markers()) {
        if (marker->isVisible()) legends << QString::fromLatin1(name) + QLatin1Char(':') + marker->label();
      }
    }
    QCOMPARE(legends, (QStringList{"throughputChart:predicted", "memoryChart:rank 0", "memoryChart:rank 1", "memoryChart:rank 2",
                                   "memoryChart:rank 3", "memoryChart:predicted"}));

    QVERIFY(v->selectRun(1));  // recorded without a config: nothing to predict
    QVERIFY(!charts->predictedThroughputSeries());
    QVERIFY(charts->predictedMemorySeries().isEmpty());
    QVERIFY(charts->predictionNote().isEmpty());

    // A config that no longer plans (its device profile is gone) says why.
    auto gone = config.value();
    gone.cluster.device_fields.profile = m_dir.filePath(QStringLiteral("no-such-profile.yaml")).toStdString();
    const qint64 goneId = tinyGptRun(gone, "profile-gone");
    v->refresh();
    QVERIFY(v->selectRun(goneId));
    QVERIFY(!charts->predictedThroughputSeries());
    QVERIFY2(charts->predictionNote().contains(QStringLiteral("no-such-profile.yaml")), qPrintable(charts->predictionNote()));
  }

  void liveMetricsOfTheSelectedRunArriveWithThePoll() {
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    QCOMPARE(v->charts()->lossSeries()->count(), 1);
    auto other = store::RunStore::open(m_db.toStdString());
    QVERIFY(other.ok());
    store::Batch b;
    for (int step = 4; step <= 6; ++step) {
      store::MetricRow m;
      m.step = step;
      m.loss = 4.0 - 0.1 * step;
      b.metrics.push_back(m);
    }
    QVERIFY(other.value()->append(2, b));
    QTRY_COMPARE_WITH_TIMEOUT(v->charts()->lossSeries()->count(), 4, 5000);
    QCOMPARE(v->charts()->lossSeries()->at(3), QPointF(6, 4.0 - 0.6));
    // Polls read only what was written since the last one; a row for an earlier step written
    // late still lands in step order.
    for (int step : {8, 7}) {
      store::Batch late;
      store::MetricRow m;
      m.step = step;
      m.loss = 1.0 * step;
      late.metrics.push_back(m);
      QVERIFY(other.value()->append(2, late));
      QTRY_COMPARE_WITH_TIMEOUT(v->charts()->lossSeries()->count(), step == 8 ? 5 : 6, 5000);
    }
    QCOMPARE(v->charts()->lossSeries()->at(4), QPointF(7, 7.0));
    QCOMPARE(v->charts()->lossSeries()->at(5), QPointF(8, 8.0));
  }

  void compareOverlaysTwoLossCurves() {
    store::Batch b;
    for (int step = 4; step <= 5; ++step) {
      store::MetricRow m;
      m.step = step;
      m.loss = 1.0 / step;
      b.metrics.push_back(m);
    }
    QVERIFY(m_store->append(4, b));
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    QVERIFY(v->setComparisonRun(4));
    QCOMPARE(v->comparisonRunId(), 4);
    QCOMPARE(v->charts()->lossChart()->series().size(), 2);
    QCOMPARE(pointsOf(v->charts()->lossSeries()), (QList<QPointF>{{3, 4.25}}));
    QCOMPARE(pointsOf(v->charts()->comparisonSeries()), (QList<QPointF>{{3, 1.75}, {4, 0.25}, {5, 0.2}}));
    QCOMPARE(v->charts()->comparisonSeries()->name(), QStringLiteral("run 4"));
    QVERIFY(!v->setComparisonRun(99));
    QVERIFY(v->setComparisonRun(0));
    QCOMPARE(v->charts()->lossChart()->series().size(), 1);
    QVERIFY(!v->charts()->comparisonSeries());
  }

  // A live run's row changes every poll (its steps); the compare list is rebuilt only when the
  // runs or their names change, so an open popup is not closed every second.
  void compareChoicesRebuiltOnlyWhenTheRunsChange() {
    auto v = makeView();
    v->setPollInterval(0);
    QVERIFY(v->selectRun(1));
    auto* combo = v->findChild<QComboBox*>(QStringLiteral("compareRun"));
    QVERIFY(combo);
    QCOMPARE(combo->count(), 4);  // none + runs 4, 3, 2
    QVERIFY(v->setComparisonRun(4));
    QSignalSpy reset(combo->model(), &QAbstractItemModel::modelReset);
    QSignalSpy inserted(combo->model(), &QAbstractItemModel::rowsInserted);
    QSignalSpy removed(combo->model(), &QAbstractItemModel::rowsRemoved);
    QSignalSpy refreshed(v->model(), &RunsModel::refreshed);
    store::Batch b;
    store::MetricRow m;
    m.step = 6;
    m.loss = 3.5;
    b.metrics.push_back(m);
    QVERIFY(m_store->append(2, b));  // run 2 (running) reports a new step
    v->refresh();
    QCOMPARE(refreshed.count(), 1);
    QVERIFY(refreshed.at(0).at(0).value<QList<qint64>>().contains(2));
    QCOMPARE(reset.count() + inserted.count() + removed.count(), 0);
    QCOMPARE(combo->currentData().toLongLong(), 4);
    // A new run is a new choice.
    addRun(*m_store, {"new-run", store::RunState::kRunning, 1, NAN});
    v->refresh();
    QVERIFY(reset.count() + inserted.count() > 0);
    QCOMPARE(combo->count(), 5);
    QCOMPARE(combo->itemData(1).toLongLong(), 5);
    QCOMPARE(combo->currentData().toLongLong(), 4);
  }

  // A full read that fails part-way leaves nothing of the run shown before, and the next poll
  // reads the run again in full.
  void failedFullLoadClearsAndRetries() {
    store::Batch b2;
    b2.logs.push_back({0, false, 0, "run two's line"});
    QVERIFY(m_store->append(2, b2));
    store::Batch b1;
    b1.logs.push_back({1, false, 0, "run one's line"});
    QVERIFY(m_store->append(1, b1));
    auto v = makeView();
    v->setPollInterval(0);
    QVERIFY(v->selectRun(2));
    RunLogView* log = v->logView();
    QCOMPARE(log->lineCount(), 1);
    QCOMPARE(v->rankGrid()->rankCount(), 4);
    QCOMPARE(pointsOf(v->charts()->lossSeries()), (QList<QPointF>{{3, 4.25}}));

    // The logs table cannot be read for a while: run 1's full read fails after its metrics.
    QVERIFY(sql(m_db, "ALTER TABLE logs RENAME TO logs_away"));
    v->selectRun(1);
    QCOMPARE(v->selectedRunId(), 1);
    QVERIFY2(!v->lastError().isEmpty(), "the failed read is reported");
    QCOMPARE(log->lineCount(), 0);
    QVERIFY2(!log->shownText().contains(QStringLiteral("run two")), qPrintable(log->shownText()));
    QVERIFY(log->runId() != 2);
    QCOMPARE(v->rankGrid()->rankCount(), 2);  // run 1's layout, not run 2's
    QVERIFY(pointsOf(v->charts()->lossSeries()) != (QList<QPointF>{{3, 4.25}}));

    // Readable again: the next poll reads run 1 in full (it is ended and unchanged, so an
    // incremental poll would read nothing).
    QVERIFY(sql(m_db, "ALTER TABLE logs_away RENAME TO logs"));
    v->refresh();
    QCOMPARE(log->lineCount(), 1);
    QCOMPARE(log->runId(), 1);
    QVERIFY(log->shownText().contains(QStringLiteral("run one's line")));
    QCOMPARE(pointsOf(v->charts()->lossSeries()), (QList<QPointF>{{3, 2.5}}));
  }

  void rankStatesComeFromEvents() {
    store::Batch b;
    auto ev = [&](int rank, const char* kind, const char* json) { b.events.push_back({rank, 0.0, kind, json}); };
    ev(0, "start", R"({"event":"start","rank":0})");
    ev(1, "start", R"({"event":"start","rank":1})");
    ev(2, "start", R"({"event":"start","rank":2})");
    ev(0, "step", R"({"event":"step","rank":0,"step":1})");
    ev(0, "step", R"({"event":"step","rank":0,"step":2})");
    ev(1, "step", R"({"event":"step","rank":1,"step":2})");
    ev(1, "done", R"({"event":"done","rank":1,"step":2})");
    ev(2, "error", R"({"event":"error","rank":2,"message":"out of memory"})");
    QVERIFY(m_store->append(2, b));
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    RankStateGrid* g = v->rankGrid();
    QCOMPARE(g->rankCount(), 4);
    QCOMPARE(g->rank(0).state, RankState::Training);
    QCOMPARE(g->rank(0).step, 2);
    QCOMPARE(g->rank(1).state, RankState::Done);
    QCOMPARE(g->rank(2).state, RankState::Failed);
    QCOMPARE(g->rank(2).detail, QStringLiteral("out of memory"));
    QCOMPARE(g->rank(3).state, RankState::Waiting);
    // Once the run ends, ranks that neither finished nor failed are stopped.
    QVERIFY(m_store->transition(2, store::RunState::kCancelled, "cancelled on request"));
    QTRY_COMPARE_WITH_TIMEOUT(g->rank(0).state, RankState::Stopped, 5000);
    QCOMPARE(g->rank(3).state, RankState::Stopped);
    QCOMPARE(g->rank(1).state, RankState::Done);
    QCOMPARE(g->rank(2).state, RankState::Failed);
    // Every tile is inside the widget and finds its rank again.
    g->resize(g->sizeHint());
    for (int r = 0; r < g->rankCount(); ++r) {
      bool found = false;
      for (int y = 0; y < g->height() && !found; y += 3) {
        for (int x = 0; x < g->width() && !found; x += 3) found = g->rankAt(QPoint(x, y)) == r;
      }
      QVERIFY2(found, qPrintable(QStringLiteral("rank %1 has no tile").arg(r)));
    }
  }

  // The header names the kernels the ranks took (their start events' "kernels"), a line per set
  // of ranks until every rank took the same, and follows ranks that start later.
  void kernelPathsShowInTheHeader() {
    const char* a = R"j("kernels":{"gemm":"OpenBLAS sgemm (2 threads)","attention":"standard"})j";
    const char* b2 = R"j("kernels":{"gemm":"OpenBLAS sgemm (1 thread)","attention":"standard"})j";
    store::Batch b;
    b.events.push_back({0, 0.0, "start", std::string(R"({"event":"start","rank":0,)") + a + "}"});
    b.events.push_back({1, 0.0, "start", std::string(R"({"event":"start","rank":1,)") + b2 + "}"});
    QVERIFY(m_store->append(2, b));  // run 2: 4 ranks
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    auto* header = v->findChild<QLabel*>(QStringLiteral("runHeader"));
    QVERIFY(header);
    QVERIFY2(header->text().contains(QStringLiteral("kernels: rank 0: gemm: OpenBLAS sgemm (2 threads); attention: standard")), qPrintable(header->text()));
    QVERIFY2(header->text().contains(QStringLiteral("kernels: rank 1: gemm: OpenBLAS sgemm (1 thread)")), qPrintable(header->text()));
    store::Batch more;
    for (int r = 1; r < 4; ++r) more.events.push_back({r, 0.0, "start", std::string(R"({"event":"start","rank":)") + std::to_string(r) + "," + a + "}"});
    QVERIFY(m_store->append(2, more));
    QTRY_VERIFY_WITH_TIMEOUT(header->text().contains(QStringLiteral("kernels: gemm: OpenBLAS sgemm (2 threads); attention: standard")), 5000);
    QVERIFY2(!header->text().contains(QStringLiteral("rank 1:")), qPrintable(header->text()));
    // A run whose workers recorded none shows no kernels line.
    QVERIFY(v->selectRun(1));
    QVERIFY2(!header->text().contains(QStringLiteral("kernels")), qPrintable(header->text()));
  }

  // The Experts tab reads the step events' expert counts from the history, whole on selection
  // and then only those written since.
  void expertLoadComesFromStepEvents() {
    store::Batch b;
    b.events.push_back({0, 0.0, "step", R"({"event":"step","rank":0,"step":1,"moe_layers":[0],"moe_load":[[3,1]],"moe_dropped":1})"});
    b.events.push_back({1, 0.0, "step", R"({"event":"step","rank":1,"step":1,"moe_layers":[0],"moe_load":[[1,3]]})"});
    QVERIFY(m_store->append(2, b));
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    ExpertLoadMap* map = v->expertLoad();
    QCOMPARE(map->layers(), (QList<int>{0}));
    QCOMPARE(map->tokens(0, 0), 4);
    QCOMPARE(map->share(0, 1), 0.5);
    store::Batch more;
    more.events.push_back({0, 0.0, "step", R"({"event":"step","rank":0,"step":2,"moe_layers":[0],"moe_load":[[4,0]]})"});
    QVERIFY(m_store->append(2, more));
    QTRY_COMPARE_WITH_TIMEOUT(map->tokens(0, 0), 8, 5000);
    QCOMPARE(map->dropped(), 1);
    // Another run clears it.
    QVERIFY(v->selectRun(1));
    QVERIFY(map->isEmpty());
  }

  void logSearchFindsALine() {
    store::Batch b;
    b.logs.push_back({0, false, 0, "loading data from tiny.txt"});
    b.logs.push_back({1, false, 0, "rank 1 ready"});
    b.logs.push_back({1, true, 0, "warning: gradient norm is NaN at step 7"});
    b.logs.push_back({0, false, 0, "step 8 done"});
    b.logs.push_back({3, true, 0, "NaN again"});
    QVERIFY(m_store->append(2, b));
    auto v = makeView();
    QVERIFY(v->selectRun(2));
    RunLogView* log = v->logView();
    QCOMPARE(log->lineCount(), 5);
    log->setSearchText(QStringLiteral("nan"));
    QCOMPARE(log->matchCount(), 2);
    QVERIFY(log->findNext());
    QCOMPARE(log->currentLine(), 2);
    QCOMPARE(log->currentLineText(), QStringLiteral("[rank 1 stderr] warning: gradient norm is NaN at step 7"));
    QVERIFY(log->findNext());
    QCOMPARE(log->currentLine(), 4);
    QVERIFY(log->findNext());  // wraps around
    QCOMPARE(log->currentLine(), 2);
    log->setOnlyMatching(true);
    QCOMPARE(log->shownText(), QStringLiteral("[rank 1 stderr] warning: gradient norm is NaN at step 7\n[rank 3 stderr] NaN again"));
    log->setRankFilter(3);
    QCOMPARE(log->matchCount(), 1);
    QCOMPARE(log->shownText(), QStringLiteral("[rank 3 stderr] NaN again"));
    log->setSearchText(QStringLiteral("no such text"));
    QVERIFY(!log->findNext());
    QCOMPARE(log->matchCount(), 0);
    log->setOnlyMatching(false);
    log->setRankFilter(-1);
    QCOMPARE(log->shownText().count(QLatin1Char('\n')), 4);

    // New lines of a running run are appended by the poll.
    auto other = store::RunStore::open(m_db.toStdString());
    QVERIFY(other.ok());
    store::Batch more;
    more.logs.push_back({2, false, 0, "checkpoint written"});
    QVERIFY(other.value()->append(2, more));
    QTRY_COMPARE_WITH_TIMEOUT(log->lineCount(), 6, 5000);
    QVERIFY(log->shownText().endsWith(QStringLiteral("[rank 2] checkpoint written")));
  }

  // Past kMaxShownLines, new lines are still appended (the oldest shown ones go), so the search
  // position stays on its line; the lines held are capped at kMaxHeldLines.
  void longLogsKeepTheSearchPosition() {
    auto rows = [](int from, int count) {
      std::vector<store::LogRow> out;
      out.reserve(static_cast<size_t>(count));
      for (int i = from; i < from + count; ++i) out.push_back({i % 2, false, static_cast<double>(i), "line " + std::to_string(i)});
      return out;
    };
    RunLogView log;
    log.setLogs(7, 2, rows(0, RunLogView::kMaxShownLines));
    QCOMPARE(log.shownLineCount(), RunLogView::kMaxShownLines);
    log.setSearchText(QStringLiteral("line 49990"));
    QVERIFY(log.findNext());
    const QString found = QStringLiteral("[rank 0] line 49990");
    QCOMPARE(log.currentLineText(), found);
    log.appendLogs(rows(RunLogView::kMaxShownLines, 100));
    QCOMPARE(log.shownLineCount(), RunLogView::kMaxShownLines);
    QCOMPARE(log.currentLineText(), found);  // a rebuild would have moved the cursor to the top
    QVERIFY(log.shownText().endsWith(QStringLiteral("[rank 1] line 50099")));
    QVERIFY(log.shownText().startsWith(QStringLiteral("[rank 0] line 100\n")));
    QCOMPARE(log.matchCount(), 1);
    // Held lines are capped; the oldest go, and their matches with them.
    log.appendLogs(rows(RunLogView::kMaxShownLines + 100, RunLogView::kMaxHeldLines));
    QCOMPARE(log.lineCount(), RunLogView::kMaxHeldLines);
    QCOMPARE(log.matchCount(), 0);
    QCOMPARE(log.shownLineCount(), RunLogView::kMaxShownLines);
    // A filter change rebuilds from the held lines.
    log.setRankFilter(1);
    QCOMPARE(log.shownLineCount(), RunLogView::kMaxShownLines);
    QVERIFY(log.shownText().endsWith(QStringLiteral("[rank 1] line 250099")));
  }

  void cancelRefusals_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<QString>("message");
    QTest::addColumn<QString>("stateAfter");
    QTest::newRow("ended run") << 0 << QStringLiteral("run %1 already ended (succeeded); nothing to cancel") << QStringLiteral("succeeded");
    QTest::newRow("supervisor gone") << 1 << QStringLiteral("run %1 has no supervisor any more") << QStringLiteral("lost");
    QTest::newRow("supervised elsewhere") << 2 << QStringLiteral("run %1 is supervised on host node-z; cancel it there")
                                          << QStringLiteral("running");
  }
  void cancelRefusals() {
    QFETCH(int, kind);
    QFETCH(QString, message);
    QFETCH(QString, stateAfter);
    store::NewRun n;
    n.name = "to-cancel";
    n.world_size = 1;
    n.supervisor = store::this_process_identity();
    if (kind == 1) n.supervisor.start_ticks += 12345;  // this pid, but not the recorded process
    if (kind == 2) n.supervisor.host = "node-z";
    auto id = m_store->create_run(n);
    QVERIFY(id.ok());
    QVERIFY(m_store->transition(id.value(), store::RunState::kRunning, "started"));
    if (kind == 0) QVERIFY(m_store->transition(id.value(), store::RunState::kSucceeded, "done"));
    const QString why = RunsView::requestCancel(*m_store, id.value());
    QVERIFY2(why.startsWith(message.arg(id.value())), qPrintable(why));
    auto after = m_store->get_run(id.value());
    QVERIFY(after.ok());
    QCOMPARE(RunsModel::stateText(after->state), stateAfter);
  }

  void cancelButtonFollowsTheSelection() {
    auto v = makeView();
    auto* button = v->findChild<QPushButton*>(QStringLiteral("cancelRun"));
    QVERIFY(button);
    QVERIFY(!button->isEnabled());
    QVERIFY(v->selectRun(2));  // running
    QVERIFY(button->isEnabled());
    QVERIFY(v->selectRun(1));  // succeeded
    QVERIFY(!button->isEnabled());
    QString error;
    QVERIFY(!v->cancelSelectedRun(&error));
    QCOMPARE(error, QStringLiteral("run 1 already ended (succeeded); nothing to cancel"));
  }

  void missingFileShowsNothingAndIsNotCreated() {
    RunsView v;
    const QString path = m_dir.filePath(QStringLiteral("never/written.sqlite"));
    v.setDatabasePath(path);
    QCOMPARE(v.model()->rowCount(), 0);
    QVERIFY(v.model()->lastError().isEmpty());
    QVERIFY(!QFileInfo::exists(path));
  }

  void notADatabaseIsReported() {
    const QString path = m_dir.filePath(QStringLiteral("garbage.sqlite"));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(4096, 'x'));
    f.close();
    RunsView v;
    v.setDatabasePath(path);
    QCOMPARE(v.model()->rowCount(), 0);
    QVERIFY2(v.model()->lastError().contains(path), qPrintable(v.model()->lastError()));
    QVERIFY(v.lastError().contains(path));
  }

  // The window at its first-start size (1400 x 900) with the runs dock raised and a 4-rank run
  // of 80 steps selected: no text the charts draw (titles, axis labels and titles, legend
  // entries) is elided by Qt Charts ("...") or reaches past its chart. The memory legend and the
  // narrow charts' step labels used to read "r..." and "...".
  void chartTextIsWholeAtTheDefaultWindowSize() {
    // A 4-rank tiny GPT whose config plans: the dashed predicted lines and their legends too.
    auto config = stagecraft::config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml");
    QVERIFY(config.ok());
    const qint64 id = tinyGptRun(config.value());
    store::Batch b;
    for (int step = 1; step <= 80; ++step) {
      for (int rank = 0; rank < 4; ++rank) {
        store::MetricRow m;
        m.rank = rank;
        m.step = step + 3;
        m.loss = rank >= 2 ? 5.5 - 3.0 * step / 80 : NAN;
        m.tokens_per_s = 8000.0 + 37.0 * (step % 11);
        m.mem_bytes = (rank < 2 ? 16 : 12) * 1024 * 1024 + 512 * 1024;
        b.metrics.push_back(m);
      }
    }
    QVERIFY(m_store->append(id, b));
    QTemporaryDir settings;
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings.path());
    qputenv("STAGECRAFT_DB", m_db.toUtf8());
    MainWindow w;
    qunsetenv("STAGECRAFT_DB");
    QCOMPARE(w.size(), QSize(1400, 900));
    auto* dock = w.findChild<QDockWidget*>(QStringLiteral("runsDock"));
    QVERIFY(dock);
    auto* view = qobject_cast<RunsView*>(dock->widget());
    QVERIFY(view);
    w.show();
    dock->show();
    dock->raise();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(view->selectRun(id));
    QCOMPARE(view->charts()->memorySeries().size(), 4);
    QVERIFY(view->charts()->predictedThroughputSeries());
    QTest::qWait(200);  // Qt Charts lays out its items on the event loop
    if (const QString dir = qEnvironmentVariable("STAGECRAFT_TEST_GRAB_DIR"); !dir.isEmpty()) {
      QVERIFY(w.grab().save(dir + QStringLiteral("/runs-default-size.png")));
    }
    const auto views = view->charts()->findChildren<QChartView*>();
    QCOMPARE(views.size(), 3);
    int checked = 0;
    for (QChartView* cv : views) {
      QVERIFY2(cv->isVisible() && cv->width() > 100, qPrintable(cv->objectName()));
      const QRectF area = cv->chart()->rect();
      for (QGraphicsItem* item : cv->scene()->items()) {
        if (!item->isVisible()) continue;
        QString text;
        if (auto* t = dynamic_cast<QGraphicsTextItem*>(item)) text = t->toPlainText();
        if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(item)) text = t->text();
        if (text.isEmpty()) continue;
        ++checked;
        const QString where = cv->objectName() + QStringLiteral(": \"") + text + QStringLiteral("\"");
        QVERIFY2(!text.contains(QStringLiteral("...")) && !text.contains(QChar(0x2026)), qPrintable(where + " is elided"));
        const QRectF r = item->sceneBoundingRect();
        QVERIFY2(area.adjusted(-1, -1, 1, 1).contains(r),
                 qPrintable(where + QString(" at (%1, %2, %3 x %4) leaves its chart (%5 x %6)")
                                        .arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height()).arg(area.width()).arg(area.height())));
      }
    }
    // Titles, tick labels and the memory legend's four ranks were all looked at.
    QVERIFY2(checked >= 20, qPrintable(QString::number(checked)));
    QStringList legend;
    for (QGraphicsItem* item : view->charts()->findChild<QChartView*>(QStringLiteral("memoryChart"))->scene()->items()) {
      auto* t = dynamic_cast<QGraphicsTextItem*>(item);
      if (t && item->isVisible() && t->toPlainText().startsWith(QStringLiteral("rank "))) legend << t->toPlainText();
    }
    legend.sort();
    QCOMPARE(legend, (QStringList{"rank 0", "rank 1", "rank 2", "rank 3"}));
    // And "predicted" beside each of the two charts' curves.
    for (const char* name : {"throughputChart", "memoryChart"}) {
      int predicted = 0;
      for (QGraphicsItem* item : view->charts()->findChild<QChartView*>(QString::fromLatin1(name))->scene()->items()) {
        auto* t = dynamic_cast<QGraphicsTextItem*>(item);
        if (t && item->isVisible() && t->toPlainText() == QStringLiteral("predicted")) ++predicted;
      }
      QVERIFY2(predicted == 1, name);
    }
  }

  void mainWindowHasTheRunsDockAndMenus() {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    qputenv("STAGECRAFT_DB", m_db.toUtf8());
    MainWindow w;
    qunsetenv("STAGECRAFT_DB");
    auto* dock = w.findChild<QDockWidget*>(QStringLiteral("runsDock"));
    QVERIFY(dock);
    auto* view = qobject_cast<RunsView*>(dock->widget());
    QVERIFY(view);
    QCOMPARE(view->databasePath(), m_db);
    QCOMPARE(view->model()->rowCount(), 4);
    QStringList runEntries;
    for (QAction* a : w.runMenu()->actions()) runEntries << a->text();
    QVERIFY2(runEntries.contains(QStringLiteral("&Launch...")) && runEntries.contains(QStringLiteral("&Hosts...")),
             qPrintable(runEntries.join(QLatin1Char('|'))));
    auto* manager = w.findChild<RunManager*>(QStringLiteral("runManager"));
    QVERIFY(manager);
    QCOMPARE(manager->runsView(), view);
    // Run > Hosts opens the launch dialog's hosts editor, the one whose settings a launch uses;
    // there is no second one.
    QCOMPARE(manager->hostsEditor(), manager->launchDialog()->hostsEditor());
    QCOMPARE(w.findChildren<HostsEditor*>().size(), 1);
    QAction* hostsEntry = nullptr;
    for (QAction* a : w.runMenu()->actions()) {
      if (a->text() == QStringLiteral("&Hosts...")) hostsEntry = a;
    }
    QVERIFY(hostsEntry);
    hostsEntry->trigger();
    QVERIFY(manager->launchDialog()->hostsEditor()->isVisible());
    manager->launchDialog()->hostsEditor()->hide();
    // A run the launch dialog reports is selected in the dock.
    Q_EMIT manager->launchDialog()->runStarted(2);
    QCOMPARE(view->selectedRunId(), 2);
    // Hosts chosen in the launch dialog become the plan's cluster: one undoable edit that keeps
    // everything else of the document.
    QVERIFY(w.openFile(QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml")));
    QCOMPARE(w.document()->plan().topology.spec().nodes, 1);
    auto hosts = w.document()->config();
    hosts.cluster.nodes = 2;
    hosts.cluster.gpus_per_node = 2;
    hosts.cluster.hosts = {{"node-a", 2}, {"node-b", 2}};
    hosts.train.steps = 7;  // the dialog's copy may be older: only its cluster is taken
    Q_EMIT manager->launchDialog()->hostsApplied(hosts);
    QCOMPARE(w.document()->plan().topology.spec().nodes, 2);
    QCOMPARE(w.document()->plan().topology.spec().gpus_per_node, 2);
    QCOMPARE(w.document()->config().train.steps, 150);
    w.document()->undoStack()->undo();
    QCOMPARE(w.document()->plan().topology.spec().nodes, 1);
  }
};

QTEST_MAIN(TestRunsView)
#include "tst_runs_view.moc"
