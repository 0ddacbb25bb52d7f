// bench_train: tokens/s of Stagecraft's training step (GptStage + Trainer, one rank, the path
// the workers run) for a small model — 4 layers, hidden 256, 4 heads, seq 256, batch 8, vocab
// 256, AdamW, clip 1.0: GPT-2, or with --llama a Llama of the same width (4 query heads on 2
// key/value heads, SwiGLU FFN 688, RMSNorm, rotary positions, untied head) — at 1 and 2 threads,
// next to PyTorch's for the same model and batch (tests/bench/bench_kernels_torch.py or
// bench_llama_torch.py via Debian's /usr/bin/python3), measured in the same run. Prints a
// table; asserts nothing about time. With --breakdown, then the kernel time of a step at 2
// threads, kernel by kernel (kernel_breakdown.h).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/trainer.h"
#include "kernel_breakdown.h"
#include "single_rank.h"

using namespace stagecraft;

int main(int argc, char** argv) {
  bool breakdown = false, llama = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--breakdown") {
      breakdown = true;
    } else if (a == "--llama") {
      llama = true;
    } else {
      std::fprintf(stderr, "bench_train: unknown argument %s (usage: bench_train [--llama] [--breakdown])\n", a.c_str());
      return 2;
    }
  }
  auto rank = bench::single_rank(std::string("cluster: {nodes: 1, gpus_per_node: 1, device: cpu}\n") +
                                 (llama ? "model: {arch: llama, layers: 4, hidden: 256, heads: 4, kv_heads: 2, ffn_hidden: 688, seq_len: 256, "
                                          "vocab: 256, tied_embeddings: false}\n"
                                        : "model: {layers: 4, hidden: 256, heads: 4, seq_len: 256, vocab: 256}\n") +
                                 "train: {global_batch: 8, micro_batch: 8, steps: 1000, lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}\n");
  if (!rank) return 1;
  const auto data = bench::synthetic_tokens(1 << 16, 256);
  std::printf("Stagecraft engine (GptStage + Trainer), %s, 4 layers, C 256, NH 4%s, T 256, B 8, V 256, AdamW\n", llama ? "Llama" : "GPT-2",
              llama ? ", NKV 2, FFN 688 (SwiGLU)" : "");
  std::printf("%7s %10s %10s\n", "threads", "ms/step", "tokens/s");
  for (int threads : {1, 2}) {
    runtime::cpu::set_num_threads(threads);
    auto t = runtime::Trainer::create(rank->config, rank->layout, rank->groups.trainer_groups(), &data);
    if (!t.ok() || !t.value()->start()) return 1;
    for (int i = 0; i < 2; ++i) (void)t.value()->train_step();  // warm-up
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto st = t.value()->train_step();
      if (!st.ok()) return 1;
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%7d %10.1f %10.0f\n", threads, best * 1e3, 8 * 256 / best);
  }
  std::fflush(stdout);
  if (breakdown) {
    std::printf("\n");
    if (!bench::print_kernel_breakdown(rank->config, rank->layout, rank->groups.trainer_groups(), data, runtime::host_device(), 3)) return 1;
  }
  std::printf("\nPyTorch (/usr/bin/python3, the same model and batch):\n");
  std::fflush(stdout);
  const std::string cmd = std::string("/usr/bin/python3 " STAGECRAFT_SOURCE_DIR "/tests/bench/") +
                          (llama ? "bench_llama_torch.py 1 2" : "bench_kernels_torch.py 1 2");
  if (std::system(cmd.c_str()) != 0) std::printf("(PyTorch not available: apt-get install python3-torch)\n");
  return 0;
}
