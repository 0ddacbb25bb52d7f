// bench_gpu_train: Stagecraft's training step on one GPU (backend cuda, one rank: GptStage +
// Trainer, the path the workers run) for GPT-2 124M, 350M and 774M shapes and a Llama 3.2 1B
// shape (16 layers, hidden 2048, 32 query heads on 8 key/value heads, SwiGLU FFN 8192, vocabulary
// 128256, tied head) at seq_len 1024, next to the cost model's prediction for the same plan on
// the device catalog's GPU. Prints
// per shape: ms a step, tokens/s, model TFLOP/s, MFU against the catalog's dense peak for the
// precision, and the peak memory (the engine's allocations' high-water mark) beside the plan's
// peak without its workspace (the CUDA context and libraries, which the engine does not count)
// and how far the plan is from it.
//
//   bench_gpu_train [standard|flash] [fp32|bf16] [DEVICE] [--breakdown] [--micro-batch B] [--accumulate N]
//                   [--model 124M|350M|774M|llama-1b] [--record DB] [--set KEY=VALUE]...
//   (default: flash fp32 H100-SXM, every shape, each shape's own micro-batch, one micro-batch a step)
//
// --micro-batch B: B sequences a micro-batch for every shape (default 8, 8, 4 and 4).
// --accumulate N: N micro-batches a step, their gradients summed before one update, as real
// runs do (llm.c's GPT-2 runs take half a million tokens a step): the update, the gradient norm
// and the weights' bf16 copy are then paid once per N micro-batches.
// --set KEY=VALUE: a config key of every shape's run, as `stagecraft-cli run` takes them; the
// kernel paths (train.kernels.flash=wgmma, train.kernels.layernorm_backward_warps=8, ...) are the
// ones to compare. Each row is followed by the kernel path each kind of work took.
// --breakdown: after each shape's row, the kernel time of its step, kernel by kernel
// (kernel_breakdown.h; each kernel timed alone, so the step there is slower than the row's).
// --record DB: every step of each shape's row, the warm-ups too, kept as a run of the run history
// at DB (named "bench_gpu_train 774M bf16 flash mb4 x8"; its config the row's, on DEVICE with
// backend cuda), so that `stagecraft-cli runs compare` and `calibrate` read it as a worker's run;
// "recorded as run N in DB" follows the row (docs/calibration.md#profiles-from-the-benchmarks).
//
// Asserts nothing about time; exits 77 without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/run_kernels.h"
#include "stagecraft/launch/step_events.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/trainer.h"
#include "kernel_breakdown.h"
#include "single_rank.h"

using namespace stagecraft;

namespace {

struct Shape {
  const char* name;
  const char* arch;
  int layers, hidden, heads, kv_heads, ffn, vocab, micro_batch;
};

// GPT-2's shapes (vocabulary padded to 50304, tied head) and Llama 3.2 1B's (tied head), each
// with its default micro-batch.
constexpr Shape kShapes[] = {{"124M", "gpt2", 12, 768, 12, 12, 3072, 50304, 8},
                             {"350M", "gpt2", 24, 1024, 16, 16, 4096, 50304, 8},
                             {"774M", "gpt2", 36, 1280, 20, 20, 5120, 50304, 4},
                             {"llama-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 4}};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  bool breakdown = false;
  int micro_batch = 0, accumulate = 1;
  std::string only, record;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--breakdown") {
      breakdown = true;
    } else if (a == "--set") {
      if (i + 1 >= argc || std::string(argv[i + 1]).find('=') == std::string::npos) {
        std::fprintf(stderr, "bench_gpu_train: --set takes KEY=VALUE, a config key (train.kernels.flash=wgmma)\n");
        return 2;
      }
      overrides.push_back(argv[++i]);
    } else if (a == "--model") {
      only = i + 1 < argc ? argv[++i] : "";
      if (std::none_of(std::begin(kShapes), std::end(kShapes), [&](const Shape& s) { return only == s.name; })) {
        std::fprintf(stderr, "bench_gpu_train: --model takes 124M, 350M, 774M or llama-1b\n");
        return 2;
      }
    } else if (a == "--record") {
      auto db = bench::record_argument("bench_gpu_train", argc, argv, i);
      if (!db) return 2;
      record = *db;
    } else if (a == "--micro-batch" || a == "--accumulate") {
      char* end = nullptr;
      const long v = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || v < 1 || v > 4096) {
        std::fprintf(stderr, "bench_gpu_train: %s takes a whole number from 1 to 4096\n", a.c_str());
        return 2;
      }
      (a == "--micro-batch" ? micro_batch : accumulate) = static_cast<int>(v);
      ++i;
    } else {
      args.push_back(a);
    }
  }
  const std::string attention = args.size() > 0 ? args[0] : "flash";
  const std::string precision = args.size() > 1 ? args[1] : "fp32";
  const std::string device_name = args.size() > 2 ? args[2] : "H100-SXM";
  if (runtime::cuda_device_count() == 0) {
    std::printf("SKIPPED: %s\n", runtime::cuda_built() ? "no GPU visible" : "this build has no CUDA backend");
    return 77;
  }
  auto gpu = runtime::make_device(config::Backend::kCuda, 0);
  if (!gpu.ok()) {
    std::fprintf(stderr, "%s\n", gpu.status().message().c_str());
    return 1;
  }
  runtime::Device& dev = *gpu.value();
  if (!record.empty() && !bench::history_opens("bench_gpu_train", record)) return 1;
  std::printf("%s, %s, attention %s, seq_len 1024, %d micro-batch%s a step; predictions for %s\n", dev.name().c_str(),
              precision.c_str(), attention.c_str(), accumulate, accumulate == 1 ? "" : "es", device_name.c_str());
  for (const std::string& o : overrides) std::printf("with %s\n", o.c_str());
  std::printf("%-8s %3s %9s %9s %9s %7s %9s | %9s %9s %9s %8s\n", "model", "B", "ms/step", "tokens/s", "TFLOP/s", "MFU", "peak GiB",
              "pred ms", "pred tok/s", "pred GiB", "mem off");
  const auto data = bench::synthetic_tokens(1 << 20, 50257);
  constexpr int kWarmups = 2, kTimed = 5;  // the run's steps: train.steps is their number
  double peak_tflops = 0;
  for (Shape s : kShapes) {
    if (!only.empty() && only != s.name) continue;
    if (micro_batch > 0) s.micro_batch = micro_batch;
    const int global_batch = s.micro_batch * accumulate;
    const std::string yaml = "cluster: {nodes: 1, gpus_per_node: 1, device: " + device_name + "}\n" +
                             "model: {arch: " + s.arch + ", layers: " + std::to_string(s.layers) + ", hidden: " + std::to_string(s.hidden) +
                             ", heads: " + std::to_string(s.heads) + ", kv_heads: " + std::to_string(s.kv_heads) +
                             ", ffn_hidden: " + std::to_string(s.ffn) + ", seq_len: 1024, vocab: " + std::to_string(s.vocab) + "}\n" +
                             "train: {global_batch: " + std::to_string(global_batch) + ", micro_batch: " + std::to_string(s.micro_batch) +
                             ", steps: " + std::to_string(kWarmups + kTimed) + ", lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0, precision: " + precision + ", attention: " + attention +
                             "}\nbackend: cuda\n";
    auto rank = bench::single_rank(yaml, overrides);
    if (!rank) return 1;
    double best = 1e9, ready_s = 0;
    size_t peak = 0;
    std::vector<runtime::StepStats> steps;  // every step taken, for --record
    {
      const auto created = std::chrono::steady_clock::now();
      auto t = runtime::Trainer::create(rank->config, rank->layout, rank->groups.trainer_groups(), &data, &dev);
      if (!t.ok()) {
        std::printf("%-8s %3d %s\n", s.name, s.micro_batch, t.status().message().c_str());
        continue;
      }
      if (Status st = t.value()->start(); !st) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
      ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - created).count();
      for (int i = 0; i < kWarmups; ++i) {  // warm-up: the allocator's pool, cuBLAS's heuristics
        if (auto st = t.value()->train_step(); st.ok()) steps.push_back(std::move(st).value());
      }
      for (int rep = 0; rep < kTimed; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        auto st = t.value()->train_step();  // ends with a synchronize
        if (!st.ok()) {
          std::fprintf(stderr, "%s\n", st.status().message().c_str());
          return 1;
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        peak = std::max(peak, st->mem_bytes);
        steps.push_back(std::move(st).value());
      }
    }
    const auto& e = rank->plan.estimate;
    peak_tflops = e.peak_tflops;
    const double tokens_per_step = double(global_batch) * 1024;
    const double tflops = e.model_flops / best / 1e12;
    // The engine's peak counts what it allocates (Device::peak_bytes), not the CUDA context and
    // libraries the cost model's workspace stands for: pred GiB is the plan's peak without it, and
    // mem off how far that is from the measured peak (+: the plan predicts more).
    const double predicted = e.peak_memory_bytes - (e.memory.empty() ? 0.0 : e.memory.front().workspace);
    std::printf("%-8s %3d %9.1f %9.0f %9.1f %6.1f%% %9.2f | %9.1f %9.0f %9.2f %+7.1f%%\n", s.name, s.micro_batch, best * 1e3,
                tokens_per_step / best, tflops, 100.0 * tflops / e.peak_tflops, peak / double(1ull << 30), e.step_time_s * 1e3,
                e.tokens_per_s, predicted / double(1ull << 30), peak > 0 ? 100.0 * (predicted / double(peak) - 1) : 0.0);
    std::printf("       trainer created and its weights drawn in %.1f s (%d host threads)\n", ready_s, runtime::cpu::num_threads());
    std::printf("       kernels: %s\n", launch::kernel_paths_text(launch::kernel_paths_of(dev, rank->config)).c_str());
    std::fflush(stdout);
    if (!record.empty()) {
      std::string name = std::string("bench_gpu_train ") + s.name + " " + precision + " " + attention + " mb" +
                               std::to_string(s.micro_batch) + " x" + std::to_string(accumulate);
      for (const std::string& o : overrides) name += " " + o;
      if (!bench::record_steps("bench_gpu_train", record, *rank, name, steps, "bench_gpu_train: one rank in this process on " + dev.name(), dev)) {
        return 1;
      }
    }
    if (breakdown && !bench::print_kernel_breakdown(rank->config, rank->layout, rank->groups.trainer_groups(), data, dev, 3)) return 1;
  }
  std::printf("MFU against the catalog's dense %s peak of %s (%.1f TFLOP/s).\n", precision.c_str(), device_name.c_str(), peak_tflops);
  return 0;
}
