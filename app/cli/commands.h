// The commands of stagecraft-cli, one function each, in cmd_*.cpp. Each returns the process
// exit status: 0 success, 1 the operation failed, 2 invalid input (file, YAML, key, value,
// option). Errors go to stderr, one line per problem, each naming what to fix.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/ssh.h"

namespace stagecraft::cli {

struct Command {
  const char* name;
  const char* usage;    // one line: "plan CONFIG [key=value ...] [--json]"
  const char* summary;  // one line
  int (*run)(const std::vector<std::string>& args);
};

const std::vector<Command>& commands();

// Prints every line of st's message as "stagecraft-cli: error: LINE" and returns the exit status
// its code maps to (2 for kInvalidInput and kNotFound, 1 otherwise).
int report(const Status& st);
// "usage: stagecraft-cli USAGE" plus the summary, for --help.
int print_help(const std::string& command);
// The man page of stagecraft-cli (command empty) or of one command, in roff (cmd_docs.cpp).
int print_man(const std::string& command);
// A bash completion script for stagecraft-cli's commands and their options.
int print_bash_completion();

int cmd_plan(const std::vector<std::string>& args);
int cmd_search(const std::vector<std::string>& args);
int cmd_scale(const std::vector<std::string>& args);
int cmd_devices(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_runs(const std::vector<std::string>& args);
int cmd_calibrate(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_import(const std::vector<std::string>& args);
int cmd_preflight(const std::vector<std::string>& args);

// Remote hosts for preflight and run (cmd_preflight.cpp): --hosts FILE or cluster.hosts,
// filtered by --include / --exclude; --ssh-config, --known-hosts, --worker. No hosts: local.
struct Args;
struct RemoteHosts {
  std::vector<launch::SelectedHost> hosts;
  launch::SshOptions ssh;
  std::string worker;  // --worker PATH on the hosts; empty: this build's stagecraft-worker path
};
// Whether --worker names Stagecraft's own worker (a file named stagecraft-worker, at another
// path), rather than another program to run in its place (launch.program).
bool is_own_worker(const std::string& path);
const std::set<std::string>& host_options();
Result<RemoteHosts> remote_hosts(const Args& args, const config::RunConfig& config);
// Slurm's options for run, export and preflight (cmd_preflight.cpp): --partition, --account,
// --time, --qos, --constraint, --sbatch-arg (repeatable). slurm_options() reads and checks them
// (one line naming the option); `worker` is --worker's path on the nodes.
const std::set<std::string>& slurm_option_names();
Result<launch::SlurmOptions> slurm_options(const Args& args);
// Whether any of them was given (they need --slurm in run and preflight).
std::optional<std::string> first_slurm_option(const Args& args);
// Prints preflight results (one line per host and problem, or JSON); true when all passed.
bool print_preflight(const std::vector<launch::HostCheck>& checks, bool json);

}  // namespace stagecraft::cli
