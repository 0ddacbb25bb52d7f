// libFuzzer target over the configuration path a person's file takes: parse_config (YAML, overrides,
// validation), make_plan, plan_to_json / plan_to_text, the to_yaml round trip and apply_overrides.
//
// Input: a YAML document. Lines starting with "#@ " are YAML comments, so the document parses the
// same with them, and each one is also a `key.path=value` override handed to parse_config; a line
// starting with "#! " is an override applied afterwards with apply_overrides. Seeds: configs/*.yaml
// and tests/fuzz/seeds/.
//
// Beyond "no crash, no sanitizer report", the target checks the contracts of config_io.h and
// plan.h and traps when one breaks:
//  - an error is kInvalidInput with a non-empty message, one problem per non-empty line;
//  - a config that parse_config accepts can be planned (make_plan validates with the same rules);
//  - parse_config(to_yaml(c)) == c;
//  - plan_to_json's text parses back as JSON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/plan/plan.h"

namespace {

using stagecraft::Json;
using stagecraft::Status;

[[noreturn]] void broken(const char* contract, const std::string& detail) {
  std::fprintf(stderr, "fuzz_config: contract broken: %s\n%s\n", contract, detail.c_str());
  std::abort();
}

void check_error(const Status& st, const char* what) {
  if (st.ok()) broken(what, "an error Status that is ok");
  if (st.code() != Status::Code::kInvalidInput) broken(what, "error code is not kInvalidInput: " + st.message());
  const std::string& m = st.message();
  if (m.empty()) broken(what, "empty error message");
  size_t start = 0;
  while (start <= m.size()) {
    const size_t nl = m.find('\n', start);
    const size_t end = nl == std::string::npos ? m.size() : nl;
    if (end == start) broken(what, "an empty line in the error message:\n" + m);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides, later;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    if (line.substr(0, 3) == "#@ ") overrides.emplace_back(line.substr(3));
    if (line.substr(0, 3) == "#! ") later.emplace_back(line.substr(3));
    pos = nl + 1;
  }

  auto config = stagecraft::config::parse_config(text, "fuzz.yaml", overrides);
  if (!config.ok()) {
    check_error(config.status(), "parse_config error");
    return 0;
  }

  auto plan = stagecraft::plan::make_plan(config.value());
  if (!plan.ok()) broken("an accepted config can be planned", plan.status().message());
  const std::string json = stagecraft::plan::plan_to_json(plan.value()).dump();
  if (!Json::parse(json).ok()) broken("plan_to_json is JSON", json.substr(0, 2000));
  (void)stagecraft::plan::plan_to_text(plan.value());

  const std::string saved = stagecraft::config::to_yaml(config.value());
  auto again = stagecraft::config::parse_config(saved, "saved.yaml");
  if (!again.ok()) broken("to_yaml output loads", again.status().message() + "\n" + saved);
  if (!(again.value() == config.value())) broken("parse_config(to_yaml(c)) == c", saved);

  if (!later.empty()) {
    auto changed = stagecraft::config::apply_overrides(config.value(), later);
    if (!changed.ok()) {
      check_error(changed.status(), "apply_overrides error");
    } else if (auto p = stagecraft::plan::make_plan(changed.value()); !p.ok()) {
      broken("an overridden config that validates can be planned", p.status().message());
    }
  }
  return 0;
}
