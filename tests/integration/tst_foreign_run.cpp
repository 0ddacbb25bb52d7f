// Another program as a run's ranks: `stagecraft-cli run CONFIG --worker PROGRAM [-- ARGS]` with a
// real PyTorch DDP script (tests/integration/ddp_train.py, Debian's python3-torch, gloo) on 4
// local ranks and on 2 SSH nodes x 2 ranks (real sshds on 127.0.0.1, ssh_lab.h): torchrun's
// environment, its metric lines as step events in the history (`runs metrics`), a killed rank
// failing the run and leaving no process, a silent program failed as hung, the plan passed as
// Megatron-LM's and DeepSpeed's arguments, detach and cancel, and the refusals.
#include <QtTest>

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QElapsedTimer>
#include <QThread>

#include <cmath>

#include "../cli/cli_process.h"
#include "ssh_lab.h"

namespace {

constexpr const char* kPython = "/usr/bin/python3";
const QString kScript = QStringLiteral(STAGECRAFT_SOURCE_DIR "/tests/integration/ddp_train.py");

using Cli = stagecraft::testing::CliRun;

// Process ids whose command line holds `tag` (the ranks of one test run and, remote, their
// wrappers), this process excluded.
QList<int> processes_with(const QString& tag) {
  QList<int> pids;
  const QByteArray needle = tag.toUtf8();
  for (const QString& entry : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool number = false;
    const int pid = entry.toInt(&number);
    if (!number || pid == QCoreApplication::applicationPid()) continue;
    QFile f("/proc/" + entry + "/cmdline");
    if (f.open(QIODevice::ReadOnly) && f.readAll().contains(needle)) pids << pid;
  }
  return pids;
}

// True once no process carries `tag`, waiting up to 10 s (remote wrappers end just after).
bool no_process_left(const QString& tag) {
  QElapsedTimer t;
  t.start();
  while (!processes_with(tag).isEmpty()) {
    if (t.elapsed() > 10000) return false;
    QThread::msleep(100);
  }
  return true;
}

}  // namespace

class TestForeignRun : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  QString config_;
  QString db_;
  std::unique_ptr<SshLab> lab_;
  QString hostfile_;
  QString labSkip_;
  int tags_ = 0;

  Cli cli(const QStringList& args, int timeout_ms = 180000) {
    return stagecraft::testing::run_cli(args, QProcessEnvironment::systemEnvironment(), timeout_ms, dir_.path());
  }
  QString newTag() { return QString("sc-foreign-%1-%2").arg(QCoreApplication::applicationPid()).arg(++tags_); }
  QString outDir(const QString& tag) {
    const QString d = dir_.path() + "/" + tag;
    QDir().mkpath(d);
    return d;
  }
  QStringList remote() { return {"--hosts", hostfile_, "--ssh-config", lab_->ssh_config(), "--known-hosts", lab_->known_hosts()}; }
  static qint64 runId(const Cli& r) {
    const auto m = QRegularExpression("^run (\\d+) ", QRegularExpression::MultilineOption).match(r.out);
    return m.hasMatch() ? m.captured(1).toLongLong() : -1;
  }
  QJsonArray metrics(qint64 id) {
    const Cli r = cli({"runs", "metrics", QString::number(id), "--json", "--db", db_});
    return QJsonDocument::fromJson(r.out.toUtf8()).array();
  }
  QJsonObject show(qint64 id) {
    const Cli r = cli({"runs", "show", QString::number(id), "--json", "--db", db_});
    return QJsonDocument::fromJson(r.out.toUtf8()).object();
  }
  // rank-R.json written by each rank of ddp_train.py.
  static QJsonObject rankFile(const QString& dir, int rank) {
    QFile f(dir + QString("/rank-%1.json").arg(rank));
    return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object() : QJsonObject();
  }
  static QStringList strings(const QJsonValue& v) {
    QStringList out;
    for (const auto& x : v.toArray()) out << x.toString();
    return out;
  }
  // The steps of `rank`'s metric rows, in order, and checks every row has a finite loss.
  static QList<int> stepsOf(const QJsonArray& rows, int rank) {
    QList<int> steps;
    for (const auto& v : rows) {
      const QJsonObject o = v.toObject();
      if (o["rank"].toInt() != rank) continue;
      steps << o["step"].toInt();
    }
    return steps;
  }

 private Q_SLOTS:
  void initTestCase() {
    if (!QFile::exists("/usr/lib/python3/dist-packages/torch/__init__.py")) QSKIP("Debian's python3-torch is not installed");
    QVERIFY(dir_.isValid());
    config_ = dir_.path() + "/foreign.yaml";
    db_ = dir_.path() + "/runs.sqlite";
    QFile f(config_);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("name: foreign-test\n"
            "cluster: {nodes: 1, gpus_per_node: 4, device: cpu}\n"
            "model: {layers: 4, hidden: 64, heads: 4, seq_len: 32, vocab: 256}\n"
            "parallel: {dp: 4}\n"
            "train: {global_batch: 8, micro_batch: 1, steps: 6, hang_timeout_s: 60}\n"
            "launch: {python: /usr/bin/python3}\n");
    f.close();
    labSkip_ = SshLab::can_run(false);
    if (labSkip_.isEmpty()) {
      lab_ = std::make_unique<SshLab>(5);
      QVERIFY2(lab_->ok(), qPrintable(lab_->error()));
      QVERIFY2(lab_->add_loopback_node() && lab_->add_loopback_node(), qPrintable(lab_->error()));
      hostfile_ = lab_->dir() + "/hosts";
      QVERIFY(lab_->write_file(hostfile_, "loop0 slots=2\nloop1 slots=2\n"));
      // loop2: four GPUs, as a stand-in nvidia-smi lists them (preflight counts them for backend cuda).
      const QString four = lab_->stand_in_nvidia_smi(4);
      QVERIFY2(!four.isEmpty() && lab_->add_loopback_node(four), qPrintable(lab_->error()));
    }
  }

  // 4 local ranks, Megatron-LM's lines on the last rank, the plan passed as Megatron's arguments.
  void localRanksWithMegatronLines() {
    const QString tag = newTag(), out = outDir(tag);
    const Cli r = cli({"run", config_, "train.lr=0.04", "--db", db_, "--worker", kScript, "--framework", "megatron", "--", "--format", "megatron",
                       "--out-dir", out, "--tag", tag});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("done: " + kScript + " exited 0 on every rank"), qPrintable(r.out));
    // torchrun's environment; one MASTER_PORT for every rank.
    QString port;
    for (int rank = 0; rank < 4; ++rank) {
      const QJsonObject env = rankFile(out, rank)["env"].toObject();
      QCOMPARE(env["RANK"].toString(), QString::number(rank));
      QCOMPARE(env["LOCAL_RANK"].toString(), QString::number(rank));
      QCOMPARE(env["WORLD_SIZE"].toString(), QString("4"));
      QCOMPARE(env["LOCAL_WORLD_SIZE"].toString(), QString("4"));
      QCOMPARE(env["GROUP_RANK"].toString(), QString("0"));
      QCOMPARE(env["MASTER_ADDR"].toString(), QString("127.0.0.1"));
      if (rank == 0) port = env["MASTER_PORT"].toString();
      QCOMPARE(env["MASTER_PORT"].toString(), port);
      QCOMPARE(rankFile(out, rank)["cwd"].toString(), QDir(dir_.path()).canonicalPath());
    }
    QVERIFY(port.toInt() > 0);
    // The plan as Megatron's arguments, before the ones after --.
    const QStringList argv = strings(rankFile(out, 0)["argv"]);
    QVERIFY2(argv.join(' ').startsWith("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 4 --hidden-size 64"),
             qPrintable(argv.join(' ')));
    QVERIFY2(argv.join(' ').contains("--micro-batch-size 1 --global-batch-size 8 --train-iters 6"), qPrintable(argv.join(' ')));
    QCOMPARE(argv.mid(argv.indexOf("--format"), 2), (QStringList{"--format", "megatron"}));

    const qint64 id = runId(r);
    QVERIFY(id > 0);
    const QJsonArray rows = metrics(id);
    QCOMPARE(stepsOf(rows, 3), (QList<int>{1, 2, 3, 4, 5, 6}));
    QCOMPARE(rows.size(), 6);  // only the last rank prints
    double first = 0, last = 0;
    for (const auto& v : rows) {
      const QJsonObject o = v.toObject();
      QVERIFY2(o["loss"].isDouble() && o["grad_norm"].isDouble() && o["step_ms"].isDouble() && o["tokens_per_s"].isDouble(),
               qPrintable(QJsonDocument(o).toJson(QJsonDocument::Compact)));
      QCOMPARE(o["lr"].toDouble(), 0.04);  // train.lr, reaching the program as Megatron's --lr
      if (o["step"].toInt() == 1) first = o["loss"].toDouble();
      if (o["step"].toInt() == 6) last = o["loss"].toDouble();
    }
    QVERIFY2(last < first / 2, qPrintable(QString("loss %1 -> %2").arg(first).arg(last)));  // it trains
    // Lines that are no metric are the run's logs; so are the metric lines themselves.
    const Cli logs = cli({"runs", "logs", QString::number(id), "--db", db_});
    QVERIFY2(logs.out.contains("[rank 2] rank 2 of 4: process group ready"), qPrintable(logs.out));
    QVERIFY2(logs.out.contains(QRegularExpression("\\[rank 3\\]  \\[[^]]+\\] iteration        6/       6 \\|")), qPrintable(logs.out));
    QCOMPARE(show(id)["state"].toString(), QString("succeeded"));
    QVERIFY(no_process_left(tag));
  }

  // 2 SSH nodes x 2 ranks, nanoGPT's lines on rank 0.
  void remoteRanksWithNanogptLines() {
    if (!labSkip_.isEmpty()) QSKIP(qPrintable(labSkip_));
    const QString tag = newTag(), out = outDir(tag);
    const Cli r = cli(QStringList{"run", config_, "--db", db_, "--worker", kScript} + remote() +
                      QStringList{"--", "--format", "nanogpt", "--out-dir", out, "--tag", tag});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("loop0: ok") && r.out.contains("loop1: ok"), qPrintable(r.out));
    QString port;
    for (int rank = 0; rank < 4; ++rank) {
      const QJsonObject env = rankFile(out, rank)["env"].toObject();
      QCOMPARE(env["RANK"].toString(), QString::number(rank));
      QCOMPARE(env["LOCAL_RANK"].toString(), QString::number(rank % 2));
      QCOMPARE(env["LOCAL_WORLD_SIZE"].toString(), QString("2"));
      QCOMPARE(env["GROUP_RANK"].toString(), QString::number(rank / 2));
      QCOMPARE(env["WORLD_SIZE"].toString(), QString("4"));
      QCOMPARE(env["MASTER_ADDR"].toString(), QString("127.0.0.1"));  // node 0's address
      if (rank == 0) port = env["MASTER_PORT"].toString();
      QCOMPARE(env["MASTER_PORT"].toString(), port);
    }
    const qint64 id = runId(r);
    const QJsonArray rows = metrics(id);
    QCOMPARE(stepsOf(rows, 0), (QList<int>{1, 2, 3, 4, 5, 6}));
    QCOMPARE(rows.size(), 6);
    for (const auto& v : rows) QVERIFY(v.toObject()["loss"].isDouble() && v.toObject()["step_ms"].isDouble());
    const QJsonObject run = show(id);
    QCOMPARE(run["state"].toString(), QString("succeeded"));
    QVERIFY(no_process_left(tag));
  }

  // backend cuda with some of a node's GPUs selected (--include): the program's ranks see those
  // GPUs in CUDA_VISIBLE_DEVICES and pick theirs by LOCAL_RANK, as under torchrun.
  void remoteRanksSeeTheSelectedGpus() {
    if (!labSkip_.isEmpty()) QSKIP(qPrintable(labSkip_));
    const QString tag = newTag(), out = outDir(tag), hosts = lab_->dir() + "/gpu_hosts";
    QVERIFY(lab_->write_file(hosts, "loop2 slots=4\n"));
    const Cli r = cli({"run", config_, "backend=cuda", "cluster.device=H100-SXM", "cluster.gpus_per_node=2", "parallel.dp=2", "--db", db_, "--worker", kScript,
                       "--hosts", hosts, "--include", "loop2:1,3", "--ssh-config", lab_->ssh_config(), "--known-hosts",
                       lab_->known_hosts(), "--", "--format", "nanogpt", "--out-dir", out, "--tag", tag});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("loop2: ok (") && r.out.contains("4 x NVIDIA H100 80GB HBM3"), qPrintable(r.out));
    for (int rank = 0; rank < 2; ++rank) {
      const QJsonObject env = rankFile(out, rank)["env"].toObject();
      QCOMPARE(env["CUDA_VISIBLE_DEVICES"].toString(), QString("1,3"));
      QCOMPARE(env["LOCAL_RANK"].toString(), QString::number(rank));
    }
    QVERIFY(no_process_left(tag));
  }

  // One rank killed (SIGKILL) mid-run: the run fails at once and no rank is left, on any node.
  void killedRankFailsTheRun_data() {
    QTest::addColumn<bool>("isRemote");
    QTest::addColumn<int>("rank");
    QTest::newRow("local rank 1") << false << 1;
    QTest::newRow("remote rank 3 (node 1)") << true << 3;
  }
  void killedRankFailsTheRun() {
    QFETCH(bool, isRemote);
    QFETCH(int, rank);
    if (isRemote && !labSkip_.isEmpty()) QSKIP(qPrintable(labSkip_));
    const QString tag = newTag();
    QStringList args = {"run", config_, "--db", db_, "--worker", kScript};
    if (isRemote) args += remote();
    args += {"--", "--format", "jsonl", "--steps", "1000", "--step-sleep", "0.05", "--crash-rank", QString::number(rank),
             "--crash-step", "3", "--tag", tag};
    const Cli r = cli(args);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(QRegularExpression("error: run failed: rank \\d ")), qPrintable(r.err));
    const QJsonObject run = show(runId(r));
    QCOMPARE(run["state"].toString(), QString("failed"));
    QVERIFY2(no_process_left(tag), qPrintable(tag));
  }

  // A program that stops printing fails as hung once train.hang_timeout_s passes without output.
  void silentProgramFailsAsHung() {
    const QString tag = newTag();
    const Cli r = cli({"run", config_, "train.hang_timeout_s=4", "--db", db_, "--worker", kScript, "--", "--format", "nanogpt",
                       "--hang-step", "2", "--tag", tag});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("run hung: no output from any rank for 4 s (train.hang_timeout_s)"), qPrintable(r.err));
    const qint64 id = runId(r);
    QCOMPARE(stepsOf(metrics(id), 0), (QList<int>{1, 2}));
    QCOMPARE(show(id)["state"].toString(), QString("failed"));
    QVERIFY(no_process_left(tag));
  }

  // launch.framework=deepspeed writes the plan's ds_config.json and passes it; launch.args and the
  // arguments after -- follow; DeepSpeed's three lines per step become one event each.
  void deepspeedArgumentsAndLines() {
    const QString tag = newTag(), out = outDir(tag);
    const Cli r = cli({"run", config_, "launch.framework=deepspeed", "launch.args=--note 'two words' --format deepspeed", "--db", db_,
                       "--worker", kScript, "--", "--steps", "3", "--out-dir", out, "--tag", tag});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QStringList argv = strings(rankFile(out, 1)["argv"]);
    QCOMPARE(argv.mid(0, 6), (QStringList{"--deepspeed", "--deepspeed_config", ".stagecraft/foreign-test-ds_config.json", "--note",
                                          "two words", "--format"}));
    QFile ds(dir_.path() + "/.stagecraft/foreign-test-ds_config.json");
    QVERIFY(ds.open(QIODevice::ReadOnly));
    const QJsonObject dsc = QJsonDocument::fromJson(ds.readAll()).object();
    QCOMPARE(dsc["train_batch_size"].toInt(), 8);
    QCOMPARE(dsc["train_micro_batch_size_per_gpu"].toInt(), 1);
    const QJsonArray rows = metrics(runId(r));
    QCOMPARE(stepsOf(rows, 0), (QList<int>{1, 2, 3}));
    for (const auto& v : rows) {
      const QJsonObject o = v.toObject();
      QVERIFY(o["loss"].isDouble() && o["tokens_per_s"].isDouble() && o["step_ms"].isDouble());
      QCOMPARE(o["lr"].toDouble(), 0.05);
      QCOMPARE(o["mem_bytes"].toDouble(), std::round(0.02 * 1024 * 1024 * 1024));  // MaxMemAllocated=0.02GB
    }
    QVERIFY(no_process_left(tag));
  }

  // torchtitan: the plan as its --section.option options, its coloured step lines as metrics
  // with its own TFLOP/s and MFU.
  void torchtitanOptionsAndLines() {
    const QString tag = newTag(), out = outDir(tag);
    const Cli r = cli({"run", config_, "--db", db_, "--worker", kScript, "--framework", "torchtitan", "--", "--format",
                       "torchtitan", "--steps", "3", "--out-dir", out, "--tag", tag});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QString argv = strings(rankFile(out, 2)["argv"]).join(' ');
    for (const char* a : {"--parallelism.data_parallel_replicate_degree 4 --parallelism.data_parallel_shard_degree 1",
                          "--parallelism.tensor_parallel_degree 1", "--training.num_tokens_per_train_step 256", "--training.steps 6",
                          "--training.mixed_precision_param float32", "--debug.seed"}) {
      QVERIFY2(argv.contains(QString::fromUtf8(a)), qPrintable(QString::fromUtf8(a) + " in " + argv));
    }
    QVERIFY2(r.err.contains("note: the model comes from the configuration (--module, --config)"), qPrintable(r.err));
    const QJsonArray rows = metrics(runId(r));
    QCOMPARE(stepsOf(rows, 0), (QList<int>{1, 2, 3}));
    for (const auto& v : rows) {
      const QJsonObject o = v.toObject();
      QVERIFY2(o["loss"].isDouble() && o["grad_norm"].isDouble() && o["tokens_per_s"].isDouble(), qPrintable(QJsonDocument(o).toJson()));
      QCOMPARE(o["tflops"].toDouble(), 0.42);
      QCOMPARE(o["mfu"].toDouble(), 0.0125);
      QCOMPARE(o["mem_bytes"].toDouble(), std::round(0.01 * 1024 * 1024 * 1024));
    }
    QVERIFY(no_process_left(tag));
  }

  // A detached run goes on after `run` returns; `runs cancel` stops every rank.
  void detachedRunIsCancellable() {
    const QString tag = newTag();
    const Cli r = cli({"run", config_, "--detach", "--db", db_, "--worker", kScript, "--", "--format", "jsonl", "--steps", "100000",
                       "--step-sleep", "0.1", "--tag", tag});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const qint64 id = runId(r);
    QVERIFY(id > 0);
    QTRY_VERIFY_WITH_TIMEOUT(metrics(id).size() >= 2, 120000);
    const Cli c = cli({"runs", "cancel", QString::number(id), "--db", db_});
    QVERIFY2(c.code == 0, qPrintable(c.out + c.err));
    QTRY_COMPARE_WITH_TIMEOUT(show(id)["state"].toString(), QString("cancelled"), 30000);
    QVERIFY(no_process_left(tag));
  }

  // What cannot apply is refused with one line before anything starts.
  void refusals_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("--framework of a config-file framework")
        << QStringList{"--worker", kScript, "--framework", "libai"}
        << "run: --framework=libai: megatron, deepspeed or torchtitan (the others take their plan as a config file: export --to)";
    QTest::newRow("launch.framework without a program")
        << QStringList{"launch.framework=megatron"}
        << "launch.framework=megatron: passes the plan to another framework's program; set launch.program (--worker PROGRAM) too";
    QTest::newRow("launch.args without a program") << QStringList{"launch.args=--x"} << "launch.args=--x: applies to another program's run";
    QTest::newRow("arguments after -- without a program")
        << QStringList{"--", "--x"} << "run: the arguments after -- go to another program; give --worker PROGRAM";
    QTest::newRow("the engine's resume") << QStringList{"train.resume=ckpt/step-4", "--worker", kScript}
                                         << "train.resume=ckpt/step-4: resumes Stagecraft's own engine";
    QTest::newRow("the engine's checkpoints") << QStringList{"train.checkpoint_every=2", "--worker", kScript}
                                              << "train.checkpoint_every=2: checkpoints of Stagecraft's own engine";
    QTest::newRow("launch.args that do not split") << QStringList{"launch.args=--note 'open", "--worker", kScript}
                                                   << "launch.args: unclosed single quote at column 8";
    QTest::newRow("a plan Megatron cannot run") << QStringList{"parallel.tp_mode=2d", "parallel.tp=4", "parallel.dp=1", "--worker", kScript,
                                                               "--framework", "megatron"}
                                                << "launch.framework=megatron: parallel.tp_mode=2d";
    QTest::newRow("missing program here") << QStringList{"--worker", "/nonexistent/train.sh"}
                                          << "launch.program=/nonexistent/train.sh: no such file here";
    QTest::newRow("missing interpreter") << QStringList{"launch.python=/nonexistent/python3", "--worker", kScript}
                                         << "launch.python=/nonexistent/python3: not found";
  }
  void refusals() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const Cli r = cli(QStringList{"run", config_, "--db", dir_.path() + "/refused.sqlite"} + args);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.startsWith("stagecraft-cli: error: " + message), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(!r.out.contains("run "));  // nothing recorded, nothing started
  }

  // Preflight checks the program (and a .py program's interpreter) on every host.
  void preflightFindsAMissingProgram() {
    if (!labSkip_.isEmpty()) QSKIP(qPrintable(labSkip_));
    Cli r = cli(QStringList{"preflight", config_, "--worker", "no_such_train.py"} + remote());
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("loop0: no program no_such_train.py in " + dir_.path()), qPrintable(r.err));
    QVERIFY2(r.err.contains("loop1: no program no_such_train.py in "), qPrintable(r.err));
    r = cli(QStringList{"preflight", config_, "launch.python=no-such-python3", "--worker", kScript} + remote());
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("loop0: no no-such-python3 in PATH to run " + kScript), qPrintable(r.err));
    r = cli(QStringList{"preflight", config_, "--worker", kScript} + remote());
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("loop0: ok") && r.out.contains("loop1: ok"), qPrintable(r.out));
    // run does the same first, and starts nothing.
    r = cli(QStringList{"run", config_, "--db", db_, "--worker", "./missing.sh"} + remote());
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("loop0: no program ./missing.sh in "), qPrintable(r.err));
  }
};

QTEST_GUILESS_MAIN(TestForeignRun)
#include "tst_foreign_run.moc"
