// The environment a worker rank starts with (docs/ARCHITECTURE.md §8): torchrun-compatible, so the
// launcher can start any program, plus Stagecraft's run id and rendezvous token.
//
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (node index),
//   MASTER_ADDR, MASTER_PORT (the rendezvous store; for another program, launch.program, node 0
//   and a free port there, where its own rank 0 serves torch.distributed's store),
//   STAGECRAFT_RUN_ID, STAGECRAFT_RUN_TOKEN (left out when no store is served),
//   CUDA_VISIBLE_DEVICES (the rank's GPU, cuda backend), OMP_NUM_THREADS (cores per local rank).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "stagecraft/core/status.h"

namespace stagecraft::launch {

struct WorkerEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;           // node index
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string run_id;
  std::string token;
  int threads = 1;              // OMP_NUM_THREADS
  int cuda_device = -1;         // CUDA_VISIBLE_DEVICES; -1 = not set
};

// The variables for one rank.
std::map<std::string, std::string> to_environment(const WorkerEnv& env);

// Reads and checks them; `get` returns nullptr for an unset variable (std::getenv by default).
// Fails with one line naming the variable and what is wrong.
Result<WorkerEnv> read_worker_env(const std::function<const char*(const char*)>& get = nullptr);

// Threads for each of `local_ranks` processes sharing this machine's cores (at least 1).
int threads_per_rank(int local_ranks);

// A random hex token of `bytes` bytes from the system's entropy source.
std::string random_token(int bytes = 16);

}  // namespace stagecraft::launch
