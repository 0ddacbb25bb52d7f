// RunStore and RunRecorder (engine store/): schema creation and migrations from files written
// by hand at older versions, refusal of newer and foreign files, state transitions, batched
// ingestion, lost-run detection with real dead processes, a reader beside a writer, and rows
// surviving a writer killed with SIGKILL.
#include <QtTest>

#include <atomic>
#include <cmath>
#include <thread>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stagecraft/core/json.h"
#include "stagecraft/store/run_recorder.h"
#include "stagecraft/store/run_store.h"

using namespace stagecraft;
using namespace stagecraft::store;

namespace {

// Runs SQL on a file with the plain sqlite3 API, as an older Stagecraft (or another program) would.
bool write_sql(const QString& path, const char* sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.toUtf8().constData(), &db) != SQLITE_OK) return false;
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (err) {
    qWarning("%s", err);
    sqlite3_free(err);
  }
  sqlite3_close(db);
  return rc == SQLITE_OK;
}

int64_t read_int(const QString& path, const char* sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.toUtf8().constData(), &db);
  sqlite3_stmt* st = nullptr;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

QString read_text(const QString& path, const char* sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.toUtf8().constData(), &db);
  sqlite3_stmt* st = nullptr;
  QString v;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    v = QString::fromUtf8(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

QByteArray file_bytes(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// The schema as version 1 of Stagecraft wrote it (schema.cpp, step 1), with one finished run.
const char* kVersion1 = R"sql(
  CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, state TEXT NOT NULL, created REAL NOT NULL,
    started REAL NOT NULL DEFAULT 0, ended REAL NOT NULL DEFAULT 0, config_yaml TEXT NOT NULL DEFAULT '',
    plan_json TEXT NOT NULL DEFAULT '', hosts TEXT NOT NULL DEFAULT '[]', world_size INTEGER NOT NULL DEFAULT 0,
    total_steps INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '', supervisor_pid INTEGER NOT NULL DEFAULT 0);
  CREATE TABLE transitions (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, from_state TEXT,
    to_state TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL DEFAULT '');
  CREATE TABLE metrics (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, rank INTEGER NOT NULL,
    step INTEGER NOT NULL, loss REAL, lr REAL, grad_norm REAL, tokens_per_s REAL, step_ms REAL, mem_bytes INTEGER,
    time REAL NOT NULL);
  CREATE TABLE events (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, rank INTEGER NOT NULL,
    time REAL NOT NULL, kind TEXT NOT NULL, json TEXT NOT NULL);
  CREATE TABLE logs (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, rank INTEGER NOT NULL,
    stream TEXT NOT NULL, time REAL NOT NULL, line TEXT NOT NULL);
  INSERT INTO runs(name, state, created, ended, hosts, world_size, total_steps, reason, supervisor_pid)
    VALUES ('old-run', 'succeeded', 1700000000, 1700000100, '["node-a"]', 2, 10, 'every rank finished', 4242);
  INSERT INTO metrics(run_id, rank, step, loss, time) VALUES (1, 0, 9, 2.5, 1700000090), (1, 0, 10, 2.25, 1700000100);
  INSERT INTO logs(run_id, rank, stream, time, line) VALUES (1, 1, 'stderr', 1700000001, 'hello from rank 1');
  PRAGMA application_id = 1400137571;
  PRAGMA user_version = 1;
)sql";

// Version 2 added the supervisor's identity.
const char* kVersion2Extra = R"sql(
  ALTER TABLE runs ADD COLUMN supervisor_start_ticks INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE runs ADD COLUMN supervisor_boot_id TEXT NOT NULL DEFAULT '';
  ALTER TABLE runs ADD COLUMN supervisor_host TEXT NOT NULL DEFAULT '';
  PRAGMA user_version = 2;
)sql";

NewRun sample_run(const ProcessIdentity& who) {
  NewRun r;
  r.name = "tiny";
  r.config_yaml = "name: tiny\n";
  r.plan_json = "{\"world\":2}";
  r.hosts = {"localhost"};
  r.world_size = 2;
  r.total_steps = 100;
  r.supervisor = who;
  return r;
}

Json step_json(int rank, int step, double loss) {
  Json e = Json::object();
  e.set("event", "step");
  e.set("rank", rank);
  e.set("step", step);
  e.set("loss", loss);
  e.set("lr", 1e-3);
  e.set("grad_norm", 0.5);
  e.set("tokens_per_s", 1000.0 + step);
  e.set("step_ms", 12.5);
  e.set("mem_bytes", 1 << 20);
  return e;
}

// The same step as the typed event the supervisor hands the recorder.
launch::WorkerEvent step_event(int rank, int step, double loss) {
  return launch::StepEvent{.rank = rank,
                           .step = step,
                           .loss = loss,
                           .lr = 1e-3,
                           .grad_norm = 0.5,
                           .tokens_per_s = 1000.0 + step,
                           .step_ms = 12.5,
                           .mem_bytes = 1 << 20};
}

// A process that existed and is gone: started, identified, killed and reaped.
ProcessIdentity dead_process() {
  const pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  auto who = process_identity(pid);
  ::kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return who.ok() ? who.value() : ProcessIdentity{};
}

}  // namespace

class TestRunStore : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  int counter_ = 0;
  QString fresh() { return dir_.filePath(QString("h%1.sqlite").arg(++counter_)); }

 private Q_SLOTS:
  // A Slurm run keeps its job id, state and reason; lost, its reason names the job to cancel.
  void recordsSchedulerJob() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(dead_process()));
    QVERIFY(id.ok());
    QVERIFY(st.value()->set_job(id.value(), "4711", "PENDING", "Priority").ok());
    auto r = st.value()->get_run(id.value());
    QCOMPARE(r->job_id, std::string("4711"));
    QCOMPARE(r->job_state, std::string("PENDING"));
    QCOMPARE(r->job_reason, std::string("Priority"));
    QCOMPARE(r->job_nodes, std::string());
    // Placed: the nodes are kept, and a later state without them keeps them.
    QVERIFY(st.value()->set_job(id.value(), "4711", "RUNNING", "None", "gpu[01-04]").ok());
    QVERIFY(st.value()->set_job(id.value(), "4711", "COMPLETING", "None").ok());
    r = st.value()->get_run(id.value());
    QCOMPARE(r->job_state, std::string("COMPLETING"));
    QCOMPARE(r->job_nodes, std::string("gpu[01-04]"));
    QVERIFY(st.value()->set_job(id.value(), "4711", "PENDING", "Priority").ok());
    QCOMPARE(st.value()->set_job(id.value() + 1, "1", "RUNNING", "None").code(), Status::Code::kNotFound);
    QCOMPARE(st.value()->mark_lost_runs().value(), 1);
    r = st.value()->get_run(id.value());
    QCOMPARE(r->state, RunState::kLost);
    QVERIFY2(QString::fromStdString(r->reason).contains("Slurm job 4711 may still be running (squeue -j 4711, scancel 4711)"),
             r->reason.c_str());
    QCOMPARE(r->job_id, std::string("4711"));
  }

  void createsSchema() {
    const QString path = dir_.filePath("nested/folder/runs.sqlite");
    auto st = RunStore::open(path.toStdString());
    QVERIFY2(st.ok(), st.status().message().c_str());
    QCOMPARE(read_int(path, "PRAGMA user_version"), int64_t(kSchemaVersion));
    QCOMPARE(read_text(path, "PRAGMA journal_mode"), QString("wal"));
    QCOMPARE(read_int(path, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('runs','transitions','metrics','events','logs')"),
             int64_t(5));
    // A second open of a current file changes nothing and works.
    st.value().reset();
    auto again = RunStore::open(path.toStdString());
    QVERIFY(again.ok());
    QCOMPARE(read_int(path, "PRAGMA user_version"), int64_t(kSchemaVersion));
  }

  void defaultPathFollowsEnvironment() {
    qputenv("STAGECRAFT_DB", "/tmp/x/explicit.sqlite");
    QCOMPARE(QString::fromStdString(RunStore::default_path()), QString("/tmp/x/explicit.sqlite"));
    qunsetenv("STAGECRAFT_DB");
    qputenv("XDG_DATA_HOME", "/tmp/xdg");
    QCOMPARE(QString::fromStdString(RunStore::default_path()), QString("/tmp/xdg/stagecraft/runs.sqlite"));
    qunsetenv("XDG_DATA_HOME");
    QCOMPARE(QString::fromStdString(RunStore::default_path()), qEnvironmentVariable("HOME") + "/.local/share/stagecraft/runs.sqlite");
  }

  // Files written by hand at every older version come forward with their rows intact.
  void migratesOlderFiles_data() {
    QTest::addColumn<int>("version");
    QTest::newRow("from version 1") << 1;
    QTest::newRow("from version 2") << 2;
  }
  void migratesOlderFiles() {
    QFETCH(int, version);
    const QString path = fresh();
    QVERIFY(write_sql(path, kVersion1));
    if (version >= 2) QVERIFY(write_sql(path, kVersion2Extra));
    QCOMPARE(read_int(path, "PRAGMA user_version"), int64_t(version));
    auto st = RunStore::open(path.toStdString());
    QVERIFY2(st.ok(), st.status().message().c_str());
    QCOMPARE(read_int(path, "PRAGMA user_version"), int64_t(kSchemaVersion));
    QCOMPARE(read_int(path, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'metrics_by_run_step'"), int64_t(1));
    auto r = st.value()->get_run(1);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(QString::fromStdString(r->name), QString("old-run"));
    QCOMPARE(r->state, RunState::kSucceeded);
    QCOMPARE(r->supervisor.pid, int64_t(4242));
    QCOMPARE(r->supervisor.start_ticks, int64_t(0));  // the new column's default
    QCOMPARE(r->hosts, std::vector<std::string>{"node-a"});
    QCOMPARE(r->last_step, int64_t(10));
    QCOMPARE(r->last_loss, 2.25);
    auto logs = st.value()->logs(1);
    QVERIFY(logs.ok());
    QCOMPARE(logs->size(), size_t(1));
    QCOMPARE(QString::fromStdString(logs->front().line), QString("hello from rank 1"));
    QVERIFY(logs->front().is_stderr);
    // New runs continue the old numbering.
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    QCOMPARE(id.value(), int64_t(2));
  }

  void refusesNewerVersion() {
    const QString path = fresh();
    QVERIFY(write_sql(path, "CREATE TABLE runs(id INTEGER); PRAGMA application_id = 1400137571; PRAGMA user_version = 99;"));
    const QByteArray before = file_bytes(path);
    auto st = RunStore::open(path.toStdString());
    QVERIFY(!st.ok());
    QCOMPARE(st.status().code(), Status::Code::kInvalidInput);
    const QString msg = QString::fromStdString(st.status().message());
    QVERIFY2(msg.contains("newer Stagecraft") && msg.contains("99") && msg.contains(path), qPrintable(msg));
    QCOMPARE(file_bytes(path), before);
  }

  void refusesOtherFiles_data() {
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<bool>("sqlite");
    QTest::addColumn<QString>("expected");
    QTest::newRow("text file") << QByteArray("name: tiny\nmodel: {layers: 2}\n").repeated(200) << false << "not an SQLite database";
    QByteArray noise(8192, '\0');
    for (int i = 0; i < noise.size(); ++i) noise[i] = char((i * 131 + 7) % 251);
    QTest::newRow("binary noise") << noise << false << "not an SQLite database";
    QTest::newRow("another program's database") << QByteArray("CREATE TABLE songs(title TEXT); INSERT INTO songs VALUES ('x');") << true
                                                 << "another program";
  }
  void refusesOtherFiles() {
    QFETCH(QByteArray, content);
    QFETCH(bool, sqlite);
    QFETCH(QString, expected);
    const QString path = fresh();
    if (sqlite) {
      QVERIFY(write_sql(path, content.constData()));
    } else {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(content);
    }
    const QByteArray before = file_bytes(path);
    auto st = RunStore::open(path.toStdString());
    QVERIFY(!st.ok());
    QCOMPARE(st.status().code(), Status::Code::kInvalidInput);
    const QString msg = QString::fromStdString(st.status().message());
    QVERIFY2(msg.contains(expected) && msg.contains(path), qPrintable(msg));
    QCOMPARE(file_bytes(path), before);
    QVERIFY(!QFile::exists(path + "-wal"));
  }

  void transitions_data() {
    QTest::addColumn<QStringList>("path");  // states to move through from queued
    QTest::addColumn<bool>("allowed");      // whether the last move is allowed
    QTest::newRow("queued to running to succeeded") << QStringList{"running", "succeeded"} << true;
    QTest::newRow("running to failed") << QStringList{"running", "failed"} << true;
    QTest::newRow("queued to cancelled") << QStringList{"cancelled"} << true;
    QTest::newRow("running to lost") << QStringList{"running", "lost"} << true;
    QTest::newRow("queued to succeeded refused") << QStringList{"succeeded"} << false;
    QTest::newRow("succeeded to running refused") << QStringList{"running", "succeeded", "running"} << false;
    QTest::newRow("cancelled to failed refused") << QStringList{"cancelled", "failed"} << false;
    QTest::newRow("lost to succeeded refused") << QStringList{"running", "lost", "succeeded"} << false;
  }
  void transitions() {
    QFETCH(QStringList, path);
    QFETCH(bool, allowed);
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    for (int i = 0; i < path.size(); ++i) {
      const auto to = parse_run_state(path[i].toStdString());
      QVERIFY(to.has_value());
      Status s = st.value()->transition(id.value(), *to, "step " + std::to_string(i));
      if (i + 1 < path.size() || allowed) {
        QVERIFY2(s.ok(), s.message().c_str());
      } else {
        QVERIFY(!s.ok());
        QCOMPARE(s.code(), Status::Code::kInvalidInput);
        QVERIFY2(s.message().find("cannot become " + path[i].toStdString()) != std::string::npos, s.message().c_str());
      }
    }
    auto r = st.value()->get_run(id.value());
    QVERIFY(r.ok());
    const int applied = allowed ? path.size() : path.size() - 1;
    QCOMPARE(QString::fromStdString(std::string(to_string(r->state))), applied == 0 ? QString("queued") : path[applied - 1]);
    QCOMPARE(r->started > 0, path.mid(0, applied).contains("running"));
    QCOMPARE(r->ended > 0, is_terminal(r->state));
    auto tr = st.value()->transitions(id.value());
    QVERIFY(tr.ok());
    QCOMPARE(tr->size(), size_t(1 + applied));
    QVERIFY(!tr->front().from.has_value());
    QCOMPARE(tr->front().to, RunState::kQueued);
    for (int i = 0; i < applied; ++i) {
      QCOMPARE(QString::fromStdString(std::string(to_string((*tr)[1 + i].to))), path[i]);
      QCOMPARE(QString::fromStdString((*tr)[1 + i].reason), QString("step %1").arg(i));
    }
    QCOMPARE(st.value()->transition(999, RunState::kRunning, "").code(), Status::Code::kNotFound);
    QCOMPARE(st.value()->get_run(999).status().code(), Status::Code::kNotFound);
  }

  // Events and logs through the recorder, small batches so that several transactions happen,
  // read back exactly.
  void batchedIngestionRoundTrip() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    RecorderOptions o;
    o.flush_rows = 64;
    o.flush_interval_s = 30;  // only the size trigger writes before finish()
    RunRecorder rec(*st.value(), id.value(), o);
    for (int step = 1; step <= 200; ++step) {
      for (int rank = 0; rank < 2; ++rank) rec.on_event(rank, step_event(rank, step, 5.0 - step * 0.01 - rank * 0.001));
      if (step % 50 == 0) rec.on_log(step % 100 == 0 ? 1 : 0, step % 100 == 0, "log line at step " + std::to_string(step));
      // 16 steps = 64 rows (an event and a metric each): a batch is due; the writer takes it.
      if (step == 16) QTRY_VERIFY_WITH_TIMEOUT(rec.stats().batches == 1, 10000);
    }
    rec.on_event(0, launch::DoneEvent{.step = 200});
    QVERIFY(rec.finish().ok());
    const RecorderStats stats = rec.stats();
    QCOMPARE(stats.events, uint64_t(401));
    QCOMPARE(stats.metrics, uint64_t(400));
    QCOMPARE(stats.logs, uint64_t(4));
    QVERIFY2(stats.batches >= 2, qPrintable(QString::number(stats.batches)));
    QCOMPARE(stats.max_batch_rows >= 64, true);
    QCOMPARE(stats.dropped_rows, uint64_t(0));
    auto m = st.value()->metrics(id.value());
    QVERIFY(m.ok());
    QCOMPARE(m->size(), size_t(400));
    for (size_t i = 0; i < m->size(); ++i) {
      const MetricRow& row = (*m)[i];
      QCOMPARE(row.step, int64_t(i / 2 + 1));
      QCOMPARE(row.rank, int(i % 2));
      QCOMPARE(row.loss, 5.0 - row.step * 0.01 - row.rank * 0.001);
      QCOMPARE(row.lr, 1e-3);
      QCOMPARE(row.tokens_per_s, 1000.0 + row.step);
      QCOMPARE(row.mem_bytes, int64_t(1 << 20));
    }
    auto rank1 = st.value()->metrics(id.value(), 1);
    QVERIFY(rank1.ok());
    QCOMPARE(rank1->size(), size_t(200));
    auto ev = st.value()->events(id.value());
    QVERIFY(ev.ok());
    QCOMPARE(ev->size(), size_t(401));
    QCOMPARE(QString::fromStdString(ev->back().kind), QString("done"));
    auto parsed = Json::parse(ev->front().json);
    QVERIFY(parsed.ok());
    QCOMPARE(parsed.value(), step_json(0, 1, 5.0 - 0.01));
    // Stored as the worker writes it, so histories written before and after read alike.
    QCOMPARE(QString::fromStdString(ev->front().json), QString::fromStdString(step_json(0, 1, 5.0 - 0.01).dump()));
    auto logs = st.value()->logs(id.value(), 1);
    QVERIFY(logs.ok());
    QCOMPARE(logs->size(), size_t(2));
    QCOMPARE(QString::fromStdString((*logs)[0].line), QString("log line at step 100"));
    QVERIFY((*logs)[0].is_stderr);
    auto r = st.value()->get_run(id.value());
    QCOMPARE(r->last_step, int64_t(200));
    QCOMPARE(r->last_loss, 5.0 - 2.0);  // rank 0's loss at the last step
  }

  // An fp16 step that was skipped keeps its flag and loss scale in the history: the recorder
  // stores the event as the worker wrote it, and decoding it gives them back.
  void keepsSkippedFp16Steps() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    RunRecorder rec(*st.value(), id.value());
    rec.on_event(0, launch::StepEvent{.rank = 0, .step = 1, .loss = 4.0, .grad_norm = 1.5, .loss_scale = 65536});
    rec.on_event(0, launch::StepEvent{.rank = 0, .step = 2, .loss = 3.9, .grad_norm = 0, .loss_scale = 32768, .skipped = true});
    QVERIFY(rec.finish().ok());
    auto ev = st.value()->events(id.value());
    QVERIFY(ev.ok());
    QCOMPARE(ev->size(), size_t(2));
    auto first = launch::decode_event((*ev)[0].json);
    auto second = launch::decode_event((*ev)[1].json);
    QVERIFY(first.ok() && second.ok());
    QVERIFY(!std::get<launch::StepEvent>(first.value()).skipped);
    QVERIFY(std::get<launch::StepEvent>(second.value()).skipped);
    QCOMPARE(std::get<launch::StepEvent>(second.value()).loss_scale, 32768.0);
    auto m = st.value()->metrics(id.value());
    QVERIFY(m.ok());
    QCOMPARE(m->size(), size_t(2));
  }

  // A start event keeps its kernel paths in the history, and events() of one kind reads only
  // that kind (runs show reads the start events of a long run without its timing rows).
  void keepsStartKernelPaths() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    RunRecorder rec(*st.value(), id.value());
    const launch::StartEvent start{.rank = 1, .world_size = 2, .dp = 2, .tp = 1, .pp = 1, .steps = 1,
                                   .kernels = {{"gemm", "cuBLAS, fp32 cores"}, {"attention", "flash, fp32 cores"}}};
    rec.on_event(1, start);
    rec.on_event(1, launch::StepEvent{.rank = 1, .step = 1, .loss = 4.0});
    rec.on_event(1, launch::DoneEvent{.rank = 1, .step = 1, .loss = 4.0});
    QVERIFY(rec.finish().ok());
    auto starts = st.value()->events(id.value(), 0, "start");
    QVERIFY(starts.ok());
    QCOMPARE(starts->size(), size_t(1));
    QCOMPARE((*starts)[0].rank, 1);
    auto back = launch::decode_event((*starts)[0].json);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(std::get<launch::StartEvent>(back.value()), start);
    auto all = st.value()->events(id.value());
    QVERIFY(all.ok());
    QCOMPARE(all->size(), size_t(3));
  }

  // Queued/running runs whose supervisor is gone become lost when the history is opened or
  // listed; live ones and ones on other hosts stay.
  void detectsLostRuns_data() {
    QTest::addColumn<QString>("who");
    QTest::addColumn<QString>("expected");
    QTest::addColumn<QString>("reason");
    QTest::newRow("dead pid") << "dead" << "lost" << "is gone";
    QTest::newRow("pid reused by another process") << "reused" << "lost" << "another process";
    QTest::newRow("machine restarted") << "rebooted" << "lost" << "restarted";
    QTest::newRow("live supervisor") << "self" << "running" << "";
    QTest::newRow("supervised on another host") << "elsewhere" << "running" << "";
  }
  void detectsLostRuns() {
    QFETCH(QString, who);
    QFETCH(QString, expected);
    QFETCH(QString, reason);
    ProcessIdentity p = this_process_identity();
    QVERIFY(p.start_ticks > 0 && !p.boot_id.empty() && !p.host.empty());
    if (who == "dead") p = dead_process();
    if (who == "reused") p.start_ticks += 1;  // our pid, another start time: someone else's now
    if (who == "rebooted") p.boot_id = "00000000-0000-0000-0000-000000000000";
    if (who == "elsewhere") p.host = "some-other-node";
    QVERIFY(p.pid > 0);
    const QString path = fresh();
    int64_t id = 0;
    {
      StoreOptions o;
      o.detect_lost = false;
      auto st = RunStore::open(path.toStdString(), o);
      QVERIFY(st.ok());
      auto created = st.value()->create_run(sample_run(p));
      QVERIFY(created.ok());
      id = created.value();
      QVERIFY(st.value()->transition(id, RunState::kRunning, "started").ok());
      auto r = st.value()->get_run(id);
      QCOMPARE(r->state, RunState::kRunning);
    }
    auto st = RunStore::open(path.toStdString());
    QVERIFY(st.ok());
    auto r = st.value()->get_run(id);
    QVERIFY(r.ok());
    QCOMPARE(QString::fromStdString(std::string(to_string(r->state))), expected);
    QVERIFY2(QString::fromStdString(r->reason).contains(reason), r->reason.c_str());
    if (expected == "lost") QVERIFY(QString::fromStdString(r->reason).contains(QString::number(p.pid)));
    // list_runs() checks too: a run queued later by a dead supervisor is caught there.
    auto later = st.value()->create_run(sample_run(dead_process()));
    QVERIFY(later.ok());
    auto list = st.value()->list_runs();
    QVERIFY(list.ok());
    QCOMPARE(list->front().id, later.value());
    QCOMPARE(list->front().state, RunState::kLost);
    // Filters.
    RunFilter f;
    f.state = RunState::kLost;
    auto lost = st.value()->list_runs(f);
    QCOMPARE(lost->size(), size_t(expected == "lost" ? 2 : 1));
    f.state.reset();
    f.name_contains = "nope";
    QCOMPARE(st.value()->list_runs(f)->size(), size_t(0));
  }

  // Another connection reads while the recorder writes: it sees whole batches only (every
  // count a multiple of the batch) and never an error; the final count is complete.
  void concurrentReaderWhileWriting() {
    const QString path = fresh();
    auto writer = RunStore::open(path.toStdString());
    QVERIFY(writer.ok());
    auto id = writer.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    auto reader = RunStore::open(path.toStdString());
    QVERIFY(reader.ok());
    constexpr int kBatches = 200, kPerBatch = 50;
    std::atomic<bool> done{false};
    std::atomic<int> write_errors{0};
    std::thread w([&] {
      for (int b = 0; b < kBatches; ++b) {
        Batch batch;
        for (int i = 0; i < kPerBatch; ++i) {
          MetricRow m;
          m.step = b * kPerBatch + i;
          m.loss = 1.0;
          batch.metrics.push_back(m);
        }
        if (!writer.value()->append(id.value(), batch)) ++write_errors;
      }
      done = true;
    });
    int reads = 0;
    size_t last = 0;
    bool torn = false, shrank = false, read_error = false;
    while (!done || reads == 0) {
      auto m = reader.value()->metrics(id.value());
      if (!m.ok()) {
        read_error = true;
        break;
      }
      torn = torn || m->size() % kPerBatch != 0;
      shrank = shrank || m->size() < last;
      last = m->size();
      ++reads;
    }
    w.join();
    QVERIFY(!read_error);
    QCOMPARE(write_errors.load(), 0);
    QVERIFY(!torn);
    QVERIFY(!shrank);
    QVERIFY(reads > 0);
    QCOMPARE(reader.value()->metrics(id.value())->size(), size_t(kBatches * kPerBatch));
  }

  // A writer killed with SIGKILL loses nothing it committed: the child reports each committed
  // batch through a pipe; after the kill every reported batch is there, and no partial batch.
  void rowsSurviveSigkill() {
    const QString path = fresh();
    int64_t id = 0;
    {
      auto st = RunStore::open(path.toStdString());
      QVERIFY(st.ok());
      id = st.value()->create_run(sample_run(this_process_identity())).value();
    }
    constexpr int kPerBatch = 100;
    int fds[2];
    QVERIFY(pipe(fds) == 0);
    const pid_t child = fork();
    if (child == 0) {
      ::close(fds[0]);
      auto st = RunStore::open(path.toStdString());
      if (!st.ok()) _exit(3);
      for (int b = 0;; ++b) {
        Batch batch;
        for (int i = 0; i < kPerBatch; ++i) {
          MetricRow m;
          m.step = b * kPerBatch + i;
          batch.metrics.push_back(m);
          batch.logs.push_back({0, false, 0.0, "line"});
        }
        if (!st.value()->append(id, batch)) _exit(4);
        const char c = 1;
        if (::write(fds[1], &c, 1) != 1) _exit(5);
      }
    }
    ::close(fds[1]);
    int committed = 0;
    char c;
    while (committed < 20 && ::read(fds[0], &c, 1) == 1) ++committed;
    ::kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    while (::read(fds[0], &c, 1) == 1) ++committed;  // reports written before the kill
    ::close(fds[0]);
    QVERIFY(WIFSIGNALED(status));
    QVERIFY(committed >= 20);
    auto st = RunStore::open(path.toStdString());
    QVERIFY(st.ok());
    auto m = st.value()->metrics(id);
    QVERIFY(m.ok());
    QVERIFY2(m->size() >= size_t(committed * kPerBatch), qPrintable(QString("%1 rows for %2 batches").arg(m->size()).arg(committed)));
    QCOMPARE(m->size() % kPerBatch, size_t(0));
    QCOMPARE(st.value()->logs(id)->size(), m->size());
    for (size_t i = 0; i < m->size(); ++i) QCOMPARE((*m)[i].step, int64_t(i));
  }

  // A lone row is written within the flush interval, without finish() or flush().
  void flushesOnTime() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    RecorderOptions o;
    o.flush_interval_s = 0.05;
    o.flush_rows = 1000000;
    RunRecorder rec(*st.value(), id.value(), o);
    rec.on_log(0, false, "one line");
    QTRY_VERIFY_WITH_TIMEOUT(st.value()->logs(id.value())->size() == 1, 10000);
    QCOMPARE(rec.stats().batches, uint64_t(1));
  }

  // A producer faster than the disk waits once max_pending_rows wait: no batch grows past the
  // cap (a step event is two rows, so one event may pass it by one row), and nothing is lost.
  void producersWaitForASlowDisk() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    RecorderOptions o;
    o.flush_interval_s = 30;
    o.flush_rows = 1000000;  // only the cap makes the writer take rows before finish()
    o.max_pending_rows = 100;
    RunRecorder rec(*st.value(), id.value(), o);
    const int steps = 5000;
    for (int step = 1; step <= steps; ++step) rec.on_event(0, step_event(0, step, 1.0));
    QVERIFY(rec.finish().ok());
    const RecorderStats stats = rec.stats();
    QCOMPARE(stats.events, uint64_t(steps));
    QCOMPARE(stats.metrics, uint64_t(steps));
    QVERIFY2(stats.max_batch_rows <= 101, qPrintable(QString::number(stats.max_batch_rows)));
    QVERIFY(stats.batches >= uint64_t(2 * steps / 101));
    QCOMPARE(st.value()->metrics(id.value())->size(), size_t(steps));
  }

  // A listing without documents leaves the config and the plan out and keeps every other field.
  void listsWithoutDocuments() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(id.ok());
    {
      RunRecorder rec(*st.value(), id.value());
      rec.on_event(1, step_event(1, 7, 2.5));
      QVERIFY(rec.finish().ok());
    }
    auto full = st.value()->list_runs();
    QVERIFY(full.ok());
    QCOMPARE(full->size(), size_t(1));
    QCOMPARE(QString::fromStdString(full->front().config_yaml), QString("name: tiny\n"));
    QCOMPARE(QString::fromStdString(full->front().plan_json), QString("{\"world\":2}"));
    RunFilter f;
    f.documents = false;
    auto brief = st.value()->list_runs(f);
    QVERIFY(brief.ok());
    QCOMPARE(brief->size(), size_t(1));
    const RunRecord& b = brief->front();
    QVERIFY(b.config_yaml.empty());
    QVERIFY(b.plan_json.empty());
    const RunRecord& a = full->front();
    QCOMPARE(b.id, a.id);
    QCOMPARE(QString::fromStdString(b.name), QString::fromStdString(a.name));
    QCOMPARE(b.state, a.state);
    QCOMPARE(b.hosts, a.hosts);
    QCOMPARE(b.world_size, a.world_size);
    QCOMPARE(b.total_steps, a.total_steps);
    QCOMPARE(b.supervisor.pid, a.supervisor.pid);
    QCOMPARE(b.last_step, int64_t(7));
    QCOMPARE(b.last_loss, 2.5);
  }

  // Cancel requests live in the history; cancel_run() refuses what cannot be cancelled.
  void cancelRequests() {
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto live = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(live.ok());
    QCOMPARE(st.value()->cancel_requested(live.value()).value(), false);
    QVERIFY(cancel_run(*st.value(), live.value()).ok());
    QCOMPARE(st.value()->cancel_requested(live.value()).value(), true);
    QCOMPARE(st.value()->request_cancel(999).code(), Status::Code::kNotFound);
    QCOMPARE(st.value()->cancel_requested(999).status().code(), Status::Code::kNotFound);

    auto ended = st.value()->create_run(sample_run(this_process_identity()));
    QVERIFY(st.value()->transition(ended.value(), RunState::kRunning, "started"));
    QVERIFY(st.value()->transition(ended.value(), RunState::kSucceeded, "done"));
    const Status refused = cancel_run(*st.value(), ended.value());
    QCOMPARE(refused.code(), Status::Code::kInvalidInput);
    QCOMPARE(QString::fromStdString(refused.message()),
             QString("run %1 already ended (succeeded); nothing to cancel").arg(ended.value()));
    QCOMPARE(st.value()->cancel_requested(ended.value()).value(), false);

    ProcessIdentity gone = this_process_identity();
    gone.start_ticks += 12345;  // this pid, but not the recorded process
    auto orphan = st.value()->create_run(sample_run(gone));
    const Status lost = cancel_run(*st.value(), orphan.value());
    QCOMPARE(lost.code(), Status::Code::kUnavailable);
    QVERIFY2(QString::fromStdString(lost.message()).contains("it is now marked lost"), lost.message().c_str());
    QCOMPARE(st.value()->get_run(orphan.value())->state, RunState::kLost);
  }

  void metricFromEvent() {
    MetricRow m;
    QVERIFY(metric_from_event(3, step_event(3, 7, 2.5), 10.0, m));
    QCOMPARE(m.rank, 3);
    QCOMPARE(m.step, int64_t(7));
    QCOMPARE(m.loss, 2.5);
    QCOMPARE(m.step_ms, 12.5);
    auto partial = launch::decode_event(R"({"event":"step","step":2})");
    QVERIFY(partial.ok());
    QVERIFY(metric_from_event(0, partial.value(), 0, m));
    QCOMPARE(m.step, int64_t(2));
    QVERIFY(std::isnan(m.loss));
    QCOMPARE(m.mem_bytes, int64_t(-1));
    QVERIFY(std::isnan(m.tflops) && std::isnan(m.mfu));
    // Another program's TFLOP/s and MFU, through the history and back.
    auto titan = launch::decode_event(R"({"event":"step","step":5,"loss":1.5,"tflops":567.75,"mfu":0.5742})");
    QVERIFY(titan.ok());
    QVERIFY(metric_from_event(0, titan.value(), 1.0, m));
    QCOMPARE(m.tflops, 567.75);
    QCOMPARE(m.mfu, 0.5742);
    auto st = RunStore::open(fresh().toStdString());
    QVERIFY(st.ok());
    auto id = st.value()->create_run(sample_run(dead_process()));
    QVERIFY(id.ok());
    Batch batch;
    batch.metrics.push_back(m);
    QVERIFY(st.value()->append(id.value(), batch).ok());
    auto back = st.value()->metrics(id.value());
    QVERIFY(back.ok() && back->size() == 1);
    QCOMPARE(back->front().tflops, 567.75);
    QCOMPARE(back->front().mfu, 0.5742);
    m.step = 99;
    QVERIFY(!metric_from_event(0, launch::CheckpointEvent{.step = 4, .path = "/ck"}, 0, m));
    QCOMPARE(m.step, int64_t(99));  // left untouched
  }
};

QTEST_APPLESS_MAIN(TestRunStore)
#include "tst_run_store.moc"
