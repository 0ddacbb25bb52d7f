// Slurm without a cluster: --time formats, option checks, host lists, the torchrun environment a
// worker takes from Slurm's variables, Slurm's answers parsed, and the batch script. The real
// cluster is tests/integration/tst_slurm_run.cpp.
#include <map>

#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/worker_env.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>

using namespace stagecraft;

namespace {

constexpr const char* kTiny = R"(name: tiny
cluster: {nodes: 2, gpus_per_node: 2, device: cpu}
model: {layers: 4, hidden: 64, heads: 4, seq_len: 32, vocab: 256}
parallel: {dp: 2, tp: 1, pp: 2}
train: {global_batch: 8, micro_batch: 2, steps: 10, warmup_steps: 2, data: data.txt}
backend: cpu
)";

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> parse_env(const QString& text) {
  std::map<std::string, std::string> m;
  for (const QString& kv : text.split(' ', Qt::SkipEmptyParts)) m[kv.section('=', 0, 0).toStdString()] = kv.section('=', 1).toStdString();
  return m;
}

}  // namespace

class TestSlurm : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void time_formats_data() {
    QTest::addColumn<QString>("time");
    QTest::addColumn<bool>("ok");
    QTest::newRow("minutes") << "30" << true;
    QTest::newRow("zero: no limit") << "0" << true;
    QTest::newRow("minutes:seconds") << "90:30" << true;
    QTest::newRow("hours:minutes:seconds") << "01:30:00" << true;
    QTest::newRow("many hours") << "36:00:00" << true;
    QTest::newRow("days-hours") << "2-12" << true;
    QTest::newRow("days-hours:minutes") << "2-12:30" << true;
    QTest::newRow("days-hours:minutes:seconds") << "2-12:30:15" << true;
    QTest::newRow("unlimited") << "unlimited" << true;
    QTest::newRow("seconds past 59") << "1:99" << false;
    QTest::newRow("minutes past 59") << "1:60:00" << false;
    QTest::newRow("hours past 23 with days") << "1-24" << false;
    QTest::newRow("four fields") << "1:2:3:4" << false;
    QTest::newRow("unit letters") << "1h" << false;
    QTest::newRow("negative") << "-1" << false;
    QTest::newRow("empty") << "" << false;
  }
  void time_formats() {
    QFETCH(QString, time);
    QFETCH(bool, ok);
    const Status s = launch::check_slurm_time(time.toStdString());
    QCOMPARE(s.ok(), ok);
    if (!ok) QVERIFY2(s.message().rfind("--time=" + time.toStdString() + ": not a Slurm time limit", 0) == 0, s.message().c_str());
  }

  void options_data() {
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("error");
    QTest::newRow("extra option") << "sbatch" << "--mem=0" << "";
    QTest::newRow("exclusive") << "sbatch" << "--exclusive" << "";
    QTest::newRow("nodes set by the plan") << "sbatch" << "--nodes=3" << "--sbatch-arg=--nodes=3: --nodes is set by Stagecraft";
    QTest::newRow("short -N") << "sbatch" << "-N3" << "--sbatch-arg=-N3: -N is set by Stagecraft";
    QTest::newRow("output set by the run") << "sbatch" << "--output=x" << "--output is set by Stagecraft";
    QTest::newRow("not an option") << "sbatch" << "mem=0" << "--sbatch-arg=mem=0: an sbatch option such as --mem=0";
    QTest::newRow("partition list") << "partition" << "gpu,debug" << "";
    QTest::newRow("partition with a space") << "partition" << "my gpu" << "--partition=my gpu: ` ` is not allowed";
    QTest::newRow("account with a quote") << "account" << "a'b" << "--account=a'b: `'` is not allowed";
    QTest::newRow("constraint expression") << "constraint" << "a100&ib" << "";
  }
  void options() {
    QFETCH(QString, field);
    QFETCH(QString, value);
    QFETCH(QString, error);
    launch::SlurmOptions o;
    if (field == "sbatch") o.sbatch_args = {value.toStdString()};
    if (field == "partition") o.partition = value.toStdString();
    if (field == "account") o.account = value.toStdString();
    if (field == "constraint") o.constraint = value.toStdString();
    const Status s = launch::check_slurm_options(o);
    QCOMPARE(s.ok(), error.isEmpty());
    if (!error.isEmpty()) QVERIFY2(QString::fromStdString(s.message()).contains(error), s.message().c_str());
  }

  void first_host_data() {
    QTest::addColumn<QString>("nodelist");
    QTest::addColumn<QString>("first");
    QTest::newRow("range, padded") << "node[03-05,9],gpu1" << "node03";
    QTest::newRow("list first") << "node[7,2-3]" << "node7";
    QTest::newRow("plain names") << "gpu1,gpu2" << "gpu1";
    QTest::newRow("suffix after the range") << "n[1-2]-ib" << "n1-ib";
    QTest::newRow("one node") << "single" << "single";
    QTest::newRow("empty") << "" << "";
  }
  void first_host() {
    QFETCH(QString, nodelist);
    QFETCH(QString, first);
    QCOMPARE(QString::fromStdString(launch::first_host_of_nodelist(nodelist.toStdString())), first);
  }

  void expand_hosts_data() {
    QTest::addColumn<QString>("nodelist");
    QTest::addColumn<QString>("hosts");  // joined by ' '; "" when it does not read
    QTest::newRow("ranges and lists, padded") << "node[03-05,9],gpu1" << "node03 node04 node05 node9 gpu1";
    QTest::newRow("the lab's") << "sc7n[0-1]" << "sc7n0 sc7n1";
    QTest::newRow("two groups in a name") << "r[1-2]n[0,2]" << "r1n0 r1n2 r2n0 r2n2";
    QTest::newRow("suffix after the range") << "n[1-2]-ib" << "n1-ib n2-ib";
    QTest::newRow("one node") << "single" << "single";
    QTest::newRow("empty") << "" << "";
    QTest::newRow("unclosed bracket") << "n[1-2" << "";
    QTest::newRow("reversed range") << "n[5-2]" << "";
    QTest::newRow("not a number") << "n[a-b]" << "";
    QTest::newRow("more than the limit") << "n[1-200000]" << "";
  }
  void expand_hosts() {
    QFETCH(QString, nodelist);
    QFETCH(QString, hosts);
    QStringList got;
    for (const auto& h : launch::expand_nodelist(nodelist.toStdString())) got << QString::fromStdString(h);
    QCOMPARE(got.join(' '), hosts);
  }

  // What srun gives a task, and the worker environment it becomes.
  void worker_env_from_slurm_data() {
    QTest::addColumn<QString>("env");
    QTest::addColumn<QString>("expected");  // rank local world local_world group master port threads, or the error
    QTest::newRow("task 3 of 2 x 2") << "SLURM_PROCID=3 SLURM_LOCALID=1 SLURM_NODEID=1 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2 "
                                         "SLURM_JOB_NODELIST=sc7n[0-1] MASTER_PORT=4000"
                                      << "3 1 4 2 1 sc7n0 4000 1";
    QTest::newRow("tasks per node from the node count") << "SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NTASKS=8 SLURM_JOB_NUM_NODES=2 "
                                                           "SLURM_TASKS_PER_NODE=4(x2) SLURM_JOB_NODELIST=a,b MASTER_PORT=5 SLURM_CPUS_PER_TASK=3"
                                                        << "0 0 8 4 0 a 5 3";
    QTest::newRow("explicit variables win") << "SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 "
                                               "SLURM_JOB_NODELIST=x[1-2] MASTER_ADDR=10.0.0.9 MASTER_PORT=6 OMP_NUM_THREADS=2"
                                            << "1 1 2 2 0 10.0.0.9 6 2";
    QTest::newRow("a launcher's RANK: Slurm's ignored") << "RANK=0 WORLD_SIZE=1 SLURM_PROCID=5 SLURM_NTASKS=9 MASTER_PORT=7"
                                                        << "0 0 1 1 0 127.0.0.1 7 1";
    QTest::newRow("no port from the batch script") << "SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_JOB_NODELIST=a"
                                                   << "MASTER_PORT is not set";
  }
  void worker_env_from_slurm() {
    QFETCH(QString, env);
    QFETCH(QString, expected);
    auto e = launch::read_worker_env(env_of(parse_env(env)));
    if (!expected.front().isDigit()) {
      QVERIFY(!e.ok());
      QVERIFY2(QString::fromStdString(e.status().message()).contains(expected), e.status().message().c_str());
      return;
    }
    QVERIFY2(e.ok(), e.status().message().c_str());
    const QString got = QString("%1 %2 %3 %4 %5 %6 %7 %8")
                            .arg(e->rank)
                            .arg(e->local_rank)
                            .arg(e->world_size)
                            .arg(e->local_world_size)
                            .arg(e->group_rank)
                            .arg(QString::fromStdString(e->master_addr))
                            .arg(e->master_port)
                            .arg(e->threads);
    QCOMPARE(got, expected);
  }

  void job_states_data() {
    QTest::addColumn<QString>("tool");
    QTest::addColumn<QString>("out");
    QTest::addColumn<QString>("described");
    QTest::addColumn<bool>("active");
    QTest::addColumn<bool>("pending");
    QTest::addColumn<QString>("nodes");
    QTest::newRow("pending on priority") << "squeue" << "PENDING|Priority|\n" << "PENDING (Priority)" << true << true << "";
    QTest::newRow("running") << "squeue" << "RUNNING|None|sc7n[0-1]\n" << "RUNNING" << true << false << "sc7n[0-1]";
    QTest::newRow("running, two fields") << "squeue" << "RUNNING|None\n" << "RUNNING" << true << false << "";
    // Slurm drops each node from a completing job's list once its epilog ends: not the job's nodes.
    QTest::newRow("completing") << "squeue" << "COMPLETING|None|gpu01\n" << "COMPLETING" << true << false << "";
    // An ended job slurmctld still lists shows what is left of its list; the accounting has its nodes.
    QTest::newRow("ended, still listed") << "squeue" << "COMPLETED|None|sc7n0\n" << "COMPLETED" << false << false << "";
    QTest::newRow("forgotten") << "squeue" << "" << "unknown to Slurm" << false << false << "";
    QTest::newRow("timeout, steps below") << "sacct" << "12|TIMEOUT|0:0|TimeLimit|n[1-4]\n12.batch|CANCELLED|0:15||n1\n" << "TIMEOUT (TimeLimit)"
                                          << false << false << "n[1-4]";
    QTest::newRow("cancelled before it ran") << "sacct" << "12|CANCELLED by 0|0:0|None|None assigned\n" << "CANCELLED by 0" << false << false
                                             << "";
    QTest::newRow("four fields") << "sacct" << "12|COMPLETED|0:0|None\n" << "COMPLETED" << false << false << "";
    QTest::newRow("another job's row only") << "sacct" << "13|FAILED|1:0|None|n1\n" << "unknown to Slurm" << false << false << "";
  }
  void job_states() {
    QFETCH(QString, tool);
    QFETCH(QString, out);
    QFETCH(QString, described);
    QFETCH(bool, active);
    QFETCH(bool, pending);
    QFETCH(QString, nodes);
    const launch::SlurmJobState s = tool == "squeue" ? launch::parse_squeue_state("12", out.toStdString())
                                                     : launch::parse_sacct_state("12", out.toStdString());
    QCOMPARE(QString::fromStdString(s.nodes), nodes);
    QCOMPARE(QString::fromStdString(s.describe()), described);
    QCOMPARE(s.active(), active);
    QCOMPARE(s.pending(), pending);
  }

  void sbatch_job_id() {
    QCOMPARE(launch::parse_sbatch_job_id("4711\n").value(), std::string("4711"));
    QCOMPARE(launch::parse_sbatch_job_id("4711;cluster2\n").value(), std::string("4711"));
    QCOMPARE(launch::parse_sbatch_job_id("Submitted batch job 4711\n").status().code(), Status::Code::kInvalidInput);
  }

  // The script: the plan's shape, the options, the run's directory and the config, which
  // parses back to the same config.
  void batch_script_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QStringList>("has");
    QTest::addColumn<QStringList>("lacks");
    QTest::newRow("cpu 2 x 2") << "" << QStringList{"#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=2\n", "#SBATCH --partition=lab\n",
                                                    "#SBATCH --time=01:00:00\n", "#SBATCH --mem=0\n", "#SBATCH --output=/shared/r 1/job-%j.out\n",
                                                    "run_dir='/shared/r 1'\n", "srun --kill-on-bad-exit=1 --ntasks=4 --ntasks-per-node=2 sh -c"}
                               << QStringList{"--gpus-per-node"};
    QTest::newRow("cuda 1 x 4") << "cluster.nodes=1,cluster.gpus_per_node=4,backend=cuda"
                                << QStringList{"#SBATCH --nodes=1\n", "#SBATCH --ntasks-per-node=4\n", "#SBATCH --gpus-per-node=4\n"}
                                << QStringList{};
  }
  void batch_script() {
    QFETCH(QString, overrides);
    QFETCH(QStringList, has);
    QFETCH(QStringList, lacks);
    std::vector<std::string> ov;
    for (const QString& o : overrides.split(',', Qt::SkipEmptyParts)) ov.push_back(o.toStdString());
    auto cfg = config::parse_config(kTiny, "tiny.yaml", ov);
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    auto plan = plan::make_plan(cfg.value());
    QVERIFY2(plan.ok(), plan.status().message().c_str());
    launch::SlurmOptions o;
    o.partition = "lab";
    o.time = "01:00:00";
    o.sbatch_args = {"--mem=0"};
    o.run_dir = "/shared/r 1";
    o.worker = "/opt/stagecraft/bin/stagecraft-worker";
    auto script = launch::slurm_batch_script(cfg.value(), plan.value(), o);
    QVERIFY2(script.ok(), script.status().message().c_str());
    const QString text = QString::fromStdString(script.value());
    for (const QString& h : has) QVERIFY2(text.contains(h), qPrintable(h + "\n---\n" + text));
    for (const QString& l : lacks) QVERIFY2(!text.contains(l), qPrintable(l));
    // Every #SBATCH line comes before the first command (sbatch stops reading them there).
    QVERIFY(text.lastIndexOf("#SBATCH") < text.indexOf("set -u"));
    const qsizetype begin = text.indexOf("<<'STAGECRAFT_CONFIG_EOF'\n") + 26;
    const qsizetype end = text.indexOf("\nSTAGECRAFT_CONFIG_EOF\n");
    auto back = config::parse_config(text.mid(begin, end - begin + 1).toStdString(), "script", {});
    QVERIFY2(back.ok(), back.status().message().c_str());
    QVERIFY(back.value() == cfg.value());
  }

  // Another program's script: no store and no stagecraft-worker; MASTER_ADDR and MASTER_PORT
  // from the first node; its command line, each word quoted, after the task wrapper with the
  // tasks per node.
  void batch_script_of_another_program() {
    auto cfg = config::parse_config(kTiny, "tiny.yaml", {"launch.program=train.py", "launch.framework=megatron"});
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    auto plan = plan::make_plan(cfg.value());
    QVERIFY(plan.ok());
    launch::SlurmOptions o;
    o.run_dir = "/shared/r 2";
    o.command = {"python3", "train.py", "--tensor-model-parallel-size", "1", "a b", "it's"};
    auto script = launch::slurm_batch_script(cfg.value(), plan.value(), o);
    QVERIFY2(script.ok(), script.status().message().c_str());
    const QString text = QString::fromStdString(script.value());
    for (const char* h : {"#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=2\n", "scontrol show hostnames \"$SLURM_JOB_NODELIST\"",
                          "export STAGECRAFT_RUN_ID MASTER_ADDR MASTER_PORT\n",
                          " stagecraft-task \"$run_dir\" 2 'python3' 'train.py' '--tensor-model-parallel-size' '1' 'a b' 'it'\\''s'\n",
                          "LOCAL_RANK=${SLURM_LOCALID:?"}) {
      QVERIFY2(text.contains(QString::fromUtf8(h)), qPrintable(QString::fromUtf8(h) + "\n---\n" + text));
    }
    for (const char* l : {"--serve-store", "stagecraft-worker", "STAGECRAFT_RUN_TOKEN"}) QVERIFY2(!text.contains(QString::fromUtf8(l)), l);
  }

  // The foreign task wrapper, run as srun would: torchrun's variables from Slurm's, the output
  // and the exit status in the run directory.
  void foreign_task_wrapper_sets_torchruns_variables() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QProcess sh;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* v : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "SLURM_CPUS_PER_TASK"}) env.remove(v);
    env.insert("SLURM_PROCID", "3");
    env.insert("SLURM_LOCALID", "1");
    env.insert("SLURM_NTASKS", "4");
    env.insert("SLURM_NODEID", "1");
    env.insert("SLURM_CPUS_PER_TASK", "2");
    sh.setProcessEnvironment(env);
    sh.start("sh", {"-c", QString::fromStdString(launch::slurm_task_wrapper(true)), "stagecraft-task", dir.path(), "2", "sh", "-c",
                    "env; exit 3"});
    QVERIFY(sh.waitForFinished(10000));
    QCOMPARE(sh.exitCode(), 3);
    QFile out(dir.filePath("rank-3.out"));
    QVERIFY(out.open(QIODevice::ReadOnly));
    const QString e = QString::fromUtf8(out.readAll());
    for (const char* v : {"RANK=3\n", "LOCAL_RANK=1\n", "WORLD_SIZE=4\n", "LOCAL_WORLD_SIZE=2\n", "GROUP_RANK=1\n", "OMP_NUM_THREADS=2\n",
                          "PYTHONUNBUFFERED=1\n"}) {
      QVERIFY2(e.contains(QString::fromUtf8(v)), qPrintable(QString::fromUtf8(v) + "\n---\n" + e));
    }
    QFile status(dir.filePath("rank-3.exit"));
    QVERIFY(status.open(QIODevice::ReadOnly));
    QCOMPARE(status.readAll().trimmed(), QByteArray("3"));
    QVERIFY(QString::fromUtf8(sh.readAllStandardError()).contains("stagecraft: rank 3 on "));
  }

  void batch_script_refusals() {
    auto cfg = config::parse_config(kTiny, "tiny.yaml", {});
    QVERIFY(cfg.ok());
    auto plan = plan::make_plan(cfg.value());
    QVERIFY(plan.ok());
    config::RunConfig foreign = cfg.value();
    foreign.launch.program = "train.py";
    auto s = launch::slurm_batch_script(foreign, plan.value(), {});
    QVERIFY(!s.ok());
    QVERIFY2(s.status().message().rfind("launch.program=train.py: export --to slurm writes the script of Stagecraft's own worker", 0) == 0,
             s.status().message().c_str());
    launch::SlurmOptions bad;
    bad.time = "soon";
    QCOMPARE(launch::slurm_batch_script(cfg.value(), plan.value(), bad).status().code(), Status::Code::kInvalidInput);
    config::RunConfig uneven = cfg.value();
    uneven.cluster.nodes = 3;
    auto shape = launch::slurm_shape(uneven, plan.value());
    QVERIFY(!shape.ok());
    QVERIFY2(shape.status().message().rfind("cluster.nodes=3: the plan's 4 ranks do not split evenly", 0) == 0, shape.status().message().c_str());
  }
};

QTEST_GUILESS_MAIN(TestSlurm)
#include "tst_slurm.moc"
