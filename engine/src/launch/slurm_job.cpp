// Slurm's commands as functions: sbatch, squeue, sacct, scancel, sinfo, each run as a child
// process with a time limit, its answer parsed. See slurm.h.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>

#include "stagecraft/core/clock.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/program.h"
#include "stagecraft/launch/slurm.h"

namespace stagecraft::launch {

namespace {

struct ToolOutput {
  int status = 0;  // exit status; 128 + N when killed by signal N
  std::string out, err;
};

// The last non-empty line of a command's stderr (Slurm's commands print the error last).
std::string last_line(const std::string& text) {
  std::string line;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string l = text.substr(start, nl - start);
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ')) l.pop_back();
    if (!l.empty()) line = l;
    start = nl + 1;
  }
  return line;
}

// Runs a Slurm command and collects its output; fails when it cannot start (not installed) or
// does not end within timeout_s.
Result<ToolOutput> run_tool(const std::vector<std::string>& argv, double timeout_s = 30) {
  ProcessSpec spec;
  spec.argv = argv;
  auto p = LocalProcess::start(spec);
  if (!p.ok()) {
    return Status::unavailable(argv[0] + " cannot be started here (" + p.status().message() +
                               "); run on a machine of the Slurm cluster with its client commands (Debian: slurm-client)");
  }
  ToolOutput o;
  const double deadline = monotonic_seconds() + timeout_s;
  bool open = true;
  while (true) {
    if (open) {
      std::vector<pollfd> fds;
      for (int fd : p.value()->wait_fds()) fds.push_back({fd, POLLIN, 0});
      poll(fds.data(), fds.size(), 20);
      open = p.value()->read_available(o.out, o.err);
    } else {
      usleep(5000);
    }
    if (auto e = p.value()->poll_exit()) {
      if (open) p.value()->read_available(o.out, o.err);
      o.status = e->signal ? 128 + e->signal : e->code;
      return o;
    }
    if (monotonic_seconds() > deadline) {
      p.value()->kill();
      return Status::unavailable(argv[0] + " did not answer within " + std::to_string(static_cast<int>(timeout_s)) +
                                 " s; is slurmctld reachable (scontrol ping)?");
    }
  }
}

// "sbatch: error: Batch job submission failed: Invalid partition name specified" ->
// "sbatch: Batch job submission failed: Invalid partition name specified".
std::string tool_error(const std::string& tool, const ToolOutput& o) {
  std::string line = last_line(o.err);
  if (line.empty()) line = last_line(o.out);
  if (line.empty()) return tool + " exited with status " + std::to_string(o.status);
  if (line.rfind(tool + ": error: ", 0) == 0) line = tool + ": " + line.substr(tool.size() + 9);
  if (line.rfind(tool + ":", 0) != 0) line = tool + ": " + line;
  return line;
}

int to_int(const std::string& s) {
  try {
    return std::stoi(s);
  } catch (...) {
    return 0;
  }
}

// GPUs in a gres string: "gpu:4", "gpu:a100:8(S:0-1)", "gpu:2,shard:8" -> 4, 8, 2; 0 without one.
int gpus_in_gres(const std::string& gres) {
  int total = 0;
  size_t start = 0;
  while (start <= gres.size()) {
    size_t end = gres.find(',', start);
    if (end == std::string::npos) end = gres.size();
    std::string item = gres.substr(start, end - start);
    item = item.substr(0, item.find('('));
    if (item.rfind("gpu", 0) == 0) {
      const size_t colon = item.rfind(':');
      if (colon != std::string::npos) total += to_int(item.substr(colon + 1));
    }
    start = end + 1;
  }
  return total;
}

}  // namespace

Result<std::string> slurm_submit(const std::string& script, const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  argv.push_back(script);
  auto r = run_tool(argv);
  if (!r.ok()) return r.status();
  if (r->status != 0) return Status::invalid_input(tool_error("sbatch", r.value()));
  return parse_sbatch_job_id(r->out);
}

Result<SlurmJobState> slurm_job_state(const std::string& job_id) {
  auto q = run_tool({"squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T|%r|%N"});
  if (!q.ok()) return q.status();
  SlurmJobState live;
  live.job_id = job_id;
  // squeue fails ("Invalid job id specified") once slurmctld has forgotten the job.
  if (q->status == 0) live = parse_squeue_state(job_id, q->out);
  if (live.active()) return live;
  // Ended, or forgotten: the accounting has the final state, exit code and reason.
  auto a = run_tool({"sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobIDRaw,State,ExitCode,Reason,NodeList"});
  if (a.ok() && a->status == 0) {
    SlurmJobState done = parse_sacct_state(job_id, a->out);
    if (done.known && !done.active()) {
      if ((done.reason.empty() || done.reason == "None") && live.known) done.reason = live.reason;
      if (done.nodes.empty()) done.nodes = live.nodes;
      return done;
    }
  }
  if (!live.known && q->status != 0) {
    const std::string err = tool_error("squeue", q.value());
    if (err.find("Invalid job id") == std::string::npos) return Status::unavailable(err);
  }
  return live;
}

Status slurm_cancel(const std::string& job_id, const std::string& signal) {
  std::vector<std::string> argv = {"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(job_id);
  auto r = run_tool(argv);
  if (!r.ok()) return r.status();
  if (r->status != 0) return Status::unavailable(tool_error("scancel", r.value()));
  return Status::OK();
}

namespace {

// Another program, checked where it will run: a one-task srun on the partition runs the
// preflight probe (preflight.h) in the job's working directory.
void check_program_on_a_node(const config::RunConfig& config, const SlurmOptions& options, SlurmCheck& c) {
  std::error_code ec;
  PreflightOptions po = preflight_options(config, PreflightOptions{},
                                          options.cwd.empty() ? std::filesystem::current_path(ec).string() : options.cwd);
  std::vector<std::string> argv = {"srun", "--nodes=1", "--ntasks=1", "--immediate=60", "--job-name=stagecraft-preflight",
                                   "--partition=" + c.partition};
  if (!options.account.empty()) argv.push_back("--account=" + options.account);
  if (!options.qos.empty()) argv.push_back("--qos=" + options.qos);
  if (!options.constraint.empty()) argv.push_back("--constraint=" + options.constraint);
  // The node's name as Slurm knows it first, then the probe's lines.
  for (const char* w : {"sh", "-c", "printf 'slurm_node=%s\\n' \"${SLURMD_NODENAME:-$(hostname)}\"; exec \"$@\"", "stagecraft-preflight"}) {
    argv.push_back(w);
  }
  for (const auto& w : program_probe_argv(po)) argv.push_back(w);
  auto r = run_tool(argv, 120);
  if (!r.ok()) {
    c.errors.push_back(r.status().message());
    return;
  }
  if (r->status != 0) {
    c.errors.push_back("checking " + po.program + " on a node: " + tool_error("srun", r.value()));
    return;
  }
  std::string node;
  if (const size_t at = r->out.find("slurm_node="); at != std::string::npos) node = r->out.substr(at + 11, r->out.find('\n', at) - at - 11);
  c.program_node = node.empty() ? c.partition : node;
  for (auto& e : program_probe_errors(r->out, po, "slurm node " + c.program_node)) c.errors.push_back(std::move(e));
}

}  // namespace

SlurmCheck slurm_preflight(const config::RunConfig& config, const plan::Plan& plan, const SlurmOptions& options) {
  SlurmCheck c;
  if (Status s = check_slurm_options(options); !s) {
    c.errors.push_back(s.message());
    return c;
  }
  auto shape = slurm_shape(config, plan);
  if (!shape.ok()) {
    c.errors.push_back(shape.status().message());
    return c;
  }
  // The partition: the one named, else the default one (sinfo marks it with '*').
  auto parts = run_tool({"sinfo", "-h", "-o", "%P|%a"});
  if (!parts.ok()) {
    c.errors.push_back(parts.status().message());
    return c;
  }
  if (parts->status != 0) {
    c.errors.push_back(tool_error("sinfo", parts.value()));
    return c;
  }
  std::vector<std::string> names;
  std::string fallback;
  size_t start = 0;
  const std::string& list = parts->out;
  while (start < list.size()) {
    size_t nl = list.find('\n', start);
    if (nl == std::string::npos) nl = list.size();
    std::string name = list.substr(start, nl - start);
    name = name.substr(0, name.find('|'));
    if (!name.empty() && name.back() == '*') {
      name.pop_back();
      if (options.partition.empty()) c.partition = name;
    }
    if (!name.empty()) names.push_back(name);
    start = nl + 1;
  }
  if (!options.partition.empty()) c.partition = options.partition;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  if (c.partition.empty()) {
    c.errors.push_back("no partition named and the cluster has no default one; give --partition (" +
                       (known.empty() ? std::string("sinfo lists none") : "one of " + known) + ")");
    return c;
  }
  if (std::find(names.begin(), names.end(), c.partition) == names.end()) {
    c.errors.push_back("--partition=" + c.partition + ": no such partition; sinfo lists " + (known.empty() ? "none" : known));
    return c;
  }
  // Its nodes: how many, and the fewest CPUs and GPUs among them.
  auto nodes = run_tool({"sinfo", "-h", "-N", "-p", c.partition, "-o", "%N|%c|%G|%t"});
  if (!nodes.ok() || nodes->status != 0) {
    c.errors.push_back(nodes.ok() ? tool_error("sinfo", nodes.value()) : nodes.status().message());
    return c;
  }
  std::vector<std::string> seen;
  int usable = 0;
  c.cpus_per_node = INT_MAX;
  c.gpus_per_node = INT_MAX;
  start = 0;
  const std::string& rows = nodes->out;
  while (start < rows.size()) {
    size_t nl = rows.find('\n', start);
    if (nl == std::string::npos) nl = rows.size();
    const std::string row = rows.substr(start, nl - start);
    start = nl + 1;
    const size_t a = row.find('|'), b = row.find('|', a + 1), d = row.find('|', b + 1);
    if (a == std::string::npos || b == std::string::npos || d == std::string::npos) continue;
    const std::string node = row.substr(0, a);
    if (std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
    seen.push_back(node);
    c.cpus_per_node = std::min(c.cpus_per_node, to_int(row.substr(a + 1, b - a - 1)));
    c.gpus_per_node = std::min(c.gpus_per_node, gpus_in_gres(row.substr(b + 1, d - b - 1)));
    const std::string state = row.substr(d + 1);
    if (state.rfind("down", 0) != 0 && state.rfind("drain", 0) != 0 && state.rfind("fail", 0) != 0) ++usable;
  }
  c.nodes = static_cast<int>(seen.size());
  if (c.nodes == 0) {
    c.cpus_per_node = c.gpus_per_node = 0;
    c.errors.push_back("--partition=" + c.partition + ": the partition has no nodes");
    return c;
  }
  if (c.nodes < shape->nodes) {
    c.errors.push_back("--partition=" + c.partition + ": " + std::to_string(c.nodes) + " node(s), but the plan needs cluster.nodes=" +
                       std::to_string(shape->nodes) + "; plan for fewer nodes or choose a larger partition");
  } else if (usable < shape->nodes) {
    c.warnings.push_back(c.partition + ": only " + std::to_string(usable) + " of its nodes are up (not down or drained); the job waits for " +
                         std::to_string(shape->nodes));
  }
  if (shape->gpus_per_node > 0 && c.gpus_per_node < shape->gpus_per_node) {
    c.errors.push_back("--partition=" + c.partition + ": its nodes have " + std::to_string(c.gpus_per_node) +
                       " GPU(s) (gres gpu), but the plan puts " + std::to_string(shape->gpus_per_node) +
                       " ranks on each node (cluster.gpus_per_node); choose a GPU partition or plan for fewer GPUs per node");
  }
  if (shape->gpus_per_node == 0 && c.cpus_per_node < shape->tasks_per_node) {
    c.errors.push_back("--partition=" + c.partition + ": its nodes have " + std::to_string(c.cpus_per_node) + " CPU(s), but the plan puts " +
                       std::to_string(shape->tasks_per_node) + " ranks on each node (cluster.gpus_per_node)");
  }
  if (!c.errors.empty()) return c;
  // Whether Slurm would take the job from this user with this account, QOS and time.
  SlurmOptions probe = options;
  probe.partition = c.partition;
  const bool foreign = config.launch.foreign();
  if (foreign && probe.command.empty()) {
    auto cmd = program_command(config, {}, probe.run_dir.empty() ? std::string(".stagecraft") : probe.run_dir);
    if (!cmd.ok()) {
      c.errors.push_back(cmd.status().message());
      return c;
    }
    probe.command = cmd->argv;
  }
  auto script = slurm_batch_script(config, plan, probe);
  if (!script.ok()) {
    c.errors.push_back(script.status().message());
    return c;
  }
  char tmpl[] = "/tmp/stagecraft-preflight-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) {
    c.errors.push_back("cannot write a temporary batch script in /tmp");
    return c;
  }
  const std::string& text = script.value();
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (written) {
    auto t = run_tool({"sbatch", "--test-only", tmpl});
    if (!t.ok()) {
      c.errors.push_back(t.status().message());
    } else if (t->status != 0) {
      c.errors.push_back(tool_error("sbatch", t.value()) + (options.account.empty() ? "" : " (account " + options.account + ")"));
    } else {
      c.test_only = last_line(t->err.empty() ? t->out : t->err);
      if (c.test_only.rfind("sbatch: ", 0) == 0) c.test_only.erase(0, 8);
    }
  } else {
    c.errors.push_back("cannot write a temporary batch script in /tmp");
  }
  ::unlink(tmpl);
  if (foreign && c.errors.empty()) check_program_on_a_node(config, options, c);
  return c;
}

}  // namespace stagecraft::launch
