// Metric lines of other programs' output. See metric_lines.h.
#include "stagecraft/launch/metric_lines.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "stagecraft/core/json.h"

namespace stagecraft::launch {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// A number at the start of `s` after blanks; `rest` is what follows it. Finite only.
std::optional<double> leading_number(std::string_view s, std::string_view* rest = nullptr) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || !std::isfinite(v)) return std::nullopt;
  if (rest) *rest = s.substr(static_cast<size_t>(p - s.data()));
  return v;
}

std::optional<int64_t> leading_int(std::string_view s, std::string_view* rest = nullptr) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v < 0) return std::nullopt;
  if (rest) *rest = s.substr(static_cast<size_t>(p - s.data()));
  return v;
}

// Where the first `key` in `line` that starts a word is (not inside a longer name: "step=" in
// "global_step=" does not count); npos when none does.
size_t word_at(std::string_view line, std::string_view key) {
  for (size_t at = line.find(key); at != std::string_view::npos; at = line.find(key, at + 1)) {
    const char before = at == 0 ? ' ' : line[at - 1];
    if (!std::isalnum(static_cast<unsigned char>(before)) && before != '_') return at;
  }
  return std::string_view::npos;
}

// The number right after the first `key` in `line` that starts a word.
std::optional<double> number_after(std::string_view line, std::string_view key, std::string_view* rest = nullptr) {
  const size_t at = word_at(line, key);
  if (at == std::string_view::npos) return std::nullopt;
  return leading_number(line.substr(at + key.size()), rest);
}

std::optional<int64_t> int_after(std::string_view line, std::string_view key) {
  const size_t at = word_at(line, key);
  if (at == std::string_view::npos) return std::nullopt;
  return leading_int(line.substr(at + key.size()));
}

void set_samples_per_s(StepEvent& e, double samples_per_s, double tokens_per_sample) {
  if (tokens_per_sample > 0 && std::isfinite(samples_per_s)) e.tokens_per_s = samples_per_s * tokens_per_sample;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Fills the fields `from` has and `into` lacks.
void merge(StepEvent& into, const StepEvent& from) {
  auto fill = [](double& a, double b) {
    if (std::isnan(a)) a = b;
  };
  fill(into.loss, from.loss);
  fill(into.lr, from.lr);
  fill(into.grad_norm, from.grad_norm);
  fill(into.tokens_per_s, from.tokens_per_s);
  fill(into.step_ms, from.step_ms);
  if (into.mem_bytes < 0) into.mem_bytes = from.mem_bytes;
  fill(into.tflops, from.tflops);
  fill(into.mfu, from.mfu);
}

// The line without terminal colour codes (ESC [ ... m), as torchtitan colours its fields.
std::string without_colours(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      size_t j = i + 2;
      while (j < line.size() && !std::isalpha(static_cast<unsigned char>(line[j]))) ++j;
      i = j;  // past the final letter
      continue;
    }
    out += line[i];
  }
  return out;
}

// The number after `key` with its thousands' commas dropped ("12,345" -> 12345); `rest` is what
// follows it in `line`.
std::optional<double> grouped_number_after(std::string_view line, std::string_view key, std::string_view* rest = nullptr) {
  const size_t at = word_at(line, key);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view s = line.substr(at + key.size());
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  std::string digits;
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == ',' || s[n] == '.' || s[n] == '-' || s[n] == '+' ||
                          s[n] == 'e' || s[n] == 'E')) {
    if (s[n] != ',') digits += s[n];
    ++n;
  }
  std::string_view after;
  auto v = leading_number(digits, &after);
  if (!v || !after.empty()) return std::nullopt;
  if (rest) *rest = s.substr(n);
  return v;
}

}  // namespace

std::optional<StepEvent> parse_megatron_line(std::string_view line, double tokens_per_sample) {
  std::string_view s = trim(line);
  if (!s.empty() && s.front() == '[') {  // a timestamp, newer versions
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    s = trim(s.substr(close + 1));
  }
  constexpr std::string_view kIteration = "iteration";
  if (s.substr(0, kIteration.size()) != kIteration) return std::nullopt;
  std::string_view rest;
  const auto step = leading_int(s.substr(kIteration.size()), &rest);
  if (!step) return std::nullopt;
  rest = trim(rest);
  if (rest.empty() || rest.front() != '/') return std::nullopt;
  if (!leading_int(rest.substr(1), &rest)) return std::nullopt;
  rest = trim(rest);
  if (rest.empty() || rest.front() != '|') return std::nullopt;

  StepEvent e;
  e.step = *step;
  double global_batch = NAN;
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '|'
    const size_t bar = rest.find('|');
    const std::string_view field = rest.substr(0, bar);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar);
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = trim(field.substr(0, colon));
    std::string_view after;
    const auto value = leading_number(field.substr(colon + 1), &after);
    if (!value || !trim(after).empty()) continue;  // not one number: a cut field, or text
    if (key == "elapsed time per iteration (ms)") {
      e.step_ms = *value;
    } else if (key == "learning rate") {
      e.lr = *value;
    } else if (key == "grad norm") {
      e.grad_norm = *value;
    } else if (key == "global batch size") {
      global_batch = *value;
    } else if ((key == "loss" || ends_with(key, " loss")) && std::isnan(e.loss)) {
      e.loss = *value;
    }
  }
  if (std::isfinite(global_batch) && e.step_ms > 0) set_samples_per_s(e, global_batch * 1000.0 / e.step_ms, tokens_per_sample);
  return e;
}

std::optional<StepEvent> parse_deepspeed_line(std::string_view line, double tokens_per_sample) {
  const std::string_view s = trim(line);
  // The pipeline engine: "steps: 10 loss: 2.3456 iter time (s): 0.123 samples/sec: 65.0".
  if (s.substr(0, 6) == "steps:") {
    std::string_view rest;
    const auto step = leading_int(s.substr(6), &rest);
    if (!step) return std::nullopt;
    StepEvent e;
    e.step = *step;
    const auto loss = number_after(rest, "loss:");
    if (!loss) return std::nullopt;
    e.loss = *loss;
    if (const auto t = number_after(rest, "iter time (s):")) e.step_ms = *t * 1000.0;
    if (const auto sps = number_after(rest, "samples/sec:")) set_samples_per_s(e, *sps, tokens_per_sample);
    return e;
  }
  // The throughput timer: "epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=..".
  if (s.find("global_step=") != std::string_view::npos && s.find("SamplesPerSec=") != std::string_view::npos) {
    const auto step = int_after(s, "global_step=");
    if (!step) return std::nullopt;
    StepEvent e;
    e.step = *step;
    if (const auto sps = number_after(s, "CurrSamplesPerSec=")) set_samples_per_s(e, *sps, tokens_per_sample);
    std::string_view unit;
    auto mem = number_after(s, "MaxMemAllocated=", &unit);
    if (!mem) mem = number_after(s, "MemAllocated=", &unit);
    if (mem && unit.substr(0, 2) == "GB") e.mem_bytes = static_cast<int64_t>(std::llround(*mem * kGiB));
    return e;
  }
  // The engine's progress report: "[Rank 0] step=10, skipped=0, lr=[0.0001], mom=[...]".
  if (s.find(", skipped=") != std::string_view::npos) {
    const auto step = int_after(s, "step=");
    if (!step) return std::nullopt;
    StepEvent e;
    e.step = *step;
    const size_t lr = s.find("lr=[");
    if (lr != std::string_view::npos) {
      if (const auto v = leading_number(s.substr(lr + 4))) e.lr = *v;
    }
    return e;
  }
  return std::nullopt;
}

std::optional<StepEvent> parse_nanogpt_line(std::string_view line) {
  const std::string_view s = trim(line);
  if (s.substr(0, 5) != "iter ") return std::nullopt;
  std::string_view rest;
  const auto step = leading_int(s.substr(5), &rest);
  if (!step || rest.empty() || rest.front() != ':') return std::nullopt;
  rest.remove_prefix(1);
  rest = trim(rest);
  if (rest.substr(0, 5) != "loss ") return std::nullopt;
  std::string_view after;
  const auto loss = leading_number(rest.substr(5), &after);
  if (!loss) return std::nullopt;
  StepEvent e;
  e.step = *step;
  e.loss = *loss;
  std::string_view unit;
  if (const auto t = number_after(after, "time ", &unit); t && unit.substr(0, 2) == "ms") e.step_ms = *t;
  return e;
}

std::optional<StepEvent> parse_jsonl_line(std::string_view line, double tokens_per_sample) {
  const std::string_view s = trim(line);
  if (s.empty() || s.front() != '{') return std::nullopt;
  auto parsed = Json::parse(s);
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  const Json& o = parsed.value();
  // Worker-event-shaped objects other than steps ("done", "checkpoint") carry a step too.
  if (const Json* kind = o.find("event"); kind && !(kind->is_string() && kind->as_string() == "step")) return std::nullopt;
  const Json* step = o.find("step");
  if (!step || !step->is_number()) return std::nullopt;
  const double sv = step->as_double();
  if (!(sv >= 0) || sv != std::floor(sv) || sv > 9.0e15) return std::nullopt;
  StepEvent e;
  e.step = static_cast<int64_t>(sv);
  bool ok = true;
  auto number = [&](std::string_view key, double& out) {
    const Json* v = o.find(key);
    if (!v || v->is_null()) return;
    if (!v->is_number()) {
      ok = false;
      return;
    }
    out = v->as_double();
  };
  number("loss", e.loss);
  number("lr", e.lr);
  number("grad_norm", e.grad_norm);
  number("tokens_per_s", e.tokens_per_s);
  number("step_ms", e.step_ms);
  double samples = NAN, mem = NAN;
  number("samples_per_s", samples);
  number("mem_bytes", mem);
  if (!ok) return std::nullopt;
  if (std::isnan(e.tokens_per_s) && std::isfinite(samples)) set_samples_per_s(e, samples, tokens_per_sample);
  if (std::isfinite(mem) && mem >= 0 && mem < 9.0e18) e.mem_bytes = static_cast<int64_t>(mem);
  return e;
}

std::optional<StepEvent> parse_torchtitan_line(std::string_view raw, int world_size) {
  // Every output line of a program in auto mode comes here last: most have no "step:" at all
  // (the colour codes stand before it, never inside), and need not be copied.
  if (raw.find("step:") == std::string_view::npos) return std::nullopt;
  const std::string text = without_colours(raw);
  const std::string_view line = text;
  // "step:" as a word, followed by the step and, later, "loss:" (torchtitan's step line only).
  const size_t at = word_at(line, "step:");
  if (at == std::string_view::npos) return std::nullopt;
  // The line's first field, after the log prefix ("... - INFO - ", "[rank0]:") if any: not
  // "validate step:" and the like.
  const std::string_view prefix = trim(line.substr(0, at));
  if (!prefix.empty() && prefix.back() != '-' && prefix.back() != ']' && prefix.back() != ':') return std::nullopt;
  std::string_view rest;
  const auto step = leading_int(line.substr(at + 5), &rest);
  if (!step) return std::nullopt;
  const std::string_view fields = line.substr(line.size() - rest.size());
  StepEvent e;
  e.step = *step;
  const auto loss = number_after(fields, "loss:");
  if (!loss) return std::nullopt;
  e.loss = *loss;
  if (auto g = number_after(fields, "grad_norm:")) e.grad_norm = *g;
  std::string_view unit;
  if (auto mem = number_after(fields, "memory:", &unit); mem && unit.substr(0, 3) == "GiB") {
    e.mem_bytes = static_cast<int64_t>(std::llround(*mem * kGiB));
  }
  // tps is per device: the run's tokens/s is the world's.
  if (auto tps = grouped_number_after(fields, "tps:")) {
    e.tokens_per_s = *tps * std::max(1, world_size);
  } else if (auto wps = grouped_number_after(fields, "wps:")) {  // older versions: words (tokens) per second
    e.tokens_per_s = *wps * std::max(1, world_size);
  }
  if (auto tflops = grouped_number_after(fields, "tflops:")) e.tflops = *tflops;
  std::string_view percent;
  if (auto mfu = number_after(fields, "mfu:", &percent); mfu && !percent.empty() && percent.front() == '%') e.mfu = *mfu / 100.0;
  return e;
}

std::optional<StepEvent> parse_metric_line(std::string_view line, config::MetricsFormat format, double tokens_per_sample, int world_size) {
  using F = config::MetricsFormat;
  switch (format) {
    case F::kNone: return std::nullopt;
    case F::kMegatron: return parse_megatron_line(line, tokens_per_sample);
    case F::kDeepspeed: return parse_deepspeed_line(line, tokens_per_sample);
    case F::kNanogpt: return parse_nanogpt_line(line);
    case F::kJsonl: return parse_jsonl_line(line, tokens_per_sample);
    case F::kTorchtitan: return parse_torchtitan_line(line, world_size);
    case F::kAuto: break;
  }
  if (auto e = parse_jsonl_line(line, tokens_per_sample)) return e;
  if (auto e = parse_megatron_line(line, tokens_per_sample)) return e;
  if (auto e = parse_deepspeed_line(line, tokens_per_sample)) return e;
  if (auto e = parse_nanogpt_line(line)) return e;
  return parse_torchtitan_line(line, world_size);
}

std::vector<StepEvent> MetricLineReader::feed(std::string_view line, bool* matched) {
  std::vector<StepEvent> out;
  auto e = parse_metric_line(line, format_, tokens_per_sample_, world_size_);
  if (matched) *matched = e.has_value();
  if (!e) return out;
  e->rank = rank_;
  if (held_ && held_->step != e->step) {
    out.push_back(*held_);
    held_.reset();
  }
  if (held_) {
    merge(*held_, *e);
  } else {
    held_ = *e;
  }
  if (!std::isnan(held_->loss)) {
    out.push_back(*held_);
    held_.reset();
  }
  return out;
}

std::optional<StepEvent> MetricLineReader::finish() {
  std::optional<StepEvent> out = held_;
  held_.reset();
  return out;
}

}  // namespace stagecraft::launch
