// The CUDA backend against the CPU engine, on a real GPU: every kernel of the Ops table (ops.h)
// against the CPU kernel on random shapes with odd sizes (fp32 within 1e-5 of the tensor's scale),
// GPT-2's and Llama's (RMSNorm, rotary positions, SwiGLU, the encoder without learned positions,
// attention with grouped-query heads, standard and fused),
// the one-launch segment calls against the CPU's on segment lists with empty and one-element
// segments (and the sum of squares the same bits launch after launch), the fused attention
// against its tile program (and, on Hopper, each wgmma reading alone against a plain product),
// a 20-step run on cuda against the CPU engine's losses (1e-4), dp 2 x tp 2 x pp 2 ranks sharing
// one GPU through host-staged communication against the single rank, checkpoints moving
// between cpu and cuda, and NCCL: its groups of one on the GPU (device copies, a run whose
// groups are NCCL communicators against the host-staged one), ranks sharing a GPU refused with
// one line, and with two or more GPUs, runs of real worker processes over NCCL against the same
// runs over Gloo (skipped, saying so, with fewer GPUs).
//
// Without a GPU (or in a build without CUDA) the suite prints why and exits 77, which ctest
// reports as skipped (tests/gpu/CMakeLists.txt), never as passed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "stagecraft/comm/nccl_communicator.h"
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/config_schema.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/evaluate.h"
#include "stagecraft/runtime/profiled_device.h"
#include "stagecraft/runtime/rng.h"
#include "stagecraft/runtime/segment_table.h"
#include "stagecraft/runtime/trainer.h"
#include "stagecraft/runtime/kernels.h"
#if defined(STAGECRAFT_WITH_CUDA)
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/lt_gemm.h"
#if defined(STAGECRAFT_WITH_CUDA)
#include <cuda_runtime.h>
#endif
#endif
#include "local_store.h"
#include "off_host_device.h"
#include "segment_test_support.h"
#include "thread_comm.h"
#if defined(STAGECRAFT_WGMMA_PROBE)
#include "wgmma_probe.h"
#include "wgmma_products.h"
#endif

#include <QtTest>

#include "../cli/cli_process.h"

using namespace stagecraft;
using namespace stagecraft::runtime;

namespace {

std::vector<float> randn(size_t n, uint64_t stream, double scale = 1.0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng_normal(77, stream, i));
  return v;
}

std::vector<int32_t> tokens_of(size_t n, int V, uint64_t stream) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(rng_uniform(5, stream, i) * V) % V;
  return t;
}

// max |a - b| / max(max |b|, 1e-12): the error relative to the tensor's scale.
// Infinite where the sizes differ or a difference is not finite: a NaN a kernel leaves must fail,
// and std::max would pass it over.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0, d = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double e = std::abs(double(a[i]) - double(b[i]));
    if (!std::isfinite(e)) return INFINITY;
    m = std::max(m, std::abs(double(b[i])));
    d = std::max(d, e);
  }
  return d / std::max(m, 1e-12);
}

// A tensor on the GPU, with its host twin for the CPU kernel.
struct Twin {
  std::vector<float> host;
  Buffer<float> dev;
  Twin(Device& d, std::vector<float> init) : host(std::move(init)) {
    dev = Buffer<float>::make(d, host.size()).value();
    if (!d.copy_from_host(dev.data(), host.data(), host.size() * sizeof(float)).ok()) qFatal("copy to the GPU failed");
  }
  Twin(Device& d, size_t n) : Twin(d, std::vector<float>(n, 0.0f)) {}
  float* h() { return host.data(); }
  float* g() { return dev.data(); }
  std::vector<float> back(Device& d) const {
    std::vector<float> out(host.size());
    if (!d.copy_to_host(out.data(), dev.data(), out.size() * sizeof(float)).ok()) qFatal("copy from the GPU failed");
    return out;
  }
};

// A bf16 activation on the GPU and its host twin for the CPU kernel, compared as floats.
struct Low16 {
  std::vector<bf16> host;
  Buffer<bf16> dev;
  Low16(Device& d, size_t n) : host(n) { dev = Buffer<bf16>::make(d, n).value(); }
  Low16(Device& d, const std::vector<float>& init) : Low16(d, init.size()) {
    for (size_t i = 0; i < init.size(); ++i) host[i] = to_bf16(init[i]);
    if (!d.copy_from_host(dev.data(), host.data(), host.size() * sizeof(bf16)).ok()) qFatal("copy to the GPU failed");
  }
  bf16* h() { return host.data(); }
  bf16* g() { return dev.data(); }
  static std::vector<float> wide(const std::vector<bf16>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
    return f;
  }
  std::vector<float> back(Device& d) const {
    std::vector<bf16> out(host.size());
    if (!d.copy_to_host(out.data(), dev.data(), out.size() * sizeof(bf16)).ok()) qFatal("copy from the GPU failed");
    return wide(out);
  }
};

struct Ints {
  std::vector<int32_t> host;
  Buffer<int32_t> dev;
  Ints(Device& d, std::vector<int32_t> init) : host(std::move(init)) {
    dev = Buffer<int32_t>::make(d, host.size()).value();
    if (!d.copy_from_host(dev.data(), host.data(), host.size() * sizeof(int32_t)).ok()) qFatal("copy to the GPU failed");
  }
};

const char* kBase =
    "cluster: {nodes: 1, gpus_per_node: 1}\n"
    "parallel: {dp: 1, tp: 1, pp: 1}\n"
    "model: {layers: 4, hidden: 64, heads: 4, seq_len: 32, vocab: 96}\n"
    "train: {global_batch: 8, micro_batch: 1, steps: 20, lr: 3.0e-3, warmup_steps: 3, weight_decay: 0.1, grad_clip: 1.0, seed: 9}\n"
    "backend: cpu\n";

// 6000 tokens below kBase's vocabulary of 96, with structure to learn.
std::vector<uint16_t> data_tokens() {
  std::vector<uint16_t> t;
  for (int i = 0; i < 6000; ++i) t.push_back(static_cast<uint16_t>(((i % 29) * 7 + (i / 113)) % 96));
  return t;
}

TokenData make_data() { return TokenData::from_tokens(data_tokens()); }

// The kernel paths this run of the suite takes: its ctest entry's `--kernels KEY=VALUE,...`
// (train.kernels' keys; every auto without it). They are the kernels' choices before each test
// (TestCuda::init) and are written into the configs of the runs on the GPU wherever they apply
// (with_entry_kernels), as a user's config would be.
config::KernelConfig g_kernels;

constexpr std::string_view kKernelKeys = "train.kernels.";

// Takes `--kernels flash=wgmma,...` out of argv, each item read by the config schema's train.kernels
// key of that name; false, with the line printed, for a key or value train.kernels does not have.
bool take_kernels_argument(int& argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--kernels") continue;
    if (i + 1 >= argc) return std::fprintf(stderr, "tst_cuda: --kernels takes KEY=VALUE,... (flash=wgmma)\n"), false;
    const std::string list = argv[i + 1];
    config::RunConfig c;
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      const std::string item = list.substr(at, end - at);
      const size_t eq = item.find('=');
      const config::KeySpec* key = eq == std::string::npos ? nullptr : config::find_key(std::string(kKernelKeys) + item.substr(0, eq));
      if (!key || !key->access.set(c, config::KeyValue{item.substr(eq + 1)})) {
        return std::fprintf(stderr, "tst_cuda: --kernels %s: not a train.kernels key and value\n", item.c_str()), false;
      }
      at = end + 1;
    }
    g_kernels = c.train.kernels;
    for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
    argc -= 2;
    return true;
  }
  return true;
}

// config with the entry's kernel paths where its run has that work, and backend cuda, which they
// need: each choice the config's rules refuse for this run (validate.cpp) goes back to auto.
void with_entry_kernels(config::RunConfig& c) {
  c.backend = config::Backend::kCuda;
  c.train.kernels = g_kernels;
  config::RunConfig defaults;
  for (const auto& issue : config::validate(c)) {
    if (issue.key.rfind(kKernelKeys, 0) != 0) continue;
    if (const config::KeySpec* key = config::find_key(issue.key)) key->access.set(c, key->access.get(defaults));
  }
}

// The same as `train.kernels.KEY=VALUE` overrides (every key of the schema's), for a run through
// the CLI of a GPT-2 model in bf16 with the fused attention (where every key applies).
[[maybe_unused]] QStringList entry_kernel_overrides() {
  config::RunConfig c;
  c.train.kernels = g_kernels;
  QStringList out;
  for (const config::KeySpec& key : config::config_schema()) {
    if (key.path.rfind(kKernelKeys, 0) != 0) continue;
    out << QString::fromStdString(std::string(key.path) + "=" + std::get<std::string>(key.access.get(c)));
  }
  return out;
}

// Whether the fused attention of q, k, v in bf16 (or fp32) runs on tensor cores (false without
// the backend), and whether the entry's flash=cuda_cores turned them off.
bool on_tensor_cores(bool bf16_qkv, int HS) {
#if defined(STAGECRAFT_WITH_CUDA)
  return cuda::flash_tensor_cores(bf16_qkv, HS);
#else
  (void)bf16_qkv;
  (void)HS;
  return false;
#endif
}
// Whether they are Hopper's warpgroup products (flash_wgmma.cu), and whether the entry's
// flash=wgmma asked for them.
bool on_warpgroups(int HS) {
#if defined(STAGECRAFT_WITH_CUDA)
  return cuda::flash_warpgroup(HS);
#else
  (void)HS;
  return false;
#endif
}
bool warpgroups_asked() { return g_kernels.flash == config::FlashKernels::kWgmma; }
// Why the warpgroup products cannot run in this process (empty where they can): a build without
// them, or a GPU other than compute capability 9.0 (their sm_90a code loads there only).
constexpr const char* kNoWarpgroupKernels =
    "this build has no warpgroup kernels (STAGECRAFT_FLASH_WGMMA=OFF: CMAKE_CUDA_ARCHITECTURES without Hopper)";
std::string warpgroups_unable() {
#if defined(STAGECRAFT_FLASH_WGMMA)
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major == 9 && minor == 0) return "";
  return "warpgroup products run on compute capability 9.0; this GPU is " + std::to_string(major) + "." + std::to_string(minor);
#else
  return kNoWarpgroupKernels;
#endif
}
bool tensor_cores_turned_off() { return g_kernels.flash == config::FlashKernels::kCudaCores; }

struct RunOut {
  std::vector<double> losses, norms;
  std::string error;
};

// Trains `steps` steps of kBase + overrides with every rank a thread; `gpu` puts every rank's
// stage on the GPU (ranks share it), else on the CPU.
// gpu: the ranks train on the GPU; else on the CPU, or with off_host on the CPU kernels behind a
// device the host must not touch (off_host_device.h), which trains bf16 as a GPU does.
RunOut train(const std::vector<std::string>& overrides, int steps, bool gpu, bool save = false, bool off_host = false) {
  RunOut out;
  auto cfg = config::parse_config(kBase, "test.yaml", overrides);
  if (!cfg.ok()) return {{}, {}, cfg.status().message()};
  if (gpu) with_entry_kernels(cfg.value());
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) return {{}, {}, plan.status().message()};
  const int world = plan->topology.world_size();
  testing::ThreadHubs hubs;
  std::vector<comm::ProcessGroups> groups;
  std::vector<RankLayout> layouts;
  for (int r = 0; r < world; ++r) {
    auto g = comm::build_process_groups(plan->topology, r, cfg->model.tied_embeddings, testing::thread_communicator_factory(hubs, r));
    auto l = comm::rank_layout_of(plan.value(), r);
    if (!g.ok() || !l.ok()) return {{}, {}, g.status().message() + l.status().message()};
    groups.push_back(std::move(g).value());
    layouts.push_back(std::move(l).value());
  }
  const TokenData data = make_data();
  std::mutex mu;
  std::vector<std::thread> threads;
  testing::MemoryMap off_host_memory;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) {
        std::lock_guard<std::mutex> lock(mu);
        if (out.error.empty()) out.error = "rank " + std::to_string(r) + ": " + s.message();
      };
      std::unique_ptr<Device> dev;
      if (gpu) {
        auto d = make_device(config::Backend::kCuda, 0);
        if (!d.ok()) return fail(d.status());
        dev = std::move(d).value();
      } else if (off_host) {
        dev = std::make_unique<testing::OffHostDevice>(off_host_memory);
      }
      auto t = Trainer::create(cfg.value(), layouts[static_cast<size_t>(r)], groups[static_cast<size_t>(r)].trainer_groups(), &data,
                               dev.get());
      if (!t.ok()) return fail(t.status());
      if (Status s = t.value()->start(); !s) return fail(s);
      for (int i = 0; i < steps; ++i) {
        auto st = t.value()->train_step();
        if (!st.ok()) return fail(st.status());
        if (r == 0) {
          std::lock_guard<std::mutex> lock(mu);
          out.losses.push_back(st->loss);
          out.norms.push_back(st->grad_norm);
        }
      }
      if (save) {
        auto p = t.value()->save_checkpoint();
        if (!p.ok()) return fail(p.status());
      }
    });
  }
  for (auto& th : threads) th.join();
  return out;
}

// One rank on the GPU whose groups are NCCL communicators made through a rendezvous store of its
// own (groups of one: the trainer hands them device memory, no host staging).
RunOut train_over_nccl(const std::vector<std::string>& overrides, int steps) {
  auto cfg = config::parse_config(kBase, "test.yaml", overrides);
  if (!cfg.ok()) return {{}, {}, cfg.status().message()};
  with_entry_kernels(cfg.value());
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) return {{}, {}, plan.status().message()};
  if (plan->topology.world_size() != 1) return {{}, {}, "train_over_nccl runs one rank"};
  auto local = testing::start_local_store();
  if (!local.ok()) return {{}, {}, local.status().message()};
  comm::RendezvousClient* store = local->client.get();
  auto dev = make_device(config::Backend::kCuda, 0);
  if (!dev.ok()) return {{}, {}, dev.status().message()};
  comm::NcclOptions o;
  o.timeout = std::chrono::seconds(60);
  auto groups = comm::build_process_groups(plan->topology, 0, cfg->model.tied_embeddings,
                                           comm::nccl_communicator_factory(*store, *dev.value(), 0, o));
  if (!groups.ok()) return {{}, {}, groups.status().message()};
  if (!groups->dp().device_memory()) return {{}, {}, "an NCCL group should take device memory"};
  auto layout = comm::rank_layout_of(plan.value(), 0);
  const TokenData data = make_data();
  auto t = Trainer::create(cfg.value(), layout.value(), groups->trainer_groups(), &data, dev.value().get());
  if (!t.ok()) return {{}, {}, t.status().message()};
  if (Status s = t.value()->start(); !s) return {{}, {}, s.message()};
  RunOut out;
  for (int i = 0; i < steps; ++i) {
    auto st = t.value()->train_step();
    if (!st.ok()) return {{}, {}, st.status().message()};
    out.losses.push_back(st->loss);
    out.norms.push_back(st->grad_norm);
  }
  return out;
}

// A run of real worker processes through stagecraft-cli: rank 0's losses, or the error.
RunOut run_cli(const QString& config, const QStringList& overrides, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  const auto r = testing::run_cli(QStringList{"run", config, "--json"} + overrides, env, 300000);
  RunOut out;
  for (const QString& line : r.out.split('\n', Qt::SkipEmptyParts)) {
    const auto o = QJsonDocument::fromJson(line.toUtf8()).object();
    if (o["event"].toString() == "step" && o["rank"].toInt() == 0) {
      out.losses.push_back(o["loss"].toDouble());
      out.norms.push_back(o["grad_norm"].toDouble());
    }
    if (o["event"].toString() == "error" && out.error.empty()) out.error = o["message"].toString().toStdString();
  }
  if (r.code != 0 && out.error.empty()) out.error = ("exit " + QString::number(r.code) + ": " + r.err).toStdString();
  return out;
}

bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

QString compare(const RunOut& a, const RunOut& b, double rel) {
  if (!a.error.empty()) return QString::fromStdString(a.error);
  if (!b.error.empty()) return QString::fromStdString(b.error);
  if (a.losses.size() != b.losses.size()) return QString("%1 vs %2 steps").arg(a.losses.size()).arg(b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    if (!close(a.losses[i], b.losses[i], rel)) {
      return QString("step %1: loss %2 vs %3").arg(i + 1).arg(a.losses[i], 0, 'g', 10).arg(b.losses[i], 0, 'g', 10);
    }
    if (!close(a.norms[i], b.norms[i], 10 * rel)) {
      return QString("step %1: grad norm %2 vs %3").arg(i + 1).arg(a.norms[i], 0, 'g', 10).arg(b.norms[i], 0, 'g', 10);
    }
  }
  return {};
}

// A run of kBase on the GPU in `dir`: its tokens (tokens.bin, 6000 below 96) and its config
// (run.yaml) named `name`; false where a file could not be written.
bool write_gpu_run(const QTemporaryDir& dir, const char* name) {
  QFile data(dir.filePath("tokens.bin"));
  const std::vector<uint16_t> tokens = data_tokens();
  const qint64 bytes = static_cast<qint64>(tokens.size() * sizeof(uint16_t));
  if (!data.open(QIODevice::WriteOnly) || data.write(reinterpret_cast<const char*>(tokens.data()), bytes) != bytes) return false;
  QFile f(dir.filePath("run.yaml"));
  if (!f.open(QIODevice::WriteOnly)) return false;
  f.write(QString(kBase).replace("backend: cpu", "backend: cuda").toUtf8());
  f.write(QString("name: %1\n").arg(name).toUtf8());
  return data.flush() && f.flush();
}

}  // namespace

class TestCuda : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Device> gpu_;

 private Q_SLOTS:
  void initTestCase() {
    cpu::set_num_threads(1);
    auto d = make_device(config::Backend::kCuda, 0);
    QVERIFY2(d.ok(), qPrintable(QString::fromStdString(d.status().message())));
    gpu_ = std::move(d).value();
    std::printf("device: %s\n", gpu_->name().c_str());
  }
  // Each test starts from the entry's kernel paths (a run before it set its own config's).
  void init() {
#if defined(STAGECRAFT_WITH_CUDA)
    cuda::use_kernels(g_kernels);
#endif
  }

  // What a step event's mem_bytes reads (Device::peak_bytes) counts the GPU memory the engine
  // holds: the device's allocations, and what its kernels keep for themselves, here the bf16
  // copies a GEMM's fp32 operands are cast into (the first GEMM of this process, so its scratch
  // grows by both copies). Before the kernels' scratch was counted, the peak stayed at the
  // operands'.
  void peakMemoryCountsTheKernelsScratch() {
    Device& d = *gpu_;
    QVERIFY(d.synchronize().ok());
    d.reset_peak();
    const size_t base = d.peak_bytes();
    QVERIFY2(base >= (size_t(4) << 20), "cuBLASLt's workspace, held since the device opened, is counted");
    auto block = d.allocate(size_t(64) << 20);
    QVERIFY(block.ok());
    QCOMPARE(d.peak_bytes(), base + (size_t(64) << 20));
    d.release(block.value());
    d.reset_peak();
    QCOMPARE(d.peak_bytes(), base);
    const int BT = 4096, C = 1024, OC = 3072;
    Twin inp(d, randn(size_t(BT) * C, 1)), w(d, randn(size_t(C) * OC, 2, 0.2)), bias(d, randn(size_t(OC), 3)), out(d, size_t(BT) * OC);
    const size_t operands = d.peak_bytes();
    QVERIFY(d.set_precision(config::Precision::kBf16).ok());
    d.ops().matmul_forward(out.g(), inp.g(), w.g(), bias.g(), BT, C, OC, Layout::kInOut);
    QVERIFY(d.synchronize().ok());
    QVERIFY(d.set_precision(config::Precision::kFp32).ok());
    const size_t copies = (size_t(BT) * C + size_t(C) * OC) * 2;  // 8 + 6 MiB of bf16
    std::printf("peak: %zu bytes with the operands, %zu after the bf16 GEMM (copies %zu)\n", operands, d.peak_bytes(), copies);
    QVERIFY2(d.peak_bytes() >= operands + copies, "the GEMM's bf16 copies are counted");
    d.reset_peak();
    QVERIFY2(d.peak_bytes() >= operands + copies, "the scratch stays held after the GEMM");
  }

  void kernelsMatchTheCpu_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("C");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("OC");
    QTest::addColumn<int>("V");
    QTest::newRow("odd sizes") << 2 << 37 << 72 << 3 << 129 << 301;
    QTest::newRow("tiny") << 3 << 5 << 24 << 2 << 7 << 11;
    QTest::newRow("gpt-2 head size") << 1 << 128 << 256 << 4 << 1024 << 5000;
    QTest::newRow("head size 80, T above the tiles") << 2 << 161 << 240 << 3 << 64 << 50;
    QTest::newRow("head size 128") << 1 << 70 << 256 << 2 << 33 << 17;
  }
  void kernelsMatchTheCpu() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, C);
    QFETCH(int, NH);
    QFETCH(int, OC);
    QFETCH(int, V);
    Device& d = *gpu_;
    const Ops& cpu = cpu_ops();
    const Ops& gk = d.ops();
    const int BT = B * T, HS = C / NH;
    const size_t n = size_t(BT) * C;
    const double tol = 1e-5;
    auto check = [&](const char* what, const Twin& t) {
      QVERIFY2(d.synchronize().ok(), what);
      const double e = rel_err(t.back(d), t.host);
      QVERIFY2(e <= tol, qPrintable(QString("%1: relative error %2").arg(what).arg(e)));
    };
    // matmul, both layouts, bias, and backward with accumulation onto non-zero gradients.
    for (Layout layout : {Layout::kInOut, Layout::kOutIn}) {
      Twin inp(d, randn(n, 1)), w(d, randn(size_t(C) * OC, 2, 0.2)), bias(d, randn(size_t(OC), 3)), out(d, size_t(BT) * OC);
      cpu.matmul_forward(out.h(), inp.h(), w.h(), bias.h(), BT, C, OC, layout);
      gk.matmul_forward(out.g(), inp.g(), w.g(), bias.g(), BT, C, OC, layout);
      check("matmul_forward", out);
      Twin dout(d, randn(size_t(BT) * OC, 4)), dinp(d, n), dw(d, randn(size_t(C) * OC, 5)), db(d, randn(size_t(OC), 6));
      cpu.matmul_backward(dinp.h(), dw.h(), db.h(), dout.h(), inp.h(), w.h(), BT, C, OC, layout);
      gk.matmul_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), BT, C, OC, layout);
      check("matmul_backward dinp", dinp);
      check("matmul_backward dweight", dw);
      check("matmul_backward dbias", db);
      // bf16 and fp16 GEMM inputs, fp32 accumulation: within 1e-2 of the tensor's scale (bf16
      // keeps 8 bits of mantissa, fp16 11; these values are far inside fp16's range).
      for (const auto precision : {config::Precision::kBf16, config::Precision::kFp16}) {
        QVERIFY(d.set_precision(precision).ok());
        const Ops& bk = d.ops();
        Twin out16(d, size_t(BT) * OC), dinp16(d, n), dw16(d, dw.host);
        std::vector<float> dw_before = randn(size_t(C) * OC, 5);
        QVERIFY(d.copy_from_host(dw16.g(), dw_before.data(), dw_before.size() * sizeof(float)).ok());
        bk.matmul_forward(out16.g(), inp.g(), w.g(), bias.g(), BT, C, OC, layout);
        bk.matmul_backward(dinp16.g(), dw16.g(), nullptr, dout.g(), inp.g(), w.g(), BT, C, OC, layout);
        QVERIFY(d.set_precision(config::Precision::kFp32).ok());
        QVERIFY(d.synchronize().ok());
        out16.host = out.host;
        dinp16.host = dinp.host;
        dw16.host = dw.host;
        for (const Twin* t : {&out16, &dinp16, &dw16}) {
          const double e = rel_err(t->back(d), t->host);
          QVERIFY2(e <= 1e-2 && e > 0, qPrintable(QString("%1 matmul: relative error %2").arg(config::to_string(precision).data()).arg(e)));
        }
      }
    }
    {  // layernorm
      Twin inp(d, randn(n, 7, 2.0)), w(d, randn(size_t(C), 8)), b(d, randn(size_t(C), 9)), out(d, n), mean(d, size_t(BT)),
          rstd(d, size_t(BT));
      cpu.layernorm_forward(out.h(), mean.h(), rstd.h(), inp.h(), w.h(), b.h(), BT, C);
      gk.layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.g(), b.g(), BT, C);
      check("layernorm_forward out", out);
      check("layernorm_forward mean", mean);
      check("layernorm_forward rstd", rstd);
      Twin dout(d, randn(n, 10)), dinp(d, randn(n, 11)), dw(d, randn(size_t(C), 12)), db(d, randn(size_t(C), 13));
      cpu.layernorm_backward(dinp.h(), dw.h(), db.h(), dout.h(), inp.h(), w.h(), mean.h(), rstd.h(), BT, C);
      gk.layernorm_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), mean.g(), rstd.g(), BT, C);
      check("layernorm_backward dinp", dinp);
      check("layernorm_backward dweight", dw);
      check("layernorm_backward dbias", db);
    }
    // attention: multi-head (NKV = NH), and grouped-query over every NKV that divides NH (down to
    // one K/V head), q | k | v of (NH + 2 NKV) heads
    for (int NKV = NH; NKV >= 1; --NKV) {
      if (NH % NKV != 0) continue;
      const std::string heads = " (NH " + std::to_string(NH) + ", NKV " + std::to_string(NKV) + ")";
      auto named = [&](const char* what) { return std::string(what) + heads; };
      const size_t att = size_t(B) * NH * T * T, n3 = size_t(BT) * (NH + 2 * NKV) * HS;
      Twin qkv(d, randn(n3, 14)), out(d, n), a(d, att);
      cpu.attention_forward(out.h(), a.h(), qkv.h(), B, T, NH, HS, NKV);
      gk.attention_forward(out.g(), a.g(), qkv.g(), B, T, NH, HS, NKV);
      check(named("attention_forward out").c_str(), out);
      check(named("attention_forward att").c_str(), a);
      Twin dout(d, randn(n, 15)), dqkv(d, n3), cs(d, att), gs(d, att);
      cpu.attention_backward(dqkv.h(), cs.h(), dout.h(), qkv.h(), a.h(), B, T, NH, HS, NKV);
      gk.attention_backward(dqkv.g(), gs.g(), dout.g(), qkv.g(), a.g(), B, T, NH, HS, NKV);
      check(named("attention_backward").c_str(), dqkv);
      // bf16 and fp16 operands of the batched GEMMs (softmax in fp32): within a few bf16 roundings.
      for (const auto precision : {config::Precision::kBf16, config::Precision::kFp16}) {
        QVERIFY(d.set_precision(precision).ok());
        Twin bout(d, n), ba(d, att), bdqkv(d, n3), bs(d, att);
        d.ops().attention_forward(bout.g(), ba.g(), qkv.g(), B, T, NH, HS, NKV);
        d.ops().attention_backward(bdqkv.g(), bs.g(), dout.g(), qkv.g(), ba.g(), B, T, NH, HS, NKV);
        QVERIFY(d.set_precision(config::Precision::kFp32).ok());
        QVERIFY(d.synchronize().ok());
        const double eo = rel_err(bout.back(d), out.host), eg = rel_err(bdqkv.back(d), dqkv.host);
        QVERIFY2(eo > 0 && eo <= 3e-2 && eg > 0 && eg <= 5e-2,
                 qPrintable(QString("16-bit attention%1: out %2, dqkv %3").arg(heads.c_str()).arg(eo).arg(eg)));
      }
      // Fused: the same out and dqkv, with (B, NH, T) log-sum-exps instead of the probabilities.
      QVERIFY(gk.has_flash_attention());
      Twin fout(d, n), lse(d, size_t(B) * NH * T), fdqkv(d, n3), delta(d, size_t(B) * NH * T);
      gk.flash_attention_forward(fout.g(), lse.g(), qkv.g(), B, T, NH, HS, NKV);
      fout.host = out.host;
      check(named("flash_attention_forward").c_str(), fout);
      gk.flash_attention_backward(fdqkv.g(), delta.g(), dout.g(), qkv.g(), fout.g(), lse.g(), B, T, NH, HS, NKV);
      fdqkv.host = dqkv.host;
      check(named("flash_attention_backward").c_str(), fdqkv);
    }
    {  // RMSNorm, its gradients accumulating onto non-zero ones
      Twin inp(d, randn(n, 80, 2.0)), w(d, randn(size_t(C), 81)), out(d, n), rstd(d, size_t(BT));
      cpu.rmsnorm_forward(out.h(), rstd.h(), inp.h(), w.h(), BT, C, 1e-6f);
      gk.rmsnorm_forward(out.g(), rstd.g(), inp.g(), w.g(), BT, C, 1e-6f);
      check("rmsnorm_forward out", out);
      check("rmsnorm_forward rstd", rstd);
      Twin dout(d, randn(n, 82)), dinp(d, randn(n, 83)), dw(d, randn(size_t(C), 84));
      cpu.rmsnorm_backward(dinp.h(), dw.h(), dout.h(), inp.h(), w.h(), rstd.h(), BT, C);
      gk.rmsnorm_backward(dinp.g(), dw.g(), dout.g(), inp.g(), w.g(), rstd.g(), BT, C);
      check("rmsnorm_backward dinp", dinp);
      check("rmsnorm_backward dweight", dw);
    }
    {  // rotary positions on q and k of (NH + 2 NKV) heads, v untouched; the backward undoes them
      const int NKV = NH % 2 == 0 ? NH / 2 : NH;
      const std::vector<float> x = randn(size_t(BT) * (NH + 2 * NKV) * HS, 85);
      Twin qkv(d, x);
      cpu.rope_forward(qkv.h(), B, T, NH, NKV, HS, 10000.0f);
      gk.rope_forward(qkv.g(), B, T, NH, NKV, HS, 10000.0f);
      check("rope_forward", qkv);
      for (size_t r = 0; r < size_t(BT); ++r) {  // v as it was, bit for bit
        const size_t v0 = r * (NH + 2 * NKV) * HS + size_t(NH + NKV) * HS;
        QVERIFY2(std::equal(x.begin() + v0, x.begin() + v0 + size_t(NKV) * HS, qkv.host.begin() + v0), "rope_forward moved v");
      }
      cpu.rope_backward(qkv.h(), B, T, NH, NKV, HS, 10000.0f);
      gk.rope_backward(qkv.g(), B, T, NH, NKV, HS, 10000.0f);
      check("rope_backward", qkv);
      const double e = rel_err(qkv.back(d), x);  // a rotation and its inverse: x up to rounding
      QVERIFY2(e <= 1e-5, qPrintable(QString("rope_backward after rope_forward: relative error %1 from the input").arg(e)));
    }
    {  // rotary positions of a block that starts at position 7 (context parallelism)
      const int NKV = NH;
      Twin qkv(d, randn(size_t(BT) * 3 * NH * HS, 88));
      cpu.rope_forward(qkv.h(), B, T, NH, NKV, HS, 10000.0f, 7);
      gk.rope_forward(qkv.g(), B, T, NH, NKV, HS, 10000.0f, 7);
      check("rope_forward from position 7", qkv);
      cpu.rope_backward(qkv.h(), B, T, NH, NKV, HS, 10000.0f, 7);
      gk.rope_backward(qkv.g(), B, T, NH, NKV, HS, 10000.0f, 7);
      check("rope_backward from position 7", qkv);
    }
    // Context parallelism's block attention (kernels.h): queries at positions T/2 .. against keys
    // at 0 .. (partly seen), merged with a block of later keys (none seen) and one of earlier keys
    // (all seen), multi-head and one K/V head; the backward of each pair accumulating.
    for (int NKV : {NH, 1}) {
      const std::string heads = " (NH " + std::to_string(NH) + ", NKV " + std::to_string(NKV) + ")";
      auto named = [&](const char* what) { return std::string(what) + heads; };
      const size_t nq = size_t(BT) * NH * HS, nkv = size_t(BT) * 2 * NKV * HS, nl = size_t(B) * NH * T;
      const size_t Tn = static_cast<size_t>(T);
      std::vector<int32_t> qp(Tn), kp(Tn), later(Tn), earlier(Tn);
      for (int t = 0; t < T; ++t) {
        qp[size_t(t)] = 2 * T + T / 2 + t;
        kp[size_t(t)] = 2 * T + t;
        later[size_t(t)] = 4 * T + t;
        earlier[size_t(t)] = t;
      }
      Ints q_pos(d, qp), k_pos(d, kp), later_pos(d, later), earlier_pos(d, earlier);
      Twin q(d, randn(nq, 90)), kv(d, randn(nkv, 91)), kv2(d, randn(nkv, 92)), kv3(d, randn(nkv, 93));
      Twin out(d, nq), lse(d, nl), out2(d, nq), lse2(d, nl);
      cpu.attention_block_forward(out.h(), lse.h(), q.h(), kv.h(), q_pos.host.data(), k_pos.host.data(), B, T, T, NH, HS, NKV);
      gk.attention_block_forward(out.g(), lse.g(), q.g(), kv.g(), q_pos.dev.data(), k_pos.dev.data(), B, T, T, NH, HS, NKV);
      check(named("attention_block_forward out").c_str(), out);
      check(named("attention_block_forward lse").c_str(), lse);
      for (const Ints* kpos : {&later_pos, &earlier_pos}) {
        const Twin& other = kpos == &later_pos ? kv2 : kv3;
        cpu.attention_block_forward(out2.h(), lse2.h(), q.h(), const_cast<Twin&>(other).h(), q_pos.host.data(), kpos->host.data(), B, T, T, NH,
                                    HS, NKV);
        gk.attention_block_forward(out2.g(), lse2.g(), q.g(), const_cast<Twin&>(other).g(), q_pos.dev.data(), const_cast<Ints*>(kpos)->dev.data(),
                                   B, T, T, NH, HS, NKV);
        if (kpos == &earlier_pos) check(named("attention_block_forward, every key seen").c_str(), out2);
        cpu.attention_block_merge(out.h(), lse.h(), out2.h(), lse2.h(), B, T, NH, HS);
        gk.attention_block_merge(out.g(), lse.g(), out2.g(), lse2.g(), B, T, NH, HS);
        check(named("attention_block_merge out").c_str(), out);
        check(named("attention_block_merge lse").c_str(), lse);
      }
      Twin dout(d, randn(nq, 94)), dq(d, randn(nq, 95)), dkv(d, randn(nkv, 96)), dkv3(d, randn(nkv, 97));
      for (int pair = 0; pair < 2; ++pair) {
        Twin& keys = pair == 0 ? kv : kv3;
        Twin& dkeys = pair == 0 ? dkv : dkv3;
        Ints& kpos = pair == 0 ? k_pos : earlier_pos;
        cpu.attention_block_backward(dq.h(), dkeys.h(), dout.h(), q.h(), keys.h(), out.h(), lse.h(), q_pos.host.data(), kpos.host.data(), B, T, T,
                                     NH, HS, NKV);
        gk.attention_block_backward(dq.g(), dkeys.g(), dout.g(), q.g(), keys.g(), out.g(), lse.g(), q_pos.dev.data(), kpos.dev.data(), B, T, T,
                                    NH, HS, NKV);
      }
      check(named("attention_block_backward dq").c_str(), dq);
      check(named("attention_block_backward dkv, partly seen").c_str(), dkv);
      check(named("attention_block_backward dkv, all seen").c_str(), dkv3);
    }
    {  // copy_columns: a column range of every row, fp32 to fp32 and through bf16
      const int ld_src = C, ld_dst = C + 3, width = C / 2;
      Twin src(d, randn(size_t(BT) * ld_src, 98)), dst(d, randn(size_t(BT) * ld_dst, 99));
      cpu.copy_columns(dst.h() + 1, ld_dst, src.h() + 2, ld_src, BT, width);
      gk.copy_columns(dst.g() + 1, ld_dst, src.g() + 2, ld_src, BT, width);
      check("copy_columns", dst);
      Low16 low(d, size_t(BT) * width);
      cpu.copy_columns(low.h(), width, src.h(), ld_src, BT, width);
      gk.copy_columns(low.g(), width, src.g(), ld_src, BT, width);
      QVERIFY(d.synchronize().ok());
      QVERIFY2(low.back(d) == Low16::wide(low.host), "copy_columns to bf16 differs from the CPU's rounding");
    }
    {  // SwiGLU over (BT, 2 OC) = gate | up
      const size_t nf = size_t(BT) * OC;
      Twin x(d, randn(2 * nf, 86, 3.0)), y(d, nf), dy(d, randn(nf, 87)), dx(d, 2 * nf);
      cpu.swiglu_forward(y.h(), x.h(), BT, OC);
      gk.swiglu_forward(y.g(), x.g(), BT, OC);
      check("swiglu_forward", y);
      cpu.swiglu_backward(dx.h(), x.h(), dy.h(), BT, OC);
      gk.swiglu_backward(dx.g(), x.g(), dy.g(), BT, OC);
      check("swiglu_backward", dx);
    }
    {  // mixture of experts: rows gathered (a negative index: zeros), summed into their tokens in
       // order (the CPU's bits: no atomics), row-wise dots (summed in double on both)
      const int R = BT + 3, K = 2, IN = BT;
      std::vector<int32_t> gidx(static_cast<size_t>(R)), sidx(static_cast<size_t>(BT) * K);
      for (int r = 0; r < R; ++r) gidx[size_t(r)] = r % 7 == 2 ? -1 : (r * 5) % IN;
      for (int s = 0; s < BT * K; ++s) sidx[size_t(s)] = s % 5 == 1 ? -1 : (s * 3) % R;
      Ints gi(d, gidx), si(d, sidx);
      Twin in(d, randn(size_t(IN) * C, 91)), w(d, randn(size_t(R), 92)), rows(d, size_t(R) * C), wk(d, randn(size_t(BT) * K, 93)),
          out(d, randn(n, 94)), other(d, randn(size_t(R) * C, 95)), dots(d, size_t(R));
      for (const float* weight : {static_cast<const float*>(nullptr), static_cast<const float*>(w.g())}) {
        cpu.gather_rows(rows.h(), in.h(), gi.host.data(), weight ? w.h() : nullptr, R, C);
        gk.gather_rows(rows.g(), in.g(), gi.dev.data(), weight, R, C);
        check("gather_rows", rows);
      }
      cpu.scatter_add_rows(out.h(), rows.h(), si.host.data(), wk.h(), BT, K, C);
      gk.scatter_add_rows(out.g(), rows.g(), si.dev.data(), wk.g(), BT, K, C);
      check("scatter_add_rows", out);
      cpu.row_dot(dots.h(), rows.h(), other.h(), R, C);
      gk.row_dot(dots.g(), rows.g(), other.g(), R, C);
      check("row_dot", dots);
    }
    {  // GELU, residual
      Twin x(d, randn(n, 16, 3.0)), y(d, n), dy(d, randn(n, 17)), dx(d, n);
      cpu.gelu_forward(y.h(), x.h(), n);
      gk.gelu_forward(y.g(), x.g(), n);
      check("gelu_forward", y);
      cpu.gelu_backward(dx.h(), x.h(), dy.h(), n);
      gk.gelu_backward(dx.g(), x.g(), dy.g(), n);
      check("gelu_backward", dx);
      Twin r(d, n), a1(d, randn(n, 18)), a2(d, randn(n, 19));
      cpu.residual_forward(r.h(), x.h(), dy.h(), n);
      gk.residual_forward(r.g(), x.g(), dy.g(), n);
      check("residual_forward", r);
      cpu.residual_backward(a1.h(), a2.h(), dy.h(), n);
      gk.residual_backward(a1.g(), a2.g(), dy.g(), n);
      check("residual_backward 1", a1);
      check("residual_backward 2", a2);
    }
    {  // embeddings, with repeated tokens
      Ints tok(d, tokens_of(size_t(BT), std::min(V, 7), 20));
      Twin wte(d, randn(size_t(V) * C, 21)), wpe(d, randn(size_t(T) * C, 22)), out(d, n);
      cpu.encoder_forward(out.h(), tok.host.data(), wte.h(), wpe.h(), B, T, C);
      gk.encoder_forward(out.g(), tok.dev.data(), wte.g(), wpe.g(), B, T, C);
      check("encoder_forward", out);
      Twin dout(d, randn(n, 23)), dwte(d, randn(size_t(V) * C, 24)), dwpe(d, randn(size_t(T) * C, 25));
      cpu.encoder_backward(dwte.h(), dwpe.h(), dout.h(), tok.host.data(), B, T, C);
      gk.encoder_backward(dwte.g(), dwpe.g(), dout.g(), tok.dev.data(), B, T, C);
      check("encoder_backward dwte", dwte);
      check("encoder_backward dwpe", dwpe);
      // The same order of additions as the CPU's (rows ascending onto the existing gradient).
      QVERIFY2(dwte.back(d) == dwte.host, "encoder_backward dwte: not the CPU's bits");
      QVERIFY2(dwpe.back(d) == dwpe.host, "encoder_backward dwpe: not the CPU's bits");
      // Without learned positions (Llama): out is wte's rows, and only dwte gets a gradient.
      Twin tout(d, n), tdwte(d, randn(size_t(V) * C, 26));
      cpu.encoder_forward(tout.h(), tok.host.data(), wte.h(), nullptr, B, T, C);
      gk.encoder_forward(tout.g(), tok.dev.data(), wte.g(), nullptr, B, T, C);
      QVERIFY(d.synchronize().ok());
      QVERIFY2(tout.back(d) == tout.host, "encoder_forward without wpe: not the CPU's bits");
      cpu.encoder_backward(tdwte.h(), nullptr, dout.h(), tok.host.data(), B, T, C);
      gk.encoder_backward(tdwte.g(), nullptr, dout.g(), tok.dev.data(), B, T, C);
      QVERIFY(d.synchronize().ok());
      QVERIFY2(tdwte.back(d) == tdwte.host, "encoder_backward without wpe: not the CPU's bits");
    }
    {  // cross-entropy, probs aliasing logits as the stage calls it
      Ints tgt(d, tokens_of(size_t(BT), V, 26));
      Twin logits(d, randn(size_t(BT) * V, 27, 4.0)), losses(d, size_t(BT));
      const double lc = cpu.crossentropy_forward(losses.h(), logits.h(), logits.h(), tgt.host.data(), BT, V);
      const double lg = gk.crossentropy_forward(losses.g(), logits.g(), logits.g(), tgt.dev.data(), BT, V);
      QVERIFY2(close(lc, lg, tol), qPrintable(QString("mean loss %1 vs %2").arg(lc, 0, 'g', 10).arg(lg, 0, 'g', 10)));
      check("crossentropy_forward losses", losses);
      check("crossentropy_forward probs", logits);
      const float dloss = 1.0f / float(BT);
      cpu.crossentropy_backward(logits.h(), logits.h(), tgt.host.data(), dloss, BT, V);
      gk.crossentropy_backward(logits.g(), logits.g(), tgt.dev.data(), dloss, BT, V);
      check("crossentropy_backward", logits);
      // Both in one pass, the gradient over the logits as the stage calls it: the two calls'
      // results within float rounding (the online softmax sums in another order).
      Twin flogits(d, randn(size_t(BT) * V, 27, 4.0)), flosses(d, size_t(BT));
      const double lf = gk.crossentropy_forward_backward(flosses.g(), flogits.g(), flogits.g(), tgt.dev.data(), dloss, BT, V);
      QVERIFY2(close(lc, lf, tol), qPrintable(QString("fused mean loss %1 vs %2").arg(lc, 0, 'g', 10).arg(lf, 0, 'g', 10)));
      flosses.host = losses.host;
      flogits.host = logits.host;  // the CPU's gradient
      check("crossentropy_forward_backward losses", flosses);
      check("crossentropy_forward_backward dlogits", flogits);
    }
    {  // AdamW, norm, scale
      Twin p(d, randn(n, 28)), m(d, randn(n, 29, 0.1)), v(d, randn(n, 30, 0.0)), g(d, randn(n, 31));
      for (auto& x : v.host) x = 0.01f;
      QVERIFY(d.copy_from_host(v.g(), v.h(), n * sizeof(float)).ok());
      AdamWOptions opt;
      opt.lr = 1e-3f;
      cpu.adamw_update(p.h(), m.h(), v.h(), g.h(), n, opt, 3, true, 0.7f);
      gk.adamw_update(p.g(), m.g(), v.g(), g.g(), n, opt, 3, true, 0.7f);
      check("adamw params", p);
      check("adamw m", m);
      check("adamw v", v);
      const double sc = cpu.sum_of_squares(g.h(), n), sg = gk.sum_of_squares(g.g(), n);
      QVERIFY2(close(sc, sg, 1e-12), qPrintable(QString("sum of squares %1 vs %2").arg(sc, 0, 'g', 17).arg(sg, 0, 'g', 17)));
      cpu.scale(g.h(), n, 0.25f);
      gk.scale(g.g(), n, 0.25f);
      check("scale", g);
    }
  }

  // bf16 activations (ops.h's ActIn, ActOut), in the fp32 and the bf16 table: the kernels that
  // write them against the CPU's (within one bf16 rounding of the tensor's scale: the two fp32
  // results may round to neighbours), the fused attention writing and reading one, and GEMMs
  // reading one (fp32 table: the CPU's result within 1e-5; bf16 table: within 1e-2).
  void bf16ActivationKernelsMatchTheCpu_data() {
    QTest::addColumn<int>("precision");
    QTest::newRow("fp32 table") << int(config::Precision::kFp32);
    QTest::newRow("bf16 table") << int(config::Precision::kBf16);
  }
  void bf16ActivationKernelsMatchTheCpu() {
    QFETCH(int, precision);
    const auto p = static_cast<config::Precision>(precision);
    Device& d = *gpu_;
    const Ops& cpu = cpu_ops();
    QVERIFY(d.set_precision(p).ok());
    const Ops& gk = d.ops();
    const int B = 2, T = 45, C = 96, NH = 3, HS = C / NH, OC = 77, BT = B * T;
    const size_t n = size_t(BT) * C;
    const double one_rounding = 1.0 / 128;  // 2^-7: a bf16 step at the top of a binade, with margin
    auto check = [&](const char* what, const std::vector<float>& got, const std::vector<float>& want, double tol) {
      const double e = rel_err(got, want);
      QVERIFY2(e <= tol, qPrintable(QString("%1 (%2): relative error %3").arg(what, config::to_string(p).data()).arg(e)));
    };
    {  // layernorm and GELU
      Twin x(d, randn(n, 40, 2.0)), w(d, randn(size_t(C), 41)), b(d, randn(size_t(C), 42)), mean(d, size_t(BT)), rstd(d, size_t(BT));
      Low16 out(d, n), y(d, n);
      cpu.layernorm_forward(out.h(), mean.h(), rstd.h(), x.h(), w.h(), b.h(), BT, C);
      gk.layernorm_forward(out.g(), mean.g(), rstd.g(), x.g(), w.g(), b.g(), BT, C);
      cpu.gelu_forward(y.h(), x.h(), n);
      gk.gelu_forward(y.g(), x.g(), n);
      Twin dy(d, randn(n, 55));
      Low16 dx(d, n);
      cpu.gelu_backward(dx.h(), x.h(), dy.h(), n);
      gk.gelu_backward(dx.g(), x.g(), dy.g(), n);
      QVERIFY(d.synchronize().ok());
      check("gelu_backward bf16 out", dx.back(d), Low16::wide(dx.host), one_rounding);
      Low16 x16(d, x.host), y2(d, n);
      Twin dx2(d, n);
      cpu.gelu_forward(y2.h(), x16.h(), n);
      gk.gelu_forward(y2.g(), x16.g(), n);
      cpu.gelu_backward(dx2.h(), x16.h(), dy.h(), n);
      gk.gelu_backward(dx2.g(), x16.g(), dy.g(), n);
      QVERIFY(d.synchronize().ok());
      check("gelu_forward bf16 in and out", y2.back(d), Low16::wide(y2.host), one_rounding);
      check("gelu_backward bf16 in", dx2.back(d), dx2.host, 1e-5);
      // A bf16 gradient at GELU's output turned in place into the one at its input.
      Low16 g16(d, dy.host);
      cpu.gelu_backward(g16.h(), x16.h(), g16.h(), n);
      gk.gelu_backward(g16.g(), x16.g(), g16.g(), n);
      QVERIFY(d.synchronize().ok());
      check("gelu_backward bf16 in place", g16.back(d), Low16::wide(g16.host), one_rounding);
      check("layernorm_forward bf16 out", out.back(d), Low16::wide(out.host), one_rounding);
      check("layernorm_forward mean", mean.back(d), mean.host, 1e-5);
      // The backward's bf16 copy of its accumulated dinp (the residual gradient c_proj reads).
      Twin ldy(d, randn(n, 56)), ldx(d, randn(n, 57)), ldw(d, size_t(C)), ldb(d, size_t(C));
      Low16 llow(d, n);
      cpu.layernorm_backward(ldx.h(), ldw.h(), ldb.h(), ldy.h(), x.h(), w.h(), mean.h(), rstd.h(), BT, C, llow.h());
      gk.layernorm_backward(ldx.g(), ldw.g(), ldb.g(), ldy.g(), x.g(), w.g(), mean.g(), rstd.g(), BT, C, llow.g());
      QVERIFY(d.synchronize().ok());
      check("layernorm_backward dinp beside its bf16 copy", ldx.back(d), ldx.host, 1e-5);
      check("layernorm_backward dinp's bf16 copy", llow.back(d), Low16::wide(llow.host), one_rounding);
      check("gelu_forward bf16 out", y.back(d), Low16::wide(y.host), one_rounding);
    }
    {  // RMSNorm writing bf16, and its backward's bf16 copy of dinp
      Twin x(d, randn(n, 100, 2.0)), w(d, randn(size_t(C), 101)), rstd(d, size_t(BT));
      Low16 out(d, n);
      cpu.rmsnorm_forward(out.h(), rstd.h(), x.h(), w.h(), BT, C, 1e-5f);
      gk.rmsnorm_forward(out.g(), rstd.g(), x.g(), w.g(), BT, C, 1e-5f);
      Twin dy(d, randn(n, 102)), dx(d, randn(n, 103)), dw(d, randn(size_t(C), 104));
      Low16 low(d, n);
      cpu.rmsnorm_backward(dx.h(), dw.h(), dy.h(), x.h(), w.h(), rstd.h(), BT, C, low.h());
      gk.rmsnorm_backward(dx.g(), dw.g(), dy.g(), x.g(), w.g(), rstd.g(), BT, C, low.g());
      QVERIFY(d.synchronize().ok());
      check("rmsnorm_forward bf16 out", out.back(d), Low16::wide(out.host), one_rounding);
      check("rmsnorm_forward rstd", rstd.back(d), rstd.host, 1e-5);
      check("rmsnorm_backward dinp beside its bf16 copy", dx.back(d), dx.host, 1e-5);
      check("rmsnorm_backward dinp's bf16 copy", low.back(d), Low16::wide(low.host), one_rounding);
      check("rmsnorm_backward dweight", dw.back(d), dw.host, 1e-5);
    }
    {  // rotary positions in place on a bf16 qkv (three query heads, one K/V head), and back
      Low16 qkv(d, randn(size_t(BT) * (NH + 2) * HS, 105));
      cpu.rope_forward(qkv.h(), B, T, NH, 1, HS, 500000.0f);
      gk.rope_forward(qkv.g(), B, T, NH, 1, HS, 500000.0f);
      QVERIFY(d.synchronize().ok());
      check("rope_forward bf16", qkv.back(d), Low16::wide(qkv.host), one_rounding);
      cpu.rope_backward(qkv.h(), B, T, NH, 1, HS, 500000.0f);
      gk.rope_backward(qkv.g(), B, T, NH, 1, HS, 500000.0f);
      QVERIFY(d.synchronize().ok());
      check("rope_backward bf16", qkv.back(d), Low16::wide(qkv.host), one_rounding);
    }
    {  // SwiGLU reading bf16 gate | up (BT, 2 OC) and writing bf16; its backward from a bf16
       // gradient into bf16 and into fp32
      const size_t nf = size_t(BT) * OC;
      Low16 x(d, randn(2 * nf, 106, 3.0)), y(d, nf), dy(d, randn(nf, 107)), dx(d, 2 * nf);
      Twin dxw(d, 2 * nf);
      cpu.swiglu_forward(y.h(), x.h(), BT, OC);
      gk.swiglu_forward(y.g(), x.g(), BT, OC);
      cpu.swiglu_backward(dx.h(), x.h(), dy.h(), BT, OC);
      gk.swiglu_backward(dx.g(), x.g(), dy.g(), BT, OC);
      cpu.swiglu_backward(dxw.h(), x.h(), dy.h(), BT, OC);
      gk.swiglu_backward(dxw.g(), x.g(), dy.g(), BT, OC);
      QVERIFY(d.synchronize().ok());
      check("swiglu_forward bf16", y.back(d), Low16::wide(y.host), one_rounding);
      check("swiglu_backward bf16", dx.back(d), Low16::wide(dx.host), one_rounding);
      check("swiglu_backward bf16 in, fp32 out", dxw.back(d), dxw.host, 1e-5);
    }
    // attention, standard and fused, writing bf16; the fused backward reading it: multi-head, and
    // grouped-query with one K/V head for the three query heads
    for (const int NKV : {NH, 1}) {
      const std::string heads = " (NKV " + std::to_string(NKV) + ")";
      auto named = [&](const char* what) { return std::string(what) + heads; };
      const size_t att = size_t(B) * NH * T * T, n3 = size_t(BT) * (NH + 2 * NKV) * HS;
      Twin qkv(d, randn(n3, 43)), a(d, att), lse(d, size_t(B) * NH * T), dout(d, randn(n, 44)), dqkv(d, n3),
          fdqkv(d, n3), scratch(d, att), delta(d, size_t(B) * NH * T);
      Low16 out(d, n), fout(d, n);
      cpu.attention_forward(out.h(), a.h(), qkv.h(), B, T, NH, HS, NKV);
      gk.attention_forward(out.g(), a.g(), qkv.g(), B, T, NH, HS, NKV);
      gk.flash_attention_forward(fout.g(), lse.g(), qkv.g(), B, T, NH, HS, NKV);
      cpu.attention_backward(dqkv.h(), scratch.h(), dout.h(), qkv.h(), a.h(), B, T, NH, HS, NKV);
      gk.flash_attention_backward(fdqkv.g(), delta.g(), dout.g(), qkv.g(), fout.g(), lse.g(), B, T, NH, HS, NKV);
      QVERIFY(d.synchronize().ok());
      const double gemm16 = p == config::Precision::kFp32 ? one_rounding : 3e-2;  // bf16 table: 16-bit batched GEMMs too
      check(named("attention_forward bf16 out").c_str(), out.back(d), Low16::wide(out.host), gemm16);
      check(named("flash_attention_forward bf16 out").c_str(), fout.back(d), Low16::wide(out.host), one_rounding);
      check(named("flash_attention_backward from a bf16 out").c_str(), fdqkv.back(d), dqkv.host, 2e-2);
      // q k v in bf16: both attentions against the CPU's on the same bf16 values.
      Low16 q16(d, qkv.host), out2(d, n), fout2(d, n);
      Twin a2(d, att), lse2(d, size_t(B) * NH * T), dqkv2(d, n3), fdqkv2(d, n3);
      cpu.attention_forward(out2.h(), a2.h(), q16.h(), B, T, NH, HS, NKV);
      gk.attention_forward(out2.g(), a2.g(), q16.g(), B, T, NH, HS, NKV);
      gk.flash_attention_forward(fout2.g(), lse2.g(), q16.g(), B, T, NH, HS, NKV);
      cpu.attention_backward(dqkv2.h(), scratch.h(), dout.h(), q16.h(), a2.h(), B, T, NH, HS, NKV);
      gk.attention_backward(dqkv2.g(), scratch.g(), dout.g(), q16.g(), a2.g(), B, T, NH, HS, NKV);
      gk.flash_attention_backward(fdqkv2.g(), delta.g(), dout.g(), q16.g(), fout2.g(), lse2.g(), B, T, NH, HS, NKV);
      QVERIFY(d.synchronize().ok());
      check(named("attention_forward bf16 qkv").c_str(), out2.back(d), Low16::wide(out2.host), gemm16);
      // On tensor cores (HS 32): P rounded to bf16 before P V as well, so within the issue's 1e-2.
      QCOMPARE(on_tensor_cores(true, HS), !tensor_cores_turned_off());
      check(named("flash_attention_forward bf16 qkv").c_str(), fout2.back(d), Low16::wide(out2.host), 1e-2);
      check(named("attention_backward bf16 qkv").c_str(), dqkv2.back(d), dqkv2.host, p == config::Precision::kFp32 ? 1e-5 : 5e-2);
      check(named("flash_attention_backward bf16 qkv").c_str(), fdqkv2.back(d), dqkv2.host, 2e-2);
      // The gradients at the output and at q k v in bf16 too (GptStage's bf16 path), and the
      // fused backward with only dout in bf16 (CudaOps stages that mix).
      Low16 dout16(d, dout.host), dq16(d, n3), fdq16(d, n3);
      Twin dqw(d, n3), fdqw(d, n3);
      cpu.attention_backward(dq16.h(), scratch.h(), dout16.h(), q16.h(), a2.h(), B, T, NH, HS, NKV);
      cpu.attention_backward(dqw.h(), scratch.h(), dout16.h(), q16.h(), a2.h(), B, T, NH, HS, NKV);
      gk.attention_backward(dq16.g(), scratch.g(), dout16.g(), q16.g(), a2.g(), B, T, NH, HS, NKV);
      gk.flash_attention_backward(fdq16.g(), delta.g(), dout16.g(), q16.g(), fout2.g(), lse2.g(), B, T, NH, HS, NKV);
      gk.flash_attention_backward(fdqw.g(), delta.g(), dout16.g(), q16.g(), fout2.g(), lse2.g(), B, T, NH, HS, NKV);
      QVERIFY(d.synchronize().ok());
      check(named("attention_backward bf16 dout and dqkv").c_str(), dq16.back(d), Low16::wide(dq16.host),
            p == config::Precision::kFp32 ? one_rounding : 5e-2);
      check(named("flash_attention_backward bf16 dout and dqkv").c_str(), fdq16.back(d), Low16::wide(dq16.host), 2e-2);
      check(named("flash_attention_backward bf16 dout, fp32 dqkv").c_str(), fdqw.back(d), dqw.host, 2e-2);
    }
    {  // GEMMs reading a bf16 input, with the fp32 weight and with its bf16 copy
      const std::vector<float> x = randn(n, 45);
      Low16 in(d, x);
      for (Layout layout : {Layout::kInOut, Layout::kOutIn}) {
        const std::vector<float> wv = randn(size_t(C) * OC, 46, 0.2);
        Twin w(d, wv), bias(d, randn(size_t(OC), 47)), out(d, size_t(BT) * OC), dout(d, randn(size_t(BT) * OC, 48)),
            dw(d, randn(size_t(C) * OC, 49)), out2(d, size_t(BT) * OC), dinp2(d, n);
        Low16 wl(d, wv);
        cpu.matmul_forward(out.h(), in.h(), w.h(), bias.h(), BT, C, OC, layout);
        gk.matmul_forward(out.g(), in.g(), w.g(), bias.g(), BT, C, OC, layout);
        cpu.matmul_backward(nullptr, dw.h(), nullptr, dout.h(), in.h(), w.h(), BT, C, OC, layout);
        gk.matmul_backward(nullptr, dw.g(), nullptr, dout.g(), in.g(), w.g(), BT, C, OC, layout);
        cpu.matmul_forward(out2.h(), in.h(), wl.h(), bias.h(), BT, C, OC, layout);
        gk.matmul_forward(out2.g(), in.g(), wl.g(), bias.g(), BT, C, OC, layout);
        Low16 dl(d, dout.host);
        Twin db(d, randn(size_t(OC), 51)), dw2(d, randn(size_t(C) * OC, 52));
        cpu.matmul_backward(dinp2.h(), dw2.h(), db.h(), dl.h(), in.h(), wl.h(), BT, C, OC, layout);
        gk.matmul_backward(dinp2.g(), dw2.g(), db.g(), dl.g(), in.g(), wl.g(), BT, C, OC, layout);
        QVERIFY(d.synchronize().ok());
        const double tol = p == config::Precision::kFp32 ? 1e-5 : 1e-2;
        check("matmul_forward from bf16", out.back(d), out.host, tol);
        check("matmul_backward dweight from bf16", dw.back(d), dw.host, tol);
        check("matmul_forward with bf16 weights", out2.back(d), out2.host, tol);
        // Adding the residual stream in the GEMM (bf16 table: cuBLASLt's C input with beta 1,
        // fp32 bias and output), into another buffer and in place.
        Twin res(d, randn(size_t(BT) * OC, 53)), withres(d, size_t(BT) * OC), inplace(d, res.host);
        cpu.matmul_forward(withres.h(), in.h(), wl.h(), bias.h(), BT, C, OC, layout, res.h());
        gk.matmul_forward(withres.g(), in.g(), wl.g(), bias.g(), BT, C, OC, layout, res.g());
        cpu.matmul_forward(inplace.h(), in.h(), wl.h(), bias.h(), BT, C, OC, layout, inplace.h());
        gk.matmul_forward(inplace.g(), in.g(), wl.g(), bias.g(), BT, C, OC, layout, inplace.g());
        QVERIFY(d.synchronize().ok());
        check("matmul_forward with a residual", withres.back(d), withres.host, tol);
        check("matmul_forward with a residual, in place", inplace.back(d), inplace.host, tol);
        check("matmul_backward dinp, all bf16", dinp2.back(d), dinp2.host, tol);
        check("matmul_backward dweight, all bf16", dw2.back(d), dw2.host, tol);
        check("matmul_backward dbias from a bf16 gradient", db.back(d), db.host, 1e-5);
        // dinp written in bf16 (bf16 table: by cuBLAS as it stores).
        Low16 di16(d, n);
        cpu.matmul_backward(di16.h(), nullptr, nullptr, dl.h(), in.h(), wl.h(), BT, C, OC, layout);
        gk.matmul_backward(di16.g(), nullptr, nullptr, dl.g(), in.g(), wl.g(), BT, C, OC, layout);
        QVERIFY(d.synchronize().ok());
        check("matmul_backward bf16 dinp", di16.back(d), Low16::wide(di16.host), p == config::Precision::kFp32 ? one_rounding : 1e-2);
        // A bf16 output with a bf16 bias (bf16 table: cuBLASLt's all-bf16 combination where it
        // has an algorithm).
        Low16 bl(d, bias.host), out16(d, size_t(BT) * OC);
        cpu.matmul_forward(out16.h(), in.h(), wl.h(), bl.h(), BT, C, OC, layout);
        gk.matmul_forward(out16.g(), in.g(), wl.g(), bl.g(), BT, C, OC, layout);
        QVERIFY(d.synchronize().ok());
        check("matmul_forward bf16 out", out16.back(d), Low16::wide(out16.host), p == config::Precision::kFp32 ? one_rounding : 1e-2);
        // With GELU after it (bf16 table: cuBLASLt's GELU epilogue where it has an algorithm).
        Low16 pre(d, size_t(BT) * OC), act(d, size_t(BT) * OC);
        cpu.matmul_gelu_forward(pre.h(), act.h(), in.h(), wl.h(), bl.h(), BT, C, OC, layout);
        gk.matmul_gelu_forward(pre.g(), act.g(), in.g(), wl.g(), bl.g(), BT, C, OC, layout);
        QVERIFY(d.synchronize().ok());
        check("matmul_gelu_forward GELU's input", pre.back(d), Low16::wide(pre.host), p == config::Precision::kFp32 ? one_rounding : 1e-2);
        check("matmul_gelu_forward GELU's output", act.back(d), Low16::wide(act.host), p == config::Precision::kFp32 ? one_rounding : 1e-2);
      }
    }
    {  // the loss's gradient at the logits in bf16
      const int V = 301;
      Ints tgt(d, tokens_of(size_t(BT), V, 53));
      Twin probs(d, randn(size_t(BT) * V, 54, 0.01));
      Low16 dl(d, size_t(BT) * V);
      cpu.crossentropy_backward(dl.h(), probs.h(), tgt.host.data(), 1.0f / BT, BT, V);
      gk.crossentropy_backward(dl.g(), probs.g(), tgt.dev.data(), 1.0f / BT, BT, V);
      QVERIFY(d.synchronize().ok());
      check("crossentropy_backward bf16 out", dl.back(d), Low16::wide(dl.host), 0.0);
      // In one pass from the logits, into bf16 (a few elements may round the other way).
      Twin logits(d, randn(size_t(BT) * V, 55, 4.0)), losses(d, size_t(BT));
      Low16 fdl(d, size_t(BT) * V);
      cpu.crossentropy_forward(losses.h(), logits.h(), logits.h(), tgt.host.data(), BT, V);
      cpu.crossentropy_backward(fdl.h(), logits.h(), tgt.host.data(), 1.0f / BT, BT, V);
      gk.crossentropy_forward_backward(losses.g(), fdl.g(), logits.g(), tgt.dev.data(), 1.0f / BT, BT, V);
      QVERIFY(d.synchronize().ok());
      check("crossentropy_forward_backward losses", losses.back(d), losses.host, 1e-5);
      check("crossentropy_forward_backward bf16 dlogits", fdl.back(d), Low16::wide(fdl.host), one_rounding);
    }
    {  // the weights' bf16 copy: bf16.h's rounding on the GPU, bit for bit the CPU's
      std::vector<float> v = randn(100003, 50, 3.0);
      const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800001u, 0xff80ffffu, 0x00018000u, 0x80000000u};
      for (size_t i = 0; i < std::size(special); ++i) std::memcpy(&v[i], &special[i], sizeof(float));
      Twin src(d, v);
      Low16 dst(d, v.size());
      gk.round_to_bf16(dst.g(), src.g(), v.size());
      QVERIFY(d.synchronize().ok());
      std::vector<bf16> got(v.size());
      QVERIFY(d.copy_to_host(got.data(), dst.g(), got.size() * sizeof(bf16)).ok());
      for (size_t i = 0; i < v.size(); ++i) {
        if (got[i].bits != to_bf16(v[i]).bits) QFAIL(qPrintable(QString("element %1: 0x%2 on the GPU").arg(i).arg(got[i].bits, 4, 16, QChar('0'))));
      }
    }
    QVERIFY(d.set_precision(config::Precision::kFp32).ok());
  }

  // The fused attention on tensor cores (flash_attention.cu, runtime/flash_mma.h) against the tile
  // program whose arithmetic it runs, executed on the CPU (cpu::flash_attention_tiled_*), and
  // against attention in fp32 on the same bf16 q, k, v: odd lengths, every tile edge, head sizes
  // 16 to 128, multi-head and grouped-query, out written in bf16 as training does.
  void flashAttentionOnTensorCoresMatchesItsTileProgram_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("HS");
    QTest::addColumn<int>("NKV");
    QTest::newRow("T1 HS16") << 2 << 1 << 2 << 16 << 2;
    QTest::newRow("T45 HS32") << 2 << 45 << 3 << 32 << 3;
    QTest::newRow("T65 HS64") << 1 << 65 << 2 << 64 << 2;
    QTest::newRow("T200 HS48") << 2 << 200 << 2 << 48 << 2;
    QTest::newRow("T1024 HS64: GPT-2") << 1 << 1024 << 4 << 64 << 4;
    QTest::newRow("T333 HS128") << 1 << 333 << 2 << 128 << 2;
    // Grouped-query attention: the key gradients' blocks walk each query head of their group.
    QTest::newRow("T1 HS16, 4 query heads a K/V head") << 1 << 1 << 4 << 16 << 1;
    QTest::newRow("T45 HS32, 2 query heads a K/V head") << 2 << 45 << 4 << 32 << 2;
    QTest::newRow("T200 HS64, 4 query heads a K/V head") << 1 << 200 << 8 << 64 << 2;
    QTest::newRow("T333 HS128, 2 query heads a K/V head: Llama's head size") << 1 << 333 << 4 << 128 << 2;
  }
  void flashAttentionOnTensorCoresMatchesItsTileProgram() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, HS);
    QFETCH(int, NKV);
    Device& d = *gpu_;
    QVERIFY(d.set_precision(config::Precision::kBf16).ok());
    const Ops& gk = d.ops();
    const int C = NH * HS, BT = B * T;
    const size_t n = size_t(BT) * C, n3 = size_t(BT) * (NH + 2 * NKV) * HS, rows = size_t(B) * NH * T;
    Low16 qkv(d, randn(n3, 60, 1.5)), out(d, n);
    Twin lse(d, rows), dout(d, randn(n, 61)), dqkv(d, n3), delta(d, rows);
    QVERIFY(!on_tensor_cores(false, HS));  // fp32 q, k, v: the fp32 kernels
    // Head sizes up to 64 fit every tensor-core GPU's shared memory (99 KiB a block on sm_86 and
    // sm_89); 128 needs 120.5 KiB.
    if (HS > 64 && !on_tensor_cores(true, HS)) QSKIP("this GPU's shared memory keeps head size 128 off tensor cores");
    QVERIFY(on_tensor_cores(true, HS));
    Twin f32(d, Low16::wide(qkv.host));
    gk.flash_attention_forward(out.g(), lse.g(), qkv.g(), B, T, NH, HS, NKV);
    gk.flash_attention_backward(dqkv.g(), delta.g(), dout.g(), qkv.g(), out.g(), lse.g(), B, T, NH, HS, NKV);
    // And with dout and dqkv in bf16, as GptStage passes them with bf16 activations.
    Low16 dout16(d, dout.host), dqkv16(d, dqkv.host.size());
    gk.flash_attention_backward(dqkv16.g(), delta.g(), dout16.g(), qkv.g(), out.g(), lse.g(), B, T, NH, HS, NKV);
    QVERIFY(d.synchronize().ok());
    QVERIFY(d.set_precision(config::Precision::kFp32).ok());
    const std::vector<float> gout = out.back(d), glse = lse.back(d), gdqkv = dqkv.back(d), gdqkv16 = dqkv16.back(d);
    // The tile program on the CPU: its out rounded to bf16 as the GPU stores it, and its backward
    // from the GPU's out, as the GPU's is.
    std::vector<float> tout(n), tlse(rows), tdqkv(dqkv.host.size()), tdelta(rows);
    cpu::flash_attention_tiled_forward(tout.data(), tlse.data(), qkv.h(), B, T, NH, HS, NKV);
    for (float& v : tout) v = to_float(to_bf16(v));
    cpu::flash_attention_tiled_backward(tdqkv.data(), tdelta.data(), dout.h(), qkv.h(), gout.data(), glse.data(), B, T, NH, HS, NKV);
    // Attention in fp32 on the same q, k, v.
    std::vector<float> rout(n), att(rows * T), rdqkv(tdqkv.size()), scratch(att.size());
    cpu::attention_forward(rout.data(), att.data(), f32.h(), B, T, NH, HS, NKV);
    cpu::attention_backward(rdqkv.data(), scratch.data(), dout.h(), f32.h(), att.data(), B, T, NH, HS, NKV);
    // The tile program from the bf16 dout, its dqkv rounded to bf16 as the GPU stores it.
    std::vector<float> tdqkv16(tdqkv.size());
    const std::vector<float> dout_wide = Low16::wide(dout16.host);
    cpu::flash_attention_tiled_backward(tdqkv16.data(), tdelta.data(), dout_wide.data(), qkv.h(), gout.data(), glse.data(), B, T, NH, HS, NKV);
    for (float& v : tdqkv16) v = to_float(to_bf16(v));
    double lse_err = 0;
    for (size_t r = 0; r < rows; ++r) lse_err = std::max(lse_err, double(std::abs(glse[r] - tlse[r])));
    const double to = rel_err(gout, tout), tg = rel_err(gdqkv, tdqkv), ro = rel_err(gout, rout), rg = rel_err(gdqkv, rdqkv),
                 tg16 = rel_err(gdqkv16, tdqkv16);
    std::printf("flash on tensor cores (%s), B %d T %d NH %d NKV %d HS %d: vs its tile program out %.2e dqkv %.2e (bf16 dout and dqkv %.2e) lse %.2e; "
                "vs fp32 attention out %.2e dqkv %.2e\n",
                on_warpgroups(HS) ? "wgmma" : "mma.sync", B, T, NH, NKV, HS, to, tg, tg16, lse_err, ro, rg);
    QVERIFY2(to <= 1e-2 && tg <= 1e-2 && tg16 <= 1e-2 && lse_err <= 1e-4 && ro <= 1e-2 && rg <= 1e-2,
             qPrintable(QString("tile program: out %1, dqkv %2, bf16 dqkv %3, lse %4; fp32 attention: out %5, dqkv %6")
                            .arg(to).arg(tg).arg(tg16).arg(lse_err).arg(ro).arg(rg)));
  }

  // Hopper's warpgroup products run the tensor-core attention where train.kernels.flash: wgmma
  // asks for them, on a GPU of compute capability 9.0 (the ctest entry tst_cuda_flash_wgmma, whose
  // other tests then check them against the tile program and in training), at head sizes padded
  // to 64 and 128; never where it does not ask. The device refuses the choice where they cannot
  // run, naming the key.
  void warpgroupProductsRunWhereAsked() {
#if defined(STAGECRAFT_WITH_CUDA)
    using config::FlashKernels;
    for (FlashKernels other : {FlashKernels::kAuto, FlashKernels::kMmaSync, FlashKernels::kCudaCores}) {
      QVERIFY(cuda::flash_path(true, 64, other) != cuda::FlashPath::kWgmma && cuda::flash_path(true, 128, other) != cuda::FlashPath::kWgmma);
    }
    KernelShape shape;
    shape.precision = config::Precision::kBf16;
    shape.attention = config::Attention::kFlash;
    shape.head_size = 64;
    shape.hidden = 768;
    shape.kernels.flash = FlashKernels::kWgmma;
    if (const std::string unable = warpgroups_unable(); !unable.empty()) {
      const Status s = gpu_->set_kernels(shape);
      QVERIFY(!s.ok());
      QVERIFY2(s.message().rfind("train.kernels.flash=wgmma: ", 0) == 0, s.message().c_str());
      std::printf("refused here: %s\n", s.message().c_str());
      return;
    }
    QVERIFY2(gpu_->set_kernels(shape).ok(), "head size 64 takes the warpgroup products on compute capability 9.0");
    shape.head_size = 32;
    QVERIFY(!gpu_->set_kernels(shape).ok());  // mma.sync's
    QVERIFY(on_warpgroups(64));
    QVERIFY(on_warpgroups(48));   // padded to 64
    QVERIFY(on_warpgroups(128));
    QVERIFY(!on_warpgroups(32));
#else
    QSKIP("a build without the CUDA backend");
#endif
  }

  // Single products of Hopper's warpgroup Core on the GPU (tests/engine/wgmma_products.h's block
  // programs, which tst_flash_mma runs under the emulator) against plain products in double, each
  // added to accumulators that start from given values:
  //   S = Q K^T's reading: both tiles K-major through descriptors, at head sizes 64 and 128 (one
  //   and two 64-column blocks of the swizzle), over 32 and 64 keys;
  //   O += P V's: P from registers as mma.sync's A fragments, V read MN-major, over 32 and 64 keys.
  // Where the attention's wgmma kernels disagree with the tile program, this says whether one of
  // the readings is wrong or the program around them. On compute capability 9.0 in builds with the
  // wgmma kernels, asked for or not; skipped, saying why, elsewhere.
  void warpgroupProductsMatchPlainProducts() {
#if !defined(STAGECRAFT_WGMMA_PROBE)
    QSKIP(kNoWarpgroupKernels);
#else
    namespace wp = test::wgmma_products;
    if (const std::string unable = warpgroups_unable(); !unable.empty()) QSKIP(unable.c_str());
    uint64_t stream = 900;
    for (wp::Case& c : wp::cases([&](size_t n) { return randn(n, ++stream); })) {
      std::string failed = test::probe_times_transposed(c.D, c.N, c.q, c.k, c.s);
      if (failed.empty()) failed = test::probe_times(c.D, c.N, c.p, c.v, c.o);
      QVERIFY2(failed.empty(), failed.c_str());
      const std::string off = wp::check(c, 1e-4, true);
      QVERIFY2(off.empty(), off.c_str());
    }
#endif
  }

  // A 16-bit GEMM with a bias takes cuBLASLt's bias epilogue at GPT-2's c_attn shape (operands
  // from the allocator, aligned), in the stage's three forms: bf16 operands with an fp32 output
  // and bias, all bf16 (the weights' copy, an activation), and all bf16 with GELU after the bias.
  // train.kernels.gemm_bias: separate turns it off (the ctest entry tst_cuda_without_cublaslt);
  // either way the results are the CPU's within
  // bf16's rounding.
  void gemmBiasEpilogueIsUsed() {
    Device& d = *gpu_;
    const int BT = 512, C = 768, OC = 2304;
    const std::vector<float> x = randn(size_t(BT) * C, 60), wv = randn(size_t(C) * OC, 61, 0.05), bv = randn(size_t(OC), 62);
    Twin inp(d, x), w(d, wv), bias(d, bv), out(d, size_t(BT) * OC), res(d, randn(size_t(BT) * OC, 63)), outres(d, size_t(BT) * OC);
    Low16 inp16(d, x), w16(d, wv), bias16(d, bv), out16(d, size_t(BT) * OC), pre16(d, size_t(BT) * OC), act16(d, size_t(BT) * OC);
#if defined(STAGECRAFT_WITH_CUDA)
    const int usable = cuda::lt_shapes(true), unusable = cuda::lt_shapes(false);
#endif
    QVERIFY(d.set_precision(config::Precision::kBf16).ok());
    d.ops().matmul_forward(out.g(), inp.g(), w.g(), bias.g(), BT, C, OC, Layout::kInOut);
    d.ops().matmul_forward(outres.g(), inp.g(), w.g(), bias.g(), BT, C, OC, Layout::kInOut, res.g());  // the same plan, C = res
    d.ops().matmul_forward(out16.g(), inp16.g(), w16.g(), bias16.g(), BT, C, OC, Layout::kInOut);
    d.ops().matmul_gelu_forward(pre16.g(), act16.g(), inp16.g(), w16.g(), bias16.g(), BT, C, OC, Layout::kInOut);
    QVERIFY(d.set_precision(config::Precision::kFp32).ok());
    QVERIFY(d.synchronize().ok());
    cpu_ops().matmul_forward(out.h(), inp.h(), w.h(), bias.h(), BT, C, OC, Layout::kInOut);
    cpu_ops().matmul_forward(outres.h(), inp.h(), w.h(), bias.h(), BT, C, OC, Layout::kInOut, res.h());
    cpu_ops().matmul_forward(out16.h(), inp16.h(), w16.h(), bias16.h(), BT, C, OC, Layout::kInOut);
    cpu_ops().matmul_gelu_forward(pre16.h(), act16.h(), inp16.h(), w16.h(), bias16.h(), BT, C, OC, Layout::kInOut);
    const double e = rel_err(out.back(d), out.host), e16 = rel_err(out16.back(d), Low16::wide(out16.host));
    const double epre = rel_err(pre16.back(d), Low16::wide(pre16.host)), eact = rel_err(act16.back(d), Low16::wide(act16.host));
    // A GELU other than GPT-2's tanh form (erf) would differ by up to about 2e-4 of the scale.
    QVERIFY2(epre <= 1e-2 && eact <= 1e-2, qPrintable(QString("bf16 GEMM with bias and GELU: relative error %1, %2").arg(epre).arg(eact)));
    std::printf("bf16 GEMM 512 x 768 -> 2304 against the CPU: fp32 out %.2e, bf16 out %.2e, GELU's input %.2e, its output %.2e\n", e, e16,
                epre, eact);
    QVERIFY2(e > 0 && e <= 1e-2, qPrintable(QString("bf16 GEMM with an fp32 bias: relative error %1").arg(e)));
    const double eres = rel_err(outres.back(d), outres.host);
    QVERIFY2(eres <= 1e-2, qPrintable(QString("bf16 GEMM with an fp32 bias and a residual: relative error %1").arg(eres)));
    QVERIFY2(e16 <= 1e-2, qPrintable(QString("all-bf16 GEMM with a bias: relative error %1").arg(e16)));
#if defined(STAGECRAFT_WITH_CUDA)
    if (g_kernels.gemm_bias == config::GemmBias::kSeparate) {
      QCOMPARE(cuda::lt_shapes(true) + cuda::lt_shapes(false), 0);
    } else {
      QVERIFY2(cuda::lt_shapes(true) == usable + 3 && cuda::lt_shapes(false) == unusable,
               qPrintable(QString("cuBLASLt algorithms for 512 x 768 -> 2304 with a bias (fp32 out, bf16 out, bf16 with GELU): %1 of 3 found")
                              .arg(cuda::lt_shapes(true) - usable)));
    }
#endif
  }

  // The kernel paths a run records (Device::kernel_paths, in its workers' start events) are the
  // ones the kernels take: for GPT-2's head size 64 and width 768 in bf16 with the fused
  // attention, every entry against the predicates the kernels ask under the entry's kernel paths
  // (the suite's entries with --kernels gemm_bias=separate, flash=cuda_cores, flash=wgmma and
  // layernorm_backward_warps=8 run this too); each train.kernels choice's record; the device's
  // refusals, each naming its key; and what a worker of a real run with the entry's choices in its
  // config recorded.
  void kernelPathsAgreeWithTheKernels() {
#if defined(STAGECRAFT_WITH_CUDA)
    using config::FlashKernels;
    using config::NormWarps;
    auto cfg = config::parse_config(kBase, "test.yaml", {"model.hidden=768", "model.heads=12", "train.precision=bf16", "train.attention=flash"});
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    with_entry_kernels(cfg.value());
    const KernelShape shape = KernelShape::of(cfg.value());
    QCOMPARE(shape.head_size, 64);
    QCOMPARE(shape.hidden, 768);
    QVERIFY(shape.precision == config::Precision::kBf16 && shape.attention == config::Attention::kFlash && !shape.rmsnorm);
    QVERIFY(shape.kernels == g_kernels);
    QVERIFY2(gpu_->set_kernels(shape).ok(), "main() skips an entry whose choices this GPU cannot take");
    const auto paths = gpu_->kernel_paths(shape);
    const auto path_of = [](const std::vector<KernelPath>& ps, const char* work) {
      for (const auto& k : ps) {
        if (k.work == work) return QString::fromStdString(k.path);
      }
      return QString("(none)");
    };
    QCOMPARE(int(paths.size()), 4);
    QCOMPARE(path_of(paths, "gemm"), QString("cuBLAS, bf16 tensor cores"));
    QCOMPARE(path_of(paths, "gemm bias"), QString(cuda::lt_enabled() ? "cuBLASLt epilogue (bias, GELU)" : "cuBLAS, then a bias kernel"));
    QCOMPARE(cuda::lt_enabled(), g_kernels.gemm_bias != config::GemmBias::kSeparate);
    const bool tensor_cores = cuda::flash_tensor_cores(true, 64), warpgroups = cuda::flash_warpgroup(64);
    QCOMPARE(path_of(paths, "attention"), QString(!tensor_cores ? "flash, fp32 cores"
                                                  : warpgroups  ? "flash, tensor cores (wgmma)"
                                                                : "flash, tensor cores (mma.sync)"));
    if (tensor_cores_turned_off()) QVERIFY(!tensor_cores);
    QCOMPARE(warpgroups, warpgroups_asked());  // main() skipped the entry where they cannot run
    int major = 0;
    QVERIFY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu_->ordinal()) == cudaSuccess);
    if (major >= 8 && !tensor_cores_turned_off()) QVERIFY2(tensor_cores, "head size 64 in bf16 runs on tensor cores from sm_80");
    const bool eight = g_kernels.layernorm_backward_warps == NormWarps::kEight;
    QCOMPARE(path_of(paths, "layernorm backward"), QString(eight ? "8 warps a block" : "4 warps a block"));
    QCOMPARE(cuda::layernorm_backward_warps(768), eight ? 8 : 4);
    QCOMPARE(cuda::layernorm_backward_warps(2052), 0);  // not a width the row kernels take: a warp a row
    QCOMPARE(cuda::layernorm_backward_warps(2048), 4);  // wider than 8 warps' registers allow

    // Each choice as the record names it, whatever the entry's, where this GPU takes it; the
    // context keeps the entry's until a set_kernels.
    KernelShape asked = shape;
    asked.kernels = {};
    asked.kernels.flash = FlashKernels::kCudaCores;
    asked.kernels.gemm_bias = config::GemmBias::kSeparate;
    asked.kernels.layernorm_backward_warps = NormWarps::kEight;
    const auto asked_paths = gpu_->kernel_paths(asked);
    QCOMPARE(path_of(asked_paths, "attention"), QString("flash, fp32 cores"));
    QCOMPARE(path_of(asked_paths, "gemm bias"), QString("cuBLAS, then a bias kernel"));
    QCOMPARE(path_of(asked_paths, "layernorm backward"), QString("8 warps a block"));
    QCOMPARE(cuda::flash_warpgroup(64), warpgroups);
    // Refusals: 8 warps over rows wider than 1536, rows the block kernels do not take, wgmma where
    // it cannot run (head size 32 everywhere).
    const auto refused = [&](KernelShape s, const char* prefix) {
      const Status st = gpu_->set_kernels(s);
      std::printf("%s\n", st.ok() ? "(accepted)" : st.message().c_str());
      return !st.ok() && st.message().rfind(prefix, 0) == 0;
    };
    KernelShape wide = asked;
    wide.hidden = 2048;
    QVERIFY(refused(wide, "train.kernels.layernorm_backward_warps=8: "));
    wide.hidden = 2052;
    wide.kernels.layernorm_backward_warps = NormWarps::kFour;
    QVERIFY(refused(wide, "train.kernels.layernorm_backward_warps=4: "));
    KernelShape small_head = shape;
    small_head.head_size = 32;
    small_head.kernels.flash = FlashKernels::kWgmma;
    QVERIFY(refused(small_head, "train.kernels.flash=wgmma: "));
    QVERIFY(gpu_->set_kernels(shape).ok());

    // fp32 GEMMs: TF32 tensor cores where train.tf32 asks, the bias a kernel after the GEMM.
    KernelShape fp32 = shape;
    fp32.precision = config::Precision::kFp32;
    fp32.tf32 = true;
    fp32.kernels = {};
    const auto fp32_paths = gpu_->kernel_paths(fp32);
    QCOMPARE(QString::fromStdString(fp32_paths[0].path), QString("cuBLAS, TF32 tensor cores"));
    QCOMPARE(QString::fromStdString(fp32_paths[1].path), QString("cuBLAS, then a bias kernel"));
    QCOMPARE(QString::fromStdString(fp32_paths[2].path), QString("flash, fp32 cores"));  // q, k, v stay fp32

    // A worker of a real run with the entry's choices in its config: its start event carries the
    // same paths.
    QTemporaryDir dir;
    QVERIFY(write_gpu_run(dir, "kernels"));
    const QString run_yaml = dir.filePath("run.yaml");
    const auto r = testing::run_cli(QStringList{"run", run_yaml, "--json", "--db", dir.filePath("runs.sqlite"), "train.data=" + dir.filePath("tokens.bin"),
                                                "train.checkpoint_dir=" + dir.filePath("ck"), "train.steps=2", "model.hidden=768", "model.heads=12",
                                                "train.precision=bf16", "train.attention=flash"} +
                                        entry_kernel_overrides(),
                                    QProcessEnvironment::systemEnvironment(), 300000);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QJsonObject recorded;
    for (const QString& line : r.out.split('\n', Qt::SkipEmptyParts)) {
      const auto o = QJsonDocument::fromJson(line.toUtf8()).object();
      if (o["event"].toString() == "start") recorded = o["kernels"].toObject();
    }
    QCOMPARE(recorded.size(), int(paths.size()));
    for (const auto& k : paths) QCOMPARE(recorded[QString::fromStdString(k.work)].toString(), QString::fromStdString(k.path));
#else
    QSKIP("a build without the CUDA backend");
#endif
  }

  // AdamW and the sum of squares over a segment list, one launch each, against the CPU's segment
  // calls: moments indexed from a shard's begin as the trainer's, every other segment decayed.
  // Lists in quads (every begin, moment and count a multiple of 4) take the 16-byte AdamW kernel,
  // the others one element a thread.
  void segmentCallsMatchTheCpu_data() {
    QTest::addColumn<QList<int>>("counts");
    QTest::addColumn<double>("grad_scale");
    QTest::addColumn<bool>("quads");
    QTest::newRow("odd sizes, empty first, between and last") << QList<int>{0, 17, 1, 0, 0, 100003, 3, 0} << 1.0 << false;
    QTest::newRow("one segment of one element") << QList<int>{1} << 0.37 << false;
    // 1,000,007 elements: more than one grid stride of the sum's capped grid (1023 x 256 threads).
    QTest::newRow("more elements than one stride of the sum's grid") << QList<int>{300001, 5, 700001} << 0.5 << false;
    QList<int> many, many4;
    for (int k = 0; k < 1100; ++k) many.append((k * 37) % 50);
    for (int k = 0; k < 1100; ++k) many4.append((k * 36) % 52);
    QTest::newRow("1100 small segments") << many << 1.0 << false;
    QTest::newRow("in quads: empty first, between and last") << QList<int>{0, 16, 4, 0, 0, 100004, 8, 0} << 1.0 << true;
    QTest::newRow("in quads: more than one stride of the sum's grid") << QList<int>{300004, 4, 700008} << 0.5 << true;
    QTest::newRow("in quads: 1100 small segments") << many4 << 0.37 << true;
  }
  void segmentCallsMatchTheCpu() {
    QFETCH(QList<int>, counts);
    QFETCH(double, grad_scale);
    QFETCH(bool, quads);
    Device& d = *gpu_;
    const size_t shard_begin = quads ? 12 : 11;
    size_t at = 0;
    const std::vector<Segment> segs = testing::place_segments(counts, shard_begin + (quads ? 4 : 2), shard_begin, &at, quads ? 4 : 1);
    const size_t n = at + 5, nm = n - shard_begin;
    Twin p(d, randn(n, 40)), g(d, randn(n, 41)), m(d, randn(nm, 42, 0.1)), v(d, std::vector<float>(nm, 0.01f));
    auto host_table = SegmentTable::make(host_device(), segs);
    auto gpu_table = SegmentTable::make(d, segs);
    QVERIFY(host_table.ok() && gpu_table.ok());
    QCOMPARE(gpu_table->list().elements, host_table->elements());
    QCOMPARE(gpu_table->list().quads, quads);
    AdamWOptions opt;
    opt.lr = 1e-3f;
    opt.weight_decay = 0.1f;
    cpu_ops().adamw_update_segments(p.h(), m.h(), v.h(), g.h(), host_table->list(), opt, 3, float(grad_scale));
    d.ops().adamw_update_segments(p.g(), m.g(), v.g(), g.g(), gpu_table->list(), opt, 3, float(grad_scale));
    for (const auto& [what, t] : {std::pair{"adamw params", &p}, std::pair{"adamw m", &m}, std::pair{"adamw v", &v}}) {
      QVERIFY2(d.synchronize().ok(), what);
      const double e = rel_err(t->back(d), t->host);
      QVERIFY2(e <= 1e-5, qPrintable(QString("%1: relative error %2").arg(what).arg(e)));
    }
    // The sum: double partials in another order than the CPU's (1e-12); the same bits every launch.
    const double sc = cpu_ops().sum_of_squares_segments(g.h(), host_table->list());
    const double sg = d.ops().sum_of_squares_segments(g.g(), gpu_table->list());
    const double again = d.ops().sum_of_squares_segments(g.g(), gpu_table->list());
    QVERIFY(d.synchronize().ok());
    QVERIFY2(close(sc, sg, 1e-12), qPrintable(QString("sum of squares %1 vs %2").arg(sc, 0, 'g', 17).arg(sg, 0, 'g', 17)));
    QVERIFY2(sg == again, qPrintable(QString("two launches: %1 vs %2").arg(sg, 0, 'g', 17).arg(again, 0, 'g', 17)));
    double per_range = 0;
    for (const auto& s : segs) per_range += d.ops().sum_of_squares(g.g() + s.begin, s.count);
    QVERIFY(close(per_range, sg, 1e-12));
    // A NaN, then an infinity, in the last listed element: the sum is not finite (the fp16 loss
    // scaler skips the step on it).
    const Segment& last = *std::find_if(segs.rbegin(), segs.rend(), [](const Segment& s) { return s.count > 0; });
    float* x = g.g() + last.begin + last.count - 1;
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      QVERIFY(d.copy_from_host(x, &bad, sizeof(float)).ok());
      const double s = d.ops().sum_of_squares_segments(g.g(), gpu_table->list());
      QVERIFY2(std::isnan(bad) ? std::isnan(s) : std::isinf(s), qPrintable(QString("with %1: %2").arg(bad).arg(s)));
    }
    QVERIFY(d.synchronize().ok());
  }

  // Bias and layernorm parameter gradients over many rows: the column sums in two launches over
  // chunks of rows (cuda_kernels.cu's sum_columns), chunks that grow past 256 of them, against the
  // CPU's sums (float sums in another order: within 1e-4 of the gradient's scale over 70,001 rows,
  // where a chunk lost or added twice would be off by a whole chunk's share), and the same bits on
  // a second run; the bias from fp32 and from bf16 gradients.
  void columnSumsMatchTheCpuOverManyChunks_data() {
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::newRow("a 124M micro-batch's rows, odd columns") << 8192 << 771;
    QTest::newRow("one chunk and one row") << 257 << 33;
    QTest::newRow("rows past 256 chunks of 256") << 70001 << 5;
    QTest::newRow("a 774M micro-batch's rows (layernorm's sums with its dinp)") << 4096 << 1280;
    QTest::newRow("chunks of 20 rows, the last of 3, 2048 wide") << 5003 << 2048;
    QTest::newRow("chunks of 20 rows, the last of 3, 1280 wide") << 5003 << 1280;
  }
  void columnSumsMatchTheCpuOverManyChunks() {
    QFETCH(int, rows);
    QFETCH(int, cols);
    // tst_cuda_layernorm_eight_warps runs these in layernorm's 8-warp blocks: the choice must be
    // the one the kernels take.
#if defined(STAGECRAFT_WITH_CUDA)
    QCOMPARE(cuda::layernorm_backward_warps(1280) == 8, g_kernels.layernorm_backward_warps == config::NormWarps::kEight);
#endif
    Device& d = *gpu_;
    const Ops& cpu = cpu_ops();
    const size_t n = size_t(rows) * cols;
    const int C = 8;  // the GEMM's other side, small: the bias is what is checked
    const double tol = 1e-4;
    auto check = [&](const char* what, const Twin& t, const Twin& again) {
      QVERIFY2(d.synchronize().ok(), what);
      const std::vector<float> got = t.back(d);
      const double e = rel_err(got, t.host);
      QVERIFY2(e <= tol, qPrintable(QString("%1: relative error %2").arg(what).arg(e)));
      QVERIFY2(got == again.back(d), qPrintable(QString("%1: two runs differ").arg(what)));
    };
    Twin inp(d, randn(size_t(rows) * C, 62)), w(d, randn(size_t(C) * cols, 63, 0.2)), dout(d, randn(n, 64));
    for (const auto precision : {config::Precision::kFp32, config::Precision::kBf16}) {
      QVERIFY(d.set_precision(precision).ok());
      const Ops& gk = d.ops();
      Low16 dl(d, dout.host);
      Twin dinp(d, size_t(rows) * C), dw(d, size_t(C) * cols), db(d, randn(size_t(cols), 65)), db2(d, db.host);
      if (precision == config::Precision::kFp32) {
        cpu.matmul_backward(dinp.h(), dw.h(), db.h(), dout.h(), inp.h(), w.h(), rows, C, cols);
        gk.matmul_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), rows, C, cols);
        gk.matmul_backward(dinp.g(), dw.g(), db2.g(), dout.g(), inp.g(), w.g(), rows, C, cols);
        check("bias gradient", db, db2);
      } else {
        cpu.matmul_backward(dinp.h(), dw.h(), db.h(), dl.h(), inp.h(), w.h(), rows, C, cols);
        gk.matmul_backward(dinp.g(), dw.g(), db.g(), dl.g(), inp.g(), w.g(), rows, C, cols);
        gk.matmul_backward(dinp.g(), dw.g(), db2.g(), dl.g(), inp.g(), w.g(), rows, C, cols);
        check("bias gradient from bf16", db, db2);
      }
    }
    QVERIFY(d.set_precision(config::Precision::kFp32).ok());
    const Ops& gk = d.ops();
    Twin x(d, randn(n, 66, 2.0)), lw(d, randn(size_t(cols), 67)), lb(d, randn(size_t(cols), 68)), out(d, n), mean(d, size_t(rows)),
        rstd(d, size_t(rows));
    cpu.layernorm_forward(out.h(), mean.h(), rstd.h(), x.h(), lw.h(), lb.h(), rows, cols);
    gk.layernorm_forward(out.g(), mean.g(), rstd.g(), x.g(), lw.g(), lb.g(), rows, cols);
    Twin dx(d, n), dw(d, randn(size_t(cols), 69)), db(d, randn(size_t(cols), 70)), dw2(d, dw.host), db2(d, db.host);
    cpu.layernorm_backward(dx.h(), dw.h(), db.h(), dout.h(), x.h(), lw.h(), mean.h(), rstd.h(), rows, cols);
    gk.layernorm_backward(dx.g(), dw.g(), db.g(), dout.g(), x.g(), lw.g(), mean.g(), rstd.g(), rows, cols);
    gk.layernorm_backward(nullptr, dw2.g(), db2.g(), dout.g(), x.g(), lw.g(), mean.g(), rstd.g(), rows, cols);
    check("layernorm dweight", dw, dw2);
    check("layernorm dbias", db, db2);
  }

  // The element-wise and layernorm kernels take 8 elements (or a row's float4s) a thread where
  // every pointer is 16-byte aligned, one element a thread otherwise, and a tail past a multiple of
  // 8 one at a time: both paths must give the same bits (the same per-element math), and the
  // CPU's values within float rounding. The scalar path is reached through buffers one element
  // off alignment.
  void vectorAndScalarPathsAgree() {
    Device& d = *gpu_;
    QVERIFY(d.set_precision(config::Precision::kFp32).ok());
    const Ops& cpu = cpu_ops();
    const Ops& gk = d.ops();
    auto same = [&](const char* what, const std::vector<float>& vec, const std::vector<float>& scalar, const std::vector<float>& want,
                    double tol) {
      QVERIFY2(vec == scalar, qPrintable(QString("%1: the 16-byte path and the scalar path differ").arg(what)));
      const double e = rel_err(vec, want);
      QVERIFY2(e <= tol, qPrintable(QString("%1: relative error %2 against the CPU").arg(what).arg(e)));
    };
    // The same values at offset 0 (aligned) and at offset 1 (not) of one buffer each.
    auto shifted = [](const std::vector<float>& v) {
      std::vector<float> s(v.size() + 1, 0.0f);
      std::copy(v.begin(), v.end(), s.begin() + 1);
      return s;
    };
    auto tail = [](std::vector<float> v) { return std::vector<float>(v.begin() + 1, v.end()); };
    const double one_rounding = 1.0 / 128;
    for (const size_t n : {size_t(8195), size_t(7), size_t(64)}) {
      const std::vector<float> xs = randn(n, 90, 3.0), dys = randn(n, 91);
      Twin x(d, xs), x1(d, shifted(xs)), dy(d, dys), dy1(d, shifted(dys));
      {  // fp32 in and out
        Twin y(d, n), y1(d, n + 1), dx(d, n), dx1(d, n + 1);
        cpu.gelu_forward(y.h(), x.h(), n);
        gk.gelu_forward(y.g(), x.g(), n);
        gk.gelu_forward(y1.g() + 1, x1.g() + 1, n);
        cpu.gelu_backward(dx.h(), x.h(), dy.h(), n);
        gk.gelu_backward(dx.g(), x.g(), dy.g(), n);
        gk.gelu_backward(dx1.g() + 1, x1.g() + 1, dy1.g() + 1, n);
        QVERIFY(d.synchronize().ok());
        same("gelu_forward", y.back(d), tail(y1.back(d)), y.host, 1e-5);
        same("gelu_backward", dx.back(d), tail(dx1.back(d)), dx.host, 1e-5);
      }
      {  // bf16 in and out, the backward in place
        Low16 xl(d, xs), xl1(d, shifted(xs)), y(d, n), y1(d, n + 1), g(d, dys), g1(d, shifted(dys));
        cpu.gelu_forward(y.h(), xl.h(), n);
        gk.gelu_forward(y.g(), xl.g(), n);
        gk.gelu_forward(y1.g() + 1, xl1.g() + 1, n);
        cpu.gelu_backward(g.h(), xl.h(), g.h(), n);
        gk.gelu_backward(g.g(), xl.g(), g.g(), n);
        gk.gelu_backward(g1.g() + 1, xl1.g() + 1, g1.g() + 1, n);
        QVERIFY(d.synchronize().ok());
        same("gelu_forward bf16", y.back(d), tail(y1.back(d)), Low16::wide(y.host), one_rounding);
        same("gelu_backward bf16 in place", g.back(d), tail(g1.back(d)), Low16::wide(g.host), one_rounding);
      }
    }
    // Layernorm rows of 1280 (GPT-2 774M's width, ten float4s a lane) and 2048 (the widest held
    // in registers, its parameter sums in 64 KB of shared memory), forward and backward with the
    // parameter gradients and dinp's bf16 copy.
    for (const int C : {1280, 2048}) {
      const int N = 37;
      const size_t n = size_t(N) * C;
      const std::vector<float> xs = randn(n, 92, 2.0), dys = randn(n, 93), dxs = randn(n, 94);
      Twin x(d, xs), x1(d, shifted(xs)), w(d, randn(size_t(C), 95)), b(d, randn(size_t(C), 96)), w1(d, shifted(w.host)),
          b1(d, shifted(b.host));
      Twin mean(d, size_t(N)), rstd(d, size_t(N)), mean1(d, size_t(N)), rstd1(d, size_t(N));
      Low16 out(d, n), out1(d, n + 1);
      cpu.layernorm_forward(out.h(), mean.h(), rstd.h(), x.h(), w.h(), b.h(), N, C);
      gk.layernorm_forward(out.g(), mean.g(), rstd.g(), x.g(), w.g(), b.g(), N, C);
      gk.layernorm_forward(out1.g() + 1, mean1.g(), rstd1.g(), x1.g() + 1, w1.g() + 1, b1.g() + 1, N, C);
      QVERIFY(d.synchronize().ok());
      // The two paths sum a row in other orders: the same values within float rounding, not the same bits.
      QVERIFY(rel_err(tail(out1.back(d)), out.back(d)) <= one_rounding);
      QVERIFY2(rel_err(out.back(d), Low16::wide(out.host)) <= one_rounding, "layernorm_forward bf16 out");
      QVERIFY2(rel_err(mean.back(d), mean.host) <= 1e-5 && rel_err(mean1.back(d), mean.host) <= 1e-5, "layernorm_forward mean");
      QVERIFY2(rel_err(rstd.back(d), rstd.host) <= 1e-5 && rel_err(rstd1.back(d), rstd.host) <= 1e-5, "layernorm_forward rstd");
      Twin dy(d, dys), dy1(d, shifted(dys)), dx(d, dxs), dx1(d, shifted(dxs)), dw(d, randn(size_t(C), 97)), db(d, randn(size_t(C), 98)),
          dw1(d, dw.host), db1(d, db.host);
      Low16 low(d, n), low1(d, n + 1);
      cpu.layernorm_backward(dx.h(), dw.h(), db.h(), dy.h(), x.h(), w.h(), mean.h(), rstd.h(), N, C, low.h());
      gk.layernorm_backward(dx.g(), dw.g(), db.g(), dy.g(), x.g(), w.g(), mean.g(), rstd.g(), N, C, low.g());
      gk.layernorm_backward(dx1.g() + 1, dw1.g(), db1.g(), dy1.g() + 1, x1.g() + 1, w1.g() + 1, mean.g(), rstd.g(), N, C, low1.g() + 1);
      QVERIFY(d.synchronize().ok());
      for (const auto& [what, got, want, tol] :
           {std::tuple{"layernorm_backward dinp", dx.back(d), dx.host, 1e-5}, {"layernorm_backward dinp, scalar", tail(dx1.back(d)), dx.host, 1e-5},
            {"layernorm_backward bf16 copy", low.back(d), Low16::wide(low.host), one_rounding},
            {"layernorm_backward bf16 copy, scalar", tail(low1.back(d)), Low16::wide(low.host), one_rounding},
            {"layernorm dweight", dw.back(d), dw.host, 1e-5}, {"layernorm dweight, scalar", dw1.back(d), dw.host, 1e-5},
            {"layernorm dbias", db.back(d), db.host, 1e-5}, {"layernorm dbias, scalar", db1.back(d), db.host, 1e-5}}) {
        const double e = rel_err(got, want);
        QVERIFY2(e <= tol, qPrintable(QString("%1 (C %2): relative error %3").arg(what).arg(C).arg(e)));
      }
    }
  }

  void deviceReportsFailuresAsStatus() {
    auto huge = gpu_->allocate(size_t(1) << 50);  // a petabyte
    QVERIFY(!huge.ok());
    QVERIFY2(QString::fromStdString(huge.status().message()).contains("out of memory allocating"),
             qPrintable(QString::fromStdString(huge.status().message())));
    QVERIFY(gpu_->synchronize().ok());  // an out-of-memory leaves the device usable
    auto small = gpu_->allocate(1024);
    QVERIFY(small.ok());
    gpu_->release(small.value());
  }

  // The profiler times the GPU's kernels on its events (Device::make_clock), alone and in the
  // step. Alone, a kernel's time is positive and within the host's time of the call; a large GELU
  // (2^26 elements, 512 MiB moved) takes most of its call's host time, while a GELU of 8
  // elements, a few microseconds of the device's (its launch's latency among them: the line
  // printed gives it), leaves the host's time of its call mostly launches and waits.
  void profilerTimesKernelsOnTheDeviceClock() {
    QVERIFY(gpu_->set_precision(config::Precision::kFp32).ok());
    ProfiledDevice prof(*gpu_);
    const size_t big = size_t(1) << 26;
    auto x = Buffer<float>::make(*gpu_, big), y = Buffer<float>::make(*gpu_, big);
    QVERIFY(x.ok() && y.ok());
    QVERIFY(gpu_->fill_zero(x->data(), big * sizeof(float)).ok());
    for (int i = 0; i < 5; ++i) {
      prof.ops().gelu_forward(y->data(), x->data(), big);
      prof.ops().gelu_forward(y->data(), x->data(), 8);
    }
    QVERIFY(gpu_->synchronize().ok());
    QVERIFY(prof.device_clock());
    const auto ks = prof.kernels();
    QCOMPARE(ks.size(), size_t(2));
    for (const auto& k : ks) {
      std::printf("%s %s: %lld calls, %.1f us a call on the device's clock, %.1f on the host's\n", k.name.c_str(), k.shape.c_str(), k.calls,
                  1e6 * k.seconds / double(k.calls), 1e6 * k.host_seconds / double(k.calls));
      QVERIFY2(k.seconds > 0 && k.seconds <= k.host_seconds, k.shape.c_str());
    }
    const KernelTime &large = ks[0], &small = ks[1];  // the most time first
    QVERIFY2(large.seconds > 0.5 * large.host_seconds, "the large kernel's device time should be most of its call");
    QVERIFY2(small.seconds < large.seconds / 10, "the small kernel should take a sliver of the large one's time");
    QVERIFY2(prof.format(1).find("launches and waits") != std::string::npos, prof.format(1).c_str());
    // The same calls in the step, back to back with no waits: the large kernel takes about what
    // it took alone, and the marks are read once, when asked.
    ProfiledDevice step(*gpu_, ProfiledDevice::Timing::kInStep);
    for (int i = 0; i < 5; ++i) {
      step.ops().gelu_forward(y->data(), x->data(), big);
      step.ops().gelu_forward(y->data(), x->data(), 8);
    }
    const auto in_step = step.kernels();
    QVERIFY(step.device_clock());
    QCOMPARE(in_step.size(), size_t(2));
    for (const auto& k : in_step) {
      std::printf("in the step, %s %s: %.1f us a call\n", k.name.c_str(), k.shape.c_str(), 1e6 * k.seconds / double(k.calls));
      QVERIFY2(k.seconds > 0, k.shape.c_str());
    }
    QVERIFY2(in_step[0].seconds > 0.5 * large.seconds && in_step[0].seconds < 2 * large.seconds,
             qPrintable(QString("the large kernel took %1 s in the step, %2 s alone").arg(in_step[0].seconds).arg(large.seconds)));
    std::printf("in the step, between kernels: %.1f us in all\n", 1e6 * step.between_kernels_seconds());
    QVERIFY(step.between_kernels_seconds() >= 0);
  }

  void twentyStepsEqualTheCpuEngine() {
    const RunOut c = train({}, 20, false), g = train({}, 20, true);
    const QString diff = compare(g, c, 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    QVERIFY2(g.losses.back() < g.losses.front() - 0.5, "the model should learn");
    std::printf("cuda fp32 vs cpu: loss %.6f -> %.6f (cpu %.6f -> %.6f)\n", g.losses.front(), g.losses.back(), c.losses.front(),
                c.losses.back());
  }

  // train.tf32: the fp32 GEMMs on TF32 tensor cores. 20 steps stay within 1% of the CPU engine's
  // losses, and differ from fp32's (the math mode took effect); a later run without it is fp32
  // again (the mode is set per trainer, not left behind).
  void tf32GemmsStayCloseToFp32() {
    const RunOut c = train({}, 20, false), t = train({"train.tf32=true"}, 20, true), g = train({}, 20, true);
    const QString diff = compare(t, c, 1e-2);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    QVERIFY2(t.losses != g.losses, "train.tf32 changed nothing");
    const QString back = compare(g, c, 1e-4);
    QVERIFY2(back.isEmpty(), qPrintable("fp32 after tf32: " + back));
    std::printf("tf32 vs cpu: loss %.6f -> %.6f (cpu %.6f -> %.6f)\n", t.losses.front(), t.losses.back(), c.losses.front(), c.losses.back());
  }

  // No kernel sums with atomics (bias, layernorm and embedding gradients add in a fixed order), so
  // a run repeats to the bit: losses and gradient norms of two runs of 30 steps are equal.
  void twoRunsGiveTheSameBits_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("fp32") << QStringList{"train.steps=30"};
    QTest::newRow("bf16, flash attention") << QStringList{"train.steps=30", "train.precision=bf16", "train.attention=flash",
                                                         "model.seq_len=160"};
  }
  void twoRunsGiveTheSameBits() {
    QFETCH(QStringList, overrides);
    std::vector<std::string> o;
    for (const QString& x : overrides) o.push_back(x.toStdString());
    const RunOut a = train(o, 30, true), b = train(o, 30, true);
    QVERIFY2(a.error.empty() && b.error.empty(), (a.error + b.error).c_str());
    QCOMPARE(a.losses.size(), size_t(30));
    for (size_t i = 0; i < a.losses.size(); ++i) {
      QVERIFY2(a.losses[i] == b.losses[i] && a.norms[i] == b.norms[i],
               qPrintable(QString("step %1: loss %2 then %3, norm %4 then %5")
                              .arg(i + 1)
                              .arg(a.losses[i], 0, 'g', 17)
                              .arg(b.losses[i], 0, 'g', 17)
                              .arg(a.norms[i], 0, 'g', 17)
                              .arg(b.norms[i], 0, 'g', 17)));
    }
  }

  void flashAttentionEqualsTheCpuEngine() {
    // The CPU runs the same math unfused; on the GPU the fused kernel replaces the probabilities.
    const std::vector<std::string> o = {"train.attention=flash"};
    const QString diff = compare(train(o, 20, true), train(o, 20, false), 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  void bf16StaysWithinTwoPercentOfFp32() {
    const RunOut c = train({"train.steps=200"}, 200, false), g = train({"train.steps=200", "train.precision=bf16"}, 200, true);
    QVERIFY2(c.error.empty() && g.error.empty(), (c.error + g.error).c_str());
    double worst = 0;
    for (size_t i = 0; i < c.losses.size(); ++i) worst = std::max(worst, std::abs(g.losses[i] - c.losses[i]) / c.losses[i]);
    std::printf("bf16 vs fp32 over 200 steps: final %.4f vs %.4f, worst step %.2f%%\n", g.losses.back(), c.losses.back(), 100 * worst);
    QVERIFY2(worst <= 0.02, qPrintable(QString("bf16 differs by %1% from fp32").arg(100 * worst)));
    QVERIFY2(worst > 0, "bf16 should round differently from fp32");
  }

  // bf16 on the GPU against the CPU kernels' bf16 path (the off-host device: the same tensors kept
  // in bf16, fp32 arithmetic; the GPU also rounds attention's probabilities for its batched GEMMs
  // and the gradients its GEMMs read): every one of 50 steps within 2%.
  void bf16FollowsTheCpuBf16Path() {
    const std::vector<std::string> o = {"train.steps=50", "train.precision=bf16"};
    const RunOut g = train(o, 50, true), c = train(o, 50, false, false, true);
    QVERIFY2(c.error.empty() && g.error.empty(), (c.error + g.error).c_str());
    QCOMPARE(g.losses.size(), c.losses.size());
    double worst = 0;
    for (size_t i = 0; i < c.losses.size(); ++i) worst = std::max(worst, std::abs(g.losses[i] - c.losses[i]) / c.losses[i]);
    std::printf("bf16 on the GPU vs the CPU's bf16 path over 50 steps: final %.4f vs %.4f, worst step %.3f%%\n", g.losses.back(),
                c.losses.back(), 100 * worst);
    QVERIFY2(worst <= 0.02, qPrintable(QString("the GPU's bf16 differs by %1% from the CPU's").arg(100 * worst)));
  }

  // bf16 with the fused attention (on tensor cores: the model's head size is 16, unless the
  // entry's flash=cuda_cores): 200 steps within 2% of fp32 at every step, as bf16 with
  // standard attention; and a longer sequence (three tiles of 64 positions) for 50 steps.
  void bf16FlashStaysWithinTwoPercentOfFp32_data() {
    QTest::addColumn<int>("seq_len");
    QTest::addColumn<int>("steps");
    QTest::newRow("seq 32, 200 steps") << 32 << 200;
    QTest::newRow("seq 160, 50 steps") << 160 << 50;
  }
  void bf16FlashStaysWithinTwoPercentOfFp32() {
    QFETCH(int, seq_len);
    QFETCH(int, steps);
    const std::string n = "train.steps=" + std::to_string(steps), t = "model.seq_len=" + std::to_string(seq_len);
    const RunOut c = train({n, t}, steps, false), g = train({n, t, "train.precision=bf16", "train.attention=flash"}, steps, true);
    QVERIFY2(c.error.empty() && g.error.empty(), (c.error + g.error).c_str());
    QCOMPARE(g.losses.size(), c.losses.size());
    double worst = 0;
    for (size_t i = 0; i < c.losses.size(); ++i) worst = std::max(worst, std::abs(g.losses[i] - c.losses[i]) / c.losses[i]);
    std::printf("bf16 flash (%s) vs fp32, seq %d, %d steps: final %.4f vs %.4f, worst step %.2f%%\n",
                tensor_cores_turned_off() ? "fp32 cores" : "tensor cores", seq_len, steps, g.losses.back(), c.losses.back(), 100 * worst);
    QVERIFY2(worst <= 0.02, qPrintable(QString("bf16 flash differs by %1% from fp32").arg(100 * worst)));
  }

  // fp16 GEMM inputs with the dynamic loss scaler (initial 2^16): 200 steps end within 2% of
  // fp32's final loss, as bf16 does. (Written without a GPU to run it on; the bound is bf16's.)
  void fp16WithLossScalingStaysCloseToFp32() {
    const std::vector<std::string> fp16 = {"train.steps=200", "train.precision=fp16", "cluster.device=H100-SXM"};
    const RunOut c = train({"train.steps=200"}, 200, false), g = train(fp16, 200, true);
    QVERIFY2(c.error.empty() && g.error.empty(), (c.error + g.error).c_str());
    const double final_diff = std::abs(g.losses.back() - c.losses.back()) / c.losses.back();
    std::printf("fp16 vs fp32 over 200 steps: final %.4f vs %.4f (%.2f%%)\n", g.losses.back(), c.losses.back(), 100 * final_diff);
    QVERIFY2(final_diff <= 0.02, qPrintable(QString("fp16 ends %1% from fp32").arg(100 * final_diff)));
  }

  void recomputeAndMicroBatchesEqualTheCpuEngine() {
    const std::vector<std::string> o = {"train.recompute=full", "train.micro_batch=2", "cluster.gpus_per_node=2", "parallel.dp=2"};
    const QString diff = compare(train(o, 8, true), train(o, 8, false), 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  void dp2Tp2Pp2OnOneGpuEqualsOneRank() {
    const RunOut one = train({}, 10, true);
    const RunOut par = train({"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "pipeline.schedule=1f1b",
                              "parallel.zero=1"},
                             10, true);
    const QString diff = compare(par, one, 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  // Context parallelism on one GPU (two ranks sharing it, host-staged groups): the ring's block
  // kernels and Ulysses' all-to-all, standard and fused attention, equal the one-rank CPU engine
  // (fused: the one-rank GPU run with it) within 1e-4, as the other layouts do.
  void contextParallelOnOneGpuEqualsOneRank_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<bool>("flash");
    const QStringList cp2 = {"cluster.gpus_per_node=2", "parallel.cp=2"};
    QTest::newRow("ring") << cp2 + QStringList{"parallel.cp_comm=ring"} << false;
    QTest::newRow("all_to_all") << cp2 + QStringList{"parallel.cp_comm=all_to_all"} << false;
    QTest::newRow("all_to_all, fused attention") << cp2 + QStringList{"parallel.cp_comm=all_to_all", "train.attention=flash"} << true;
    QTest::newRow("ring, dp 2, pp 2") << QStringList{"cluster.gpus_per_node=8", "parallel.cp=2", "parallel.dp=2", "parallel.pp=2",
                                                     "parallel.cp_comm=ring"}
                                      << false;
  }
  void contextParallelOnOneGpuEqualsOneRank() {
    QFETCH(QStringList, overrides);
    QFETCH(bool, flash);
    std::vector<std::string> o;
    for (const auto& x : overrides) o.push_back(x.toStdString());
    const RunOut ref = flash ? train({"train.attention=flash"}, 10, true) : train({}, 10, false);
    const QString diff = compare(train(o, 10, true), ref, 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  // ZeRO on the GPU (its ranks threads sharing it, host-staged groups): the gradients
  // reduce-scattered into shards (zero 2) and the weights gathered from them for each use (zero 3,
  // with and without overlapping the gathers, through pipeline stages, with recompute, a Llama
  // model and a mixture of experts whose expert state shards over expert-dp): 10 steps within
  // 1e-4 of the CPU engine's one rank, as the other layouts are.
  void shardedDataParallelOnOneGpuEqualsTheCpuEngine_data() {
    QTest::addColumn<QStringList>("model");
    QTest::addColumn<QStringList>("layout");
    const QStringList llama = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=96"};
    const QStringList moe = llama + QStringList{"model.tied_embeddings=false", "model.moe.experts=4", "model.moe.top_k=2",
                                                "model.moe.ffn_hidden=32", "model.moe.dense_layers=1", "model.moe.shared_experts=1"};
    QTest::newRow("dp 2 zero 2") << QStringList{} << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.zero=2"};
    QTest::newRow("dp 2 zero 3") << QStringList{} << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.zero=3"};
    QTest::newRow("dp 2 zero 3, gathers after the backward")
        << QStringList{} << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.zero=3", "parallel.overlap_grad_reduce=false"};
    QTest::newRow("dp 2 pp 2 zero 3") << QStringList{} << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2", "parallel.zero=3"};
    QTest::newRow("llama dp 2 tp 2 zero 3 recompute")
        << llama << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.tp=2", "parallel.zero=3", "train.recompute=full"};
    QTest::newRow("experts: ep 2 dp 2 zero 3") << moe << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.ep=2", "parallel.zero=3"};
  }
  void shardedDataParallelOnOneGpuEqualsTheCpuEngine() {
    QFETCH(QStringList, model);
    QFETCH(QStringList, layout);
    std::vector<std::string> o;
    for (const auto& x : model) o.push_back(x.toStdString());
    const RunOut c = train(o, 10, false);
    for (const auto& x : layout) o.push_back(x.toStdString());
    const QString diff = compare(train(o, 10, true), c, 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  // A mixture of experts (4 experts of width 32, top 2, a shared one, after a dense layer) on the
  // GPU: 10 steps within 1e-4 of the CPU engine, on one rank and with ep 2 x dp 2 (its ranks
  // threads sharing the GPU, the tokens crossing host-memory groups). Routing is a decision: a
  // token whose k-th and (k+1)-th experts lie within float rounding of each other may go to the
  // other one on the GPU (cuBLAS sums in another order), which shows as a step off by ~1e-5 to
  // 1e-3; the steps compared are few, so that none does with this seed.
  void mixtureOfExpertsEqualsTheCpuEngine_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("one rank") << QStringList{};
    QTest::newRow("ep 2 x dp 2") << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.ep=2"};
    QTest::newRow("ep 2 over tp 2, recompute") << QStringList{"cluster.gpus_per_node=2", "parallel.tp=2", "parallel.ep=2", "train.recompute=full"};
  }
  void mixtureOfExpertsEqualsTheCpuEngine() {
    QFETCH(QStringList, overrides);
    std::vector<std::string> o = {"model.arch=llama", "model.kv_heads=2", "model.ffn_hidden=96", "model.tied_embeddings=false",
                                  "model.moe.experts=4", "model.moe.top_k=2", "model.moe.ffn_hidden=32", "model.moe.dense_layers=1",
                                  "model.moe.shared_experts=1"};
    const RunOut c = train(o, 10, false);
    for (const auto& x : overrides) o.push_back(x.toStdString());
    const RunOut g = train(o, 10, true);
    const QString diff = compare(g, c, 1e-4);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    std::printf("moe cuda vs cpu: loss %.6f -> %.6f (cpu %.6f -> %.6f)\n", g.losses.front(), g.losses.back(), c.losses.front(), c.losses.back());
  }

  // NCCL on one GPU: a group of one is an NCCL communicator that takes device memory, copies on
  // the device for its reduce_scatter and all_gather, and needs no store traffic.
  void ncclGroupOfOneWorksOnTheGpu() {
    auto local = testing::start_local_store();
    QVERIFY2(local.ok(), local.ok() ? "" : local.status().message().c_str());
    comm::RendezvousClient* store = local->client.get();
    auto c = comm::create_nccl_communicator(*store, *gpu_, 0, {0});
    QVERIFY2(c.ok(), c.status().message().c_str());
    comm::Communicator& nc = *c.value();
    QVERIFY(nc.device_memory());
    Twin in(*gpu_, randn(1001, 3)), out(*gpu_, 1001);
    QVERIFY(nc.all_gather(std::span<const float>(in.g(), 1001), std::span<float>(out.g(), 1001)).ok());
    QCOMPARE(out.back(*gpu_), in.host);
    QVERIFY(nc.reduce_scatter(std::span<const float>(in.g(), 1001), std::span<float>(out.g(), 1001)).ok());
    QVERIFY(nc.all_reduce(std::span<float>(out.g(), 1001)).ok());
    QCOMPARE(out.back(*gpu_), in.host);
    QVERIFY(nc.all_reduce_async(std::span<float>(out.g(), 1001)).ok());
    QVERIFY(nc.wait_async().ok());
    QCOMPARE(out.back(*gpu_), in.host);
    QVERIFY(nc.barrier().ok());
    QVERIFY(gpu_->synchronize().ok());
  }

  // A single-rank run whose groups are NCCL communicators (device memory, nothing staged through
  // the host) trains exactly as the same run over host-staged groups.
  void ncclGroupsTrainAsHostStagedOnes() {
    const RunOut staged = train({}, 10, true), nccl = train_over_nccl({}, 10);
    const QString diff = compare(nccl, staged, 1e-6);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  // Real worker processes: two ranks that share one GPU cannot use NCCL, and the run says so in
  // one line; with two GPUs or more, dp, tp and pp over NCCL equal the same layouts over Gloo
  // (and the single rank) within 1e-5 (fp32 summation order).
  void workersOverNccl_data() {
    QTest::addColumn<int>("gpus");
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("dp=2") << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2"};
    // DP buckets on NCCL's second stream while the backward goes on (grad_reducer.h), and the
    // same reduction after the backward.
    QTest::newRow("dp=2, small buckets during the backward")
        << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.grad_bucket_mb=0.01"};
    QTest::newRow("dp=2, reduced after the backward")
        << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.overlap_grad_reduce=false"};
    QTest::newRow("tp=2") << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.tp=2"};
    QTest::newRow("pp=2 1f1b") << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.pp=2"};
    QTest::newRow("pp=2 interleaved") << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.pp=2", "pipeline.schedule=interleaved",
                                                          "pipeline.virtual_stages=2"};
    QTest::newRow("dp=2 pp=2 zero 1") << 4 << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.pp=2", "parallel.zero=1"};
    QTest::newRow("dp=2 tp=2 pp=2") << 8 << QStringList{"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2"};
    // Context parallelism: the ring's send/recv and Ulysses' all-to-all (grouped send/recv) on NCCL.
    QTest::newRow("cp=2 ring") << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.cp=2", "parallel.cp_comm=ring"};
    QTest::newRow("cp=2 all_to_all") << 2 << QStringList{"cluster.gpus_per_node=2", "parallel.cp=2", "parallel.cp_comm=all_to_all"};
  }
  void workersOverNccl() {
    QFETCH(int, gpus);
    QFETCH(QStringList, layout);
    QTemporaryDir dir;
    QVERIFY(write_gpu_run(dir, "nccl"));
    const QString run_yaml = dir.filePath("run.yaml");
    const QStringList common = {"train.data=" + dir.filePath("tokens.bin"), "train.checkpoint_dir=" + dir.filePath("ck"),
                                "train.steps=6", "train.hang_timeout_s=120"};
    {
      // Two ranks, one visible GPU: NCCL cannot put both on it.
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert("CUDA_VISIBLE_DEVICES", "0");
      const RunOut shared = run_cli(run_yaml, common + QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "comm=nccl"}, env);
      QVERIFY2(QString::fromStdString(shared.error).contains("comm=nccl: 2 ranks on this machine share 1 GPU(s)"), shared.error.c_str());
    }
    if (cuda_device_count() < gpus) {
      QSKIP(qPrintable(QString("needs %1 GPUs, this machine shows %2").arg(gpus).arg(cuda_device_count())));
    }
    const RunOut one = run_cli(run_yaml, common);
    const RunOut gloo = run_cli(run_yaml, common + layout + QStringList{"comm=gloo"});
    const RunOut nccl = run_cli(run_yaml, common + layout + QStringList{"comm=nccl"});
    QString diff = compare(nccl, gloo, 1e-5);
    QVERIFY2(diff.isEmpty(), qPrintable("nccl vs gloo: " + diff));
    diff = compare(nccl, one, 1e-5);
    QVERIFY2(diff.isEmpty(), qPrintable("nccl vs one rank: " + diff));
  }

  void checkpointsMoveBetweenCpuAndCuda() {
    const QString dir = QDir::tempPath() + "/stagecraft-tst-cuda-" + QString::number(QCoreApplication::applicationPid());
    const std::string ck = (dir + "/ck").toStdString();
    const RunOut whole = train({"train.steps=12"}, 12, false);
    // 6 steps on the CPU, the rest on the GPU; then 6 on the GPU, the rest on the CPU.
    for (bool first_gpu : {false, true}) {
      std::filesystem::remove_all(ck);
      const RunOut a = train({"train.checkpoint_dir=" + ck, "train.steps=12"}, 6, first_gpu, true);
      QVERIFY2(a.error.empty(), a.error.c_str());
      const RunOut b = train({"train.checkpoint_dir=" + ck, "train.steps=12", "train.resume=" + ck + "/step-6"}, 6, !first_gpu);
      QVERIFY2(b.error.empty(), b.error.c_str());
      for (size_t i = 0; i < 6; ++i) {
        QVERIFY2(close(b.losses[i], whole.losses[6 + i], 1e-4),
                 qPrintable(QString("%1 first, step %2: %3 vs %4").arg(first_gpu ? "gpu" : "cpu").arg(7 + i).arg(b.losses[i]).arg(whole.losses[6 + i])));
      }
    }
    // eval of the last checkpoint: the GPU's loss equals the CPU's.
    {
      const std::string bin = (dir + "/tokens.bin").toStdString();
      std::vector<uint16_t> t;
      for (int i = 0; i < 6000; ++i) t.push_back(static_cast<uint16_t>(((i % 29) * 7 + (i / 113)) % 96));
      FILE* f = std::fopen(bin.c_str(), "wb");
      QVERIFY(f && std::fwrite(t.data(), sizeof(uint16_t), t.size(), f) == t.size());
      std::fclose(f);
      auto cfg = config::parse_config(kBase, "test.yaml", {});
      QVERIFY(cfg.ok());
      auto on_cpu = evaluate_checkpoint(cfg->model, ck + "/step-6", bin, 20);
      auto on_gpu = evaluate_checkpoint(cfg->model, ck + "/step-6", bin, 20, gpu_.get());
      QVERIFY2(on_cpu.ok() && on_gpu.ok(), (on_cpu.status().message() + on_gpu.status().message()).c_str());
      QVERIFY2(close(on_cpu->loss, on_gpu->loss, 1e-5), qPrintable(QString("eval %1 vs %2").arg(on_cpu->loss).arg(on_gpu->loss)));
    }
    std::filesystem::remove_all(dir.toStdString());
  }
};

int main(int argc, char** argv) {
  if (!runtime::cuda_built()) {
    std::printf("SKIPPED: this build has no CUDA backend (configure with -DSTAGECRAFT_WITH_CUDA=ON)\n");
    return 77;
  }
  if (runtime::cuda_device_count() == 0) {
    std::printf("SKIPPED: no GPU is visible to this process (nvidia-smi, CUDA_VISIBLE_DEVICES)\n");
    return 77;
  }
  if (!take_kernels_argument(argc, argv)) return 2;
  // Asked for the warpgroup products (tst_cuda_flash_wgmma) where they cannot run: the whole
  // entry is skipped, not passed on mma.sync.
  if (warpgroups_asked()) {
    if (const std::string unable = warpgroups_unable(); !unable.empty()) {
      std::printf("SKIPPED: %s\n", unable.c_str());
      return 77;
    }
  }
  TestCuda t;
  return QTest::qExec(&t, argc, argv);
}

#include "tst_cuda.moc"
