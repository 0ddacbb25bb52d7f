// A plan run as one rank in one process, as the training benchmarks run it: the config, its plan,
// the rank's groups, each the rank alone (every collective the identity), its layout, and synthetic
// tokens; and, for their --record DB, the rank's steps kept as a run of the history.
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
#include "stagecraft/launch/measured_run.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/trainer.h"
#include "stagecraft/store/run_store.h"

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

// The same from a benchmark's YAML config and KEY=VALUE overrides of it; nullopt, with the reason
// printed, where they do not parse.
inline std::optional<SingleRank> single_rank(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto config = config::parse_config(yaml, "bench", overrides);
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

// --record DB: the value after argv[i], or nullopt with the usage printed (the caller exits 2).
inline std::optional<std::string> record_argument(const char* program, int argc, char** argv, int& i) {
  if (i + 1 >= argc || argv[i + 1][0] == '\0' || argv[i + 1][0] == '-') {
    std::fprintf(stderr, "%s: --record takes the run history's file (e.g. --record bench.sqlite)\n", program);
    return std::nullopt;
  }
  return std::string(argv[++i]);
}

// Whether the history at `db` opens (created when missing), checked before any step is taken so
// that a bad path fails at once; the reason printed where it does not.
inline bool history_opens(const char* program, const std::string& db) {
  auto store = store::RunStore::open(db);
  if (!store.ok()) std::fprintf(stderr, "%s: --record: %s\n", program, store.status().message().c_str());
  return store.ok();
}

// `steps`, every step the rank took on `device`, as a run named `name` in the history at `db`
// (launch/measured_run.h: runs compare and calibrate read it as a worker's, runs show names the
// kernels it took); prints "recorded as run N in DB", or the reason it was not (then false).
inline bool record_steps(const char* program, const std::string& db, const SingleRank& rank, const std::string& name,
                         const std::vector<runtime::StepStats>& steps, const std::string& reason, const runtime::Device& device) {
  config::RunConfig config = rank.config;
  config.name = name;
  auto id = launch::record_measured_run(db, config, rank.plan, steps, reason, &device);
  if (!id.ok()) {
    std::fprintf(stderr, "%s: --record: %s\n", program, id.status().message().c_str());
    return false;
  }
  std::printf("recorded as run %lld in %s\n", static_cast<long long>(id.value()), db.c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace stagecraft::bench
