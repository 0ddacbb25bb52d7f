// A config from YAML text and its plan, for suites whose fixtures are valid by construction: a
// problem is a broken fixture, so it ends the suite with the engine's message.
#pragma once

#include <QtGlobal>

#include <string>
#include <vector>

#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::testing {

inline config::RunConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto c = config::parse_config(yaml, "test.yaml", overrides);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

inline plan::Plan make(const config::RunConfig& c) {
  auto p = plan::make_plan(c);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return p.value();
}

}  // namespace stagecraft::testing
