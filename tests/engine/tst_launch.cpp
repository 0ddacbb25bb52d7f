// Local processes and the supervisor: output, events, exits, fail-fast, hang, cancel, kill;
// check_runnable's refusals and a RunSession recorded, run and ended in the history;
// the descriptors a child inherits and the PATH search.
// Real child processes (/bin/sh) stand in for workers.
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/run_session.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/launch/worker_env.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/store/run_store.h"

#include <QtTest>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <thread>

using namespace stagecraft;
using namespace stagecraft::launch;

namespace {

std::unique_ptr<RankProcess> sh(int rank, const std::string& script) {
  ProcessSpec spec;
  spec.rank = rank;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env["STAGECRAFT_TEST_RANK"] = std::to_string(rank);
  auto p = LocalProcess::start(spec);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return std::move(p).value();
}

struct Recorder {
  std::vector<std::pair<int, std::string>> events, logs;
  std::vector<std::pair<int, ExitInfo>> exits;
  RunCallbacks callbacks() {
    RunCallbacks c;
    c.on_event = [this](int rank, const WorkerEvent& e) { events.emplace_back(rank, std::string(event_name(e))); };
    c.on_log = [this](int rank, bool, const std::string& line) { logs.emplace_back(rank, line); };
    c.on_exit = [this](int rank, const ExitInfo& e) { exits.emplace_back(rank, e); };
    return c;
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads a process's stdout to the end and waits for it (at most 10 s).
std::string drain_all(LocalProcess& p) {
  std::string out, err;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 10) {
    const bool open = p.read_available(out, err);
    if (!open && p.poll_exit()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

// configs/tiny-gpt.yaml with its data found from the source tree, and `overrides`.
config::RunConfig tiny(std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), "train.data=" STAGECRAFT_SOURCE_DIR "/configs/data/stagecraft.txt");
  auto c = config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml", overrides);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

plan::Plan plan_of(const config::RunConfig& c) {
  auto p = plan::make_plan(c);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return p.value();
}

std::vector<SelectedHost> hosts(int n, int slot_count) {
  std::vector<SelectedHost> h;
  for (int i = 0; i < n; ++i) {
    SelectedHost s{"node-" + std::to_string(i), {}};
    for (int k = 0; k < slot_count; ++k) s.slot_ids.push_back(k);
    h.push_back(s);
  }
  return h;
}

}  // namespace

class TestLaunch : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // A line that looks like an event but does not decode is a log line, never a half-read event.
  void malformedEventLinesAreLogs() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "echo '{\"event\":\"step\",\"step\":\"x\"}'; echo '{\"event\":\"eval\"}';"
                          "echo '{\"event\":\"step\",\"step\":4,\"loss\":1.5}'; echo '{\"event\":'"));
    std::vector<WorkerEvent> events;
    std::vector<std::string> logs;
    RunCallbacks cb;
    cb.on_event = [&](int, const WorkerEvent& e) { events.push_back(e); };
    cb.on_log = [&](int, bool, const std::string& line) { logs.push_back(line); };
    Supervisor s(std::move(ranks), {}, cb);
    QVERIFY(s.run().ok());
    QCOMPARE(events.size(), size_t(1));
    QVERIFY(same_event(events[0], StepEvent{.step = 4, .loss = 1.5}));
    QCOMPARE(logs.size(), size_t(3));
    QCOMPARE(QString::fromStdString(logs[0]), QString("{\"event\":\"step\",\"step\":\"x\"}"));
    QCOMPARE(QString::fromStdString(logs[1]), QString("{\"event\":\"eval\"}"));
    QCOMPARE(QString::fromStdString(logs[2]), QString("{\"event\":"));
  }

  void checkRunnableRefuses_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("nodes");  // hosts given: 0 = a local run
    QTest::addColumn<int>("slotsPerHost");
    QTest::addColumn<QString>("says");  // "" = runnable
    QTest::newRow("tiny gpt runs here") << QStringList{} << 0 << 0 << "";
    if (!runtime::cuda_built()) {
      QTest::newRow("cuda backend") << QStringList{"backend=cuda"} << 0 << 0 << "backend=cuda: this build trains on the CPU only";
    } else {
      // On hosts their GPUs are preflight's to count; here, this machine's.
      QTest::newRow("cuda fp16 on hosts") << QStringList{"backend=cuda", "cluster.device=H100-SXM", "train.precision=fp16",
                                                          "cluster.nodes=2", "cluster.gpus_per_node=2"}
                                          << 2 << 2 << "";
      QTest::newRow("cuda flash beyond the fused kernel's head size")
          << QStringList{"backend=cuda", "train.attention=flash", "model.heads=1", "model.hidden=256", "cluster.nodes=2",
                         "cluster.gpus_per_node=2"}
          << 2 << 2 << "train.attention=flash: head size 256 (model.hidden / model.heads) is above the CUDA fused kernel's 128";
      QTest::newRow("cuda standard attention at that head size")
          << QStringList{"backend=cuda", "train.attention=standard", "model.heads=1", "model.hidden=256", "cluster.nodes=2",
                         "cluster.gpus_per_node=2"}
          << 2 << 2 << "";
      // comm: nccl by default with cuda, or gloo; whether local ranks outnumber the GPUs is only
      // known where GPUs are visible (tests/gpu/tst_cuda.cpp checks that refusal).
      if (runtime::cuda_device_count() == 0) {
        QTest::newRow("cuda here without a GPU") << QStringList{"backend=cuda", "cluster.gpus_per_node=4"} << 0 << 0
                                                 << "backend=cuda: this machine shows no GPU";
        QTest::newRow("cuda over gloo here without a GPU") << QStringList{"backend=cuda", "comm=gloo", "cluster.gpus_per_node=4"} << 0 << 0
                                                           << "backend=cuda: this machine shows no GPU";
      } else {
        QTest::newRow("cuda fp16") << QStringList{"backend=cuda", "cluster.device=H100-SXM", "train.precision=fp16", "comm=gloo"} << 0 << 0
                                   << "";
      }
    }
    // The CPU computes attention unfused at any head size.
    QTest::newRow("cpu flash at a large head size") << QStringList{"train.attention=flash", "model.heads=1", "model.hidden=256"} << 0 << 0 << "";
    QTest::newRow("two nodes without hosts") << QStringList{"cluster.nodes=2", "parallel.dp=auto"} << 0 << 0
                                             << "cluster.nodes=2: a run without hosts starts every rank on this machine";
    QTest::newRow("no data") << QStringList{"train.data=\"\""} << 0 << 0 << "train.data: no data file";
    QTest::newRow("unreadable data") << QStringList{"train.data=/nonexistent/tokens.bin"} << 0 << 0
                                     << "train.data=/nonexistent/tokens.bin: cannot read the file";
    QTest::newRow("hosts match the plan") << QStringList{"cluster.nodes=2", "cluster.gpus_per_node=2"} << 2 << 2 << "";
    QTest::newRow("hosts with too few slots") << QStringList{} << 2 << 1 << "hosts: 2 host(s) with 2 slots, but the plan has 4 ranks";
    // Another program (launch.program): the engine's own rules do not apply, its checkpoints do not.
    QTest::newRow("another program: cuda, no data, dropout")
        << QStringList{"launch.program=train.py", "backend=cuda", "train.data=\"\"", "model.dropout=0.1"} << 0 << 0 << "";
    QTest::newRow("another program: still one machine without hosts")
        << QStringList{"launch.program=train.py", "cluster.nodes=2", "parallel.dp=auto"} << 0 << 0
        << "cluster.nodes=2: a run without hosts starts every rank on this machine";
    QTest::newRow("another program: the engine's resume") << QStringList{"launch.program=train.py", "train.resume=ckpt"} << 0 << 0
                                                           << "train.resume=ckpt: resumes Stagecraft's own engine";
    QTest::newRow("another program: arguments that do not split") << QStringList{"launch.program=train.py", "launch.args=a\\"} << 0 << 0
                                                                  << "launch.args: trailing backslash";
    QTest::newRow("launch keys without a program") << QStringList{"launch.metrics=jsonl"} << 0 << 0
                                                   << "launch.metrics=jsonl: applies to another program's run";
  }
  void checkRunnableRefuses() {
    QFETCH(QStringList, overrides);
    QFETCH(int, nodes);
    QFETCH(int, slotsPerHost);
    QFETCH(QString, says);
    std::vector<std::string> o;
    for (const QString& s : overrides) o.push_back(s.toStdString());
    config::RunConfig c = tiny(o);
    const Status st = check_runnable(c, plan_of(c), hosts(nodes, slotsPerHost));
    if (says.isEmpty()) {
      QVERIFY2(st.ok(), st.message().c_str());
      return;
    }
    QVERIFY(!st.ok());
    QCOMPARE(st.code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(st.message()).startsWith(says), st.message().c_str());
  }

  // Under Slurm the job asks for the nodes' GPUs and each rank picks its own there: the machine
  // that submits (a login node, often without a GPU) is not asked for any.
  void slurmRunsLeaveTheGpusToTheJob_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("cuda over nccl, 2 x 4") << QStringList{"backend=cuda", "cluster.nodes=2", "cluster.gpus_per_node=4", "parallel.dp=auto"};
    QTest::newRow("cuda over gloo, 2 x 4")
        << QStringList{"backend=cuda", "comm=gloo", "cluster.nodes=2", "cluster.gpus_per_node=4", "parallel.dp=auto"};
  }
  void slurmRunsLeaveTheGpusToTheJob() {
    if (!runtime::cuda_built()) QSKIP("this build trains on the CPU only: backend cuda is refused first");
    QFETCH(QStringList, overrides);
    std::vector<std::string> o;
    for (const QString& s : overrides) o.push_back(s.toStdString());
    config::RunConfig c = tiny(o);
    const Status st = check_runnable(c, plan_of(c), {}, true);
    QVERIFY2(st.ok(), st.message().c_str());
  }

  // Another program through Slurm: Slurm picks the nodes, and the program needs no data file
  // or GPU on the submitting machine; hosts are still refused.
  void slurmRunsAnotherProgram() {
    config::RunConfig c = tiny({"launch.program=train.py", "launch.framework=megatron", "cluster.nodes=2", "parallel.dp=auto",
                                "train.data=\"\""});
    Status st = check_runnable(c, plan_of(c), {}, true);
    QVERIFY2(st.ok(), st.message().c_str());
    st = check_runnable(c, plan_of(c), hosts(2, 2), true);
    QVERIFY(!st.ok());
    QVERIFY2(QString::fromStdString(st.message()).startsWith("--slurm: Slurm picks the nodes"), st.message().c_str());
  }

  // record -> open -> run -> finish, kept in the history; here the "worker" is a script that
  // reports as a worker does.
  void sessionRecordsTheRunFromQueuedToItsEnd() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RunRequest request;
    request.config = tiny({"train.steps=2", "train.warmup_steps=0"});
    request.plan = plan_of(request.config);
    request.local.worker = {"/bin/sh", "-c",
                            "echo \"{\\\"event\\\":\\\"start\\\",\\\"rank\\\":$RANK}\"; echo 'a log line';"
                            "echo \"{\\\"event\\\":\\\"done\\\",\\\"rank\\\":$RANK,\\\"step\\\":2}\""};
    auto session = RunSession::record(db, request);
    QVERIFY2(session.ok(), session.status().message().c_str());
    auto st = store::RunStore::open(db);
    QVERIFY(st.ok());
    QCOMPARE(st.value()->get_run(session.value()->id())->state, store::RunState::kQueued);
    QCOMPARE(session.value()->cancel_flag(), nullptr);  // not open yet
    QVERIFY(session.value()->open().ok());
    QVERIFY(session.value()->cancel_flag() != nullptr);
    std::vector<std::string> kinds;
    RunCallbacks cb;
    cb.on_event = [&](int, const WorkerEvent& e) { kinds.emplace_back(event_name(e)); };
    auto outcome = session.value()->run(cb);
    QVERIFY2(outcome.ok() && outcome->ok(), outcome.ok() ? outcome->reason.c_str() : outcome.status().message().c_str());
    QVERIFY(session.value()->history_status().ok());
    QCOMPARE(kinds.size(), size_t(8));  // 4 ranks x (start, done)
    auto run = st.value()->get_run(session.value()->id());
    QCOMPARE(run->state, store::RunState::kSucceeded);
    QCOMPARE(run->hosts, std::vector<std::string>{"localhost"});
    auto events = st.value()->events(session.value()->id());
    QVERIFY(events.ok());
    QCOMPARE(events->size(), size_t(8));
    for (const auto& e : *events) {
      auto back = decode_event(e.json);
      QVERIFY2(back.ok(), e.json.c_str());
      QCOMPARE(std::string(event_name(back.value())), e.kind);
      QCOMPARE(event_rank(back.value()), e.rank);
    }
    auto logs = st.value()->logs(session.value()->id(), 0);
    QVERIFY(logs.ok());
    QCOMPARE(logs->size(), size_t(1));
    QCOMPARE(QString::fromStdString(logs->front().line), QString("a log line"));
  }

  // Which GPU a worker of backend cuda opens (app/worker), and when NCCL would put two ranks on one.
  void gpuOfRank_data() {
    QTest::addColumn<int>("localRank");
    QTest::addColumn<int>("localWorld");
    QTest::addColumn<int>("visible");
    QTest::addColumn<bool>("nccl");
    QTest::addColumn<QString>("devices");  // CUDA_VISIBLE_DEVICES
    QTest::addColumn<int>("gpu");           // -1: refused
    QTest::addColumn<QString>("says");
    QTest::newRow("a GPU per rank") << 3 << 4 << 4 << true << "" << 3 << "";
    QTest::newRow("its slot's GPU alone (Stagecraft's launcher)") << 3 << 4 << 1 << true << "7" << 0 << "";
    QTest::newRow("gloo shares GPUs round-robin") << 3 << 4 << 2 << false << "0,1" << 1 << "";
    QTest::newRow("nccl on shared GPUs")
        << 0 << 4 << 2 << true << "0,1" << -1
        << "comm=nccl: LOCAL_WORLD_SIZE=4 ranks on this node, but rank 0 sees 2 GPUs (CUDA_VISIBLE_DEVICES=0,1), and NCCL needs a GPU "
           "per rank; start at most 2 ranks per node, or set comm: gloo to share GPUs (for testing)";
    QTest::newRow("no GPU") << 0 << 1 << 0 << false << "" << -1
                            << "backend=cuda: rank 0 sees no GPU; check nvidia-smi and CUDA_VISIBLE_DEVICES on its host";
    QTest::newRow("no GPU among those named") << 0 << 1 << 0 << true << "5" << -1 << "backend=cuda: rank 0 sees no GPU (CUDA_VISIBLE_DEVICES=5)";
  }
  void gpuOfRank() {
    QFETCH(int, localRank);
    QFETCH(int, localWorld);
    QFETCH(int, visible);
    QFETCH(bool, nccl);
    QFETCH(QString, devices);
    QFETCH(int, gpu);
    QFETCH(QString, says);
    std::map<std::string, std::string> env = {{"RANK", std::to_string(localRank)},          {"WORLD_SIZE", std::to_string(localWorld)},
                                              {"LOCAL_RANK", std::to_string(localRank)},    {"LOCAL_WORLD_SIZE", std::to_string(localWorld)},
                                              {"MASTER_PORT", "29500"},                     {"CUDA_VISIBLE_DEVICES", devices.toStdString()}};
    auto e = read_worker_env([&](const char* k) -> const char* {
      auto it = env.find(k);
      return it == env.end() || it->second.empty() ? nullptr : it->second.c_str();
    });
    QVERIFY2(e.ok(), e.status().message().c_str());
    QCOMPARE(QString::fromStdString(e->cuda_visible_devices), devices);
    QCOMPARE(QString::fromStdString(to_environment(e.value())["CUDA_VISIBLE_DEVICES"]), devices);  // handed on as read
    const auto got = gpu_of_rank(e.value(), visible, nccl);
    if (gpu >= 0) {
      QVERIFY2(got.ok(), got.status().message().c_str());
      QCOMPARE(got.value(), gpu);
      return;
    }
    QVERIFY(!got.ok());
    QVERIFY2(QString::fromStdString(got.status().message()).startsWith(says), got.status().message().c_str());
  }

  // nvidia-smi's lines as the preflight probe prints them (recorded on an H100 host).
  void preflightReadsTheGpus() {
    const std::string out =
        "nproc=16\ngpus=2\n"
        "gpu=NVIDIA H100 80GB HBM3, 81559, 580.159.04\n"
        "gpu=NVIDIA H100 80GB HBM3, 81559, 580.159.04\n"
        "gpu=broken line without fields\n"
        "gpu=Vendor, Model, With Commas, 40960, 535.1\n"
        "cuda=13.0\n";
    const auto gpus = launch::parse_gpu_lines(out);
    QCOMPARE(gpus.size(), size_t(3));
    QCOMPARE(QString::fromStdString(gpus[0].name), QString("NVIDIA H100 80GB HBM3"));
    QCOMPARE(gpus[0].memory_mib, 81559);
    QCOMPARE(QString::fromStdString(gpus[0].driver), QString("580.159.04"));
    QCOMPARE(QString::fromStdString(gpus[2].name), QString("Vendor, Model, With Commas"));
    QCOMPARE(gpus[2].memory_mib, 40960);
    launch::HostCheck c;
    c.gpu_list = {gpus[0], gpus[1]};
    c.cuda_version = "13.0";
    QCOMPARE(QString::fromStdString(launch::describe_gpus(c)),
             QString("2 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 580.159.04, CUDA 13.0"));
    QVERIFY(launch::parse_gpu_lines("nproc=4\ngpus=0\ncuda=\n").empty());
    QCOMPARE(QString::fromStdString(launch::describe_gpus(launch::HostCheck{})), QString());
  }

  void refusedSessionRecordsNothing() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RunRequest request;
    request.config = tiny({"cluster.nodes=2", "parallel.dp=auto"});  // two nodes, no hosts
    request.plan = plan_of(request.config);
    auto session = RunSession::record(db, request);
    QVERIFY(!session.ok());
    QVERIFY2(QString::fromStdString(session.status().message()).contains("cluster.nodes=2"), session.status().message().c_str());
    auto st = store::RunStore::open(db);
    QVERIFY(st.ok());
    auto runs = st.value()->list_runs();
    QVERIFY(runs.ok());
    QCOMPARE(runs->size(), size_t(0));
  }

  void eventsLogsAndSuccess() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.push_back(sh(r, "echo '{\"event\":\"start\"}'; echo hello $STAGECRAFT_TEST_RANK; echo '{\"event\":\"step\",\"step\":1}';"
                            "echo warn >&2; printf 'no newline at the end'"));
    }
    Recorder rec;
    Supervisor s(std::move(ranks), {}, rec.callbacks());
    const RunOutcome o = s.run();
    QVERIFY(o.ok());
    QCOMPARE(o.exits.size(), size_t(3));
    QCOMPARE(rec.events.size(), size_t(6));
    QCOMPARE(rec.exits.size(), size_t(3));
    int hello = 0, tail = 0, warn = 0;
    for (const auto& [rank, line] : rec.logs) {
      hello += line == "hello " + std::to_string(rank);
      tail += line == "no newline at the end";
      warn += line == "warn";
    }
    QCOMPARE(hello, 3);
    QCOMPARE(tail, 3);  // a last line without newline still arrives
    QCOMPARE(warn, 3);
  }

  // Rank 1 fails; the others would sleep for minutes and one ignores SIGTERM: all end quickly.
  void firstFailureStopsEveryRank() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "sleep 300"));
    ranks.push_back(sh(1, "echo '{\"event\":\"start\"}'; sleep 0.2; echo 'cannot reach rank 2' >&2; exit 3"));
    ranks.push_back(sh(2, "trap '' TERM; sleep 300"));
    ranks.push_back(sh(3, "sleep 300 & wait"));  // a grandchild in the same process group
    Recorder rec;
    SuperviseOptions opt;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, rec.callbacks());
    const auto t0 = std::chrono::steady_clock::now();
    const RunOutcome o = s.run();
    QVERIFY(seconds_since(t0) < 5.0);
    QCOMPARE(o.state, RunOutcome::State::kFailed);
    QCOMPARE(o.failed_rank, 1);
    QCOMPARE(QString::fromStdString(o.reason), QString("rank 1 exited with status 3: cannot reach rank 2"));
    QCOMPARE(o.exits[1].code, 3);
    QCOMPARE(o.exits[0].signal, SIGTERM);
    QCOMPARE(o.exits[2].signal, SIGKILL);  // ignored TERM, killed after the grace period
    QCOMPARE(rec.exits.size(), size_t(4));
  }

  void errorEventNamesTheReason() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "echo '{\"event\":\"error\",\"message\":\"train.data=x.bin: cannot open\"}'; exit 2"));
    Supervisor s(std::move(ranks), {}, {});
    const RunOutcome o = s.run();
    QCOMPARE(QString::fromStdString(o.reason), QString("rank 0 exited with status 2: train.data=x.bin: cannot open"));
  }

  void signalDeathIsAFailure() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "kill -SEGV $$"));
    Supervisor s(std::move(ranks), {}, {});
    const RunOutcome o = s.run();
    QCOMPARE(o.state, RunOutcome::State::kFailed);
    QVERIFY2(QString::fromStdString(o.reason).contains("killed by signal 11 (SIGSEGV)"), o.reason.c_str());
  }

  void noProgressIsAHang() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "echo '{\"event\":\"start\"}'; echo still logging; sleep 300"));
    ranks.push_back(sh(1, "sleep 300"));
    SuperviseOptions opt;
    opt.hang_timeout_s = 0.5;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, {});
    const auto t0 = std::chrono::steady_clock::now();
    const RunOutcome o = s.run();
    QVERIFY(seconds_since(t0) < 4.0);
    QCOMPARE(o.state, RunOutcome::State::kHung);
    QVERIFY(QString::fromStdString(o.reason).contains("no progress"));
  }

  // Foreign mode (another program's ranks): metric lines become step events of their rank and
  // stay logs; worker-event lines are not decoded; any output is progress for the hang timer.
  void foreignModeReadsMetricLines() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "echo 'starting'; echo 'iter 1: loss 4.5000, time 10.00ms, mfu 1.00%'; "
                          "echo '{\"event\":\"done\",\"step\":1}'; echo 'iter 2: loss 4.0000, time 9.00ms' >&2"));
    ranks.push_back(sh(1, "echo '{\"step\": 7, \"lr\": 0.5}'"));
    SuperviseOptions opt;
    opt.foreign = true;
    opt.metrics = config::MetricsFormat::kAuto;
    std::vector<std::pair<int, StepEvent>> steps;
    Recorder rec;
    RunCallbacks cb = rec.callbacks();
    cb.on_event = [&](int rank, const WorkerEvent& e) {
      const auto* st = std::get_if<StepEvent>(&e);
      QVERIFY(st);
      steps.emplace_back(rank, *st);
    };
    Supervisor s(std::move(ranks), opt, cb);
    const RunOutcome o = s.run();
    QCOMPARE(o.state, RunOutcome::State::kSucceeded);
    // Rank 0's two steps (stdout and stderr), rank 1's step without a loss when its output ends.
    QCOMPARE(steps.size(), size_t{3});
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return std::tie(a.first, a.second.step) < std::tie(b.first, b.second.step); });
    QCOMPARE(steps[0].first, 0);
    QCOMPARE(steps[0].second.step, int64_t{1});
    QCOMPARE(steps[0].second.loss, 4.5);
    QCOMPARE(steps[0].second.step_ms, 10.0);
    QCOMPARE(steps[0].second.rank, 0);
    QCOMPARE(steps[1].second.step, int64_t{2});
    QCOMPARE(steps[2].first, 1);
    QCOMPARE(steps[2].second.step, int64_t{7});
    QCOMPARE(steps[2].second.lr, 0.5);
    // Every line is a log line, the metric lines and the worker-event look-alike included.
    std::set<std::string> logged;
    for (const auto& [rank, line] : rec.logs) logged.insert(line);
    QVERIFY(logged.count("starting") && logged.count("iter 1: loss 4.5000, time 10.00ms, mfu 1.00%"));
    QVERIFY(logged.count("{\"event\":\"done\",\"step\":1}"));
  }

  void foreignModeCountsOutputAsProgress() {
    // Output every 0.2 s and no metric for 1.5 s with a 0.8 s timeout: not a hang; then silence is.
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "for i in 1 2 3 4 5 6 7; do echo loading; sleep 0.2; done; printf 'partial'; sleep 0.5; echo ' line'; sleep 300"));
    SuperviseOptions opt;
    opt.foreign = true;
    opt.hang_timeout_s = 0.8;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, {});
    const auto t0 = std::chrono::steady_clock::now();
    const RunOutcome o = s.run();
    const double took = seconds_since(t0);
    QCOMPARE(o.state, RunOutcome::State::kHung);
    QVERIFY2(took > 2.0 && took < 6.0, std::to_string(took).c_str());
    QVERIFY2(QString::fromStdString(o.reason).contains("no output from any rank for 1 s (train.hang_timeout_s)"), o.reason.c_str());
  }

  void cancelFromAnotherThread() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "sleep 300"));
    SuperviseOptions opt;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, {});
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      s.cancel();
    });
    const RunOutcome o = s.run();
    t.join();
    QCOMPARE(o.state, RunOutcome::State::kCancelled);
  }

  void missingProgramIsAClearError() {
    ProcessSpec spec;
    spec.argv = {"stagecraft-no-such-program"};
    auto p = LocalProcess::start(spec);
    QVERIFY(!p.ok());
    QVERIFY2(QString::fromStdString(p.status().message()).contains("cannot start stagecraft-no-such-program"), p.status().message().c_str());
  }

  void hugeLinesAreCut() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done"));
    Recorder rec;
    SuperviseOptions opt;
    opt.max_line_bytes = 1 << 20;
    Supervisor s(std::move(ranks), opt, rec.callbacks());
    QVERIFY(s.run().ok());
    QVERIFY(rec.logs.size() >= 3);
    for (const auto& [rank, line] : rec.logs) QVERIFY(line.size() <= (1u << 20) + 16);
    QCOMPARE(QString::fromStdString(rec.logs.back().second), QString("done"));
  }

  // A line kept whole while it was short, then finished past the limit in one read (its newline
  // arriving in the same write as the bytes that push it over) is cut as well.
  void lineFinishedPastTheLimitIsCut() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "head -c 900 /dev/zero | tr '\\0' x; sleep 0.3; printf '%s\\n' \"$(head -c 200 /dev/zero | tr '\\0' y)\"; echo done"));
    Recorder rec;
    SuperviseOptions opt;
    opt.max_line_bytes = 1000;
    Supervisor s(std::move(ranks), opt, rec.callbacks());
    QVERIFY(s.run().ok());
    QCOMPARE(int(rec.logs.size()), 2);
    const std::string& cut = rec.logs.front().second;
    QCOMPARE(cut.size(), size_t(1000 + std::string(" [line cut]").size()));
    QVERIFY(cut.size() >= 11 && cut.compare(cut.size() - 11, 11, " [line cut]") == 0);
    QCOMPARE(QString::fromStdString(rec.logs.back().second), QString("done"));
  }

  // The child holds its three standard descriptors and nothing the launcher opened for it (the
  // /dev/null it opens for stdin, the pipes): only what this test process itself lets every
  // child inherit (descriptors without close-on-exec) may be there too.
  void childInheritsNoLauncherDescriptor() {
    std::set<int> expected = {0, 1, 2};
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      const int fd = std::stoi(e.path().filename().string());
      const int flags = fcntl(fd, F_GETFD);
      if (fd > 2 && flags >= 0 && !(flags & FD_CLOEXEC)) expected.insert(fd);
    }
    ProcessSpec spec;
    spec.argv = {"sleep", "30"};  // start() returns once exec succeeded: its descriptors are final
    auto p = LocalProcess::start(spec);
    QVERIFY2(p.ok(), p.ok() ? "" : p.status().message().c_str());
    std::set<int> got;
    const std::string dir = "/proc/" + std::to_string(p.value()->pid()) + "/fd";
    for (const auto& e : std::filesystem::directory_iterator(dir)) got.insert(std::stoi(e.path().filename().string()));
    p.value()->kill();
    const auto render = [](const std::set<int>& fds) {
      QStringList l;
      for (int fd : fds) l << QString::number(fd);
      return l.join(' ');
    };
    QCOMPARE(render(got), render(expected));
  }

  // PATH is searched as execvp does, in the child's environment.
  void pathSearch_data() {
    QTest::addColumn<QString>("path");      // "@" stands for the scratch dir holding the runnable program, "#" for the one
                                            // holding a program without execute permission
    QTest::addColumn<QString>("expected");  // the program's output, or the expected error after "!"
    QTest::newRow("empty element first is the working directory") << ":/nonexistent-dir" << "here";
    QTest::newRow("empty element between") << "/nonexistent-dir::/usr/bin" << "here";
    QTest::newRow("empty element last") << "/nonexistent-dir:" << "here";
    QTest::newRow("found in a listed directory") << "/nonexistent-dir:@" << "there";
    QTest::newRow("not runnable, later missing: permission denied") << "#:/nonexistent-dir" << "!Permission denied";
    QTest::newRow("not runnable, later runnable: runs the later") << "#:@" << "there";
    QTest::newRow("missing everywhere") << "/nonexistent-dir:/nonexistent-too" << "!No such file or directory";
  }
  void pathSearch() {
    QFETCH(QString, path);
    QFETCH(QString, expected);
    QTemporaryDir cwd, runnable, denied;
    QVERIFY(cwd.isValid() && runnable.isValid() && denied.isValid());
    const auto write_program = [](const QString& file, const char* text, QFileDevice::Permissions perms) {
      QFile f(file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(text);
      f.close();
      QVERIFY(f.setPermissions(perms));
    };
    const auto rwx = QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner;
    write_program(cwd.filePath("sc-path-prog"), "#!/bin/sh\necho here\n", rwx);
    write_program(runnable.filePath("sc-path-prog"), "#!/bin/sh\necho there\n", rwx);
    write_program(denied.filePath("sc-path-prog"), "#!/bin/sh\necho denied\n", QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    path.replace('@', runnable.path()).replace('#', denied.path());
    ProcessSpec spec;
    spec.argv = {"sc-path-prog"};
    spec.cwd = cwd.path().toStdString();
    spec.env["PATH"] = path.toStdString();
    auto p = LocalProcess::start(spec);
    if (expected.startsWith('!')) {
      QVERIFY2(!p.ok(), "started a program it should not have");
      QVERIFY2(QString::fromStdString(p.status().message()).endsWith(expected.mid(1)), p.status().message().c_str());
      return;
    }
    QVERIFY2(p.ok(), p.ok() ? "" : p.status().message().c_str());
    QCOMPARE(QString::fromStdString(drain_all(*p.value())).trimmed(), expected);
  }
};

QTEST_APPLESS_MAIN(TestLaunch)
#include "tst_launch.moc"
