// recordedRunPlan(): a recorded run's config planned again (see the header).
#include "runs/RecordedRunPlan.h"

#include <string>

#include "stagecraft/config/config_io.h"

stagecraft::Result<stagecraft::plan::Plan> recordedRunPlan(const stagecraft::store::RunRecord& run) {
  const std::string name = "run " + std::to_string(run.id);
  if (run.config_yaml.empty()) return stagecraft::Status::not_found(name + " recorded no config: there is nothing to predict");
  auto config = stagecraft::config::parse_config(run.config_yaml, name);
  if (!config.ok()) return stagecraft::Status::invalid_input(name + "'s config: " + config.status().message());
  auto plan = stagecraft::plan::make_plan(config.value());
  if (!plan.ok()) return stagecraft::Status::invalid_input(name + "'s config no longer plans: " + plan.status().message());
  return plan;
}
