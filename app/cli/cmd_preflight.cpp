// stagecraft-cli preflight: check every host of a remote run before starting it (reachable,
// host key known, authenticated, worker present with this version, enough slots), one line per
// host and per problem; with --slurm, the Slurm partition, its nodes and whether Slurm accepts the
// job instead. Also the host and Slurm options shared with `run` and `export`.
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/program.h"
#include "stagecraft/launch/run_session.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::cli {

const std::set<std::string>& host_options() {
  static const std::set<std::string> kOptions = {"--hosts", "--include", "--exclude", "--ssh-config", "--known-hosts", "--worker"};
  return kOptions;
}

Result<RemoteHosts> remote_hosts(const Args& args, const config::RunConfig& config) {
  RemoteHosts r;
  std::vector<launch::HostEntry> entries;
  if (auto file = args.option("--hosts")) {
    auto parsed = launch::parse_hostfile_file(*file);
    if (!parsed.ok()) return parsed.status();
    entries = std::move(parsed).value();
  } else if (!config.cluster.hosts.empty()) {
    auto parsed = launch::hosts_from_config(config.cluster.hosts);
    if (!parsed.ok()) return parsed.status();
    entries = std::move(parsed).value();
  }
  const std::string include = args.option("--include").value_or("");
  const std::string exclude = args.option("--exclude").value_or("");
  if (entries.empty()) {
    if (!include.empty() || !exclude.empty()) {
      return Status::invalid_input("--include/--exclude: no hosts to select from; give --hosts FILE or cluster.hosts");
    }
    return r;
  }
  auto sel = launch::select_hosts(entries, include, exclude);
  if (!sel.ok()) return sel.status();
  r.hosts = std::move(sel).value();
  r.ssh.config_file = args.option("--ssh-config").value_or("");
  r.ssh.known_hosts_file = args.option("--known-hosts").value_or("");
  r.worker = args.option("--worker").value_or("");
  return r;
}

const std::set<std::string>& slurm_option_names() {
  static const std::set<std::string> kOptions = {"--partition", "--account", "--time", "--qos", "--constraint", "--sbatch-arg"};
  return kOptions;
}

std::optional<std::string> first_slurm_option(const Args& args) {
  for (const auto& o : slurm_option_names()) {
    if (args.option(o)) return o;
  }
  return std::nullopt;
}

Result<launch::SlurmOptions> slurm_options(const Args& args) {
  launch::SlurmOptions o;
  o.partition = args.option("--partition").value_or("");
  o.account = args.option("--account").value_or("");
  o.time = args.option("--time").value_or("");
  o.qos = args.option("--qos").value_or("");
  o.constraint = args.option("--constraint").value_or("");
  o.sbatch_args = args.all("--sbatch-arg");
  for (const auto& name : {"--partition", "--account", "--time", "--qos", "--constraint"}) {
    if (auto v = args.option(name); v && v->empty()) return Status::invalid_input(std::string(name) + ": give a value");
  }
  // --worker: Stagecraft's own worker at a path on the nodes; another program is launch.program
  // (the caller's config).
  if (auto w = args.option("--worker"); w && is_own_worker(*w)) o.worker = *w;
  if (Status s = launch::check_slurm_options(o); !s) return s;
  return o;
}

bool is_own_worker(const std::string& path) {
  const size_t slash = path.rfind('/');
  return path.substr(slash == std::string::npos ? 0 : slash + 1) == "stagecraft-worker";
}

// Prints the checks; returns true when every host passed.
bool print_preflight(const std::vector<launch::HostCheck>& checks, bool json) {
  bool all_ok = true;
  Json list = Json::array();
  for (const auto& c : checks) {
    all_ok = all_ok && c.ok();
    if (json) {
      Json j = Json::object();
      j.set("host", c.host);
      j.set("ok", c.ok());
      j.set("reachable", c.connect.reachable);
      j.set("host_key_known", c.connect.host_key_known);
      j.set("authenticated", c.connect.authenticated);
      j.set("fingerprint", c.connect.fingerprint);
      j.set("address", c.connect.address);
      j.set("cpus", c.cpus);
      j.set("gpus", c.gpus);
      Json gpus = Json::array();
      for (const auto& g : c.gpu_list) {
        Json gj = Json::object();
        gj.set("name", g.name);
        gj.set("memory_mib", g.memory_mib);
        gj.set("driver", g.driver);
        gpus.push_back(std::move(gj));
      }
      j.set("gpu_list", std::move(gpus));
      j.set("cuda_version", c.cuda_version);
      j.set("worker_version", c.worker_version);
      j.set("errors", Json::array_of(c.errors));
      j.set("warnings", Json::array_of(c.warnings));
      list.push_back(std::move(j));
      continue;
    }
    if (c.ok()) {
      const std::string gpus = launch::describe_gpus(c);
      std::printf("%s: ok (%s, %d cores%s%s)\n", c.host.c_str(), c.connect.address.c_str(), c.cpus,
                  !gpus.empty() ? (", " + gpus).c_str() : c.gpus >= 0 ? (", " + std::to_string(c.gpus) + " GPUs").c_str() : "",
                  c.worker_version.empty() ? "" : (", " + c.worker_version).c_str());
    }
    for (const auto& w : c.warnings) std::printf("warning: %s\n", w.c_str());
    for (const auto& e : c.errors) std::fprintf(stderr, "stagecraft-cli: error: %s\n", e.c_str());
  }
  if (json) std::printf("%s\n", list.dump().c_str());
  std::fflush(stdout);
  return all_ok;
}

namespace {

// preflight --slurm: the partition, its nodes and GPUs, and sbatch --test-only.
int preflight_slurm(const Args& args, const config::RunConfig& config) {
  if (args.option("--hosts") || args.option("--include") || args.option("--exclude") || args.option("--ssh-config") ||
      args.option("--known-hosts")) {
    return report(Status::invalid_input("preflight --slurm: Slurm picks the nodes; remove the host options (--hosts ...)"));
  }
  auto options = slurm_options(args);
  if (!options.ok()) return report(options.status());
  config::RunConfig run_config = config;
  if (auto w = args.option("--worker")) {
    if (w->empty()) return report(Status::invalid_input("preflight: --worker: give a program"));
    if (!is_own_worker(*w)) run_config.launch.program = *w;  // another program's run, as launch.program is
  }
  auto plan = plan::make_plan(run_config);
  if (!plan.ok()) return report(plan.status());
  if (Status s = launch::check_runnable(run_config, plan.value(), {}, true); !s) return report(s);
  const launch::SlurmCheck c = launch::slurm_preflight(run_config, plan.value(), options.value());
  if (args.has("--json")) {
    Json j = Json::object();
    j.set("partition", c.partition);
    j.set("ok", c.ok());
    j.set("nodes", c.nodes);
    j.set("cpus_per_node", c.cpus_per_node);
    j.set("gpus_per_node", c.gpus_per_node);
    j.set("test_only", c.test_only);
    if (!c.program_node.empty()) j.set("program_node", c.program_node);
    j.set("errors", Json::array_of(c.errors));
    j.set("warnings", Json::array_of(c.warnings));
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (!c.partition.empty() && c.nodes > 0) {
      std::printf("slurm: partition %s: %d node(s), at least %d CPUs and %d GPUs each\n", c.partition.c_str(), c.nodes, c.cpus_per_node,
                  c.gpus_per_node);
    }
    if (!c.test_only.empty()) std::printf("slurm: sbatch --test-only: %s\n", c.test_only.c_str());
    if (!c.program_node.empty() && c.ok()) {
      std::printf("slurm: %s is there on %s\n", run_config.launch.program.c_str(), c.program_node.c_str());
    }
    for (const auto& w : c.warnings) std::printf("warning: %s\n", w.c_str());
    for (const auto& e : c.errors) std::fprintf(stderr, "stagecraft-cli: error: %s\n", e.c_str());
    if (c.ok()) std::printf("slurm: ok\n");
  }
  std::fflush(stdout);
  return c.ok() ? 0 : 1;
}

}  // namespace

int cmd_preflight(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json", "--slurm"};
  spec.options = host_options();
  spec.options.insert(slurm_option_names().begin(), slurm_option_names().end());
  spec.repeatable = {"--sbatch-arg"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "preflight");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("preflight: expected one CONFIG file (usage: stagecraft-cli preflight CONFIG --hosts FILE ... | --slurm [--partition P] ...)"));
  }
  auto cfg = load_run_config(args->positionals[0], args->overrides, nullptr);
  if (!cfg.ok()) return report(cfg.status());
  if (args->has("--slurm")) return preflight_slurm(args.value(), cfg.value());
  if (auto o = first_slurm_option(args.value())) return report(Status::invalid_input("preflight: " + *o + " is a Slurm option; give --slurm too"));
  auto hosts = remote_hosts(args.value(), cfg.value());
  if (!hosts.ok()) return report(hosts.status());
  if (hosts->hosts.empty()) return report(Status::invalid_input("preflight: no hosts; give --hosts FILE or cluster.hosts in the config"));
  if (auto per_node = launch::slots_per_node(hosts->hosts); !per_node.ok()) return report(per_node.status());
  // --worker PROGRAM (not a stagecraft-worker) is another program's run, as launch.program is.
  config::RunConfig run_config = cfg.value();
  launch::PreflightOptions base;
  base.ssh = hosts->ssh;
  if (!hosts->worker.empty() && !is_own_worker(hosts->worker)) {
    run_config.launch.program = hosts->worker;
  } else {
    base.worker_path = hosts->worker;
  }
  std::error_code ec;
  const auto po = launch::preflight_options(run_config, base, std::filesystem::current_path(ec).string());
  return print_preflight(launch::preflight(hosts->hosts, po), args->has("--json")) ? 0 : 1;
}

}  // namespace stagecraft::cli
