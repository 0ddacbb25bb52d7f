// The model description (model/model.h): exact parameter counts of published models, the tensors
// of each architecture in Hugging Face's layout, the fused groups the layer code relies on, the
// GEMMs at their real shapes, and GPT-2's formulas (Narayanan et al. 2021) kept.
#include "stagecraft/model/model.h"

#include <QtTest>

#include <cmath>
#include <map>
#include <set>

using namespace stagecraft;

Q_DECLARE_METATYPE(stagecraft::config::ModelConfig)

namespace {

config::ModelConfig llama(int layers, int hidden, int heads, int kv, int ffn, int vocab, bool tied) {
  config::ModelConfig m;
  m.arch = "llama";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv;
  m.ffn_hidden = ffn;
  m.vocab = vocab;
  m.seq_len = 8192;
  m.tied_embeddings = tied;
  m.rope_theta = 500000;
  return m;
}

// A mixture-of-experts llama: `experts` experts of `expert_ffn`, top_k per token.
config::ModelConfig moe(config::ModelConfig m, int experts, int top_k, int expert_ffn) {
  m.moe.experts = experts;
  m.moe.top_k = top_k;
  m.moe.ffn_hidden = expert_ffn;
  return m;
}

// Qwen3's decoupled head size and q/k norms.
config::ModelConfig qwen3(config::ModelConfig m) {
  m.head_dim = 128;
  m.qk_norm = true;
  m.rope_theta = 1000000;
  m.norm_eps = 1e-6;
  return m;
}

}  // namespace

class TestModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Parameter counts of the published checkpoints (their model.safetensors.index.json totals,
  // or the sum of their tensors' shapes).
  void publishedParameterCounts_data() {
    QTest::addColumn<config::ModelConfig>("model");
    QTest::addColumn<double>("params");
    QTest::newRow("Llama 3 8B") << llama(32, 4096, 32, 8, 14336, 128256, false) << 8030261248.0;
    QTest::newRow("Llama 3 70B") << llama(80, 8192, 64, 8, 28672, 128256, false) << 70553706496.0;
    QTest::newRow("Llama 3.1 405B") << llama(126, 16384, 128, 8, 53248, 128256, false) << 405853388800.0;
    QTest::newRow("Llama 3.2 1B (tied)") << llama(16, 2048, 32, 8, 8192, 128256, true) << 1235814400.0;
    QTest::newRow("Mistral 7B") << llama(32, 4096, 32, 8, 14336, 32000, false) << 7241732096.0;
    QTest::newRow("SmolLM-135M (tied)") << llama(30, 576, 9, 3, 1536, 49152, true) << 134515008.0;
    auto qwen = llama(28, 3584, 28, 4, 18944, 152064, false);
    qwen.qkv_bias = true;
    QTest::newRow("Qwen2.5 7B (q/k/v biases)") << qwen << 7615616512.0;
    config::ModelConfig gpt2;
    gpt2.layers = 12;
    gpt2.hidden = 768;
    gpt2.heads = 12;
    gpt2.seq_len = 1024;
    gpt2.vocab = 50257;
    QTest::newRow("GPT-2 124M") << gpt2 << 124439808.0;
  }
  void publishedParameterCounts() {
    QFETCH(config::ModelConfig, model);
    QFETCH(double, params);
    const auto d = model::ModelDesc::from(model);
    QCOMPARE(d.total_params(), params);
    // The tensor list sums to the same.
    double listed = 0;
    for (const auto& p : d.params()) listed += static_cast<double>(p.numel());
    QCOMPARE(listed, params);
  }

  // Mixture-of-experts models: every expert in the total, top_k of them in the active count.
  // Mixtral 8x7B's config.json (MixtralForCausalLM): 32 layers, hidden 4096, 32 heads, 8 kv
  // heads, intermediate_size 14336 per expert, 8 local experts, 2 per token, vocabulary 32000,
  // untied. Qwen3-30B-A3B's (Qwen3MoeForCausalLM, huggingface.co/Qwen/Qwen3-30B-A3B): 48 layers,
  // hidden 2048, 32 heads, 4 kv heads, head_dim 128, moe_intermediate_size 768, 128 experts, 8
  // per token, vocabulary 151936, untied, q/k norms; its card: 30.5B in all, 3.3B activated.
  // Qwen3-235B-A22B's (huggingface.co/Qwen/Qwen3-235B-A22B): 94 layers, hidden 4096, 64 heads, 4
  // kv heads, head_dim 128, moe_intermediate_size 1536, 128 experts, 8 per token, vocabulary
  // 151936, untied; its card: 235B in all, 22B activated. Mistral's announcement: 46.7B in all,
  // 12.9B active. The published figures lie within one unit of their last digit of the exact
  // counts (Mistral rounds, Qwen cuts: 3.35B is "3.3B").
  void mixtureOfExpertsCounts_data() {
    QTest::addColumn<config::ModelConfig>("model");
    QTest::addColumn<double>("total");
    QTest::addColumn<double>("active");
    QTest::addColumn<double>("card_total");   // billions, as the model card writes them
    QTest::addColumn<double>("card_active");
    QTest::addColumn<int>("card_decimals");
    QTest::newRow("Mixtral 8x7B") << moe(llama(32, 4096, 32, 8, 14336, 32000, false), 8, 2, 14336) << 46702792704.0 << 12879925248.0
                                  << 46.7 << 12.9 << 1;
    QTest::newRow("Qwen3-30B-A3B") << qwen3(moe(llama(48, 2048, 32, 4, 6144, 151936, false), 128, 8, 768)) << 30532122624.0
                                   << 3353032704.0 << 30.5 << 3.3 << 1;
    QTest::newRow("Qwen3-235B-A22B") << qwen3(moe(llama(94, 4096, 64, 4, 12288, 151936, false), 128, 8, 1536)) << 235093634560.0
                                     << 22190763520.0 << 235.0 << 22.0 << 0;
  }
  void mixtureOfExpertsCounts() {
    QFETCH(config::ModelConfig, model);
    QFETCH(double, total);
    QFETCH(double, active);
    QFETCH(double, card_total);
    QFETCH(double, card_active);
    QFETCH(int, card_decimals);
    const auto d = model::ModelDesc::from(model);
    QCOMPARE(d.total_params(), total);
    QCOMPARE(d.active_params(), active);
    double listed = 0;
    for (const auto& p : d.params()) listed += static_cast<double>(p.numel());
    QCOMPARE(listed, total);
    const double unit = std::pow(10.0, -card_decimals);
    QVERIFY2(std::abs(total / 1e9 - card_total) < unit, QByteArray::number(total / 1e9));
    QVERIFY2(std::abs(active / 1e9 - card_active) < unit, QByteArray::number(active / 1e9));
  }

  void moeTensorsHaveQwen3MoeNamesAndShapes() {
    auto m = qwen3(moe(llama(3, 64, 8, 2, 96, 300, false), 4, 2, 48));
    m.head_dim = 16;  // heads x head_dim = 128, not hidden
    m.moe.dense_layers = 1;
    m.moe.shared_experts = 2;
    m.moe.shared_ffn_hidden = 32;
    const auto d = model::ModelDesc::from(m);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : d.params()) shapes[p.name] = p.shape;
    const std::map<std::string, std::vector<int64_t>> want = {
        {"model.layers.0.self_attn.q_proj.weight", {128, 64}},
        {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
        {"model.layers.0.self_attn.o_proj.weight", {64, 128}},
        {"model.layers.0.self_attn.q_norm.weight", {16}},
        {"model.layers.0.self_attn.k_norm.weight", {16}},
        {"model.layers.0.mlp.gate_proj.weight", {96, 64}},  // the dense first layer
        {"model.layers.0.mlp.down_proj.weight", {64, 96}},
        {"model.layers.1.mlp.gate.weight", {4, 64}},
        {"model.layers.1.mlp.experts.0.gate_proj.weight", {48, 64}},
        {"model.layers.2.mlp.experts.3.up_proj.weight", {48, 64}},
        {"model.layers.2.mlp.experts.3.down_proj.weight", {64, 48}},
        {"model.layers.2.mlp.shared_experts.gate_proj.weight", {64, 64}},
        {"model.layers.2.mlp.shared_experts.down_proj.weight", {64, 64}},
    };
    for (const auto& [name, shape] : want) {
      QVERIFY2(shapes.count(name), name.c_str());
      QCOMPARE(shapes[name], shape);
    }
    QVERIFY(!shapes.count("model.layers.1.mlp.gate_proj.weight"));
    QVERIFY(!shapes.count("model.layers.0.mlp.gate.weight"));
    QVERIFY(!shapes.count("model.layers.1.mlp.experts.4.gate_proj.weight"));
    // Per layer: norms 2 C + q/k norms 2 HS, attention (Q + 2K) C + C Q; dense 3 F C; MoE E C
    // router + 3 E FE C + 3 S FS C.
    const double attn = 2 * 64 + 2 * 16 + (128 + 2 * 32) * 64 + 64 * 128;
    QCOMPARE(d.layer_params(0), attn + 3.0 * 96 * 64);
    QCOMPARE(d.layer_params(1), attn + 4 * 64 + 3.0 * 4 * 48 * 64 + 3.0 * 64 * 64);
    QCOMPARE(d.active_layer_params(1), attn + 4 * 64 + 3.0 * 2 * 48 * 64 + 3.0 * 64 * 64);
    QCOMPARE(d.active_layer_params(0), d.layer_params(0));
    QCOMPARE(d.total_params(), 2 * 300.0 * 64 + 64 + d.layer_params(0) + 2 * d.layer_params(1));
    QCOMPARE(d.active_params(), 2 * 300.0 * 64 + 64 + d.layer_params(0) + 2 * d.active_layer_params(1));
    // FLOPs follow the active parameters: the MoE layer's GEMMs are the router's, top_k experts'
    // and the shared ones', 2 per multiply-add.
    double flops = 0;
    for (const auto& g : d.layer_gemms(1)) flops += 2.0 * g.n * g.k;
    QCOMPARE(flops, 2.0 * (d.active_layer_params(1) - (2 * 64 + 2 * 16)));
    QCOMPARE(d.layer_gemm_flops_per_token(), flops);  // the typical layer is an MoE one
    QVERIFY(d.summary().find("4 experts of FFN 48, top 2, 2 shared of FFN 32, first 1 layers dense") != std::string::npos);
    // Without experts nothing changes: active equals total.
    const auto dense = model::ModelDesc::from(llama(2, 64, 8, 2, 96, 300, false));
    QCOMPARE(dense.active_params(), dense.total_params());
  }

  void llamaTensorsHaveHuggingFaceNamesAndShapes() {
    const auto d = model::ModelDesc::from(llama(2, 64, 8, 2, 96, 300, false));
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : d.params()) shapes[p.name] = p.shape;
    const std::map<std::string, std::vector<int64_t>> want = {
        {"model.embed_tokens.weight", {300, 64}},
        {"model.layers.1.input_layernorm.weight", {64}},
        {"model.layers.1.self_attn.q_proj.weight", {64, 64}},
        {"model.layers.1.self_attn.k_proj.weight", {16, 64}},
        {"model.layers.1.self_attn.v_proj.weight", {16, 64}},
        {"model.layers.1.self_attn.o_proj.weight", {64, 64}},
        {"model.layers.1.post_attention_layernorm.weight", {64}},
        {"model.layers.1.mlp.gate_proj.weight", {96, 64}},
        {"model.layers.1.mlp.up_proj.weight", {96, 64}},
        {"model.layers.1.mlp.down_proj.weight", {64, 96}},
        {"model.norm.weight", {64}},
        {"lm_head.weight", {300, 64}},
    };
    for (const auto& [name, shape] : want) {
      QVERIFY2(shapes.count(name), name.c_str());
      QCOMPARE(shapes[name], shape);
    }
    QCOMPARE(shapes.size(), size_t(1 + 2 * 9 + 2));
    QVERIFY(!shapes.count("model.layers.0.self_attn.q_proj.bias"));
  }

  // The layer code runs q | k | v and gate | up as one GEMM each: their parts must follow one
  // another, and under TP every rank's shards of them too.
  void fusedGroupsAreAdjacentAndSplitByRows() {
    auto m = llama(2, 64, 8, 2, 96, 300, true);
    m.qkv_bias = true;
    const auto ps = model::ModelDesc::from(m).params();
    for (size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].part == 0) continue;
      QCOMPARE(ps[i - 1].role, ps[i].role);
      QCOMPARE(ps[i - 1].part + 1, ps[i].part);
    }
    for (const auto& p : ps) {
      if (p.role == model::Role::kQkv || p.role == model::Role::kQkvBias || p.role == model::Role::kUp) {
        QCOMPARE(p.split, model::Split::kRow);
      }
      if (p.role == model::Role::kOut || p.role == model::Role::kDown) QCOMPARE(p.split, model::Split::kColumn);
      if (p.role == model::Role::kNorm1 || p.role == model::Role::kNorm2 || p.role == model::Role::kFinalNorm) {
        QCOMPARE(p.split, model::Split::kReplicated);
        QCOMPARE(p.init_value, 1.0f);
        QVERIFY(!p.weight_decay);
      }
    }
  }

  // A shard of a row-split tensor is a run of whole rows; of a column-split one, the same columns
  // of every row; they put back together to the whole.
  void shardsReassemble() {
    auto m = llama(1, 64, 8, 4, 96, 300, true);
    for (const auto& p : model::ModelDesc::from(m).params()) {
      if (p.layer != 0) continue;
      const int tp = 4;
      std::vector<float> full(static_cast<size_t>(p.numel())), back(full.size(), -1.0f);
      for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
      std::set<int64_t> seen;
      for (int r = 0; r < tp; ++r) {
        std::vector<float> shard(static_cast<size_t>(model::shard_numel(p, tp)));
        model::extract_shard(p, tp, r, full.data(), shard.data());
        if (p.split == model::Split::kReplicated) {
          QCOMPARE(shard, full);
          continue;
        }
        for (size_t i = 0; i < shard.size(); ++i) seen.insert(model::full_index(p, tp, r, static_cast<int64_t>(i)));
        model::insert_shard(p, tp, r, shard.data(), back.data());
      }
      if (p.split == model::Split::kReplicated) continue;
      QCOMPARE(back, full);
      QCOMPARE(static_cast<int64_t>(seen.size()), p.numel());
    }
  }

  void layerParamsUnderTensorParallelism() {
    const auto d = model::ModelDesc::from(llama(32, 4096, 32, 8, 14336, 128256, false));
    // Everything of a Llama layer is split but its two norms.
    QCOMPARE(d.layer_params_1d(8), (d.layer_params() - 2 * 4096) / 8 + 2 * 4096);
    config::ModelConfig gpt;
    gpt.layers = 24;
    gpt.hidden = 1024;
    gpt.heads = 16;
    const auto g = model::ModelDesc::from(gpt);
    const double h = 1024, f = 4096;
    QCOMPARE(g.layer_params_1d(4), (4 * h * h + 3 * h + 2 * h * f + f) / 4 + 6 * h);
  }

  // Every GEMM at its real shape: GQA's narrower K and V, SwiGLU's three matrices.
  void gemmsAtTheirRealShapes() {
    const auto d = model::ModelDesc::from(llama(32, 4096, 32, 8, 14336, 128256, false));
    const auto gs = d.layer_gemms();
    QCOMPARE(gs.size(), size_t(4));
    QCOMPARE(gs[0].n, 4096.0 + 2 * 1024);  // q | k | v
    QCOMPARE(gs[0].k, 4096.0);
    QCOMPARE(gs[1].k, 4096.0);
    QVERIFY(gs[1].row_parallel);
    QCOMPARE(gs[2].n, 2 * 14336.0);  // gate | up
    QCOMPARE(gs[3].k, 14336.0);
    QVERIFY(gs[3].row_parallel);
    // 2 x the layer's matrix parameters per token.
    QCOMPARE(d.layer_gemm_flops_per_token(), 2 * (d.layer_params() - 2 * 4096));
    // Attention by query heads: 4 s^2 (heads x head size).
    QCOMPARE(d.layer_forward_flops(), 8192 * d.layer_gemm_flops_per_token() + 4.0 * 8192 * 8192 * 4096);
  }

  void gpt2FlopsAreNarayanans() {
    config::ModelConfig m;
    m.layers = 96;
    m.hidden = 12288;
    m.heads = 96;
    m.seq_len = 2048;
    m.vocab = 51200;
    const auto d = model::ModelDesc::from(m);
    const double h = 12288, s = 2048, f = 4 * h;
    QCOMPARE(d.layer_forward_flops(), 2 * s * (4 * h * h + 2 * h * f) + 4 * s * s * h);
    QCOMPARE(d.head_forward_flops(), 2 * s * h * 51200);
  }

  void architectureNames() {
    QCOMPARE(model::parse_arch("gpt").value(), model::Arch::kGpt2);
    QCOMPARE(model::parse_arch("gpt2").value(), model::Arch::kGpt2);
    QCOMPARE(model::parse_arch("llama").value(), model::Arch::kLlama);
    QVERIFY(!model::parse_arch("bert").has_value());
  }

  void configJsonOfEachArchitecture() {
    auto m = llama(2, 64, 8, 2, 96, 300, false);
    const std::string j = model::hf_config_json(m);
    QVERIFY(j.find("\"LlamaForCausalLM\"") != std::string::npos);
    QVERIFY(j.find("\"num_key_value_heads\": 2") != std::string::npos);
    QVERIFY(j.find("\"intermediate_size\": 96") != std::string::npos);
    QVERIFY(j.find("\"rope_theta\": 500000") != std::string::npos);
    QVERIFY(j.find("\"tie_word_embeddings\": false") != std::string::npos);
    m.qkv_bias = true;
    QVERIFY(model::hf_config_json(m).find("\"Qwen2ForCausalLM\"") != std::string::npos);
    config::ModelConfig g;
    g.layers = 2;
    g.hidden = 64;
    g.heads = 4;
    QVERIFY(model::hf_config_json(g).find("\"GPT2LMHeadModel\"") != std::string::npos);
  }

  // A mixture of experts is written as Mixtral where it has Mixtral's form, else as Qwen3-MoE;
  // Mixtral's checkpoint names map the description's both ways, every other name stays.
  void mixtureOfExpertsClassAndNames() {
    auto m = llama(2, 64, 8, 2, 96, 300, false);
    m.moe.experts = 8;
    m.moe.top_k = 2;
    QCOMPARE(model::hf_architecture(m), std::string("MixtralForCausalLM"));
    std::string j = model::hf_config_json(m);
    QVERIFY(j.find("\"model_type\": \"mixtral\"") != std::string::npos);
    QVERIFY(j.find("\"num_local_experts\": 8") != std::string::npos);
    QVERIFY(j.find("\"num_experts_per_tok\": 2") != std::string::npos);
    QVERIFY(j.find("\"intermediate_size\": 96") != std::string::npos);
    const std::pair<const char*, const char*> names[] = {
        {"model.layers.1.mlp.gate.weight", "model.layers.1.block_sparse_moe.gate.weight"},
        {"model.layers.0.mlp.experts.7.gate_proj.weight", "model.layers.0.block_sparse_moe.experts.7.w1.weight"},
        {"exp_avg.model.layers.0.mlp.experts.3.up_proj.weight", "exp_avg.model.layers.0.block_sparse_moe.experts.3.w3.weight"},
        {"model.layers.1.mlp.experts.0.down_proj.weight", "model.layers.1.block_sparse_moe.experts.0.w2.weight"},
        {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.weight"}};
    for (const auto& [ours, theirs] : names) {
      QCOMPARE(model::hf_file_name(m, ours), std::string(theirs));
      QCOMPARE(model::description_name(theirs), std::string(ours));
    }
    // Every tensor of the description maps to a distinct name and back.
    std::set<std::string> seen;
    for (const auto& p : model::ModelDesc::from(m).params()) {
      const std::string f = model::hf_file_name(m, p.name);
      QVERIFY(seen.insert(f).second);
      QCOMPARE(model::description_name(f), p.name);
    }
    // Not Mixtral's form: Qwen3-MoE's class and the description's names.
    for (auto change : {+[](config::ModelConfig& x) { x.moe.dense_layers = 1; }, +[](config::ModelConfig& x) { x.moe.shared_experts = 1; },
                        +[](config::ModelConfig& x) { x.moe.ffn_hidden = 32; }, +[](config::ModelConfig& x) { x.moe.norm_topk = false; }}) {
      auto q = m;
      change(q);
      QCOMPARE(model::hf_architecture(q), std::string("Qwen3MoeForCausalLM"));
      QCOMPARE(model::hf_file_name(q, "model.layers.1.mlp.gate.weight"), std::string("model.layers.1.mlp.gate.weight"));
    }
    auto q = m;
    q.moe.dense_layers = 1;
    q.moe.ffn_hidden = 32;
    j = model::hf_config_json(q);
    QVERIFY(j.find("\"model_type\": \"qwen3_moe\"") != std::string::npos);
    QVERIFY(j.find("\"moe_intermediate_size\": 32") != std::string::npos);
    QVERIFY(j.find("\"mlp_only_layers\": [\n    0\n  ]") != std::string::npos || j.find("\"mlp_only_layers\": [0]") != std::string::npos);
  }
};


QTEST_APPLESS_MAIN(TestModel)
#include "tst_model.moc"
