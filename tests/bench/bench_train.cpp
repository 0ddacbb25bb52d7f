// bench_train: tokens/s of Stagecraft's training step (GptStage + Trainer, one rank, the path
// the workers run) for the model — 4 layers, hidden 256, 4 heads, seq 256, batch 8,
// vocab 256, AdamW, clip 1.0 — at 1 and 2 threads, next to PyTorch's for the same model and
// batch (tests/bench/bench_kernels_torch.py via Debian's /usr/bin/python3), measured in the
// same run. Prints a table; asserts nothing about time. With --breakdown, then the kernel time
// of a step at 2 threads, kernel by kernel (kernel_breakdown.h).
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
  const bool breakdown = argc > 1 && std::string(argv[1]) == "--breakdown";
  auto rank = bench::single_rank(
      "cluster: {nodes: 1, gpus_per_node: 1, device: cpu}\n"
      "model: {layers: 4, hidden: 256, heads: 4, seq_len: 256, vocab: 256}\n"
      "train: {global_batch: 8, micro_batch: 8, steps: 1000, lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}\n");
  if (!rank) return 1;
  const auto data = bench::synthetic_tokens(1 << 16, 256);
  std::printf("Stagecraft engine (GptStage + Trainer), 4 layers, C 256, NH 4, T 256, B 8, V 256, AdamW\n");
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
  const std::string cmd = "/usr/bin/python3 " STAGECRAFT_SOURCE_DIR "/tests/bench/bench_kernels_torch.py 1 2";
  if (std::system(cmd.c_str()) != 0) std::printf("(PyTorch not available: apt-get install python3-torch)\n");
  return 0;
}
