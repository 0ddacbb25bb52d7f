// launch/metric_lines.h: other programs' training lines (Megatron-LM, DeepSpeed, nanoGPT, JSON
// lines) as step events. The samples are written from the formats' documented shapes (the code
// that prints them is cited in metric_lines.h), including cut, malformed and look-alike lines.
#include "stagecraft/launch/metric_lines.h"

#include <QtTest>

#include <cmath>

using namespace stagecraft;
using namespace stagecraft::launch;
using config::MetricsFormat;

namespace {

// An event as "step loss lr grad_norm tokens_per_s step_ms mem_bytes", '-' for an absent field,
// or "none" for no event; numbers with 6 significant digits.
QString render(const std::optional<StepEvent>& e) {
  if (!e) return "none";
  auto num = [](double v) { return std::isnan(v) ? QString("-") : QString::number(v, 'g', 6); };
  return QString("%1 %2 %3 %4 %5 %6 %7")
      .arg(e->step)
      .arg(num(e->loss), num(e->lr), num(e->grad_norm), num(e->tokens_per_s), num(e->step_ms))
      .arg(e->mem_bytes < 0 ? QString("-") : QString::number(e->mem_bytes));
}

const char* kMegatron =
    " [2024-05-01 12:00:00] iteration       10/     100 | consumed samples:           80 | elapsed time per iteration (ms): 125.0 | "
    "throughput per GPU (TFLOP/s/GPU): 12.3 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 5.123456E+00 | "
    "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |";

}  // namespace

class TestMetricLines : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void parse_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("event");
    // Megatron-LM: seq_len 64 -> 8 samples / 0.125 s = 64 samples/s = 4096 tokens/s.
    QTest::newRow("megatron full line") << "megatron" << kMegatron << "10 5.12346 0.0001 1.234 4096 125 -";
    QTest::newRow("megatron without timestamp, older spacing")
        << "megatron"
        << " iteration        3/      20 | consumed samples:           24 | elapsed time per iteration (ms): 250.5 | learning rate: 3.000E-04 | global batch size:     8 | lm loss: 4.500000E+00 | loss scale: 65536.0 | grad norm: 0.500 |"
        << "3 4.5 0.0003 0.5 2043.91 250.5 -";
    QTest::newRow("megatron skipped iteration: no loss") << "megatron"
        << " iteration        4/      20 | consumed samples: 32 | elapsed time per iteration (ms): 100.0 | learning rate: 3.000E-04 | global batch size: 8 | loss scale: 32768.0 | number of skipped iterations:   1 |"
        << "4 - 0.0003 - 5120 100 -";
    QTest::newRow("megatron cut mid-field") << "megatron" << " iteration       10/     100 | consumed samples:           80 | elapsed time per iter"
                                            << "10 - - - - - -";
    QTest::newRow("megatron cut before the first field") << "megatron" << " iteration       10/" << "none";
    QTest::newRow("megatron garbled value") << "megatron" << " iteration 5/ 10 | lm loss: 5.1x2 | learning rate: abc |" << "5 - - - - - -";
    QTest::newRow("megatron memory report is no step") << "megatron"
        << "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2345.6 | reserved: 3000.0 | max reserved: 3000.0"
        << "none";
    QTest::newRow("megatron argument dump is no step") << "megatron" << "  train_iters ..................................... 100" << "none";
    // DeepSpeed.
    QTest::newRow("deepspeed progress report")
        << "deepspeed" << "[Rank 0] step=10, skipped=0, lr=[0.0001, 0.0001], mom=[(0.9, 0.999), (0.9, 0.999)]" << "10 - 0.0001 - - - -";
    QTest::newRow("deepspeed logger prefix")
        << "deepspeed" << "[2024-05-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=20, skipped=1, lr=[9.5e-05], mom=[(0.9, 0.95)]"
        << "20 - 9.5e-05 - - - -";
    QTest::newRow("deepspeed pipeline loss") << "deepspeed" << "steps: 10 loss: 2.3456 iter time (s): 0.125 samples/sec: 64.000"
                                              << "10 2.3456 - - 4096 125 -";
    QTest::newRow("deepspeed throughput")
        << "deepspeed"
        << "epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=63.5, CurrSamplesPerSec=64.0, MemAllocated=0.5GB, MaxMemAllocated=1.5GB"
        << "10 - - - 4096 - 1610612736";
    QTest::newRow("deepspeed loss line cut") << "deepspeed" << "steps: 10 los" << "none";
    QTest::newRow("deepspeed no step number") << "deepspeed" << "[Rank 0] step=, skipped=0, lr=[0.1]" << "none";
    QTest::newRow("deepspeed config dump is no step") << "deepspeed" << "[INFO] steps_per_print ................ 10" << "none";
    // nanoGPT.
    QTest::newRow("nanogpt iter") << "nanogpt" << "iter 10: loss 3.2100, time 45.67ms, mfu 1.23%" << "10 3.21 - - - 45.67 -";
    QTest::newRow("nanogpt first iter, mfu not yet known") << "nanogpt" << "iter 0: loss 10.9876, time 2345.10ms, mfu -100.00%"
                                                          << "0 10.9876 - - - 2345.1 -";
    QTest::newRow("nanogpt cut after loss") << "nanogpt" << "iter 7: loss 3.25" << "7 3.25 - - - - -";
    QTest::newRow("nanogpt cut before loss") << "nanogpt" << "iter 7: lo" << "none";
    QTest::newRow("nanogpt eval line is no step") << "nanogpt" << "step 250: train loss 1.9876, val loss 2.0123" << "none";
    QTest::newRow("nanogpt garbled step") << "nanogpt" << "iter x: loss 3.2" << "none";
    // JSON lines.
    QTest::newRow("jsonl every field")
        << "jsonl" << "{\"step\": 12, \"loss\": 2.5, \"lr\": 0.001, \"grad_norm\": 0.75, \"tokens_per_s\": 1000, \"step_ms\": 20.5, \"mem_bytes\": 4096}"
        << "12 2.5 0.001 0.75 1000 20.5 4096";
    QTest::newRow("jsonl samples per second") << "jsonl" << "{\"step\":3,\"loss\":1.0,\"samples_per_s\":2,\"extra\":\"x\"}"
                                               << "3 1 - - 128 - -";
    QTest::newRow("jsonl worker event shape") << "jsonl" << "{\"event\":\"step\",\"rank\":1,\"step\":4,\"loss\":3.5}" << "4 3.5 - - - - -";
    QTest::newRow("jsonl other worker event") << "jsonl" << "{\"event\":\"done\",\"rank\":0,\"step\":4,\"loss\":3.5}" << "none";
    QTest::newRow("jsonl null loss") << "jsonl" << "{\"step\":5,\"loss\":null}" << "5 - - - - - -";
    QTest::newRow("jsonl no step") << "jsonl" << "{\"loss\": 2.5}" << "none";
    QTest::newRow("jsonl fractional step") << "jsonl" << "{\"step\": 1.5, \"loss\": 2.5}" << "none";
    QTest::newRow("jsonl negative step") << "jsonl" << "{\"step\": -1, \"loss\": 2.5}" << "none";
    QTest::newRow("jsonl string loss") << "jsonl" << "{\"step\": 1, \"loss\": \"2.5\"}" << "none";
    QTest::newRow("jsonl cut") << "jsonl" << "{\"step\": 1, \"loss\": 2." << "none";
    QTest::newRow("jsonl array") << "jsonl" << "[1, 2]" << "none";
    // Auto detection, and a format that does not match.
    QTest::newRow("auto megatron") << "auto" << kMegatron << "10 5.12346 0.0001 1.234 4096 125 -";
    QTest::newRow("auto nanogpt") << "auto" << "iter 2: loss 4.0000, time 10.00ms, mfu 0.01%" << "2 4 - - - 10 -";
    QTest::newRow("auto deepspeed") << "auto" << "steps: 6 loss: 1.5 iter time (s): 0.5 samples/sec: 16" << "6 1.5 - - 1024 500 -";
    QTest::newRow("auto jsonl") << "auto" << "{\"step\":9,\"loss\":0.5}" << "9 0.5 - - - - -";
    QTest::newRow("auto plain log") << "auto" << "loading checkpoint from /data/ckpt ..." << "none";
    QTest::newRow("auto empty") << "auto" << "" << "none";
    QTest::newRow("none reads nothing") << "none" << "iter 2: loss 4.0000, time 10.00ms" << "none";
    QTest::newRow("nanogpt line in megatron mode") << "megatron" << "iter 2: loss 4.0000, time 10.00ms" << "none";
    QTest::newRow("megatron line in nanogpt mode") << "nanogpt" << kMegatron << "none";
  }

  // torchtitan's step line (torchtitan/components/metrics.py), coloured or not, behind its log
  // prefix; its tps is per device, the event's tokens/s the world's (4 ranks here).
  void torchtitan_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("event");  // render() and then "tflops mfu"
    const QString e = QStringLiteral("\x1b");
    QTest::newRow("coloured, behind the log prefix")
        << "torchtitan"
        << "[rank0]:[titan] 2026-08-21 10:00:00,123 - root - INFO - " + e + "[31mstep: 10  " + e + "[32mloss:  7.12345  " + e +
               "[33mgrad_norm:  1.2345  " + e + "[34mmemory: 12.50GiB(15.60%)  " + e + "[35mtps: 12,345  " + e + "[36mtflops: 1,567.89  " +
               e + "[35mmfu: 57.42%" + e + "[39m"
        << "10 7.12345 - 1.2345 49380 - 13421772800 1567.89 0.5742";
    QTest::newRow("plain, mfu not known") << "torchtitan"
                                          << "step:  1  loss: 12.25000  grad_norm:  9.8765  memory:  3.20GiB(4.00%)  tps: 812  tflops: 4.20  mfu: N/A"
                                          << "1 12.25 - 9.8765 3248 - 3435973837 4.2 -";
    QTest::newRow("an older line without grad_norm") << "torchtitan" << "step: 5  loss:  6.5000  memory: 10.00GiB(12.50%)  wps: 1,000  mfu: 30.00%"
                                                     << "5 6.5 - - 4000 - 10737418240 - 0.3";
    QTest::newRow("auto finds it") << "auto" << "step: 3  loss:  2.0000  grad_norm:  0.5000  tps: 100" << "3 2 - 0.5 400 - - - -";
    QTest::newRow("a validation line is no step") << "torchtitan" << "validate step: 3  loss: 2.1" << "none";
    QTest::newRow("cut before the loss") << "torchtitan" << "step: 3  lo" << "none";
    QTest::newRow("deepspeed's steps line is not torchtitan's") << "torchtitan" << "steps: 10 loss: 2.3456 iter time (s): 0.125" << "none";
  }
  void torchtitan() {
    QFETCH(QString, format);
    QFETCH(QString, line);
    QFETCH(QString, event);
    const auto f = enum_parse(config::kMetricsFormatNames, format.toStdString());
    QVERIFY(f);
    const auto got = parse_metric_line(line.toStdString(), *f, 64, 4);
    auto num = [](double v) { return std::isnan(v) ? QString("-") : QString::number(v, 'g', 6); };
    QCOMPARE(got ? render(got) + " " + num(got->tflops) + " " + num(got->mfu) : render(got), event);
  }
  void parse() {
    QFETCH(QString, format);
    QFETCH(QString, line);
    QFETCH(QString, event);
    const auto f = enum_parse(config::kMetricsFormatNames, format.toStdString());
    QVERIFY(f);
    QCOMPARE(render(parse_metric_line(line.toStdString(), *f, 64)), event);
  }

  void samplesWithoutSequenceLengthGiveNoTokens() {
    QCOMPARE(render(parse_metric_line("steps: 6 loss: 1.5 iter time (s): 0.5 samples/sec: 16", MetricsFormat::kDeepspeed, 0)),
             QString("6 1.5 - - - 500 -"));
  }

  // DeepSpeed prints one step on three lines: the reader gives one event once the loss comes.
  void readerMergesAStepsLines() {
    MetricLineReader reader(3, MetricsFormat::kAuto, 64);
    bool matched = false;
    QVERIFY(reader.feed("[Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]", &matched).empty());
    QVERIFY(matched);
    QVERIFY(reader.feed("some log line", &matched).empty());
    QVERIFY(!matched);
    QVERIFY(reader.feed("epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=60, CurrSamplesPerSec=64.0, MemAllocated=1.0GB").empty());
    auto out = reader.feed("steps: 10 loss: 2.5 iter time (s): 0.2 samples/sec: 40");
    QCOMPARE(out.size(), size_t{1});
    QCOMPARE(out[0].rank, 3);
    // The first line that gave a field wins: throughput's 64 samples/s, not the loss line's 40.
    QCOMPARE(render(out[0]), QString("10 2.5 0.0001 - 4096 200 1073741824"));
    QVERIFY(!reader.finish());
  }

  void readerHandsOutAStepWithoutLossWhenTheNextComes() {
    MetricLineReader reader(0, MetricsFormat::kDeepspeed, 0);
    QVERIFY(reader.feed("[Rank 0] step=1, skipped=0, lr=[0.5]").empty());
    auto out = reader.feed("[Rank 0] step=2, skipped=0, lr=[0.25]");
    QCOMPARE(out.size(), size_t{1});
    QCOMPARE(render(out[0]), QString("1 - 0.5 - - - -"));
    auto last = reader.finish();
    QCOMPARE(render(last), QString("2 - 0.25 - - - -"));
    QVERIFY(!reader.finish());
  }

  void readerGivesOneLineFormatsAtOnce() {
    MetricLineReader reader(1, MetricsFormat::kNanogpt);
    for (int i = 0; i < 3; ++i) {
      auto out = reader.feed(QString("iter %1: loss %2, time 5.00ms, mfu 1.00%").arg(i).arg(4.0 - i).toStdString());
      QCOMPARE(out.size(), size_t{1});
      QCOMPARE(out[0].step, int64_t{i});
      QCOMPARE(out[0].loss, 4.0 - i);
    }
    QVERIFY(!reader.finish());
  }
};

QTEST_APPLESS_MAIN(TestMetricLines)
#include "tst_metric_lines.moc"
