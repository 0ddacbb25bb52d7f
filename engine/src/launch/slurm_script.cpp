// The Slurm batch script and what is read from Slurm's text: --time formats, host lists, job
// states, sbatch's job id. See slurm.h; the script's design is docs/ARCHITECTURE.md §11.
#include <cctype>
#include <charconv>
#include <cstdio>

#include "stagecraft/core/text.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/local_run.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/ssh.h"

#include "run_common.h"

namespace stagecraft::launch {

namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}


// A name handed to sbatch as one option value: no spaces, quotes, newlines or shell syntax.
Status check_name(const char* option, const std::string& value) {
  for (char c : value) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ',' || c == ':' || c == '&' ||
          c == '|' || c == '[' || c == ']' || c == '*' || c == '@' || c == '+')) {
      return Status::invalid_input(std::string(option) + "=" + value + ": `" + std::string(1, c) +
                                   "` is not allowed in a Slurm name; give the name as Slurm lists it (sinfo, sacctmgr)");
    }
  }
  return Status::OK();
}

// Options the script sets from the plan and the run; an --sbatch-arg may not set them again.
constexpr const char* kOwnOptions[] = {"--nodes",  "-N",         "--ntasks",   "-n",          "--ntasks-per-node", "--output",
                                       "-o",       "--error",    "-e",         "--job-name",  "-J",                "--chdir",
                                       "-D",       "--gpus-per-node", "--parsable", "--wrap",  "--test-only"};

const char* own_option(const std::string& arg) {
  for (const char* o : kOwnOptions) {
    const std::string opt = o;
    if (arg == opt) return o;
    if (opt.size() > 2 && arg.rfind(opt + "=", 0) == 0) return o;  // --nodes=2
    if (opt.size() == 2 && arg.size() > 2 && arg.rfind(opt, 0) == 0 && arg[1] != '-') return o;  // -N2
  }
  return nullptr;
}

// The task wrapper's body (after its arguments are read): the program's stdout, stderr and exit
// status go to RUN_DIR/rank-N.{out,err,exit}, the status written last and atomically, so the
// submitting side has every line of a rank before it sees its end.
constexpr const char* kTaskBody = R"SH(r=${SLURM_PROCID:?stagecraft: SLURM_PROCID is not set; run under srun}
"$@" >"$d/rank-$r.out" 2>"$d/rank-$r.err" </dev/null
st=$?
echo "$st" >"$d/rank-$r.exit.tmp" && mv -f "$d/rank-$r.exit.tmp" "$d/rank-$r.exit"
if [ "$st" -gt 128 ]; then
  echo "stagecraft: rank $r on ${SLURMD_NODENAME:-$(hostname)} was killed by signal $((st - 128))" >&2
elif [ "$st" -ne 0 ]; then
  echo "stagecraft: rank $r on ${SLURMD_NODENAME:-$(hostname)} exited with status $st" >&2
fi
exit "$st")SH";

// Another program's task: torchrun's variables from Slurm's. LOCAL_WORLD_SIZE comes from the
// script (SLURM_NTASKS_PER_NODE may read "2(x2)"); the threads of a CPU rank default to the CPUs
// Slurm gave the task.
constexpr const char* kForeignTaskEnv = R"SH(d=$1; n=$2; shift 2
RANK=${SLURM_PROCID:?stagecraft: SLURM_PROCID is not set; run under srun}
LOCAL_RANK=${SLURM_LOCALID:?stagecraft: SLURM_LOCALID is not set; run under srun}
WORLD_SIZE=${SLURM_NTASKS:?stagecraft: SLURM_NTASKS is not set; run under srun}
GROUP_RANK=${SLURM_NODEID:?stagecraft: SLURM_NODEID is not set; run under srun}
LOCAL_WORLD_SIZE=$n
OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
PYTHONUNBUFFERED=1
export RANK LOCAL_RANK WORLD_SIZE GROUP_RANK LOCAL_WORLD_SIZE OMP_NUM_THREADS OPENBLAS_NUM_THREADS PYTHONUNBUFFERED
)SH";

}  // namespace

std::string slurm_task_wrapper(bool foreign) {
  return std::string(foreign ? kForeignTaskEnv : "d=$1; shift\n") + kTaskBody;
}

Status check_slurm_time(const std::string& time) {
  const auto bad = [&] {
    return Status::invalid_input("--time=" + time +
                                 ": not a Slurm time limit; use MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, "
                                 "DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS (e.g. 01:30:00 or 2-00:00:00)");
  };
  if (time == "infinite" || time == "unlimited" || time == "UNLIMITED" || time == "INFINITE") return Status::OK();
  std::string_view rest = time;
  bool has_days = false;
  if (const size_t dash = rest.find('-'); dash != std::string_view::npos) {
    if (!all_digits(rest.substr(0, dash))) return bad();
    rest = rest.substr(dash + 1);
    has_days = true;
  }
  const auto parts = split_fields(rest, ':');
  if (parts.size() > 3) return bad();
  for (const auto& p : parts) {
    if (!all_digits(p)) return bad();
  }
  // After the first field, minutes and seconds are below 60 (the first field may be large:
  // "90" minutes, "36:00:00" hours). With days, the first field is hours (below 24).
  const auto value = [](std::string_view p) {
    int v = 0;
    std::from_chars(p.data(), p.data() + p.size(), v);
    return p.size() > 6 ? 1000000 : v;
  };
  for (size_t i = 1; i < parts.size(); ++i) {
    if (value(parts[i]) >= 60) return bad();
  }
  if (has_days && value(parts[0]) >= 24) return bad();
  return Status::OK();
}

Status check_slurm_options(const SlurmOptions& o) {
  if (!o.time.empty()) {
    if (Status s = check_slurm_time(o.time); !s) return s;
  }
  if (Status s = check_name("--partition", o.partition); !s) return s;
  if (Status s = check_name("--account", o.account); !s) return s;
  if (Status s = check_name("--qos", o.qos); !s) return s;
  if (Status s = check_name("--constraint", o.constraint); !s) return s;
  for (const auto& a : o.sbatch_args) {
    if (a.empty() || a[0] != '-') {
      return Status::invalid_input("--sbatch-arg=" + a + ": an sbatch option such as --mem=0 or --exclusive, one per --sbatch-arg");
    }
    if (a.find_first_of("\n\r") != std::string::npos) return Status::invalid_input("--sbatch-arg: one line, one option");
    if (const char* own = own_option(a)) {
      return Status::invalid_input("--sbatch-arg=" + a + ": " + own +
                                   " is set by Stagecraft from the plan and the run (nodes and tasks from cluster.nodes and "
                                   "gpus_per_node); change the config instead");
    }
  }
  for (const auto& [what, path] : {std::pair{"--worker", o.worker}, {"run directory", o.run_dir}, {"working directory", o.cwd}}) {
    if (path.find_first_of("\n\r") != std::string::npos) return Status::invalid_input(std::string(what) + ": a path without line breaks");
  }
  return Status::OK();
}

Result<SlurmShape> slurm_shape(const config::RunConfig& config, const plan::Plan& plan) {
  SlurmShape s;
  s.nodes = config.cluster.nodes;
  const int world = plan.topology.world_size();
  if (s.nodes < 1 || world % s.nodes != 0) {
    return Status::invalid_input("cluster.nodes=" + std::to_string(s.nodes) + ": the plan's " + std::to_string(world) +
                                 " ranks do not split evenly over the nodes");
  }
  s.tasks_per_node = world / s.nodes;
  if (config.backend == config::Backend::kCuda) s.gpus_per_node = s.tasks_per_node;
  return s;
}

Result<std::string> slurm_batch_script(const config::RunConfig& config, const plan::Plan& plan, const SlurmOptions& o) {
  const bool foreign = config.launch.foreign();
  if (foreign && o.command.empty()) {
    return Status::invalid_input("launch.program=" + config.launch.program +
                                 ": export --to slurm writes the script of Stagecraft's own worker; run the program with "
                                 "`stagecraft-cli run --slurm` (its script is then RUN_DIR/job.sbatch), or remove launch.program");
  }
  if (Status s = check_slurm_options(o); !s) return s;
  auto shape = slurm_shape(config, plan);
  if (!shape.ok()) return shape.status();
  const std::string yaml = config::to_yaml(config);
  const std::string eof = "STAGECRAFT_CONFIG_EOF";
  if (yaml.find(eof) != std::string::npos) return Status::invalid_input("the configuration holds the line " + eof + "; remove it");
  const std::string worker = o.worker.empty() ? default_worker_path() : o.worker;
  const int world = plan.topology.world_size();

  std::string s = "#!/bin/sh\n";
  char head[1024];
  std::snprintf(head, sizeof head,
                foreign ? "# Stagecraft run \"%s\" through Slurm: %d node(s) x %d task(s), dp %d x tp %d x pp %d, written by stagecraft-cli %s.\n"
                          "# Another program's run: the batch step picks MASTER_ADDR (the first node) and a free MASTER_PORT;\n"
                          "# one srun step starts the program once per task with torchrun's variables from Slurm's, each\n"
                          "# writing its output to rank-N.out in the run directory.\n"
                        : "# Stagecraft run \"%s\" through Slurm: %d node(s) x %d task(s), dp %d x tp %d x pp %d, written by stagecraft-cli %s.\n"
                          "# The batch step serves the run's rendezvous store on the first node; one srun step starts one\n"
                          "# stagecraft-worker per task, each writing its events to rank-N.out in the run directory.\n",
                config.name.c_str(), shape->nodes, shape->tasks_per_node, plan.dp, plan.tp, plan.pp, STAGECRAFT_VERSION);
  s += head;
  const auto directive = [&](const std::string& opt) { s += "#SBATCH " + opt + "\n"; };
  std::string job_name = "stagecraft-" + config.name;
  for (char& c : job_name) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\'' || c == '"') c = '_';
  }
  directive("--job-name=" + job_name);
  directive("--nodes=" + std::to_string(shape->nodes));
  directive("--ntasks-per-node=" + std::to_string(shape->tasks_per_node));
  if (shape->gpus_per_node > 0) directive("--gpus-per-node=" + std::to_string(shape->gpus_per_node));
  if (!o.partition.empty()) directive("--partition=" + o.partition);
  if (!o.account.empty()) directive("--account=" + o.account);
  if (!o.time.empty()) directive("--time=" + o.time);
  if (!o.qos.empty()) directive("--qos=" + o.qos);
  if (!o.constraint.empty()) directive("--constraint=" + o.constraint);
  if (!o.run_dir.empty()) directive("--output=" + o.run_dir + "/job-%j.out");
  if (!o.cwd.empty()) directive("--chdir=" + o.cwd);
  for (const auto& a : o.sbatch_args) directive(a);
  s += "set -u\n";
  s += "run_dir=" + (o.run_dir.empty() ? std::string("\"${SLURM_SUBMIT_DIR:-$PWD}/stagecraft-${SLURM_JOB_ID}\"") : shell_quote(o.run_dir)) + "\n";
  if (!foreign) s += "worker=" + shell_quote(worker) + "\n";
  s += "mkdir -p \"$run_dir\" || exit 1\n";
  s += "cat >\"$run_dir/config.yaml\" <<'" + eof + "'\n" + yaml + (yaml.empty() || yaml.back() == '\n' ? "" : "\n") + eof + "\n";
  s += "STAGECRAFT_RUN_ID=" + (o.run_id.empty() ? std::string("\"slurm-${SLURM_JOB_ID}\"") : shell_quote(o.run_id)) + "\n";
  if (foreign) {
    std::string argv;
    for (const auto& w : o.command) argv += " " + shell_quote(w);
    s += "# The rendezvous of the program's ranks: the first node of the allocation (this batch step's).\n";
    s += "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" 2>/dev/null | head -n 1)\n";
    s += "[ -n \"$MASTER_ADDR\" ] || MASTER_ADDR=${SLURMD_NODENAME:-$(hostname)}\n";
    s += "MASTER_PORT=$(sh -c " + shell_quote(kFreePortProbe) + " | sed -n 's/^port=//p')\n";
    s += "[ -n \"$MASTER_PORT\" ] || MASTER_PORT=$((20000 + ${SLURM_JOB_ID:-0} % 40000))\n";
    s += "export STAGECRAFT_RUN_ID MASTER_ADDR MASTER_PORT\n";
    s += "srun --kill-on-bad-exit=1 --ntasks=" + std::to_string(world) + " --ntasks-per-node=" + std::to_string(shape->tasks_per_node) +
         " sh -c " + shell_quote(slurm_task_wrapper(true)) + " stagecraft-task \"$run_dir\" " + std::to_string(shape->tasks_per_node) + argv +
         "\n";
    s += "exit $?\n";
    return s;
  }
  s += "# The run's token, drawn here: it never leaves the job's processes.\n";
  s += "STAGECRAFT_RUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')\n";
  s += "export STAGECRAFT_RUN_ID STAGECRAFT_RUN_TOKEN\n";
  s += "rm -f \"$run_dir/store.port\"\n";
  s += "\"$worker\" --serve-store \"$run_dir/config.yaml\" >\"$run_dir/store.port\" 2>\"$run_dir/store.err\" &\n";
  s += "store=$!\n";
  s += "i=0\n";
  s += "until [ -s \"$run_dir/store.port\" ]; do\n";
  s += "  kill -0 \"$store\" 2>/dev/null || { echo \"stagecraft: the rendezvous store did not start: $(cat \"$run_dir/store.err\")\" >&2; exit 1; }\n";
  s += "  i=$((i + 1)); [ \"$i\" -le 300 ] || { echo \"stagecraft: the rendezvous store did not start within 30 s\" >&2; kill \"$store\"; exit 1; }\n";
  s += "  sleep 0.1\n";
  s += "done\n";
  s += "MASTER_PORT=$(head -n 1 \"$run_dir/store.port\")\n";
  s += "export MASTER_PORT\n";
  s += "srun --kill-on-bad-exit=1 --ntasks=" + std::to_string(world) + " --ntasks-per-node=" + std::to_string(shape->tasks_per_node) +
       " sh -c " + shell_quote(slurm_task_wrapper(false)) + " stagecraft-task \"$run_dir\" \"$worker\"\n";
  s += "st=$?\n";
  s += "kill \"$store\" 2>/dev/null\n";
  s += "exit \"$st\"\n";
  return s;
}

bool SlurmJobState::active() const {
  if (!known) return false;
  for (const char* ended : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                            "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}) {
    if (state.rfind(ended, 0) == 0) return false;
  }
  return true;
}

bool SlurmJobState::pending() const {
  return known && (state == "PENDING" || state == "REQUEUED" || state == "REQUEUE_HOLD" || state == "REQUEUE_FED" || state == "RESIZING");
}

std::string SlurmJobState::describe() const {
  if (!known) return "unknown to Slurm";
  std::string d = state;
  if (!reason.empty() && reason != "None" && reason != "(null)") d += " (" + reason + ")";
  return d;
}

namespace {

std::string trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// A job's node list as squeue and sacct print it; "" for none yet.
std::string node_list(std::string_view s) {
  std::string n = trimmed(s);
  if (n == "None assigned" || n == "(null)" || n == "n/a") return "";
  return n;
}

}  // namespace

SlurmJobState parse_squeue_state(const std::string& job_id, const std::string& out) {
  SlurmJobState st;
  st.job_id = job_id;
  for (const auto& line : split_fields(out, '\n')) {
    const std::string l = trimmed(line);
    if (l.empty()) continue;
    const auto f = split_fields(l, '|');
    st.state = trimmed(f[0]);
    st.reason = f.size() > 1 ? trimmed(f[1]) : "";
    st.nodes = f.size() > 2 ? node_list(f[2]) : "";
    st.known = !st.state.empty();
    // A completing job's list shrinks as each node finishes its epilog, and an ended job slurmctld
    // still lists keeps only what is left of it: not where the job ran (the running state's list
    // and the accounting's are), so neither is reported.
    if (st.state == "COMPLETING" || !st.active()) st.nodes.clear();
    break;
  }
  return st;
}

SlurmJobState parse_sacct_state(const std::string& job_id, const std::string& out) {
  SlurmJobState st;
  st.job_id = job_id;
  for (const auto& line : split_fields(out, '\n')) {
    const auto f = split_fields(line, '|');
    if (f.size() < 3 || trimmed(f[0]) != job_id) continue;  // the job's own row, not a step's
    st.state = trimmed(f[1]);
    st.exit_code = trimmed(f[2]);
    st.reason = f.size() > 3 ? trimmed(f[3]) : "";
    st.nodes = f.size() > 4 ? node_list(f[4]) : "";
    st.known = !st.state.empty();
    break;
  }
  return st;
}

Result<std::string> parse_sbatch_job_id(const std::string& out) {
  std::string first = trimmed(out.substr(0, out.find('\n')));
  first = first.substr(0, first.find(';'));
  if (!all_digits(first)) return Status::invalid_input("sbatch --parsable printed `" + trimmed(out) + "`, not a job id");
  return first;
}

}  // namespace stagecraft::launch
