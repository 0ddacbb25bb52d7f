// Supervisor: poll loop over every rank's output and exit, and the fail-fast policy.
#include "stagecraft/launch/supervisor.h"

#include <chrono>
#include <csignal>
#include <cstdio>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "stagecraft/core/clock.h"
#include "stagecraft/core/enum_names.h"
#include "stagecraft/launch/metric_lines.h"

namespace stagecraft::launch {

namespace {
constexpr EnumName<RunOutcome::State> kOutcomeNames[] = {{RunOutcome::State::kSucceeded, "succeeded"},
                                                         {RunOutcome::State::kFailed, "failed"},
                                                         {RunOutcome::State::kHung, "hung"},
                                                         {RunOutcome::State::kCancelled, "cancelled"}};
}  // namespace

std::string_view to_string(RunOutcome::State s) { return enum_to_string(kOutcomeNames, s); }

namespace {
// Whether `a` ended before `b`, as far as both can tell (exit_time() 0: unknown, keep the order
// in which the exits were seen).
bool ended_earlier(const RankProcess& a, const RankProcess& b) {
  const double ta = a.exit_time(), tb = b.exit_time();
  return ta > 0 && tb > 0 && ta < tb;
}
}  // namespace

struct Supervisor::Rank {
  std::unique_ptr<RankProcess> process;
  std::string out, err;        // partial lines
  std::string last_error;      // last stderr line or error event message
  bool streams_open = true;
  std::optional<ExitInfo> exit;
  bool exit_reported = false;
  std::optional<MetricLineReader> metrics;  // foreign mode
};

Supervisor::Supervisor(std::vector<std::unique_ptr<RankProcess>> ranks, SuperviseOptions options, RunCallbacks callbacks)
    : options_(options), callbacks_(std::move(callbacks)) {
  const int world = static_cast<int>(ranks.size());
  for (auto& p : ranks) {
    auto r = std::make_unique<Rank>();
    if (options_.foreign) r->metrics.emplace(p->rank(), options_.metrics, options_.tokens_per_sample, world);
    r->process = std::move(p);
    ranks_.push_back(std::move(r));
  }
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
}

Supervisor::~Supervisor() {
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void Supervisor::cancel() {
  cancel_ = true;
  if (wake_[1] >= 0) {
    const char c = 1;
    (void)!::write(wake_[1], &c, 1);
  }
}

void Supervisor::handle_output(Rank& r, std::string& buffer, bool is_stderr, bool flush) {
  size_t start = 0;
  while (true) {
    const size_t nl = buffer.find('\n', start);
    std::string line;
    if (nl == std::string::npos) {
      const size_t rest = buffer.size() - start;
      if (!(flush && rest > 0) && rest < options_.max_line_bytes) break;
      line = buffer.substr(start, std::min(rest, options_.max_line_bytes));
      if (rest > options_.max_line_bytes) line += " [line cut]";
      start = buffer.size();
    } else {
      // A line that grew past the limit between two reads ends here: cut it the same way.
      const size_t length = nl - start;
      line = buffer.substr(start, std::min(length, options_.max_line_bytes));
      if (length > options_.max_line_bytes) line += " [line cut]";
      start = nl + 1;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int rank = r.process->rank();
    if (r.metrics) {
      last_event_ = monotonic_seconds();  // any line is progress
      if (is_stderr && !line.empty()) r.last_error = line;
      for (const StepEvent& e : r.metrics->feed(line)) {
        if (callbacks_.on_event) callbacks_.on_event(rank, e);
      }
      if (callbacks_.on_log) callbacks_.on_log(rank, is_stderr, line);
      continue;
    }
    bool handled = false;
    if (!is_stderr && !line.empty() && line.front() == '{') {
      auto event = decode_event(line);
      if (event.ok()) {
        last_event_ = monotonic_seconds();
        if (const auto* error = std::get_if<ErrorEvent>(&event.value())) r.last_error = error->message;
        if (callbacks_.on_event) callbacks_.on_event(rank, event.value());
        handled = true;
      }
    }
    if (!handled) {
      if (is_stderr && !line.empty()) r.last_error = line;
      if (callbacks_.on_log) callbacks_.on_log(rank, is_stderr, line);
    }
  }
  buffer.erase(0, start);
  // The rank's output has ended: a step its metric lines left open is complete.
  if (flush && r.metrics && !is_stderr) {
    if (auto e = r.metrics->finish(); e && callbacks_.on_event) callbacks_.on_event(r.process->rank(), *e);
  }
}

void Supervisor::stop_all(double grace_s) {
  for (auto& r : ranks_) {
    if (!r->exit) r->process->terminate();
  }
  const double deadline = monotonic_seconds() + grace_s;
  while (monotonic_seconds() < deadline) {
    bool all = true;
    for (auto& r : ranks_) {
      if (!r->exit) r->exit = r->process->poll_exit();
      all = all && r->exit.has_value();
    }
    if (all) return;
    usleep(10000);
  }
  for (auto& r : ranks_) {
    if (!r->exit) r->process->kill();
  }
  // A rank that SIGKILL cannot end (stuck in the kernel: a hung file system or driver) is given
  // up after reap_wait_s rather than hanging the supervisor.
  const double reap_deadline = monotonic_seconds() + options_.reap_wait_s;
  for (auto& r : ranks_) {
    while (!r->exit) {
      r->exit = r->process->poll_exit();
      if (r->exit) break;
      if (monotonic_seconds() > reap_deadline) {
        r->exit = ExitInfo{255, SIGKILL};
        r->last_error = "did not end within " + std::to_string(static_cast<int>(options_.reap_wait_s)) + " s of SIGKILL";
        break;
      }
      usleep(5000);
    }
  }
}

RunOutcome Supervisor::run() {
  RunOutcome outcome;
  last_event_ = monotonic_seconds();
  bool failing = false;
  while (true) {
    std::vector<pollfd> fds;
    if (wake_[0] >= 0) fds.push_back({wake_[0], POLLIN, 0});
    for (auto& r : ranks_) {
      if (!r->streams_open) continue;
      for (int fd : r->process->wait_fds()) fds.push_back({fd, POLLIN, 0});
    }
    // Exits are reaped by polling: a short timeout keeps a rank that closed its streams early
    // (or daemonised a child holding them) from stalling detection.
    poll(fds.data(), fds.size(), 50);
    if (wake_[0] >= 0) {
      char buf[64];
      while (::read(wake_[0], buf, sizeof buf) > 0) {
      }
    }
    bool all_exited = true;
    Rank* first_failed = nullptr;
    for (auto& r : ranks_) {
      const size_t before = r->out.size() + r->err.size();
      if (r->streams_open) r->streams_open = r->process->read_available(r->out, r->err);
      if (r->metrics && r->out.size() + r->err.size() != before) last_event_ = monotonic_seconds();  // output, even part of a line
      handle_output(*r, r->out, false, !r->streams_open);
      handle_output(*r, r->err, true, !r->streams_open);
      if (!r->exit) {
        r->exit = r->process->poll_exit();
        if (r->exit) {
          // Collect what it wrote before it ended.
          if (r->streams_open) r->streams_open = r->process->read_available(r->out, r->err);
          handle_output(*r, r->out, false, true);
          handle_output(*r, r->err, true, true);
          r->exit_reported = true;
          if (callbacks_.on_exit) callbacks_.on_exit(r->process->rank(), *r->exit);
          // Of the failures seen in this poll, the one that happened first fails the run.
          if (!r->exit->ok() && !failing && (!first_failed || ended_earlier(*r->process, *first_failed->process))) {
            first_failed = r.get();
          }
        }
      }
      all_exited = all_exited && r->exit.has_value();
    }
    if (first_failed) {
      failing = true;
      outcome.state = RunOutcome::State::kFailed;
      outcome.failed_rank = first_failed->process->rank();
      outcome.reason = "rank " + std::to_string(outcome.failed_rank) + " " + first_failed->exit->describe() +
                       (first_failed->last_error.empty() ? std::string() : ": " + first_failed->last_error);
    }
    if (all_exited) break;
    if (!failing && (cancel_ || (options_.cancel_flag && options_.cancel_flag->load()))) {
      failing = true;
      outcome.state = RunOutcome::State::kCancelled;
      outcome.reason = "cancelled";
    }
    if (!failing && options_.hang_timeout_s > 0 && monotonic_seconds() - last_event_ > options_.hang_timeout_s) {
      failing = true;
      outcome.state = RunOutcome::State::kHung;
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    options_.foreign ? "no output from any rank for %.0f s (train.hang_timeout_s); every rank was stopped"
                                     : "no progress from any rank for %.0f s (train.hang_timeout_s); every rank was stopped",
                    options_.hang_timeout_s);
      outcome.reason = buf;
    }
    if (failing) {
      stop_all(options_.grace_s);
      for (auto& r : ranks_) {
        if (r->streams_open) r->process->read_available(r->out, r->err);
        handle_output(*r, r->out, false, true);
        handle_output(*r, r->err, true, true);
        r->streams_open = false;
        if (!r->exit_reported && r->exit) {
          r->exit_reported = true;
          if (callbacks_.on_exit) callbacks_.on_exit(r->process->rank(), *r->exit);
        }
      }
      break;
    }
  }
  for (auto& r : ranks_) outcome.exits.push_back(r->exit.value_or(ExitInfo{}));
  return outcome;
}

RunOutcome supervise(std::vector<std::unique_ptr<RankProcess>> ranks, SuperviseOptions options, RunCallbacks callbacks,
                     const std::function<void(Supervisor&)>& ready) {
  Supervisor supervisor(std::move(ranks), options, std::move(callbacks));
  if (ready) ready(supervisor);
  return supervisor.run();
}

}  // namespace stagecraft::launch
