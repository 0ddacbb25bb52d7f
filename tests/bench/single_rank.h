// A plan run as one rank in one process, as the training benchmarks run it: the config, its plan,
// the rank's groups, each the rank alone (every collective the identity), its layout, and synthetic tokens.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stagecraft/comm/communicator.h"
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/run_config.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/token_data.h"

namespace stagecraft::bench {

struct SingleRank {
  config::RunConfig config;
  plan::Plan plan;
  comm::ProcessGroups groups;
  runtime::RankLayout layout;
};

// Rank 0 of config's plan with groups of one; nullopt, with the reason printed to stderr, where
// the plan or a group cannot be made.
inline std::optional<SingleRank> single_rank(const config::RunConfig& config) {
  auto plan = plan::make_plan(config);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().message().c_str());
    return std::nullopt;
  }
  auto groups = comm::build_process_groups(plan->topology, 0, config.model.tied_embeddings,
                                           [](const std::string& name, const std::vector<int>& ranks) {
                                             return comm::make_single_rank_communicator(ranks.front(), name);
                                           });
  auto layout = comm::rank_layout_of(plan.value(), 0);
  if (!groups.ok() || !layout.ok()) {
    std::fprintf(stderr, "%s%s\n", groups.status().message().c_str(), layout.status().message().c_str());
    return std::nullopt;
  }
  return SingleRank{config, std::move(plan).value(), std::move(groups).value(), std::move(layout).value()};
}

// The same from a benchmark's YAML config; nullopt, with the reason printed, where it does not parse.
inline std::optional<SingleRank> single_rank(const std::string& yaml) {
  auto config = config::parse_config(yaml, "bench", {});
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().message().c_str());
    return std::nullopt;
  }
  return single_rank(config.value());
}

// n tokens below vocab, the same in every run: a multiplicative hash of the position.
inline runtime::TokenData synthetic_tokens(size_t n, int vocab) {
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>((i * 2654435761u >> 7) % uint32_t(vocab));
  return runtime::TokenData::from_tokens(tokens);
}

}  // namespace stagecraft::bench
