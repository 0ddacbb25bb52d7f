// Plans for the view suites, made by the engine from YAML exactly as the application makes them.
#pragma once

#include <QString>
#include <QtTest>

#include <string>
#include <vector>

#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"

namespace views_test {

// The plan of a loaded config; an empty plan with *ok false (and the reason logged) when either
// the config or the plan is refused.
inline stagecraft::plan::Plan planOf(const stagecraft::Result<stagecraft::config::RunConfig>& config, bool* ok) {
  if (!config.ok()) {
    qWarning("config refused: %s", config.status().message().c_str());
    if (ok) *ok = false;
    return {};
  }
  auto plan = stagecraft::plan::make_plan(config.value());
  if (!plan.ok()) {
    qWarning("plan refused: %s", plan.status().message().c_str());
    if (ok) *ok = false;
    return {};
  }
  if (ok) *ok = true;
  return plan.value();
}

// A small GPT (8 layers, hidden 64, 8 heads) on nodes x gpus with the given layout; `extra` is
// appended as override arguments (key=value). Fails the calling test when the engine refuses.
inline stagecraft::plan::Plan makePlan(int nodes, int gpus, int dp, int tp, int pp, const std::string& order = "tp-dp-pp",
                                       const std::vector<std::string>& extra = {}, bool* ok = nullptr) {
  const std::string yaml =
      "name: views-test\n"
      "cluster: {nodes: " + std::to_string(nodes) + ", gpus_per_node: " + std::to_string(gpus) + ", device: A100-80GB}\n"
      "model: {arch: gpt, layers: 8, hidden: 64, heads: 8, seq_len: 128, vocab: 512}\n"
      "parallel: {dp: " + std::to_string(dp) + ", tp: " + std::to_string(tp) + ", pp: " + std::to_string(pp) +
      ", order: " + order + "}\n"
      "train: {global_batch: " + std::to_string(dp * 8) + ", micro_batch: 1}\n";
  return planOf(stagecraft::config::parse_config(yaml, "views-test", extra), ok);
}

// A plan from one of the repository's example configs (configs/NAME.yaml).
inline stagecraft::plan::Plan examplePlan(const std::string& name, const std::vector<std::string>& overrides = {},
                                          bool* ok = nullptr) {
  return planOf(stagecraft::config::load_config_file(std::string(STAGECRAFT_SOURCE_DIR) + "/configs/" + name + ".yaml", overrides),
                ok);
}

}  // namespace views_test
