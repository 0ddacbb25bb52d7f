// The kernel paths a recorded run's ranks took (each worker's start event, launch/worker_events.h
// StartEvent::kernels), grouped by rank: what `runs show` prints and the Runs view shows.
//
// Reads only; thread-safe as RunStore is.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::launch {

// One set of kernel paths, (work, path) in the device's order, and the ranks that took it.
struct KernelSet {
  std::vector<std::pair<std::string, std::string>> paths;
  std::vector<int> ranks;  // ascending
};

// The distinct kernel paths the run's ranks recorded in their start events (each rank's latest),
// in the order of their lowest rank; empty for runs whose workers recorded none (older workers,
// other programs). A start line that does not decode (a newer worker's) is skipped.
Result<std::vector<KernelSet>> run_kernel_sets(store::RunStore& store, int64_t run_id);

// "gemm: OpenBLAS sgemm (2 threads); attention: standard ...".
std::string kernel_paths_text(const std::vector<std::pair<std::string, std::string>>& paths);

// One line per set: the paths alone where a single set covers all `world_size` ranks, else each
// prefixed with its ranks ("ranks 0-3: gemm: ...", "rank 4: ...").
std::vector<std::string> kernel_sets_lines(const std::vector<KernelSet>& sets, int world_size);

// "rank 2", "ranks 0-3", "ranks 0-1, 4".
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace stagecraft::launch
