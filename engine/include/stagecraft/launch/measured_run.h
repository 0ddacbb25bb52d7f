// A run trained in this process, one rank, recorded in the run history as a launched run is: the
// training benchmarks (tests/bench/bench_gpu_train, bench_train --record) keep their steps so,
// and `runs compare` and `calibrate` read them like a worker's (run_measurement.h).
//
// The run is recorded after its steps, not while they run, so that writing the history takes
// nothing from the steps measured: its rows carry the recording's time, its timing events each
// step's own start (the measured timeline).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::launch {

// Records `steps`, the steps one rank took of `config` planned as `plan` (a plan of one rank), as
// a run on this machine in the history at `db` (created, with its folder, when missing; the run's
// name is config.name): queued, running with `reason` ("bench_train: one rank in-process"), a
// start event, each step's step and timing events for rank 0 (step_events.h; the timeline on the
// steps has_timeline picks of a run as long as the last step), a done event, and succeeded.
// The start event names the kernel paths `device` took for the config (step_events.h
// kernel_paths_of), none where it is null.
// Returns the run's id. Fails (invalid input) without writing anything for no steps or a plan of
// more than one rank; with the history's error, naming the file, when it cannot be opened or a
// write fails (a run left part-written then ends failed, with that reason, where it still can).
Result<int64_t> record_measured_run(const std::string& db, const config::RunConfig& config, const plan::Plan& plan,
                                    const std::vector<runtime::StepStats>& steps, const std::string& reason,
                                    const runtime::Device* device = nullptr);

}  // namespace stagecraft::launch
