// Search: the auto-planner. Every valid layout of a cluster and model — (dp, tp, pp), virtual
// stages, micro-batch, schedule, recompute, sequence parallelism, ZeRO, and for a mixture of
// experts every expert-parallel size that divides the experts and folds over a stage's ranks (at
// one expert tensor-parallel size, SearchOptions::expert_tp) — estimated with the cost
// model; those that do not fit the device dropped; the rest ranked by predicted throughput.
//
// What stays fixed: the cluster, the device, the model, the global batch, the precision, the
// TP mode and the axis order of the base configuration. Stages split uniformly (as the
// frameworks do by default); `plan` with `pipeline.partition: balanced` refines the winner.
// Each candidate passes config::validate(), so a layout search proposes is one `plan` accepts.
// Pure; a 175B GPT on 1024 x 8 GPUs takes well under a second.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/estimate.h"

namespace stagecraft::plan {

struct Candidate {
  config::RunConfig config;  // the base with this layout applied (dp explicit)
  Estimate estimate;
};

// Which layouts a person allows. search() keeps only the layouts allows() accepts; a front end
// holding an unconstrained result (fits_only off, nothing pinned) that filters it with allows()
// gets the same layouts in the same order, since the ranking is a stable sort.
struct LayoutConstraints {
  bool fits_only = true;                      // drop layouts whose peak exceeds the device memory
  bool tp_within_node = false;                // every TP group on one node
  int tp = 0;                                 // a fixed tensor-parallel size; 0: any
  int pp = 0;                                 // a fixed pipeline size; 0: any
  int cp = 0;                                 // a fixed context-parallel size; 0: any
  int ep = 0;                                 // a fixed expert-parallel size (mixtures of experts); 0: any
  std::vector<config::Schedule> schedules;    // allowed schedules; empty: all. pp = 1 has no pipeline and passes
  std::vector<config::Recompute> recomputes;  // allowed recompute modes; empty: all
  int max_zero = 3;                           // the highest parallel.zero allowed; 0: no sharding
  int max_micro_batch = 0;                    // the largest micro-batch; 0: any
};

// Whether a layout (a candidate's config and estimate) passes `k`. Pure.
bool allows(const LayoutConstraints& k, const config::RunConfig& layout, const Estimate& estimate);
inline bool allows(const LayoutConstraints& k, const Candidate& cand) { return allows(k, cand.config, cand.estimate); }

struct SearchOptions {
  int top = 10;             // how many ranked layouts to keep
  int max_micro_batch = 64; // largest micro-batch tried
  int max_virtual_stages = 8;
  LayoutConstraints constraints;
  // Context-parallel sizes tried: those that leave each rank at least this many tokens of a
  // sequence (long contexts split; short ones would only pay the ring). Constraints only filter
  // what is tried (allows()), so a front end's filtered result equals a constrained search.
  int min_cp_tokens = 1024;
  // The expert tensor-parallel size of every layout of a mixture of experts (search --expert-tp):
  // routed experts split this many ways; 1 (Megatron-Core's default) keeps experts whole, which
  // fine-grained experts want. Not a constraint: a search at another size is another search.
  int expert_tp = 1;
  // Called on the searching thread with the fraction of (tp, cp, pp) splits done, from 0 to 1, about
  // once per split; returning false stops the search, which then fails (unavailable) with
  // "search: cancelled". Empty: no reports.
  std::function<bool(double)> progress;
  // Rank by each layout's step with its MFU capped at the device's best published one
  // (Estimate::capped_step_time_s), so layouts the model deems faster than any published run tie
  // there instead of winning on the model's optimism (search --plausible). The estimates stay as
  // predicted; implausible ones are marked either way.
  bool cap_at_published_mfu = false;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fastest first, at most options.top
  long long evaluated = 0;        // layouts estimated
  long long fitting = 0;          // of those, fitting the device memory
  long long rejected = 0;         // layouts that broke a configuration rule
  double seconds = 0;             // wall time of the search
  std::string why;                // why the best beats the next, one line
  bool capped = false;            // ranked with options.cap_at_published_mfu
};

// The ranking's order: a before b when faster (capped: by Estimate::capped_step_time_s), ties by
// the smaller peak (capped, then by the faster prediction); a stable sort with it keeps the
// enumeration order among equals.
bool ranks_before(const Candidate& a, const Candidate& b, bool capped);

// Ranked fastest first, ties by the smaller peak, then in enumeration order (stable).
// Fails (invalid input) when the base config is unusable (no model shape, unknown device), when a
// fixed ep (constraints.ep) does not divide the experts or expert_tp their width, in one line,
// (unavailable) when no layout fits, naming the smallest peak memory found, when the
// constraints leave none, or when `progress` cancelled it.
Result<SearchResult> search(const config::RunConfig& base, const SearchOptions& options = {});

// One line per layout: "dp=128 tp=8 pp=8 v=2 mb=1 interleaved recompute=selective sp zero=1";
// a mixture of experts's adds "ep=8" after the sizes (and "etp=2" with expert_tp).
std::string layout_string(const config::RunConfig& c);
// The `key=value` overrides that make a base config this layout, for `plan` (search --json's
// "overrides"): parallel.dp/tp/pp, pipeline.schedule/virtual_stages, train.micro_batch/recompute,
// parallel.sequence_parallel/zero; a mixture of experts's also parallel.ep/expert_tp.
std::vector<std::string> layout_overrides(const config::RunConfig& c);

// Why `faster` beats `slower`, one line: how much faster, the two parts of the step that differ
// most in its favour, the part that favours the other, and the peak memories when they differ.
// search() fills SearchResult::why with it for #1 and #2.
std::string why_faster(const Candidate& faster, const Candidate& slower);

Json search_to_json(const SearchResult& r);
std::string search_to_text(const SearchResult& r);

}  // namespace stagecraft::plan
