// Trainer: the parallel equivalence of the training loop. The same seed, data and global batch
// give the same loss at every step and the same final weights for every (dp, tp, pp), schedule,
// micro-batch, ZeRO stage and recompute — ranks are threads here (ThreadComm), the loop is the
// one the workers run over Gloo, with the groups built by the same build_process_groups. Also
// checkpoints and resume across layouts, and the trainer's GPU memory paths on the CPU: a device
// the host must not touch (off_host_device.h) with Gloo-like groups (staged through host copies)
// and NCCL-like ones (device buffers, messages matched by order).
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/checkpoint.h"
#include "stagecraft/runtime/evaluate.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/observed_ops.h"
#include "stagecraft/runtime/profiled_device.h"
#include "off_host_device.h"
#include "runtime/context_attention.h"
#include "stagecraft/runtime/trainer.h"
#include "thread_comm.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

using namespace stagecraft;
using namespace stagecraft::runtime;

namespace {

const char* kBase =
    "model: {layers: 4, hidden: 32, heads: 4, seq_len: 16, vocab: 64}\n"
    "train: {global_batch: 8, micro_batch: 1, steps: 5, lr: 1.0e-2, warmup_steps: 2, weight_decay: 0.1, grad_clip: 1.0, seed: 42}\n"
    "backend: cpu\n";

// A sequence with structure to learn: repeating phrases with a slowly moving offset.
std::vector<uint16_t> data_tokens() {
  std::vector<uint16_t> t;
  for (int i = 0; i < 4000; ++i) t.push_back(static_cast<uint16_t>(((i % 23) * 5 + (i / 97)) % 64));
  return t;
}

TokenData make_data() { return TokenData::from_tokens(data_tokens()); }

// make_data's tokens as a token file at `path` (what eval reads); false where it cannot be written.
bool write_data(const QString& path) {
  const std::vector<uint16_t> tokens = data_tokens();
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return false;
  const qint64 bytes = static_cast<qint64>(tokens.size() * sizeof(uint16_t));
  return f.write(reinterpret_cast<const char*>(tokens.data()), bytes) == bytes;
}

struct RunOut {
  std::vector<size_t> mem_bytes;  // per rank, at the last step
  std::vector<StepStats> last;    // per rank, the last step's
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<double> aux;          // rank 0: the load-balancing loss of each step (mixture of experts)
  std::vector<std::vector<std::vector<int64_t>>> loads;  // rank 0: each step's tokens per expert per MoE layer
  std::vector<double> loss_scales;  // fp16: rank 0's scale after each step
  std::vector<bool> skipped;        // rank 0: whether each step was skipped
  std::vector<int> buckets, early_buckets;  // per rank: DP buckets, and those started in the backward (last step)
  std::vector<int> prefetched, acquires;    // per rank, zero 2 and 3: units found gathered ahead, and acquires (last step)
  std::map<std::string, NamedTensor> weights;
  std::string error;
};

// Where the ranks' tensors live and which memory their groups take: the CPU (kHost); a device
// that is not host-accessible with groups of host memory (kStaged, as Gloo on a GPU) or of its
// memory (kDirect, as NCCL). The groups refuse buffers in the wrong memory.
enum class Memory { kHost, kStaged, kDirect };

// A host-accessible device whose kernels are the CPU's, except that the encoder's backward writes
// NaN into the first token embedding gradient on the calls [poison_from, poison_to) — a stand-in
// for an fp16 overflow, injected through the Device seam.
class PoisonOps final : public ObservedOps {
 public:
  PoisonOps(const Ops& base, int poison_from, int poison_to) : b_(base), from_(poison_from), to_(poison_to) {}
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) const override {
    ObservedOps::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
    const int call = calls_++;
    if (call >= from_ && call < to_) dwte[0] = std::numeric_limits<float>::quiet_NaN();
  }

 protected:
  const Ops& base() const override { return b_; }

 private:
  const Ops& b_;
  int from_, to_;
  mutable int calls_ = 0;
};

class PoisonDevice final : public Device {
 public:
  PoisonDevice(int poison_from, int poison_to) : ops_(host_device().ops(), poison_from, poison_to) {}
  Backend backend() const override { return Backend::kCpu; }
  std::string name() const override { return "cpu with poisoned embedding gradients"; }
  Result<void*> allocate(size_t bytes) override { return host_device().allocate(bytes); }
  void release(void* p) override { host_device().release(p); }
  Status copy_from_host(void* d, const void* s, size_t n) override { return host_device().copy_from_host(d, s, n); }
  Status copy_to_host(void* d, const void* s, size_t n) override { return host_device().copy_to_host(d, s, n); }
  Status copy(void* d, const void* s, size_t n) override { return host_device().copy(d, s, n); }
  Status fill_zero(void* d, size_t n) override { return host_device().fill_zero(d, n); }
  Status synchronize() override { return Status::OK(); }
  const Ops& ops() const override { return ops_; }
  bool host_accessible() const override { return true; }

 private:
  PoisonOps ops_;
};

// The CPU's kernels with the fused attention of the CUDA backend's tensor cores: its tile program
// run on the CPU (kernels.h's flash_attention_tiled_*), for bf16 q, k, v; counts its calls.
class TiledFlashOps final : public ObservedOps {
 public:
  bool has_flash_attention() const override { return true; }
  int max_flash_head() const override { return 128; }
  void flash_attention_forward(ActOut out, float* lse, ActIn qkv, int B, int T, int NH, int HS, int NKV) const override {
    ++forwards;
    if (!qkv.low()) return refuse();
    std::vector<float> o(size_t(B) * T * NH * HS);
    cpu::flash_attention_tiled_forward(o.data(), lse, qkv.low(), B, T, NH, HS, NKV);
    put(out, o);
  }
  void flash_attention_backward(ActOut dqkv, float* scratch, ActIn dout, ActIn qkv, ActIn out, const float* lse, int B, int T,
                                int NH, int HS, int NKV) const override {
    ++backwards;
    if (!qkv.low()) return refuse();
    const size_t n = size_t(B) * T * NH * HS;  // out, dout (B, T, NH HS); dqkv (B, T, (NH + 2 NKV) HS)
    const std::vector<float> o = wide(out, n), dy = wide(dout, n);
    std::vector<float> d(size_t(B) * T * (NH + 2 * NKV) * HS);
    cpu::flash_attention_tiled_backward(d.data(), scratch, dy.data(), qkv.low(), o.data(), lse, B, T, NH, HS, NKV);
    put(dqkv, d);
  }
  mutable std::atomic<int> forwards{0}, backwards{0}, refused{0};

 protected:
  const Ops& base() const override { return host_device().ops(); }

 private:
  void refuse() const { ++refused; }  // fp32 q, k, v: not what the tile program takes
  // An activation's n values in fp32, and fp32 values into one (rounded where it is bf16).
  static std::vector<float> wide(ActIn x, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = x.low() ? to_float(x.low()[i]) : x.f32()[i];
    return v;
  }
  static void put(ActOut x, const std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (x.low()) {
        x.low()[i] = to_bf16(v[i]);
      } else {
        x.f32()[i] = v[i];
      }
    }
  }
};

RunOut train(const std::vector<std::string>& overrides, int steps, bool save = false, Memory memory = Memory::kHost,
             Device* device = nullptr, bool timing = true, const Ops* off_host_ops = nullptr) {
  RunOut out;
  auto cfg = config::parse_config(kBase, "test.yaml", overrides);
  if (!cfg.ok()) {
    out.error = cfg.status().message();
    return out;
  }
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) {
    out.error = plan.status().message();
    return out;
  }
  const auto& topo = plan->topology;
  const int world = topo.world_size();
  testing::ThreadHubs hubs;
  testing::MemoryMap device_memory;
  testing::ThreadMemory checked;
  if (memory != Memory::kHost) checked = {&device_memory, memory == Memory::kDirect};
  std::vector<comm::ProcessGroups> groups;
  std::vector<RankLayout> layouts;
  for (int r = 0; r < world; ++r) {
    auto g = comm::build_process_groups(topo, r, cfg->model.tied_embeddings, testing::thread_communicator_factory(hubs, r, checked));
    auto l = comm::rank_layout_of(plan.value(), r);
    if (!g.ok() || !l.ok()) {
      out.error = g.status().message() + l.status().message();
      return out;
    }
    groups.push_back(std::move(g).value());
    layouts.push_back(std::move(l).value());
  }
  const TokenData data = make_data();
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<size_t>(r);
      std::unique_ptr<Device> dev;
      if (memory != Memory::kHost) dev = std::make_unique<testing::OffHostDevice>(device_memory, off_host_ops);
      auto t = Trainer::create(cfg.value(), layouts[i], groups[i].trainer_groups(), &data, dev ? dev.get() : device);
      auto fail = [&](const Status& s) {
        std::lock_guard<std::mutex> lock(mu);
        if (out.error.empty()) out.error = "rank " + std::to_string(r) + ": " + s.message();
      };
      if (!t.ok()) return fail(t.status());
      t.value()->set_record_timing(timing);
      if (Status s = t.value()->start(); !s) return fail(s);
      for (int i = 0; i < steps; ++i) {
        auto st = t.value()->train_step();
        if (!st.ok()) return fail(st.status());
        std::lock_guard<std::mutex> lock(mu);
        if (out.mem_bytes.size() < static_cast<size_t>(world)) out.mem_bytes.resize(static_cast<size_t>(world));
        out.mem_bytes[static_cast<size_t>(r)] = st->mem_bytes;
        if (out.last.size() < static_cast<size_t>(world)) out.last.resize(static_cast<size_t>(world));
        out.last[static_cast<size_t>(r)] = st.value();
        if (out.buckets.size() < static_cast<size_t>(world)) out.buckets.resize(static_cast<size_t>(world), 0);
        if (out.early_buckets.size() < static_cast<size_t>(world)) out.early_buckets.resize(static_cast<size_t>(world), 0);
        if (out.prefetched.size() < static_cast<size_t>(world)) out.prefetched.resize(static_cast<size_t>(world), -1);
        if (out.acquires.size() < static_cast<size_t>(world)) out.acquires.resize(static_cast<size_t>(world), -1);
        if (const ZeroShards* z = t.value()->zero_shards()) {
          out.prefetched[static_cast<size_t>(r)] = z->prefetched();
          out.acquires[static_cast<size_t>(r)] = z->acquires_per_step();
        }
        if (const GradReducer* g = t.value()->grad_reducer()) {
          out.buckets[static_cast<size_t>(r)] = static_cast<int>(g->buckets().size());
          out.early_buckets[static_cast<size_t>(r)] = g->started_early();
        }
        if (r == 0) {
          out.losses.push_back(st->loss);
          out.norms.push_back(st->grad_norm);
          out.aux.push_back(st->aux_loss);
          out.loads.push_back(st->moe_load);
          out.loss_scales.push_back(st->loss_scale);
          out.skipped.push_back(st->skipped);
        } else if (st->loss != (r < world ? st->loss : 0)) {
          out.error = "loss differs between ranks";
        }
      }
      if (save) {
        auto p = t.value()->save_checkpoint();
        if (!p.ok()) return fail(p.status());
      }
      (void)t;
    });
  }
  for (auto& th : threads) th.join();
  if (!out.error.empty()) return out;
  // The final weights, from a checkpoint written by the loop itself when asked, else nothing.
  return out;
}

std::vector<std::string> with_zero(std::vector<std::string> o, int zero) {
  o.push_back("parallel.zero=" + std::to_string(zero));
  return o;
}

// A tiny Llama with a mixture of experts: 4 layers, the first dense, then 4 experts of width 16,
// top 2, and one shared expert of width 16 (moe_layer.h); seed 3 (moeTrainsAsOneRank says why).
std::vector<std::string> moe_model() {
  return {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "model.tied_embeddings=false", "model.moe.experts=4",
          "model.moe.top_k=2", "model.moe.ffn_hidden=16", "model.moe.dense_layers=1", "model.moe.shared_experts=1", "train.seed=3"};
}

bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

// The model tensors of two checkpoints' model.safetensors, per tensor within 1e-3 relative L2.
// AdamW divides each update by sqrt(v): where gradients are near zero (biases starting at 0) it
// turns fp32 summation-order noise of ~1e-7 into update noise of ~1e-4 of the tensor; 1e-3 still
// fails for a 1% change of lr or another seed. Empty when they match, else what differs.
std::string checkpoints_differ(const std::string& a, const std::string& b) {
  auto wa = read_safetensors(a), wb = read_safetensors(b);
  if (!wa.ok() || !wb.ok()) return "unreadable: " + a + ", " + b;
  if (wb->tensors.size() != wa->tensors.size()) return "tensor counts differ";
  for (const auto& ta : wa->tensors) {
    const NamedTensor* tb = wb->find(ta.name);
    if (!tb || tb->shape != ta.shape) return ta.name + ": missing or another shape";
    double num = 0, den = 0;
    for (size_t i = 0; i < ta.data.size(); ++i) {
      num += (double(ta.data[i]) - tb->data[i]) * (double(ta.data[i]) - tb->data[i]);
      den += double(ta.data[i]) * ta.data[i];
    }
    if (std::sqrt(num) > 1e-3 * std::sqrt(den)) return ta.name + ": relative L2 " + std::to_string(std::sqrt(num / den));
  }
  return "";
}

}  // namespace

class TestTrainer : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { cpu::set_num_threads(1); }

  void lossFalls() {
    const RunOut r = train({"cluster.nodes=1", "cluster.gpus_per_node=1", "cluster.device=cpu", "train.steps=30"}, 30);
    QVERIFY2(r.error.empty(), r.error.c_str());
    QCOMPARE(r.losses.size(), size_t(30));
    QVERIFY2(std::abs(r.losses.front() - std::log(64.0)) < 0.2, qPrintable(QString::number(r.losses.front())));
    QVERIFY2(r.losses.back() < r.losses.front() - 0.5, qPrintable(QString("%1 -> %2").arg(r.losses.front()).arg(r.losses.back())));
  }

  // Mixture of experts (model.moe, moe_layer.h): a tiny Llama with 4 experts of width 16, top 2,
  // after one dense layer, with a shared expert. Its loss falls, the load-balancing loss is in it
  // and near its balanced value aux_loss x top_k... (coef x E x sum f P with f, P near 1/E: coef),
  // and every assignment is counted in the load.
  void moeLossFalls() {
    std::vector<std::string> o = moe_model();
    o.insert(o.end(), {"cluster.gpus_per_node=1", "cluster.device=cpu", "train.steps=30"});
    const RunOut r = train(o, 30);
    QVERIFY2(r.error.empty(), r.error.c_str());
    QCOMPARE(r.losses.size(), size_t(30));
    QVERIFY2(r.losses.back() < r.losses.front() - 0.5, qPrintable(QString("%1 -> %2").arg(r.losses.front()).arg(r.losses.back())));
    // 3 MoE layers, each aux near its balanced value 0.01 (f and P near 1/E give coef).
    QVERIFY2(r.aux.front() > 0.02 && r.aux.front() < 0.05, qPrintable(QString::number(r.aux.front())));
    const StepStats& last = r.last[0];
    QCOMPARE(last.moe_layers, (std::vector<int>{1, 2, 3}));
    QCOMPARE(last.moe_load.size(), size_t(3));
    for (const auto& load : last.moe_load) {
      int64_t total = 0;
      for (int64_t n : load) total += n;
      QCOMPARE(total, int64_t(8 * 16 * 2));  // global batch x seq_len tokens, top 2 each
    }
    QCOMPARE(last.moe_dropped, int64_t(0));
  }

  // Dropless, the loss of each of 20 steps within 1e-5 (relative) of one rank's and the gradient
  // norm within 1e-5, with dp, pp (1F1B, GPipe, interleaved), cp (ring and all-to-all: the aux
  // loss's sums over the cp group), ZeRO 1-3 (the experts' buffer apart), micro-batches and full
  // recompute (the routing repeated, its statistics counted once).
  void moeTrainsAsOneRank_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("memory");
    auto layout = [](int dp, int pp, int cp, QStringList extra = {}, int tp = 1, int ep = 1) {
      QStringList o = {QString("cluster.gpus_per_node=%1").arg(dp * pp * cp * tp), "cluster.device=cpu", QString("parallel.dp=%1").arg(dp),
                       QString("parallel.pp=%1").arg(pp), QString("parallel.cp=%1").arg(cp), QString("parallel.tp=%1").arg(tp),
                       QString("parallel.ep=%1").arg(ep)};
      return o + extra;
    };
    QTest::newRow("dp=2") << layout(2, 1, 1) << int(Memory::kHost);
    QTest::newRow("dp=4 micro_batch=2") << layout(4, 1, 1, {"train.micro_batch=2"}) << int(Memory::kHost);
    QTest::newRow("pp=2 1f1b") << layout(1, 2, 1) << int(Memory::kHost);
    QTest::newRow("dp=2 pp=2 gpipe") << layout(2, 2, 1, {"pipeline.schedule=gpipe"}) << int(Memory::kHost);
    QTest::newRow("pp=2 interleaved") << layout(1, 2, 1, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}) << int(Memory::kHost);
    QTest::newRow("cp=2 ring") << layout(1, 1, 2) << int(Memory::kHost);
    QTest::newRow("cp=2 all_to_all dp=2") << layout(2, 1, 2, {"parallel.cp_comm=all_to_all"}) << int(Memory::kHost);
    QTest::newRow("dp=2 zero 1") << layout(2, 1, 1, {"parallel.zero=1"}) << int(Memory::kHost);
    QTest::newRow("dp=2 pp=2 zero 2") << layout(2, 2, 1, {"parallel.zero=2"}) << int(Memory::kHost);
    QTest::newRow("dp=2 cp=2 zero 3") << layout(2, 1, 2, {"parallel.zero=3"}) << int(Memory::kHost);
    QTest::newRow("dp=2 full recompute") << layout(2, 1, 1, {"train.recompute=full"}) << int(Memory::kHost);
    // Tensor parallelism: the router on every token of every tp rank, each tp rank's share of the
    // tokens into the experts; expert parallelism: the tokens to the ranks of their experts
    // (all_to_all_v), over dp, over the tp pair (Megatron-Core's folding) and both.
    QTest::newRow("tp=2") << layout(1, 1, 1, {}, 2) << int(Memory::kHost);
    QTest::newRow("tp=2 dp=2 pp=2") << layout(2, 2, 1, {}, 2) << int(Memory::kHost);
    QTest::newRow("ep=2 dp=2") << layout(2, 1, 1, {}, 1, 2) << int(Memory::kHost);
    QTest::newRow("ep=4 dp=4") << layout(4, 1, 1, {}, 1, 4) << int(Memory::kHost);
    QTest::newRow("ep=2 over the tp pair") << layout(1, 1, 1, {}, 2, 2) << int(Memory::kHost);
    QTest::newRow("ep=4 tp=2 dp=2") << layout(2, 1, 1, {}, 2, 4) << int(Memory::kHost);
    QTest::newRow("ep=2 dp=2 pp=2 interleaved") << layout(2, 2, 1, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}, 1, 2) << int(Memory::kHost);
    QTest::newRow("ep=2 cp=2 ring") << layout(1, 1, 2, {}, 1, 2) << int(Memory::kHost);
    QTest::newRow("ep=4 dp=2 cp=2 all_to_all") << layout(2, 1, 2, {"parallel.cp_comm=all_to_all"}, 1, 4) << int(Memory::kHost);
    QTest::newRow("ep=2 dp=2 zero 1") << layout(2, 1, 1, {"parallel.zero=1"}, 1, 2) << int(Memory::kHost);
    QTest::newRow("ep=2 tp=2 dp=2 zero 2") << layout(2, 1, 1, {"parallel.zero=2"}, 2, 2) << int(Memory::kHost);
    QTest::newRow("ep=4 dp=4 zero 3 recompute") << layout(4, 1, 1, {"parallel.zero=3", "train.recompute=full"}, 1, 4) << int(Memory::kHost);
    QTest::newRow("ep=4 tp=2 dp=2 pp=2 zero 3") << layout(2, 2, 1, {"parallel.zero=3"}, 2, 4) << int(Memory::kHost);
    QTest::newRow("ep=2 micro_batch=2 gpipe pp=2") << layout(2, 2, 1, {"train.micro_batch=2", "pipeline.schedule=gpipe"}, 1, 2) << int(Memory::kHost);
    // On the off-host device: groups of host memory (staged, as Gloo on a GPU) and of the device's
    // (as NCCL, matched by order).
    QTest::newRow("off-host staged ep=2 tp=2 dp=2") << layout(2, 1, 1, {}, 2, 2) << int(Memory::kStaged);
    QTest::newRow("off-host direct ep=4 dp=2 cp=2 zero 3") << layout(2, 1, 2, {"parallel.zero=3"}, 1, 4) << int(Memory::kDirect);
    QTest::newRow("off-host direct ep=2 tp=2 pp=2 recompute") << layout(1, 2, 1, {"train.recompute=full"}, 2, 2) << int(Memory::kDirect);
  }
  void moeTrainsAsOneRank() {
    QFETCH(QStringList, overrides);
    QFETCH(int, memory);
    const int steps = 20;
    std::vector<std::string> one = moe_model(), o = moe_model();
    one.insert(one.end(), {"cluster.gpus_per_node=1", "cluster.device=cpu", "train.steps=20"});
    o.push_back("train.steps=20");
    for (const auto& s : overrides) {
      o.push_back(s.toStdString());
      // The aux loss is each micro-batch's: the single rank runs the same micro-batches.
      if (s.startsWith("train.micro_batch")) one.push_back(s.toStdString());
    }
    static std::map<std::vector<std::string>, RunOut> refs;  // one single-rank run per model and micro-batch
    if (!refs.count(one)) refs[one] = train(one, steps);
    const RunOut& ref = refs[one];
    const RunOut r = train(o, steps, false, static_cast<Memory>(memory));
    QVERIFY2(ref.error.empty() && r.error.empty(), (ref.error + r.error).c_str());
    QCOMPARE(r.losses.size(), size_t(steps));
    QVERIFY2(ref.losses.back() < ref.losses.front() - 0.5, "the model learns");
    for (size_t i = 0; i < r.losses.size(); ++i) {
      // Routing is a decision: a token whose k-th and (k+1)-th experts lie within float noise
      // (~1e-7) of each other goes to the other expert in another layout, which moves that step's
      // loss by ~1e-5 (seed 2 has such a token at step 14 in most layouts). The seed's weights and
      // data keep every token clear of that for 20 steps; the loads check it: each step's
      // routing, every expert's count of every layer, is one rank's.
      QVERIFY2(r.loads[i] == ref.loads[i], qPrintable(QString("step %1: the routing differs from one rank's").arg(i + 1)));
      QVERIFY2(close(r.losses[i], ref.losses[i], 1e-5), qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(r.losses[i], 0, 'g', 10).arg(ref.losses[i], 0, 'g', 10)));
      QVERIFY2(close(r.aux[i], ref.aux[i], 1e-5), qPrintable(QString("step %1 aux: %2 vs %3").arg(i + 1).arg(r.aux[i], 0, 'g', 10).arg(ref.aux[i], 0, 'g', 10)));
      // The norm within 1e-4, as contextParallelEquivalence's: with cp it drifts to ~1.2e-5 by
      // step 12 at another seed (the aux loss's sums cross the cp ranks in another order).
      QVERIFY2(close(r.norms[i], ref.norms[i], 1e-4), qPrintable(QString("step %1 norm: %2 vs %3").arg(i + 1).arg(r.norms[i], 0, 'g', 10).arg(ref.norms[i], 0, 'g', 10)));
    }
  }

  // Checkpoints of a mixture of experts in its Hugging Face class's layout: Mixtral's form (every
  // layer sparse, experts of model.ffn_hidden, no shared ones) under Mixtral's names with a
  // MixtralForCausalLM config.json; the test's model (a dense layer, a shared expert) under
  // Qwen3-MoE's with Qwen3MoeForCausalLM. Saved by ep 2 at step 3, resumed by ep 1 and ep 4 (and a
  // dp 2 x tp 2 layout), each with the losses of a run that never stopped.
  void moeCheckpointsResumeAcrossEp_data() {
    QTest::addColumn<bool>("mixtral");
    QTest::newRow("Mixtral's form") << true;
    QTest::newRow("dense layer and shared expert: Qwen3-MoE's names") << false;
  }
  void moeCheckpointsResumeAcrossEp() {
    QFETCH(bool, mixtral);
    QTemporaryDir dir;
    std::vector<std::string> model = mixtral ? std::vector<std::string>{"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=16",
                                                                        "model.tied_embeddings=false", "model.moe.experts=4",
                                                                        "model.moe.top_k=2", "train.seed=3"}
                                             : moe_model();
    model.push_back("train.steps=6");
    auto with = [&](std::vector<std::string> o) {
      o.insert(o.begin(), model.begin(), model.end());
      return o;
    };
    const std::string saved = dir.filePath("ep2").toStdString();
    const RunOut straight = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu"}), 6);
    const RunOut first = train(with({"cluster.gpus_per_node=2", "cluster.device=cpu", "parallel.dp=2", "parallel.ep=2",
                                     "train.checkpoint_dir=" + saved}), 3, true);
    QVERIFY2(straight.error.empty() && first.error.empty(), (straight.error + first.error).c_str());
    // The files: the class's names and config.json.
    auto weights = read_safetensors(saved + "/step-3/model.safetensors");
    QVERIFY(weights.ok());
    const bool block_sparse = weights->find("model.layers.1.block_sparse_moe.experts.3.w2.weight") != nullptr;
    const bool qwen_names = weights->find("model.layers.1.mlp.experts.3.down_proj.weight") != nullptr;
    QCOMPARE(block_sparse, mixtral);
    QCOMPARE(qwen_names, !mixtral);
    QFile cfg(QString::fromStdString(saved + "/step-3/config.json"));
    QVERIFY(cfg.open(QIODevice::ReadOnly));
    const auto j = QJsonDocument::fromJson(cfg.readAll()).object();
    QCOMPARE(j["architectures"].toArray().at(0).toString(), mixtral ? QString("MixtralForCausalLM") : QString("Qwen3MoeForCausalLM"));
    QCOMPARE(j[mixtral ? "num_local_experts" : "num_experts"].toInt(), 4);
    // eval reads the mixture's checkpoint, experts included: the ep 2 run's step-3 model gives one
    // rank's step-3 model's loss on the training tokens.
    {
      const std::string one_dir = dir.filePath("one").toStdString();
      const RunOut one = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu", "train.checkpoint_dir=" + one_dir}), 3, true);
      QVERIFY2(one.error.empty(), one.error.c_str());
      QVERIFY(write_data(dir.filePath("tokens.bin")));
      std::vector<std::string> o = model;
      o.push_back("cluster.device=cpu");
      auto cfg = config::parse_config(kBase, "test.yaml", o);
      QVERIFY2(cfg.ok(), cfg.status().message().c_str());
      auto ea = evaluate_checkpoint(cfg->model, one_dir + "/step-3", dir.filePath("tokens.bin").toStdString(), 8, nullptr,
                                    config::DataDtype::kUint16);
      auto eb = evaluate_checkpoint(cfg->model, saved + "/step-3", dir.filePath("tokens.bin").toStdString(), 8, nullptr,
                                    config::DataDtype::kUint16);
      QVERIFY2(ea.ok() && eb.ok(), (ea.status().message() + eb.status().message()).c_str());
      QVERIFY2(close(eb->loss, ea->loss, 1e-5), qPrintable(QString("eval: %1 vs %2").arg(eb->loss, 0, 'g', 10).arg(ea->loss, 0, 'g', 10)));
    }
    auto resumed = [&](std::vector<std::string> o) {
      o.push_back("train.resume=" + saved + "/step-3");
      return train(with(o), 3);
    };
    const RunOut to_ep1 = resumed({"cluster.gpus_per_node=1", "cluster.device=cpu"});
    const RunOut to_ep4 = resumed({"cluster.gpus_per_node=4", "cluster.device=cpu", "parallel.dp=4", "parallel.ep=4"});
    const RunOut to_tp = resumed({"cluster.gpus_per_node=4", "cluster.device=cpu", "parallel.dp=2", "parallel.tp=2", "parallel.ep=2"});
    // ZeRO over expert-dp: resumed into the experts' moment shards (ep 1 of dp 2: expert-dp 2), and
    // saved from them (ep 2 of dp 4) then resumed by one rank.
    const RunOut to_zero = resumed({"cluster.gpus_per_node=2", "cluster.device=cpu", "parallel.dp=2", "parallel.zero=1"});
    const std::string sharded = dir.filePath("zero").toStdString();
    const RunOut first_zero = train(with({"cluster.gpus_per_node=4", "cluster.device=cpu", "parallel.dp=4", "parallel.ep=2", "parallel.zero=1",
                                          "train.checkpoint_dir=" + sharded}), 3, true);
    QVERIFY2(first_zero.error.empty(), first_zero.error.c_str());
    const RunOut from_zero = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu", "train.resume=" + sharded + "/step-3"}), 3);
    QVERIFY2(to_ep1.error.empty() && to_ep4.error.empty() && to_tp.error.empty() && to_zero.error.empty() && from_zero.error.empty(),
             (to_ep1.error + to_ep4.error + to_tp.error + to_zero.error + from_zero.error).c_str());
    for (size_t i = 0; i < 3; ++i) {
      QVERIFY2(close(first.losses[i], straight.losses[i], 1e-5), qPrintable(QString("ep 2, step %1").arg(i + 1)));
      QVERIFY2(close(first_zero.losses[i], straight.losses[i], 1e-5), qPrintable(QString("ep 2 zero 1, step %1").arg(i + 1)));
      for (const RunOut* r : {&to_ep1, &to_ep4, &to_tp, &to_zero, &from_zero}) {
        QVERIFY2(close(r->losses[i], straight.losses[i + 3], 1e-5),
                 qPrintable(QString("resumed, step %1: %2 vs %3").arg(i + 4).arg(r->losses[i], 0, 'g', 10).arg(straight.losses[i + 3], 0, 'g', 10)));
      }
    }
  }

  // The issue's layouts and schedules: loss at every one of 5 steps within 1e-5 (relative) of
  // the single rank's, and the gradient norm too.
  // The cost model's memory for a CPU run against what the engine holds: weights, gradients,
  // AdamW state, the activations at their peak and the schedule's or ZeRO's buffers, per rank,
  // within 10% (the issue's bar; 5% for bf16 as a GPU trains it).
  void estimateMatchesMeasuredMemory_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("dp=2 pp=2 1f1b") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2"};
    QTest::newRow("tp=2 pp=2 gpipe") << QStringList{"cluster.gpus_per_node=4", "parallel.tp=2", "parallel.pp=2", "pipeline.schedule=gpipe"};
    QTest::newRow("dp=4 zero 1") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.zero=1"};
    QTest::newRow("pp=2 full recompute") << QStringList{"cluster.gpus_per_node=2", "parallel.pp=2", "train.recompute=full"};
    QTest::newRow("dp=4 zero 2") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.zero=2"};
    QTest::newRow("dp=4 zero 2 small buckets") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.zero=2", "parallel.grad_bucket_mb=0.1"};
    QTest::newRow("dp=2 tp=2 zero 2") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.tp=2", "parallel.zero=2"};
    QTest::newRow("dp=4 zero 3") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.zero=3"};
    QTest::newRow("dp=2 pp=2 zero 3") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2", "parallel.zero=3"};
    QTest::newRow("dp=4 zero 3 no overlap") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.zero=3", "parallel.overlap_grad_reduce=false"};
    QTest::newRow("dp=2 pp=2 zero 2 no overlap small buckets") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2", "parallel.zero=2",
                                                                              "parallel.overlap_grad_reduce=false", "parallel.grad_bucket_mb=0.1"};
    QTest::newRow("llama dp=2 pp=2 zero 3 recompute") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2", "parallel.zero=3", "model.arch=llama",
                                                                     "model.kv_heads=2", "model.tied_embeddings=false", "train.recompute=full"};
    // A mixture of experts: every expert on each rank (ep 1), and with ZeRO their AdamW state
    // sharded over expert-dp (4 here) as the plan counts it. (With ep 2 the engine holds about
    // 2 MB a rank more than the plan predicts, 13%: a gap not yet accounted for.)
    const QStringList moe = {"model.arch=llama", "model.kv_heads=2", "model.tied_embeddings=false", "model.moe.experts=4", "model.moe.top_k=2"};
    QTest::newRow("moe dp=4") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4"} + moe;
    QTest::newRow("moe dp=4 zero 1") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.zero=1"} + moe;
    // bf16 as a GPU trains it (the CPU kernels behind an off-host device; the cpu device given a
    // bf16 peak so that the plan takes the precision): 16-bit activations beside the fp32
    // residual stream, which the plan counts so (train.fp32_residual).
    const QStringList bf16 = {"cluster.device={base: cpu, bf16_tflops: 1}", "train.precision=bf16", "off-host"};
    QTest::newRow("bf16 off-host dp=2 pp=2") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2"} + bf16;
    QTest::newRow("bf16 off-host llama tp=2") << QStringList{"cluster.gpus_per_node=2", "parallel.tp=2", "model.arch=llama", "model.kv_heads=2"} + bf16;
  }
  void estimateMatchesMeasuredMemory() {
    QFETCH(QStringList, overrides);
    std::vector<std::string> o = {"cluster.device=cpu", "model.hidden=64", "model.seq_len=64", "train.micro_batch=2", "train.global_batch=16"};
    const bool off_host = overrides.removeAll("off-host") > 0;
    // The bf16 rows within 5%, the GPU benchmarks' bar: counting the residual stream in 16 bits
    // would put them at -5.6% and -7.1%.
    const double tolerance = off_host ? 0.05 : 0.10;
    for (const auto& x : overrides) o.push_back(x.toStdString());
    const RunOut r = train(o, 2, false, off_host ? Memory::kDirect : Memory::kHost);  // the second step: zero 3 prefetches from then on
    QVERIFY2(r.error.empty(), r.error.c_str());
    auto cfg = config::parse_config(kBase, "test.yaml", o);
    QVERIFY(cfg.ok());
    auto p = plan::make_plan(cfg.value());
    QVERIFY(p.ok());
    for (int rank = 0; rank < p->topology.world_size(); ++rank) {
      const auto& m = p->estimate.memory[static_cast<size_t>(p->topology.coord(rank).pp)];
      const double predicted = m.total();  // on the cpu device the workspace is the engine's buffers
      const double measured = static_cast<double>(r.mem_bytes[static_cast<size_t>(rank)]);
      qInfo("rank %d: predicted %.0f, measured %.0f bytes (%+.1f%%)", rank, predicted, measured, (predicted / measured - 1) * 100);
      QVERIFY2(std::abs(predicted / measured - 1) <= tolerance, qPrintable(QString("rank %1").arg(rank)));
    }
  }

  void parallelEquivalence_data() {
    QTest::addColumn<QStringList>("overrides");
    auto layout = [](int dp, int tp, int pp, QStringList extra = {}) {
      QStringList o = {QString("cluster.gpus_per_node=%1").arg(dp * tp * pp), "cluster.device=cpu", QString("parallel.dp=%1").arg(dp),
                       QString("parallel.tp=%1").arg(tp), QString("parallel.pp=%1").arg(pp)};
      return o + extra;
    };
    QTest::newRow("dp=2") << layout(2, 1, 1);
    QTest::newRow("tp=2") << layout(1, 2, 1);
    QTest::newRow("pp=2 1f1b") << layout(1, 1, 2);
    QTest::newRow("dp=2 tp=2 pp=2") << layout(2, 2, 2);
    QTest::newRow("dp=8") << layout(8, 1, 1);
    QTest::newRow("pp=2 gpipe") << layout(1, 1, 2, {"pipeline.schedule=gpipe"});
    QTest::newRow("pp=2 interleaved v=2") << layout(1, 1, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    QTest::newRow("dp=2 tp=2 pp=2 interleaved") << layout(2, 2, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    QTest::newRow("pp=4 balanced split") << layout(1, 1, 4, {"pipeline.partition=[0,1,2,3]"});
    QTest::newRow("micro_batch=2") << layout(2, 1, 2, {"train.micro_batch=2"});
    QTest::newRow("dp=4 zero 1") << layout(4, 1, 1, {"parallel.zero=1"});
    QTest::newRow("dp=2 tp=2 pp=2 zero 1") << layout(2, 2, 2, {"parallel.zero=1"});
    QTest::newRow("full recompute") << layout(2, 2, 2, {"train.recompute=full"});
    // Llama (model.h): RMSNorm, SwiGLU, rotary positions, 4 query heads on 2 key/value heads
    // (tp 2 holds one each), untied head; and with Qwen2's q/k/v biases and a tied head.
    const QStringList llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "model.tied_embeddings=false",
                               "model.rope_theta=500000", "model.norm_eps=1e-6"};
    QTest::newRow("llama dp=2") << layout(2, 1, 1, llama);
    QTest::newRow("llama tp=2") << layout(1, 2, 1, llama);
    QTest::newRow("llama pp=2 1f1b") << layout(1, 1, 2, llama);
    QTest::newRow("llama dp=2 tp=2 pp=2") << layout(2, 2, 2, llama);
    QTest::newRow("llama pp=2 gpipe") << layout(1, 1, 2, llama + QStringList{"pipeline.schedule=gpipe"});
    QTest::newRow("llama dp=2 tp=2 pp=2 interleaved") << layout(2, 2, 2, llama + QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    QTest::newRow("llama dp=2 tp=2 pp=2 zero 1") << layout(2, 2, 2, llama + QStringList{"parallel.zero=1"});
    QTest::newRow("llama full recompute") << layout(2, 2, 2, llama + QStringList{"train.recompute=full"});
    QTest::newRow("llama micro_batch=2") << layout(2, 1, 2, llama + QStringList{"train.micro_batch=2"});
    QTest::newRow("llama one kv head, tp=1") << layout(2, 1, 2, QStringList{"model.arch=llama", "model.kv_heads=1", "model.ffn_hidden=48"});
    QTest::newRow("qwen2 biases, tied, tp=2 pp=2") << layout(1, 2, 2, QStringList{"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48",
                                                                                  "model.qkv_bias=true"});
  }
  void parallelEquivalence() {
    QFETCH(QStringList, overrides);
    // The single rank trains the same model: the model.* overrides of the row.
    std::vector<std::string> one = {"cluster.gpus_per_node=1", "cluster.device=cpu"};
    for (const auto& s : overrides) {
      if (s.startsWith("model.")) one.push_back(s.toStdString());
    }
    const RunOut ref = train(one, 5);
    QVERIFY2(ref.error.empty(), ref.error.c_str());
    std::vector<std::string> o;
    for (const auto& s : overrides) o.push_back(s.toStdString());
    const RunOut r = train(o, 5);
    QVERIFY2(r.error.empty(), r.error.c_str());
    QCOMPARE(r.losses.size(), ref.losses.size());
    // The final weights, written by the loop's own checkpoint (gathered from every rank), agree
    // tensor by tensor with the single rank's.
    QTemporaryDir dir;
    auto one_dir = one;
    one_dir.push_back("train.checkpoint_dir=" + dir.filePath("ref").toStdString());
    const RunOut a = train(one_dir, 5, true);
    auto with_dir = o;
    with_dir.push_back("train.checkpoint_dir=" + dir.filePath("run").toStdString());
    const RunOut b = train(with_dir, 5, true);
    QVERIFY2(a.error.empty() && b.error.empty(), (a.error + b.error).c_str());
    const std::string differ = checkpoints_differ(dir.filePath("ref/step-5/model.safetensors").toStdString(),
                                                  dir.filePath("run/step-5/model.safetensors").toStdString());
    QVERIFY2(differ.empty(), differ.c_str());
    for (size_t i = 0; i < r.losses.size(); ++i) {
      // fp32 sums in another order (split GEMMs, all-reduces) move the loss by ~1e-7 relative.
      QVERIFY2(close(r.losses[i], ref.losses[i], 1e-5), qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(r.losses[i], 0, 'g', 10).arg(ref.losses[i], 0, 'g', 10)));
      QVERIFY2(close(r.norms[i], ref.norms[i], 1e-4), qPrintable(QString("step %1 norm: %2 vs %3").arg(i + 1).arg(r.norms[i]).arg(ref.norms[i])));
    }
  }

  // parallel.zero 2 (gradients sharded, zero_shards.h) and 3 (parameters too) over the gradient
  // group: 20 steps of the same losses and gradient norms as one rank at zero 0, within 1e-5
  // (fp32 sums in another order; a dropped or doubled gradient piece moves the norm by far more),
  // in every layout and schedule, with recompute, for GPT-2 (tied) and Llama (untied), and on the
  // off-host device with Gloo-like (staged) and NCCL-like (direct) groups.
  void zeroShardsTrainAsOneRank_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("memory");
    const QStringList llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "model.tied_embeddings=false"};
    for (int zero : {2, 3}) {
      auto layout = [zero](int dp, int tp, int pp, QStringList extra = {}) {
        QStringList o = {QString("cluster.gpus_per_node=%1").arg(dp * tp * pp), "cluster.device=cpu", QString("parallel.dp=%1").arg(dp),
                         QString("parallel.tp=%1").arg(tp), QString("parallel.pp=%1").arg(pp), QString("parallel.zero=%1").arg(zero)};
        return o + extra;
      };
      auto row = [zero](const char* name) { return qPrintable(QString("zero %1 %2").arg(zero).arg(name)); };
      const int host = static_cast<int>(Memory::kHost);
      QTest::newRow(row("dp=2")) << layout(2, 1, 1) << host;
      QTest::newRow(row("dp=4 m=2")) << layout(4, 1, 1) << host;
      QTest::newRow(row("dp=2 tp=2")) << layout(2, 2, 1) << host;
      QTest::newRow(row("dp=2 pp=2 1f1b")) << layout(2, 1, 2) << host;
      QTest::newRow(row("dp=2 pp=2 gpipe")) << layout(2, 1, 2, {"pipeline.schedule=gpipe"}) << host;
      QTest::newRow(row("dp=2 pp=2 interleaved v=2")) << layout(2, 1, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}) << host;
      QTest::newRow(row("dp=2 tp=2 pp=2 interleaved")) << layout(2, 2, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}) << host;
      QTest::newRow(row("dp=2 full recompute")) << layout(2, 1, 1, {"train.recompute=full"}) << host;
      QTest::newRow(row("dp=2 tp=2 pp=2 full recompute")) << layout(2, 2, 2, {"train.recompute=full"}) << host;
      QTest::newRow(row("dp=2 small buckets")) << layout(2, 1, 2, {"parallel.grad_bucket_mb=0.01"}) << host;
      QTest::newRow(row("dp=2 pp=2 no overlap")) << layout(2, 1, 2, {"parallel.overlap_grad_reduce=false"}) << host;
      QTest::newRow(row("llama dp=2")) << layout(2, 1, 1, llama) << host;
      QTest::newRow(row("llama dp=2 tp=2 pp=2 1f1b")) << layout(2, 2, 2, llama) << host;
      QTest::newRow(row("llama dp=2 pp=2 interleaved")) << layout(2, 1, 2, llama + QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}) << host;
      QTest::newRow(row("off-host staged dp=2 pp=2")) << layout(2, 1, 2) << static_cast<int>(Memory::kStaged);
      QTest::newRow(row("off-host direct dp=2 tp=2 pp=2")) << layout(2, 2, 2) << static_cast<int>(Memory::kDirect);
      QTest::newRow(row("llama off-host direct dp=2 recompute")) << layout(2, 1, 1, llama + QStringList{"train.recompute=full"}) << static_cast<int>(Memory::kDirect);
    }
  }
  void zeroShardsTrainAsOneRank() {
    QFETCH(QStringList, overrides);
    QFETCH(int, memory);
    const int steps = 20;
    std::vector<std::string> one = {"cluster.gpus_per_node=1", "cluster.device=cpu", "train.steps=20"};
    std::vector<std::string> o = {"train.steps=20"};
    for (const auto& s : overrides) {
      if (s.startsWith("model.")) one.push_back(s.toStdString());
      o.push_back(s.toStdString());
    }
    const RunOut ref = train(one, steps);
    const RunOut r = train(o, steps, false, static_cast<Memory>(memory));
    QVERIFY2(ref.error.empty() && r.error.empty(), (ref.error + r.error).c_str());
    QCOMPARE(r.losses.size(), size_t(steps));
    // Zero 3 gathers every unit but a step's first ahead, in the background, from the second step
    // on, where the group reaches the device's memory; staged groups, and runs without
    // parallel.overlap_grad_reduce, gather at once.
    const bool zero3 = overrides.contains("parallel.zero=3") && !overrides.contains("parallel.overlap_grad_reduce=false");
    for (size_t rank = 0; rank < r.prefetched.size(); ++rank) {
      QVERIFY2(r.acquires[rank] > 0, qPrintable(QString("rank %1 has no shards").arg(rank)));
      const int expect = zero3 && static_cast<Memory>(memory) != Memory::kStaged ? r.acquires[rank] - 1 : 0;
      QVERIFY2(r.prefetched[rank] == expect, qPrintable(QString("rank %1: %2 of %3 acquires prefetched").arg(rank).arg(r.prefetched[rank]).arg(r.acquires[rank])));
    }
    QVERIFY2(ref.losses.back() < ref.losses.front() - 0.5, "the model learns");
    for (size_t i = 0; i < r.losses.size(); ++i) {
      QVERIFY2(close(r.losses[i], ref.losses[i], 1e-5), qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(r.losses[i], 0, 'g', 10).arg(ref.losses[i], 0, 'g', 10)));
      QVERIFY2(close(r.norms[i], ref.norms[i], 1e-5), qPrintable(QString("step %1 norm: %2 vs %3").arg(i + 1).arg(r.norms[i], 0, 'g', 10).arg(ref.norms[i], 0, 'g', 10)));
    }
  }

  // Checkpoints keep one format whatever the ZeRO stage: a zero 3 run over dp 2 x pp 2 saves at
  // step 3, and a single rank at zero 0 resumes it with the losses of a single rank that never
  // stopped; the other way round, a zero 3 run resumes a single rank's checkpoint likewise.
  void zeroCheckpointsResumeInAnyLayout() {
    QTemporaryDir dir;
    const std::vector<std::string> one = {"cluster.gpus_per_node=1", "cluster.device=cpu", "train.steps=6"};
    const std::vector<std::string> z3 = {"cluster.gpus_per_node=4", "cluster.device=cpu", "train.steps=6", "parallel.dp=2", "parallel.pp=2",
                                         "parallel.zero=3"};
    auto with = [](std::vector<std::string> o, const std::string& more) {
      o.push_back(more);
      return o;
    };
    const RunOut straight = train(one, 6);
    const RunOut first = train(with(z3, "train.checkpoint_dir=" + dir.filePath("z3").toStdString()), 3, true);
    const RunOut first_one = train(with(one, "train.checkpoint_dir=" + dir.filePath("one").toStdString()), 3, true);
    QVERIFY2(straight.error.empty() && first.error.empty() && first_one.error.empty(), (straight.error + first.error + first_one.error).c_str());
    const RunOut to_one = train(with(one, "train.resume=" + dir.filePath("z3/step-3").toStdString()), 3);
    const RunOut to_z3 = train(with(z3, "train.resume=" + dir.filePath("one/step-3").toStdString()), 3);
    QVERIFY2(to_one.error.empty() && to_z3.error.empty(), (to_one.error + to_z3.error).c_str());
    QCOMPARE(to_one.losses.size(), size_t(3));
    QCOMPARE(to_z3.losses.size(), size_t(3));
    // The files are the gathered model: tensor by tensor the single rank's (1e-3 relative L2, as in
    // parallelEquivalence), moments included.
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      auto wa = read_safetensors(dir.filePath(QString("one/step-3/") + file).toStdString());
      auto wb = read_safetensors(dir.filePath(QString("z3/step-3/") + file).toStdString());
      QVERIFY2(wa.ok() && wb.ok(), file);
      QCOMPARE(wb->tensors.size(), wa->tensors.size());
      for (const auto& ta : wa->tensors) {
        const NamedTensor* tb = wb->find(ta.name);
        QVERIFY2(tb && tb->shape == ta.shape, ta.name.c_str());
        double num = 0, den = 0;
        for (size_t i = 0; i < ta.data.size(); ++i) {
          num += (double(ta.data[i]) - tb->data[i]) * (double(ta.data[i]) - tb->data[i]);
          den += double(ta.data[i]) * ta.data[i];
        }
        QVERIFY2(std::sqrt(num) <= 1e-3 * std::sqrt(den), qPrintable(QString("%1: %2").arg(ta.name.c_str()).arg(std::sqrt(num / den))));
      }
    }
    // eval reads the zero 3 checkpoint as the single rank's: the same loss on the training tokens.
    {
      QVERIFY(write_data(dir.filePath("tokens.bin")));
      auto cfg = config::parse_config(kBase, "test.yaml", {});
      QVERIFY(cfg.ok());
      auto ea = evaluate_checkpoint(cfg->model, dir.filePath("one/step-3").toStdString(), dir.filePath("tokens.bin").toStdString(), 8, nullptr,
                                    config::DataDtype::kUint16);
      auto eb = evaluate_checkpoint(cfg->model, dir.filePath("z3/step-3").toStdString(), dir.filePath("tokens.bin").toStdString(), 8, nullptr,
                                    config::DataDtype::kUint16);
      QVERIFY2(ea.ok() && eb.ok(), (ea.status().message() + eb.status().message()).c_str());
      QVERIFY2(eb->loss < std::log(64.0) - 0.1, qPrintable(QString::number(eb->loss)));  // trained, not the initial weights
      QVERIFY2(close(eb->loss, ea->loss, 1e-5), qPrintable(QString("eval: %1 vs %2").arg(eb->loss, 0, 'g', 10).arg(ea->loss, 0, 'g', 10)));
    }
    for (size_t i = 0; i < 3; ++i) {
      QVERIFY2(close(first.losses[i], straight.losses[i], 1e-5), qPrintable(QString("step %1").arg(i + 1)));
      QVERIFY2(close(to_one.losses[i], straight.losses[i + 3], 1e-5), qPrintable(QString("zero 3 -> one rank, step %1: %2 vs %3").arg(i + 4).arg(to_one.losses[i], 0, 'g', 10).arg(straight.losses[i + 3], 0, 'g', 10)));
      QVERIFY2(close(to_z3.losses[i], straight.losses[i + 3], 1e-5), qPrintable(QString("one rank -> zero 3, step %1: %2 vs %3").arg(i + 4).arg(to_z3.losses[i], 0, 'g', 10).arg(straight.losses[i + 3], 0, 'g', 10)));
      QVERIFY2(close(to_one.norms[i], straight.norms[i + 3], 1e-5), qPrintable(QString("zero 3 -> one rank, norm of step %1").arg(i + 4)));
    }
  }

  // bf16 activations on the off-host device (the CUDA path's): zero 3 rounds each gathered layer
  // to a bf16 copy of its own, the same values as zero 2's copy of the whole stage, and both
  // reduce the gradients alike (zero 2 with buckets of one layer, so both shard each layer alone),
  // so zero 3's 10 losses and norms are zero 2's exactly; their losses stay within 1e-3 of zero
  // 0's in the same layout, bf16ActivationsTrackFp32's bar between bf16 layouts (zero 0 adds the
  // micro-batches before the ranks: fp32 order noise, which bf16 rounding of the weights
  // amplifies to ~2e-5 of the loss and ~1e-3 of the norm by step 7; the fp32 runs of
  // zeroShardsTrainAsOneRank compare both at 1e-5).
  void zeroShardsWithBf16Weights() {
    const std::vector<std::string> o = {"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "train.precision=bf16",
                                        "train.steps=10"};
    const RunOut z0 = train(o, 10, false, Memory::kDirect);
    auto layer_buckets = with_zero(o, 2);
    layer_buckets.push_back("parallel.grad_bucket_mb=0.001");  // 262 floats: every layer (~12.7k) alone
    const RunOut z2 = train(layer_buckets, 10, false, Memory::kDirect);
    const RunOut z3 = train(with_zero(o, 3), 10, false, Memory::kDirect);
    const RunOut f32 = train(with_zero({"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "train.steps=10"}, 3), 10,
                             false, Memory::kDirect);
    QVERIFY2(z0.error.empty() && z2.error.empty() && z3.error.empty() && f32.error.empty(), (z0.error + z2.error + z3.error + f32.error).c_str());
    QVERIFY2(std::abs(z3.losses.back() - f32.losses.back()) > 1e-6, "bf16 took effect");
    QCOMPARE(z3.losses, z2.losses);
    QCOMPARE(z3.norms, z2.norms);
    for (size_t i = 0; i < z0.losses.size(); ++i) {
      QVERIFY2(close(z3.losses[i], z0.losses[i], 1e-3), qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(z3.losses[i], 0, 'g', 10).arg(z0.losses[i], 0, 'g', 10)));
    }
  }

  // What zero 2 and 3 keep: below zero 1's memory on every rank where the gradients (zero 2) and
  // the weights (zero 3) outweigh the buckets and the gathered layers in flight (dp 4, buckets of
  // about a layer), each stage by at least half of what it shards away.
  void zeroShardsHoldLessMemory() {
    std::vector<std::string> o = {"cluster.device=cpu", "cluster.gpus_per_node=4", "parallel.dp=4", "model.hidden=64", "model.layers=8",
                                  "parallel.grad_bucket_mb=0.05"};
    auto at = [&](int zero) { return train(with_zero(o, zero), 2); };  // the second step: zero 3 gathers ahead
    const RunOut z1 = at(1), z2 = at(2), z3 = at(3);
    QVERIFY2(z1.error.empty() && z2.error.empty() && z3.error.empty(), (z1.error + z2.error + z3.error).c_str());
    auto cfg = config::parse_config(kBase, "test.yaml", o);
    QVERIFY(cfg.ok());
    auto plan = plan::make_plan(cfg.value());
    QVERIFY(plan.ok());
    const double params = plan->estimate.memory[0].params;  // the rank's parameters
    for (size_t r = 0; r < z1.mem_bytes.size(); ++r) {
      qInfo("rank %zu: zero 1 %zu, zero 2 %zu, zero 3 %zu bytes (params %.0f)", r, z1.mem_bytes[r], z2.mem_bytes[r], z3.mem_bytes[r], params);
      QVERIFY2(static_cast<double>(z1.mem_bytes[r]) - z2.mem_bytes[r] > 0.5 * 4 * params * 3 / 4, qPrintable(QString("zero 2, rank %1").arg(r)));
      QVERIFY2(static_cast<double>(z2.mem_bytes[r]) - z3.mem_bytes[r] > 0.5 * 4 * params * 3 / 4, qPrintable(QString("zero 3, rank %1").arg(r)));
    }
  }

  // Context parallelism (parallel.cp): each sequence split over cp ranks, two chunks each, with
  // the K/V ring or Ulysses' all-to-all. 20 steps, the loss of every step within 1e-5 (relative)
  // of one rank's and the gradient norm within 1e-4, alone and mixed with dp, tp, pp (1F1B and
  // interleaved), ZeRO 1, micro-batches and full recompute, for GPT-2 (learned positions) and
  // Llama (rotary positions, grouped-query attention); and on the off-host device, with groups of
  // host memory (staged) and of its memory (NCCL-like, matched by order).
  void contextParallelEquivalence_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("memory");
    auto layout = [](int cp, const char* comm, int dp = 1, int tp = 1, int pp = 1, QStringList extra = {}) {
      QStringList o = {QString("cluster.gpus_per_node=%1").arg(dp * tp * pp * cp), "cluster.device=cpu", QString("parallel.dp=%1").arg(dp),
                       QString("parallel.tp=%1").arg(tp), QString("parallel.pp=%1").arg(pp), QString("parallel.cp=%1").arg(cp),
                       QString("parallel.cp_comm=%1").arg(comm)};
      return o + extra;
    };
    const int host = int(Memory::kHost), staged = int(Memory::kStaged), direct = int(Memory::kDirect);
    const QStringList llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "model.tied_embeddings=false",
                               "model.rope_theta=500000", "model.norm_eps=1e-6"};
    const QStringList flash = {"train.attention=flash"};
    for (const char* comm : {"ring", "all_to_all"}) {
      const QString c = comm;
      QTest::addRow("%s cp=2", comm) << layout(2, comm) << host;
      QTest::addRow("%s cp=4", comm) << layout(4, comm) << host;
      QTest::addRow("%s cp=2 flash", comm) << layout(2, comm, 1, 1, 1, flash) << host;
      QTest::addRow("%s cp=2 dp=2", comm) << layout(2, comm, 2) << host;
      QTest::addRow("%s cp=2 tp=2", comm) << layout(2, comm, 1, 2) << host;
      QTest::addRow("%s cp=2 pp=2 1f1b", comm) << layout(2, comm, 1, 1, 2) << host;
      QTest::addRow("%s cp=2 pp=2 interleaved", comm) << layout(2, comm, 1, 1, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"})
                                                       << host;
      QTest::addRow("%s cp=2 dp=2 tp=2 pp=2 zero 1", comm) << layout(2, comm, 2, 2, 2, {"parallel.zero=1"}) << host;
      // ZeRO 2 and 3 shard over dp x cp while the sequence is split.
      QTest::addRow("%s cp=2 dp=2 zero 2", comm) << layout(2, comm, 2, 1, 1, {"parallel.zero=2"}) << host;
      QTest::addRow("%s cp=2 zero 3 pp=2 interleaved", comm)
          << layout(2, comm, 1, 1, 2, {"parallel.zero=3", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}) << host;
      QTest::addRow("%s llama cp=2 dp=2 tp=2 zero 3 recompute", comm)
          << layout(2, comm, 2, 2, 1, llama + QStringList{"model.heads=8", "model.kv_heads=4", "parallel.zero=3", "train.recompute=full"}) << host;
      QTest::addRow("%s direct cp=2 dp=2 zero 3", comm) << layout(2, comm, 2, 1, 1, {"parallel.zero=3"}) << direct;
      QTest::addRow("%s cp=2 full recompute micro_batch=2", comm) << layout(2, comm, 2, 1, 1, {"train.recompute=full", "train.micro_batch=2"})
                                                                   << host;
      QTest::addRow("%s llama gqa cp=2", comm) << layout(2, comm, 1, 1, 1, llama) << host;
      QTest::addRow("%s llama gqa cp=2 tp=2 pp=2", comm) << layout(2, comm, 1, 2, 2, llama + QStringList{"model.heads=8", "model.kv_heads=4"})
                                                          << host;
      QTest::addRow("%s llama gqa cp=2 flash micro_batch=2", comm) << layout(2, comm, 1, 1, 1, llama + flash + QStringList{"train.micro_batch=2"})
                                                                    << host;
      QTest::addRow("%s staged cp=2 pp=2", comm) << layout(2, comm, 1, 1, 2) << staged;
      QTest::addRow("%s direct cp=2 dp=2 pp=2", comm) << layout(2, comm, 2, 1, 2) << direct;
      QTest::addRow("%s direct llama cp=2 tp=2", comm) << layout(2, comm, 1, 2, 1, llama + QStringList{"model.heads=8", "model.kv_heads=4"})
                                                      << direct;
    }
    QTest::addRow("ring cp=4 llama one kv head") << layout(4, "ring", 1, 1, 1, {"model.arch=llama", "model.kv_heads=1", "model.ffn_hidden=48"})
                                                 << host;
    QTest::addRow("ring cp=4 full recompute pp=2") << layout(4, "ring", 1, 1, 2, {"train.recompute=full"}) << host;
    QTest::addRow("all_to_all cp=4 llama") << layout(4, "all_to_all", 1, 1, 1, {"model.arch=llama", "model.kv_heads=4", "model.ffn_hidden=48"})
                                           << host;
  }
  void contextParallelEquivalence() {
    QFETCH(QStringList, overrides);
    QFETCH(int, memory);
    const int steps = 20;
    std::vector<std::string> one = {"cluster.gpus_per_node=1", "cluster.device=cpu", "train.steps=20"};
    std::vector<std::string> o = {"train.steps=20"};
    for (const auto& s : overrides) {
      if (s.startsWith("model.") || s.startsWith("train.attention")) one.push_back(s.toStdString());
      o.push_back(s.toStdString());
    }
    const RunOut ref = train(one, steps);
    QVERIFY2(ref.error.empty(), ref.error.c_str());
    const RunOut r = train(o, steps, false, static_cast<Memory>(memory));
    QVERIFY2(r.error.empty(), r.error.c_str());
    QCOMPARE(r.losses.size(), size_t(steps));
    QVERIFY2(r.losses.back() < r.losses.front() - 0.5, "cp should learn");
    for (size_t i = 0; i < r.losses.size(); ++i) {
      QVERIFY2(close(r.losses[i], ref.losses[i], 1e-5),
               qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(r.losses[i], 0, 'g', 10).arg(ref.losses[i], 0, 'g', 10)));
      QVERIFY2(close(r.norms[i], ref.norms[i], 1e-4), qPrintable(QString("step %1 norm: %2 vs %3").arg(i + 1).arg(r.norms[i]).arg(ref.norms[i])));
    }
    // The cp group's time is recorded, inside the forward and backward.
    for (const StepStats& st : r.last) {
      QVERIFY2(st.timing.cp_ms > 0, "cp_ms not recorded");
      QVERIFY(st.timing.cp_ms <= st.timing.forward_ms + st.timing.backward_ms);
    }
  }

  // A checkpoint written by a cp run (gathered from replica 0's ranks, cp rank 0 of each stage)
  // holds the single rank's weights after 5 steps, tensor by tensor within 1e-3 relative L2 (the
  // bar of parallelEquivalence), for both exchanges.
  void contextParallelCheckpointsHoldOneRanksWeights_data() {
    QTest::addColumn<QString>("comm");
    QTest::newRow("ring") << "ring";
    QTest::newRow("all_to_all") << "all_to_all";
  }
  void contextParallelCheckpointsHoldOneRanksWeights() {
    QFETCH(QString, comm);
    QTemporaryDir dir;
    const std::vector<std::string> llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "model.heads=8", "model.kv_heads=4"};
    auto one = llama;
    for (const std::string& x : {std::string("cluster.gpus_per_node=1"), "train.checkpoint_dir=" + dir.filePath("ref").toStdString()}) one.push_back(x);
    auto cp = llama;
    for (const std::string& x : {std::string("cluster.gpus_per_node=8"), std::string("parallel.cp=2"), "parallel.cp_comm=" + comm.toStdString(),
                                 std::string("parallel.tp=2"), std::string("parallel.pp=2"), "train.checkpoint_dir=" + dir.filePath("run").toStdString()}) {
      cp.push_back(x);
    }
    const RunOut a = train(one, 5, true), b = train(cp, 5, true);
    QVERIFY2(a.error.empty() && b.error.empty(), (a.error + b.error).c_str());
    const std::string differ = checkpoints_differ(dir.filePath("ref/step-5/model.safetensors").toStdString(),
                                                  dir.filePath("run/step-5/model.safetensors").toStdString());
    QVERIFY2(differ.empty(), differ.c_str());
  }

  // bf16 activations on the off-host device (q, k, v, attention's output and the gradients beside
  // them in bf16, the exchanges in fp32): cp 2 over either exchange tracks one bf16 rank within
  // 1e-3 at every one of 20 steps, as other layouts do (bf16ActivationsTrackFp32), and differs
  // from the fp32 run (the rounding took effect).
  void contextParallelWithBf16Activations_data() {
    QTest::addColumn<QString>("comm");
    QTest::newRow("ring") << "ring";
    QTest::newRow("all_to_all") << "all_to_all";
  }
  void contextParallelWithBf16Activations() {
    QFETCH(QString, comm);
    const std::vector<std::string> llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "train.steps=20"};
    auto one = llama, cp = llama;
    one.push_back("cluster.gpus_per_node=1");
    one.push_back("train.precision=bf16");
    for (const std::string& x : {std::string("cluster.gpus_per_node=2"), std::string("parallel.cp=2"), "parallel.cp_comm=" + comm.toStdString(),
                                 std::string("train.precision=bf16")}) {
      cp.push_back(x);
    }
    auto cp32 = cp;
    cp32.back() = "train.precision=fp32";
    const RunOut a = train(one, 20, false, Memory::kStaged), b = train(cp, 20, false, Memory::kStaged), f = train(cp32, 20, false, Memory::kStaged);
    QVERIFY2(a.error.empty() && b.error.empty() && f.error.empty(), (a.error + b.error + f.error).c_str());
    bool differs = false;
    for (size_t i = 0; i < a.losses.size(); ++i) {
      QVERIFY2(close(b.losses[i], a.losses[i], 1e-3),
               qPrintable(QString("step %1: %2 vs one bf16 rank's %3").arg(i + 1).arg(b.losses[i], 0, 'g', 9).arg(a.losses[i], 0, 'g', 9)));
      differs = differs || b.losses[i] != f.losses[i];
    }
    QVERIFY2(differs, "bf16 gave fp32's losses");
  }

  // The positions matter: a cp run whose ranks all took positions from 0 (as if each held a
  // sequence of its own) trains another model. Checked through the sequence's chunk layout of
  // ContextAttention::positions, which both embeddings and the rotary angles use.
  void contextParallelChunkLayout() {
    const std::vector<int32_t> r0 = ContextAttention::positions(16, 2, 0), r1 = ContextAttention::positions(16, 2, 1);
    QCOMPARE(r0, (std::vector<int32_t>{0, 1, 2, 3, 12, 13, 14, 15}));
    QCOMPARE(r1, (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11}));
    const std::vector<int32_t> r3 = ContextAttention::positions(16, 4, 3);
    QCOMPARE(r3, (std::vector<int32_t>{6, 7, 8, 9}));
  }

  // bf16 with the fused attention's tile program (TiledFlashOps) on the off-host device: Ulysses
  // runs it on the whole sequence of each rank's heads, within 1e-3 of one bf16 rank with it; the
  // ring, whose block attention is not the fused kernel, is refused with a line naming what to set.
  void contextParallelWithFusedAttention() {
    const std::vector<std::string> base = {"train.steps=10", "model.heads=2", "train.precision=bf16", "train.attention=flash"};
    TiledFlashOps one_tiles, cp_tiles, ring_tiles;
    auto one_o = base;
    one_o.push_back("cluster.gpus_per_node=1");
    const RunOut one = train(one_o, 10, false, Memory::kStaged, nullptr, true, &one_tiles);
    QVERIFY2(one.error.empty(), one.error.c_str());
    auto cp_o = base;
    for (const char* x : {"cluster.gpus_per_node=2", "parallel.cp=2", "parallel.cp_comm=all_to_all"}) cp_o.push_back(x);
    const RunOut cp = train(cp_o, 10, false, Memory::kStaged, nullptr, true, &cp_tiles);
    QVERIFY2(cp.error.empty(), cp.error.c_str());
    QCOMPARE(cp_tiles.refused.load(), 0);
    QCOMPARE(cp_tiles.forwards.load(), 4 * 8 * 2 * 10);  // 4 layers, 8 micro-batches, 2 cp ranks, 10 steps
    for (size_t i = 0; i < one.losses.size(); ++i) {
      QVERIFY2(close(cp.losses[i], one.losses[i], 1e-3),
               qPrintable(QString("step %1: %2 vs one rank's %3").arg(i + 1).arg(cp.losses[i], 0, 'g', 9).arg(one.losses[i], 0, 'g', 9)));
    }
    auto ring_o = cp_o;
    ring_o.back() = "parallel.cp_comm=ring";
    const RunOut ring = train(ring_o, 1, false, Memory::kStaged, nullptr, true, &ring_tiles);
    QVERIFY2(ring.error.find("parallel.cp_comm=ring") != std::string::npos && ring.error.find("set parallel.cp_comm: all_to_all") != std::string::npos,
             ring.error.c_str());
    // The launcher's check says the same for a CUDA run before any worker starts; a CPU run passes.
    auto cfg = config::parse_config(kBase, "test.yaml", {"cluster.gpus_per_node=2", "parallel.cp=2", "parallel.cp_comm=ring", "train.attention=flash"});
    QVERIFY2(cfg.ok(), cfg.ok() ? "" : cfg.status().message().c_str());
    QVERIFY(Trainer::check(cfg.value(), nullptr).ok());
    config::RunConfig on_gpu = cfg.value();
    on_gpu.backend = config::Backend::kCuda;
    const Status refused = Trainer::check(on_gpu, nullptr);
    QVERIFY2(!refused.ok() && refused.message().find("set parallel.cp_comm: all_to_all") != std::string::npos, refused.message().c_str());
    on_gpu.parallel.cp_comm = config::CpComm::kAllToAll;
    QVERIFY(Trainer::check(on_gpu, nullptr).ok());
  }

  // train.init: a fresh run from a model directory's weights (here a checkpoint's, in Hugging
  // Face's Llama layout) starts where that model is (its first loss is the trained model's, below
  // a seed-initialised run's), with the same losses in every layout, and keeps training.
  void initStartsFromAModelDirectory() {
    const std::vector<std::string> llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=48", "model.tied_embeddings=false"};
    QTemporaryDir dir;
    auto with = [&](std::vector<std::string> o, std::initializer_list<std::string> more) {
      o.insert(o.end(), llama.begin(), llama.end());
      o.insert(o.end(), more.begin(), more.end());
      return o;
    };
    const RunOut trained = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu"}, {"train.checkpoint_dir=" + dir.filePath("a").toStdString()}), 5, true);
    QVERIFY2(trained.error.empty(), trained.error.c_str());
    const std::string init = "train.init=" + dir.filePath("a/step-5").toStdString();
    const RunOut fresh = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu"}, {}), 3);
    const RunOut one = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu"}, {init}), 3);
    const RunOut many = train(with({"cluster.gpus_per_node=8", "cluster.device=cpu", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2"}, {init}), 3);
    QVERIFY2(fresh.error.empty() && one.error.empty() && many.error.empty(), (fresh.error + one.error + many.error).c_str());
    qInfo("first loss: seed-initialised %.4f, from the trained model %.4f (its last step %.4f)", fresh.losses[0], one.losses[0],
          trained.losses.back());
    QVERIFY2(one.losses[0] < fresh.losses[0] - 0.1, "the run starts from the directory's weights");
    for (size_t i = 0; i < one.losses.size(); ++i) QVERIFY2(close(many.losses[i], one.losses[i], 1e-5), qPrintable(QString("step %1").arg(i + 1)));
    // A directory of another model is refused naming the key.
    const RunOut other = train(with({"cluster.gpus_per_node=1", "cluster.device=cpu"}, {init, "model.kv_heads=4"}), 1);
    QVERIFY2(QString::fromStdString(other.error).contains("num_key_value_heads 2, the configured model model.kv_heads 4"), other.error.c_str());
  }

  // parallel.overlap_grad_reduce (grad_reducer.h): DP buckets that start during the last
  // micro-batch's backward give exactly the gradients of one all-reduce after it (the test groups
  // sum element by element in rank order, and reduce at once, so a bucket started before its
  // layers' gradients were final would show), on the host and on both device-memory paths; most
  // buckets start early, and without overlap (or with ZeRO, or dp 1) there is no reducer.
  void overlappedDpBucketsEqualOneReduction_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("min_early");  // buckets every rank starts in the backward, at least
    auto layout = [](int dp, int tp, int pp, QStringList extra = {}) {
      QStringList o = {QString("cluster.gpus_per_node=%1").arg(dp * tp * pp), "cluster.device=cpu", QString("parallel.dp=%1").arg(dp),
                       QString("parallel.tp=%1").arg(tp), QString("parallel.pp=%1").arg(pp), "parallel.grad_bucket_mb=0.01"};
      return o + extra;
    };
    // kBase has 2 layers: buckets of 0.01 MiB (2,621 floats) close at about every second slot.
    QTest::newRow("dp=2") << layout(2, 1, 1) << 4;
    QTest::newRow("dp=4 m=2") << layout(4, 1, 1, {"train.micro_batch=2"}) << 4;
    QTest::newRow("dp=2 pp=2 1f1b m=4") << layout(2, 1, 2, {"train.micro_batch=1"}) << 2;
    QTest::newRow("dp=2 tp=2 pp=2 interleaved") << layout(2, 2, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}) << 1;
    QTest::newRow("dp=2 full recompute") << layout(2, 1, 1, {"train.recompute=full"}) << 4;
    QTest::newRow("dp=2 one bucket per slot") << layout(2, 1, 1, {"parallel.grad_bucket_mb=0.001"}) << 8;
  }
  void overlappedDpBucketsEqualOneReduction() {
    QFETCH(QStringList, overrides);
    QFETCH(int, min_early);
    QTemporaryDir dir;
    auto with = [&](const char* sub, bool overlap) {
      std::vector<std::string> o;
      for (const auto& s : overrides) o.push_back(s.toStdString());
      o.push_back(std::string("parallel.overlap_grad_reduce=") + (overlap ? "true" : "false"));
      o.push_back("train.checkpoint_dir=" + dir.filePath(sub).toStdString());
      return o;
    };
    const RunOut ref = train(with("after", false), 3, true);
    QVERIFY2(ref.error.empty(), ref.error.c_str());
    for (int b : ref.buckets) QCOMPARE(b, 0);
    auto ref_weights = read_safetensors(dir.filePath("after/step-3/model.safetensors").toStdString());
    QVERIFY(ref_weights.ok());
    for (const auto& [memory, sub] : {std::pair{Memory::kHost, "host"}, std::pair{Memory::kStaged, "staged"}, std::pair{Memory::kDirect, "direct"}}) {
      const RunOut r = train(with(sub, true), 3, true, memory);
      QVERIFY2(r.error.empty(), qPrintable(QString("%1: %2").arg(sub, r.error.c_str())));
      QCOMPARE(r.losses, ref.losses);
      QCOMPARE(r.norms, ref.norms);
      for (size_t rank = 0; rank < r.buckets.size(); ++rank) {
        QVERIFY2(r.buckets[rank] > r.early_buckets[rank] && r.early_buckets[rank] >= min_early,
                 qPrintable(QString("%1 rank %2: %3 of %4 buckets started early").arg(sub).arg(rank).arg(r.early_buckets[rank]).arg(r.buckets[rank])));
      }
      auto w = read_safetensors(dir.filePath(QString(sub) + "/step-3/model.safetensors").toStdString());
      QVERIFY(w.ok());
      for (const auto& t : ref_weights->tensors) {
        const NamedTensor* o = w->find(t.name);
        QVERIFY2(o && o->data == t.data, qPrintable(QString("%1: %2").arg(sub, t.name.c_str())));
      }
    }
    // ZeRO 1 reduce-scatters after the backward: no buckets.
    std::vector<std::string> zero;
    for (const auto& s : overrides) zero.push_back(s.toStdString());
    zero.push_back("parallel.zero=1");
    const RunOut z = train(zero, 1);
    QVERIFY2(z.error.empty(), z.error.c_str());
    for (int b : z.buckets) QCOMPARE(b, 0);
  }

  // The buckets of a stage: contiguous, together the whole gradient buffer, in the backward's
  // order (descending offsets), whole slots, each at least the size asked for but the last; only
  // buckets of layer slots alone may start early, and they list their layers.
  void gradBucketsTileTheGradients_data() {
    QTest::addColumn<int>("pp_rank");
    QTest::addColumn<double>("mb");
    for (int pp_rank : {0, 1}) {
      for (double mb : {0.0, 0.001, 0.01, 0.05, 25.0}) {
        QTest::newRow(qPrintable(QString("pp rank %1, %2 MiB").arg(pp_rank).arg(mb))) << pp_rank << mb;
      }
    }
  }
  void gradBucketsTileTheGradients() {
    QFETCH(int, pp_rank);
    QFETCH(double, mb);
    StageSpec spec;
    spec.model.layers = 4;
    spec.model.hidden = 32;
    spec.model.heads = 4;
    spec.model.seq_len = 8;
    spec.model.vocab = 64;
    spec.pp = 2;
    spec.num_chunks = 2;
    spec.chunks = {pp_rank};
    spec.chunk_first_layer = {2 * pp_rank};
    spec.chunk_layers = {2};
    auto stage = GptStage::create(spec, nullptr);
    QVERIFY(stage.ok());
    const auto& params = stage.value()->param_slots();
    const size_t n = stage.value()->num_params();
    const auto floats = static_cast<size_t>(mb * 1024 * 1024 / sizeof(float));
    const auto buckets = plan_grad_buckets(params, floats);
    QVERIFY(!buckets.empty());
    size_t expect_end = n;
    for (size_t b = 0; b < buckets.size(); ++b) {
      const GradBucket& k = buckets[b];
      QCOMPARE(k.end, expect_end);
      QVERIFY(k.begin < k.end);
      if (b + 1 < buckets.size()) QVERIFY(k.end - k.begin >= floats);
      expect_end = k.begin;
      bool layers_only = true;
      std::vector<int> layers;
      for (const auto& s : params) {
        if (s.offset >= k.end || s.offset + s.count <= k.begin) continue;
        QVERIFY2(s.offset >= k.begin && s.offset + s.count <= k.end, qPrintable(QString::fromStdString(s.spec.name) + " is split"));
        if (s.spec.place == model::Place::kLayer) {
          if (std::find(layers.begin(), layers.end(), s.spec.layer) == layers.end()) layers.push_back(s.spec.layer);
        } else {
          layers_only = false;
        }
      }
      QCOMPARE(k.ends_early, layers_only);
      std::vector<int> listed = k.layers;
      std::sort(listed.begin(), listed.end());
      std::sort(layers.begin(), layers.end());
      QCOMPARE(listed, layers);
      // A bucket over more than it needs holds no slot it could have closed without.
      if (floats > 0 && b + 1 < buckets.size()) {
        size_t last_slot = 0;
        for (const auto& s : params) {
          if (s.offset == k.begin) last_slot = s.count;
        }
        QVERIFY(k.end - k.begin - last_slot < floats);
      }
    }
    QCOMPARE(expect_end, size_t{0});
    if (mb == 0) QCOMPARE(buckets.size(), params.size());
    if (mb == 25) QCOMPARE(buckets.size(), size_t{1});
  }

  // Each rank's step timing adds up: its forwards and backwards are the ops it ran, in order and
  // not overlapping; the parts never exceed the step; the part a layout has is seen.
  void stepTimingAccountsForTheStep_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("seen");  // the part each rank must have spent time in
    QTest::newRow("pp 2") << QStringList{"parallel.pp=2"} << "pp";
    QTest::newRow("tp 2, full recompute") << QStringList{"parallel.tp=2", "train.recompute=full"} << "tp recompute";
    QTest::newRow("dp 2, zero 1") << QStringList{"parallel.dp=2", "parallel.zero=1"} << "dp";
    // Zero 2 and 3 reduce-scatter (and gather) inside the forward and backward: dp_ms counts that
    // time, forward_ms and backward_ms leave it out, the ops' spans keep it.
    QTest::newRow("dp 2, zero 2") << QStringList{"parallel.dp=2", "parallel.zero=2"} << "dp";
    QTest::newRow("dp 2, zero 3") << QStringList{"parallel.dp=2", "parallel.zero=3"} << "dp";
  }
  void stepTimingAccountsForTheStep() {
    QFETCH(QStringList, overrides);
    QFETCH(QString, seen);
    std::vector<std::string> o{"cluster.gpus_per_node=2", "cluster.device=cpu"};
    for (const auto& x : overrides) o.push_back(x.toStdString());
    const RunOut out = train(o, 2);
    QVERIFY2(out.error.empty(), out.error.c_str());
    const int dp = seen == "dp" ? 2 : 1, pp = seen == "pp" ? 2 : 1;
    const size_t m = static_cast<size_t>(8 / dp);  // global batch 8, micro-batch 1
    for (size_t r = 0; r < out.last.size(); ++r) {
      const StepStats& st = out.last[r];
      const StepTiming& t = st.timing;
      QCOMPARE(t.ops.size(), 2 * m);  // one chunk per rank: a forward and a backward per micro-batch
      double fwd = 0, bwd = 0, prev_end = 0;
      for (const auto& op : t.ops) {
        QVERIFY(op.start_ms <= op.end_ms);
        QVERIFY(op.start_ms >= prev_end - 1e-9);
        prev_end = op.end_ms;
        (op.backward ? bwd : fwd) += op.end_ms - op.start_ms;
      }
      if (overrides.contains("parallel.zero=2") || overrides.contains("parallel.zero=3")) {
        const double inside = fwd + bwd - (t.forward_ms + t.backward_ms);  // the collectives inside the ops
        QVERIFY2(inside > 0 && inside <= t.dp_ms + 1e-6, qPrintable(QString("%1 ms inside the ops, dp %2 ms").arg(inside).arg(t.dp_ms)));
      } else {
        QVERIFY(std::fabs(fwd - t.forward_ms) < 1e-6 && std::fabs(bwd - t.backward_ms) < 1e-6);
      }
      const double parts = t.forward_ms + t.backward_ms + t.pp_wait_ms + t.pp_send_ms + t.dp_ms + t.optimizer_ms + t.sync_ms;
      QVERIFY2(parts <= st.step_ms * (1 + 1e-9), qPrintable(QString("parts %1 ms > step %2 ms").arg(parts).arg(st.step_ms)));
      QVERIFY(t.forward_ms > 0 && t.backward_ms > 0 && t.optimizer_ms > 0);
      QVERIFY(t.tp_ms <= t.forward_ms + t.backward_ms);
      QVERIFY(t.recompute_ms <= t.backward_ms);
      QVERIFY(t.start_unix_s > 1.7e9);
      if (seen.contains("tp")) QVERIFY(t.tp_ms > 0);
      else QCOMPARE(t.tp_ms, 0.0);
      if (seen.contains("recompute")) QVERIFY(t.recompute_ms > 0);
      else QCOMPARE(t.recompute_ms, 0.0);
      if (seen == "dp") QVERIFY(t.dp_ms > 0);
      if (pp == 1) QCOMPARE(t.pp_wait_ms, 0.0);
    }
    // The last stage cannot start before the first stage's first forward arrives.
    if (pp == 2) QVERIFY(out.last[1].timing.pp_wait_ms > 0);
  }

  void stepTimingCanBeTurnedOff() {
    const RunOut out = train({"parallel.pp=2", "cluster.gpus_per_node=2", "cluster.device=cpu"}, 1, false, Memory::kHost, nullptr, false);
    QVERIFY2(out.error.empty(), out.error.c_str());
    for (const auto& st : out.last) {
      QVERIFY(st.timing.ops.empty());
      QCOMPARE(st.timing.forward_ms + st.timing.pp_wait_ms + st.timing.optimizer_ms, 0.0);
    }
  }
  // The GPU code paths of the trainer and the stage, on the CPU: with a device whose memory the
  // host must not touch, groups of host memory (every transfer staged through host copies) and
  // groups of the device's memory (device buffers straight to the group, point-to-point matched
  // by order as NCCL does) train exactly as the plain CPU run, bit for bit (the same kernels on
  // the same values, and the test groups sum in rank order), checkpoints included; no buffer
  // reaches a group in the wrong memory (the groups fail the run otherwise).
  void deviceMemoryPathsEqualTheHostRun_data() {
    QTest::addColumn<QStringList>("overrides");
    auto layout = [](int dp, int tp, int pp, QStringList extra = {}) {
      QStringList o = {QString("cluster.gpus_per_node=%1").arg(dp * tp * pp), "cluster.device=cpu", QString("parallel.dp=%1").arg(dp),
                       QString("parallel.tp=%1").arg(tp), QString("parallel.pp=%1").arg(pp)};
      return o + extra;
    };
    QTest::newRow("one rank") << layout(1, 1, 1);
    QTest::newRow("dp=2") << layout(2, 1, 1);
    QTest::newRow("tp=2") << layout(1, 2, 1);
    QTest::newRow("pp=2 1f1b") << layout(1, 1, 2);
    QTest::newRow("pp=2 gpipe") << layout(1, 1, 2, {"pipeline.schedule=gpipe"});
    QTest::newRow("pp=4 1f1b m=8") << layout(1, 1, 4, {"pipeline.partition=[0,1,2,3]"});
    QTest::newRow("pp=2 interleaved v=2") << layout(1, 1, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    QTest::newRow("dp=2 tp=2 pp=2 interleaved") << layout(2, 2, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    QTest::newRow("dp=2 tp=2 pp=2 zero 1") << layout(2, 2, 2, {"parallel.zero=1"});
  }
  void deviceMemoryPathsEqualTheHostRun() {
    QFETCH(QStringList, overrides);
    QTemporaryDir dir;
    auto with_dir = [&](const char* sub) {
      std::vector<std::string> o;
      for (const auto& s : overrides) o.push_back(s.toStdString());
      o.push_back("train.checkpoint_dir=" + dir.filePath(sub).toStdString());
      return o;
    };
    const RunOut ref = train(with_dir("host"), 3, true);
    QVERIFY2(ref.error.empty(), ref.error.c_str());
    auto ref_weights = read_safetensors(dir.filePath("host/step-3/model.safetensors").toStdString());
    QVERIFY(ref_weights.ok());
    for (const auto& [memory, sub] : {std::pair{Memory::kStaged, "staged"}, std::pair{Memory::kDirect, "direct"}}) {
      const RunOut r = train(with_dir(sub), 3, true, memory);
      QVERIFY2(r.error.empty(), qPrintable(QString("%1: %2").arg(sub, r.error.c_str())));
      QCOMPARE(r.losses, ref.losses);
      QCOMPARE(r.norms, ref.norms);
      auto w = read_safetensors(dir.filePath(QString(sub) + "/step-3/model.safetensors").toStdString());
      QVERIFY(w.ok());
      QCOMPARE(w->tensors.size(), ref_weights->tensors.size());
      for (const auto& t : ref_weights->tensors) {
        const NamedTensor* o = w->find(t.name);
        QVERIFY2(o && o->data == t.data, qPrintable(QString("%1: %2").arg(sub, t.name.c_str())));
      }
    }
  }

  // train.precision bf16 on a device that is not the CPU keeps the GEMMs' inputs in bf16
  // and gives the GEMMs bf16 weights and a bf16 gradient at the logits (gpt_stage.h); the
  // off-host test device runs that path with the CPU's kernels. Every one of 30 steps stays within
  // 2% of fp32's loss (the issue's bar for bf16), and 200 steps end within 2% of fp32's final
  // loss; the losses differ from fp32's (the rounding took effect), the
  // memory moves by exactly the activations saved and the weights' copy added, and the parallel
  // layout tracks the single bf16 rank. On the CPU itself bf16 trains in fp32: fp32's losses.
  void bf16ActivationsTrackFp32_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("steps");
    QTest::newRow("one rank, 200 steps") << QStringList{"cluster.gpus_per_node=1"} << 200;
    QTest::newRow("full recompute") << QStringList{"cluster.gpus_per_node=1", "train.recompute=full"} << 30;
    QTest::newRow("dp 2 x tp 2 x pp 2 interleaved") << QStringList{"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2",
                                                                   "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}
                                                    << 30;
  }
  void bf16ActivationsTrackFp32() {
    QFETCH(QStringList, overrides);
    QFETCH(int, steps);
    std::vector<std::string> o = {"train.steps=" + std::to_string(steps)};
    for (const auto& x : overrides) o.push_back(x.toStdString());
    std::vector<std::string> b = o;
    b.push_back("train.precision=bf16");
    const RunOut f32 = train(o, steps, false, Memory::kStaged), low = train(b, steps, false, Memory::kStaged);
    QVERIFY2(f32.error.empty() && low.error.empty(), (f32.error + low.error).c_str());
    QCOMPARE(low.losses.size(), size_t(steps));
    double worst = 0;
    for (size_t i = 0; i < low.losses.size(); ++i) worst = std::max(worst, std::abs(low.losses[i] - f32.losses[i]) / f32.losses[i]);
    std::printf("bf16 vs fp32: worst step %.3f%%, final loss %.4f vs %.4f, rank 0 peak %zu vs %zu bytes\n", 100 * worst, low.losses.back(),
                f32.losses.back(), low.mem_bytes.front(), f32.mem_bytes.front());
    if (steps <= 30) {
      QVERIFY2(worst > 0 && worst <= 0.02, qPrintable(QString("bf16 vs fp32: worst step %1%").arg(100 * worst)));
    } else {  // the tiny model memorises its data: by step 200 the loss is near 0.25, where a step's noise is a few percent
      const double final_diff = std::abs(low.losses.back() - f32.losses.back()) / f32.losses.back();
      QVERIFY2(worst > 0 && final_diff <= 0.02, qPrintable(QString("bf16 vs fp32: final loss %1% apart").arg(100 * final_diff)));
    }
    QVERIFY2(low.losses.back() < low.losses.front() - 0.5, "bf16 should learn");
    // One rank holds one micro-batch's activations at its peak: per layer ln_1's and ln_2's outputs
    // (C each), q k v (3 C), attention's output (C), GELU's input and output (4 C each) (BT = 16
    // tokens, C = 32), two bytes each fewer, for 4 layers, or for the one layer rebuilt at a time
    // with full recompute; and it holds a bf16 copy of its weights, two bytes per parameter more.
    auto cfg = config::parse_config(kBase, "test.yaml", o);
    QVERIFY(cfg.ok());
    long long params = 0;
    for (const auto& p : model::ModelDesc::from(cfg->model).params()) params += model::shard_numel(p, 1);
    const long long per_layer = 16LL * (32 + 32 + 96 + 32 + 128 + 128) * 2, copy = 2 * params;
    const long long grew = static_cast<long long>(low.mem_bytes.front()) - static_cast<long long>(f32.mem_bytes.front());
    if (overrides == QStringList{"cluster.gpus_per_node=1"}) QCOMPARE(grew, copy - 4 * per_layer);
    if (overrides == QStringList{"cluster.gpus_per_node=1", "train.recompute=full"}) QCOMPARE(grew, copy - per_layer);
    if (overrides.front() == "cluster.gpus_per_node=8") {
      const RunOut one = train({"cluster.gpus_per_node=1", "train.steps=30", "train.precision=bf16"}, steps, false, Memory::kStaged);
      QVERIFY2(one.error.empty(), one.error.c_str());
      double worst_layout = 0;
      for (size_t i = 0; i < one.losses.size(); ++i) {
        worst_layout = std::max(worst_layout, std::abs(low.losses[i] - one.losses[i]) / one.losses[i]);
        QVERIFY2(close(low.losses[i], one.losses[i], 1e-3),
                 qPrintable(QString("step %1: %2 vs one rank's %3").arg(i + 1).arg(low.losses[i], 0, 'g', 9).arg(one.losses[i], 0, 'g', 9)));
      }
      std::printf("bf16 layout vs one bf16 rank: worst step %.4f%%\n", 100 * worst_layout);
    }
    const RunOut host = train(b, steps, false, Memory::kHost);
    QVERIFY2(host.error.empty(), host.error.c_str());
    QCOMPARE(host.losses, f32.losses);
  }

  // bf16 with the fused attention as the GPU's tensor cores compute it (its tile program on the
  // CPU, TiledFlashOps) on a device the host cannot reach, so the layer code runs its GPU path:
  // q, k, v and attention's output kept in bf16, the log-sum-exps instead of the probabilities.
  // Two heads of 16 (the tile program's smallest head). Every step within 2% of fp32's losses and
  // within 0.45% of bf16 with standard attention, and a parallel layout within 1e-3 of one rank's.
  void bf16FlashTilesTrackFp32_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("one rank") << QStringList{"cluster.gpus_per_node=1"};
    QTest::newRow("full recompute") << QStringList{"cluster.gpus_per_node=1", "train.recompute=full"};
    QTest::newRow("dp 2 x tp 2 x pp 2 1F1B") << QStringList{"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2",
                                                           "pipeline.schedule=1f1b"};
  }
  void bf16FlashTilesTrackFp32() {
    QFETCH(QStringList, overrides);
    const int steps = 30;
    std::vector<std::string> o = {"train.steps=30", "model.heads=2"};
    for (const auto& x : overrides) o.push_back(x.toStdString());
    std::vector<std::string> b = o;
    b.push_back("train.precision=bf16");
    b.push_back("train.attention=flash");
    TiledFlashOps tiles;
    const RunOut f32 = train(o, steps, false, Memory::kStaged), low = train(b, steps, false, Memory::kStaged, nullptr, true, &tiles);
    QVERIFY2(f32.error.empty() && low.error.empty(), (f32.error + low.error).c_str());
    QCOMPARE(low.losses.size(), size_t(steps));
    QCOMPARE(tiles.refused.load(), 0);
    // 4 layers and 8 micro-batches a step, shared out over the pp stages and the dp ranks, and
    // every tp rank calling it for its head: each layer once forward and once backward per
    // micro-batch, and once more forward with full recompute.
    const int calls = 4 * 8 * (overrides.contains("parallel.tp=2") ? 2 : 1) * steps;
    QCOMPARE(tiles.forwards.load(), calls * (overrides.contains("train.recompute=full") ? 2 : 1));
    QCOMPARE(tiles.backwards.load(), calls);
    double worst = 0;
    for (size_t i = 0; i < low.losses.size(); ++i) worst = std::max(worst, std::abs(low.losses[i] - f32.losses[i]) / f32.losses[i]);
    std::printf("bf16 flash tiles vs fp32: worst step %.3f%%, final loss %.4f vs %.4f\n", 100 * worst, low.losses.back(), f32.losses.back());
    QVERIFY2(worst > 0 && worst <= 0.02, qPrintable(QString("bf16 flash tiles vs fp32: worst step %1%").arg(100 * worst)));
    QVERIFY2(low.losses.back() < low.losses.front() - 0.5, "bf16 flash should learn");
    // Against bf16 with standard attention, which differs by the probabilities' rounding only.
    std::vector<std::string> s = b;
    s.back() = "train.attention=standard";
    const RunOut standard = train(s, steps, false, Memory::kStaged);
    QVERIFY2(standard.error.empty(), standard.error.c_str());
    double worst_standard = 0;
    for (size_t i = 0; i < low.losses.size(); ++i)
      worst_standard = std::max(worst_standard, std::abs(low.losses[i] - standard.losses[i]) / standard.losses[i]);
    std::printf("bf16 flash tiles vs bf16 standard attention: worst step %.4f%%\n", 100 * worst_standard);
    // 0.17% to 0.21% measured (0.39% for the layout at a nearby state of the code: over 30 steps
    // the two runs drift apart chaotically); a backward handed a wrong attention output (delta =
    // 0) is 0.52% away. The kernels' own tests (tst_kernels) bound attention far more tightly.
    QVERIFY2(worst_standard > 0 && worst_standard <= 0.0045,
             qPrintable(QString("bf16 flash tiles vs standard attention: worst step %1%").arg(100 * worst_standard)));
    if (overrides.front() == "cluster.gpus_per_node=8") {
      TiledFlashOps one_tiles;
      std::vector<std::string> one_o = {"train.steps=30", "model.heads=2", "cluster.gpus_per_node=1", "train.precision=bf16",
                                        "train.attention=flash"};
      const RunOut one = train(one_o, steps, false, Memory::kStaged, nullptr, true, &one_tiles);
      QVERIFY2(one.error.empty(), one.error.c_str());
      double worst_layout = 0;
      for (size_t i = 0; i < one.losses.size(); ++i) worst_layout = std::max(worst_layout, std::abs(low.losses[i] - one.losses[i]) / one.losses[i]);
      std::printf("bf16 flash tiles, layout vs one rank: worst step %.4f%%\n", 100 * worst_layout);
      QVERIFY2(worst_layout <= 1e-3, qPrintable(QString("layout vs one rank: worst step %1%").arg(100 * worst_layout)));
    }
  }

  // ProfiledDevice: a run through it gives the same bits as a plain run, and it counts every
  // kernel call the stage and the trainer make: per micro-batch 17 GEMMs forward (c_fc's with its
  // GELU) and backward (4 per layer and the head) and 9 layernorms, one AdamW launch and one norm
  // per step; with bf16
  // on an off-host device, one weight copy per step (not per micro-batch).
  void profiledDeviceTimesEveryKernel() {
    const std::vector<std::string> one = {"cluster.nodes=1", "cluster.gpus_per_node=1"};
    ProfiledDevice prof(host_device());
    const RunOut plain = train(one, 2), timed = train(one, 2, false, Memory::kHost, &prof);
    QVERIFY2(plain.error.empty() && timed.error.empty(), (plain.error + timed.error).c_str());
    QCOMPARE(timed.losses, plain.losses);
    QCOMPARE(timed.norms, plain.norms);
    std::map<std::string, long long> calls;
    double flops = 0, seconds = 0;
    for (const auto& k : prof.kernels()) {
      calls[k.name] += k.calls;
      flops += k.flops;
      seconds += k.seconds;
      QVERIFY2(k.seconds >= 0, k.name.c_str());
    }
    const long long mbs = 2 * 8;  // 2 steps of global batch 8, micro-batch 1
    QCOMPARE(calls["matmul_forward"], 13 * mbs);
    QCOMPARE(calls["matmul_gelu_forward"], 4 * mbs);
    QCOMPARE(calls.count("gelu_forward"), size_t(0));  // inside matmul_gelu_forward
    QCOMPARE(calls.count("residual_forward"), size_t(0));  // inside c_proj's matmul_forward
    QCOMPARE(calls["matmul_backward"], 17 * mbs);
    QCOMPARE(calls["layernorm_forward"], 9 * mbs);
    QCOMPARE(calls["attention_forward"], 4 * mbs);
    QCOMPARE(calls["crossentropy_forward_backward"], mbs);
    QCOMPARE(calls["adamw_update_segments"], 2LL);
    QCOMPARE(calls["sum_of_squares_segments"], 2LL);
    QCOMPARE(calls.count("round_to_bf16"), size_t(0));
    // GEMM work: forward 2 BT C OC and backward twice that, per micro-batch of BT = 16 tokens:
    // per layer c_attn 32 -> 96, c_proj 32 -> 32, c_fc 32 -> 128, c_proj 128 -> 32; the head 32 -> 64.
    const double per_mb = 2.0 * 16 * (4 * (32 * 96 + 32 * 32 + 32 * 128 + 128 * 32) + 32 * 64);
    QCOMPARE(flops, 3 * per_mb * mbs);
    QVERIFY(seconds > 0);
    const std::string table = prof.format(2);
    QVERIFY2(table.find("matmul_backward") != std::string::npos && table.find("between kernels") != std::string::npos, table.c_str());
    prof.reset();
    QVERIFY(prof.kernels().empty());

    // The fused attention's work (ObservedOps::causal_flops), for its TFLOP/s: per call two
    // products over the causal half forward and five backward, 2 HS operations a pair of a query
    // and a key at or before it (B 1, T 16, 2 heads of 16: 136 pairs a head).
    {
      TiledFlashOps tiles;
      testing::MemoryMap fmap;
      testing::OffHostDevice foff(fmap, &tiles);
      ProfiledDevice fprof(foff);
      const RunOut f = train({"cluster.nodes=1", "cluster.gpus_per_node=1", "model.heads=2", "train.precision=bf16", "train.attention=flash"},
                             1, false, Memory::kHost, &fprof);
      QVERIFY2(f.error.empty(), f.error.c_str());
      const double pair_ops = 2.0 * 16 * 2 * 136;  // 2 HS, times heads and pairs
      long long forwards = 0, backwards = 0;
      for (const auto& k : fprof.kernels()) {
        if (k.name == std::string("flash_attention_forward")) {
          forwards += k.calls;
          QCOMPARE(k.flops, double(k.calls) * 2 * pair_ops);
        } else if (k.name == std::string("flash_attention_backward")) {
          backwards += k.calls;
          QCOMPARE(k.flops, double(k.calls) * 5 * pair_ops);
        }
      }
      QCOMPARE(forwards, 4LL * 8);  // 4 layers, 8 micro-batches
      QCOMPARE(backwards, 4LL * 8);
      QCOMPARE(tiles.forwards.load(), 4 * 8);
      const std::string ftable = fprof.format(1);
      QVERIFY2(ftable.find("flash_attention_backward") != std::string::npos && ftable.find("TFLOP/s") != std::string::npos, ftable.c_str());
    }

    testing::MemoryMap map;
    testing::OffHostDevice off(map);
    ProfiledDevice low(off);
    const RunOut b = train({"cluster.nodes=1", "cluster.gpus_per_node=1", "train.precision=bf16"}, 3, false, Memory::kHost, &low);
    QVERIFY2(b.error.empty(), b.error.c_str());
    long long copies = 0;
    for (const auto& k : low.kernels()) copies += k.name == std::string("round_to_bf16") ? k.calls : 0;
    // The weights' bf16 copy once per update (3 steps), and the incoming residual gradient's once
    // per micro-batch's backward (8 a step); the layers' layernorms write the rest of it.
    QCOMPARE(copies, 3LL + 3 * 8);
  }

  // train.kernels reaches the device (Device::set_kernels, with KernelShape::of's copy of the
  // choices): a device with one kernel for each kind of work refuses any choice but auto, naming
  // the key, before a step is taken; auto everywhere trains.
  void kernelChoicesReachTheDevice() {
    auto cfg = config::parse_config(kBase, "test.yaml", {"backend=cuda", "train.kernels.gemm_bias=separate", "train.kernels.layernorm_backward_warps=8"});
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    const KernelShape shape = KernelShape::of(cfg.value());
    QVERIFY(shape.kernels.gemm_bias == config::GemmBias::kSeparate && shape.kernels.layernorm_backward_warps == config::NormWarps::kEight);
    QVERIFY(shape.kernels.flash == config::FlashKernels::kAuto && !shape.kernels.all_auto());
    testing::MemoryMap map;
    testing::OffHostDevice off(map);
    ProfiledDevice prof(off);
    const std::vector<std::string> one = {"cluster.nodes=1", "cluster.gpus_per_node=1", "backend=cuda"};
    std::vector<std::string> asked = one;
    asked.push_back("train.kernels.gemm_bias=separate");
    const RunOut refused = train(asked, 1, false, Memory::kHost, &prof);
    QVERIFY2(refused.losses.empty(), "trained with a kernel choice the device does not have");
    QVERIFY2(QString::fromStdString(refused.error).contains("train.kernels: ") &&
                 QString::fromStdString(refused.error).contains("has one kernel for each kind of work; remove train.kernels"),
             refused.error.c_str());
    const RunOut trained = train(one, 1, false, Memory::kHost, &prof);
    QVERIFY2(trained.error.empty(), trained.error.c_str());
    QCOMPARE(int(trained.losses.size()), 1);
  }

  // train.fp32_residual: false plans another framework's run (a 16-bit residual stream); the
  // engine, whose residual stream is fp32, refuses to train it, naming the key, and trains the
  // same config with the key at its default.
  void sixteenBitResidualStreamIsRefused() {
    const std::vector<std::string> one = {"cluster.nodes=1", "cluster.gpus_per_node=1", "train.precision=bf16"};
    std::vector<std::string> sixteen = one;
    sixteen.push_back("train.fp32_residual=false");
    const RunOut refused = train(sixteen, 1);
    QVERIFY(refused.losses.empty());
    QVERIFY2(QString::fromStdString(refused.error).contains("train.fp32_residual=false: Stagecraft's engine keeps the residual stream in fp32"), refused.error.c_str());
    const RunOut trained = train(one, 1);
    QVERIFY2(trained.error.empty(), trained.error.c_str());
    // fp32 training has no 16-bit residual to refuse.
    const RunOut fp32 = train({"cluster.nodes=1", "cluster.gpus_per_node=1", "train.fp32_residual=false"}, 1);
    QVERIFY2(fp32.error.empty(), fp32.error.c_str());
  }

  // Where the device has a clock of its own (Device::make_clock: CUDA events), a kernel's time is
  // the clock's: timed alone, the time between a mark before the call and one after it, read at
  // once, with the host's time of the call kept beside it and the table saying how much the
  // launches and waits added; in the step, the same marks read back later, and the time between
  // kernels from one call's end mark to the next one's start. A clock that cannot read leaves the
  // host's time; the CPU has no clock.
  void profiledDeviceTimesOnTheDeviceClock() {
    const std::vector<std::string> one = {"cluster.nodes=1", "cluster.gpus_per_node=1"};
    for (const auto timing : {ProfiledDevice::Timing::kAlone, ProfiledDevice::Timing::kInStep}) {
      ProfiledDevice host(host_device(), timing);
      const RunOut r = train(one, 1, false, Memory::kHost, &host);
      QVERIFY2(r.error.empty(), r.error.c_str());
      QVERIFY(!host.device_clock());
      for (const auto& k : host.kernels()) QCOMPARE(k.seconds, k.host_seconds);
      QVERIFY(host.format(1).find("launches and waits") == std::string::npos);
    }
    testing::MemoryMap map;
    // Marks a quarter of a second apart: far above any call's host time here, and their sums exact.
    testing::ScriptedClock clock;
    clock.seconds = 0.25;
    testing::OffHostDevice off(map);
    off.use_clock(&clock);
    {
      ProfiledDevice prof(off);
      const RunOut r = train(one, 1, false, Memory::kHost, &prof);
      QVERIFY2(r.error.empty(), r.error.c_str());
      QVERIFY(prof.device_clock());
      long long calls = 0;
      double host = 0;
      for (const auto& k : prof.kernels()) {
        QCOMPARE(k.seconds, 0.25 * double(k.calls));  // marks 0 and 1 of each read
        QVERIFY2(k.host_seconds >= 0 && k.host_seconds < k.seconds, k.name.c_str());
        calls += k.calls;
        host += k.host_seconds;
      }
      QVERIFY(calls > 0);
      QCOMPARE(clock.marks.load(), int(2 * calls));
      QCOMPARE(clock.reads.load(), int(calls));
      const std::string table = prof.format(1);
      char expect[96];
      std::snprintf(expect, sizeof expect, "(the host's time of the calls, %.3f ms, less the device's)", 1e3 * host);
      QVERIFY2(table.find("launches and waits") != std::string::npos && table.find(expect) != std::string::npos, table.c_str());
      prof.reset();
      QVERIFY(!prof.device_clock());
    }
    {
      // In the step: call i's marks are 2i and 2i + 1 of one read (two steps of the tiny model are
      // far from the 4096 calls that would read them early), so each call and each gap between
      // two calls is a quarter.
      clock.marks = 0;
      clock.reads = 0;
      ProfiledDevice prof(off, ProfiledDevice::Timing::kInStep);
      const RunOut r = train(one, 2, false, Memory::kHost, &prof);
      QVERIFY2(r.error.empty(), r.error.c_str());
      QCOMPARE(clock.reads.load(), 0);  // nothing read before it is asked for
      long long calls = 0;
      for (const auto& k : prof.kernels()) {
        QCOMPARE(k.seconds, 0.25 * double(k.calls));
        calls += k.calls;
      }
      QCOMPARE(clock.reads.load(), 1);
      QCOMPARE(clock.marks.load(), int(2 * calls));
      QCOMPARE(prof.between_kernels_seconds(), 0.25 * double(calls - 1));
      QVERIFY(prof.device_clock());
      QVERIFY(prof.format(1).find("launches and waits") == std::string::npos);
      // The same losses as a plain run: timing changes nothing computed.
      const RunOut plain = train(one, 2);
      QCOMPARE(r.losses, plain.losses);
    }
    testing::ScriptedClock broken;
    broken.seconds = -1;
    testing::OffHostDevice off2(map);
    off2.use_clock(&broken);
    for (const auto timing : {ProfiledDevice::Timing::kAlone, ProfiledDevice::Timing::kInStep}) {
      ProfiledDevice fallback(off2, timing);
      const RunOut f = train(one, 1, false, Memory::kHost, &fallback);
      QVERIFY2(f.error.empty(), f.error.c_str());
      QVERIFY(!fallback.device_clock());
      QVERIFY(broken.reads.load() > 0);
      for (const auto& k : fallback.kernels()) QCOMPARE(k.seconds, k.host_seconds);
      QVERIFY(fallback.format(1).find("launches and waits") == std::string::npos);
    }
  }

  // train.precision fp16 (loss_scaler.h): the dynamic loss scale, step by step.
  void lossScalerRule_data() {
    QTest::addColumn<double>("initial");
    QTest::addColumn<int>("interval");
    QTest::addColumn<QString>("steps");     // f: finite gradients, o: an overflow
    QTest::addColumn<QList<double>>("scales");  // after each step
    QTest::addColumn<QString>("applied");   // y / n per step
    QTest::newRow("header's worked example") << 4.0 << 2 << "ffofooo" << QList<double>{4, 8, 4, 4, 2, 1, 1} << "yynynnn";
    QTest::newRow("grows after each full window") << 65536.0 << 3 << "ffffff" << QList<double>{65536, 65536, 131072, 131072, 131072, 262144}
                                                 << "yyyyyy";
    QTest::newRow("an overflow restarts the window") << 8.0 << 3 << "ffoff" << QList<double>{8, 8, 4, 4, 4} << "yynyy";
    QTest::newRow("defaults: 2^16, halved at once") << 65536.0 << 2000 << "offf" << QList<double>{32768, 32768, 32768, 32768} << "nyyy";
  }
  void lossScalerRule() {
    QFETCH(double, initial);
    QFETCH(int, interval);
    QFETCH(QString, steps);
    QFETCH(QList<double>, scales);
    QFETCH(QString, applied);
    LossScaler s({.initial = initial, .growth_interval = interval});
    for (qsizetype i = 0; i < steps.size(); ++i) {
      const bool apply = s.update(steps[i] == 'f');
      QCOMPARE(apply, applied[i] == 'y');
      QCOMPARE(s.scale(), scales[i]);
    }
    QCOMPARE(LossScaler().scale(), 65536.0);
  }

  // fp16 on the CPU runs the fp32 kernels on gradients scaled by 2^16 and divides the scale out
  // in the update: powers of two scale exactly, so the run equals fp32's bit for bit, and every
  // step reports the scale.
  void fp16ScalingIsExactOnTheCpu_data() {
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("one rank") << QStringList{"cluster.gpus_per_node=1"};
    QTest::newRow("dp=2 tp=2 pp=2 zero 1") << QStringList{"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2",
                                                          "parallel.zero=1"};
    QTest::newRow("dp=2 tp=2 pp=2 zero 3") << QStringList{"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2",
                                                          "parallel.zero=3"};
  }
  void fp16ScalingIsExactOnTheCpu() {
    QFETCH(QStringList, layout);
    std::vector<std::string> o = {"cluster.device=H100-SXM"};
    for (const auto& x : layout) o.push_back(x.toStdString());
    const RunOut fp32 = train(o, 4);
    o.push_back("train.precision=fp16");
    const RunOut fp16 = train(o, 4);
    QVERIFY2(fp32.error.empty() && fp16.error.empty(), (fp32.error + fp16.error).c_str());
    QCOMPARE(fp16.losses, fp32.losses);
    QCOMPARE(fp16.norms, fp32.norms);
    QCOMPARE(fp16.loss_scales, (std::vector<double>(4, 65536.0)));
    QCOMPARE(fp16.skipped, (std::vector<bool>(4, false)));
    QCOMPARE(fp32.loss_scales, (std::vector<double>(4, 0.0)));
  }

  // A non-finite gradient (injected into the embedding gradient of step 2's micro-batches through
  // the Device seam) skips that step: the weights and AdamW moments stay those of step 1, the
  // scale halves, the step reports it, and the next step trains again.
  void fp16SkipsAStepWithANonFiniteGradient() {
    QTemporaryDir dir;
    const std::vector<std::string> o = {"cluster.gpus_per_node=1", "cluster.device=H100-SXM", "train.precision=fp16"};
    auto with_dir = [&](const char* sub) {
      auto x = o;
      x.push_back("train.checkpoint_dir=" + dir.filePath(sub).toStdString());
      return x;
    };
    const int per_step = 8;  // micro-batches a step: global_batch 8 / micro_batch 1
    PoisonDevice clean(0, 0), poisoned(per_step, 2 * per_step), poisoned3(per_step, 2 * per_step);
    const RunOut one = train(with_dir("one"), 1, true, Memory::kHost, &clean);
    const RunOut two = train(with_dir("two"), 2, true, Memory::kHost, &poisoned);
    QVERIFY2(one.error.empty() && two.error.empty(), (one.error + two.error).c_str());
    QCOMPARE(two.skipped, (std::vector<bool>{false, true}));
    QCOMPARE(two.loss_scales, (std::vector<double>{65536, 32768}));
    QCOMPARE(two.norms[1], 0.0);
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      auto a = read_safetensors(dir.filePath(QString("one/step-1/") + file).toStdString());
      auto b = read_safetensors(dir.filePath(QString("two/step-2/") + file).toStdString());
      QVERIFY(a.ok() && b.ok());
      QCOMPARE(b->tensors.size(), a->tensors.size());
      for (const auto& t : a->tensors) {
        const NamedTensor* u = b->find(t.name);
        QVERIFY2(u && u->data == t.data, qPrintable(QString("%1: %2 changed in the skipped step").arg(file, t.name.c_str())));
      }
    }
    const RunOut three = train(o, 3, false, Memory::kHost, &poisoned3);
    QVERIFY2(three.error.empty(), three.error.c_str());
    QCOMPARE(three.skipped, (std::vector<bool>{false, true, false}));
    QCOMPARE(three.loss_scales.back(), 32768.0);
    QVERIFY(std::isfinite(three.norms[2]) && three.norms[2] > 0);
  }

  // The scaler's state and the skipped steps live in the checkpoint: resuming after a skipped
  // step continues with the halved scale and with AdamW's count of applied updates, so the
  // resumed step writes the same weights and moments as the uninterrupted run.
  void fp16ResumeKeepsTheScaler() {
    QTemporaryDir dir;
    const std::vector<std::string> o = {"cluster.gpus_per_node=1", "cluster.device=H100-SXM", "train.precision=fp16"};
    auto with = [&](std::initializer_list<std::string> extra) {
      auto x = o;
      x.insert(x.end(), extra);
      return x;
    };
    const int per_step = 8;
    PoisonDevice two_dev(per_step, 2 * per_step), three_dev(per_step, 2 * per_step), clean(0, 0);
    const RunOut two = train(with({"train.checkpoint_dir=" + dir.filePath("a").toStdString()}), 2, true, Memory::kHost, &two_dev);
    const RunOut three = train(with({"train.checkpoint_dir=" + dir.filePath("b").toStdString()}), 3, true, Memory::kHost, &three_dev);
    const RunOut resumed = train(with({"train.checkpoint_dir=" + dir.filePath("c").toStdString(),
                                       "train.resume=" + dir.filePath("a/step-2").toStdString()}),
                                 1, true, Memory::kHost, &clean);
    QVERIFY2(two.error.empty() && three.error.empty() && resumed.error.empty(), (two.error + three.error + resumed.error).c_str());
    QCOMPARE(resumed.loss_scales, (std::vector<double>{32768}));
    QCOMPARE(resumed.losses.front(), three.losses.back());
    QCOMPARE(resumed.norms.front(), three.norms.back());
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      auto a = read_safetensors(dir.filePath(QString("b/step-3/") + file).toStdString());
      auto b = read_safetensors(dir.filePath(QString("c/step-3/") + file).toStdString());
      QVERIFY(a.ok() && b.ok());
      for (const auto& t : a->tensors) {
        const NamedTensor* u = b->find(t.name);
        QVERIFY2(u && u->data == t.data, qPrintable(QString("%1: %2").arg(file, t.name.c_str())));
      }
    }
  }

  // The test groups above can fail: a host pointer given to a device-memory group, a device
  // pointer given to a host-memory group, and a recv posted out of the sender's order on a
  // device-memory group (which NCCL would fill with the wrong message) are errors.
  void testGroupsCatchWrongMemoryAndOrder() {
    testing::MemoryMap map;
    testing::OffHostDevice dev(map);
    Buffer<float> a = Buffer<float>::make(dev, 4).value(), b = Buffer<float>::make(dev, 4).value();
    std::vector<float> host(4, 1.0f);
    auto hub = std::make_shared<testing::ThreadHub>(2);
    testing::ThreadComm d0(hub, "pp", {0, 1}, 0, {&map, true}), d1(hub, "pp", {0, 1}, 1, {&map, true});
    testing::ThreadComm h0(hub, "dp", {0, 1}, 0, {&map, false});
    QVERIFY(!d0.send(std::span<const float>(host), 1, 0).ok());
    QVERIFY(!h0.send(std::span<const float>(a.data(), 4), 1, 0).ok());
    QVERIFY(d0.send(std::span<const float>(a.data(), 4), 1, 1).ok());
    QVERIFY(d0.send(std::span<const float>(b.data(), 4), 1, 2).ok());
    const Status wrong = d1.recv(std::span<float>(b.data(), 4), 0, 2);
    QVERIFY2(!wrong.ok() && QString::fromStdString(wrong.message()).contains("expected tag 2"), wrong.message().c_str());
    QVERIFY(d1.recv(std::span<float>(b.data(), 4), 0, 2).ok());
  }
};

QTEST_APPLESS_MAIN(TestTrainer)
#include "tst_trainer.moc"
