// RankLayout's consistency check. See rank_layout.h.
#include "stagecraft/runtime/rank_layout.h"

#include <string>

namespace stagecraft::runtime {

Status check_rank_layout(const RankLayout& l) {
  auto bad = [](const std::string& what) { return Status::invalid_input("rank layout: " + what); };
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.cp < 1 || l.virtual_stages < 1 || l.micro_batches < 1) {
    return bad("dp=" + std::to_string(l.dp) + " tp=" + std::to_string(l.tp) + " pp=" + std::to_string(l.pp) + " cp=" + std::to_string(l.cp) +
               " virtual_stages=" + std::to_string(l.virtual_stages) + " micro_batches=" + std::to_string(l.micro_batches) +
               ": every size must be at least 1");
  }
  const int world = l.dp * l.tp * l.pp * l.cp;
  if (l.rank < 0 || l.rank >= world) return bad("rank " + std::to_string(l.rank) + " outside 0.." + std::to_string(world - 1));
  if (l.dp_rank < 0 || l.dp_rank >= l.dp || l.tp_rank < 0 || l.tp_rank >= l.tp || l.pp_rank < 0 || l.pp_rank >= l.pp ||
      l.cp_rank < 0 || l.cp_rank >= l.cp) {
    return bad("coordinates (dp " + std::to_string(l.dp_rank) + ", tp " + std::to_string(l.tp_rank) + ", pp " +
               std::to_string(l.pp_rank) + ", cp " + std::to_string(l.cp_rank) + ") outside the sizes");
  }
  if (l.ep < 1 || l.ep_rank < 0 || l.ep_rank >= l.ep || l.expert_dp_rank < 0 || (l.dp * l.tp * l.cp) % l.ep != 0 ||
      l.expert_dp_rank >= l.dp * l.tp * l.cp / l.ep) {
    return bad("ep=" + std::to_string(l.ep) + " with ep_rank " + std::to_string(l.ep_rank) + " and expert_dp_rank " +
               std::to_string(l.expert_dp_rank) + ": ep must divide dp x tp x cp and the coordinates lie within");
  }
  if (l.chunks.size() != static_cast<size_t>(l.pp) * static_cast<size_t>(l.virtual_stages)) {
    return bad(std::to_string(l.chunks.size()) + " chunks for pp x virtual_stages = " + std::to_string(l.pp * l.virtual_stages));
  }
  for (const LayerRange& c : l.chunks) {
    if (c.first < 0 || c.count < 0) return bad("a chunk with first layer " + std::to_string(c.first) + " and " + std::to_string(c.count) + " layers");
  }
  if (l.replica0_ranks.size() != static_cast<size_t>(l.tp) * static_cast<size_t>(l.pp)) {
    return bad(std::to_string(l.replica0_ranks.size()) + " replica-0 ranks for tp x pp = " + std::to_string(l.tp * l.pp));
  }
  for (int r : l.replica0_ranks) {
    if (r < 0 || r >= world) return bad("replica-0 rank " + std::to_string(r) + " outside 0.." + std::to_string(world - 1));
  }
  return Status::OK();
}

}  // namespace stagecraft::runtime
