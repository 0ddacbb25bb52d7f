// run_slurm(): submit the batch script, wait while Slurm holds the job, supervise its ranks from
// the files the task wrapper writes, and end the run with Slurm's word on the job. See slurm.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "stagecraft/config/config_io.h"
#include "stagecraft/core/clock.h"
#include "stagecraft/launch/slurm.h"

#include "run_common.h"

namespace stagecraft::launch {

namespace {

// After the job ended, how long a rank's exit file may take to appear (a shared file system
// shows another node's new file after its attribute cache expires).
constexpr double kExitFileWait_s = 5.0;
// How long a job may take to end after scancel, or after its ranks ended, before the run gives
// up waiting for Slurm's final word.
constexpr double kJobEndWait_s = 60.0;
// How long Slurm may leave every question about the job unanswered (slurmctld down or
// unreachable) before the run gives the job up, rather than waiting for ever.
constexpr double kSlurmSilence_s = 300.0;

// The job as the run follows it: its state, asked at most every poll_s, and whether this run
// cancelled it.
class Job {
 public:
  Job(std::string id, double poll_s, std::function<void(const SlurmJobState&)> on_job)
      : id_(std::move(id)), poll_s_(poll_s), on_job_(std::move(on_job)) {
    last_.job_id = id_;
  }
  const std::string& id() const { return id_; }
  const SlurmJobState& state() const { return last_; }
  bool cancelled_here() const { return cancel_sent_; }
  // Slurm no longer runs the job: it reached an end state, or it was seen and is forgotten; or
  // Slurm has not answered for kSlurmSilence_s.
  bool ended() const { return gave_up_ || (seen_ && !last_.active()); }

  // Asks Slurm again when the last answer is older than poll_s (or `force`). A failed query
  // keeps the last answer.
  void refresh(bool force = false) {
    if (!force && monotonic_seconds() - polled_at_ < poll_s_) return;
    polled_at_ = monotonic_seconds();
    if (answered_at_ == 0) answered_at_ = polled_at_;
    auto st = slurm_job_state(id_);
    if (!st.ok()) {
      if (!gave_up_ && polled_at_ - answered_at_ > kSlurmSilence_s) {
        gave_up_ = true;
        last_.state = "UNKNOWN";
        last_.reason = "no answer from Slurm for " + std::to_string(static_cast<int>(kSlurmSilence_s)) + " s: " + st.status().message();
        last_.known = true;
        if (on_job_) on_job_(last_);
      }
      return;
    }
    answered_at_ = polled_at_;
    // Just after sbatch the job may not be listed yet: it is pending until Slurm says otherwise.
    if (!st->known && !seen_) return;
    if (st->known) seen_ = true;
    SlurmJobState next = st.value();
    // None listed (a pending job, one leaving its nodes, an ended one squeue still shows while the
    // accounting lags): the nodes it ran on stay.
    if (next.nodes.empty()) next.nodes = last_.nodes;
    const bool changed = !reported_ || next.state != last_.state || next.reason != last_.reason || next.nodes != last_.nodes;
    last_ = std::move(next);
    if (changed && on_job_) {
      reported_ = true;
      on_job_(last_);
    }
  }
  void report_submitted() {
    last_.state = "PENDING";
    last_.reason = "submitted";
    last_.known = true;
    if (on_job_) on_job_(last_);
  }
  void cancel() {
    if (cancel_sent_) return;
    cancel_sent_ = true;
    (void)slurm_cancel(id_);  // a job that already ended refuses, which is fine
  }
  // Waits (bounded) until Slurm has ended the job.
  void wait_end(double limit_s) {
    const double deadline = monotonic_seconds() + limit_s;
    refresh(true);
    while (!ended() && monotonic_seconds() < deadline) {
      usleep(static_cast<useconds_t>(std::min(poll_s_, 0.5) * 1e6));
      refresh(true);
    }
  }

 private:
  std::string id_;
  double poll_s_;
  std::function<void(const SlurmJobState&)> on_job_;
  SlurmJobState last_;
  double polled_at_ = 0;
  double answered_at_ = 0;  // the last time Slurm answered a question about the job
  bool gave_up_ = false;    // no answer for kSlurmSilence_s
  bool seen_ = false;
  bool reported_ = false;
  bool cancel_sent_ = false;
};

// One task of the job as the supervisor sees it: its output files followed as they grow, its
// exit from rank-N.exit (or, once the job ended without one, from the job's end).
class SlurmRank final : public RankProcess {
 public:
  SlurmRank(int rank, const std::string& run_dir, std::shared_ptr<Job> job, const std::atomic<bool>* cancel)
      : rank_(rank), job_(std::move(job)), cancel_(cancel) {
    const std::string base = run_dir + "/rank-" + std::to_string(rank);
    out_path_ = base + ".out";
    err_path_ = base + ".err";
    exit_path_ = base + ".exit";
  }
  ~SlurmRank() override {
    for (int fd : {out_fd_, err_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  int rank() const override { return rank_; }
  std::vector<int> wait_fds() const override { return {}; }  // files: polled

  bool read_available(std::string& out, std::string& err) override {
    drain(out_path_, out_fd_, out);
    drain(err_path_, err_fd_, err);
    // Both streams have ended once the exit is known and nothing more is there.
    return !exit_;
  }

  std::optional<ExitInfo> poll_exit() override {
    if (exit_) return exit_;
    std::ifstream f(exit_path_);
    int status = -1;
    if (f >> status) {
      exit_ = status > 128 ? ExitInfo{0, status - 128} : ExitInfo{status, 0};
      struct stat st {};
      if (::stat(exit_path_.c_str(), &st) == 0) exit_time_ = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
      return exit_;
    }
    job_->refresh();
    if (job_->ended()) {
      if (ended_seen_ == 0) ended_seen_ = monotonic_seconds();
      if (monotonic_seconds() - ended_seen_ >= kExitFileWait_s) {
        // The task never wrote its end: srun killed it (another task failed, the job was
        // cancelled or ran out of time) or it never started.
        exit_ = job_->state().state == "COMPLETED" ? ExitInfo{0, 0} : ExitInfo{0, SIGKILL};
      }
    }
    return exit_;
  }

  double exit_time() const override { return exit_time_; }

  // Stopping the run: on cancel the job is cancelled at once; after a rank failed, srun
  // (--kill-on-bad-exit) ends the job itself, and kill() cancels what is left after the grace.
  void terminate() override {
    if (cancel_ && cancel_->load()) job_->cancel();
  }
  void kill() override {
    if (exit_) return;
    job_->refresh(true);
    if (!job_->ended()) job_->cancel();
  }

 private:
  static void drain(const std::string& path, int& fd, std::string& into) {
    if (fd < 0) {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return;  // not written yet
    }
    char buf[65536];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        into.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return;  // end of what is there now
    }
  }

  int rank_;
  std::shared_ptr<Job> job_;
  const std::atomic<bool>* cancel_;
  std::string out_path_, err_path_, exit_path_;
  int out_fd_ = -1, err_fd_ = -1;
  double ended_seen_ = 0;
  double exit_time_ = 0;  // the exit file's modification time; 0 for an exit inferred from the job's end
  std::optional<ExitInfo> exit_;
};

// Job states in which Slurm, not a rank, ended the run.
bool ended_by_slurm(const std::string& state) {
  for (const char* s : {"TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"}) {
    if (state.rfind(s, 0) == 0) return true;
  }
  return false;
}

std::string slurm_words(const SlurmJobState& s) {
  if (s.state.rfind("TIMEOUT", 0) == 0) return ": the job reached its time limit (--time)";
  if (s.state.rfind("NODE_FAIL", 0) == 0) return ": a node of the job failed";
  if (s.state.rfind("PREEMPTED", 0) == 0) return ": the job was preempted";
  if (s.state.rfind("OUT_OF_MEMORY", 0) == 0) {
    return ": a task ran out of host memory (the job's memory limit; ask for more with --sbatch-arg=--mem=SIZE)";
  }
  if (s.state.rfind("DEADLINE", 0) == 0) return ": the job reached its deadline";
  return "";
}

}  // namespace

Result<RunOutcome> run_slurm(const config::RunConfig& config, const plan::Plan& plan, const SlurmRunOptions& options,
                             RunCallbacks callbacks) {
  const SlurmOptions& so = options.slurm;
  if (so.run_dir.empty() || so.run_dir.front() != '/') {
    return Status::internal("run_slurm: the run directory must be an absolute path");
  }
  std::error_code ec;
  std::filesystem::create_directories(so.run_dir, ec);
  if (ec) return Status::io_error("slurm run: cannot make the run directory " + so.run_dir + ": " + ec.message());
  auto script = slurm_batch_script(config, plan, so);
  if (!script.ok()) return script.status();
  const std::string script_path = so.run_dir + "/job.sbatch";
  if (Status s = config::write_text_file_atomic(script_path, script.value()); !s) return s;
  const int world = plan.topology.world_size();
  const auto cancelled = [&] { return options.cancel && options.cancel->load(); };

  RunOutcome outcome;
  if (cancelled()) {
    outcome.state = RunOutcome::State::kCancelled;
    outcome.reason = "cancelled before the job was submitted";
    outcome.exits.assign(static_cast<size_t>(world), ExitInfo{});
    return outcome;
  }
  auto id = slurm_submit(script_path);
  if (!id.ok()) {
    // sbatch's reason rarely names the value it refused: name what was asked for.
    std::string asked;
    for (const auto& [opt, value] : {std::pair{"--partition", so.partition}, {"--account", so.account}, {"--qos", so.qos},
                                     {"--time", so.time}, {"--constraint", so.constraint}}) {
      if (!value.empty()) asked += std::string(asked.empty() ? "" : " ") + opt + "=" + value;
    }
    for (const auto& a : so.sbatch_args) asked += (asked.empty() ? "" : " ") + a;
    const std::string msg = id.status().message() + " (" + (asked.empty() ? std::string("the cluster's defaults") : asked) +
                            "; preflight --slurm checks the partition, its nodes and whether Slurm accepts the job)";
    return id.status().code() == Status::Code::kInvalidInput ? Status::invalid_input(msg) : Status::unavailable(msg);
  }
  auto job = std::make_shared<Job>(id.value(), options.poll_s, options.on_job);
  job->report_submitted();

  // Queued: nothing of ours runs yet, so the hang timeout does not start.
  job->refresh(true);
  while (!job->ended() && (!job->state().known || job->state().pending())) {
    if (cancelled()) {
      job->cancel();
      job->wait_end(kJobEndWait_s);
      outcome.state = RunOutcome::State::kCancelled;
      outcome.reason = "cancelled while Slurm held job " + job->id() + "; the job is " + job->state().describe();
      outcome.exits.assign(static_cast<size_t>(world), ExitInfo{});
      return outcome;
    }
    usleep(50000);
    job->refresh();
  }
  if (job->ended() && !std::filesystem::exists(so.run_dir + "/rank-0.out", ec)) {
    // It ended before any task started (cancelled elsewhere, refused by a node, no time).
    outcome.state = RunOutcome::State::kFailed;
    outcome.reason = "Slurm job " + job->id() + " ended before its tasks started: " + job->state().describe() + slurm_words(job->state()) +
                     " (see " + so.run_dir + "/job-" + job->id() + ".out)";
    outcome.exits.assign(static_cast<size_t>(world), ExitInfo{0, SIGKILL});
    return outcome;
  }

  if (options.on_running) options.on_running(job->state());
  std::vector<std::unique_ptr<RankProcess>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<SlurmRank>(r, so.run_dir, job, options.cancel));
  // Another program's lines become step events as in local and SSH runs.
  SuperviseOptions sup = supervise_options(config, options.grace_s, options.cancel);
  // After SIGKILL (scancel) a task is gone once the job ends, which takes Slurm's KillWait.
  sup.reap_wait_s = kJobEndWait_s;
  outcome = supervise(std::move(ranks), sup, std::move(callbacks), nullptr);

  // Nothing is left running: the job ends with the run (by itself once its tasks ended: its
  // batch script exits with srun's status; else scancel).
  job->refresh(true);
  if (!job->ended()) job->wait_end(options.grace_s);
  if (!job->ended()) {
    job->cancel();
    job->wait_end(kJobEndWait_s);
  }
  const SlurmJobState& end = job->state();
  const std::string job_text = "Slurm job " + job->id() + " " + end.describe();
  if (ended_by_slurm(end.state)) {
    // Slurm's end is the cause; the rank that ended first says where it struck.
    const std::string first = outcome.failed_rank >= 0 && !outcome.reason.empty() ? "; the first rank to end: " + outcome.reason : "";
    outcome.state = RunOutcome::State::kFailed;
    outcome.failed_rank = -1;
    outcome.reason = "Slurm ended job " + job->id() + ": " + end.describe() + slurm_words(end) + first;
  } else if (end.state.rfind("CANCELLED", 0) == 0 && !job->cancelled_here() && outcome.state != RunOutcome::State::kCancelled) {
    outcome.state = RunOutcome::State::kFailed;
    outcome.failed_rank = -1;
    outcome.reason = "Slurm job " + job->id() + " was cancelled outside Stagecraft: " + end.describe();
  } else if (outcome.state == RunOutcome::State::kCancelled) {
    outcome.reason = "cancelled; " + job_text;
  } else if (!outcome.ok()) {
    outcome.reason += "; " + job_text;
  } else if (end.known && end.state != "COMPLETED") {
    outcome.state = RunOutcome::State::kFailed;
    outcome.reason = "every rank finished, but " + job_text;
  }
  return outcome;
}

}  // namespace stagecraft::launch
