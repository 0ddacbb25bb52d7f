// The cost model: its formulas against the papers they come from, its memory accounting, and its
// predictions against published training runs.
#include "plan_test_support.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/device.h"
#include "stagecraft/model/model.h"
#include "stagecraft/plan/estimate.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>

#include <cmath>

using namespace stagecraft;

namespace {

using testing::make;
using testing::parse;

// GPT-3 175B shape (Brown et al. 2020): 96 layers, h 12288, 96 heads, s 2048.
const char* kGpt175 =
    "model: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}\n";

// A small mixture of experts on one node of 8 H100s: 4 MoE layers of 8 experts (FFN 2816), top 2;
// one micro-batch of 2048 tokens per rank (dp 8, m 1).
const char* kSmallMoe =
    "model: {arch: llama, layers: 4, hidden: 1024, heads: 16, kv_heads: 4, ffn_hidden: 2816, seq_len: 2048, vocab: 32000,\n"
    "        tied_embeddings: false, moe: {experts: 8, top_k: 2}}\n"
    "cluster: {nodes: 1, gpus_per_node: 8, device: H100-SXM}\n"
    "train: {global_batch: 8, micro_batch: 1, precision: bf16, attention: flash}\n";

// The estimate of a plan with the device's experts' load imbalance set to `u`.
plan::Estimate with_imbalance(const plan::Plan& p, double u) {
  plan::EstimateInput in = plan::estimate_input(p);
  in.device.calibration.moe_imbalance = u;
  return plan::estimate(in);
}

}  // namespace

class TestEstimate : public QObject {
  Q_OBJECT

 private Q_SLOTS:
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
    const double ours = model::ModelDesc::from(m).total_params();
    QCOMPARE(ours, formula + 2 * h);
    // And the paper's Table 1 sizes, to its one decimal.
    QVERIFY2(std::abs(ours / 1e9 - published_billions) < 0.05 * published_billions, qPrintable(QString::number(ours / 1e9)));
  }

  // Korthikanti et al. 2022, Table 2, at 16 bits with Megatron's dropout, per layer:
  //   none:      s b h (34 + 5 a s / h)
  //   TP t:      s b h (10 + 24/t + 5 a s / (h t))
  //   TP + SP:   s b h (34/t + 5 a s / (h t))
  //   selective: the 5 a s / h term gone;  full: 2 s b h (2 s b h / t with SP)
  // That is train.fp32_residual: false. With the residual stream in fp32 (the default, as
  // Stagecraft's engine keeps it; Megatron's --fp32-residual-connection) the two norm inputs take
  // 4 bytes each instead of 2: 4 s b h more where they are replicated (4/t with SP), and full
  // recompute keeps the layer's input at 4 s b h.
  void activationsMatchKorthikantiTable2_data() {
    QTest::addColumn<int>("tp");
    QTest::addColumn<bool>("sp");
    QTest::addColumn<QString>("recompute");
    QTest::addColumn<double>("per_sbh");   // coefficient of s b h
    QTest::addColumn<double>("per_as2b");  // coefficient of a s^2 b
    QTest::addColumn<double>("fp32_residual");  // what an fp32 residual stream adds, per s b h
    QTest::newRow("no parallelism") << 1 << false << "none" << 34.0 << 5.0 << 4.0;
    QTest::newRow("tensor parallel 8") << 8 << false << "none" << 10.0 + 24.0 / 8 << 5.0 / 8 << 4.0;
    QTest::newRow("tensor + sequence parallel 8") << 8 << true << "none" << 34.0 / 8 << 5.0 / 8 << 4.0 / 8;
    QTest::newRow("selective, tp 8 + sp") << 8 << true << "selective" << 34.0 / 8 << 0.0 << 4.0 / 8;
    QTest::newRow("selective, tp 4") << 4 << false << "selective" << 10.0 + 24.0 / 4 << 0.0 << 4.0;
    QTest::newRow("full recompute") << 1 << false << "full" << 2.0 << 0.0 << 2.0;
    QTest::newRow("full recompute, tp 8 + sp") << 8 << true << "full" << 2.0 / 8 << 0.0 << 2.0 / 8;
  }
  void activationsMatchKorthikantiTable2() {
    QFETCH(int, tp);
    QFETCH(bool, sp);
    QFETCH(QString, recompute);
    QFETCH(double, per_sbh);
    QFETCH(double, per_as2b);
    QFETCH(double, fp32_residual);
    auto c = parse(std::string(kGpt175) + "train: {micro_batch: 1, precision: bf16, fp32_residual: false, recompute: " + recompute.toStdString() + "}\n" +
                   "parallel: {tp: " + std::to_string(tp) + ", sequence_parallel: " + (sp ? "true" : "false") + "}\n" +
                   "cluster: {nodes: 1, gpus_per_node: 8}\n");
    const double s = 2048, b = 1, h = 12288, a = 96;
    const double expected = per_sbh * s * b * h + per_as2b * a * s * s * b;
    c.model.dropout = 0.1;  // Megatron's, which the paper's counts include
    QCOMPARE(plan::layer_activation_bytes(c, tp), expected);
    c.train.fp32_residual = true;
    QCOMPARE(plan::layer_activation_bytes(c, tp), expected + fp32_residual * s * b * h);
    c.train.fp32_residual = false;
    // Without dropout (Stagecraft's GPT) it is smaller, never larger.
    c.model.dropout = 0.0;
    QVERIFY(plan::layer_activation_bytes(c, tp) <= expected);
    // FlashAttention stores no scores.
    c.train.attention = config::Attention::kFlash;
    QVERIFY(plan::layer_activation_bytes(c, tp) <= expected - per_as2b * a * s * s * b + 4 * a * s * b);
  }

  // fp32 doubles every stored element but the residual stream's two (the norms' inputs, 2 s b h
  // elements), which are fp32 at every precision.
  void fp32DoublesEveryStoredElementButTheResidualStream() {
    auto half = parse(std::string(kGpt175) + "train: {precision: bf16}\n");
    auto full = parse(std::string(kGpt175) + "train: {precision: fp32}\n");
    const double s = 2048, b = 1, h = 12288, residual = 2 * s * b * h * 4;
    QCOMPARE(plan::layer_activation_bytes(full, 1), 2 * plan::layer_activation_bytes(half, 1) - residual);
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
    QCOMPARE(r.params, model::ModelDesc::from(c.model).total_params());
  }

  // ZeRO over the gradient group d = dp x cp: bytes per parameter held, and what each stage adds
  // in flight (zero 2: two unsharded gradient buckets; zero 3: two whole layers' weights).
  void zeroStagesShardOverDpTimesCp_data() {
    QTest::addColumn<int>("zero");
    QTest::addColumn<int>("cp");
    QTest::addColumn<double>("weights");  // bytes per parameter, sharded part only (bf16: 2 + 4 + 12)
    QTest::addColumn<double>("grads");
    QTest::addColumn<double>("optimizer");
    QTest::newRow("zero 0") << 0 << 1 << 2.0 << 4.0 << 12.0;
    QTest::newRow("zero 1, d 8") << 1 << 1 << 2.0 << 4.0 << 12.0 / 8;
    QTest::newRow("zero 2, d 8") << 2 << 1 << 2.0 << 4.0 / 8 << 12.0 / 8;
    QTest::newRow("zero 3, d 8") << 3 << 1 << 2.0 / 8 << 4.0 / 8 << 12.0 / 8;
    QTest::newRow("zero 3, dp 4 x cp 2") << 3 << 2 << 2.0 / 8 << 4.0 / 8 << 12.0 / 8;
    QTest::newRow("zero 1, dp 4 x cp 2") << 1 << 2 << 2.0 << 4.0 << 12.0 / 8;
  }
  void zeroStagesShardOverDpTimesCp() {
    QFETCH(int, zero);
    QFETCH(int, cp);
    QFETCH(double, weights);
    QFETCH(double, grads);
    QFETCH(double, optimizer);
    auto c = parse("model: {layers: 8, hidden: 1024, heads: 16, seq_len: 2048}\ncluster: {nodes: 1, gpus_per_node: 8}\n"
                   "train: {global_batch: 64, precision: bf16}\nparallel: {zero: " + std::to_string(zero) + ", cp: " + std::to_string(cp) +
                   ", grad_bucket_mb: 1}\n");
    const auto p = make(c);
    const auto& r = p.estimate.memory.at(0);
    const auto g = model::ModelDesc::from(c.model);
    const double layer = g.layer_params();
    const double buckets = zero >= 2 ? 2.0 * 1024 * 1024 : 0.0;
    const double gathered = zero == 3 ? 2.0 * layer * 2.0 : 0.0;
    QCOMPARE(r.params, g.total_params());
    QVERIFY(std::abs(r.weights - (r.params * weights + gathered)) < 1.0);
    QVERIFY(std::abs(r.grads - (r.params * grads + buckets)) < 1.0);
    QVERIFY(std::abs(r.optimizer - r.params * optimizer) < 1.0);
  }

  // Each stage holds less than the one before it; zero 3 pays the most data-parallel traffic.
  void zeroStagesTradeMemoryForTraffic() {
    const std::string base = std::string(kGpt175) + "cluster: {nodes: 16, gpus_per_node: 8}\n"
                             "parallel: {tp: 8, pp: 4, overlap_grad_reduce: false}\ntrain: {global_batch: 256, micro_batch: 1, precision: bf16}\n";
    double last_peak = 0, last_dp = -1;
    for (int zero = 0; zero <= 3; ++zero) {
      const auto e = make(parse(base, {"parallel.zero=" + std::to_string(zero)})).estimate;
      if (zero > 0) QVERIFY2(e.peak_memory_bytes < last_peak, qPrintable(QString("zero %1").arg(zero)));
      if (zero == 3) QVERIFY2(e.breakdown.dp_comm_s > last_dp, qPrintable(QString("zero %1").arg(zero)));
      last_peak = e.peak_memory_bytes;
      last_dp = e.breakdown.dp_comm_s;
    }
  }

  // Context parallelism: each rank keeps s / cp tokens; its weights do not shrink; the ring's
  // transfers hide behind long attention, Ulysses' all-to-alls do not.
  void contextParallelSplitsActivations() {
    const std::string base = "model: {arch: llama, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, seq_len: 131072,"
                             " vocab: 128256, tied_embeddings: false}\ncluster: {nodes: 4, gpus_per_node: 8, device: H100-SXM}\n"
                             "parallel: {tp: 8}\ntrain: {global_batch: 16, micro_batch: 1, precision: bf16, attention: flash, recompute: full}\n";
    const auto one = make(parse(base, {"parallel.cp=1"})).estimate;
    const auto two = make(parse(base, {"parallel.cp=2"})).estimate;
    const auto four = make(parse(base, {"parallel.cp=4"})).estimate;
    QCOMPARE(two.memory[0].weights, one.memory[0].weights);
    QVERIFY(std::abs(two.memory[0].activations / one.memory[0].activations - 0.5) < 0.01);
    QVERIFY(std::abs(four.memory[0].activations / one.memory[0].activations - 0.25) < 0.01);
    QCOMPARE(one.breakdown.cp_comm_s, 0.0);
    // 128k tokens: a 16k-token K/V block moves in far less time than its block's attention takes.
    QVERIFY2(four.breakdown.cp_comm_s < 0.01 * four.breakdown.compute_s, qPrintable(QString::number(four.breakdown.cp_comm_s)));
    const auto a2a = make(parse(base, {"parallel.cp=4", "parallel.tp=2", "parallel.cp_comm=all_to_all"})).estimate;
    const auto ring = make(parse(base, {"parallel.cp=4", "parallel.tp=2"})).estimate;
    QVERIFY(a2a.breakdown.cp_comm_s > ring.breakdown.cp_comm_s);
    // The same model FLOPs whatever the split; a micro-batch's work per GPU halves with cp 2 (the
    // step's stays: cp 2 takes its GPUs from dp, so each replica runs twice the micro-batches).
    QCOMPARE(two.model_flops, one.model_flops);
    const auto p1 = make(parse(base, {"parallel.cp=1"})), p2 = make(parse(base, {"parallel.cp=2"}));
    QCOMPARE(p2.micro_batches, 2 * p1.micro_batches);
    const double per1 = one.breakdown.compute_s / p1.micro_batches, per2 = two.breakdown.compute_s / p2.micro_batches;
    QVERIFY2(per2 < 0.55 * per1 && per2 > 0.45 * per1, qPrintable(QString("%1 vs %2").arg(per2).arg(per1)));
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

  // Published runs. "fit": Narayanan et al. 2021 (SC21) Table 1, the rows gemm_efficiency was
  // fitted on, with the micro-batch and virtual stages of NVIDIA's reproduction script
  // examples/sc21/run_table_1.sh: fp16, full recompute, dropout 0.1, standard attention; the
  // figure is hardware TFLOP/s per GPU (Eq. 3, recompute counted). Not fitted:
  //  - Korthikanti et al. 2022 Tables 3 and 5 (TP 8, no DP): iteration seconds with full
  //    recompute, and MFU with selective recompute + sequence parallelism, bf16;
  //  - SC21 Table 2 (PTD-P, TP 8 x PP 12 for 175B, 8 x 35 for 530B, micro-batch 1);
  //  - Llama 3 405B on 8,192 H100s (Table 4, BF16 MFU 43%), as a GPT of equal GEMM work
  //    (GQA + SwiGLU -> ffn_hidden 65536), FlashAttention, ZeRO-1 for FSDP; its pipeline
  //    schedule is unpublished and taken as plain 1F1B (the larger bubble), so 15%.
  // Tolerance 10% for the A100 rows (the bar).
  void predictsPublishedRuns_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QString>("metric");  // hw_tflops | mfu | step_s
    QTest::addColumn<double>("published");
    QTest::addColumn<double>("tolerance");
    auto row = [](const char* name, const char* device, int nodes, int layers, int hidden, int heads, int ffn, int seq, int vocab,
                  double dropout, int tp, int pp, int v, int gbs, int mbs, const char* precision, const char* recompute, bool sp,
                  int zero, const char* attention, const char* metric, double published, double tol) {
      QString y = QString("cluster: {nodes: %1, gpus_per_node: 8, device: %2}\n").arg(nodes).arg(device);
      y += QString("model: {layers: %1, hidden: %2, heads: %3, seq_len: %4, vocab: %5, dropout: %6%7}\n")
               .arg(layers).arg(hidden).arg(heads).arg(seq).arg(vocab).arg(dropout)
               .arg(ffn ? QString(", ffn_hidden: %1").arg(ffn) : QString());
      y += QString("parallel: {tp: %1, pp: %2, sequence_parallel: %3, zero: %4}\n").arg(tp).arg(pp).arg(sp ? "true" : "false").arg(zero);
      y += QString("pipeline: {schedule: %1, virtual_stages: %2}\n").arg(v > 1 ? "interleaved" : "1f1b").arg(v);
      // Megatron's and Meta's runs: the residual stream in 16 bits (Megatron's default).
      y += QString("train: {global_batch: %1, micro_batch: %2, precision: %3, recompute: %4, attention: %5, fp32_residual: false}\n")
               .arg(gbs).arg(mbs).arg(precision).arg(recompute).arg(attention);
      QTest::newRow(name) << y << QString(metric) << published << tol;
    };
    const char* A = "A100-80GB";
    // SC21 Table 1 (fitted).
    row("fit SC21 1.7B", A, 4, 24, 2304, 24, 0, 2048, 51200, 0.1, 1, 1, 1, 512, 16, "fp16", "full", false, 0, "standard", "hw_tflops", 137, 0.10);
    row("fit SC21 3.6B", A, 8, 30, 3072, 32, 0, 2048, 51200, 0.1, 2, 1, 1, 512, 16, "fp16", "full", false, 0, "standard", "hw_tflops", 138, 0.10);
    row("fit SC21 7.5B", A, 16, 36, 4096, 32, 0, 2048, 51200, 0.1, 4, 1, 1, 512, 16, "fp16", "full", false, 0, "standard", "hw_tflops", 142, 0.10);
    row("fit SC21 18.4B", A, 32, 40, 6144, 48, 0, 2048, 51200, 0.1, 8, 1, 1, 1024, 8, "fp16", "full", false, 0, "standard", "hw_tflops", 135, 0.10);
    row("fit SC21 39.1B", A, 64, 48, 8192, 64, 0, 2048, 51200, 0.1, 8, 2, 1, 1536, 4, "fp16", "full", false, 0, "standard", "hw_tflops", 138, 0.10);
    row("fit SC21 76.1B", A, 128, 60, 10240, 80, 0, 2048, 51200, 0.1, 8, 4, 3, 1792, 2, "fp16", "full", false, 0, "standard", "hw_tflops", 140, 0.10);
    row("fit SC21 145.6B", A, 192, 80, 12288, 96, 0, 2048, 51200, 0.1, 8, 8, 2, 2304, 2, "fp16", "full", false, 0, "standard", "hw_tflops", 148, 0.10);
    row("fit SC21 310.1B", A, 240, 96, 16384, 128, 0, 2048, 51200, 0.1, 8, 16, 2, 2160, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 155, 0.10);
    row("fit SC21 529.6B", A, 315, 105, 20480, 128, 0, 2048, 51200, 0.1, 8, 35, 3, 2520, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 163, 0.10);
    row("fit SC21 1T", A, 384, 128, 25600, 160, 0, 2048, 51200, 0.1, 8, 64, 1, 3072, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 163, 0.10);
    // Korthikanti et al. 2022 (not fitted): full recompute iteration time; selective + SP MFU.
    row("Korthikanti 22B full recompute", A, 1, 48, 6144, 64, 0, 2048, 51200, 0.1, 8, 1, 1, 4, 4, "bf16", "full", false, 0, "standard", "step_s", 1.42, 0.10);
    row("Korthikanti 175B full recompute", A, 8, 96, 12288, 96, 0, 2048, 51200, 0.1, 8, 8, 3, 64, 1, "bf16", "full", false, 0, "standard", "step_s", 18.13, 0.10);
    row("Korthikanti 530B full recompute", A, 35, 105, 20480, 128, 0, 2048, 51200, 0.1, 8, 35, 3, 280, 1, "bf16", "full", false, 0, "standard", "step_s", 49.05, 0.10);
    row("Korthikanti 1T full recompute", A, 64, 128, 25600, 160, 0, 2048, 51200, 0.1, 8, 64, 1, 512, 1, "bf16", "full", false, 0, "standard", "step_s", 94.42, 0.10);
    row("Korthikanti 22B selective+SP MFU", A, 1, 48, 6144, 64, 0, 2048, 51200, 0.1, 8, 1, 1, 4, 4, "bf16", "selective", true, 0, "standard", "mfu", 0.415, 0.10);
    row("Korthikanti 175B selective+SP MFU", A, 8, 96, 12288, 96, 0, 2048, 51200, 0.1, 8, 8, 3, 64, 1, "bf16", "selective", true, 0, "standard", "mfu", 0.514, 0.10);
    row("Korthikanti 530B selective+SP MFU", A, 35, 105, 20480, 128, 0, 2048, 51200, 0.1, 8, 35, 3, 280, 1, "bf16", "selective", true, 0, "standard", "mfu", 0.560, 0.10);
    row("Korthikanti 1T selective+SP MFU", A, 64, 128, 25600, 160, 0, 2048, 51200, 0.1, 8, 64, 1, 512, 1, "bf16", "selective", true, 0, "standard", "mfu", 0.563, 0.10);
    row("Korthikanti 530B DP 8 MFU", A, 280, 105, 20480, 128, 0, 2048, 51200, 0.1, 8, 35, 3, 2240, 1, "bf16", "selective", true, 0, "standard", "mfu", 0.542, 0.10);
    // SC21 Table 2, PTD-P (not fitted).
    row("SC21 T2 175B 384 GPUs", A, 48, 96, 12288, 96, 0, 2048, 51200, 0.1, 8, 12, 1, 1536, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 153, 0.10);
    row("SC21 T2 175B 1536 GPUs", A, 192, 96, 12288, 96, 0, 2048, 51200, 0.1, 8, 12, 1, 1536, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 141, 0.10);
    row("SC21 T2 530B 560 GPUs", A, 70, 105, 20480, 128, 0, 2048, 51200, 0.1, 8, 35, 1, 2240, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 171, 0.10);
    row("SC21 T2 530B 2240 GPUs", A, 280, 105, 20480, 128, 0, 2048, 51200, 0.1, 8, 35, 1, 2240, 1, "fp16", "full", false, 0, "standard", "hw_tflops", 159, 0.10);
    // Llama 3 405B on H100 (not fitted).
    row("Llama 3 405B 8192 H100", "H100-SXM", 1024, 126, 16384, 128, 65536, 8192, 128256, 0.0, 8, 16, 1, 2048, 1, "bf16", "none", true, 1, "flash", "mfu", 0.43, 0.15);
  }
  void predictsPublishedRuns() {
    QFETCH(QString, yaml);
    QFETCH(QString, metric);
    QFETCH(double, published);
    QFETCH(double, tolerance);
    const auto p = make(parse(yaml.toStdString()));
    const auto& e = p.estimate;
    const double predicted = metric == "hw_tflops" ? e.tflops_per_gpu : metric == "mfu" ? e.mfu : e.step_time_s;
    const double error = predicted / published - 1.0;
    qInfo("%s: published %.4g, predicted %.4g (%+.1f%%)", QTest::currentDataTag(), published, predicted, error * 100);
    QVERIFY2(std::abs(error) <= tolerance, qPrintable(QString("off by %1%").arg(error * 100, 0, 'f', 1)));
    QVERIFY2(e.fits, "the published run fitted its GPUs");
  }

  // Plausibility: every catalog GPU carries the best MFU published on it (with its source); a
  // plan predicted above it is marked, with a warning that gives the model's reason, and its
  // capped step runs at exactly that MFU; a slower layout is not marked, nor is the cpu device,
  // which has no published figure.
  void predictionsAboveThePublishedMfuAreMarked() {
    for (const auto& d : config::device_catalog()) {
      if (d.is_cpu) {
        QCOMPARE(d.published_mfu, 0.0);
      } else {
        QVERIFY2(d.published_mfu >= 0.3 && d.published_mfu <= 0.6 && !d.published_mfu_source.empty(), d.name.c_str());
      }
    }
    const std::string base = "model: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}\n"
                             "cluster: {nodes: 8, gpus_per_node: 8, device: A100-80GB}\ntrain: {global_batch: 1536, precision: bf16}\n";
    const auto fast = make(parse(base, {"parallel.dp=1", "parallel.tp=4", "parallel.pp=16", "train.micro_batch=1",
                                        "train.recompute=selective", "parallel.sequence_parallel=true"}));
    const auto& e = fast.estimate;
    qInfo("tp 4 pp 16: MFU %.1f%%: %s", e.mfu * 100, e.implausible_because.c_str());
    QVERIFY(e.mfu > 0.563);
    QVERIFY(!e.plausible);
    QVERIFY(e.implausible_because.rfind("MFU ", 0) == 0);
    QVERIFY(e.implausible_because.find("(56.3%, 1T GPT, Korthikanti et al. 2022)") != std::string::npos);
    bool warned = false;
    for (const auto& w : fast.warnings) warned = warned || w == "implausibly fast: " + e.implausible_because;
    QVERIFY(warned);
    QCOMPARE(plan::estimate_to_json(e).dump().find("\"plausible\":false") != std::string::npos, true);
    QVERIFY(std::fabs(e.mfu * e.step_time_s / e.capped_step_time_s() - 0.563) < 1e-9);
    const auto slow = make(parse(base, {"parallel.dp=1", "parallel.tp=8", "parallel.pp=8", "train.micro_batch=1", "train.recompute=full"}));
    QVERIFY2(slow.estimate.mfu < 0.563, qPrintable(QString::number(slow.estimate.mfu)));
    QVERIFY(slow.estimate.plausible);
    QVERIFY(slow.estimate.implausible_because.empty());
    QCOMPARE(slow.estimate.capped_step_time_s(), slow.estimate.step_time_s);
    for (const auto& w : slow.warnings) QVERIFY(w.find("implausibly fast") == std::string::npos);
    const auto cpu = make(parse("cluster: {nodes: 1, gpus_per_node: 2, device: cpu}\nmodel: {layers: 2, hidden: 64, heads: 2, seq_len: 16, vocab: 256}\n"
                                "parallel: {dp: 2}\ntrain: {global_batch: 4, micro_batch: 2}\nbackend: cpu\n"));
    QVERIFY(cpu.estimate.plausible);
    QCOMPARE(cpu.estimate.published_mfu, 0.0);
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

  // train.tf32: fp32 GEMMs at the TF32 peak; without it at the fp32 peak (A100: 156 against
  // 19.5 TFLOP/s), so compute is several times slower; 16-bit precisions ignore it.
  void tf32PicksThePeakOfFp32Gemms() {
    const std::string base = "model: {layers: 24, hidden: 2048, heads: 16, seq_len: 2048}\n"
                             "cluster: {nodes: 1, gpus_per_node: 8, device: A100-80GB}\n"
                             "train: {global_batch: 64, micro_batch: 1}\n";
    auto compute = [&](std::vector<std::string> o) { return make(parse(base, o)).estimate.breakdown.compute_s; };
    const double fp32 = compute({"train.precision=fp32"}), tf32 = compute({"train.precision=fp32", "train.tf32=true"});
    QVERIFY2(fp32 > 4 * tf32, qPrintable(QString("fp32 %1 s, tf32 %2 s").arg(fp32).arg(tf32)));
    QVERIFY(fp32 < 8.1 * tf32);  // at most the peaks' ratio
    QCOMPARE(compute({"train.precision=bf16", "train.tf32=true"}), compute({"train.precision=bf16"}));
  }

  // DP buckets (parallel.overlap_grad_reduce, grad_bucket_mb; runtime/grad_reducer.h): without
  // overlap the whole all-reduce is exposed; one bucket for the stage's gradients hides nothing;
  // smaller buckets hide more behind the last backward, never more than that backward, and never
  // the first bucket's share; ZeRO's reduce-scatter is not overlapped. Nothing else moves.
  void dpBucketsHideBehindTheLastBackward() {
    // GPT-2 350M on 2 nodes x 8 H100, dp 16: about 1.4 GB of fp32 gradients per rank.
    const std::string base = "model: {layers: 24, hidden: 1024, heads: 16, seq_len: 1024}\n"
                             "cluster: {nodes: 2, gpus_per_node: 8, device: H100-SXM}\n"
                             "train: {global_batch: 64, micro_batch: 2, precision: bf16}\n";
    auto dp = [&](std::vector<std::string> o) { return make(parse(base, o)).estimate.breakdown.dp_comm_s; };
    const double off = dp({"parallel.overlap_grad_reduce=false"});
    QVERIFY(off > 0);
    QCOMPARE(dp({"parallel.grad_bucket_mb=60000"}), off);
    double last = off;
    for (const char* mb : {"1000", "200", "25", "5"}) {
      const double d = dp({std::string("parallel.grad_bucket_mb=") + mb});
      QVERIFY2(d < last, mb);
      last = d;
    }
    // The last backward (one micro-batch's, over all 24 layers) bounds what hides.
    const auto plan = make(parse(base, {"parallel.grad_bucket_mb=5"}));
    const auto& br = plan.estimate.breakdown;
    QVERIFY(off - br.dp_comm_s <= br.compute_s / plan.micro_batches + 1e-12);
    QVERIFY(br.dp_comm_s > 0);
    // Only DP moves.
    const auto plain = make(parse(base, {"parallel.overlap_grad_reduce=false"}));
    QCOMPARE(br.compute_s, plain.estimate.breakdown.compute_s);
    QCOMPARE(br.pp_comm_s, plain.estimate.breakdown.pp_comm_s);
    QCOMPARE(br.optimizer_s, plain.estimate.breakdown.optimizer_s);
    QVERIFY(plan.estimate.step_time_s < plain.estimate.step_time_s);
    // ZeRO 1: the same with and without overlap.
    QCOMPARE(dp({"parallel.zero=1"}), dp({"parallel.zero=1", "parallel.overlap_grad_reduce=false"}));
    // The cpu device: Gloo's reduction needs the cores the backward uses, nothing hides.
    const std::vector<std::string> cpu = {"cluster.device=cpu", "cluster.nodes=1", "cluster.gpus_per_node=2", "train.precision=fp32",
                                          "parallel.grad_bucket_mb=0.5"};
    auto cpu_off = cpu;
    cpu_off.push_back("parallel.overlap_grad_reduce=false");
    QVERIFY(dp(cpu) > 0);
    QCOMPARE(dp(cpu), dp(cpu_off));
  }

  // ---- Mixture of experts ----

  // Each ep rank holds E / ep experts: a rank's routed-expert parameters are the layers' experts
  // over ep, exactly, whatever tp (routed experts are not split by tp); its dense part stays.
  void expertMemoryFallsAsOneOverEp_data() {
    QTest::addColumn<int>("tp");
    QTest::newRow("tp 1") << 1;
    QTest::newRow("tp 2") << 2;
  }
  void expertMemoryFallsAsOneOverEp() {
    QFETCH(int, tp);
    const double experts_per_layer = 8 * 3.0 * 2816 * 1024;  // E x (gate, up, down) x FE x C
    double dense = -1;
    for (int ep : {1, 2, 4, 8}) {
      if (ep * tp > 8) continue;
      const auto p = make(parse(kSmallMoe, {"parallel.tp=" + std::to_string(tp), "parallel.ep=" + std::to_string(ep)}));
      const auto& r = p.estimate.memory.at(0);
      QCOMPARE(r.expert_params, 4 * experts_per_layer / ep);
      QCOMPARE(r.expert_weights, r.expert_params * 2);  // bf16, no ZeRO
      QCOMPARE(r.expert_optimizer, r.expert_params * 12);
      if (dense < 0) dense = r.params - r.expert_params;
      QCOMPARE(r.params - r.expert_params, dense);
      QVERIFY(p.estimate.experts);
    }
  }

  // The dispatch and combine all-to-alls by hand: ep 4 within one node, each rank's 2048 tokens x
  // top 2 x 1024 x 2 bytes, 3/4 of them leaving over NVLink (450 GB/s x 0.8), plus 3 steps of
  // latency; two in the forward and two in the backward, 4 MoE layers, one micro-batch.
  void allToAllBytesByHand() {
    const auto p = make(parse(kSmallMoe, {"parallel.ep=4"}));
    const double bytes = 2048.0 * 2 * 1024 * 2;
    const double one = 0.75 * bytes / (3600 / 8.0 * 1e9 * 0.80) + 3 * 8e-6;
    const double want = 4 /*layers*/ * 4 /*all-to-alls*/ * one;
    QVERIFY2(std::abs(p.estimate.breakdown.moe_a2a_s - want) < 1e-9 * want,
             qPrintable(QString("%1 vs %2").arg(p.estimate.breakdown.moe_a2a_s).arg(want)));
    // ep 1: no exchange; a dense model: none either.
    QCOMPARE(make(parse(kSmallMoe, {"parallel.ep=1"})).estimate.breakdown.moe_a2a_s, 0.0);
    // Full recompute repeats the forward's two.
    const auto full = make(parse(kSmallMoe, {"parallel.ep=4", "train.recompute=full"}));
    QVERIFY(std::abs(full.estimate.breakdown.moe_a2a_s - 1.5 * want) < 1e-9 * want);
    // The step adds it.
    const auto& b = p.estimate.breakdown;
    QVERIFY(std::abs(p.estimate.step_time_s - (b.compute_s + b.recompute_s + b.tp_comm_s + b.cp_comm_s + b.moe_a2a_s + b.pp_comm_s +
                                               b.dp_comm_s + b.bubble_s + b.optimizer_s + b.overhead_s)) < 1e-12);
  }

  // An EP group across nodes sends its all-to-alls over the network: slower than the same group
  // size within a node, and the plan says so. 16 GPUs, ep 2: the default order keeps EP pairs on a
  // node; tp-dp-cp-pp puts ep (in cp's place) outside expert-dp, 8 ranks apart.
  void allToAllAcrossNodesIsSlower() {
    const std::vector<std::string> two_nodes = {"cluster.nodes=2", "train.global_batch=16", "parallel.ep=2"};
    const auto within = make(parse(kSmallMoe, two_nodes));
    auto across_overrides = two_nodes;
    across_overrides.push_back("parallel.order=tp-dp-cp-pp");
    const auto across = make(parse(kSmallMoe, across_overrides));
    QCOMPARE(plan::estimate_input(within).ep_nodes, 1);
    QCOMPARE(plan::estimate_input(across).ep_nodes, 2);
    QVERIFY2(across.estimate.breakdown.moe_a2a_s > 3 * within.estimate.breakdown.moe_a2a_s,
             qPrintable(QString("%1 vs %2").arg(across.estimate.breakdown.moe_a2a_s).arg(within.estimate.breakdown.moe_a2a_s)));
    QCOMPARE(across.estimate.breakdown.compute_s, within.estimate.breakdown.compute_s);
    auto warned = [](const plan::Plan& p) {
      for (const auto& w : p.warnings) {
        if (w.find("EP groups span 2 nodes") != std::string::npos) return true;
      }
      return false;
    };
    QVERIFY(warned(across));
    QVERIFY(!warned(within));
  }

  // The busiest ep rank's load u (CostCalibration::moe_imbalance) scales its experts' GEMMs and
  // its all-to-all's transfer, linearly at these sizes; the model FLOPs stay; ep 1 ignores it (each
  // rank computes its own tokens' copies) and a capacity factor caps it.
  void imbalanceScalesTheExpertGemms() {
    const auto p = make(parse(kSmallMoe, {"parallel.ep=8"}));
    const auto e1 = with_imbalance(p, 1.0), e2 = with_imbalance(p, 2.0), e3 = with_imbalance(p, 3.0);
    QCOMPARE(e1.breakdown.compute_s, p.estimate.breakdown.compute_s);  // the default is balanced
    QCOMPARE(e2.moe_imbalance, 2.0);
    const double step1 = e2.breakdown.compute_s - e1.breakdown.compute_s, step2 = e3.breakdown.compute_s - e2.breakdown.compute_s;
    QVERIFY(step1 > 0.1 * e1.breakdown.compute_s);
    QVERIFY2(std::abs(step2 / step1 - 1) < 0.03, qPrintable(QString("%1 then %2").arg(step1).arg(step2)));
    QCOMPARE(e2.model_flops, e1.model_flops);
    // The all-to-all's transfer (its latency apart: 7 steps of 8 us each, 16 all-to-alls) doubles.
    const double latency = 16 * 7 * 8e-6;
    QVERIFY(std::abs((e2.breakdown.moe_a2a_s - latency) / (e1.breakdown.moe_a2a_s - latency) - 2) < 1e-9);
    QVERIFY(e2.memory[0].moe_activations > e1.memory[0].moe_activations);
    const auto one = make(parse(kSmallMoe, {"parallel.ep=1"}));
    QCOMPARE(with_imbalance(one, 2.0).breakdown.compute_s, one.estimate.breakdown.compute_s);
    const auto capped = make(parse(kSmallMoe, {"parallel.ep=8", "model.moe.capacity_factor=1.25"}));
    QCOMPARE(with_imbalance(capped, 2.0).moe_imbalance, 1.25);
  }

  // ZeRO shards a routed expert's state over its expert-dp group (Megatron's distributed
  // optimizer), a dense parameter's over dp x cp; the experts' gradients reduce over expert-dp,
  // which ep 8 on 8 GPUs leaves at 1 (nothing to reduce).
  void zeroShardsExpertsOverExpertDp_data() {
    QTest::addColumn<int>("zero");
    QTest::addColumn<double>("weights");  // bytes per expert parameter at expert-dp 4 (bf16: 2 + 4 + 12)
    QTest::addColumn<double>("grads");
    QTest::addColumn<double>("optimizer");
    QTest::newRow("zero 0") << 0 << 2.0 << 4.0 << 12.0;
    QTest::newRow("zero 1") << 1 << 2.0 << 4.0 << 12.0 / 4;
    QTest::newRow("zero 2") << 2 << 2.0 << 4.0 / 4 << 12.0 / 4;
    QTest::newRow("zero 3") << 3 << 2.0 / 4 << 4.0 / 4 << 12.0 / 4;
  }
  void zeroShardsExpertsOverExpertDp() {
    QFETCH(int, zero);
    QFETCH(double, weights);
    QFETCH(double, grads);
    QFETCH(double, optimizer);
    const auto p = make(parse(kSmallMoe, {"parallel.ep=2", "parallel.zero=" + std::to_string(zero)}));  // dp 8, expert-dp 4
    QCOMPARE(p.topology.expert_size(plan::ExpertAxis::kDp), 4);
    const auto& r = p.estimate.memory.at(0);
    QCOMPARE(r.expert_weights, r.expert_params * weights);
    QCOMPARE(r.expert_grads, r.expert_params * grads);
    QCOMPARE(r.expert_optimizer, r.expert_params * optimizer);
    // The dense part over dp 8.
    const double dense = r.params - r.expert_params;
    QVERIFY(std::abs(r.optimizer - r.expert_optimizer - dense * 12.0 / (zero >= 1 ? 8 : 1)) < 1.0);
    QVERIFY(p.estimate.breakdown.expert_dp_comm_s > 0);
    QVERIFY(p.estimate.breakdown.expert_dp_comm_s <= p.estimate.breakdown.dp_comm_s);
    const auto ep8 = make(parse(kSmallMoe, {"parallel.ep=8", "parallel.zero=" + std::to_string(zero)}));
    QCOMPARE(ep8.estimate.breakdown.expert_dp_comm_s, 0.0);
  }

  // The first dense_layers of a mixture cost what a dense model's layers cost.
  void denseLayersCostAsDense() {
    const auto moe = parse(kSmallMoe, {"model.moe.dense_layers=1", "parallel.ep=4"});
    auto dense = parse(kSmallMoe, {"model.moe.experts=0", "parallel.ep=1"});
    const auto device = *config::find_builtin_device("H100-SXM");
    const auto a = plan::time_cost_model(moe, device, 1, 1), b = plan::time_cost_model(dense, device, 1, 1);
    QCOMPARE(a.layer[0], b.layer[0]);
    QVERIFY(a.layer[1] != b.layer[1]);
    QCOMPARE(plan::layer_activation_bytes(moe, 1, 0), plan::layer_activation_bytes(dense, 1, 0));
  }

  // The shipped mixtures plan as their headers say: exact parameter counts, fits an H100 without a
  // memory warning, expert parallelism on, each EP group within a node.
  void moeConfigsPlan_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("total");
    QTest::addColumn<double>("active");
    QTest::addColumn<int>("ep");
    QTest::newRow("Mixtral 8x7B") << "mixtral-8x7b-8x8.yaml" << 46702792704.0 << 12879925248.0 << 8;
    QTest::newRow("Qwen3-30B-A3B") << "qwen3-30b-a3b-2x8.yaml" << 30532122624.0 << 3353032704.0 << 4;
    QTest::newRow("Qwen3-235B-A22B") << "qwen3-235b-a22b-64x8.yaml" << 235093634560.0 << 22190763520.0 << 8;
  }
  void moeConfigsPlan() {
    QFETCH(QString, file);
    QFETCH(double, total);
    QFETCH(double, active);
    QFETCH(int, ep);
    auto c = config::load_config_file(std::string(STAGECRAFT_SOURCE_DIR) + "/configs/" + file.toStdString());
    QVERIFY2(c.ok(), c.status().message().c_str());
    const auto p = make(c.value());
    QCOMPARE(p.estimate.params_total, total);
    QCOMPARE(p.estimate.params_active, active);
    QCOMPARE(p.config.parallel.ep, ep);
    QVERIFY(p.estimate.fits);
    QVERIFY(p.estimate.breakdown.moe_a2a_s > 0);
    QCOMPARE(plan::estimate_input(p).ep_nodes, 1);
    for (const auto& w : p.warnings) {
      QVERIFY2(w.find("exceeds the") == std::string::npos && w.find("EP groups span") == std::string::npos, w.c_str());
    }
  }
};

QTEST_APPLESS_MAIN(TestEstimate)
#include "tst_estimate.moc"
