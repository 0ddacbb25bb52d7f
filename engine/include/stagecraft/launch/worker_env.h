// The environment a worker rank starts with (docs/ARCHITECTURE.md §8): torchrun-compatible, so the
// launcher can start any program, plus Stagecraft's run id and rendezvous token.
//
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (node index),
//   MASTER_ADDR, MASTER_PORT (the rendezvous store; for another program, launch.program, node 0
//   and a free port there, where its own rank 0 serves torch.distributed's store),
//   STAGECRAFT_RUN_ID, STAGECRAFT_RUN_TOKEN (left out when no store is served),
//   CUDA_VISIBLE_DEVICES (cuda backend: the rank's GPU; for another program the node's selected
//   GPUs, LOCAL_RANK indexing them), OMP_NUM_THREADS (cores per local rank).
//
// Under Slurm (srun sets SLURM_PROCID and RANK is not set) the same variables come from Slurm's:
//   RANK = SLURM_PROCID, WORLD_SIZE = SLURM_NTASKS, LOCAL_RANK = SLURM_LOCALID,
//   GROUP_RANK = SLURM_NODEID, LOCAL_WORLD_SIZE = SLURM_NTASKS_PER_NODE (else SLURM_NTASKS /
//   SLURM_JOB_NUM_NODES), MASTER_ADDR = the first host of SLURM_JOB_NODELIST (where the batch
//   step serves the store, slurm.h), OMP_NUM_THREADS = SLURM_CPUS_PER_TASK (else 1);
// MASTER_PORT and the run's id and token come from the batch script's environment. A variable
// that is set explicitly wins over its Slurm counterpart.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

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
  std::string cuda_visible_devices;  // "3", "2,3"; empty = not set
};

// The variables for one rank.
std::map<std::string, std::string> to_environment(const WorkerEnv& env);

// The torchrun-style variables Slurm's imply (see above); empty when SLURM_PROCID is not set.
std::map<std::string, std::string> torchrun_from_slurm(const std::function<const char*(const char*)>& get);

// The first host of a Slurm host list ("node[03-05,9],gpu1" -> "node03"); empty for "".
std::string first_host_of_nodelist(const std::string& nodelist);

// Every host of a Slurm host list in its order ("node[03-04],gpu1" -> node03, node04, gpu1; zero
// padding kept, several bracket groups in one name expanded left to right); empty for "", and
// for a list that does not read (an unclosed bracket, a reversed range) or names more than
// `limit` hosts.
std::vector<std::string> expand_nodelist(const std::string& nodelist, size_t limit = 100000);

// Reads and checks them (mapped from Slurm's under srun); `get` returns nullptr for an unset variable (std::getenv by default).
// Fails with one line naming the variable and what is wrong.
Result<WorkerEnv> read_worker_env(const std::function<const char*(const char*)>& get = nullptr);

// The GPU a rank of backend cuda opens, of the `visible` ones its CUDA_VISIBLE_DEVICES shows:
// LOCAL_RANK's, round-robin where the node's ranks outnumber them (several ranks on one GPU, which
// only comm gloo can do). Fails where it sees none, and, with `nccl`, where it sees more than one
// and fewer than LOCAL_WORLD_SIZE: then every rank of the node sees the same GPUs and two would
// share one. (A rank that sees one GPU alone may have its own, as Stagecraft's launcher gives it.)
Result<int> gpu_of_rank(const WorkerEnv& env, int visible, bool nccl);

// Threads for each of `local_ranks` processes sharing this machine's cores (at least 1).
int threads_per_rank(int local_ranks);

// A random hex token of `bytes` bytes from the system's entropy source.
std::string random_token(int bytes = 16);

}  // namespace stagecraft::launch
