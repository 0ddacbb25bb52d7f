// Consistency rules of a RunConfig (docs/ARCHITECTURE.md §3), separate from parsing so that the GUI can
// check a config it edits in memory.
//
// validate() returns every rule the config breaks, each as the key it is about and a complete
// one-line message "key=value: rule broken, what to change", e.g.
//   {"parallel.tp", "parallel.tp=3: 8 GPUs are not divisible by tp x pp = 6"}.
// An empty result means the config can be planned. Rules about how a plan performs (a TP group
// spanning nodes, a large bubble) are warnings of the plan, not errors here.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"

namespace stagecraft::config {

struct ConfigIssue {
  std::string key;      // dotted path of the key the rule is about
  std::string message;  // the whole line, starting with "key=value: "
};

// Which rules to check. kExceptLayout leaves out those about the parallel layout (dp, tp, pp and
// their divisibility, tp_mode grids, schedule and stages, the batch split): what `search`
// chooses for itself, so that its base config may hold any layout.
enum class Rules { kAll, kExceptLayout };

std::vector<ConfigIssue> validate(const RunConfig& config, Rules rules = Rules::kAll);

// dp as planned: the configured one, or world / (tp x pp) when auto. Only meaningful for a
// config that validate() accepts.
int resolved_dp(const RunConfig& config);

// Micro-batches per step per DP replica: global_batch / (dp x micro_batch).
int micro_batches(const RunConfig& config);

// Integer N with N^k == v, or 0 when v is not a perfect k-th power (k = 2 or 3).
int integer_root(int v, int k);

}  // namespace stagecraft::config
