// RunStore: the run history, one SQLite file (docs/ARCHITECTURE.md §10).
//
// Where: default_path() is $STAGECRAFT_DB when set, else $XDG_DATA_HOME/stagecraft/runs.sqlite
// (~/.local/share/stagecraft/runs.sqlite when XDG_DATA_HOME is unset); front ends pass --db FILE.
//
// What a run keeps: id, name, state (queued, running, succeeded, failed, cancelled, lost), the
// created/started/ended times (Unix seconds), the config YAML, the plan JSON, hosts, world size,
// total steps, the reason of its last transition, its supervisor's identity (pid, start time,
// boot id, host: process_identity.h), every state transition with time and reason, per-rank
// metrics of step events, every event as raw JSON, and every log line (rank, stream, line).
//
// File format: WAL journal, busy timeout, schema version in PRAGMA user_version. open() brings an
// older file forward through numbered migrations, each in its own transaction (a failed step
// leaves the file at the previous version). A file written by a newer Stagecraft is refused, and
// so is a file that is not an SQLite database; neither is ever modified.
//
// Lost runs: open() (unless told not to) and list_runs() mark `lost` every queued or running run
// whose supervisor, recorded on this machine, no longer runs (pid gone, pid reused, machine
// restarted). Runs supervised on other hosts are left as they are. A lost run with a scheduler's
// job keeps its job id, and its reason names the job (it may still be running there).
//
// Durability: every call commits before it returns (append() writes its whole batch in one
// transaction), with synchronous=NORMAL: a crash of this process loses nothing committed.
//
// Thread safety: one RunStore may be shared by threads; its calls are serialised by an internal
// mutex. Several processes may open the same file at once (one writer at a time, readers never
// blocked, as WAL allows). No exception crosses this API.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/store/process_identity.h"

namespace stagecraft::store {

// The schema version this build writes; see schema.cpp for the migrations.
inline constexpr int kSchemaVersion = 6;

enum class RunState { kQueued, kRunning, kSucceeded, kFailed, kCancelled, kLost };
std::string_view to_string(RunState s);  // "queued" ... "lost"
std::optional<RunState> parse_run_state(std::string_view text);
bool is_terminal(RunState s);  // succeeded, failed, cancelled, lost
// Allowed: queued -> running|failed|cancelled|lost; running -> succeeded|failed|cancelled|lost.
bool can_transition(RunState from, RunState to);

struct NewRun {
  std::string name;
  std::string config_yaml;
  std::string plan_json;
  std::vector<std::string> hosts;  // where its ranks run ("localhost" for a local run)
  int world_size = 0;
  int64_t total_steps = 0;
  ProcessIdentity supervisor;      // usually this_process_identity()
};

struct RunRecord {
  int64_t id = 0;
  std::string name;
  RunState state = RunState::kQueued;
  double created = 0, started = 0, ended = 0;  // Unix seconds; 0: not yet
  std::string config_yaml;
  std::string plan_json;
  std::vector<std::string> hosts;
  int world_size = 0;
  int64_t total_steps = 0;
  std::string reason;  // why it reached its current state ("" while queued or running)
  ProcessIdentity supervisor;
  // A run submitted to Slurm: the job id and the scheduler's latest state and reason for the job
  // ("PENDING" / "Priority", "RUNNING" / "None", "TIMEOUT" / ...); all empty for other runs.
  std::string job_id, job_state, job_reason;
  std::string job_nodes;  // the nodes the scheduler gave the job ("sc7n[0-1]"); empty before (or for other runs)
  int64_t last_step = 0;     // highest step in its metrics; 0 when none
  double last_loss = NAN;    // loss at that step (lowest rank that reported one); NaN when none
};

struct TransitionRecord {
  std::optional<RunState> from;  // none for the first (creation) record
  RunState to = RunState::kQueued;
  double time = 0;
  std::string reason;
};

// One rank's step event. Absent fields are NaN (mem_bytes: -1).
// Rows read back carry `row`, their position in the history (increasing as they are written), so
// a reader can ask for only the rows written after the last one it has (`after_row`).
struct MetricRow {
  int rank = 0;
  int64_t step = 0;
  double loss = NAN, lr = NAN, grad_norm = NAN, tokens_per_s = NAN, step_ms = NAN;
  int64_t mem_bytes = -1;
  double tflops = NAN, mfu = NAN;  // the program's own figures (StepEvent), NaN when absent
  double time = 0;
  int64_t row = 0;  // set when read; ignored when written
};

struct EventRow {
  int rank = 0;
  double time = 0;
  std::string kind;  // the event's "event" field
  std::string json;  // the event as the rank wrote it
  int64_t row = 0;
};

struct LogRow {
  int rank = 0;
  bool is_stderr = false;
  double time = 0;
  std::string line;
  int64_t row = 0;
};

// What append() writes in one transaction.
struct Batch {
  std::vector<MetricRow> metrics;
  std::vector<EventRow> events;
  std::vector<LogRow> logs;
  size_t rows() const { return metrics.size() + events.size() + logs.size(); }
  bool empty() const { return rows() == 0; }
  void clear() {
    metrics.clear();
    events.clear();
    logs.clear();
  }
};

struct RunFilter {
  std::optional<RunState> state;
  std::string name_contains;  // case-sensitive substring; empty: any
  bool documents = true;      // false: config_yaml and plan_json stay empty (a plan of 8,192
                              // ranks is about 1 MB; a list that polls needs neither)
};

struct StoreOptions {
  int busy_timeout_ms = 10000;  // how long a call waits for another writer
  bool detect_lost = true;      // mark lost runs during open()
  bool create = true;           // create the file (and its folder) when missing
};

class RunStore {
 public:
  // $STAGECRAFT_DB, else the XDG data path above.
  static std::string default_path();

  // Opens or creates the history at `path`, migrating it to kSchemaVersion. Fails (invalid
  // input) on a file that is not a database or comes from a newer Stagecraft, naming the file.
  static Result<std::unique_ptr<RunStore>> open(const std::string& path, StoreOptions options = {});
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& path() const;

  // A new run in state queued; returns its id (1, 2, ...).
  Result<int64_t> create_run(const NewRun& run);
  // Records who supervises the run now (after a fork, the background process).
  Status set_supervisor(int64_t id, const ProcessIdentity& supervisor);
  // Records the scheduler's job of the run (job_id), its latest state and reason and, when not
  // empty, the nodes it was given (an empty `nodes` keeps those recorded); not_found for an
  // unknown id.
  Status set_job(int64_t id, const std::string& job_id, const std::string& state, const std::string& reason,
                 const std::string& nodes = "");
  // Moves the run to `to` with a reason, stamping started (running) or ended (terminal).
  // Fails with invalid_input when the move is not allowed from the run's current state (e.g. it
  // already ended), and not_found for an unknown id.
  Status transition(int64_t id, RunState to, const std::string& reason);

  Result<RunRecord> get_run(int64_t id);
  // Newest first. Marks lost runs first (see above).
  Result<std::vector<RunRecord>> list_runs(const RunFilter& filter = {});
  Result<std::vector<TransitionRecord>> transitions(int64_t id);
  // Ordered by step, then rank. `rank` restricts to one rank; `after_row` to rows written after
  // that row (0: all).
  Result<std::vector<MetricRow>> metrics(int64_t id, std::optional<int> rank = std::nullopt, int64_t after_row = 0);
  // In the order they were written, after `after_row`; `kind` restricts to one kind ("start").
  Result<std::vector<EventRow>> events(int64_t id, int64_t after_row = 0, std::optional<std::string> kind = std::nullopt);
  // In the order they were written. `rank` restricts to one rank; `after_row` as above.
  Result<std::vector<LogRow>> logs(int64_t id, std::optional<int> rank = std::nullopt, int64_t after_row = 0);

  // Cancelling goes through the history, so any process can ask and whichever process
  // supervises the run (the CLI, a detached supervisor, the desktop application) acts on it:
  // request_cancel() records the request (not_found for an unknown id); the supervisor polls
  // cancel_requested() (RunHistory does, every 200 ms).
  Status request_cancel(int64_t id);
  Result<bool> cancel_requested(int64_t id);

  // Writes every row of `batch` for run `id` in one transaction: all or nothing.
  Status append(int64_t id, const Batch& batch);

  // Marks lost every queued/running run whose supervisor is gone from this machine; returns
  // how many it marked.
  Result<int> mark_lost_runs();

 private:
  struct Impl;
  explicit RunStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Asks the supervisor of run `id` to stop it, as `stagecraft-cli runs cancel` and the desktop
// application's Cancel both do: records the request (RunStore::request_cancel) after the checks,
// each failing with one line: a run that already ended is refused (invalid_input, "run 7 already
// ended (succeeded); nothing to cancel"); a run supervised on another host is refused
// (unavailable); a run whose supervisor is gone from this machine is marked lost (unavailable,
// saying so). Returns at once: the supervisor sees the request within 200 ms, stops every rank
// (TERM, then KILL after its grace period) and records the run cancelled.
Status cancel_run(RunStore& store, int64_t id);

}  // namespace stagecraft::store
