// The kernel paths of a recorded run's ranks. See run_kernels.h.
#include "stagecraft/launch/run_kernels.h"

#include <algorithm>
#include <map>
#include <variant>

#include "stagecraft/launch/worker_events.h"

namespace stagecraft::launch {

Result<std::vector<KernelSet>> run_kernel_sets(store::RunStore& store, int64_t run_id) {
  auto rows = store.events(run_id, 0, "start");
  if (!rows.ok()) return rows.status();
  std::map<int, std::vector<std::pair<std::string, std::string>>> by_rank;
  for (const auto& row : rows.value()) {
    auto e = decode_event(row.json);
    if (!e.ok()) continue;
    const auto* start = std::get_if<StartEvent>(&e.value());
    if (!start || start->kernels.empty() || row.rank < 0) continue;
    by_rank[row.rank] = start->kernels;
  }
  std::vector<KernelSet> sets;
  for (auto& [rank, paths] : by_rank) {
    auto same = std::find_if(sets.begin(), sets.end(), [&](const KernelSet& k) { return k.paths == paths; });
    if (same == sets.end()) same = sets.insert(sets.end(), KernelSet{std::move(paths), {}});
    same->ranks.push_back(rank);
  }
  return sets;
}

std::string kernel_paths_text(const std::vector<std::pair<std::string, std::string>>& paths) {
  std::string s;
  for (const auto& [work, path] : paths) s += (s.empty() ? "" : "; ") + work + ": " + path;
  return s;
}

std::vector<std::string> kernel_sets_lines(const std::vector<KernelSet>& sets, int world_size) {
  const bool every_rank = sets.size() == 1 && static_cast<int>(sets[0].ranks.size()) == world_size;
  std::vector<std::string> lines;
  for (const auto& k : sets) lines.push_back((every_rank ? "" : ranks_text(k.ranks) + ": ") + kernel_paths_text(k.paths));
  return lines;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t end = i;
    while (end + 1 < ranks.size() && ranks[end + 1] == ranks[end] + 1) ++end;
    s += (s.empty() ? "" : ", ") + std::to_string(ranks[i]) + (end > i ? "-" + std::to_string(ranks[end]) : "");
    i = end + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

}  // namespace stagecraft::launch
