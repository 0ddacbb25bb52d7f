// Schema migrations of the run history. Each step takes a file at version N-1 to N in one
// transaction; a file is never moved backwards. To change the schema, append a step: never
// edit a step that has shipped, since files out there were made by it.
#include "schema.h"

#include <string>
#include <vector>

#include "stagecraft/store/run_store.h"

namespace stagecraft::store {

namespace {

struct Migration {
  int version;      // the version this step produces
  const char* sql;  // statements run inside the step's transaction
};

// Times are Unix seconds (REAL). hosts is a JSON array of strings.
const std::vector<Migration>& migrations() {
  static const std::vector<Migration> kSteps = {
      // 1: runs, their transitions, metrics, events and logs.
      {1, R"sql(
        CREATE TABLE runs (
          id INTEGER PRIMARY KEY AUTOINCREMENT,
          name TEXT NOT NULL,
          state TEXT NOT NULL,
          created REAL NOT NULL,
          started REAL NOT NULL DEFAULT 0,
          ended REAL NOT NULL DEFAULT 0,
          config_yaml TEXT NOT NULL DEFAULT '',
          plan_json TEXT NOT NULL DEFAULT '',
          hosts TEXT NOT NULL DEFAULT '[]',
          world_size INTEGER NOT NULL DEFAULT 0,
          total_steps INTEGER NOT NULL DEFAULT 0,
          reason TEXT NOT NULL DEFAULT '',
          supervisor_pid INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE transitions (
          run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
          from_state TEXT,
          to_state TEXT NOT NULL,
          time REAL NOT NULL,
          reason TEXT NOT NULL DEFAULT '');
        CREATE TABLE metrics (
          run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
          rank INTEGER NOT NULL,
          step INTEGER NOT NULL,
          loss REAL, lr REAL, grad_norm REAL, tokens_per_s REAL, step_ms REAL, mem_bytes INTEGER,
          time REAL NOT NULL);
        CREATE TABLE events (
          run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
          rank INTEGER NOT NULL,
          time REAL NOT NULL,
          kind TEXT NOT NULL,
          json TEXT NOT NULL);
        CREATE TABLE logs (
          run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
          rank INTEGER NOT NULL,
          stream TEXT NOT NULL,
          time REAL NOT NULL,
          line TEXT NOT NULL);
      )sql"},
      // 2: the supervisor's full identity, so that a reused pid or a reboot is not taken for
      // the supervisor still running.
      {2, R"sql(
        ALTER TABLE runs ADD COLUMN supervisor_start_ticks INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE runs ADD COLUMN supervisor_boot_id TEXT NOT NULL DEFAULT '';
        ALTER TABLE runs ADD COLUMN supervisor_host TEXT NOT NULL DEFAULT '';
      )sql"},
      // 3: indexes for a run's rows and for listing by state.
      {3, R"sql(
        CREATE INDEX metrics_by_run_step ON metrics(run_id, step, rank);
        CREATE INDEX events_by_run ON events(run_id);
        CREATE INDEX logs_by_run_rank ON logs(run_id, rank);
        CREATE INDEX transitions_by_run ON transitions(run_id);
        CREATE INDEX runs_by_state ON runs(state);
      )sql"},
      // 4: cancel requests, recorded here for whichever process supervises the run.
      {4, R"sql(
        ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
      )sql"},
      // 5: a run submitted to a batch scheduler (Slurm): its job id and the scheduler's latest
      // state and reason for the job (PENDING / Priority, RUNNING, TIMEOUT, ...).
      {5, R"sql(
        ALTER TABLE runs ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
        ALTER TABLE runs ADD COLUMN job_state TEXT NOT NULL DEFAULT '';
        ALTER TABLE runs ADD COLUMN job_reason TEXT NOT NULL DEFAULT '';
      )sql"},
      // 6: the nodes the scheduler gave the job, as its host list ("node[01-04]"); another
      // program's own TFLOP/s per GPU and MFU of a step, where it prints them.
      {6, R"sql(
        ALTER TABLE runs ADD COLUMN job_nodes TEXT NOT NULL DEFAULT '';
        ALTER TABLE metrics ADD COLUMN tflops REAL;
        ALTER TABLE metrics ADD COLUMN mfu REAL;
      )sql"},
  };
  return kSteps;
}

}  // namespace

Status migrate(SqliteDb& db) {
  static_assert(kSchemaVersion == 6, "add a migration step for the new schema version");
  // The first read tells a database from any other file, before anything is written.
  auto version = db.query_int("PRAGMA user_version", SC_SQL_SITE);
  if (!version.ok()) return version.status();
  // Another program's database first: its user_version says nothing about Stagecraft.
  auto app = db.query_int("PRAGMA application_id", SC_SQL_SITE);
  if (!app.ok()) return app.status();
  if (app.value() != kApplicationId) {
    auto tables = db.query_int("SELECT count(*) FROM sqlite_master", SC_SQL_SITE);
    if (!tables.ok()) return tables.status();
    if (version.value() != 0 || tables.value() != 0) {
      return Status::invalid_input(db.path() + ": an SQLite database of another program, not a Stagecraft run history (left untouched); give another --db FILE");
    }
  }
  if (version.value() > kSchemaVersion) {
    return Status::invalid_input(db.path() + ": written by a newer Stagecraft (schema version " + std::to_string(version.value()) +
                                 "; this build reads up to " + std::to_string(kSchemaVersion) +
                                 "); upgrade Stagecraft or give another --db FILE");
  }
  if (Status s = db.exec("PRAGMA journal_mode=WAL", SC_SQL_SITE); !s) return s;
  if (Status s = db.exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", SC_SQL_SITE); !s) return s;
  for (const Migration& m : migrations()) {
    if (m.version <= version.value()) continue;
    auto tx = SqliteTransaction::begin(db, SC_SQL_SITE);
    if (!tx.ok()) return tx.status();
    // Another process may have migrated between our read and our lock.
    auto now = db.query_int("PRAGMA user_version", SC_SQL_SITE);
    if (!now.ok()) return now.status();
    if (now.value() >= m.version) continue;
    if (Status s = db.exec(m.sql, SC_SQL_SITE); !s) return s.with_context("migration to schema version " + std::to_string(m.version));
    const std::string set = "PRAGMA user_version=" + std::to_string(m.version) + "; PRAGMA application_id=" + std::to_string(kApplicationId);
    if (Status s = db.exec(set, SC_SQL_SITE); !s) return s;
    if (Status s = tx->commit(SC_SQL_SITE); !s) return s;
  }
  return Status::OK();
}

}  // namespace stagecraft::store
