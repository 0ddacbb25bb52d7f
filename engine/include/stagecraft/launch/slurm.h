// Slurm: a run submitted to a Slurm cluster, supervised from the submitting machine
// (docs/ARCHITECTURE.md §11). Slurm allocates the nodes and starts the processes; Stagecraft
// writes the batch script, submits it, follows the job and records it like any other run.
//
// The batch script (slurm_batch_script) asks for the plan's nodes and tasks per node
// (`--gpus-per-node` for the cuda backend), embeds the run's configuration, and
//   1. serves the run's rendezvous store from the batch step, on the first node of the
//      allocation (`stagecraft-worker --serve-store`), with a token drawn inside the job,
//   2. starts one `stagecraft-worker` per task with one `srun --kill-on-bad-exit=1` step, each
//      under a small sh wrapper that writes the task's stdout, stderr and exit status to
//      rank-N.out, rank-N.err and rank-N.exit in the run directory.
// The workers read their rank from Slurm's variables (worker_env.h).
//
// Another program (launch.program) runs the same way without the store: the batch step picks
// MASTER_ADDR (the allocation's first node) and a free MASTER_PORT there, and the task wrapper
// gives each task torchrun's variables from Slurm's (RANK = SLURM_PROCID, LOCAL_RANK =
// SLURM_LOCALID, WORLD_SIZE = SLURM_NTASKS, LOCAL_WORLD_SIZE, GROUP_RANK = SLURM_NODEID) before it
// starts the program's prepared command line (SlurmOptions::command); the GPUs are those Slurm
// binds to the job's tasks (CUDA_VISIBLE_DEVICES as Slurm sets it), and a rank picks its own by
// LOCAL_RANK, as under torchrun. The submitting side
// follows those files: the run directory must be on a file system the nodes and the submitting
// machine share (as $HOME is on Slurm clusters), like the working directory for SSH runs.
//
// What is not here: which machine may submit (the caller's PATH must have sbatch, squeue,
// scancel, sinfo and, for the final reason, sacct) and the run history (run_session.h records
// the job through SlurmRunOptions::on_job).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::launch {

// What the batch script asks of Slurm besides the plan's shape. Empty fields leave the cluster's
// defaults.
struct SlurmOptions {
  std::string partition;                 // --partition
  std::string account;                   // --account
  std::string time;                      // --time, in one of Slurm's formats (check_slurm_time)
  std::string qos;                       // --qos
  std::string constraint;                // --constraint
  std::vector<std::string> sbatch_args;  // more sbatch options, one word each ("--mem=0", "--exclusive")
  // The worker's path on the nodes; empty: default_worker_path() (the same path as here).
  std::string worker;
  // The run's directory (absolute): the script, the job's output and every rank's files. Empty
  // (a script exported for headless use): stagecraft-JOBID under the directory sbatch ran in.
  std::string run_dir;
  // The job's working directory (absolute; relative paths of the config resolve there). Empty:
  // the directory sbatch runs in.
  std::string cwd;
  // STAGECRAFT_RUN_ID of the workers; empty: slurm-JOBID.
  std::string run_id;
  // Another program's run (launch.program): its prepared command line (program_command), run
  // once per task; RunSession sets it. Empty for Stagecraft's own worker.
  std::vector<std::string> command;
};

// Whether `time` is one of the --time formats Slurm accepts: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
// (whole numbers; minutes and seconds below 60 after the first field), or "infinite"/"unlimited".
// Fails with one line quoting the value and the formats.
Status check_slurm_time(const std::string& time);

// Checks every option: the time format, names without spaces or quotes, sbatch arguments that
// start with "-" and are not ones the script sets itself (--nodes, --ntasks*, --output,
// --job-name, ...). One line naming the option and the fix.
Status check_slurm_options(const SlurmOptions& options);

// The job's shape: cluster.nodes nodes, gpus_per_node tasks per node (the plan's ranks in rank
// order, node-major, as Slurm's block distribution numbers them); GPUs per node for the cuda
// backend (0 on the CPU).
struct SlurmShape {
  int nodes = 1;
  int tasks_per_node = 1;
  int gpus_per_node = 0;
};
Result<SlurmShape> slurm_shape(const config::RunConfig& config, const plan::Plan& plan);

// The batch script (sh) for the run, as `export --to slurm` writes it and `run --slurm` submits
// it. Fails on options check_slurm_options refuses, on another program's run without its
// command line (options.command) and on a configuration that does not fit a here-document.
Result<std::string> slurm_batch_script(const config::RunConfig& config, const plan::Plan& plan, const SlurmOptions& options);

// The sh program srun starts on every task. Stagecraft's worker: `sh -c WRAPPER stagecraft-task
// RUN_DIR PROGRAM ARGS...`; another program (foreign): `sh -c WRAPPER stagecraft-task RUN_DIR
// LOCAL_WORLD_SIZE PROGRAM ARGS...`, with torchrun's variables set from Slurm's first. Either
// writes the task's stdout, stderr and exit status to RUN_DIR/rank-N.{out,err,exit}.
std::string slurm_task_wrapper(bool foreign);

// A job's state as Slurm reports it.
struct SlurmJobState {
  std::string job_id;
  std::string state;      // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
  std::string reason;     // Slurm's reason ("Priority", "Resources", "TimeLimit", "None"), may be empty
  std::string exit_code;  // "CODE:SIGNAL" once the job ended (sacct), else empty
  std::string nodes;      // the nodes Slurm gave the job, as a Slurm host list ("sc7n[0-1]"); empty before it is placed, and
                          // from squeue while it completes or once it ended (what is left of the list then)
  bool known = false;     // false: Slurm does not (yet or any more) know the job
  bool active() const;    // PENDING, CONFIGURING, RUNNING, COMPLETING, SUSPENDED, ... (not ended)
  bool pending() const;   // PENDING (or REQUEUED, RESIZING): not started yet
  // One line: "PENDING (Priority)", "TIMEOUT", "CANCELLED by 0".
  std::string describe() const;
};

// The output of `squeue -h -j ID -t all -o %T|%r|%N` and of `sacct -n -P -X -j ID -o
// JobIDRaw,State,ExitCode,Reason,NodeList` as a state (known false when the output holds no row).
// Older two- and four-field outputs read too; "None assigned" and "(null)" nodes read as none.
SlurmJobState parse_squeue_state(const std::string& job_id, const std::string& out);
SlurmJobState parse_sacct_state(const std::string& job_id, const std::string& out);

// The job id in `sbatch --parsable`'s output ("123" or "123;cluster"); invalid_input otherwise.
Result<std::string> parse_sbatch_job_id(const std::string& out);

// Submits `script` with `sbatch --parsable`, extra options first; the job id, or a failure with
// sbatch's own message (one line: "sbatch: invalid partition specified: gpu").
Result<std::string> slurm_submit(const std::string& script, const std::vector<std::string>& extra_args = {});
// The job's state: squeue while slurmctld knows the job; once it ended, sacct (the final state,
// exit code and reason) when the cluster keeps accounting, else what squeue last said.
Result<SlurmJobState> slurm_job_state(const std::string& job_id);
// `scancel JOB` (signal empty) or `scancel --signal=SIG JOB`.
Status slurm_cancel(const std::string& job_id, const std::string& signal = {});

// preflight --slurm: does the partition exist (the default one when options.partition is
// empty), do its nodes have the plan's nodes and, for cuda, GPUs (sinfo), and does Slurm accept
// the job for this user and account (`sbatch --test-only` of the script)? For another program
// (launch.program) also: is it there, runnable, with its interpreter, in the job's working
// directory on a node of the partition (a one-task srun of preflight.h's probe)?
struct SlurmCheck {
  std::string partition;      // the partition checked (the default one when none was named)
  int nodes = 0;              // its nodes
  int cpus_per_node = 0;      // the fewest CPUs of its nodes
  int gpus_per_node = 0;      // the fewest GPUs (gres gpu) of its nodes
  std::string test_only;      // sbatch --test-only's answer ("Job 12 to start at ... using 4 processors on nodes ...")
  std::string program_node;   // another program's run: the node a one-task srun checked the program on
  std::vector<std::string> errors;    // each one line naming what to fix
  std::vector<std::string> warnings;
  bool ok() const { return errors.empty(); }
};
SlurmCheck slurm_preflight(const config::RunConfig& config, const plan::Plan& plan, const SlurmOptions& options);

struct SlurmRunOptions {
  SlurmOptions slurm;  // run_dir must be set (absolute, created by run_slurm when missing)
  double poll_s = 1.0;   // how often the job's state is asked (squeue) while it waits and runs
  // After a rank failed: how long Slurm has to end the job itself (srun --kill-on-bad-exit, then
  // Slurm's KillWait, 30 s by default) before scancel; the wait ends as soon as the job does, and
  // a job that ends this way is FAILED rather than CANCELLED.
  double grace_s = 30.0;
  const std::atomic<bool>* cancel = nullptr;  // set to true (any thread, a signal handler): scancel
  // Told the job id once submitted, then every change of its state or reason (on the calling
  // thread). RunSession records them and marks the run running when the job runs.
  std::function<void(const SlurmJobState&)> on_job;
  // Called once the job has left the queue, as supervision of its tasks begins, with its state.
  std::function<void(const SlurmJobState&)> on_running;
};

// Writes the batch script as RUN_DIR/job.sbatch, submits it, waits while Slurm holds the job
// (cancel scancels it), then supervises the ranks from their files with the Supervisor
// (supervisor.h): the first failing rank fails the run and the job is cancelled unless Slurm
// already ended it (srun --kill-on-bad-exit); cancel scancels; a job Slurm ends (time limit,
// node failure, preemption, scancel by someone else) ends the run with Slurm's state and reason.
// Fails (no outcome) when the script cannot be written or sbatch refuses the job.
Result<RunOutcome> run_slurm(const config::RunConfig& config, const plan::Plan& plan, const SlurmRunOptions& options,
                             RunCallbacks callbacks);

}  // namespace stagecraft::launch
