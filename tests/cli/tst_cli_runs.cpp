// stagecraft-cli run and runs with a real history file: a finished run with its metrics and logs,
// the kernel paths its workers took, --detach then cancel (no worker left), a detached supervisor
// killed with SIGKILL (rows intact, the run lost), the --json shapes, and bad input.
#include <QtTest>

#include "cli_process.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/store/run_recorder.h"
#include "stagecraft/store/run_store.h"

#include <cmath>

#include <signal.h>

namespace {

using Run = stagecraft::testing::CliRun;

Run cli(const QStringList& args, int timeout_ms = 60000) {
  return stagecraft::testing::run_cli(args, QProcessEnvironment::systemEnvironment(), timeout_ms);
}

const char* kConfig =
    "name: history-NAME\n"
    "cluster: {nodes: 1, gpus_per_node: 2, device: cpu}\n"
    "model: {layers: 2, hidden: 32, heads: 4, seq_len: 16, vocab: 256}\n"
    "parallel: {dp: 2, tp: 1, pp: 1}\n"
    "train: {global_batch: 4, micro_batch: 1, steps: STEPS, lr: 1.0e-2, seed: 7, data: DATA, checkpoint_dir: CKPT,\n"
    "        hang_timeout_s: 60}\n"
    "backend: cpu\n";

// The processes whose parent is `pid` (from /proc).
QList<int> children_of(int pid) {
  QList<int> out;
  for (const QString& e : QDir("/proc").entryList(QDir::Dirs)) {
    bool num = false;
    const int p = e.toInt(&num);
    if (!num) continue;
    QFile f("/proc/" + e + "/stat");
    if (!f.open(QIODevice::ReadOnly)) continue;
    const QString stat = QString::fromUtf8(f.readAll());
    const QStringList rest = stat.mid(stat.lastIndexOf(')') + 2).split(' ');
    if (rest.size() > 1 && rest[1].toInt() == pid) out << p;
  }
  return out;
}

// Running (not a zombie) on this machine.
bool alive(int pid) {
  QFile f(QString("/proc/%1/stat").arg(pid));
  if (!f.open(QIODevice::ReadOnly)) return false;
  const QString stat = QString::fromUtf8(f.readAll());
  const QString state = stat.mid(stat.lastIndexOf(')') + 2, 1);
  return state != "Z" && state != "X";
}

}  // namespace

class TestCliRuns : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;
  int configs_ = 0;

  QString config(const QString& name, int steps) {
    const QString path = dir_.filePath(QString("run%1.yaml").arg(++configs_));
    QString yaml = QString(kConfig)
                       .replace("NAME", name)
                       .replace("STEPS", QString::number(steps))
                       .replace("DATA", dir_.filePath("data.txt"))
                       .replace("CKPT", dir_.filePath(QString("ckpt%1").arg(configs_)));
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return {};
    f.write(yaml.toUtf8());
    return path;
  }

  QJsonObject show(qint64 id) {
    const Run r = cli({"runs", "show", QString::number(id), "--json", "--db", db_});
    return QJsonDocument::fromJson(r.out.toUtf8()).object();
  }

  // Starts a long run in the background; returns its id and supervisor pid once it has steps.
  bool start_detached(const QString& name, qint64* id, int* supervisor, int min_steps) {
    QElapsedTimer t;
    t.start();
    const Run r = cli({"run", config(name, 100000), "--detach", "--json", "--db", db_});
    if (r.code != 0) {
      qWarning("run --detach: %s", qPrintable(r.err));
      return false;
    }
    if (t.elapsed() > 15000) qWarning("run --detach took %lld ms to return", t.elapsed());
    const QString first = r.out.split('\n').value(0);
    *id = QJsonDocument::fromJson(first.toUtf8()).object()["run_id"].toInteger();
    if (*id <= 0) return false;
    for (int i = 0; i < 300; ++i) {
      const QJsonObject o = show(*id);
      *supervisor = o["supervisor"].toObject()["pid"].toInt();
      if (o["state"].toString() == "running" && o["steps"].toInt() >= min_steps) return true;
      if (o["state"].toString() != "running" && o["state"].toString() != "queued") {
        qWarning("run %lld ended early: %s", *id, qPrintable(o["reason"].toString()));
        return false;
      }
      QTest::qWait(100);
    }
    return false;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("history/runs.sqlite");
    QFile data(dir_.filePath("data.txt"));
    QVERIFY(data.open(QIODevice::WriteOnly));
    for (int i = 0; i < 100; ++i) data.write(QString("The run history keeps every run, line %1.\n").arg(i).toUtf8());
  }

  // A finished run: recorded succeeded with every rank's step metrics, its log lines per rank,
  // its transitions, config and plan; `runs list --json` has the agreed fields.
  void finishedRunIsRecorded() {
    const QString wrapper = dir_.filePath("worker.sh");
    QFile w(wrapper);
    QVERIFY(w.open(QIODevice::WriteOnly));
    w.write(QString("#!/bin/sh\necho \"hello from rank $RANK\" >&2\nexec %1/stagecraft-worker\n").arg(STAGECRAFT_BIN_DIR).toUtf8());
    w.close();
    QVERIFY(w.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner));
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("STAGECRAFT_WORKER", wrapper);
    const Run r = stagecraft::testing::run_cli({"run", config("done", 3), "--json", "--db", db_}, env, 60000);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const QStringList lines = r.out.split('\n', Qt::SkipEmptyParts);
    const QJsonObject head = QJsonDocument::fromJson(lines.value(0).toUtf8()).object();
    const qint64 id = head["run_id"].toInteger();
    QVERIFY(id > 0);
    QCOMPARE(head["db"].toString(), db_);
    double last_loss = NAN;
    for (const QString& l : lines) {
      const QJsonObject o = QJsonDocument::fromJson(l.toUtf8()).object();
      if (o["event"].toString() == "step" && o["rank"].toInt() == 0 && o["step"].toInt() == 3) last_loss = o["loss"].toDouble();
    }
    QVERIFY(!std::isnan(last_loss));

    const Run list = cli({"runs", "list", "--json", "--db", db_});
    QCOMPARE(list.code, 0);
    const QJsonArray runs = QJsonDocument::fromJson(list.out.toUtf8()).array();
    QJsonObject mine;
    for (const auto& v : runs) {
      if (v.toObject()["id"].toInteger() == id) mine = v.toObject();
    }
    for (const char* key : {"id", "name", "state", "created", "hosts", "steps", "last_loss"}) QVERIFY2(mine.contains(key), key);
    QCOMPARE(mine["name"].toString(), QString("history-done"));
    QCOMPARE(mine["state"].toString(), QString("succeeded"));
    QCOMPARE(mine["steps"].toInt(), 3);
    QCOMPARE(mine["hosts"].toArray(), QJsonArray({"localhost"}));
    QVERIFY(QDateTime::fromString(mine["created"].toString(), Qt::ISODate).isValid());
    QCOMPARE(mine["last_loss"].toDouble(), last_loss);

    const Run metrics = cli({"runs", "metrics", QString::number(id), "--json", "--db", db_});
    QCOMPARE(metrics.code, 0);
    const QJsonArray rows = QJsonDocument::fromJson(metrics.out.toUtf8()).array();
    QCOMPARE(rows.size(), 6);  // 3 steps x 2 ranks
    QCOMPARE(rows[4].toObject()["step"].toInt(), 3);
    QCOMPARE(rows[4].toObject()["rank"].toInt(), 0);
    QCOMPARE(rows[4].toObject()["loss"].toDouble(), last_loss);
    for (const char* key : {"lr", "grad_norm", "tokens_per_s", "step_ms", "mem_bytes"}) QVERIFY2(rows[0].toObject()[key].isDouble(), key);
    const Run csv = cli({"runs", "metrics", QString::number(id), "--csv", "--db", db_});
    QCOMPARE(csv.code, 0);
    const QStringList csv_lines = csv.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(csv_lines.size(), 7);
    QCOMPARE(csv_lines[0], QString("step,rank,loss,lr,grad_norm,tokens_per_s,step_ms,mem_bytes,time,tflops,mfu"));
    QVERIFY(csv_lines[5].startsWith("3,0,"));

    const Run logs = cli({"runs", "logs", QString::number(id), "--rank", "1", "--db", db_});
    QCOMPARE(logs.code, 0);
    QVERIFY2(logs.out.contains("[rank 1 stderr] hello from rank 1"), qPrintable(logs.out));
    QVERIFY(!logs.out.contains("rank 0"));
    const Run logs_json = cli({"runs", "logs", QString::number(id), "--json", "--db", db_});
    const QJsonArray all_logs = QJsonDocument::fromJson(logs_json.out.toUtf8()).array();
    QCOMPARE(all_logs.size(), 2);
    QCOMPARE(all_logs[0].toObject()["stream"].toString(), QString("stderr"));

    const QJsonObject s = show(id);
    const QJsonArray tr = s["transitions"].toArray();
    QCOMPARE(tr.size(), 3);
    QCOMPARE(tr[0].toObject()["to"].toString(), QString("queued"));
    QCOMPARE(tr[1].toObject()["to"].toString(), QString("running"));
    QCOMPARE(tr[2].toObject()["to"].toString(), QString("succeeded"));
    QVERIFY(s["config"].toString().contains("name: history-done"));
    QVERIFY(s["plan"].isObject());
    QCOMPARE(s["world_size"].toInt(), 2);
    const Run text = cli({"runs", "show", QString::number(id), "--db", db_});
    QCOMPARE(text.code, 0);
    QVERIFY(text.out.contains("succeeded"));
  }

  // Every worker records the kernel path each kind of work took in its start event, and runs show
  // prints them: on the CPU OpenBLAS's GEMMs, and for train.attention: flash the standard
  // attention (the CPU has no fused kernel), one line for the run since both ranks agree.
  void kernelPathsAreRecorded() {
    const Run r = cli({"run", config("kernels", 2), "train.attention=flash", "--json", "--db", db_});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const qint64 id = QJsonDocument::fromJson(r.out.split('\n').value(0).toUtf8()).object()["run_id"].toInteger();
    QVERIFY(id > 0);
    const QString attention = "standard (no fused attention on the CPU)";

    auto st = stagecraft::store::RunStore::open(db_.toStdString());
    QVERIFY2(st.ok(), st.status().message().c_str());
    auto starts = st.value()->events(id, 0, "start");
    QVERIFY(starts.ok());
    QCOMPARE(starts->size(), size_t(2));
    for (const auto& row : starts.value()) {
      const QJsonObject start = QJsonDocument::fromJson(QByteArray::fromStdString(row.json)).object();
      QVERIFY2(start.contains("kernels"), row.json.c_str());
      QVERIFY2(start["kernels"].toObject()["gemm"].toString().startsWith("OpenBLAS sgemm ("), row.json.c_str());
      QCOMPARE(start["kernels"].toObject()["attention"].toString(), attention);
    }

    const Run text = cli({"runs", "show", QString::number(id), "--db", db_});
    QVERIFY2(text.code == 0, qPrintable(text.err));
    const QStringList kernels = text.out.split('\n').filter(QRegularExpression("^  kernels "));
    QCOMPARE(kernels.size(), 1);
    QVERIFY2(kernels[0].contains("gemm: OpenBLAS sgemm (") && kernels[0].contains("attention: " + attention), qPrintable(text.out));
    QVERIFY2(!kernels[0].contains("rank"), qPrintable(text.out));  // both ranks took the same paths

    const QJsonArray sets = show(id)["kernels"].toArray();
    QCOMPARE(sets.size(), 1);
    QCOMPARE(sets[0].toObject()["ranks"].toArray(), QJsonArray({0, 1}));
    QCOMPARE(sets[0].toObject()["paths"].toObject()["attention"].toString(), attention);
  }

  // runs list keeps its columns in line whatever the names: NAME widens to the longest (a
  // benchmark's "bench_gpu_train 774M bf16 flash mb4 x8"), and a name past 48 characters is cut.
  void listColumnsStayInLineWithLongNames() {
    namespace store = stagecraft::store;
    const QString db = dir_.filePath("names.sqlite");
    auto st = store::RunStore::open(db.toStdString());
    QVERIFY2(st.ok(), st.status().message().c_str());
    const std::string very_long(60, 'x');
    for (const std::string name : {std::string("a"), std::string("bench_gpu_train 774M bf16 flash mb4 x8"), very_long}) {
      store::NewRun run{.name = name, .config_yaml = "name: n\n", .plan_json = "{}", .hosts = {"localhost"}, .world_size = 1,
                        .total_steps = 1, .supervisor = store::this_process_identity()};
      QVERIFY(st.value()->create_run(run).ok());
    }
    const Run text = cli({"runs", "list", "--db", db});
    QCOMPARE(text.code, 0);
    const QStringList lines = text.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 4);
    const int state = lines[0].indexOf("STATE");
    QVERIFY(state > 0);
    for (const QString& line : lines.mid(1)) QCOMPARE(line.indexOf("queued"), state);
    QVERIFY(text.out.contains("bench_gpu_train 774M bf16 flash mb4 x8"));
    QVERIFY(text.out.contains(QString(45, 'x') + "...") && !text.out.contains(QString(46, 'x')));
  }

  // Ranks that took different paths (say, GPUs of two kinds) get a line each, naming them; a
  // run whose workers recorded none (an older worker, another program) prints no kernels line.
  void kernelPathsByRank() {
    namespace store = stagecraft::store;
    namespace launch = stagecraft::launch;
    const QString db = dir_.filePath("mixed.sqlite");
    auto st = store::RunStore::open(db.toStdString());
    QVERIFY2(st.ok(), st.status().message().c_str());
    store::NewRun run{.name = "mixed", .config_yaml = "name: mixed\n", .plan_json = "{}", .hosts = {"localhost"}, .world_size = 3,
                      .total_steps = 1, .supervisor = store::this_process_identity()};
    auto mixed = st.value()->create_run(run);
    auto older = st.value()->create_run(run);
    QVERIFY(mixed.ok() && older.ok());
    {
      store::RunRecorder rec(*st.value(), mixed.value());
      const std::vector<std::pair<std::string, std::string>> hopper = {{"gemm", "cuBLAS, bf16 tensor cores"},
                                                                       {"attention", "flash, tensor cores (wgmma)"}};
      const std::vector<std::pair<std::string, std::string>> ampere = {{"gemm", "cuBLAS, bf16 tensor cores"},
                                                                       {"attention", "flash, tensor cores (mma.sync)"}};
      rec.on_event(2, launch::StartEvent{.rank = 2, .world_size = 3, .kernels = ampere});
      rec.on_event(0, launch::StartEvent{.rank = 0, .world_size = 3, .kernels = hopper});
      rec.on_event(1, launch::StartEvent{.rank = 1, .world_size = 3, .kernels = hopper});
      QVERIFY(rec.finish().ok());
      store::RunRecorder old_rec(*st.value(), older.value());
      old_rec.on_event(0, launch::StartEvent{.rank = 0, .world_size = 3});
      QVERIFY(old_rec.finish().ok());
    }
    const Run text = cli({"runs", "show", QString::number(mixed.value()), "--db", db});
    QVERIFY2(text.code == 0, qPrintable(text.err));
    QVERIFY2(text.out.contains("\n  kernels      ranks 0-1: gemm: cuBLAS, bf16 tensor cores; attention: flash, tensor cores (wgmma)\n"
                               "               rank 2: gemm: cuBLAS, bf16 tensor cores; attention: flash, tensor cores (mma.sync)\n"),
             qPrintable(text.out));
    const Run json = cli({"runs", "show", QString::number(mixed.value()), "--json", "--db", db});
    const QJsonArray sets = QJsonDocument::fromJson(json.out.toUtf8()).object()["kernels"].toArray();
    QCOMPARE(sets.size(), 2);
    QCOMPARE(sets[1].toObject()["ranks"].toArray(), QJsonArray({2}));
    QCOMPARE(sets[1].toObject()["paths"].toObject()["attention"].toString(), QString("flash, tensor cores (mma.sync)"));

    const Run none = cli({"runs", "show", QString::number(older.value()), "--db", db});
    QVERIFY2(none.code == 0, qPrintable(none.err));
    QVERIFY2(!none.out.contains("kernels"), qPrintable(none.out));
    const Run none_json = cli({"runs", "show", QString::number(older.value()), "--json", "--db", db});
    QCOMPARE(QJsonDocument::fromJson(none_json.out.toUtf8()).object()["kernels"].toArray(), QJsonArray());
  }

  // --detach returns at once with the id; cancel stops the supervisor and every worker, and the
  // run ends cancelled.
  void detachThenCancel() {
    qint64 id = 0;
    int supervisor = 0;
    QVERIFY(start_detached("cancel", &id, &supervisor, 1));
    QVERIFY(alive(supervisor));
    const QList<int> workers = children_of(supervisor);
    QCOMPARE(workers.size(), 2);
    const Run c = cli({"runs", "cancel", QString::number(id), "--db", db_});
    QVERIFY2(c.code == 0, qPrintable(c.err + c.out));
    QVERIFY(c.out.contains("cancelled"));
    QCOMPARE(show(id)["state"].toString(), QString("cancelled"));
    QTRY_VERIFY_WITH_TIMEOUT(!alive(supervisor), 10000);
    for (int w : workers) QVERIFY2(!alive(w), qPrintable(QString("worker %1 still runs").arg(w)));
    // Cancelling again is refused: it already ended.
    const Run again = cli({"runs", "cancel", QString::number(id), "--db", db_});
    QCOMPARE(again.code, 2);
    QVERIFY(again.err.contains("already ended (cancelled)"));
  }

  // A detached supervisor killed with SIGKILL: every row it wrote stays, the run shows lost, not
  // running, and no worker outlives it.
  void killedSupervisorLeavesLostRun() {
    qint64 id = 0;
    int supervisor = 0;
    QVERIFY(start_detached("killed", &id, &supervisor, 2));
    const QList<int> workers = children_of(supervisor);
    const Run before = cli({"runs", "metrics", QString::number(id), "--json", "--db", db_});
    const int rows_before = QJsonDocument::fromJson(before.out.toUtf8()).array().size();
    QVERIFY(rows_before >= 2);
    QCOMPARE(::kill(supervisor, SIGKILL), 0);
    QTRY_VERIFY_WITH_TIMEOUT(!alive(supervisor), 10000);
    // Its workers die with it (the kernel ends a rank whose supervisor died): none is orphaned.
    QCOMPARE(workers.size(), 2);
    for (int w : workers) {
      QTRY_VERIFY2_WITH_TIMEOUT(!alive(w), qPrintable(QString("worker %1 outlived its supervisor").arg(w)), 10000);
    }
    const Run list = cli({"runs", "list", "--json", "--state", "lost", "--db", db_});
    QCOMPARE(list.code, 0);
    const QJsonArray lost = QJsonDocument::fromJson(list.out.toUtf8()).array();
    QCOMPARE(lost.size(), 1);
    QCOMPARE(lost[0].toObject()["id"].toInteger(), id);
    QVERIFY(lost[0].toObject()["reason"].toString().contains(QString::number(supervisor)));
    QVERIFY(lost[0].toObject()["steps"].toInt() >= 2);
    const Run after = cli({"runs", "metrics", QString::number(id), "--json", "--db", db_});
    QVERIFY(QJsonDocument::fromJson(after.out.toUtf8()).array().size() >= rows_before);
    const Run text = cli({"runs", "list", "--db", db_});
    QVERIFY(text.out.contains("lost"));
  }

  // Two recorded layouts: compare each with its prediction, calibrate the cpu device on both, and
  // plan with the profile, from a file and from the user catalog.
  void compareAndCalibrate() {
    const QString dp2 = config("dp2", 12);
    const Run a = cli({"run", dp2, "--json", "--db", db_});
    QVERIFY2(a.code == 0, qPrintable(a.err));
    const Run b = cli({"run", dp2, "parallel.dp=1", "parallel.pp=2", "--json", "--db", db_});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    auto id_of = [](const Run& r) {
      return QJsonDocument::fromJson(r.out.split('\n').value(0).toUtf8()).object()["run_id"].toInteger();
    };
    const qint64 first = id_of(a), second = id_of(b);
    QVERIFY(first > 0 && second == first + 1);

    const Run text = cli({"runs", "compare", QString::number(second), "--db", db_});
    QVERIFY2(text.code == 0, qPrintable(text.err));
    for (const char* part : {"compute", "PP + bubble", "DP", "optimizer", "step", "tokens/s", "memory pp 1"}) {
      QVERIFY2(text.out.contains(part), qPrintable(text.out));
    }
    const Run json = cli({"runs", "compare", QString::number(second), "--json", "--db", db_});
    QVERIFY2(json.code == 0, qPrintable(json.err));
    const QJsonObject cmp = QJsonDocument::fromJson(json.out.toUtf8()).object();
    QCOMPARE(cmp["ranks"].toArray().size(), 2);
    bool step_row = false;
    for (const auto& v : cmp["parts"].toArray()) {
      const QJsonObject row = v.toObject();
      if (row["part"].toString() != "step") continue;
      step_row = true;
      QVERIFY(row["measured"].toDouble() > 0 && row["predicted"].toDouble() > 0);
      QCOMPARE(row["error"].toDouble(), (row["predicted"].toDouble() - row["measured"].toDouble()) / row["measured"].toDouble());
    }
    QVERIFY(step_row);
    // The second rank waited for the first one's forwards.
    QVERIFY(cmp["ranks"].toArray()[1].toObject()["pp_wait_s"].toDouble() > 0);

    const QString profile = dir_.filePath("lab.yaml");
    const Run cal = cli({"calibrate", QString::number(first), QString::number(second), "-o", profile, "--json", "--db", db_});
    QVERIFY2(cal.code == 0, qPrintable(cal.err));
    const QJsonObject fit = QJsonDocument::fromJson(cal.out.toUtf8()).object();
    QCOMPARE(fit["base"].toString(), QString("cpu"));
    QCOMPARE(fit["runs"].toArray().size(), 2);
    QVERIFY2(fit["rms_after"].toDouble() < fit["rms_before"].toDouble(), qPrintable(cal.out));
    // Neither run has TP: its constants were kept, and the output says why.
    bool tp_kept = false;
    for (const auto& k : fit["kept"].toArray()) {
      tp_kept = tp_kept || (k.toObject()["constant"].toString() == "tp_step_s" &&
                            k.toObject()["why"].toString() == "no tensor-parallel run: TP bandwidth and latency kept");
    }
    QVERIFY2(tp_kept, qPrintable(cal.out));
    QVERIFY(!fit["fitted"].toArray().contains(QJsonValue("tp_step_s")));
    QVERIFY(fit["sensitivity"].toObject()["gemm_efficiency"].toDouble() > 0.01);
    QVERIFY(QFile::exists(profile));
    const Run planned = cli({"plan", dp2, "cluster.device.profile=" + profile, "--json"});
    QVERIFY2(planned.code == 0, qPrintable(planned.err));
    QVERIFY(planned.out.contains("cpu-calibrated"));

    // Without -o: into the user catalog, where plans find it by name.
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("XDG_CONFIG_HOME", dir_.filePath("xdg"));
    const Run into = stagecraft::testing::run_cli({"calibrate", QString::number(first), "--name", "lab-cpu", "--db", db_}, env);
    QVERIFY2(into.code == 0, qPrintable(into.err));
    const QString told = into.out.section("what the runs could not tell:\n", 1);
    QVERIFY2(told.contains("\n  no tensor-parallel run: TP bandwidth and latency kept\n") ||
                 told.startsWith("  no tensor-parallel run: TP bandwidth and latency kept\n"),
             qPrintable(into.out));
    QVERIFY(QFile::exists(dir_.filePath("xdg/stagecraft/devices/lab-cpu.yaml")));
    const Run listed = stagecraft::testing::run_cli({"devices"}, env);
    QVERIFY(listed.out.contains("lab-cpu"));
    const Run by_name = stagecraft::testing::run_cli({"plan", dp2, "cluster.device=lab-cpu"}, env);
    QVERIFY2(by_name.code == 0, qPrintable(by_name.err));
  }

  void badInput_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown id") << QStringList{"runs", "show", "9999", "--db", "DB"} << "run 9999: no such run";
    QTest::newRow("id not a number") << QStringList{"runs", "logs", "abc", "--db", "DB"} << "'abc' is not a run ID";
    QTest::newRow("zero id") << QStringList{"runs", "metrics", "0", "--db", "DB"} << "'0' is not a run ID";
    QTest::newRow("missing id") << QStringList{"runs", "cancel", "--db", "DB"} << "expected one run ID";
    QTest::newRow("unknown subcommand") << QStringList{"runs", "delete", "1", "--db", "DB"} << "unknown subcommand 'delete'";
    QTest::newRow("no subcommand") << QStringList{"runs"} << "expected a subcommand";
    QTest::newRow("unknown flag") << QStringList{"runs", "list", "--jsn", "--db", "DB"} << "unknown option --jsn; did you mean --json?";
    QTest::newRow("flag of another subcommand") << QStringList{"runs", "list", "--csv", "--db", "DB"} << "--csv does not apply here";
    QTest::newRow("bad state") << QStringList{"runs", "list", "--state", "done", "--db", "DB"} << "--state done: not a state";
    QTest::newRow("bad rank") << QStringList{"runs", "logs", "1", "--rank", "x", "--db", "DB"} << "--rank x";
    QTest::newRow("rank past the world") << QStringList{"runs", "logs", "1", "--rank", "9", "--db", "DB"} << "has ranks 0-1";
    QTest::newRow("csv and json") << QStringList{"runs", "metrics", "1", "--csv", "--json", "--db", "DB"} << "--csv or --json";
    QTest::newRow("missing history file") << QStringList{"runs", "list", "--db", "MISSING"} << "no such file";
    QTest::newRow("not a database") << QStringList{"runs", "list", "--db", "TEXT"} << "not an SQLite database";
    QTest::newRow("run with a non-database history") << QStringList{"run", "CONFIG", "--db", "TEXT"} << "not an SQLite database";
    QTest::newRow("compare an unknown run") << QStringList{"runs", "compare", "9999", "--db", "DB"} << "run 9999";
    QTest::newRow("calibrate without runs") << QStringList{"calibrate", "--db", "DB"} << "name one or more recorded runs";
    QTest::newRow("calibrate a word") << QStringList{"calibrate", "first", "--db", "DB"} << "first: not a run id";
    QTest::newRow("calibrate an unknown run") << QStringList{"calibrate", "9999", "--db", "DB"} << "run 9999";
    QTest::newRow("calibrate into a folder") << QStringList{"calibrate", "1", "-o", "/", "--db", "DB"} << "/";
  }
  void badInput() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    // Run 1 (2 ranks), made by finishedRunIsRecorded(), serves the rows that need a run.
    const QString text = dir_.filePath("notes.txt");
    QFile f(text);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("these are notes, not a database\n");
    f.close();
    const QByteArray before("these are notes, not a database\n");
    for (QString& a : args) {
      if (a == "DB") a = db_;
      if (a == "MISSING") a = dir_.filePath("missing.sqlite");
      if (a == "TEXT") a = text;
      if (a == "CONFIG") a = config("bad", 3);
    }
    const Run r = cli(args);
    QCOMPARE(r.code, 2);
    const QStringList err = r.err.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(err.size(), 1);
    QVERIFY2(err[0].startsWith("stagecraft-cli: error: ") && err[0].contains(message), qPrintable(r.err));
    QFile check(text);
    QVERIFY(check.open(QIODevice::ReadOnly));
    QCOMPARE(check.readAll(), before);
  }
};

QTEST_GUILESS_MAIN(TestCliRuns)
#include "tst_cli_runs.moc"
