// bench_launch: time from run_remote() to the first step event, 4 nodes x 2 ranks over SSH.
// Nodes are sshds in network namespaces (ssh_lab.h; needs root), each run a fresh connect,
// rendezvous and first training step of configs/tiny-gpt.yaml; the run is cancelled at its
// first step. Prints min and median over a few runs; asserts nothing.
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/remote_run.h"
#include "stagecraft/plan/plan.h"

#include <QDir>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ssh_lab.h"

using namespace stagecraft;
using namespace stagecraft::launch;

int main() {
  if (const QString why = SshLab::can_run(true); !why.isEmpty()) {
    std::printf("bench_launch: skipped: %s\n", qPrintable(why));
    return 0;
  }
  QDir::setCurrent(STAGECRAFT_SOURCE_DIR);
  SshLab lab(4);
  if (!lab.ok() || !lab.add_netns_nodes(4)) {
    std::printf("bench_launch: lab setup failed: %s\n", qPrintable(lab.error()));
    return 1;
  }
  RemoteRunOptions o;
  o.ssh.config_file = lab.ssh_config().toStdString();
  o.ssh.known_hosts_file = lab.known_hosts().toStdString();
  for (int i = 0; i < 4; ++i) o.hosts.push_back({"node" + std::to_string(i), {0, 1}});
  o.command = {std::string(STAGECRAFT_BIN_DIR) + "/stagecraft-worker"};
  o.grace_s = 2;
  auto base = config::load_config_file("configs/tiny-gpt.yaml", {"cluster.gpus_per_node=8", "parallel.dp=4", "train.steps=50", "train.warmup_steps=0",
                                                                  "train.checkpoint_dir=" + (lab.dir() + "/ckpt").toStdString()});
  if (!base.ok()) {
    std::printf("bench_launch: %s\n", base.status().message().c_str());
    return 1;
  }
  auto cfg = with_hosts(base.value(), o.hosts);
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) {
    std::printf("bench_launch: %s\n", plan.status().message().c_str());
    return 1;
  }
  const int kRuns = 5;
  std::vector<double> first_step, first_start;
  for (int run = 0; run < kRuns; ++run) {
    Supervisor* sup = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    double t_start = -1, t_step = -1;
    RunCallbacks cb;
    cb.on_event = [&](int, const WorkerEvent& e) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string_view kind = event_name(e);
      if (kind == "start" && t_start < 0) t_start = t;
      if (kind == "step" && t_step < 0) {
        t_step = t;
        sup->cancel();
      }
    };
    auto outcome = run_remote(cfg.value(), plan.value(), o, cb, [&](Supervisor& s) { sup = &s; });
    if (!outcome.ok() || t_step < 0) {
      std::printf("bench_launch: run %d failed: %s\n", run, outcome.ok() ? outcome->reason.c_str() : outcome.status().message().c_str());
      return 1;
    }
    first_start.push_back(t_start);
    first_step.push_back(t_step);
  }
  auto row = [](const char* name, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::printf("%-34s %8.3f %8.3f %8.3f\n", name, v.front(), v[v.size() / 2], v.back());
  };
  std::printf("4 nodes x 2 ranks over SSH (network namespaces), %d runs, seconds\n", kRuns);
  std::printf("%-34s %8s %8s %8s\n", "from run_remote() to", "min", "median", "max");
  row("first start event (rendezvous)", first_start);
  row("first step event", first_step);
  return 0;
}
