// The run history over SQLite. See run_store.h.
#include "stagecraft/store/run_store.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <tuple>

#include "schema.h"
#include "sqlite_db.h"
#include "stagecraft/core/clock.h"
#include "stagecraft/core/enum_names.h"
#include "stagecraft/core/json.h"

namespace stagecraft::store {

namespace {

std::string hosts_to_json(const std::vector<std::string>& hosts) { return Json::array_of(hosts).dump(); }

std::vector<std::string> hosts_from_json(const std::string& text) {
  std::vector<std::string> out;
  auto j = Json::parse(text);
  if (!j.ok() || !j->is_array()) return out;
  for (const auto& h : j->as_array()) {
    if (h.is_string()) out.push_back(h.as_string());
  }
  return out;
}

constexpr const char* kRunColumns =
    "id, name, state, created, started, ended, config_yaml, plan_json, hosts, world_size, total_steps, reason, "
    "supervisor_pid, supervisor_start_ticks, supervisor_boot_id, supervisor_host, job_id, job_state, job_reason, job_nodes, "
    "(SELECT MAX(step) FROM metrics m WHERE m.run_id = runs.id), "
    "(SELECT loss FROM metrics m WHERE m.run_id = runs.id AND loss IS NOT NULL ORDER BY step DESC, rank ASC LIMIT 1)";

// kRunColumns with empty texts in place of the config and the plan, in the same positions.
std::string summary_columns() {
  std::string c = kRunColumns;
  for (const char* doc : {"config_yaml", "plan_json"}) c.replace(c.find(doc), std::strlen(doc), "''");
  return c;
}

RunRecord read_run(const SqliteStmt& st) {
  RunRecord r;
  r.id = st.column_int(0);
  r.name = st.column_text(1);
  r.state = parse_run_state(st.column_text(2)).value_or(RunState::kLost);
  r.created = st.column_double(3);
  r.started = st.column_double(4);
  r.ended = st.column_double(5);
  r.config_yaml = st.column_text(6);
  r.plan_json = st.column_text(7);
  r.hosts = hosts_from_json(st.column_text(8));
  r.world_size = static_cast<int>(st.column_int(9));
  r.total_steps = st.column_int(10);
  r.reason = st.column_text(11);
  r.supervisor.pid = st.column_int(12);
  r.supervisor.start_ticks = st.column_int(13);
  r.supervisor.boot_id = st.column_text(14);
  r.supervisor.host = st.column_text(15);
  r.job_id = st.column_text(16);
  r.job_state = st.column_text(17);
  r.job_reason = st.column_text(18);
  r.job_nodes = st.column_text(19);
  r.last_step = st.is_null(20) ? 0 : st.column_int(20);
  r.last_loss = st.column_double(21);
  return r;
}

}  // namespace

namespace {
constexpr EnumName<RunState> kRunStateNames[] = {{RunState::kQueued, "queued"},     {RunState::kRunning, "running"},
                                                 {RunState::kSucceeded, "succeeded"}, {RunState::kFailed, "failed"},
                                                 {RunState::kCancelled, "cancelled"}, {RunState::kLost, "lost"}};
}  // namespace

std::string_view to_string(RunState s) { return enum_to_string(kRunStateNames, s); }

std::optional<RunState> parse_run_state(std::string_view text) { return enum_parse(kRunStateNames, text); }

bool is_terminal(RunState s) { return s != RunState::kQueued && s != RunState::kRunning; }

bool can_transition(RunState from, RunState to) {
  if (from == RunState::kQueued) return to != RunState::kQueued && to != RunState::kSucceeded;
  if (from == RunState::kRunning) return is_terminal(to);
  return false;
}

struct RunStore::Impl {
  std::mutex mu;
  SqliteDb db;
  SqliteStmt insert_metric, insert_event, insert_log;

  Result<RunState> state_of(int64_t id) {
    auto text = db.first_row("SELECT state FROM runs WHERE id = ?", SC_SQL_SITE, [](const SqliteStmt& st) { return st.column_text(0); }, id);
    if (!text.ok()) return text.status();
    if (!text.value()) return Status::not_found("run " + std::to_string(id) + ": no such run in " + db.path());
    auto s = parse_run_state(**text);
    if (!s) return Status::internal(db.path() + ": run " + std::to_string(id) + " has an unknown state");
    return *s;
  }

  Status transition_locked(int64_t id, RunState to, const std::string& reason) {
    auto tx = SqliteTransaction::begin(db, SC_SQL_SITE);
    if (!tx.ok()) return tx.status();
    auto from = state_of(id);
    if (!from.ok()) return from.status();
    if (!can_transition(from.value(), to)) {
      return Status::invalid_input("run " + std::to_string(id) + " is " + std::string(to_string(from.value())) + "; it cannot become " +
                                   std::string(to_string(to)));
    }
    const double t = unix_seconds();
    if (Status s = db.run("UPDATE runs SET state = ?1, reason = ?2, "
                          "started = CASE WHEN ?1 = 'running' THEN ?3 ELSE started END, "
                          "ended = CASE WHEN ?1 IN ('queued', 'running') THEN ended ELSE ?3 END WHERE id = ?4",
                          SC_SQL_SITE, to_string(to), reason, t, id);
        !s) {
      return s;
    }
    if (Status s = db.run("INSERT INTO transitions(run_id, from_state, to_state, time, reason) VALUES (?, ?, ?, ?, ?)", SC_SQL_SITE, id,
                          to_string(from.value()), to_string(to), t, reason);
        !s) {
      return s;
    }
    return tx->commit(SC_SQL_SITE);
  }

  Result<int> mark_lost_locked() {
    auto open_runs = db.rows(
        "SELECT id, supervisor_pid, supervisor_start_ticks, supervisor_boot_id, supervisor_host, job_id FROM runs "
        "WHERE state IN ('queued', 'running')",
        SC_SQL_SITE, [](const SqliteStmt& st) {
          return std::tuple(st.column_int(0), ProcessIdentity{st.column_int(1), st.column_int(2), st.column_text(3), st.column_text(4)},
                            st.column_text(5));
        });
    if (!open_runs.ok()) return open_runs.status();
    int marked = 0;
    for (const auto& [id, supervisor, job_id] : open_runs.value()) {
      std::string why;
      if (check_liveness(supervisor, &why) != Liveness::kGone) continue;
      if (!job_id.empty()) why += "; its Slurm job " + job_id + " may still be running (squeue -j " + job_id + ", scancel " + job_id + ")";
      Status s = transition_locked(id, RunState::kLost, why);
      // A run that ended between the read and now is not lost: skip it.
      if (s) {
        ++marked;
      } else if (s.code() != Status::Code::kInvalidInput) {
        return s;
      }
    }
    return marked;
  }
};

RunStore::RunStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStore::~RunStore() = default;

std::string RunStore::default_path() {
  if (const char* p = std::getenv("STAGECRAFT_DB"); p && *p) return p;
  std::string base;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = std::string(h) + "/.local/share";
  } else {
    base = ".";
  }
  return base + "/stagecraft/runs.sqlite";
}

Result<std::unique_ptr<RunStore>> RunStore::open(const std::string& path, StoreOptions options) {
  if (path.empty()) return Status::invalid_input("--db: empty path; give a file name");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::invalid_input(path + ": is a folder; give --db a file name");
  const bool exists = std::filesystem::exists(path, ec);
  if (!exists) {
    if (!options.create) return Status::not_found(path + ": no run history there; give an existing --db FILE");
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) {
      std::filesystem::create_directories(parent, ec);
      if (ec) return Status::io_error(parent.string() + ": cannot create the folder for the run history: " + ec.message());
    }
  }
  auto db = SqliteDb::open(path, options.create, SC_SQL_SITE);
  if (!db.ok()) return db.status();
  auto impl = std::make_unique<Impl>();
  impl->db = std::move(db).value();
  impl->db.set_busy_timeout_ms(options.busy_timeout_ms);
  if (Status s = migrate(impl->db); !s) return s;
  auto m = impl->db.prepare(
      "INSERT INTO metrics(run_id, rank, step, loss, lr, grad_norm, tokens_per_s, step_ms, mem_bytes, time, tflops, mfu) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      SC_SQL_SITE);
  if (!m.ok()) return m.status();
  impl->insert_metric = std::move(m).value();
  auto e = impl->db.prepare("INSERT INTO events(run_id, rank, time, kind, json) VALUES (?, ?, ?, ?, ?)", SC_SQL_SITE);
  if (!e.ok()) return e.status();
  impl->insert_event = std::move(e).value();
  auto l = impl->db.prepare("INSERT INTO logs(run_id, rank, stream, time, line) VALUES (?, ?, ?, ?, ?)", SC_SQL_SITE);
  if (!l.ok()) return l.status();
  impl->insert_log = std::move(l).value();
  std::unique_ptr<RunStore> store(new RunStore(std::move(impl)));
  if (options.detect_lost) {
    auto lost = store->mark_lost_runs();
    if (!lost.ok()) return lost.status();
  }
  return store;
}

const std::string& RunStore::path() const { return impl_->db.path(); }

Result<int64_t> RunStore::create_run(const NewRun& run) {
  std::lock_guard lock(impl_->mu);
  auto& db = impl_->db;
  auto tx = SqliteTransaction::begin(db, SC_SQL_SITE);
  if (!tx.ok()) return tx.status();
  const double t = unix_seconds();
  if (Status s = db.run("INSERT INTO runs(name, state, created, config_yaml, plan_json, hosts, world_size, total_steps, supervisor_pid, "
                        "supervisor_start_ticks, supervisor_boot_id, supervisor_host) VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        SC_SQL_SITE, run.name, t, run.config_yaml, run.plan_json, hosts_to_json(run.hosts), run.world_size,
                        run.total_steps, run.supervisor.pid, run.supervisor.start_ticks, run.supervisor.boot_id, run.supervisor.host);
      !s) {
    return s;
  }
  const int64_t id = db.last_insert_rowid();
  if (Status s = db.run("INSERT INTO transitions(run_id, from_state, to_state, time, reason) VALUES (?, NULL, 'queued', ?, 'created')",
                        SC_SQL_SITE, id, t);
      !s) {
    return s;
  }
  if (Status s = tx->commit(SC_SQL_SITE); !s) return s;
  return id;
}

Status RunStore::set_supervisor(int64_t id, const ProcessIdentity& p) {
  std::lock_guard lock(impl_->mu);
  if (Status s = impl_->db.run(
          "UPDATE runs SET supervisor_pid = ?, supervisor_start_ticks = ?, supervisor_boot_id = ?, supervisor_host = ? WHERE id = ?",
          SC_SQL_SITE, p.pid, p.start_ticks, p.boot_id, p.host, id);
      !s) {
    return s;
  }
  if (impl_->db.changes() == 0) return Status::not_found("run " + std::to_string(id) + ": no such run in " + path());
  return Status::OK();
}

Status RunStore::set_job(int64_t id, const std::string& job_id, const std::string& state, const std::string& reason,
                         const std::string& nodes) {
  std::lock_guard lock(impl_->mu);
  if (Status s = impl_->db.run("UPDATE runs SET job_id = ?, job_state = ?, job_reason = ?, "
                               "job_nodes = CASE WHEN ? = '' THEN job_nodes ELSE ? END WHERE id = ?",
                               SC_SQL_SITE, job_id, state, reason, nodes, nodes, id);
      !s) {
    return s;
  }
  if (impl_->db.changes() == 0) return Status::not_found("run " + std::to_string(id) + ": no such run in " + path());
  return Status::OK();
}

Status RunStore::transition(int64_t id, RunState to, const std::string& reason) {
  std::lock_guard lock(impl_->mu);
  return impl_->transition_locked(id, to, reason);
}

Result<RunRecord> RunStore::get_run(int64_t id) {
  std::lock_guard lock(impl_->mu);
  auto r = impl_->db.first_row(std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?", SC_SQL_SITE, read_run, id);
  if (!r.ok()) return r.status();
  if (!r.value()) return Status::not_found("run " + std::to_string(id) + ": no such run in " + path() + " (see `stagecraft-cli runs list`)");
  return std::move(**r);
}

Result<std::vector<RunRecord>> RunStore::list_runs(const RunFilter& filter) {
  std::lock_guard lock(impl_->mu);
  auto lost = impl_->mark_lost_locked();
  if (!lost.ok()) return lost.status();
  const std::string columns = filter.documents ? std::string(kRunColumns) : summary_columns();
  std::optional<std::string_view> state;
  if (filter.state) state = to_string(*filter.state);
  return impl_->db.rows("SELECT " + columns + " FROM runs WHERE (?1 IS NULL OR state = ?1) AND (?2 = '' OR instr(name, ?2) > 0) ORDER BY id DESC",
                        SC_SQL_SITE, read_run, state, filter.name_contains);
}

Result<std::vector<TransitionRecord>> RunStore::transitions(int64_t id) {
  std::lock_guard lock(impl_->mu);
  return impl_->db.rows(
      "SELECT from_state, to_state, time, reason FROM transitions WHERE run_id = ? ORDER BY rowid", SC_SQL_SITE,
      [](const SqliteStmt& st) {
        TransitionRecord t;
        if (!st.is_null(0)) t.from = parse_run_state(st.column_text(0));
        t.to = parse_run_state(st.column_text(1)).value_or(RunState::kLost);
        t.time = st.column_double(2);
        t.reason = st.column_text(3);
        return t;
      },
      id);
}

Result<std::vector<MetricRow>> RunStore::metrics(int64_t id, std::optional<int> rank, int64_t after_row) {
  std::lock_guard lock(impl_->mu);
  return impl_->db.rows(
      "SELECT rank, step, loss, lr, grad_norm, tokens_per_s, step_ms, mem_bytes, time, rowid, tflops, mfu FROM metrics "
      "WHERE run_id = ?1 AND (?2 IS NULL OR rank = ?2) AND rowid > ?3 ORDER BY step, rank, rowid",
      SC_SQL_SITE,
      [](const SqliteStmt& st) {
        MetricRow m;
        m.rank = static_cast<int>(st.column_int(0));
        m.step = st.column_int(1);
        m.loss = st.column_double(2);
        m.lr = st.column_double(3);
        m.grad_norm = st.column_double(4);
        m.tokens_per_s = st.column_double(5);
        m.step_ms = st.column_double(6);
        m.mem_bytes = st.is_null(7) ? -1 : st.column_int(7);
        m.time = st.column_double(8);
        m.row = st.column_int(9);
        m.tflops = st.column_double(10);
        m.mfu = st.column_double(11);
        return m;
      },
      id, rank, after_row);
}

Result<std::vector<EventRow>> RunStore::events(int64_t id, int64_t after_row, std::optional<std::string> kind) {
  std::lock_guard lock(impl_->mu);
  return impl_->db.rows(
      "SELECT rank, time, kind, json, rowid FROM events WHERE run_id = ?1 AND rowid > ?2 AND (?3 IS NULL OR kind = ?3) ORDER BY rowid",
      SC_SQL_SITE,
      [](const SqliteStmt& st) {
        return EventRow{static_cast<int>(st.column_int(0)), st.column_double(1), st.column_text(2), st.column_text(3), st.column_int(4)};
      },
      id, after_row, kind);
}

Result<std::vector<LogRow>> RunStore::logs(int64_t id, std::optional<int> rank, int64_t after_row) {
  std::lock_guard lock(impl_->mu);
  return impl_->db.rows(
      "SELECT rank, stream, time, line, rowid FROM logs WHERE run_id = ?1 AND (?2 IS NULL OR rank = ?2) AND rowid > ?3 ORDER BY rowid",
      SC_SQL_SITE,
      [](const SqliteStmt& st) {
        return LogRow{static_cast<int>(st.column_int(0)), st.column_text(1) == "stderr", st.column_double(2), st.column_text(3),
                      st.column_int(4)};
      },
      id, rank, after_row);
}

Status RunStore::request_cancel(int64_t id) {
  std::lock_guard lock(impl_->mu);
  if (Status s = impl_->db.run("UPDATE runs SET cancel_requested = 1 WHERE id = ?", SC_SQL_SITE, id); !s) return s;
  if (impl_->db.changes() == 0) return Status::not_found("run " + std::to_string(id) + ": no such run in " + path());
  return Status::OK();
}

Result<bool> RunStore::cancel_requested(int64_t id) {
  std::lock_guard lock(impl_->mu);
  auto flag = impl_->db.first_row("SELECT cancel_requested FROM runs WHERE id = ?", SC_SQL_SITE,
                                  [](const SqliteStmt& st) { return st.column_int(0) != 0; }, id);
  if (!flag.ok()) return flag.status();
  if (!flag.value()) return Status::not_found("run " + std::to_string(id) + ": no such run in " + path());
  return **flag;
}

Status RunStore::append(int64_t id, const Batch& batch) {
  if (batch.empty()) return Status::OK();
  std::lock_guard lock(impl_->mu);
  auto& im = *impl_;
  auto tx = SqliteTransaction::begin(im.db, SC_SQL_SITE);
  if (!tx.ok()) return tx.status();
  for (const MetricRow& m : batch.metrics) {
    im.insert_metric.bind(1, id).bind(2, m.rank).bind(3, m.step).bind(4, m.loss).bind(5, m.lr).bind(6, m.grad_norm);
    im.insert_metric.bind(7, m.tokens_per_s).bind(8, m.step_ms).bind(10, m.time).bind(11, m.tflops).bind(12, m.mfu);
    if (m.mem_bytes >= 0) {
      im.insert_metric.bind(9, m.mem_bytes);
    } else {
      im.insert_metric.bind_null(9);
    }
    if (Status s = im.insert_metric.run(SC_SQL_SITE); !s) return s;
  }
  for (const EventRow& e : batch.events) {
    im.insert_event.bind(1, id).bind(2, e.rank).bind(3, e.time).bind(4, e.kind).bind(5, e.json);
    if (Status s = im.insert_event.run(SC_SQL_SITE); !s) return s;
  }
  for (const LogRow& l : batch.logs) {
    im.insert_log.bind(1, id).bind(2, l.rank).bind(3, l.is_stderr ? "stderr" : "stdout").bind(4, l.time).bind(5, l.line);
    if (Status s = im.insert_log.run(SC_SQL_SITE); !s) return s;
  }
  return tx->commit(SC_SQL_SITE);
}

Result<int> RunStore::mark_lost_runs() {
  std::lock_guard lock(impl_->mu);
  return impl_->mark_lost_locked();
}

Status cancel_run(RunStore& store, int64_t id) {
  auto r = store.get_run(id);
  if (!r.ok()) return r.status();
  const std::string run = "run " + std::to_string(id);
  if (is_terminal(r->state)) {
    return Status::invalid_input(run + " already ended (" + std::string(to_string(r->state)) + "); nothing to cancel");
  }
  std::string why;
  switch (check_liveness(r->supervisor, &why)) {
    case Liveness::kElsewhere:
      return Status::unavailable(run + " is supervised on host " + r->supervisor.host + "; cancel it there");
    case Liveness::kGone:
      (void)store.transition(id, RunState::kLost, why);
      return Status::unavailable(run + " has no supervisor any more (" + why + "); it is now marked lost");
    case Liveness::kAlive:
      break;
  }
  return store.request_cancel(id);
}

}  // namespace stagecraft::store
