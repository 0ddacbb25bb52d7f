// What export and import of other frameworks' configs share: each framework's fixed rank order,
// the comparison of the groups two orders form, and text helpers for Python and shell output.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/interop/frameworks.h"
#include "stagecraft/config/run_config.h"
#include "stagecraft/config/validate.h"

namespace stagecraft::interop {

// The configuration's vocabulary, used throughout the import and export code.
using config::Axis;
using config::PartitionKind;
using config::Precision;
using config::Recompute;
using config::RunConfig;
using config::Schedule;
using config::TpMode;
using config::micro_batches;
using config::parse_tp_mode;
using config::resolved_dp;
using config::to_string;
using config::validate;

// The rank order (innermost first) the framework builds for this config's sizes:
//   LiBai: tp-dp-pp. libai/utils/distributed.py: pipeline stages are contiguous blocks of
//     world / pp ranks; inside one, the ranks reshape to (dp, tp), tp varying fastest.
//   Megatron-LM: tp-cp-ep-dp-pp, which is tp-dp-pp with cp = ep = 1; --use-tp-pp-dp-mapping
//     gives tp-pp-dp (megatron/core/parallel_state.py, megatron/training/arguments.py).
//   DeepSpeed: PipeModelDataParallelTopology, axes ['pipe', 'data', 'model'] with the last
//     varying fastest: tp-dp-pp (deepspeed/runtime/pipe/topology.py).
//   PaddlePaddle: CommunicateTopology(["data", "pipe", "sharding", "model"]), the last varying
//     fastest (paddle/distributed/fleet/base/topology.py; fleet.py builds it from
//     hybrid_configs): tp-pp-dp, or tp-dp-pp when data parallelism runs as the sharding axis
//     (zero = 1: dp_degree 1, sharding_degree = dp).
//   Colossal-AI (the legacy `parallel = dict(...)` config): Initializer_Pipeline makes pipeline
//     groups of stride tp inside each block of world / dp ranks: tp-pp-dp
//     (colossalai/context/process_group_initializer/initializer_pipeline.py).
std::vector<Axis> framework_order(Framework f, const RunConfig& c);

// tp-dp-pp completed with cp after tp: how the frameworks without another order number ranks,
// and Megatron-Core's default (tp-cp-ep-dp-pp without ep).
const std::vector<Axis>& tp_dp_pp_order();

// An order as a user reads it for a layout: cp left out when it has size 1 (tp-dp-pp).
std::string layout_order_text(const std::vector<Axis>& order, int cp);

// True when `c` with `order` forms the same TP, DP and PP groups as `c` as it is. Needs a
// config whose sizes plan (validate() accepts them).
bool same_groups(const RunConfig& c, const std::vector<Axis>& order);

// "LiBai", "PaddlePaddle", "Colossal-AI", "Megatron-LM", "DeepSpeed".
std::string framework_title(Framework f);

// A note for the export when the framework's fixed order forms other groups than the plan's:
// which groups differ, and the parallel.order to plan what the framework runs. Empty when the
// groups agree.
std::string order_note(const RunConfig& c, Framework f, const std::vector<Axis>& framework);

// Python float literal: shortest round trip, always with a '.' or an exponent ("1.0", "0.0003").
std::string py_float(double v);
// Stage ids written the way LiBai's documentation does: [0]*6 + [1]*7 + [2]*7 + [3]*4.
std::string run_length_ids(const std::vector<int>& ids);
// "[6, 7, 7, 4]"
std::string int_list(const std::vector<int>& v);
// Layers per chunk from one stage id per layer.
std::vector<int> counts_of(const std::vector<int>& stage_ids, int chunks);

}  // namespace stagecraft::interop
