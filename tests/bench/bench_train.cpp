// bench_train: tokens/s of Stagecraft's training step (GptStage + Trainer, one rank, the path
// the workers run) for a small model — 4 layers, hidden 256, 4 heads, seq 256, batch 8, vocab
// 256, AdamW, clip 1.0: GPT-2, or with --llama a Llama of the same width (4 query heads on 2
// key/value heads, SwiGLU FFN 688, RMSNorm, rotary positions, untied head) — at 1 and 2 threads,
// next to PyTorch's for the same model and batch (tests/bench/bench_kernels_torch.py or
// bench_llama_torch.py via Debian's /usr/bin/python3), measured in the same run. Prints a
// table; asserts nothing about time. With --breakdown, then the kernel time of a step at 2
// threads, kernel by kernel (kernel_breakdown.h). With --record DB, every step of each thread
// count's row, the warm-ups too, is kept as a run of the run history at DB (named "bench_train
// gpt2 2 threads"), which `stagecraft-cli runs compare` and `calibrate` read as a worker's run
// (the cpu device plans a rank with every core of the machine: calibrate on the row that had them);
// "recorded as run N in DB" follows the row.
//
// With --cp: context parallelism instead, ranks as threads of this process over Gloo on
// 127.0.0.1 (the workers' transport): the same tiny GPT-2 (4 layers, hidden 256, 4 heads, vocab
// 256), a global batch of 2 sequences, one rank at sequence 512 and at 2048, and two ranks
// splitting each 2048-token sequence (parallel.cp 2) over the ring and over Ulysses' all-to-all;
// ms per step (best of 3 after a warm-up step), tokens/s and rank 0's cp group time.
//
// With --moe: a mixture of experts against the dense Llama of equal active parameters (4 layers,
// hidden 256, 4 heads on 2 key/value heads, seq 256, global batch 8, vocab 256; the dense MLP
// 688 wide, the mixture 8 experts of 344, top 2, so a token passes 688 of MLP either way), on one
// rank and over two ranks as threads over Gloo, dp 2 with every expert on each (ep 1) and with the
// experts split (ep 2): ms per step, tokens/s, rank 0's ep group time (the dispatch's counts and
// rows, both ways, forward and backward) and its share of the step.
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stagecraft/comm/gloo_communicator.h"
#include "stagecraft/comm/rendezvous.h"

#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/trainer.h"
#include "kernel_breakdown.h"
#include "single_rank.h"

using namespace stagecraft;

namespace {

struct CpFigures {
  double ms = 0, cp_ms = 0, ep_ms = 0;
  std::string error;
};

// Every rank of `yaml`'s plan as a thread of this process, over Gloo on 127.0.0.1 with a store of
// its own; rank 0's best step of `steps` after one warm-up step.
CpFigures run_ranks(const std::string& yaml, const runtime::TokenData& data, int steps) {
  CpFigures out;
  auto config = config::parse_config(yaml, "bench", {});
  if (!config.ok()) return {0, 0, 0, config.status().message()};
  auto plan = plan::make_plan(config.value());
  if (!plan.ok()) return {0, 0, 0, plan.status().message()};
  comm::RendezvousServerOptions so;
  so.host = "127.0.0.1";
  so.token = "bench";
  auto server = comm::RendezvousServer::start(so);
  if (!server.ok()) return {0, 0, 0, server.status().message()};
  const int world = plan->topology.world_size();
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) {
        std::lock_guard<std::mutex> lock(mu);
        if (out.error.empty()) out.error = "rank " + std::to_string(r) + ": " + s.message();
      };
      comm::RendezvousClientOptions co;
      co.port = server.value()->port();
      co.token = "bench";
      auto client = comm::RendezvousClient::connect(co);
      if (!client.ok()) return fail(client.status());
      comm::GlooDeviceOptions go;
      go.hostname = "127.0.0.1";
      auto device = comm::GlooDevice::create(go);
      if (!device.ok()) return fail(device.status());
      auto groups = comm::build_process_groups(plan->topology, r, config->model.tied_embeddings,
                                               comm::gloo_communicator_factory(*client.value(), device.value(), r));
      auto layout = comm::rank_layout_of(plan.value(), r);
      if (!groups.ok() || !layout.ok()) return fail(groups.ok() ? layout.status() : groups.status());
      auto t = runtime::Trainer::create(config.value(), layout.value(), groups.value().trainer_groups(), &data);
      if (!t.ok()) return fail(t.status());
      if (Status s = t.value()->start(); !s) return fail(s);
      double best = 1e18, cp_ms = 0, ep_ms = 0;
      for (int i = 0; i <= steps; ++i) {
        auto st = t.value()->train_step();
        if (!st.ok()) return fail(st.status());
        if (i > 0 && st->step_ms < best) {
          best = st->step_ms;
          cp_ms = st->timing.cp_ms;
          ep_ms = st->timing.ep_ms;
        }
      }
      if (r == 0) {
        std::lock_guard<std::mutex> lock(mu);
        out.ms = best;
        out.cp_ms = cp_ms;
        out.ep_ms = ep_ms;
      }
    });
  }
  for (auto& th : threads) th.join();
  return out;
}

int bench_cp() {
  const auto data = bench::synthetic_tokens(1 << 16, 256);
  runtime::cpu::set_num_threads(2);  // the pool is the process's: two ranks share the two threads
  std::printf("Stagecraft context parallelism, GPT-2 4 layers, C 256, NH 4, V 256, global batch 2 sequences, ranks as threads over Gloo\n");
  std::printf("%-28s %6s %10s %10s %10s\n", "layout", "seq", "ms/step", "tokens/s", "cp ms");
  struct Row {
    const char* name;
    int seq, cp;
    const char* comm;
  };
  for (const Row& row : {Row{"cp 1 (one rank)", 512, 1, "ring"}, Row{"cp 1 (one rank)", 2048, 1, "ring"}, Row{"cp 2, ring", 2048, 2, "ring"},
                         Row{"cp 2, all_to_all", 2048, 2, "all_to_all"}}) {
    const std::string yaml = "cluster: {nodes: 1, gpus_per_node: " + std::to_string(row.cp) + ", device: cpu}\n" +
                             "model: {layers: 4, hidden: 256, heads: 4, seq_len: " + std::to_string(row.seq) + ", vocab: 256}\n" +
                             "parallel: {cp: " + std::to_string(row.cp) + ", cp_comm: " + row.comm + "}\n" +
                             "train: {global_batch: 2, micro_batch: 1, steps: 1000, lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}\n";
    const CpFigures f = run_ranks(yaml, data, 3);
    if (!f.error.empty()) {
      std::fprintf(stderr, "bench_train --cp: %s\n", f.error.c_str());
      return 1;
    }
    std::printf("%-28s %6d %10.1f %10.0f %10.1f\n", row.name, row.seq, f.ms, 2.0 * row.seq / (f.ms / 1e3), f.cp_ms);
    std::fflush(stdout);
  }
  return 0;
}

int bench_moe() {
  const auto data = bench::synthetic_tokens(1 << 16, 256);
  runtime::cpu::set_num_threads(2);  // the pool is the process's: two ranks share the two threads
  std::printf("Stagecraft mixture of experts against dense, Llama 4 layers, C 256, NH 4, NKV 2, T 256, global batch 8, V 256, AdamW;\n"
              "ranks as threads of one process over Gloo, 2 threads in all\n");
  std::printf("%-34s %10s %10s %10s %10s\n", "layout", "ms/step", "tokens/s", "ep ms", "ep share");
  struct Row {
    const char* name;
    bool moe;
    int dp, ep;
  };
  for (const Row& row : {Row{"dense, FFN 688, one rank", false, 1, 1}, Row{"MoE 8 x 344, top 2, one rank", true, 1, 1},
                         Row{"dense, dp 2", false, 2, 1}, Row{"MoE, dp 2, ep 1", true, 2, 1}, Row{"MoE, dp 2, ep 2", true, 2, 2}}) {
    const std::string yaml = "cluster: {nodes: 1, gpus_per_node: " + std::to_string(row.dp) + ", device: cpu}\n" +
                             "model: {arch: llama, layers: 4, hidden: 256, heads: 4, kv_heads: 2, seq_len: 256, vocab: 256, tied_embeddings: false, " +
                             (row.moe ? "ffn_hidden: 344, moe: {experts: 8, top_k: 2}}\n" : "ffn_hidden: 688}\n") +
                             "parallel: {dp: " + std::to_string(row.dp) + (row.moe ? ", ep: " + std::to_string(row.ep) : std::string()) + "}\n" +
                             "train: {global_batch: 8, micro_batch: " + std::to_string(8 / row.dp) +
                             ", steps: 1000, lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}\n";
    const CpFigures f = run_ranks(yaml, data, 3);
    if (!f.error.empty()) {
      std::fprintf(stderr, "bench_train --moe: %s\n", f.error.c_str());
      return 1;
    }
    std::printf("%-34s %10.1f %10.0f %10.1f %9.1f%%\n", row.name, f.ms, 8.0 * 256 / (f.ms / 1e3), f.ep_ms, 100.0 * f.ep_ms / f.ms);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool breakdown = false, llama = false;
  std::string mode, record;  // mode: --cp or --moe, the first given
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--breakdown") {
      breakdown = true;
    } else if (a == "--llama") {
      llama = true;
    } else if (a == "--cp" || a == "--moe") {
      if (mode.empty()) mode = a;
    } else if (a == "--record") {
      auto db = bench::record_argument("bench_train", argc, argv, i);
      if (!db) return 2;
      record = *db;
    } else {
      std::fprintf(stderr, "bench_train: unknown argument %s (usage: bench_train [--llama] [--breakdown] [--record DB] | --cp | --moe)\n",
                   a.c_str());
      return 2;
    }
  }
  if (!mode.empty() && !record.empty()) {
    // Their ranks are threads of this process sharing its cores, which no plan describes.
    std::fprintf(stderr, "bench_train: --record keeps the one-rank rows; %s runs its ranks as threads of one process, use it without --record\n",
                 mode.c_str());
    return 2;
  }
  if (mode == "--cp") return bench_cp();
  if (mode == "--moe") return bench_moe();
  if (!record.empty() && !bench::history_opens("bench_train", record)) return 1;
  constexpr int kWarmups = 2, kTimed = 5;  // the run's steps: train.steps is their number
  auto rank = bench::single_rank(std::string("cluster: {nodes: 1, gpus_per_node: 1, device: cpu}\n") +
                                 (llama ? "model: {arch: llama, layers: 4, hidden: 256, heads: 4, kv_heads: 2, ffn_hidden: 688, seq_len: 256, "
                                          "vocab: 256, tied_embeddings: false}\n"
                                        : "model: {layers: 4, hidden: 256, heads: 4, seq_len: 256, vocab: 256}\n") +
                                 "train: {global_batch: 8, micro_batch: 8, steps: " + std::to_string(kWarmups + kTimed) +
                                 ", lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}\n");
  if (!rank) return 1;
  const auto data = bench::synthetic_tokens(1 << 16, 256);
  std::printf("Stagecraft engine (GptStage + Trainer), %s, 4 layers, C 256, NH 4%s, T 256, B 8, V 256, AdamW\n", llama ? "Llama" : "GPT-2",
              llama ? ", NKV 2, FFN 688 (SwiGLU)" : "");
  std::printf("%7s %10s %10s\n", "threads", "ms/step", "tokens/s");
  for (int threads : {1, 2}) {
    runtime::cpu::set_num_threads(threads);
    auto t = runtime::Trainer::create(rank->config, rank->layout, rank->groups.trainer_groups(), &data);
    if (!t.ok() || !t.value()->start()) return 1;
    std::vector<runtime::StepStats> steps;  // every step taken, for --record
    for (int i = 0; i < kWarmups; ++i) {  // warm-up
      if (auto st = t.value()->train_step(); st.ok()) steps.push_back(std::move(st).value());
    }
    double best = 1e9;
    for (int rep = 0; rep < kTimed; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto st = t.value()->train_step();
      if (!st.ok()) return 1;
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      steps.push_back(std::move(st).value());
    }
    std::printf("%7d %10.1f %10.0f\n", threads, best * 1e3, 8 * 256 / best);
    if (!record.empty()) {
      const std::string how = std::to_string(threads) + (threads == 1 ? " thread" : " threads");
      if (!bench::record_steps("bench_train", record, *rank, std::string("bench_train ") + (llama ? "llama " : "gpt2 ") + how, steps,
                               "bench_train: one rank in this process, " + how, runtime::host_device())) {
        return 1;
      }
    }
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
