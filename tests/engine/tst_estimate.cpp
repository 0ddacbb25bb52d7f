// The cost model: its formulas against the papers they come from, its memory accounting, and its
// predictions against published training runs.
#include "stagecraft/config/config_io.h"
#include "stagecraft/model/gpt_shape.h"
#include "stagecraft/plan/estimate.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>

#include <cmath>

using namespace stagecraft;

namespace {

config::RunConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto c = config::parse_config(yaml, "test.yaml", overrides);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

plan::Plan make(const config::RunConfig& c) {
  auto p = plan::make_plan(c);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return p.value();
}

// GPT-3 175B shape (Brown et al. 2020): 96 layers, h 12288, 96 heads, s 2048.
const char* kGpt175 =
    "model: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}\n";

}  // namespace

class TestEstimate : public QObject {
  Q_OBJECT

 private slots:
  // Narayanan et al. 2021, eq. 2: P = 12 L h^2 (1 + 13/(12h) + (V + s)/(12 L h)); our count adds
  // the final LayerNorm's 2h, which the formula leaves out.
  void parametersMatchNarayananEquation2_data() {
    QTest::addColumn<int>("layers");
    QTest::addColumn<int>("hidden");
    QTest::addColumn<double>("published_billions");
    QTest::newRow("1.7B") << 24 << 2304 << 1.7;
    QTest::newRow("18.4B") << 40 << 6144 << 18.4;
    QTest::newRow("145.6B") << 80 << 12288 << 145.6;
    QTest::newRow("1T") << 128 << 25600 << 1008.0;
  }
  void parametersMatchNarayananEquation2() {
    QFETCH(int, layers);
    QFETCH(int, hidden);
    QFETCH(double, published_billions);
    config::ModelConfig m;
    m.layers = layers;
    m.hidden = hidden;
    m.heads = 16;
    m.seq_len = 2048;
    m.vocab = 51200;
    const double L = layers, h = hidden, V = 51200, s = 2048;
    const double formula = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h));
    const double ours = model::GptShape::from(m).total_params();
    QCOMPARE(ours, formula + 2 * h);
    // And the paper's Table 1 sizes, to its one decimal.
    QVERIFY2(std::abs(ours / 1e9 - published_billions) < 0.05 * published_billions, qPrintable(QString::number(ours / 1e9)));
  }

  // Korthikanti et al. 2022, Table 2, at 16 bits with Megatron's dropout, per layer:
  //   none:      s b h (34 + 5 a s / h)
  //   TP t:      s b h (10 + 24/t + 5 a s / (h t))
  //   TP + SP:   s b h (34/t + 5 a s / (h t))
  //   selective: the 5 a s / h term gone;  full: 2 s b h (2 s b h / t with SP)
  void activationsMatchKorthikantiTable2_data() {
    QTest::addColumn<int>("tp");
    QTest::addColumn<bool>("sp");
    QTest::addColumn<QString>("recompute");
    QTest::addColumn<double>("per_sbh");   // coefficient of s b h
    QTest::addColumn<double>("per_as2b");  // coefficient of a s^2 b
    QTest::newRow("no parallelism") << 1 << false << "none" << 34.0 << 5.0;
    QTest::newRow("tensor parallel 8") << 8 << false << "none" << 10.0 + 24.0 / 8 << 5.0 / 8;
    QTest::newRow("tensor + sequence parallel 8") << 8 << true << "none" << 34.0 / 8 << 5.0 / 8;
    QTest::newRow("selective, tp 8 + sp") << 8 << true << "selective" << 34.0 / 8 << 0.0;
    QTest::newRow("selective, tp 4") << 4 << false << "selective" << 10.0 + 24.0 / 4 << 0.0;
    QTest::newRow("full recompute") << 1 << false << "full" << 2.0 << 0.0;
    QTest::newRow("full recompute, tp 8 + sp") << 8 << true << "full" << 2.0 / 8 << 0.0;
  }
  void activationsMatchKorthikantiTable2() {
    QFETCH(int, tp);
    QFETCH(bool, sp);
    QFETCH(QString, recompute);
    QFETCH(double, per_sbh);
    QFETCH(double, per_as2b);
    auto c = parse(std::string(kGpt175) + "train: {micro_batch: 1, precision: bf16, recompute: " + recompute.toStdString() + "}\n" +
                   "parallel: {tp: " + std::to_string(tp) + ", sequence_parallel: " + (sp ? "true" : "false") + "}\n" +
                   "cluster: {nodes: 1, gpus_per_node: 8}\n");
    const double s = 2048, b = 1, h = 12288, a = 96;
    const double expected = per_sbh * s * b * h + per_as2b * a * s * s * b;
    QCOMPARE(plan::layer_activation_bytes(c, tp, /*dropout=*/true), expected);
    // Without dropout (Stagecraft's GPT) it is smaller, never larger.
    QVERIFY(plan::layer_activation_bytes(c, tp, false) <= expected);
  }

  void fp32DoublesEveryStoredElement() {
    auto half = parse(std::string(kGpt175) + "train: {precision: bf16}\n");
    auto full = parse(std::string(kGpt175) + "train: {precision: fp32}\n");
    QCOMPARE(plan::layer_activation_bytes(full, 1), 2 * plan::layer_activation_bytes(half, 1));
  }

  // Micro-batches held per schedule (Narayanan et al. 2021; Megatron's interleaved warm-up).
  void inflightBySchedule_data() {
    QTest::addColumn<QString>("schedule");
    QTest::addColumn<int>("pp_rank");
    QTest::addColumn<int>("expected");
    // pp = 4, v = 2, m = 16
    QTest::newRow("gpipe holds all m") << "gpipe" << 0 << 16;
    QTest::newRow("1f1b first stage holds p") << "1f1b" << 0 << 4;
    QTest::newRow("1f1b last stage holds 1") << "1f1b" << 3 << 1;
    QTest::newRow("interleaved rank 0: (p-1)2 + (v-1)p + 1") << "interleaved" << 0 << 11;
    QTest::newRow("interleaved last rank: (v-1)p + 1") << "interleaved" << 3 << 5;
  }
  void inflightBySchedule() {
    QFETCH(QString, schedule);
    QFETCH(int, pp_rank);
    QFETCH(int, expected);
    auto c = parse(std::string(kGpt175) + "cluster: {nodes: 1, gpus_per_node: 4}\nparallel: {pp: 4}\ntrain: {global_batch: 16}\n" +
                   "pipeline: {schedule: " + schedule.toStdString() + ", virtual_stages: " + (schedule == "interleaved" ? "2" : "1") + "}\n");
    QCOMPARE(plan::inflight_micro_batches(c, pp_rank, 4, 2, 16), expected);
  }

  // Bytes per parameter: fp32 16; fp16 mixed precision 16 (ZeRO paper); bf16 with fp32 gradients
  // 18, and with the distributed optimizer Megatron's 6 + 12/d.
  void bytesPerParameter_data() {
    QTest::addColumn<QString>("precision");
    QTest::addColumn<int>("zero");
    QTest::addColumn<double>("expected");
    QTest::newRow("fp32") << "fp32" << 0 << 16.0;
    QTest::newRow("fp16 mixed (ZeRO paper)") << "fp16" << 0 << 16.0;
    QTest::newRow("bf16, fp32 grads") << "bf16" << 0 << 18.0;
    QTest::newRow("bf16 distributed optimizer d=8") << "bf16" << 1 << 6.0 + 12.0 / 8;
    QTest::newRow("fp32 zero 1 d=8") << "fp32" << 1 << 8.0 + 8.0 / 8;
  }
  void bytesPerParameter() {
    QFETCH(QString, precision);
    QFETCH(int, zero);
    QFETCH(double, expected);
    auto c = parse("model: {layers: 8, hidden: 1024, heads: 16}\ncluster: {nodes: 1, gpus_per_node: 8}\n"
                   "train: {global_batch: 64, precision: " + precision.toStdString() + "}\nparallel: {zero: " + std::to_string(zero) + "}\n");
    const auto p = make(c);
    const auto& r = p.estimate.memory.at(0);
    QCOMPARE((r.weights + r.grads + r.optimizer) / r.params, expected);
    QCOMPARE(r.params, model::GptShape::from(c.model).total_params());
  }

  // TP shards the layers; the tied word embedding sits on the first stage and again on the last.
  void parametersPerRank() {
    auto c = parse(std::string(kGpt175) + "cluster: {nodes: 8, gpus_per_node: 8}\nparallel: {tp: 8, pp: 8}\ntrain: {global_batch: 64}\n");
    const auto p = make(c);
    const double h = 12288, V = 51200, s = 2048, f = 4 * h;
    const double layer = (4 * h * h + 3 * h + 2 * h * f + f) / 8 + 6 * h;
    QCOMPARE(p.estimate.memory.size(), size_t(8));
    QCOMPARE(p.estimate.memory[0].params, 12 * layer + V * h / 8 + s * h);
    QCOMPARE(p.estimate.memory[3].params, 12 * layer);
    QCOMPARE(p.estimate.memory[7].params, 12 * layer + 2 * h + V * h / 8);
    QCOMPARE(p.estimate.memory[0].rank, 0);
  }

  void memoryMovesTheRightWay() {
    const std::string base = std::string(kGpt175) + "cluster: {nodes: 16, gpus_per_node: 8}\ntrain: {global_batch: 256, micro_batch: 1, precision: bf16}\n";
    auto peak = [&](const std::vector<std::string>& o) { return make(parse(base, o)).estimate.peak_memory_bytes; };
    const double plain = peak({"parallel.tp=8", "parallel.pp=8"});
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=8", "parallel.zero=1"}) < plain);
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=8", "parallel.sequence_parallel=true"}) < plain);
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=8", "train.recompute=selective"}) < plain);
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=8", "train.recompute=full"}) < peak({"parallel.tp=8", "parallel.pp=8", "train.recompute=selective"}));
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=8", "train.micro_batch=2"}) > plain);
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=8", "pipeline.schedule=gpipe"}) > plain);
    QVERIFY(peak({"parallel.tp=8", "parallel.pp=16"}) < plain);
    // 175B on 8 x 16 GPUs without sharding enough does not fit an 80 GiB A100.
    const auto p = make(parse(base, {"parallel.tp=1", "parallel.pp=16"}));
    QVERIFY(!p.estimate.fits);
    bool warned = false;
    for (const auto& w : p.warnings) warned = warned || w.find("exceeds the 80.0 GiB of A100-80GB") != std::string::npos;
    QVERIFY(warned);
  }

  // With uniform stages the bubble is (p - 1)/(v m) of the pipeline's busy time.
  void bubbleFollowsTheSchedule_data() {
    QTest::addColumn<QString>("schedule");
    QTest::addColumn<int>("v");
    QTest::newRow("1f1b") << "1f1b" << 1;
    QTest::newRow("interleaved v=2") << "interleaved" << 2;
    QTest::newRow("interleaved v=4") << "interleaved" << 4;
  }
  void bubbleFollowsTheSchedule() {
    QFETCH(QString, schedule);
    QFETCH(int, v);
    auto c = parse("model: {layers: 32, hidden: 4096, heads: 32, seq_len: 2048}\ncluster: {nodes: 4, gpus_per_node: 8}\n"
                   "parallel: {tp: 8, pp: 4}\ntrain: {global_batch: 16, precision: bf16}\n"
                   "pipeline: {schedule: " + schedule.toStdString() + ", virtual_stages: " + std::to_string(v) + "}\n");
    const auto p = make(c);
    const auto& b = p.estimate.breakdown;
    const double m = p.micro_batches;
    // The head makes the last stage the bottleneck; the bubble is measured against its time.
    QCOMPARE(m, 16.0);
    const double busy_per_micro = (b.compute_s + b.recompute_s + b.tp_comm_s) / m;
    QVERIFY(std::abs(b.bubble_s - 3.0 / v * busy_per_micro) < 1e-9 * b.bubble_s);
    QVERIFY(p.estimate.bubble_fraction > 0 && p.estimate.bubble_fraction < 3.0 / (v * m));
  }

  // Model FLOPs per step are Korthikanti's 72 B s L h^2 (1 + s/(6h) + V/(12 h L)); with full
  // recompute the executed FLOPs are 96 B s L h^2 (1 + s/(6h) + V/(16 L h)).
  void flopsMatchThePapers() {
    auto c = parse(std::string(kGpt175) + "cluster: {nodes: 8, gpus_per_node: 8}\nparallel: {tp: 8, pp: 8}\n"
                   "train: {global_batch: 512, recompute: full, precision: bf16}\n");
    const auto p = make(c);
    const double B = 512, s = 2048, L = 96, h = 12288, V = 51200;
    const double model = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    const double hw = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    QVERIFY(std::abs(p.estimate.model_flops / model - 1) < 1e-12);
    QVERIFY(std::abs(p.estimate.hardware_flops / hw - 1) < 1e-12);
    QVERIFY(std::abs(p.estimate.tokens_per_s - B * s / p.estimate.step_time_s) < 1e-6 * p.estimate.tokens_per_s);
    QVERIFY(std::abs(p.estimate.mfu - p.estimate.model_tflops_per_gpu / 312.0) < 1e-12);
  }

  void tpAcrossNodesCostsMore() {
    const std::string base = "model: {layers: 32, hidden: 8192, heads: 64, seq_len: 2048}\ncluster: {nodes: 4, gpus_per_node: 8}\n"
                             "train: {global_batch: 64, precision: bf16}\n";
    const auto inside = make(parse(base, {"parallel.tp=8", "parallel.pp=4"}));
    const auto across = make(parse(base, {"parallel.tp=16", "parallel.pp=2"}));
    QVERIFY(across.estimate.breakdown.tp_comm_s > 4 * inside.estimate.breakdown.tp_comm_s);
    // Faster links shorten TP communication and nothing else.
    const auto fast = make(parse(base, {"parallel.tp=8", "parallel.pp=4", "cluster.intra_node_gbps=4800"}));
    QVERIFY(fast.estimate.breakdown.tp_comm_s < inside.estimate.breakdown.tp_comm_s);
    QCOMPARE(fast.estimate.breakdown.compute_s, inside.estimate.breakdown.compute_s);
  }
};

QTEST_APPLESS_MAIN(TestEstimate)
#include "tst_estimate.moc"
