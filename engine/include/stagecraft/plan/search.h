// Search: the auto-planner. Every valid layout of a cluster and model — (dp, tp, pp), virtual
// stages, micro-batch, schedule, recompute, sequence parallelism, ZeRO — estimated with the cost
// model; those that do not fit the device dropped; the rest ranked by predicted throughput.
//
// What stays fixed: the cluster, the device, the model, the global batch, the precision, the
// TP mode and the axis order of the base configuration. Stages split uniformly (as the
// frameworks do by default); `plan` with `pipeline.partition: balanced` refines the winner.
// Each candidate passes config::validate(), so a layout search proposes is one `plan` accepts.
// Pure; a 175B GPT on 1024 x 8 GPUs takes well under a second.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/estimate.h"

namespace stagecraft::plan {

struct SearchOptions {
  int top = 10;             // how many ranked layouts to keep
  int max_micro_batch = 64; // largest micro-batch tried
  int max_virtual_stages = 8;
};

struct Candidate {
  config::RunConfig config;  // the base with this layout applied (dp explicit)
  Estimate estimate;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fastest first, at most options.top
  long long evaluated = 0;        // layouts estimated
  long long fitting = 0;          // of those, fitting the device memory
  long long rejected = 0;         // layouts that broke a configuration rule
  double seconds = 0;             // wall time of the search
  std::string why;                // why the best beats the next, one line
};

// Fails (invalid input) when the base config is unusable (no model shape, unknown device) and
// (unavailable) when no layout fits, naming the smallest peak memory found.
Result<SearchResult> search(const config::RunConfig& base, const SearchOptions& options = {});

// One line per layout: "dp=128 tp=8 pp=8 v=2 mb=1 interleaved recompute=selective sp zero=1".
std::string layout_string(const config::RunConfig& c);
// The `key=value` overrides that make a base config this layout, for `plan` (search --json's
// "overrides"): parallel.dp/tp/pp, pipeline.schedule/virtual_stages, train.micro_batch/recompute,
// parallel.sequence_parallel/zero.
std::vector<std::string> layout_overrides(const config::RunConfig& c);

Json search_to_json(const SearchResult& r);
std::string search_to_text(const SearchResult& r);

}  // namespace stagecraft::plan
