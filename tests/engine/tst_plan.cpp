// Plan: make_plan and plan_to_json's fields (world_size, sizes, order, ranks, groups, stages,
// warnings), every warning with rows that raise it and rows that do not, refusals of invalid
// configs, and extreme but valid configurations.
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>

#include <cmath>
#include <string>
#include <vector>

using stagecraft::Json;
using namespace stagecraft::plan;
using stagecraft::config::RunConfig;

namespace {

// A BERT-large-sized run on one node of 8 with dp = tp = pp = 2, balanced, 16 micro-batches: it
// raises no warning, so that each row's override is what raises one.
constexpr const char* kBase =
    "name: plan-test\n"
    "cluster: {nodes: 1, gpus_per_node: 8, device: A100-80GB}\n"
    "model: {layers: 24, hidden: 1024, heads: 16, ffn_hidden: 4096, seq_len: 512, vocab: 32768}\n"
    "parallel: {dp: 2, tp: 2, pp: 2}\n"
    "pipeline: {schedule: 1f1b, partition: balanced}\n"
    "train: {global_batch: 64, micro_batch: 2, precision: fp16}\n";

std::vector<std::string> to_std(const QStringList& l) {
  std::vector<std::string> v;
  for (const auto& s : l) v.push_back(s.toStdString());
  return v;
}

Plan plan_of(const std::string& yaml, const QStringList& overrides = {}) {
  auto c = stagecraft::config::parse_config(yaml, "plan.yaml", to_std(overrides));
  if (!c.ok()) qFatal("config: %s", c.status().message().c_str());
  auto p = make_plan(c.value());
  if (!p.ok()) qFatal("plan: %s", p.status().message().c_str());
  return std::move(p).value();
}

Plan plan_of_file(const char* name) {
  auto c = stagecraft::config::load_config_file(std::string(STAGECRAFT_SOURCE_DIR "/configs/") + name);
  if (!c.ok()) qFatal("config: %s", c.status().message().c_str());
  auto p = make_plan(c.value());
  if (!p.ok()) qFatal("plan: %s", p.status().message().c_str());
  return std::move(p).value();
}

// "[[0,1],[2,3]]" for comparing JSON arrays compactly.
QString dump(const Json* j) { return j ? QString::fromStdString(j->dump()) : QString("<absent>"); }

QStringList warnings_of(const Plan& p) {
  QStringList w;
  for (const auto& s : p.warnings) w << QString::fromStdString(s);
  return w;
}

}  // namespace

class TestPlan : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // ---- plan_to_json ----

  void contextParallelPlan() {
    // 16 GPUs: tp 2 x cp 2 x dp 2 x pp 2 in Megatron-Core's order; cp has its own groups and dp x cp
    // reduces gradients; activations per rank shrink with cp while weights do not.
    const Plan base = plan_of_file("libai-bert-3d.yaml");
    RunConfig c = base.config;
    c.cluster.nodes = 2;
    c.model.seq_len = 512;
    c.parallel.dp = 0;
    c.parallel.cp = 2;
    c.parallel.order = {Axis::kTp, Axis::kDp, Axis::kPp};  // completed with cp after tp
    auto p = make_plan(c);
    QVERIFY2(p.ok(), p.status().message().c_str());
    QCOMPARE(p->dp, 2);
    QCOMPARE(p->cp, 2);
    const Json j = plan_to_json(p.value());
    QCOMPARE(j.find("cp")->as_int(), 2);
    QCOMPARE(j.find("cp_comm")->as_string(), std::string("ring"));
    QCOMPARE(j.find("order")->as_string(), std::string("tp-cp-dp-pp"));
    const Json* groups = j.find("groups");
    QCOMPARE(dump(groups->find("cp")).left(13), QString("[[0,2],[1,3],"));
    QCOMPARE(dump(groups->find("dp")).left(13), QString("[[0,4],[1,5],"));
    QCOMPARE(dump(groups->find("pp")).left(13), QString("[[0,8],[1,9],"));
    QCOMPARE(dump(groups->find("dp_cp")), QString("[[0,2,4,6],[1,3,5,7],[8,10,12,14],[9,11,13,15]]"));
    QCOMPARE((*j.find("ranks"))[6].find("cp")->as_int(), 1);
    const QString text = QString::fromStdString(plan_to_text(p.value()));
    QVERIFY2(text.contains("cp=2 (ring)"), qPrintable(text));
    QVERIFY(text.contains("  CP (8 groups of 2): [0,2] [1,3]"));
    QVERIFY(text.contains("  DP x CP (4 groups of 4): [0,2,4,6]"));
    // The same run without cp on 8 GPUs: the same weights per rank, half the activations at cp 2.
    RunConfig one = c;
    one.cluster.nodes = 1;
    one.parallel.cp = 1;
    auto q = make_plan(one);
    QVERIFY2(q.ok(), q.status().message().c_str());
    QCOMPARE(p->estimate.memory[0].weights, q->estimate.memory[0].weights);
    QVERIFY(p->estimate.memory[0].activations < 0.6 * q->estimate.memory[0].activations);
    QVERIFY(p->estimate.breakdown.cp_comm_s > 0);
    QCOMPARE(q->estimate.breakdown.cp_comm_s, 0.0);
  }

  void jsonOfTheWorkedExample() {
    const Plan p = plan_of_file("libai-bert-3d.yaml");
    const Json j = plan_to_json(p);
    QCOMPARE(j.find("name")->as_string(), std::string("libai-bert-3d"));
    QCOMPARE(j.find("world_size")->as_int(), 8);
    QCOMPARE(j.find("nodes")->as_int(), 1);
    QCOMPARE(j.find("gpus_per_node")->as_int(), 8);
    QCOMPARE(j.find("device")->as_string(), std::string("A100-80GB"));
    QCOMPARE(j.find("dp")->as_int(), 2);
    QCOMPARE(j.find("tp")->as_int(), 2);
    QCOMPARE(j.find("pp")->as_int(), 2);
    QCOMPARE(j.find("cp")->as_int(), 1);
    QVERIFY(!j.contains("cp_comm"));
    QCOMPARE(j.find("zero")->as_int(), 0);
    QCOMPARE(j.find("order")->as_string(), std::string("tp-cp-dp-pp"));  // the file's tp-dp-pp, completed
    QCOMPARE(j.find("tp_mode")->as_string(), std::string("1d"));
    QVERIFY(!j.contains("tp_depth"));
    QCOMPARE(j.find("schedule")->as_string(), std::string("1f1b"));
    QCOMPARE(j.find("virtual_stages")->as_int(), 1);
    QCOMPARE(j.find("partition")->as_string(), std::string("uniform"));
    QCOMPARE(j.find("micro_batches")->as_int(), 8);  // 32 / (2 x 2)
    QCOMPARE(j.find("bubble_fraction")->as_double(), 1.0 / 8);
    // Every rank with its coordinates (docs/ARCHITECTURE.md §4: rank = tp + dp * tp_size + pp * tp_size * dp_size).
    const Json* ranks = j.find("ranks");
    QVERIFY(ranks && ranks->is_array());
    QCOMPARE(ranks->size(), size_t{8});
    for (int r = 0; r < 8; ++r) {
      const Json& e = (*ranks)[static_cast<size_t>(r)];
      QCOMPARE(e.find("rank")->as_int(), r);
      QCOMPARE(e.find("node")->as_int(), 0);
      QCOMPARE(e.find("local_rank")->as_int(), r);
      QCOMPARE(e.find("tp")->as_int(), r % 2);
      QCOMPARE(e.find("dp")->as_int(), (r / 2) % 2);
      QCOMPARE(e.find("pp")->as_int(), r / 4);
      QCOMPARE(e.find("cp")->as_int(), 0);
    }
    const Json* groups = j.find("groups");
    QVERIFY(groups && groups->is_object());
    QCOMPARE(dump(groups->find("tp")), QString("[[0,1],[2,3],[4,5],[6,7]]"));
    QCOMPARE(dump(groups->find("dp")), QString("[[0,2],[1,3],[4,6],[5,7]]"));
    QCOMPARE(dump(groups->find("pp")), QString("[[0,4],[1,5],[2,6],[3,7]]"));
    QCOMPARE(dump(groups->find("cp")), QString("[[0],[1],[2],[3],[4],[5],[6],[7]]"));
    QVERIFY(!groups->contains("dp_cp"));  // dp alone reduces the gradients
    QVERIFY(!j.contains("tensor_subgroups"));
    const Json* stages = j.find("stages");
    QVERIFY(stages && stages->is_array());
    QCOMPARE(stages->size(), size_t{2});
    const Json& s0 = (*stages)[0];
    const Json& s1 = (*stages)[1];
    QCOMPARE(s0.find("stage")->as_int(), 0);
    QCOMPARE(s0.find("pp_rank")->as_int(), 0);
    QCOMPARE(dump(s0.find("layers")), QString("[0,1,2,3,4,5,6,7,8,9,10,11]"));
    QCOMPARE(dump(s0.find("ranks")), QString("[0,1,2,3]"));
    QCOMPARE(s0.find("embedding")->as_bool(), true);
    QCOMPARE(s0.find("head")->as_bool(), false);
    QCOMPARE(s1.find("pp_rank")->as_int(), 1);
    QCOMPARE(dump(s1.find("layers")), QString("[12,13,14,15,16,17,18,19,20,21,22,23]"));
    QCOMPARE(dump(s1.find("ranks")), QString("[4,5,6,7]"));
    QCOMPARE(s1.find("embedding")->as_bool(), false);
    QCOMPARE(s1.find("head")->as_bool(), true);
    // Relative costs average 1; the head makes the last stage the heavier one.
    const double c0 = s0.find("relative_cost")->as_double(), c1 = s1.find("relative_cost")->as_double();
    QVERIFY(std::abs((c0 + c1) / 2 - 1.0) < 1e-3);  // rounded to 4 decimals in the JSON
    QVERIFY(c1 > c0);
    QVERIFY(j.find("estimate") && j.find("estimate")->is_object());
    QCOMPARE(dump(j.find("warnings")), QString("[]"));
    // The document is valid JSON that reads back the same.
    auto again = Json::parse(j.dump(2));
    QVERIFY2(again.ok(), again.status().message().c_str());
    QVERIFY(again.value() == j);
  }

  void jsonMemoryRowsNameARealRank() {
    const Plan p = plan_of(kBase, {"parallel.dp=1", "parallel.tp=2", "parallel.pp=4"});
    const Json j = plan_to_json(p);
    const Json* mem = j.find("estimate")->find("memory");
    QVERIFY(mem && mem->is_array());
    QCOMPARE(mem->size(), size_t{4});
    for (size_t i = 0; i < mem->size(); ++i) {
      const int pp_rank = static_cast<int>((*mem)[i].find("pp_rank")->as_int());
      QCOMPARE((*mem)[i].find("rank")->as_int(), p.topology.stage_ranks(pp_rank).front());
    }
  }

  void jsonTensorSubgroups_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("subgroups");
    QTest::addColumn<int>("depth");  // -1: no tp_depth key
    QTest::newRow("2d") << "colossalai-2d.yaml" << R"({"row":[[0,1],[2,3],[4,5],[6,7]],"column":[[0,2],[1,3],[4,6],[5,7]]})" << -1;
    QTest::newRow("2.5d") << "colossalai-2p5d.yaml"
                          << R"({"row":[[0,1],[2,3],[4,5],[6,7]],"column":[[0,2],[1,3],[4,6],[5,7]],"depth":[[0,4],[1,5],[2,6],[3,7]],"xz":[[0,2,4,6],[1,3,5,7]]})"
                          << 2;
    QTest::newRow("3d") << "colossalai-3d.yaml"
                        << R"({"input":[[0,2],[1,3],[4,6],[5,7]],"weight":[[0,1],[2,3],[4,5],[6,7]],"output":[[0,4],[1,5],[2,6],[3,7]]})" << -1;
  }
  void jsonTensorSubgroups() {
    QFETCH(QString, config);
    QFETCH(QString, subgroups);
    QFETCH(int, depth);
    const Json j = plan_to_json(plan_of_file(qPrintable(config)));
    QCOMPARE(dump(j.find("tensor_subgroups")), subgroups);
    if (depth < 0) QVERIFY(!j.contains("tp_depth"));
    else QCOMPARE(j.find("tp_depth")->as_int(), depth);
  }

  void jsonAtScale() {
    // GPT-3 175B on 1024 nodes x 8: TP 8 per node, 8 pipeline ranks of 2 chunks, dp 128.
    const Plan p = plan_of_file("gpt3-175b-1024x8.yaml");
    const Json j = plan_to_json(p);
    QCOMPARE(j.find("world_size")->as_int(), 8192);
    QCOMPARE(j.find("dp")->as_int(), 128);
    QCOMPARE(j.find("ranks")->size(), size_t{8192});
    QCOMPARE(j.find("groups")->find("tp")->size(), size_t{1024});
    QCOMPARE(j.find("groups")->find("dp")->size(), size_t{64});
    QCOMPARE((*j.find("groups")->find("dp"))[0].size(), size_t{128});
    QCOMPARE(j.find("groups")->find("pp")->size(), size_t{1024});
    QCOMPARE(j.find("virtual_stages")->as_int(), 2);
    const Json* stages = j.find("stages");
    QCOMPARE(stages->size(), size_t{16});
    for (size_t s = 0; s < 16; ++s) {
      QCOMPARE((*stages)[s].find("pp_rank")->as_int(), static_cast<int64_t>(s % 8));
      QCOMPARE((*stages)[s].find("layers")->size(), size_t{6});  // 96 layers / 16 chunks
      QCOMPARE((*stages)[s].find("ranks")->size(), size_t{1024});
    }
    const Json& last = (*j.find("ranks"))[8191];
    QCOMPARE(last.find("node")->as_int(), 1023);
    QCOMPARE(last.find("local_rank")->as_int(), 7);
    QCOMPARE(dump(j.find("warnings")), QString("[]"));
    QCOMPARE(j.find("micro_batches")->as_int(), 24);  // 3072 / (128 x 1)
  }

  void textNamesGroupsAndStages() {
    const std::string text = plan_to_text(plan_of_file("libai-bert-3d.yaml"));
    for (const char* line : {"  TP (4 groups of 2): [0,1] [2,3] [4,5] [6,7]", "  DP (4 groups of 2): [0,2] [1,3] [4,6] [5,7]",
                             "  PP (4 groups of 2): [0,4] [1,5] [2,6] [3,7]"}) {
      QVERIFY2(text.find(std::string(line) + "\n") != std::string::npos, text.c_str());
    }
    QVERIFY2(text.find("embedding") != std::string::npos && text.find("head+loss") != std::string::npos, text.c_str());
    QVERIFY2(text.find("[0-3]") != std::string::npos && text.find("[4-7]") != std::string::npos, text.c_str());
  }

  // ---- warnings (plan/plan.h: TP across nodes, bubble over 25%, memory over the device) ----

  void warnings_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QStringList>("expected");  // a regular expression for each warning, in order
    QTest::newRow("none on the base") << QStringList{} << QStringList{};
    // TP groups across nodes
    QTest::newRow("TP larger than a node")
        << QStringList{"cluster.nodes=4", "cluster.gpus_per_node=4", "parallel.dp=1", "parallel.tp=8"}
        << QStringList{R"(^TP groups span nodes \(tp=8 is larger than the 4 GPUs of a node\): every layer's tensor-parallel all-reduces cross the inter-node network; keep tp <= gpus_per_node with tp innermost in parallel\.order$)"};
    QTest::newRow("order puts TP across nodes") << QStringList{"cluster.nodes=2", "parallel.dp=4", "parallel.order=pp-dp-tp"}
                                                << QStringList{R"(^TP groups span nodes \(parallel\.order=pp-dp-tp-cp does not keep each TP group on one node\): )"};
    QTest::newRow("TP of a whole node stays on it") << QStringList{"cluster.nodes=2", "parallel.dp=1", "parallel.tp=8"} << QStringList{};
    QTest::newRow("TP strided inside a node") << QStringList{"parallel.order=dp-tp-pp"} << QStringList{};
    // TF32 is fp32's mode
    QTest::newRow("tf32 with bf16") << QStringList{"train.tf32=true", "train.precision=bf16"}
                                    << QStringList{R"(^train\.tf32 has no effect with train\.precision=bf16: TF32 is a mode of fp32 GEMMs$)"};
    QTest::newRow("tf32 with fp32") << QStringList{"train.tf32=true", "train.precision=fp32"} << QStringList{};
    // bubble
    QTest::newRow("bubble 50%") << QStringList{"train.global_batch=8"}
                                << QStringList{R"(^pipeline bubble 50%: \(pp - 1\)/m with pp=2, m=2 micro-batches; raise train\.global_batch or lower train\.micro_batch for more micro-batches$)"};
    QTest::newRow("bubble 33%") << QStringList{"train.global_batch=12"} << QStringList{R"(^pipeline bubble 33%: \(pp - 1\)/m with pp=2, m=3 micro-batches;)"};
    QTest::newRow("bubble exactly 25% is fine") << QStringList{"train.global_batch=16"} << QStringList{};
    QTest::newRow("interleaved bubble 38%")
        << QStringList{"parallel.dp=1", "parallel.pp=4", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2", "train.global_batch=8"}
        << QStringList{R"(^pipeline bubble 38%: \(pp - 1\)/\(v x m\) with pp=4, m=4 micro-batches;)"};
    QTest::newRow("interleaving brings it to 25%")
        << QStringList{"train.global_batch=8", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"} << QStringList{};
    QTest::newRow("no pipeline, no bubble") << QStringList{"parallel.dp=4", "parallel.pp=1", "train.global_batch=8"} << QStringList{};
    // memory
    QTest::newRow("memory over the device")
        << QStringList{"model.layers=96", "model.hidden=12288", "model.heads=96", "model.ffn_hidden=49152", "parallel.dp=1", "parallel.tp=8",
                       "parallel.pp=1", "train.global_batch=8"}
        << QStringList{R"(^estimated peak memory [0-9.]+ [GT]iB on pp rank 0 exceeds the 80\.0 GiB of A100-80GB: raise tp or pp, turn on train\.recompute or parallel\.zero, or lower train\.micro_batch \(stagecraft-cli search finds layouts that fit\)$)"};
    QTest::newRow("the same model fits a device of 1000 GiB")
        << QStringList{"model.layers=96", "model.hidden=12288", "model.heads=96", "model.ffn_hidden=49152", "parallel.dp=1", "parallel.tp=8",
                       "parallel.pp=1", "train.global_batch=8", "cluster.device={base: A100-80GB, memory_gib: 1000}"}
        << QStringList{};
    // micro-batches
    QTest::newRow("fewer micro-batches than stages")
        << QStringList{"parallel.dp=1", "parallel.pp=4", "train.global_batch=6"}
        << QStringList{R"(^pipeline bubble 100%: \(pp - 1\)/m with pp=4, m=3 micro-batches;)",
                       R"(^fewer micro-batches \(m=3\) than pipeline stages \(pp=4\): some stages never overlap; aim for m >= 4 x pp$)"};
    QTest::newRow("GPipe does not warn of overlap") << QStringList{"parallel.dp=1", "parallel.pp=4", "pipeline.schedule=gpipe", "train.global_batch=6"}
                                                    << QStringList{R"(^pipeline bubble 100%: )"};
    // imbalance
    QTest::newRow("uniform split with the head on pp=8")
        << QStringList{"parallel.dp=1", "parallel.tp=1", "parallel.pp=8", "pipeline.partition=uniform", "train.global_batch=256"}
        << QStringList{R"(^stage 7 is the bottleneck with [0-9]+% more work than the slowest stage of a balanced split; pipeline\.partition: balanced shortens every step$)"};
    QTest::newRow("explicit split much worse than balanced")
        << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1]"}
        << QStringList{R"(^stage 0 is the bottleneck with [0-9]+% more work than the slowest stage of a balanced split;)"};
    QTest::newRow("explicit split as good as balanced") << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,0,0,0,0,0,0,1,1,1,1,1,1,1,1,1,1,1]"} << QStringList{};
    // options without effect
    QTest::newRow("sequence parallel with tp=1") << QStringList{"parallel.dp=4", "parallel.tp=1", "parallel.sequence_parallel=true"}
                                                 << QStringList{R"(^parallel\.sequence_parallel has no effect with tp=1$)"};
    QTest::newRow("sequence parallel with tp=2") << QStringList{"parallel.sequence_parallel=true"} << QStringList{};
    // vocabulary padding
    QTest::newRow("vocab not divisible by tp")
        << QStringList{"model.vocab=30522", "parallel.dp=1", "parallel.tp=4"}
        << QStringList{R"(^model\.vocab=30522 is not divisible by tp=4; Megatron pads it to 30720 \(a multiple of 128 x tp\)$)"};
    QTest::newRow("vocab divisible by tp") << QStringList{"model.vocab=30522"} << QStringList{};
    QTest::newRow("vocab with a 2d grid is not padded") << QStringList{"model.vocab=30523", "parallel.dp=1", "parallel.tp=4", "parallel.tp_mode=2d"} << QStringList{};
  }
  void warnings() {
    QFETCH(QStringList, overrides);
    QFETCH(QStringList, expected);
    const Plan p = plan_of(kBase, overrides);
    const QStringList got = warnings_of(p);
    QVERIFY2(got.size() == expected.size(), qPrintable(got.join("\n")));
    for (int i = 0; i < expected.size(); ++i) {
      const QRegularExpression re(expected[i]);
      QVERIFY2(re.isValid(), qPrintable(re.errorString()));
      QVERIFY2(re.match(got[i]).hasMatch(), qPrintable(got[i]));
    }
    // Warnings travel in the JSON too.
    QCOMPARE(plan_to_json(p).find("warnings")->size(), static_cast<size_t>(expected.size()));
  }

  void bubbleFraction_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<double>("bubble");
    QTest::newRow("1F1B pp=2 m=16") << QStringList{} << 1.0 / 16;
    QTest::newRow("1F1B pp=4 m=2") << QStringList{"parallel.dp=1", "parallel.pp=4", "train.global_batch=4"} << 3.0 / 2;
    QTest::newRow("GPipe pp=2 m=4") << QStringList{"pipeline.schedule=gpipe", "train.global_batch=16"} << 1.0 / 4;
    QTest::newRow("interleaved pp=4 v=3 m=8") << QStringList{"parallel.dp=1", "parallel.pp=4", "pipeline.schedule=interleaved", "pipeline.virtual_stages=3",
                                                             "train.global_batch=16"}
                                              << 3.0 / 24;
    QTest::newRow("no pipeline") << QStringList{"parallel.dp=4", "parallel.pp=1"} << 0.0;
  }
  void bubbleFraction() {
    QFETCH(QStringList, overrides);
    QFETCH(double, bubble);
    const Plan p = plan_of(kBase, overrides);
    QCOMPARE(p.bubble_fraction(), bubble);
    QCOMPARE(plan_to_json(p).find("bubble_fraction")->as_double(), bubble);
  }

  // ---- refusals ----

  void refusesAnInvalidConfigWithEveryRule() {
    auto c = stagecraft::config::parse_config(kBase, "plan.yaml");
    QVERIFY(c.ok());
    stagecraft::config::RunConfig bad = c.value();
    bad.parallel.tp = 3;                 // heads 16, ffn 4096 and the world
    bad.pipeline.virtual_stages = 2;     // not interleaved
    auto p = make_plan(bad);
    QVERIFY(!p.ok());
    QCOMPARE(p.status().code(), stagecraft::Status::Code::kInvalidInput);
    const QStringList lines = QString::fromStdString(p.status().message()).split('\n');
    const QStringList expected = {
        "parallel.dp=2: dp x tp x pp = 12 but the cluster has 8 GPUs (1 node x 8); set dp: auto or change the sizes",
        "parallel.tp=3: tp must divide model.heads=16 so that every rank holds whole heads",
        "parallel.tp=3: tp must divide model.ffn_hidden=4096",
        "pipeline.virtual_stages=2: only the interleaved schedule runs several model chunks per pp rank; set schedule: interleaved or virtual_stages: 1",
    };
    for (const QString& e : expected) QVERIFY2(lines.contains(e), qPrintable(lines.join("\n")));
  }

  // ---- extreme but valid configurations plan without overflow or huge allocations ----

  void extremeConfigurations_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<int>("stages");
    QTest::newRow("a billion micro-batches of 1024 chunks")
        << "model: {layers: 2048, hidden: 64, heads: 8}\ncluster: {nodes: 1, gpus_per_node: 2}\nparallel: {dp: 1, tp: 1, pp: 2}\n"
           "pipeline: {schedule: interleaved, virtual_stages: 1024}\ntrain: {global_batch: 1000000000, micro_batch: 1}\n"
        << 2048;
    QTest::newRow("the widest model") << "model: {layers: 2, hidden: 1048576, heads: 1024}\ncluster: {nodes: 1, gpus_per_node: 1}\ntrain: {global_batch: 1}\n" << 1;
    QTest::newRow("a million layers, balanced on 1024 stages")
        << "model: {layers: 1000000, hidden: 64, heads: 8}\ncluster: {nodes: 128, gpus_per_node: 8}\nparallel: {pp: 1024}\n"
           "pipeline: {partition: balanced}\ntrain: {global_batch: 1024}\n"
        << 1024;
    QTest::newRow("the largest cluster, 16384 x 8") << "model: {layers: 8, hidden: 64, heads: 8}\ncluster: {nodes: 16384, gpus_per_node: 8}\ntrain: {global_batch: 131072}\n" << 1;
    QTest::newRow("tiny everything") << "model: {layers: 1, hidden: 1, heads: 1, seq_len: 1, vocab: 1, ffn_hidden: 1}\ncluster: {nodes: 1, gpus_per_node: 1}\ntrain: {global_batch: 1}\n" << 1;
  }
  void extremeConfigurations() {
    QFETCH(QString, yaml);
    QFETCH(int, stages);
    const Plan p = plan_of(yaml.toStdString());
    QCOMPARE(p.num_stages(), stages);
    int layers = 0;
    for (const auto& s : p.stages) {
      QVERIFY(s.num_layers >= 1);
      QCOMPARE(s.first_layer, layers);
      layers += s.num_layers;
    }
    QCOMPARE(layers, p.config.model.layers);
    QVERIFY(std::isfinite(p.estimate.step_time_s) && p.estimate.step_time_s > 0);
    QVERIFY(std::isfinite(p.estimate.peak_memory_bytes) && p.estimate.peak_memory_bytes > 0);
  }

  void refusesWhatWouldNotFit_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QString>("line");
    QTest::newRow("more GPUs than Stagecraft plans") << "model: {layers: 8, hidden: 64, heads: 8}\ncluster: {nodes: 16385, gpus_per_node: 8}\n"
                                                    << "big.yaml:2: cluster.nodes=16385: nodes x gpus_per_node = 131080 GPUs, more than the 131072 Stagecraft plans";
    QTest::newRow("a million GPUs") << "model: {layers: 8, hidden: 64, heads: 8}\ncluster: {nodes: 1024, gpus_per_node: 1024}\n"
                                    << "big.yaml:2: cluster.nodes=1024: nodes x gpus_per_node = 1048576 GPUs, more than the 131072 Stagecraft plans";
    QTest::newRow("wider than 2^20") << "model: {layers: 8, hidden: 999999999, heads: 1}\n" << "big.yaml:1: model.hidden=999999999: must be between 1 and 1048576";
    QTest::newRow("a stage list for 2^30 chunks counts nothing")
        << "model: {layers: 2, hidden: 64, heads: 8}\nparallel: {dp: 1, tp: 1, pp: 1048576}\npipeline: {schedule: interleaved, virtual_stages: 1024, partition: [0, 1]}\n"
        << "big.yaml:2: parallel.pp=1048576: pp x virtual_stages = 1073741824 model chunks but the model has only 2 layers";
  }
  void refusesWhatWouldNotFit() {
    QFETCH(QString, yaml);
    QFETCH(QString, line);
    auto c = stagecraft::config::parse_config(yaml.toStdString(), "big.yaml");
    QVERIFY(!c.ok());
    QVERIFY2(QString::fromStdString(c.status().message()).split('\n').contains(line), c.status().message().c_str());
  }

  void validateRefusesAWideModelBuiltInCode() {
    stagecraft::config::RunConfig c;
    c.model.layers = 8;
    c.model.hidden = 999'999'999;  // 4 x hidden would overflow int in ffn()
    c.model.heads = 1;
    c.parallel.tp = 2;
    c.parallel.dp = 4;
    bool found = false;
    for (const auto& i : stagecraft::config::validate(c)) found = found || i.message == "model.hidden=999999999: must be at most 1048576";
    QVERIFY(found);
    QVERIFY(!make_plan(c).ok());
  }
};

QTEST_APPLESS_MAIN(TestPlan)
#include "tst_plan.moc"
