// A run trained in this process, recorded in the run history. See measured_run.h.
#include "stagecraft/launch/measured_run.h"

#include <filesystem>

#include "stagecraft/launch/run_history.h"
#include "stagecraft/launch/step_events.h"

namespace stagecraft::launch {

namespace {

// The history's own errors name its file or folder; any other gets the file in front.
Status naming(const Status& s, const std::string& db) {
  const std::string folder = std::filesystem::path(db).parent_path().string();
  return s.message().find(folder.empty() ? db : folder) != std::string::npos ? s : s.with_context(db);
}

}  // namespace

Result<int64_t> record_measured_run(const std::string& db, const config::RunConfig& config, const plan::Plan& plan,
                                    const std::vector<runtime::StepStats>& steps, const std::string& reason,
                                    const runtime::Device* device) {
  if (steps.empty()) return Status::invalid_input(db + ": no steps to record for " + config.name);
  if (const int world = plan.topology.world_size(); world != 1) {
    return Status::invalid_input(db + ": " + config.name + " has " + std::to_string(world) +
                                 " ranks; a run trained in this process is recorded as one rank (dp, tp, pp, cp 1)");
  }
  auto id = record_new_run(db, config, plan, {"localhost"});
  if (!id.ok()) return naming(id.status(), db);
  // Recorded as a launched run is (RunSession): running, every event of rank 0 through the
  // history's recorder, then the end.
  auto history = RunHistory::open(db, id.value());
  if (!history.ok()) return naming(history.status(), db);
  history.value()->running(reason);
  const auto record = history.value()->wrap({}).on_event;
  const runtime::StepStats& last = steps.back();
  record(0, StartEvent{.rank = 0,
                       .world_size = 1,
                       .dp = plan.dp,
                       .tp = plan.tp,
                       .pp = plan.pp,
                       .cp = plan.cp,
                       .step = steps.front().step - 1,
                       .steps = config.train.steps,
                       .kernels = device ? kernel_paths_of(*device, config) : std::vector<std::pair<std::string, std::string>>{}});
  for (const auto& st : steps) {
    record(0, step_event(st, true));
    record(0, timing_event(st, last.step));
  }
  record(0, DoneEvent{.rank = 0, .step = last.step, .loss = last.loss});
  const Status written = history.value()->flush();
  RunOutcome outcome;
  if (!written) {
    outcome.state = RunOutcome::State::kFailed;
    outcome.reason = "the steps could not all be recorded: " + written.message();
  }
  const Status ended = history.value()->finish(outcome);
  if (!written) return naming(written, db);
  if (!ended) return naming(ended, db);
  return id.value();
}

}  // namespace stagecraft::launch
