// tst_launch_dialog: the launch dialog starts the tiny GPT example through a detached
// `stagecraft-cli run`, the run keeps training after the dialog is gone, the runs view shows it
// live and cancels it; on hosts whose SSH port is closed, preflight and Start report each host
// unreachable; incomplete input is refused with a message naming the fix. Label integration:
// it starts real processes.
#include <QLineSeries>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>

#include "document/PlanDocument.h"
#include "hosts/HostsEditor.h"
#include "hosts/PreflightTable.h"
#include "runs/LaunchDialog.h"
#include "runs/RunCharts.h"
#include "runs/RunsModel.h"
#include "runs/RunsView.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/store/run_store.h"
#include "runs_test_support.h"

namespace store = stagecraft::store;
using runs_test::closedPort;
using runs_test::writeFile;

namespace {

constexpr int kStartMs = 60000;   // the CLI checks the config and forks
constexpr int kStepMs = 180000;   // 4 worker processes on a loaded 2-core machine
constexpr int kCancelMs = 60000;  // TERM, grace period, the supervisor records the end

}  // namespace

class TestLaunchDialog : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_dir;

  stagecraft::config::RunConfig tiny(int steps) {
    auto c = stagecraft::config::load_config_file(
        STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml",
        {"train.steps=" + std::to_string(steps), "train.warmup_steps=0",
         "train.checkpoint_dir=" + m_dir.filePath(QStringLiteral("ckpt")).toStdString()});
    if (!c.ok()) qFatal("%s", c.status().message().c_str());
    return c.value();
  }

  // A dialog on a document of its own (an untitled default config until setConfig()).
  std::unique_ptr<LaunchDialog> dialog(const QString& db) {
    auto* document = new PlanDocument;
    auto d = std::make_unique<LaunchDialog>(document);
    document->setParent(d.get());
    d->setDatabasePath(db);
    d->setCliPath(QStringLiteral(STAGECRAFT_BIN_DIR "/stagecraft-cli"));
    return d;
  }

  // The dialog's document holds `config`; with `baseDir`, as a document opened from that folder
  // (its relative paths start there).
  static void setConfig(LaunchDialog& d, const stagecraft::config::RunConfig& config, const QString& baseDir) {
    PlanDocument* doc = d.document();
    QString error;
    if (!baseDir.isEmpty() && !doc->open(baseDir + QStringLiteral("/tiny-gpt.yaml"), &error)) qFatal("%s", qPrintable(error));
    doc->setConfig(config, QStringLiteral("as the test sets it"));
  }

 private Q_SLOTS:
  void localRunOutlivesTheDialogAndIsCancelled() {
    const QString db = m_dir.filePath(QStringLiteral("local.sqlite"));
    auto d = dialog(db);
    setConfig(*d, tiny(100000), QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs"));
    QSignalSpy started(d.get(), &LaunchDialog::runStarted);
    QVERIFY2(d->start(), qPrintable(d->message()));
    QTRY_VERIFY_WITH_TIMEOUT(!d->isStarting(), kStartMs);
    QVERIFY2(started.count() == 1, qPrintable(d->message()));
    const qint64 id = d->startedRunId();
    QCOMPARE(id, 1);
    QVERIFY(d->lastCommand().contains(QStringLiteral("--detach")));
    QVERIFY(QFileInfo::exists(d->savedConfigPath()));
    QVERIFY(d->savedConfigPath().startsWith(m_dir.filePath(QStringLiteral("launches/tiny-gpt-"))));
    // The dialog (the "GUI") goes away; the run does not.
    d.reset();

    RunsView view;
    view.setDatabasePath(db);
    view.setPollInterval(200);
    QTRY_VERIFY_WITH_TIMEOUT(view.selectRun(id), 5000);
    QTRY_VERIFY_WITH_TIMEOUT(view.charts()->lossSeries()->count() >= 2, kStepMs);
    const store::RunRecord* r = view.model()->run(id);
    QVERIFY(r);
    QCOMPARE(r->state, store::RunState::kRunning);
    QCOMPARE(r->world_size, 4);
    const int64_t supervisor = r->supervisor.pid;
    QVERIFY(supervisor > 0 && supervisor != ::getpid());
    // Should a check below fail, the 100,000-step run must not outlive the test: its supervisor
    // is killed, and its ranks die with it.
    struct KillOnFailure {
      pid_t pid;
      ~KillOnFailure() {
        if (QTest::currentTestFailed()) ::kill(pid, SIGKILL);
      }
    } guard{static_cast<pid_t>(supervisor)};
    QVERIFY(std::isfinite(view.charts()->lossSeries()->at(0).y()));

    QString error;
    QVERIFY2(view.cancelSelectedRun(&error), qPrintable(error));
    QTRY_COMPARE_WITH_TIMEOUT(view.model()->run(id)->state, store::RunState::kCancelled, kCancelMs);
    // The supervisor exits once it recorded the end.
    QTRY_VERIFY_WITH_TIMEOUT(::kill(static_cast<pid_t>(supervisor), 0) != 0, 20000);
  }

  void hostsWithAClosedPortAreUnreachable() {
    const int port = closedPort();
    const QString config = m_dir.filePath(QStringLiteral("ssh_config"));
    const QString known = m_dir.filePath(QStringLiteral("known_hosts"));
    const QString hostfile = m_dir.filePath(QStringLiteral("closed.hosts"));
    QVERIFY(writeFile(config, QStringLiteral("Host closed-a closed-b\n  HostName 127.0.0.1\n  Port %1\n").arg(port).toUtf8()));
    QVERIFY(writeFile(known, ""));
    QVERIFY(writeFile(hostfile, "closed-a slots=2\nclosed-b slots=2\n"));
    const QString db = m_dir.filePath(QStringLiteral("remote.sqlite"));
    auto d = dialog(db);
    setConfig(*d, tiny(3), QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs"));
    d->setLocal(false);
    d->setHostfilePath(hostfile);
    d->hostsEditor()->setSshConfigPath(config);
    d->hostsEditor()->setKnownHostsPath(known);
    QVERIFY2(d->runPreflight(), qPrintable(d->message()));
    // A second pass while one runs is refused; the running one goes on.
    QVERIFY(d->isPreflighting());
    QVERIFY(!d->runPreflight());
    QVERIFY2(d->message().contains(QStringLiteral("running")), qPrintable(d->message()));
    QTRY_VERIFY_WITH_TIMEOUT(!d->isPreflighting(), 60000);
    PreflightTable* t = d->preflightTable();
    QCOMPARE(t->rowCount(), 2);
    for (int r = 0; r < 2; ++r) {
      QCOMPARE(t->cellText(r, PreflightTable::ReachableColumn), QStringLiteral("no"));
      QVERIFY(t->cellText(r, PreflightTable::ProblemsColumn).contains(t->cellText(r, PreflightTable::HostColumn)));
    }
    QCOMPARE(d->message(), QStringLiteral("Preflight failed on 2 host(s)"));

    // --include narrows the selection.
    d->setInclude(QStringLiteral("closed-b"));
    QVERIFY(d->runPreflight());
    QTRY_VERIFY_WITH_TIMEOUT(!d->isPreflighting(), 60000);
    QCOMPARE(t->rowCount(), 1);
    QCOMPARE(t->cellText(0, PreflightTable::HostColumn), QStringLiteral("closed-b"));
    d->setInclude(QString());

    // Start: the CLI's own preflight refuses, naming each host; nothing runs.
    QSignalSpy failed(d.get(), &LaunchDialog::startFailed);
    QVERIFY(d->start());
    QVERIFY(d->lastCommand().contains(QStringLiteral("--hosts")));
    QVERIFY(d->lastCommand().contains(config));
    QTRY_VERIFY_WITH_TIMEOUT(!d->isStarting(), 120000);
    QCOMPARE(failed.count(), 1);
    QVERIFY2(d->message().contains(QStringLiteral("closed-a")) && d->message().contains(QStringLiteral("closed-b")), qPrintable(d->message()));
    QCOMPARE(d->startedRunId(), 0);
  }

  // Preflight counts GPUs for a cuda run and cores for a cpu run, as the CLI's preflight does,
  // with the hosts editor's SSH settings; so does the editor's own connection test.
  void preflightOptionsFollowTheBackend_data() {
    QTest::addColumn<bool>("cuda");
    QTest::newRow("cpu backend counts cores") << false;
    QTest::newRow("cuda backend counts GPUs") << true;
  }
  void preflightOptionsFollowTheBackend() {
    QFETCH(bool, cuda);
    auto d = dialog(m_dir.filePath(QStringLiteral("options.sqlite")));
    auto c = tiny(3);
    c.backend = cuda ? stagecraft::config::Backend::kCuda : stagecraft::config::Backend::kCpu;
    setConfig(*d, c, QString());
    const QString config = m_dir.filePath(QStringLiteral("options_ssh_config"));
    d->hostsEditor()->setSshConfigPath(config);
    QCOMPARE(d->preflightOptions().cuda, cuda);
    QCOMPARE(QString::fromStdString(d->preflightOptions().ssh.config_file), config);
    // The hosts editor's "Test connection" checks the same.
    QCOMPARE(d->hostsEditor()->testOptions().cuda, cuda);
    QCOMPARE(QString::fromStdString(d->hostsEditor()->testOptions().ssh.config_file), config);
  }

  // The chosen hosts define the cluster; the dialog shows the plan on them, or why there is none.
  void hostsSummaryPlansOnTheChosenHosts_data() {
    QTest::addColumn<QByteArray>("hostfile");
    QTest::addColumn<QString>("include");
    QTest::addColumn<QString>("says");
    QTest::addColumn<bool>("applicable");
    QTest::newRow("2 hosts x 2 slots") << QByteArray("a slots=2\nb slots=2\n") << QString() << QStringLiteral("2 host(s) x 2 ranks: dp 2 x tp 1 x pp 2") << true;
    QTest::newRow("4 hosts x 1 slot") << QByteArray("a slots=1\nb slots=1\nc slots=1\nd slots=1\n") << QString()
                                      << QStringLiteral("4 host(s) x 1 ranks: dp 2 x tp 1 x pp 2") << true;
    QTest::newRow("include narrows to 1 x 4") << QByteArray("a slots=4\nb slots=4\n") << QStringLiteral("a")
                                              << QStringLiteral("1 host(s) x 4 ranks: dp 2 x tp 1 x pp 2") << true;
    QTest::newRow("3 ranks cannot hold pp 2") << QByteArray("a slots=1\nb slots=1\nc slots=1\n") << QString()
                                              << QStringLiteral("on these hosts: ") << false;
    QTest::newRow("unequal slots") << QByteArray("a slots=2\nb slots=1\n") << QString() << QStringLiteral("slots") << false;
  }
  void hostsSummaryPlansOnTheChosenHosts() {
    QFETCH(QByteArray, hostfile);
    QFETCH(QString, include);
    QFETCH(QString, says);
    QFETCH(bool, applicable);
    const QString path = m_dir.filePath(QStringLiteral("summary.hosts"));
    QVERIFY(writeFile(path, hostfile));
    auto d = dialog(m_dir.filePath(QStringLiteral("summary.sqlite")));
    auto base = tiny(3);
    base.parallel.dp = 0;  // auto: the hosts decide the world, dp follows
    setConfig(*d, base, QString());
    d->setLocal(false);
    d->setInclude(include);
    d->setHostfilePath(path);
    QVERIFY2(d->hostsSummary().contains(says), qPrintable(d->hostsSummary()));
    QSignalSpy applied(d.get(), &LaunchDialog::hostsApplied);
    stagecraft::config::RunConfig c;
    QString error;
    const bool planned = d->hostsConfig(&c, &error);
    QCOMPARE(planned, !says.startsWith(QStringLiteral("on these")) && says != QStringLiteral("slots"));
    if (!planned) {
      QVERIFY(!d->applyHostsToPlan());
      QCOMPARE(applied.count(), 0);
      return;
    }
    QCOMPARE(d->findChild<QPushButton*>(QStringLiteral("applyHosts"))->isEnabled(), applicable);
    QVERIFY(d->applyHostsToPlan());
    QCOMPARE(applied.count(), 1);
    const auto got = applied.at(0).at(0).value<stagecraft::config::RunConfig>();
    QCOMPARE(got.cluster.nodes, c.cluster.nodes);
    QCOMPARE(got.cluster.gpus_per_node, c.cluster.gpus_per_node);
    QCOMPARE(int(got.cluster.hosts.size()), c.cluster.nodes);
  }

  // The dialog keeps no copy of the config: an edit of the document shows at once.
  void followsTheDocument() {
    const QString path = m_dir.filePath(QStringLiteral("follow.hosts"));
    QVERIFY(writeFile(path, "a slots=2\nb slots=2\n"));
    auto d = dialog(m_dir.filePath(QStringLiteral("follow.sqlite")));
    auto base = tiny(3);
    base.parallel.dp = 0;
    setConfig(*d, base, QString());
    d->setLocal(false);
    d->setHostfilePath(path);
    QVERIFY2(d->hostsSummary().contains(QStringLiteral("dp 2 x tp 1 x pp 2")), qPrintable(d->hostsSummary()));
    QString error;
    QVERIFY2(d->document()->applyEdit(QStringLiteral("parallel.pp"), QStringLiteral("1"), &error), qPrintable(error));
    QVERIFY2(d->hostsSummary().contains(QStringLiteral("dp 4 x tp 1 x pp 1")), qPrintable(d->hostsSummary()));
    stagecraft::config::RunConfig c;
    QVERIFY(d->hostsConfig(&c, &error));
    QCOMPARE(c.parallel.pp, 1);
    QCOMPARE(c.cluster.nodes, 2);
  }

  void incompleteInputIsRefused_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<QString>("says");
    QTest::newRow("invalid config") << 0 << QStringLiteral("Fix the configuration first: ");
    QTest::newRow("hosts without a hostfile") << 1 << QStringLiteral("Hostfile: none chosen");
    QTest::newRow("hostfile missing") << 2 << QStringLiteral("no such file");
    QTest::newRow("cli missing") << 3 << QStringLiteral("stagecraft-cli not found");
    QTest::newRow("include names an unknown host") << 4 << QStringLiteral("node-z");
    QTest::newRow("slurm time limit in no format of Slurm's") << 5 << QStringLiteral("--time=1:99: not a Slurm time limit");
    QTest::newRow("slurm option the plan sets") << 6 << QStringLiteral("--sbatch-arg=--nodes=4: --nodes is set by Stagecraft");
  }
  void incompleteInputIsRefused() {
    QFETCH(int, kind);
    QFETCH(QString, says);
    auto d = dialog(m_dir.filePath(QStringLiteral("refused.sqlite")));
    auto c = tiny(3);
    if (kind == 0) c.parallel.pp = 64;  // more stages than the model has layers
    setConfig(*d, c, QString());
    QCOMPARE(d->document()->isValid(), kind != 0);
    if (kind == 1 || kind == 2 || kind == 4) d->setLocal(false);
    if (kind == 2) d->setHostfilePath(m_dir.filePath(QStringLiteral("nope.hosts")));
    if (kind == 3) d->setCliPath(m_dir.filePath(QStringLiteral("no-cli")));
    if (kind == 5 || kind == 6) {
      d->setWhere(LaunchDialog::Where::Slurm);
      stagecraft::launch::SlurmOptions o;
      if (kind == 5) o.time = "1:99";
      if (kind == 6) o.sbatch_args = {"--nodes=4"};
      d->setSlurmOptions(o);
    }
    if (kind == 4) {
      const QString hostfile = m_dir.filePath(QStringLiteral("one.hosts"));
      QVERIFY(writeFile(hostfile, "node-a slots=1\n"));
      d->setHostfilePath(hostfile);
      d->setInclude(QStringLiteral("node-z"));
      QVERIFY(!d->runPreflight());
    } else {
      QVERIFY(!d->start());
    }
    QVERIFY2(d->message().contains(says), qPrintable(d->message()));
    QVERIFY(!d->isStarting());
  }

  // "On a Slurm cluster" starts `stagecraft-cli run FILE --slurm ...` with the fields as options;
  // here no cluster answers (SLURM_CONF names no file), so the CLI's one-line error comes back.
  void slurmStartsRunWithTheFields() {
    qputenv("SLURM_CONF", m_dir.filePath(QStringLiteral("no-slurm.conf")).toUtf8());
    auto d = dialog(m_dir.filePath(QStringLiteral("slurm.sqlite")));
    auto c = tiny(3);
    c.cluster.nodes = 2;
    c.cluster.gpus_per_node = 2;
    setConfig(*d, c, QString());
    d->setWhere(LaunchDialog::Where::Slurm);
    QCOMPARE(d->where(), LaunchDialog::Where::Slurm);
    QVERIFY(!d->isLocal());
    stagecraft::launch::SlurmOptions o;
    o.partition = "gpu";
    o.account = "proj1";
    o.time = "00:10:00";
    o.sbatch_args = {"--mem=0", "--exclusive"};
    d->setSlurmOptions(o);
    QSignalSpy failed(d.get(), &LaunchDialog::startFailed);
    QVERIFY2(d->start(), qPrintable(d->message()));
    const QStringList cmd = d->lastCommand();
    const QStringList tail = cmd.mid(cmd.indexOf(QStringLiteral("--slurm")));
    QCOMPARE(tail, (QStringList{"--slurm", "--partition", "gpu", "--account", "proj1", "--time", "00:10:00", "--sbatch-arg=--mem=0",
                                "--sbatch-arg=--exclusive"}));
    QVERIFY(failed.wait(kStartMs));
    QVERIFY2(!d->message().isEmpty() && !d->message().contains('\n'), qPrintable(d->message()));
    qunsetenv("SLURM_CONF");
  }

  // Another program (launch.program) goes to Slurm the same way: the run is recorded and its
  // supervisor takes it as far as sbatch (which refuses the configuration file here at once); the
  // saved config names the program.
  void slurmStartsAnotherProgram() {
    const QString conf = m_dir.filePath(QStringLiteral("not-a-slurm.conf"));
    {
      QFile f(conf);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("this is not a slurm.conf\n");
    }
    qputenv("SLURM_CONF", conf.toUtf8());
    const QString db = m_dir.filePath(QStringLiteral("slurm-program.sqlite"));
    auto d = dialog(db);
    auto c = tiny(3);
    c.cluster.nodes = 2;
    c.cluster.gpus_per_node = 2;
    c.launch.program = STAGECRAFT_SOURCE_DIR "/tests/integration/ddp_train.py";
    c.launch.framework = stagecraft::config::LaunchFramework::kMegatron;
    setConfig(*d, c, QString());
    d->setWhere(LaunchDialog::Where::Slurm);
    stagecraft::launch::SlurmOptions o;
    o.partition = "gpu";
    d->setSlurmOptions(o);
    QSignalSpy started(d.get(), &LaunchDialog::runStarted);
    QVERIFY2(d->start(), qPrintable(d->message()));
    QVERIFY(d->lastCommand().contains(QStringLiteral("--slurm")));
    QFile saved(d->savedConfigPath());
    QVERIFY(saved.open(QIODevice::ReadOnly));
    QVERIFY(QString::fromUtf8(saved.readAll()).contains(QStringLiteral("ddp_train.py")));
    QTRY_VERIFY_WITH_TIMEOUT(!d->isStarting(), kStartMs);
    QVERIFY2(started.count() == 1, qPrintable(d->message()));
    const qint64 id = d->startedRunId();
    auto store = store::RunStore::open(db.toStdString());
    QVERIFY(store.ok());
    QTRY_VERIFY_WITH_TIMEOUT(store.value()->get_run(id).ok() && store.value()->get_run(id)->state == store::RunState::kFailed, kStartMs);
    const std::string reason = store.value()->get_run(id)->reason;
    QVERIFY2(reason.find("sbatch") != std::string::npos && reason.find("own worker") == std::string::npos, reason.c_str());
    qunsetenv("SLURM_CONF");
  }
};

QTEST_MAIN(TestLaunchDialog)
#include "tst_launch_dialog.moc"
