// stagecraft-cli run: train a configuration with Stagecraft's engine on this machine, one worker
// process per rank, with a live progress line (or the workers' events as JSON lines).
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>

#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "run_history.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/local_run.h"
#include "stagecraft/launch/run_history.h"
#include "stagecraft/launch/remote_run.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::cli {

namespace {

// The run's cancel flag (RunHistory::cancel_flag), set by SIGINT / SIGTERM: a lock-free atomic
// store is async-signal-safe, and the flag outlives the supervisor, so a signal at any moment of
// the run, before the supervisor exists or as it ends, is safe.
std::atomic<bool>* g_cancel = nullptr;
std::atomic<bool> g_cancel_early{false};  // a signal before the run's flag exists
static_assert(std::atomic<bool>::is_always_lock_free);

void on_signal(int) {
  if (std::atomic<bool>* flag = g_cancel) {
    flag->store(true);
  } else {
    g_cancel_early.store(true);
  }
}

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json", "--detach"};
  spec.options = {"--db", "--master-addr"};
  spec.options.insert(host_options().begin(), host_options().end());
  spec.overrides = true;
  auto args = parse_args(argv, spec, "run");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("run: expected one CONFIG file (usage: stagecraft-cli run CONFIG [key=value ...] [--hosts FILE ...] [--json] [--detach] [--db FILE])"));
  }
  auto cfg = config::load_config_file(args->positionals[0], args->overrides);
  if (!cfg.ok()) return report(cfg.status());
  // Hosts (--hosts FILE or cluster.hosts) make the run remote; they define the cluster.
  auto remote = remote_hosts(args.value(), cfg.value());
  if (!remote.ok()) return report(remote.status());
  const bool is_remote = !remote->hosts.empty();
  if (is_remote) {
    auto with = launch::with_hosts(cfg.value(), remote->hosts);
    if (!with.ok()) return report(with.status());
    cfg = std::move(with).value();
  } else if (args->option("--master-addr")) {
    return report(Status::invalid_input("--master-addr: only for remote runs; give --hosts FILE"));
  }
  const auto& c = cfg.value();
  if (c.backend != config::Backend::kCpu) {
    return report(Status::invalid_input("backend=" + std::string(config::to_string(c.backend)) +
                                        ": this build trains on the CPU only; set backend: cpu"));
  }
  if (!is_remote && c.cluster.nodes != 1) {
    return report(Status::invalid_input("cluster.nodes=" + std::to_string(c.cluster.nodes) +
                                        ": without hosts `run` starts every rank on this machine; use cluster.nodes: 1 or give --hosts FILE"));
  }
  if (c.train.data.empty()) {
    return report(Status::invalid_input("train.data: no data file; give a .txt file (bytes) or a uint16 token .bin file"));
  }
  if (access(c.train.data.c_str(), R_OK) != 0) {
    return report(Status::invalid_input("train.data=" + c.train.data + ": cannot read the file"));
  }
  auto plan = plan::make_plan(c);
  if (!plan.ok()) return report(plan.status());
  {
    auto data = runtime::TokenData::open(c.train.data, static_cast<size_t>(c.model.seq_len) + 1);
    if (!data.ok()) return report(data.status());
    if (Status s = runtime::Trainer::check(c, &data.value()); !s) return report(s);
  }
  const bool json = args->has("--json");
  std::vector<std::string> host_names = {"localhost"};
  launch::RemoteRunOptions remote_options;
  if (is_remote) {
    launch::PreflightOptions po;
    po.ssh = remote->ssh;
    po.worker_path = remote->worker;
    const auto checks = launch::preflight(remote->hosts, po);
    bool passed = true;
    for (const auto& ch : checks) {
      passed = passed && ch.ok();
      if (json) {
        for (const auto& e : ch.errors) std::fprintf(stderr, "stagecraft-cli: error: %s\n", e.c_str());
      }
    }
    if (!json) passed = print_preflight(checks, false);
    if (!passed) return 1;
    host_names.clear();
    for (const auto& h : remote->hosts) host_names.push_back(h.host);
    remote_options.hosts = remote->hosts;
    remote_options.ssh = remote->ssh;
    if (!remote->worker.empty()) remote_options.command = {remote->worker};
    remote_options.master_addr = args->option("--master-addr").value_or("");
  }
  // Every run is recorded in the history before it starts; its id is the first line printed.
  const auto db_option = args->option("--db");
  const std::string db = history_path(db_option ? &*db_option : nullptr);
  auto run_id = launch::record_new_run(db, c, plan.value(), host_names);
  if (!run_id.ok()) return report(run_id.status());
  if (json) {
    std::printf("{\"run_id\":%lld,\"db\":%s}\n", static_cast<long long>(run_id.value()), json_quote(db).c_str());
  } else {
    std::printf("run %lld (history: %s)\n", static_cast<long long>(run_id.value()), db.c_str());
  }
  std::fflush(stdout);
  if (args->has("--detach")) {
    if (const int rc = detach_supervisor(db, run_id.value()); rc >= 0) return rc;  // the parent; the child goes on
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  auto history = launch::RunHistory::open(db, run_id.value());
  if (!history.ok()) return report(history.status());
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  double last_loss = NAN;
  launch::RunCallbacks cb;
  cb.on_event = [&](int rank, const Json& e) {
    if (json) {
      const std::string line = e.dump() + "\n";
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
      return;
    }
    const std::string kind = e.find("event")->as_string();
    if (kind == "step" && rank == 0) {
      const long long step = e.find("step") ? e.find("step")->as_int() : 0;
      const double loss = e.find("loss") ? e.find("loss")->as_double() : NAN;
      const double tps = e.find("tokens_per_s") ? e.find("tokens_per_s")->as_double() : 0;
      last_loss = loss;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(c.train.steps - step) : 0;
      std::printf("%sstep %lld/%d  loss %.4f  %.0f tokens/s  ETA %s%s", tty ? "\r" : "", step, c.train.steps, loss, tps,
                  clock_text(eta).c_str(), tty ? "   " : "\n");
      std::fflush(stdout);
    } else if (kind == "checkpoint" && rank == 0) {
      const Json* path = e.find("path");
      std::printf("%scheckpoint %s\n", tty ? "\n" : "", path && path->is_string() ? path->as_string().c_str() : "");
    } else if (kind == "error") {
      const Json* m = e.find("message");
      std::fprintf(stderr, "stagecraft-cli: rank %d: %s\n", rank, m && m->is_string() ? m->as_string().c_str() : "error");
    }
  };
  cb.on_log = [&](int rank, bool is_stderr, const std::string& line) {
    if (json || line.empty()) return;
    std::fprintf(stderr, "[rank %d%s] %s\n", rank, is_stderr ? " stderr" : "", line.c_str());
  };
  cb = history.value()->wrap(std::move(cb));
  launch::RunHistory* recorded = history.value().get();
  g_cancel = recorded->cancel_flag();  // also set by `runs cancel` through the history
  if (g_cancel_early.load()) g_cancel->store(true);
  auto supervisor_ready = [recorded](launch::Supervisor&) { recorded->running(); };
  remote_options.cancel = recorded->cancel_flag();
  launch::LocalRunOptions local_options;
  local_options.cancel = recorded->cancel_flag();
  auto outcome = is_remote ? launch::run_remote(c, plan.value(), remote_options, cb, supervisor_ready)
                           : launch::run_local(c, plan.value(), local_options, cb, supervisor_ready);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  g_cancel = nullptr;
  if (Status s = recorded->finish(outcome); !s) {
    std::fprintf(stderr, "stagecraft-cli: warning: run history %s: %s\n", db.c_str(), s.message().c_str());
  }
  if (!outcome.ok()) return report(outcome.status());
  if (!json && tty) std::printf("\n");
  if (!outcome->ok()) {
    std::fprintf(stderr, "stagecraft-cli: error: run %s: %s\n", std::string(launch::to_string(outcome->state)).c_str(),
                 outcome->reason.c_str());
    return 1;
  }
  if (!json) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("done: %d steps in %s, final loss %.4f\n", c.train.steps, clock_text(elapsed).c_str(), last_loss);
  }
  return 0;
}

}  // namespace stagecraft::cli
