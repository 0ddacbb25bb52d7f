// stagecraft-cli preflight: check every host of a remote run before starting it (reachable,
// host key known, authenticated, worker present with this version, enough slots), one line per
// host and per problem. Also the host options shared with `run` (remote_hosts()).
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/program.h"

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

int cmd_preflight(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json"};
  spec.options = host_options();
  spec.overrides = true;
  auto args = parse_args(argv, spec, "preflight");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("preflight: expected one CONFIG file (usage: stagecraft-cli preflight CONFIG --hosts FILE ...)"));
  }
  auto cfg = load_run_config(args->positionals[0], args->overrides, nullptr);
  if (!cfg.ok()) return report(cfg.status());
  auto hosts = remote_hosts(args.value(), cfg.value());
  if (!hosts.ok()) return report(hosts.status());
  if (hosts->hosts.empty()) return report(Status::invalid_input("preflight: no hosts; give --hosts FILE or cluster.hosts in the config"));
  if (auto per_node = launch::slots_per_node(hosts->hosts); !per_node.ok()) return report(per_node.status());
  launch::PreflightOptions po;
  po.ssh = hosts->ssh;
  po.cuda = cfg->backend == config::Backend::kCuda;
  // --worker PROGRAM (not a stagecraft-worker) or launch.program: another program's run.
  std::string program = cfg->launch.program;
  if (!hosts->worker.empty() && !is_own_worker(hosts->worker)) program = hosts->worker;
  if (program.empty()) {
    po.worker_path = hosts->worker;
  } else {
    po.check_worker = false;
    po.program = program;
    if (launch::is_python_program(program)) po.python = cfg->launch.python;
    std::error_code ec;
    po.cwd = std::filesystem::current_path(ec).string();
  }
  return print_preflight(launch::preflight(hosts->hosts, po), args->has("--json")) ? 0 : 1;
}

}  // namespace stagecraft::cli
