// recordedRunPlan(): what a recorded run's plan predicts — its recorded config (the history keeps
// it as YAML) planned again with plan::make_plan, with the device as it is configured now, as
// launch::measure_run plans it. The Runs view's dashed predicted lines and its predicted timeline
// come from it while a run has no timing events to measure.
#pragma once

#include "stagecraft/core/status.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/run_store.h"

// Fails with one line naming the run: not found when it recorded no config (a run made by hand, or
// an old history); invalid input when its config no longer reads or no longer plans (a device
// profile gone).
stagecraft::Result<stagecraft::plan::Plan> recordedRunPlan(const stagecraft::store::RunRecord& run);
