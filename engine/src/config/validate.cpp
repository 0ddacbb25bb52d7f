// The consistency rules of a run configuration. See validate.h; docs/ARCHITECTURE.md §3 lists the rules.
#include "stagecraft/config/validate.h"

#include <charconv>
#include <cmath>

#include "stagecraft/config/device.h"

namespace stagecraft::config {

namespace {

std::string str(int v) { return std::to_string(v); }
// Shortest text that reads back as v: 0.1, not 0.100000.
std::string str(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The largest cluster Stagecraft plans: 131,072 GPUs (16,384 nodes of 8), more than any training
// run so far. A plan lists every rank; a million of them would take gigabytes as JSON.
constexpr long long kMaxWorld = 1 << 17;
// The widest model: hidden 2^20 (GPT-3 has 12,288); keeps 4 x hidden and hidden^2 terms in range.
constexpr int kMaxHidden = 1 << 20;

class Checker {
 public:
  Checker(const RunConfig& c, Rules rules) : c_(c), rules_(rules) {}

  std::vector<ConfigIssue> run() {
    check_model();
    if (rules_ == Rules::kAll) {
      check_world();
      check_context();
      check_tensor();
      check_experts();
      check_pipeline();
      check_batch();
    } else {
      check_cluster_size();
    }
    check_train();
    check_kernels();
    check_device();
    check_comm();
    return std::move(issues_);
  }

 private:
  void fail(const std::string& key, const std::string& value, const std::string& rule) {
    issues_.push_back({key, key + "=" + value + ": " + rule});
  }

  // The device exists (or is fully defined) and can train in the chosen precision.
  void check_device() {
    auto d = config::resolve_device(c_.cluster);
    if (!d.ok()) {
      issues_.push_back({"cluster.device", d.status().message()});
      return;
    }
    const auto prec = c_.train.precision;
    if (d.value().peak_tflops(prec, false) <= 0) {
      std::string alt = d.value().fp16_tflops > 0 ? "fp16" : "fp32";
      fail("train.precision", std::string(to_string(prec)),
           d.value().name + " has no " + std::string(to_string(prec)) + " math; use " + alt);
    }
  }

  // NCCL moves GPU memory: with backend cpu the ranks' tensors are host memory, which only Gloo takes.
  void check_comm() {
    if (c_.comm == Comm::kNccl && c_.backend == Backend::kCpu) {
      fail("comm", "nccl", "NCCL exchanges GPU memory and backend=cpu keeps tensors in host memory; set comm: gloo (or auto)");
    }
  }

  // False (and an issue) when the cluster is larger than Stagecraft plans.
  bool check_cluster_size() {
    const long long world = static_cast<long long>(c_.cluster.nodes) * c_.cluster.gpus_per_node;
    if (world <= kMaxWorld) return true;
    fail("cluster.nodes", str(c_.cluster.nodes), "nodes x gpus_per_node = " + std::to_string(world) + " GPUs, more than the " +
                                                     std::to_string(kMaxWorld) + " Stagecraft plans");
    return false;
  }

  void check_model() {
    const auto& m = c_.model;
    if (m.layers <= 0) fail("model.layers", str(m.layers), "required; the number of transformer blocks");
    if (m.hidden <= 0) fail("model.hidden", str(m.hidden), "required; the model width");
    if (m.hidden > kMaxHidden) fail("model.hidden", str(m.hidden), "must be at most " + str(kMaxHidden));
    if (m.heads <= 0) fail("model.heads", str(m.heads), "required; the number of attention heads");
    if (m.hidden > 0 && m.heads > 0 && m.head_dim == 0 && m.hidden % m.heads != 0) {
      fail("model.heads", str(m.heads), "must divide model.hidden=" + str(m.hidden) + " (each head gets hidden / heads channels)");
    }
    if (m.kv_heads < 0) fail("model.kv_heads", str(m.kv_heads), "must be at least 1, or 0 for as many as model.heads");
    if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
      fail("model.kv_heads", str(m.kv_heads), "must divide model.heads=" + str(m.heads) + " (each key/value head serves a whole group of query heads)");
    }
    if (!m.llama()) {
      if (m.kv_heads > 0 && m.kv_heads != m.heads) {
        fail("model.kv_heads", str(m.kv_heads), "grouped-query attention needs model.arch: llama; gpt2 has one key/value head per query head");
      }
      if (m.qkv_bias) fail("model.qkv_bias", "true", "applies to model.arch: llama (gpt2 has biases on every projection already)");
      if (m.norm_eps != 1e-5) fail("model.norm_eps", str(m.norm_eps), "gpt2's LayerNorm uses 1e-5; other values need model.arch: llama");
      if (m.head_dim != 0) fail("model.head_dim", str(m.head_dim), "a head size apart from hidden / heads needs model.arch: llama");
      if (m.qk_norm) fail("model.qk_norm", "true", "q/k RMSNorm needs model.arch: llama");
      if (m.moe.enabled()) fail("model.moe.experts", str(m.moe.experts), "mixture-of-experts layers need model.arch: llama (SwiGLU experts)");
    } else if (m.head_dim != 0 && m.head_dim % 2 != 0) {
      fail("model.head_dim", str(m.head_dim), "rotary positions need an even head size");
    } else if (m.head_dim == 0 && m.hidden > 0 && m.heads > 0 && m.hidden % m.heads == 0 && (m.hidden / m.heads) % 2 != 0) {
      fail("model.heads", str(m.heads), "gives a head size of " + str(m.hidden / m.heads) + "; rotary positions need an even head size");
    }
    check_moe();
  }

  // model.moe: the keys only mean something with experts; with them, top_k picks among them,
  // some layers stay MoE, and the capacity is either dropless or at least an even share.
  void check_moe() {
    const auto& m = c_.model;
    const auto& e = m.moe;
    if (!e.enabled()) return;
    if (e.top_k > e.experts) {
      fail("model.moe.top_k", str(e.top_k), "must be between 1 and model.moe.experts=" + str(e.experts));
    }
    if (m.layers > 0 && e.dense_layers >= m.layers) {
      fail("model.moe.dense_layers", str(e.dense_layers), "must be below model.layers=" + str(m.layers) + " so that some layers have experts");
    }
    if (e.capacity_factor != 0 && e.capacity_factor < 1) {
      fail("model.moe.capacity_factor", str(e.capacity_factor), "must be 0 (dropless) or at least 1 (each expert's even share of the tokens)");
    }
    if (e.shared_ffn_hidden != 0 && e.shared_experts == 0) {
      fail("model.moe.shared_ffn_hidden", str(e.shared_ffn_hidden), "sizes the shared experts; set model.moe.shared_experts too, or remove it");
    }
  }

  void check_world() {
    const auto& p = c_.parallel;
    const int world = c_.world_size();
    // The model-parallel product: every axis but dp.
    const long long mp = static_cast<long long>(p.tp) * p.cp * p.pp;
    const std::string product = p.cp > 1 ? "tp x cp x pp" : "tp x pp";
    const std::string cluster = str(c_.cluster.nodes) + (c_.cluster.nodes == 1 ? " node" : " nodes") + " x " +
                                str(c_.cluster.gpus_per_node);
    const char* key = p.tp > 1 ? "parallel.tp" : (p.cp > 1 ? "parallel.cp" : "parallel.pp");
    const int value = p.tp > 1 ? p.tp : (p.cp > 1 ? p.cp : p.pp);
    if (!check_cluster_size()) return;
    if (p.dp_auto()) {
      if (mp > world) {
        fail(key, str(value), product + " = " + std::to_string(mp) + " is more than the " + str(world) + " GPUs of the cluster (" + cluster + ")");
      } else if (world % mp != 0) {
        fail(key, str(value), str(world) + " GPUs are not divisible by " + product + " = " + std::to_string(mp));
      }
    } else if (static_cast<long long>(p.dp) * mp != world) {
      fail("parallel.dp", str(p.dp),
           "dp x " + product + " = " + std::to_string(p.dp * mp) + " but the cluster has " + str(world) + " GPUs (" + cluster +
               "); set dp: auto or change the sizes");
    }
  }

  // Context parallelism: the sequence in 2 x cp chunks (load-balanced causal attention); Ulysses'
  // head exchange gives each cp rank whole query and key/value heads of its TP shard.
  void check_context() {
    const auto& p = c_.parallel;
    const auto& m = c_.model;
    if (p.cp <= 1) return;
    if (m.seq_len % (2 * p.cp) != 0) {
      fail("parallel.cp", str(p.cp), "context parallelism splits model.seq_len=" + str(m.seq_len) + " into 2 x cp = " +
                                         str(2 * p.cp) + " chunks, so 2 x cp must divide it");
    }
    if (p.tp_mode != TpMode::k1d) {
      fail("parallel.cp", str(p.cp), "context parallelism goes with tp_mode 1d; set cp: 1 or tp_mode: 1d");
    }
    if (p.cp_comm == CpComm::kAllToAll && m.heads > 0 && p.tp > 0) {
      const int heads = m.heads / p.tp;
      const int kv = m.kv() / p.tp;
      if (heads % p.cp != 0 || kv % p.cp != 0) {
        fail("parallel.cp_comm", "all_to_all", "exchanges heads over the cp=" + str(p.cp) + " ranks, so cp must divide the " + str(heads) +
                                                   " query and " + str(kv) + " key/value heads of each tp rank; use cp_comm: ring");
      }
    }
  }

  void check_tensor() {
    const auto& p = c_.parallel;
    const auto& m = c_.model;
    int n = p.tp;  // the size of one side of the TP grid; what must divide the model's dimensions
    switch (p.tp_mode) {
      case TpMode::k1d:
        break;
      case TpMode::k2d:
        n = integer_root(p.tp, 2);
        if (n == 0) fail("parallel.tp", str(p.tp), "tp_mode 2d arranges the TP group as an N x N grid, so tp must be a square (4, 9, 16, ...)");
        break;
      case TpMode::k2p5d: {
        if (p.tp % p.tp_depth != 0 || integer_root(p.tp / p.tp_depth, 2) == 0) {
          fail("parallel.tp", str(p.tp), "tp_mode 2.5d needs tp = N x N x tp_depth (tp_depth=" + str(p.tp_depth) + "), e.g. 8 with depth 2");
          n = 0;
        } else {
          n = integer_root(p.tp / p.tp_depth, 2);
        }
        break;
      }
      case TpMode::k3d:
        n = integer_root(p.tp, 3);
        if (n == 0) fail("parallel.tp", str(p.tp), "tp_mode 3d arranges the TP group as an N x N x N cube, so tp must be a cube (8, 27, 64, ...)");
        break;
    }
    if (p.tp_depth != 1 && p.tp_mode != TpMode::k2p5d) {
      fail("parallel.tp_depth", str(p.tp_depth), "only tp_mode 2.5d has a depth; remove it or set tp_mode: 2.5d");
    }
    if (n <= 1 || m.hidden <= 0 || m.heads <= 0 || m.hidden > kMaxHidden) return;
    const char* what = p.tp_mode == TpMode::k1d ? "tp" : "the TP grid side N";
    const std::string nstr = p.tp_mode == TpMode::k1d ? "" : " (N=" + str(n) + ")";
    if (m.heads % n != 0) {
      fail("parallel.tp", str(p.tp), std::string(what) + nstr + " must divide model.heads=" + str(m.heads) + " so that every rank holds whole heads");
    } else if (m.kv() % n != 0) {
      fail("parallel.tp", str(p.tp), std::string(what) + nstr + " must divide model.kv_heads=" + str(m.kv()) +
                                         " so that every rank holds whole key/value heads");
    }
    if (m.ffn() % n != 0) {
      fail("parallel.tp", str(p.tp), std::string(what) + nstr + " must divide model.ffn_hidden=" + str(m.ffn()));
    }
    // Routed experts split by parallel.expert_tp (check_experts); shared experts like the dense MLP.
    if (m.moe.enabled() && m.moe.shared_experts > 0 && m.moe_shared_ffn() % n != 0) {
      fail("parallel.tp", str(p.tp), std::string(what) + nstr + " must divide model.moe.shared_ffn_hidden=" + str(m.moe_shared_ffn()));
    }
    if (p.tp_mode != TpMode::k1d && m.hidden % n != 0) {
      fail("parallel.tp", str(p.tp), std::string(what) + nstr + " must divide model.hidden=" + str(m.hidden));
    }
    if (p.sequence_parallel && m.seq_len % p.tp != 0) {
      fail("parallel.sequence_parallel", "true", "sequence parallelism splits the sequence over tp=" + str(p.tp) +
                                                     " ranks, so tp must divide model.seq_len=" + str(m.seq_len));
    }
    if (p.sequence_parallel && p.tp_mode != TpMode::k1d) {
      fail("parallel.sequence_parallel", "true", "Megatron sequence parallelism goes with tp_mode 1d");
    }
  }

  // Expert parallelism with Megatron-Core's folding: the expert layers map the tp x cp x dp ranks
  // of a pipeline stage as expert_tp x ep x expert-dp, in the order with ep in cp's place; both
  // mappings must give the same pipeline stages.
  void check_experts() {
    const auto& p = c_.parallel;
    const auto& m = c_.model;
    if (!m.moe.enabled()) {
      if (p.ep != 1) fail("parallel.ep", str(p.ep), "splits the experts of mixture-of-experts layers and model.moe.experts is 0; set ep: 1");
      if (p.expert_tp != 1) {
        fail("parallel.expert_tp", str(p.expert_tp), "splits the experts of mixture-of-experts layers and model.moe.experts is 0; set expert_tp: 1");
      }
      return;
    }
    if (m.moe.experts % p.ep != 0) {
      fail("parallel.ep", str(p.ep), "must divide model.moe.experts=" + str(m.moe.experts) + " so that every ep rank holds as many experts");
    }
    if (m.moe_ffn() % p.expert_tp != 0) {
      fail("parallel.expert_tp", str(p.expert_tp), "must divide model.moe.ffn_hidden=" + str(m.moe_ffn()));
    }
    if ((p.ep > 1 || p.expert_tp > 1) && p.tp_mode != TpMode::k1d) {
      fail("parallel.ep", str(p.ep), "expert layers fold over Megatron 1d ranks; set tp_mode: 1d");
    }
    const int dp = resolved_dp(c_);
    if (dp <= 0) return;  // the world rule failed
    const long long stage = static_cast<long long>(p.tp) * p.cp * dp;
    const long long expert = static_cast<long long>(p.ep) * p.expert_tp;
    if (stage % expert != 0) {
      fail("parallel.ep", str(p.ep), "ep x expert_tp = " + std::to_string(expert) + " must divide the " + std::to_string(stage) +
                                        " ranks of a pipeline stage (tp x cp x dp = " + str(p.tp) + " x " + str(p.cp) + " x " + str(dp) + ")");
      return;
    }
    // The pipeline axis's stride in both mappings: the product of the sizes of the axes inside it.
    const int edp = static_cast<int>(stage / expert);
    long long dense = 1, folded = 1;
    for (Axis a : complete_order(p.order)) {
      if (a == Axis::kPp) break;
      dense *= a == Axis::kTp ? p.tp : a == Axis::kCp ? p.cp : dp;
      folded *= a == Axis::kTp ? p.expert_tp : a == Axis::kCp ? p.ep : edp;
    }
    if (dense != folded && p.pp > 1) {
      fail("parallel.order", order_text(p.order), "the expert layers' pipeline neighbours (ep x expert_tp inside) would be " + std::to_string(folded) +
                                                      " ranks apart and the attention layers' " + std::to_string(dense) +
                                                      "; put pp last (tp-cp-dp-pp) or make ep x expert_tp equal tp x cp");
    }
  }

  void check_pipeline() {
    const auto& p = c_.parallel;
    const auto& pl = c_.pipeline;
    const int layers = c_.model.layers;
    const int v = pl.virtual_stages;
    const bool interleaved = pl.schedule == Schedule::kInterleaved;
    if (interleaved && p.pp < 2) {
      fail("pipeline.schedule", "interleaved", "needs pipeline parallelism (parallel.pp > 1)");
    }
    if (interleaved && v < 2) {
      fail("pipeline.virtual_stages", str(v), "the interleaved schedule needs 2 or more virtual stages (model chunks) per pp rank");
    }
    if (!interleaved && v != 1) {
      fail("pipeline.virtual_stages", str(v), "only the interleaved schedule runs several model chunks per pp rank; set schedule: interleaved or virtual_stages: 1");
    }
    const int chunks = p.pp * (interleaved ? v : 1);
    if (layers > 0 && chunks > layers) {
      if (interleaved) {
        fail("parallel.pp", str(p.pp), "pp x virtual_stages = " + str(chunks) + " model chunks but the model has only " + str(layers) + " layers");
      } else {
        fail("parallel.pp", str(p.pp), "more pipeline stages than the model's " + str(layers) + " layers; every stage needs at least one layer");
      }
      return;  // a stage-id list cannot fill more stages than layers; nor count them (up to 2^30)
    }
    if (pl.costs != "model" && config::pipeline_costs_run(pl) <= 0) {
      fail("pipeline.costs", pl.costs, "must be model (the cost model's times) or run:ID (a recorded run's, e.g. run:7)");
    }
    if (pl.partition != PartitionKind::kExplicit || layers <= 0) return;
    const auto& ids = pl.stage_ids;
    const std::string listed = "a list of " + str(static_cast<int>(ids.size())) + " stage ids";
    if (static_cast<int>(ids.size()) != layers) {
      fail("pipeline.partition", listed, "needs one stage id per layer, " + str(layers) + " in all (model.layers)");
      return;
    }
    std::vector<int> count(static_cast<size_t>(std::max(chunks, 0)), 0);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= chunks) {
        fail("pipeline.partition", listed, "layer " + str(static_cast<int>(i)) + " has stage " + str(ids[i]) + ", outside [0, " + str(chunks) + ")");
        return;
      }
      if (i > 0 && ids[i] < ids[i - 1]) {
        fail("pipeline.partition", listed, "stage ids must not decrease (layer " + str(static_cast<int>(i)) + " goes back from stage " +
                                                 str(ids[i - 1]) + " to " + str(ids[i]) + "); stages hold contiguous layers");
        return;
      }
      ++count[static_cast<size_t>(ids[i])];
    }
    for (int s = 0; s < chunks; ++s) {
      if (count[static_cast<size_t>(s)] == 0) {
        fail("pipeline.partition", listed, "stage " + str(s) + " has no layer; every stage needs at least one");
        return;
      }
    }
  }

  void check_batch() {
    const auto& t = c_.train;
    const auto& p = c_.parallel;
    const int dp = resolved_dp(c_);
    if (dp <= 0) return;  // world rule already failed
    const long long per_step = static_cast<long long>(dp) * t.micro_batch;
    if (t.global_batch % per_step != 0) {
      fail("train.global_batch", str(t.global_batch),
           "must be a multiple of dp x micro_batch = " + str(dp) + " x " + str(t.micro_batch) + " = " + std::to_string(per_step) +
               " (a whole number of micro-batches per replica)");
      return;
    }
    const int m = micro_batches(c_);
    if (c_.pipeline.schedule == Schedule::kInterleaved && p.pp > 1 && m % p.pp != 0) {
      fail("train.global_batch", str(t.global_batch),
           "the interleaved schedule needs the micro-batch count m = " + str(m) + " to be a multiple of pp = " + str(p.pp));
    }
  }

  void check_train() {
    const auto& t = c_.train;
    if (t.min_lr > t.lr) fail("train.min_lr", str(t.min_lr), "must not exceed train.lr=" + str(t.lr));
    if (t.warmup_steps > t.steps) fail("train.warmup_steps", str(t.warmup_steps), "must not exceed train.steps=" + str(t.steps));
    if (!t.init.empty() && !t.resume.empty()) {
      fail("train.init", t.init, "a run starts from a model's weights (init) or continues a checkpoint (resume), not both; remove one");
    }
  }

  // train.kernels: each choice other than auto names a CUDA kernel path of work the run has. What
  // the GPU itself can run (compute capability, shared memory, the row widths) the CUDA device
  // checks when the run starts (runtime::Device::set_kernels).
  void check_kernels() {
    const auto& k = c_.train.kernels;
    const auto& t = c_.train;
    const auto cuda_only = [&](const std::string& key, std::string_view value) {
      if (c_.backend == Backend::kCuda) return true;
      fail(key, std::string(value), "chooses among the CUDA backend's kernels and backend is cpu; set backend: cuda or remove the key");
      return false;
    };
    if (k.flash != FlashKernels::kAuto && cuda_only("train.kernels.flash", to_string(k.flash))) {
      const std::string value(to_string(k.flash));
      if (t.attention != Attention::kFlash) {
        fail("train.kernels.flash", value, "chooses the fused attention's kernels; set train.attention: flash");
      } else if (c_.parallel.cp > 1 && c_.parallel.cp_comm == CpComm::kRing) {
        fail("train.kernels.flash", value, "parallel.cp " + str(c_.parallel.cp) +
                                               " with cp_comm ring attends by the ring's own block kernels; remove the key or set cp_comm: all_to_all");
      } else if (k.flash != FlashKernels::kCudaCores && t.precision != Precision::kBf16) {
        fail("train.kernels.flash", value, "the tensor-core attention takes q, k and v in bf16; set train.precision: bf16 or flash: cuda_cores");
      }
    }
    if (k.gemm_bias != GemmBias::kAuto && cuda_only("train.kernels.gemm_bias", to_string(k.gemm_bias)) &&
        k.gemm_bias == GemmBias::kCublasLt && t.precision == Precision::kFp32) {
      fail("train.kernels.gemm_bias", "cublaslt", "cuBLASLt's bias epilogues serve the 16-bit GEMMs; set train.precision: bf16 or fp16, or gemm_bias: auto");
    }
    if (k.layernorm_backward_warps != NormWarps::kAuto &&
        cuda_only("train.kernels.layernorm_backward_warps", to_string(k.layernorm_backward_warps)) && c_.model.llama()) {
      fail("train.kernels.layernorm_backward_warps", std::string(to_string(k.layernorm_backward_warps)),
           "model.arch llama normalises with RMSNorm, which has one backward kernel; remove the key");
    }
  }

  const RunConfig& c_;
  Rules rules_;
  std::vector<ConfigIssue> issues_;
};

}  // namespace

int integer_root(int v, int k) {
  if (v <= 0) return 0;
  const int r = static_cast<int>(std::lround(std::pow(static_cast<double>(v), 1.0 / k)));
  for (int c = std::max(1, r - 1); c <= r + 1; ++c) {
    long long p = 1;
    for (int i = 0; i < k; ++i) p *= c;
    if (p == v) return c;
  }
  return 0;
}

int resolved_dp(const RunConfig& c) {
  if (!c.parallel.dp_auto()) return c.parallel.dp;
  const long long mp = static_cast<long long>(c.parallel.tp) * c.parallel.cp * c.parallel.pp;
  if (mp <= 0 || c.world_size() % mp != 0) return 0;
  return static_cast<int>(c.world_size() / mp);
}

int micro_batches(const RunConfig& c) {
  const int dp = resolved_dp(c);
  if (dp <= 0 || c.train.micro_batch <= 0) return 0;
  return c.train.global_batch / (dp * c.train.micro_batch);
}

std::vector<ConfigIssue> validate(const RunConfig& config, Rules rules) { return Checker(config, rules).run(); }

}  // namespace stagecraft::config
