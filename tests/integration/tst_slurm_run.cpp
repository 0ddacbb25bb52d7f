// stagecraft-cli run --slurm, export --to slurm and preflight --slurm against a real Slurm
// cluster the suite makes and removes (slurm_lab.h): munge, MariaDB + slurmdbd, slurmctld and
// two slurmd nodes in network namespaces, a partition of 2 nodes x 2 CPUs; Stagecraft's own
// worker and another program (a PyTorch DDP program, ddp_train.py) as the job's tasks.
//
// Without root or the Slurm packages the suite prints why and exits 77, which ctest reports as
// skipped (tests/integration/CMakeLists.txt), never as passed.
#include <QtTest>

#include <algorithm>
#include <csignal>
#include <map>

#include "slurm_lab.h"
#include "ssh_lab.h"

namespace {

// Process ids whose environment holds every one of `vars` ("NAME=value").
QList<int> processes_with(const QList<QByteArray>& vars, bool workers_only) {
  QList<int> pids;
  for (const QString& e : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool ok = false;
    const int pid = e.toInt(&ok);
    if (!ok) continue;
    QFile f("/proc/" + e + "/environ");
    if (!f.open(QIODevice::ReadOnly)) continue;
    const QList<QByteArray> env = f.readAll().split('\0');
    if (!std::all_of(vars.begin(), vars.end(), [&](const QByteArray& v) { return env.contains(v); })) continue;
    if (workers_only) {
      QFile c("/proc/" + e + "/cmdline");
      if (!c.open(QIODevice::ReadOnly)) continue;
      const QList<QByteArray> argv = c.readAll().split('\0');
      if (argv.isEmpty() || !argv.front().endsWith("stagecraft-worker") || argv.contains("--serve-store")) continue;
    }
    pids << pid;
  }
  return pids;
}

}  // namespace

class TestSlurmRun : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<SlurmLab> lab_;
  QString db_;

  QString cli_path() const { return QString(STAGECRAFT_BIN_DIR) + "/stagecraft-cli"; }
  QStringList tiny(int nodes, int per_node, int steps) const {
    return {QString(STAGECRAFT_SOURCE_DIR) + "/configs/tiny-gpt.yaml",
            QString("cluster.nodes=%1").arg(nodes),
            QString("cluster.gpus_per_node=%1").arg(per_node),
            QString("train.steps=%1").arg(steps),
            "train.warmup_steps=5",
            "train.data=" + QString(STAGECRAFT_SOURCE_DIR) + "/configs/data/stagecraft.txt",
            "train.checkpoint_dir=" + lab_->dir() + "/checkpoints"};
  }
  // `run` of tests/integration/ddp_train.py as another program on `nodes` x `per_node` tasks.
  QStringList foreign(int nodes, int per_node) const {
    return {"run",
            QString(STAGECRAFT_SOURCE_DIR) + "/configs/tiny-gpt.yaml",
            QString("cluster.nodes=%1").arg(nodes),
            QString("cluster.gpus_per_node=%1").arg(per_node),
            "train.steps=6",
            "train.warmup_steps=2",
            "train.hang_timeout_s=120",
            "launch.python=/usr/bin/python3",
            "--worker",
            QString(STAGECRAFT_SOURCE_DIR) + "/tests/integration/ddp_train.py",
            "--slurm",
            "--partition",
            "lab",
            "--time",
            "00:05:00",
            "--db",
            db_};
  }
  int cli(const QStringList& args, QString* out, QString* err, int timeout_ms = 120000) {
    QProcess p;
    p.setWorkingDirectory(lab_->dir());
    p.start(cli_path(), args);
    if (!p.waitForFinished(timeout_ms)) {
      p.kill();
      p.waitForFinished();
      return -1;
    }
    *out = QString::fromUtf8(p.readAllStandardOutput());
    *err = QString::fromUtf8(p.readAllStandardError());
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  }
  std::unique_ptr<QProcess> start_cli(const QStringList& args) {
    auto p = std::make_unique<QProcess>();
    p->setWorkingDirectory(lab_->dir());
    p->start(cli_path(), args);
    return p;
  }
  // Reads the CLI's stdout until a line matches `re`; the lines read so far in `seen`.
  bool wait_for_line(QProcess& p, const QRegularExpression& re, QString& seen, int timeout_ms, QRegularExpressionMatch* m = nullptr) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < timeout_ms) {
      p.waitForReadyRead(100);
      seen += QString::fromUtf8(p.readAllStandardOutput());
      auto match = re.match(seen);
      if (match.hasMatch()) {
        if (m) *m = match;
        return true;
      }
      if (p.state() == QProcess::NotRunning) {
        seen += QString::fromUtf8(p.readAllStandardOutput());
        return re.match(seen).hasMatch();
      }
    }
    return false;
  }
  static QString job_of(const QString& out) {
    auto m = QRegularExpression("slurm job (\\d+) submitted").match(out);
    return m.hasMatch() ? m.captured(1) : QString();
  }
  static qint64 run_of(const QString& out) {
    auto m = QRegularExpression("^run (\\d+) ", QRegularExpression::MultilineOption).match(out);
    return m.hasMatch() ? m.captured(1).toLongLong() : -1;
  }
  // Every process of the job's run is gone (bounded wait: the job's teardown).
  bool nothing_left(const QString& job_id) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 20000) {
      if (SshLab::processes_of_run("slurm-" + job_id).isEmpty()) return true;
      QThread::msleep(200);
    }
    return false;
  }
  QJsonObject run_json(qint64 id) {
    QString out, err;
    if (cli({"runs", "show", QString::number(id), "--json", "--db", db_}, &out, &err) != 0) return {};
    return QJsonDocument::fromJson(out.toUtf8()).object();
  }
  // (step, rank) -> loss of a run's metrics.
  std::map<std::pair<int, int>, double> losses(qint64 id) {
    QString out, err;
    std::map<std::pair<int, int>, double> m;
    if (cli({"runs", "metrics", QString::number(id), "--csv", "--db", db_}, &out, &err) != 0) return m;
    for (const QString& line : out.split('\n', Qt::SkipEmptyParts).mid(1)) {
      const QStringList f = line.split(',');
      if (f.size() < 3 || f[2].isEmpty()) continue;
      m[{f[0].toInt(), f[1].toInt()}] = f[2].toDouble();
    }
    return m;
  }
  // Starts a long Slurm run and waits for its third step; job id and run id out.
  std::unique_ptr<QProcess> start_long_run(const QStringList& extra, QString* job, qint64* run) {
    auto p = start_cli(QStringList{"run"} + tiny(2, 2, 100000) + QStringList{"--slurm", "--partition", "lab", "--db", db_} + extra);
    QString seen;
    if (!wait_for_line(*p, QRegularExpression("^step 3/", QRegularExpression::MultilineOption), seen, 60000)) {
      qWarning("no step 3 from the run: %s / %s", qPrintable(seen), qPrintable(QString::fromUtf8(p->readAllStandardError())));
      return nullptr;
    }
    *job = job_of(seen);
    *run = run_of(seen);
    return p;
  }

 private Q_SLOTS:
  void initTestCase() {
    lab_ = std::make_unique<SlurmLab>(7);
    QVERIFY2(lab_->start(), qPrintable(lab_->error() + "\n" + lab_->log_tail("slurmctld.log")));
    // The nodes' /etc/hosts names only the nodes, not this machine's host name, by which
    // PyTorch's Gloo would pick its interface: name it (sbatch passes the environment on).
    qputenv("GLOO_SOCKET_IFNAME", "eth0");
    db_ = lab_->dir() + "/runs.sqlite";
  }

  // 2 nodes x 2 tasks through Slurm: the same losses as the same plan's local run.
  void trains_like_a_local_run() {
    QString out, err;
    QCOMPARE(cli(QStringList{"run"} + tiny(1, 4, 30) + QStringList{"--db", db_}, &out, &err), 0);
    const qint64 local = run_of(out);
    QCOMPARE(cli(QStringList{"run"} + tiny(2, 2, 30) + QStringList{"--slurm", "--partition", "lab", "--time", "00:05:00", "--db", db_}, &out,
                 &err),
             0);
    QVERIFY2(out.contains(QRegularExpression("^done: 30 steps", QRegularExpression::MultilineOption)), qPrintable(out + err));
    const qint64 slurm = run_of(out);
    const QString job = job_of(out);
    QVERIFY2(!job.isEmpty(), qPrintable(out));
    const auto a = losses(local), b = losses(slurm);
    QVERIFY(!a.empty());
    QCOMPARE(a.size(), b.size());
    for (const auto& [key, loss] : a) {
      QVERIFY2(b.count(key), qPrintable(QString("step %1 rank %2 missing").arg(key.first).arg(key.second)));
      // The same ranks, groups and Gloo collectives in the same order: the same floats, up to
      // the printing of the event (9 significant digits).
      QVERIFY2(std::abs(b.at(key) - loss) <= 1e-6 * std::max(1.0, std::abs(loss)),
               qPrintable(QString("step %1: local %2, slurm %3").arg(key.first).arg(loss).arg(b.at(key))));
    }
    const QJsonObject r = run_json(slurm);
    QCOMPARE(r["state"].toString(), QString("succeeded"));
    QString shown;
    QCOMPARE(cli({"runs", "show", QString::number(slurm), "--db", db_}, &shown, &err), 0);
    QVERIFY2(shown.contains("queued    -> running   Slurm job " + job + " RUNNING"), qPrintable(shown));
    QVERIFY2(shown.contains("slurm job    " + job + " COMPLETED"), qPrintable(shown));
    QCOMPARE(r["job_id"].toString(), job);
    QCOMPARE(r["job_state"].toString(), QString("COMPLETED"));
    // The nodes Slurm gave the job, in the history.
    QCOMPARE(r["job_nodes"].toString(), QString("sc7n[0-1]"));
    QVERIFY2(shown.contains("slurm nodes  sc7n[0-1]: ranks 0-1 on sc7n0, 2-3 on sc7n1\n"), qPrintable(shown));
    QCOMPARE(lab_->final_state(job), QString("COMPLETED"));
    QVERIFY(nothing_left(job));
  }

  // Another program (a PyTorch DDP program, Megatron-LM's arguments and lines) as 2 nodes x 2
  // tasks: torchrun's variables from Slurm's, the plan as its arguments, its lines as the run's
  // metrics, the job's nodes in the history.
  void another_program_on_two_nodes() {
    if (!QFile::exists("/usr/lib/python3/dist-packages/torch/__init__.py")) QSKIP("Debian's python3-torch is not installed");
    const QString out_dir = lab_->dir() + "/foreign-ranks";
    QVERIFY(QDir().mkpath(out_dir));
    QString out, err;
    QCOMPARE(cli(foreign(2, 2) + QStringList{"--framework", "megatron", "--", "--format", "megatron", "--out-dir", out_dir}, &out, &err, 240000),
             0);
    QVERIFY2(out.contains("exited 0 on every rank"), qPrintable(out + err));
    const qint64 run = run_of(out);
    const QString job = job_of(out);
    QVERIFY2(!job.isEmpty(), qPrintable(out));
    QString port;
    for (int rank = 0; rank < 4; ++rank) {
      QFile f(out_dir + QString("/rank-%1.json").arg(rank));
      QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(f.fileName()));
      const QJsonObject o = QJsonDocument::fromJson(f.readAll()).object();
      const QJsonObject env = o["env"].toObject();
      QCOMPARE(env["RANK"].toString(), QString::number(rank));
      QCOMPARE(env["LOCAL_RANK"].toString(), QString::number(rank % 2));
      QCOMPARE(env["WORLD_SIZE"].toString(), QString("4"));
      QCOMPARE(env["LOCAL_WORLD_SIZE"].toString(), QString("2"));
      QCOMPARE(env["GROUP_RANK"].toString(), QString::number(rank / 2));
      QCOMPARE(env["MASTER_ADDR"].toString(), QString("sc7n0"));
      if (rank == 0) port = env["MASTER_PORT"].toString();
      QCOMPARE(env["MASTER_PORT"].toString(), port);
      QStringList argv;
      for (const auto& a : o["argv"].toArray()) argv << a.toString();
      QVERIFY2(argv.join(' ').startsWith("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2"), qPrintable(argv.join(' ')));
    }
    QVERIFY(port.toInt() >= 20000);
    QString metrics;
    QCOMPARE(cli({"runs", "metrics", QString::number(run), "--json", "--db", db_}, &metrics, &err), 0);
    QList<int> steps;
    for (const auto& v : QJsonDocument::fromJson(metrics.toUtf8()).array()) {
      const QJsonObject m = v.toObject();
      QCOMPARE(m["rank"].toInt(), 3);  // Megatron prints on the last rank
      QVERIFY(m["loss"].isDouble() && m["tokens_per_s"].isDouble());
      steps << m["step"].toInt();
    }
    QCOMPARE(steps, (QList<int>{1, 2, 3, 4, 5, 6}));
    const QJsonObject r = run_json(run);
    QCOMPARE(r["state"].toString(), QString("succeeded"));
    QCOMPARE(r["job_state"].toString(), QString("COMPLETED"));
    QCOMPARE(r["job_nodes"].toString(), QString("sc7n[0-1]"));
    QCOMPARE(r["rank_nodes"].toArray(), (QJsonArray{"sc7n0", "sc7n0", "sc7n1", "sc7n1"}));
    QString list;
    QCOMPARE(cli({"runs", "list", "--db", db_}, &list, &err), 0);
    QVERIFY2(list.contains(QRegularExpression(QString("^%1 .* sc7n\\[0-1\\] ").arg(run), QRegularExpression::MultilineOption)), qPrintable(list));
    QVERIFY(nothing_left(job));
  }

  // One of its tasks killed: the run and the job fail, naming the rank; nothing is left.
  void another_program_killed_task_fails_the_job() {
    if (!QFile::exists("/usr/lib/python3/dist-packages/torch/__init__.py")) QSKIP("Debian's python3-torch is not installed");
    QString out, err;
    QCOMPARE(cli(foreign(2, 2) + QStringList{"--", "--steps", "50", "--step-sleep", "0.2", "--crash-rank", "3", "--crash-step", "2"}, &out, &err,
                 240000),
             1);
    QVERIFY2(err.contains("run failed: rank 3 killed by signal 9"), qPrintable(out + err));
    const QString job = job_of(out);
    QVERIFY2(!job.isEmpty(), qPrintable(out));
    QVERIFY2(lab_->final_state(job).startsWith("FAILED"), qPrintable(lab_->final_state(job)));
    QCOMPARE(run_json(run_of(out))["state"].toString(), QString("failed"));
    QVERIFY(nothing_left(job));
  }

  // From `run --slurm` to the first step event, on an idle cluster (reported, not asserted
  // beyond a generous bound: it is mostly Slurm's scheduling, sched_interval=1 here).
  void submit_to_first_step() {
    QList<double> seconds;
    for (int i = 0; i < 3; ++i) {
      QElapsedTimer t;
      t.start();
      auto p = start_cli(QStringList{"run"} + tiny(2, 2, 5) + QStringList{"--slurm", "--partition", "lab", "--db", db_});
      QString seen;
      QVERIFY2(wait_for_line(*p, QRegularExpression("^step 1/", QRegularExpression::MultilineOption), seen, 60000), qPrintable(seen));
      seconds << t.elapsed() / 1000.0;
      QVERIFY(p->waitForFinished(60000));
      QCOMPARE(p->exitCode(), 0);
    }
    std::sort(seconds.begin(), seconds.end());
    qInfo("submit to first step over Slurm (2 nodes x 2 tasks, sched_interval=1 s): %.2f s median, %.2f s min, %.2f s max", seconds[1],
          seconds[0], seconds[2]);
    QVERIFY(seconds[1] < 30);
  }

  // A task killed with SIGKILL fails the run and the job, naming the rank.
  void killed_task_fails_run_and_job() {
    QString job;
    qint64 run = -1;
    auto p = start_long_run({}, &job, &run);
    QVERIFY(p && !job.isEmpty());
    const QList<int> rank3 = processes_with({"STAGECRAFT_RUN_ID=slurm-" + job.toUtf8(), "SLURM_PROCID=3"}, true);
    QCOMPARE(rank3.size(), 1);
    ::kill(rank3.front(), SIGKILL);
    QVERIFY(p->waitForFinished(90000));
    const QString err = QString::fromUtf8(p->readAllStandardError());
    QCOMPARE(p->exitCode(), 1);
    QVERIFY2(err.contains("run failed: rank 3 killed by signal 9"), qPrintable(err));
    QVERIFY2(err.contains("Slurm job " + job), qPrintable(err));
    QVERIFY2(lab_->final_state(job).startsWith("FAILED"), qPrintable(lab_->final_state(job)));
    const QJsonObject r = run_json(run);
    QCOMPARE(r["state"].toString(), QString("failed"));
    QVERIFY2(r["reason"].toString().contains("rank 3"), qPrintable(r["reason"].toString()));
    QVERIFY(nothing_left(job));
  }

  // runs cancel ends the job: sacct shows CANCELLED, the run is cancelled, nothing is left.
  void runs_cancel_cancels_the_job() {
    QString job;
    qint64 run = -1;
    auto p = start_long_run({}, &job, &run);
    QVERIFY(p && !job.isEmpty());
    QString out, err;
    QCOMPARE(cli({"runs", "cancel", QString::number(run), "--db", db_}, &out, &err), 0);
    QVERIFY2(out.contains("cancelled"), qPrintable(out + err));
    QVERIFY(p->waitForFinished(60000));
    QVERIFY2(lab_->final_state(job).startsWith("CANCELLED"), qPrintable(lab_->final_state(job)));
    const QJsonObject r = run_json(run);
    QCOMPARE(r["state"].toString(), QString("cancelled"));
    QVERIFY2(r["reason"].toString().startsWith("cancelled on request; Slurm job " + job + " CANCELLED"), qPrintable(r["reason"].toString()));
    QVERIFY(nothing_left(job));
  }

  // A job that reaches its time limit ends the run with Slurm's reason.
  void time_limit_ends_the_run() {
    QString job;
    qint64 run = -1;
    auto p = start_long_run({"--time", "1"}, &job, &run);
    QVERIFY(p && !job.isEmpty());
    // Slurm enforces limits every 30 s: the job ends 60-90 s after it started.
    QVERIFY(p->waitForFinished(180000));
    const QString err = QString::fromUtf8(p->readAllStandardError());
    QCOMPARE(p->exitCode(), 1);
    QVERIFY2(err.contains("Slurm ended job " + job + ": TIMEOUT"), qPrintable(err));
    QVERIFY2(err.contains("time limit"), qPrintable(err));
    QVERIFY2(lab_->final_state(job).startsWith("TIMEOUT"), qPrintable(lab_->final_state(job)));
    const QJsonObject r = run_json(run);
    QCOMPARE(r["state"].toString(), QString("failed"));
    QVERIFY2(r["reason"].toString().contains("TIMEOUT"), qPrintable(r["reason"].toString()));
    QVERIFY(nothing_left(job));
  }

  // While Slurm holds the job the run is queued with Slurm's reason; cancelling it then works.
  void queued_with_slurms_reason() {
    QString out, err;
    QCOMPARE(lab_->slurm({"sbatch", "--parsable", "-N2", "--ntasks-per-node=2", "-o", "/dev/null", "--wrap", "sleep 600"}, &out, &err), 0);
    const QString blocker = out.trimmed();
    QCOMPARE(cli(QStringList{"run"} + tiny(2, 2, 30) + QStringList{"--slurm", "--partition", "lab", "--detach", "--db", db_}, &out, &err), 0);
    const qint64 run = run_of(out);
    QJsonObject r;
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 20000) {
      r = run_json(run);
      // Right after sbatch Slurm says PENDING (None) until its scheduler has looked at the job.
      if (r["job_state"].toString() == "PENDING" && (r["job_reason"].toString() == "Resources" || r["job_reason"].toString() == "Priority")) break;
      QThread::msleep(200);
    }
    QCOMPARE(r["state"].toString(), QString("queued"));
    QCOMPARE(r["job_state"].toString(), QString("PENDING"));
    QVERIFY2(r["job_reason"].toString() == "Resources" || r["job_reason"].toString() == "Priority", qPrintable(r["job_reason"].toString()));
    const QString job = r["job_id"].toString();
    QCOMPARE(cli({"runs", "cancel", QString::number(run), "--db", db_}, &out, &err), 0);
    QCOMPARE(run_json(run)["state"].toString(), QString("cancelled"));
    QVERIFY2(lab_->final_state(job).startsWith("CANCELLED"), qPrintable(lab_->final_state(job)));
    QCOMPARE(lab_->slurm({"scancel", blocker}), 0);
    QVERIFY(lab_->final_state(blocker).startsWith("CANCELLED"));
  }

  // A supervisor that dies leaves the run lost with its job id; runs cancel then ends the job.
  void dead_supervisor_leaves_run_lost() {
    QString job;
    qint64 run = -1;
    auto p = start_long_run({}, &job, &run);
    QVERIFY(p && !job.isEmpty());
    p->kill();  // SIGKILL: no chance to record anything
    p->waitForFinished();
    QString out, err;
    QCOMPARE(cli({"runs", "list", "--db", db_}, &out, &err), 0);
    const QJsonObject r = run_json(run);
    QCOMPARE(r["state"].toString(), QString("lost"));
    QCOMPARE(r["job_id"].toString(), job);
    QVERIFY2(r["reason"].toString().contains("Slurm job " + job), qPrintable(r["reason"].toString()));
    QCOMPARE(cli({"runs", "cancel", QString::number(run), "--db", db_}, &out, &err), 0);
    QVERIFY2(out.contains("cancelled its Slurm job " + job), qPrintable(out + err));
    QVERIFY2(lab_->final_state(job).startsWith("CANCELLED"), qPrintable(lab_->final_state(job)));
    QVERIFY(nothing_left(job));
  }

  // export --to slurm writes a script sbatch accepts; run --slurm --dry-run prints the same kind.
  void export_accepted_by_sbatch_test_only() {
    const QString file = lab_->dir() + "/run.sbatch";
    QString out, err;
    QCOMPARE(cli(QStringList{"export"} + tiny(2, 2, 30) + QStringList{"--to", "slurm", "-o", file, "--partition", "lab", "--time", "10"}, &out, &err), 0);
    QVERIFY2(out.contains("wrote " + file), qPrintable(out + err));
    QCOMPARE(lab_->slurm({"sbatch", "--test-only", file}, &out, &err), 0);
    QVERIFY2(err.contains("to start at"), qPrintable(err));
    QCOMPARE(cli(QStringList{"run"} + tiny(2, 2, 30) + QStringList{"--slurm", "--dry-run"}, &out, &err), 0);
    QVERIFY2(out.startsWith("#!/bin/sh\n") && out.contains("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n"), qPrintable(out));
  }

  void preflight_and_bad_input_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("message");
    QTest::newRow("preflight ok") << QStringList{"preflight", "--slurm", "--partition", "lab"} << 0 << "slurm: ok";
    QTest::newRow("preflight default partition") << QStringList{"preflight", "--slurm"} << 0 << "slurm: partition lab: 2 node(s), at least 2 CPUs";
    QTest::newRow("preflight unknown partition") << QStringList{"preflight", "--slurm", "--partition", "gpu"} << 1
                                                 << "stagecraft-cli: error: --partition=gpu: no such partition; sinfo lists lab";
    QTest::newRow("preflight account allowed") << QStringList{"preflight", "--slurm", "--account", "lab"} << 0 << "slurm: sbatch --test-only: Job";
    QTest::newRow("preflight account not allowed") << QStringList{"preflight", "--slurm", "--account", "other"} << 1
                                                   << "Invalid account or account/partition combination specified (account other)";
    QTest::newRow("run unknown partition") << QStringList{"run", "--slurm", "--partition", "gpu"} << 2
                                           << "stagecraft-cli: error: sbatch: Batch job submission failed: Invalid partition name specified (--partition=gpu;";
    QTest::newRow("run bad time") << QStringList{"run", "--slurm", "--time", "1:99"} << 2
                                  << "stagecraft-cli: error: --time=1:99: not a Slurm time limit";
    QTest::newRow("run sbatch arg sets nodes") << QStringList{"run", "--slurm", "--sbatch-arg=--nodes=3"} << 2
                                               << "stagecraft-cli: error: --sbatch-arg=--nodes=3: --nodes is set by Stagecraft";
    QTest::newRow("partition without --slurm") << QStringList{"run", "--partition", "lab"} << 2
                                               << "stagecraft-cli: error: run: --partition is a Slurm option; give --slurm too";
    // Another program, checked on a node of the partition by a one-task srun.
    const QString script = QStringLiteral(STAGECRAFT_SOURCE_DIR "/tests/integration/ddp_train.py");
    QTest::newRow("preflight another program") << QStringList{"preflight", "--slurm", "--worker", script, "launch.python=/usr/bin/python3"} << 0
                                               << "slurm: " + script + " is there on sc7n";
    QTest::newRow("preflight a missing program") << QStringList{"preflight", "--slurm", "--worker", "/nonexistent/train.py"} << 1
                                                 << "stagecraft-cli: error: slurm node sc7n";
    QTest::newRow("preflight a missing interpreter")
        << QStringList{"preflight", "--slurm", "--worker", script, "launch.python=no-such-python3"} << 1
        << "no no-such-python3 in PATH to run " + script + "; install it or set launch.python";
    QTest::newRow("export another program") << QStringList{"export", "--to", "slurm", "--worker", script} << 2
                                            << "stagecraft-cli: error: export --to slurm: --worker=" + script +
                                                   ": the exported script starts Stagecraft's own worker";
  }
  void preflight_and_bad_input() {
    QFETCH(QStringList, args);
    QFETCH(int, status);
    QFETCH(QString, message);
    QStringList argv = {args.front()};
    argv += tiny(2, 2, 30);
    argv += args.mid(1);
    if (args.front() == "run") argv += {"--db", db_};
    QString out, err;
    QCOMPARE(cli(argv, &out, &err), status);
    const QString text = status == 0 ? out : err;
    QVERIFY2(text.contains(message), qPrintable(out + err));
    if (status != 0) QCOMPARE(err.trimmed().count('\n'), 0);  // one line
  }
};

int main(int argc, char** argv) {
  QCoreApplication app(argc, argv);
  if (const QString why = SlurmLab::can_run(); !why.isEmpty()) {
    std::printf("SKIPPED: %s\n", qPrintable(why));
    return 77;
  }
  TestSlurmRun t;
  return QTest::qExec(&t, argc, argv);
}

#include "tst_slurm_run.moc"
