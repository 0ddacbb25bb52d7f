// A run trained in this process and recorded in the run history (launch/measured_run.h), as the
// training benchmarks' --record keeps theirs: the tiny GPT on one CPU rank, 10 steps at two
// micro-batch sizes, recorded into a history file; listed succeeded with every step's events,
// measured as a worker's run, calibrated from (in the engine and by the real stagecraft-cli), the
// profile planned with; the config's device kept; and bad input.
#include <QtTest>

#include "cli_process.h"
#include "../bench/single_rank.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/measured_run.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/plan/calibrate.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/trainer.h"
#include "stagecraft/store/run_store.h"

#include <algorithm>
#include <map>

using namespace stagecraft;

namespace {

using Run = testing::CliRun;

const QString kTinyGpt = QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml");
constexpr int kSteps = 10;

// configs/tiny-gpt.yaml as one rank, smaller, trained for kSteps steps.
Result<config::RunConfig> tiny_config(int micro_batch, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"parallel.dp=1", "parallel.tp=1", "parallel.pp=1", "cluster.gpus_per_node=1", "model.layers=2",
                                "model.seq_len=32", "train.global_batch=8", "train.micro_batch=" + std::to_string(micro_batch),
                                "train.steps=" + std::to_string(kSteps), "train.warmup_steps=2",
                                "train.data=" STAGECRAFT_SOURCE_DIR "/configs/data/stagecraft.txt"};
  o.insert(o.end(), more.begin(), more.end());
  return config::load_config_file(kTinyGpt.toStdString(), o);
}

// Every step of the config trained as the benchmarks train it: one rank in this process.
bool train(const config::RunConfig& config, std::optional<bench::SingleRank>& rank, std::vector<runtime::StepStats>& steps) {
  rank = bench::single_rank(config);
  if (!rank) return false;
  auto data = runtime::TokenData::open(config.train.data, static_cast<size_t>(config.model.seq_len) + 1,
                                       runtime::token_bytes(config.train.data_dtype, config.model.vocab));
  if (!data.ok()) {
    qWarning("%s", data.status().message().c_str());
    return false;
  }
  auto t = runtime::Trainer::create(rank->config, rank->layout, rank->groups.trainer_groups(), &data.value());
  if (!t.ok() || !t.value()->start()) return false;
  for (int i = 0; i < config.train.steps; ++i) {
    auto st = t.value()->train_step();
    if (!st.ok()) {
      qWarning("%s", st.status().message().c_str());
      return false;
    }
    steps.push_back(std::move(st).value());
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

class TestMeasuredRun : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  std::string db_;
  int64_t small_ = 0, large_ = 0;  // the runs at micro-batches of 2 and 4
  std::vector<runtime::StepStats> small_steps_;
  std::optional<bench::SingleRank> small_rank_;

  std::unique_ptr<store::RunStore> history() {
    auto st = store::RunStore::open(db_);
    if (!st.ok()) qWarning("%s", st.status().message().c_str());
    return st.ok() ? std::move(st).value() : nullptr;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("history/bench.sqlite").toStdString();  // its folder made by the recording
    for (int mb : {2, 4}) {
      auto config = tiny_config(mb, {"name=measured mb" + std::to_string(mb)});
      QVERIFY2(config.ok(), config.status().message().c_str());
      std::optional<bench::SingleRank> rank;
      std::vector<runtime::StepStats> steps;
      QVERIFY(train(config.value(), rank, steps));
      // The small run names the device it ran on, as the benchmarks do; the large one none.
      auto id = launch::record_measured_run(db_, rank->config, rank->plan, steps, "tst_measured_run: one rank in-process",
                                            mb == 2 ? &runtime::host_device() : nullptr);
      QVERIFY2(id.ok(), id.status().message().c_str());
      (mb == 2 ? small_ : large_) = id.value();
      if (mb == 2) {
        small_steps_ = steps;
        small_rank_ = std::move(rank);
      }
    }
    QVERIFY(small_ > 0 && large_ == small_ + 1);
  }

  // Listed by the CLI as succeeded, on this machine, every step in; its rows are each step's
  // start, step, timing and done events of rank 0, and the step metrics the trainer reported.
  void recordedAsASucceededRun() {
    const Run list = testing::run_cli({"runs", "list", "--json", "--db", QString::fromStdString(db_)});
    QVERIFY2(list.code == 0, qPrintable(list.err));
    QMap<qint64, QJsonObject> runs;
    for (const auto& v : QJsonDocument::fromJson(list.out.toUtf8()).array()) runs[v.toObject()["id"].toInteger()] = v.toObject();
    QCOMPARE(runs.size(), 2);
    for (int64_t id : {small_, large_}) {
      const QJsonObject run = runs.value(id);
      QCOMPARE(run["state"].toString(), QString("succeeded"));
      QCOMPARE(run["steps"].toInt(), kSteps);
      QCOMPARE(run["hosts"].toArray(), QJsonArray({"localhost"}));
    }
    QCOMPARE(runs.value(small_)["name"].toString(), QString("measured mb2"));
    QCOMPARE(runs.value(large_)["name"].toString(), QString("measured mb4"));

    auto st = history();
    QVERIFY(st);
    auto transitions = st->transitions(small_);
    QVERIFY(transitions.ok());
    QCOMPARE(transitions->size(), size_t(3));  // queued, running with the caller's reason, succeeded
    QCOMPARE(transitions->at(1).reason, std::string("tst_measured_run: one rank in-process"));
    QVERIFY(transitions->at(2).to == store::RunState::kSucceeded);

    auto events = st->events(small_);
    QVERIFY(events.ok());
    std::map<std::string, int> kinds;
    std::vector<int64_t> timelines;
    for (const auto& row : events.value()) {
      QCOMPARE(row.rank, 0);
      ++kinds[row.kind];
      auto e = launch::decode_event(row.json);
      QVERIFY2(e.ok(), row.json.c_str());
      if (const auto* t = std::get_if<launch::TimingEvent>(&e.value()); t && !t->ops.empty()) timelines.push_back(t->step);
    }
    QCOMPARE(kinds, (std::map<std::string, int>{{"done", 1}, {"start", 1}, {"step", kSteps}, {"timing", kSteps}}));
    QCOMPARE(events->front().kind, std::string("start"));
    QCOMPARE(events->back().kind, std::string("done"));
    // The start event names the kernels the host device took, as a worker's does.
    auto start = launch::decode_event(events->front().json);
    QVERIFY(start.ok());
    const auto& kernels = std::get<launch::StartEvent>(start.value()).kernels;
    QVERIFY(!kernels.empty());
    QCOMPARE(kernels.front().first, std::string("gemm"));
    QVERIFY2(kernels.front().second.find("OpenBLAS") != std::string::npos, kernels.front().second.c_str());
    auto large_events = st->events(large_);
    QVERIFY(large_events.ok() && !large_events->empty());
    auto large_start = launch::decode_event(large_events->front().json);
    QVERIFY(large_start.ok() && std::get<launch::StartEvent>(large_start.value()).kernels.empty());
    QCOMPARE(timelines, (std::vector<int64_t>{1, 2, 3, kSteps}));  // as a worker keeps them, the last step's too

    auto metrics = st->metrics(small_);
    QVERIFY(metrics.ok());
    QCOMPARE(metrics->size(), size_t(kSteps));
    for (size_t i = 0; i < metrics->size(); ++i) {
      QCOMPARE(metrics->at(i).step, small_steps_[i].step);
      QCOMPARE(metrics->at(i).loss, small_steps_[i].loss);
      QCOMPARE(metrics->at(i).mem_bytes, static_cast<int64_t>(small_steps_[i].mem_bytes));
    }
    QVERIFY(metrics->back().loss < metrics->front().loss);  // it trained
  }

  // launch::measure_run reads it as it reads a worker's run: the steady steps (the first fifth
  // left out), the medians of what the trainer measured.
  void measuredAsAWorkersRun() {
    auto st = history();
    QVERIFY(st);
    auto m = launch::measure_run(*st, small_);
    QVERIFY2(m.ok(), m.status().message().c_str());
    QCOMPARE(m->steps_used, kSteps - kSteps / 5);
    QCOMPARE(m->first_step, int64_t(kSteps / 5 + 1));
    QCOMPARE(m->last_step, int64_t(kSteps));
    QCOMPARE(m->ranks.size(), size_t(1));
    QVERIFY(m->step.step_s > 0);
    QVERIFY(m->step.compute_s > 0);
    QVERIFY(m->step.optimizer_s > 0);
    std::vector<double> steady;
    for (const auto& s : small_steps_) {
      if (s.step > kSteps / 5) steady.push_back(s.step_ms / 1e3);
    }
    // The events keep times to the microsecond (worker_events.h).
    QVERIFY2(std::abs(m->step.step_s - median(steady)) <= 1e-6,
             qPrintable(QString("measured %1 s, the steps' median %2 s").arg(m->step.step_s, 0, 'g', 9).arg(median(steady), 0, 'g', 9)));
    size_t peak = 0;
    for (const auto& s : small_steps_) peak = std::max(peak, s.mem_bytes);
    QCOMPARE(m->step.memory_bytes.size(), size_t(1));
    QCOMPARE(m->step.memory_bytes[0], static_cast<double>(peak));
    QCOMPARE(m->plan.estimate.device, std::string("cpu"));
    QCOMPARE(m->config.train.micro_batch, 2);
  }

  // Two such runs (micro-batches of 2 and 4) calibrate the cpu device in the engine.
  void calibratesFromTwoRuns() {
    auto st = history();
    QVERIFY(st);
    auto samples = launch::calibration_samples(*st, {small_, large_});
    QVERIFY2(samples.ok(), samples.status().message().c_str());
    QCOMPARE(samples->size(), size_t(2));
    QVERIFY(samples->at(0).measured.step_s > 0 && samples->at(1).measured.step_s > 0);
    auto fit = plan::calibrate(samples.value(), samples->front().input.device.calibration);
    QVERIFY2(fit.ok(), fit.status().message().c_str());
    QVERIFY(!fit->fitted.empty());
    QCOMPARE(fit->step_error_after.size(), size_t(2));
    QVERIFY2(fit->rms_after <= fit->rms_before, qPrintable(QString("rms %1 -> %2").arg(fit->rms_before).arg(fit->rms_after)));
  }

  // The real stagecraft-cli: calibrate on both runs writes a profile that plan then uses.
  void cliCalibratesAndPlans() {
    const QString profile = dir_.filePath("bench-cpu.yaml"), db = QString::fromStdString(db_);
    const Run cal = testing::run_cli({"calibrate", QString::number(small_), QString::number(large_), "--db", db, "-o", profile, "--name",
                                      "bench-cpu"});
    QVERIFY2(cal.code == 0, qPrintable(cal.err));
    QVERIFY2(cal.out.startsWith("calibrated cpu from 2 runs"), qPrintable(cal.out));
    QVERIFY(QFile::exists(profile));
    const Run with = testing::run_cli({"plan", kTinyGpt, "cluster.device.profile=" + profile, "--json"});
    QVERIFY2(with.code == 0, qPrintable(with.err));
    const Run without = testing::run_cli({"plan", kTinyGpt, "--json"});
    QVERIFY2(without.code == 0, qPrintable(without.err));
    const QJsonObject a = QJsonDocument::fromJson(with.out.toUtf8()).object()["estimate"].toObject();
    const QJsonObject b = QJsonDocument::fromJson(without.out.toUtf8()).object()["estimate"].toObject();
    QCOMPARE(a["device"].toString(), QString("bench-cpu"));
    QVERIFY(a["step_time_s"].toDouble() > 0);
    QVERIFY2(a["step_time_s"].toDouble() != b["step_time_s"].toDouble(), qPrintable(with.out));  // the fitted constants in use
  }

  // The run keeps the config it was given: a GPU benchmark's device and backend come back when
  // the run is planned again (here the CPU's steps, recorded under an H200 config).
  void keepsTheConfigsDevice() {
    auto config = tiny_config(2, {"name=measured on H200", "cluster.device=H200", "backend=cuda"});
    QVERIFY2(config.ok(), config.status().message().c_str());
    auto plan = plan::make_plan(config.value());
    QVERIFY2(plan.ok(), plan.status().message().c_str());
    auto id = launch::record_measured_run(db_, config.value(), plan.value(), small_steps_, "tst_measured_run");
    QVERIFY2(id.ok(), id.status().message().c_str());
    auto st = history();
    QVERIFY(st);
    auto m = launch::measure_run(*st, id.value());
    QVERIFY2(m.ok(), m.status().message().c_str());
    QCOMPARE(m->plan.estimate.device, std::string("H200"));
    QVERIFY(m->config.backend == config::Backend::kCuda);
  }

  // One line naming the file or folder; nothing recorded for what cannot be a measured run.
  void badInput() {
    QFile file(dir_.filePath("not-a-folder"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.close();
    const std::string under_file = dir_.filePath("not-a-folder/history/bench.sqlite").toStdString();
    auto refused = launch::record_measured_run(under_file, small_rank_->config, small_rank_->plan, small_steps_, "x");
    QVERIFY(!refused.ok());
    const std::string msg = refused.status().message();
    QVERIFY2(msg.find('\n') == std::string::npos, msg.c_str());
    QVERIFY2(msg.find(dir_.filePath("not-a-folder").toStdString()) != std::string::npos, msg.c_str());

    const std::string fresh = dir_.filePath("fresh.sqlite").toStdString();
    auto no_steps = launch::record_measured_run(fresh, small_rank_->config, small_rank_->plan, {}, "x");
    QVERIFY(!no_steps.ok());
    QVERIFY(no_steps.status().code() == Status::Code::kInvalidInput);
    QVERIFY2(no_steps.status().message().find(fresh) != std::string::npos, no_steps.status().message().c_str());

    auto two = tiny_config(2, {"parallel.dp=2", "cluster.gpus_per_node=2"});
    QVERIFY2(two.ok(), two.status().message().c_str());
    auto two_plan = plan::make_plan(two.value());
    QVERIFY(two_plan.ok());
    auto two_ranks = launch::record_measured_run(fresh, two.value(), two_plan.value(), small_steps_, "x");
    QVERIFY(!two_ranks.ok());
    QVERIFY2(two_ranks.status().message().find("has 2 ranks") != std::string::npos, two_ranks.status().message().c_str());
    QVERIFY(!QFile::exists(QString::fromStdString(fresh)));  // refused before the history was touched
  }

  // The benchmarks' --record without its file: one line, exit 2, before anything runs (no GPU
  // needed for bench_gpu_train to say so).
  void benchmarksRefuseABadRecordArgument_data() {
    QTest::addColumn<QString>("program");
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("bench_train, no file") << "bench_train" << QStringList{"--record"} << "--record takes the run history's file";
    QTest::newRow("bench_train, an option for a file") << "bench_train" << QStringList{"--record", "--llama"}
                                                       << "--record takes the run history's file";
    QTest::newRow("bench_train --cp") << "bench_train" << QStringList{"--cp", "--record", "x.sqlite"} << "--cp runs its ranks as threads";
    QTest::newRow("bench_gpu_train, no file") << "bench_gpu_train" << QStringList{"flash", "bf16", "H200", "--record"}
                                              << "--record takes the run history's file";
  }
  void benchmarksRefuseABadRecordArgument() {
    QFETCH(QString, program);
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    QProcess p;
    p.setWorkingDirectory(dir_.path());
    p.start(QStringLiteral(STAGECRAFT_BIN_DIR "/") + program, args);
    QVERIFY(p.waitForFinished(60000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitCode(), 2);
    QVERIFY2(err.startsWith(program + ": ") && err.contains(message), qPrintable(err));
    QCOMPARE(err.count('\n'), 1);
    QVERIFY(p.readAllStandardOutput().isEmpty());
    QVERIFY(!QFile::exists(dir_.filePath("x.sqlite")));
  }
};

QTEST_APPLESS_MAIN(TestMeasuredRun)
#include "tst_measured_run.moc"
