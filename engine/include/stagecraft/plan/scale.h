// Scale: how a model trains as the cluster grows. For the same model, device and global batch,
// the best layout that `search` finds (search.h) at 1, 2, 4, ... nodes up to a limit, with its
// throughput, MFU, the days to train a number of tokens, and ideal linear scaling from the
// smallest size that fits as the reference.
//
// Worked example: GPT-3 175B on A100-80GB nodes of 8 (configs/gpt3-175b-1024x8.yaml) fits on
// no single node (the smallest peak is above 80 GiB), so the 1-node point carries the reason and
// no layout; the ideal line starts at the first size with a layout and grows with the GPUs.
// The global batch stays fixed, so at the largest sizes dp runs out of divisors of it and the
// bubble grows: the efficiency column (tokens/s over ideal) shows where adding nodes stops paying.
//
// Pure; each size is one search, so the whole table costs about twice the largest search.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/search.h"

namespace stagecraft::plan {

struct ScaleOptions {
  int max_nodes = 0;        // largest cluster tried; 0: the base's cluster.nodes
  double tokens = 0;        // tokens to train on; 0: the configured run's steps x global_batch x seq_len
  SearchOptions search;     // how each size is searched (its `top` is ignored: one layout kept)
};

// One cluster size.
struct ScalePoint {
  int nodes = 0;
  int gpus = 0;                   // nodes x gpus_per_node
  bool found = false;             // a layout fits at this size
  std::string reason;             // when not found: search's one-line reason
  Candidate best;                 // when found: the fastest layout (config has cluster.nodes = nodes)
  double ideal_tokens_per_s = 0;  // the first found size's tokens/s per GPU x gpus (0 before it)
  double efficiency = 0;          // tokens/s over ideal (1 at the first found size)
  double days = 0;                // days to train `tokens` tokens with the best layout
};

struct ScaleResult {
  double tokens = 0;                // the token count the days are for
  std::vector<ScalePoint> points;   // ascending sizes: 1, 2, 4, ... and max_nodes itself
  double seconds = 0;               // wall time
  bool capped = false;              // each size ranked with search's cap_at_published_mfu
};

// Node counts tried: the powers of two below max_nodes, then max_nodes (1 -> {1}; 12 -> {1, 2, 4, 8, 12}).
std::vector<int> scale_sizes(int max_nodes);

// Fails (invalid input) on an unusable base (no model shape, unknown device, max_nodes < 0 or
// above 1,048,576, tokens < 0) and (unavailable) when no size has a layout that fits, naming the
// largest size's reason. Sizes where nothing fits are kept as points with their reason.
Result<ScaleResult> scale(const config::RunConfig& base, const ScaleOptions& options = {});

// {tokens, seconds, points: [{nodes, gpus, found, reason?, layout?, overrides?, tokens_per_s, mfu,
//  tflops_per_gpu, step_time_s, peak_memory_bytes, days, ideal_tokens_per_s, efficiency}]}
Json scale_to_json(const ScaleResult& r);
// A table, one line per size; "-" where nothing fits, with the reason below.
std::string scale_to_text(const ScaleResult& r);
// nodes,gpus,layout,tokens_per_s,mfu,days,ideal_tokens_per_s,efficiency — empty fields where nothing fits.
std::string scale_to_csv(const ScaleResult& r);

}  // namespace stagecraft::plan
