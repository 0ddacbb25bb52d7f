// tst_run_locally: Run > Run locally trains the tiny GPT example for real (4 stagecraft-worker
// processes, dp 2 x pp 2) and draws its loss; Cancel stops a run; configs that cannot run here
// are refused with the engine's message; every run is kept in the run history. Label
// integration: it starts real processes.
#include <QLineSeries>
#include <QSettings>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "document/PlanDocument.h"
#include "mainwindow/MainWindow.h"
#include "runs/RunLocallyDialog.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/store/run_store.h"

namespace {

QString example(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + QLatin1String(name); }

// Generous: 4 processes on a loaded 2-core machine.
constexpr int kRunTimeoutMs = 180000;

bool edit(MainWindow& w, const char* key, const QString& value) {
  QString error;
  const bool ok = w.document()->applyEdit(QLatin1String(key), value, &error);
  if (!ok) qWarning("%s", qPrintable(error));
  return ok;
}

}  // namespace

class TestRunLocally : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("StagecraftTests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_run_locally"));
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    // The worker beside the test binaries (build/bin).
    qputenv("STAGECRAFT_WORKER", QByteArray(STAGECRAFT_BIN_DIR "/stagecraft-worker"));
  }

  void trainsTinyGptAndDrawsTheLoss() {
    MainWindow w;
    QVERIFY(w.openFile(example("tiny-gpt.yaml")));
    QVERIFY(edit(w, "train.warmup_steps", QStringLiteral("0")));
    QVERIFY(edit(w, "train.steps", QStringLiteral("3")));
    QVERIFY(edit(w, "train.checkpoint_dir", m_dir.filePath(QStringLiteral("ckpt"))));
    const QString db = m_dir.filePath(QStringLiteral("trains.sqlite"));
    w.runDialog()->setDatabasePath(db);
    QVERIFY2(w.runLocally(), qPrintable(w.lastError()));
    RunLocallyDialog* run = w.runDialog();
    QVERIFY(run->isRunning());
    QTRY_VERIFY_WITH_TIMEOUT(!run->isRunning(), kRunTimeoutMs);
    QVERIFY2(run->outcome() == QLatin1String("succeeded"), qPrintable(run->outcome() + ": " + run->message() + "\n" + run->logText()));
    QLineSeries* loss = run->lossSeries();
    QCOMPARE(loss->count(), 3);
    // Kept in the run history like a CLI run: its transitions and the same losses per step.
    auto st = stagecraft::store::RunStore::open(db.toStdString());
    QVERIFY(st.ok());
    const qint64 id = run->historyRunId();
    QVERIFY(id > 0);
    auto rec = st.value()->get_run(id);
    QVERIFY(rec.ok());
    QCOMPARE(rec->state, stagecraft::store::RunState::kSucceeded);
    QCOMPARE(QString::fromStdString(rec->name), QStringLiteral("tiny-gpt"));
    QCOMPARE(rec->world_size, 4);
    auto transitions = st.value()->transitions(id);
    QVERIFY(transitions.ok());
    QCOMPARE(transitions->size(), size_t(3));  // queued, running, succeeded
    auto rank0 = st.value()->metrics(id, 0);
    QVERIFY(rank0.ok());
    QCOMPARE(rank0->size(), size_t(3));
    for (int i = 0; i < 3; ++i) QCOMPARE((*rank0)[static_cast<size_t>(i)].loss, loss->at(i).y());
    for (int i = 0; i < loss->count(); ++i) {
      QCOMPARE(loss->at(i).x(), double(i + 1));
      // Vocabulary of 256 bytes: a fresh model's loss is near ln(256) = 5.55; three steps move it
      // little. The bound catches NaNs, zeros and wrong units, not the optimiser's progress.
      QVERIFY2(std::isfinite(loss->at(i).y()) && loss->at(i).y() > 3.0 && loss->at(i).y() < 7.0,
               qPrintable(QString::number(loss->at(i).y())));
    }
  }

  // Another program (launch.program) runs from the window too: its metric lines, printed here by
  // the last rank only as Megatron-LM does, are the chart's loss and the history's metrics.
  void runsAnotherProgramAndDrawsItsLoss() {
    const QString script = m_dir.filePath(QStringLiteral("last_rank.sh"));
    QFile f(script);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("#!/bin/sh\n"
            "echo \"rank $RANK of $WORLD_SIZE on port $MASTER_PORT\"\n"
            "[ \"$RANK\" = $((WORLD_SIZE - 1)) ] || exit 0\n"
            "for i in 1 2 3; do echo \"iter $i: loss $((5 - i)).5000, time 1.00ms, mfu 0.00%\"; done\n");
    f.close();
    QVERIFY(f.setPermissions(f.permissions() | QFileDevice::ExeUser));
    MainWindow w;
    QVERIFY(w.openFile(example("tiny-gpt.yaml")));
    QVERIFY(edit(w, "launch.program", script));
    const QString db = m_dir.filePath(QStringLiteral("foreign.sqlite"));
    w.runDialog()->setDatabasePath(db);
    QVERIFY2(w.runLocally(), qPrintable(w.lastError()));
    RunLocallyDialog* run = w.runDialog();
    QTRY_VERIFY_WITH_TIMEOUT(!run->isRunning(), kRunTimeoutMs);
    QVERIFY2(run->outcome() == QLatin1String("succeeded"), qPrintable(run->outcome() + ": " + run->message() + "\n" + run->logText()));
    QLineSeries* loss = run->lossSeries();
    QCOMPARE(loss->count(), 3);
    for (int i = 0; i < 3; ++i) QCOMPARE(loss->at(i), QPointF(i + 1, 4.5 - i));
    QVERIFY2(run->logText().contains(QStringLiteral("rank 0 of 4 on port")), qPrintable(run->logText()));
    auto st = stagecraft::store::RunStore::open(db.toStdString());
    QVERIFY(st.ok());
    auto last = st.value()->metrics(run->historyRunId(), 3);
    QVERIFY(last.ok());
    QCOMPARE(last->size(), size_t(3));
    QCOMPARE((*last)[2].loss, 2.5);
  }

  void cancelStopsARun() {
    MainWindow w;
    QVERIFY(w.openFile(example("tiny-gpt.yaml")));
    QVERIFY(edit(w, "train.checkpoint_dir", m_dir.filePath(QStringLiteral("ckpt-cancel"))));
    QVERIFY(w.runLocally());  // 150 steps: far longer than the test waits
    RunLocallyDialog* run = w.runDialog();
    QTRY_VERIFY_WITH_TIMEOUT(run->lossSeries()->count() >= 1 || !run->isRunning(), kRunTimeoutMs);
    run->cancel();
    QTRY_VERIFY_WITH_TIMEOUT(!run->isRunning(), kRunTimeoutMs);
    QCOMPARE(run->outcome(), QStringLiteral("cancelled"));
    QVERIFY(run->lossSeries()->count() < 150);
    auto st = stagecraft::store::RunStore::open(run->databasePath().toStdString());
    QVERIFY(st.ok());
    auto rec = st.value()->get_run(run->historyRunId());
    QVERIFY(rec.ok());
    QCOMPARE(rec->state, stagecraft::store::RunState::kCancelled);
  }

  // `stagecraft-cli runs cancel` and the Runs view cancel through the history: the run the
  // window supervises stops, recorded cancelled, and the window (this process) lives on.
  void cancelThroughTheHistoryStopsTheWindowsRun() {
    MainWindow w;
    QVERIFY(w.openFile(example("tiny-gpt.yaml")));
    QVERIFY(edit(w, "train.checkpoint_dir", m_dir.filePath(QStringLiteral("ckpt-history-cancel"))));
    const QString db = m_dir.filePath(QStringLiteral("cancel.sqlite"));
    w.runDialog()->setDatabasePath(db);
    QVERIFY(w.runLocally());
    RunLocallyDialog* run = w.runDialog();
    QTRY_VERIFY_WITH_TIMEOUT(run->lossSeries()->count() >= 1 || !run->isRunning(), kRunTimeoutMs);
    QVERIFY(run->isRunning());
    auto st = stagecraft::store::RunStore::open(db.toStdString());
    QVERIFY(st.ok());
    const stagecraft::Status asked = stagecraft::store::cancel_run(*st.value(), run->historyRunId());
    QVERIFY2(asked.ok(), asked.message().c_str());
    QTRY_VERIFY_WITH_TIMEOUT(!run->isRunning(), kRunTimeoutMs);
    QCOMPARE(run->outcome(), QStringLiteral("cancelled"));
    auto rec = st.value()->get_run(run->historyRunId());
    QVERIFY(rec.ok());
    QCOMPARE(rec->state, stagecraft::store::RunState::kCancelled);
  }

  void refusesWhatCannotRunHere_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("messagePart");
    QTest::newRow("no data") << "train.data" << "" << "train.data: no data file";
    QTest::newRow("missing data") << "train.data" << "/nonexistent/tokens.bin" << "train.data=/nonexistent/tokens.bin";
    // A build with CUDA runs backend cuda here where this machine has a GPU (tst_launch covers the
    // refusals on one).
    if (!stagecraft::runtime::cuda_built()) {
      QTest::newRow("cuda backend") << "backend" << "cuda" << "backend=cuda: this build trains on the CPU only";
    } else if (stagecraft::runtime::cuda_device_count() == 0) {
      QTest::newRow("cuda backend without a GPU") << "backend" << "cuda" << "backend=cuda: this machine shows no GPU";
    }
    QTest::newRow("two nodes") << "cluster.nodes" << "2" << "cluster.nodes=2";
    QTest::newRow("another program that is not there")
        << "launch.program" << "/nonexistent/train.sh" << "launch.program=/nonexistent/train.sh: no such file here";
    QTest::newRow("the plan as arguments without a program")
        << "launch.framework" << "megatron" << "launch.framework=megatron: passes the plan to another framework's program";
  }
  void refusesWhatCannotRunHere() {
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, messagePart);
    MainWindow w;
    QVERIFY(w.openFile(example("tiny-gpt.yaml")));
    if (key == QLatin1String("cluster.nodes")) QVERIFY(edit(w, "parallel.dp", QStringLiteral("auto")));
    QVERIFY(edit(w, key.toLatin1().constData(), value.isEmpty() ? QStringLiteral("\"\"") : value));
    QVERIFY(!w.runLocally());
    QVERIFY2(w.lastError().contains(messagePart), qPrintable(w.lastError()));
    QVERIFY(!w.runDialog()->isRunning());
  }

  void pathsResolveFromTheConfigsDirectory() {
    stagecraft::config::RunConfig c;
    c.train.data = "configs/data/stagecraft.txt";
    c.train.checkpoint_dir = "runs/x";
    const auto r = RunLocallyDialog::resolvePaths(c, QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs"));
    QCOMPARE(QString::fromStdString(r.train.data), QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/data/stagecraft.txt"));
    QCOMPARE(QString::fromStdString(r.train.checkpoint_dir), QStringLiteral(STAGECRAFT_SOURCE_DIR "/runs/x"));
    c.train.data = "/abs/tokens.bin";
    QCOMPARE(RunLocallyDialog::resolvePaths(c, QStringLiteral("/tmp")).train.data, std::string("/abs/tokens.bin"));
  }

 private:
  QTemporaryDir m_dir;
};

QTEST_MAIN(TestRunLocally)
#include "tst_run_locally.moc"
