// The worker event lines' one encoder and decoder. See worker_events.h.
#include "stagecraft/launch/worker_events.h"

#include <limits>
#include <type_traits>

#include "stagecraft/core/json.h"
#include "stagecraft/core/overloaded.h"

namespace stagecraft::launch {

namespace {

void set_rank(Json::Object& o, int rank) {
  if (rank != kUnknownRank) o.emplace_back("rank", rank);
}

// The JSON type of `v` in words, for messages.
std::string type_of(const Json& v) {
  switch (v.type()) {
    case Json::Type::kNull: return "null";
    case Json::Type::kBool: return v.as_bool() ? "true" : "false";
    case Json::Type::kInt: return std::to_string(v.as_int());
    case Json::Type::kDouble: return v.dump();
    case Json::Type::kString: return json_quote(v.as_string());
    case Json::Type::kArray: return "an array";
    case Json::Type::kObject: return "an object";
  }
  return "a value";
}

// Reads the fields of one event object; the first problem is kept and reported.
class Reader {
 public:
  Reader(const Json& object, std::string_view kind) : object_(object), kind_(kind) {}

  // An integer field; `required` fields must be present and not null.
  template <typename T>
  void integer(std::string_view key, T& out, bool required) {
    const Json* v = present(key, required);
    if (!v) return;
    const bool integral = v->is_int() || (v->type() == Json::Type::kDouble && std::isfinite(v->as_double()) &&
                                          v->as_double() == std::floor(v->as_double()));
    if (!integral || v->as_double() < static_cast<double>(std::numeric_limits<T>::min()) ||
        v->as_double() > static_cast<double>(std::numeric_limits<T>::max())) {
      fail(key, "an integer", *v);
      return;
    }
    out = static_cast<T>(v->as_int());
  }
  void number(std::string_view key, double& out) {
    const Json* v = present(key, false);
    if (!v) return;
    if (!v->is_number()) return fail(key, "a number (or null)", *v);
    out = v->as_double();
  }
  void boolean(std::string_view key, bool& out) {
    const Json* v = present(key, false);
    if (!v) return;
    if (!v->is_bool()) return fail(key, "true or false", *v);
    out = v->as_bool();
  }
  void text(std::string_view key, std::string& out, bool required) {
    const Json* v = present(key, required);
    if (!v) return;
    if (!v->is_string()) return fail(key, "a string", *v);
    out = v->as_string();
  }
  void rank(int& out) {
    integer("rank", out, false);
    if (status_.ok() && out < 0 && out != kUnknownRank) {
      status_ = Status::invalid_input("worker event \"" + std::string(kind_) + "\": \"rank\" must be 0 or more, got " +
                                      std::to_string(out));
    }
  }
  const Status& status() const { return status_; }

 private:
  const Json* present(std::string_view key, bool required) {
    if (!status_.ok()) return nullptr;
    const Json* v = object_.find(key);
    if (v && !v->is_null()) return v;
    if (required) {
      status_ = Status::invalid_input("worker event \"" + std::string(kind_) + "\": no \"" + std::string(key) +
                                      "\" field; every " + std::string(kind_) + " event carries one");
    }
    return nullptr;
  }
  void fail(std::string_view key, const char* expected, const Json& got) {
    status_ = Status::invalid_input("worker event \"" + std::string(kind_) + "\": \"" + std::string(key) + "\" must be " +
                                    expected + ", got " + type_of(got));
  }

  const Json& object_;
  std::string_view kind_;
  Status status_;
};

template <typename E>
Result<WorkerEvent> finish(const Reader& r, E event) {
  if (!r.status().ok()) return r.status();
  return WorkerEvent{std::move(event)};
}

bool same_number(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// The timing event's numbers, in wire order.
struct TimingField {
  const char* key;
  double TimingEvent::*field;
};
constexpr TimingField kTimingFields[] = {
    {"start", &TimingEvent::start},           {"step_ms", &TimingEvent::step_ms},       {"forward_ms", &TimingEvent::forward_ms},
    {"backward_ms", &TimingEvent::backward_ms}, {"recompute_ms", &TimingEvent::recompute_ms}, {"tp_ms", &TimingEvent::tp_ms},
    {"cp_ms", &TimingEvent::cp_ms},             {"ep_ms", &TimingEvent::ep_ms},           {"pp_wait_ms", &TimingEvent::pp_wait_ms}, {"pp_send_ms", &TimingEvent::pp_send_ms}, {"dp_ms", &TimingEvent::dp_ms},
    {"optimizer_ms", &TimingEvent::optimizer_ms}, {"sync_ms", &TimingEvent::sync_ms},
};

// Milliseconds to the microsecond (seconds to the microsecond for "start"): shorter lines, and
// nothing a clock read can resolve is lost.
double to_us(double ms) { return std::round(ms * 1e3) / 1e3; }

// "ops": [["f"|"b", chunk, micro_batch, start_ms, end_ms], ...]
Status read_ops(const Json& j, std::vector<TimingEvent::Op>& out) {
  const Json* ops = j.find("ops");
  if (!ops || ops->is_null()) return Status::OK();
  const auto bad = [](const std::string& what) {
    return Status::invalid_input("worker event \"timing\": \"ops\" " + what + "; each op is [\"f\" or \"b\", chunk, micro-batch, start_ms, end_ms]");
  };
  if (!ops->is_array()) return bad("must be an array");
  for (const Json& item : ops->as_array()) {
    if (!item.is_array() || item.as_array().size() != 5) return bad("holds an entry that is not a 5-element array");
    const auto& a = item.as_array();
    if (!a[0].is_string() || (a[0].as_string() != "f" && a[0].as_string() != "b")) return bad("holds an entry whose kind is not \"f\" or \"b\"");
    for (size_t i = 1; i < 5; ++i) {
      if (!a[i].is_number()) return bad("holds an entry with a non-number");
    }
    if (!a[1].is_int() || !a[2].is_int() || a[1].as_int() < 0 || a[2].as_int() < 0 || a[1].as_int() > (1 << 30) || a[2].as_int() > (1 << 30)) {
      return bad("holds a chunk or micro-batch that is not a small integer >= 0");
    }
    TimingEvent::Op op;
    op.backward = a[0].as_string() == "b";
    op.chunk = static_cast<int>(a[1].as_int());
    op.micro_batch = static_cast<int>(a[2].as_int());
    op.start_ms = a[3].as_double();
    op.end_ms = a[4].as_double();
    out.push_back(op);
  }
  return Status::OK();
}

// "moe_layers": [L, ...] and "moe_load": [[count, ...] per layer]: whole numbers >= 0, a row per layer.
Status read_moe_load(const Json& j, StepEvent& e) {
  const Json* layers = j.find("moe_layers");
  const Json* load = j.find("moe_load");
  const bool has_layers = layers && !layers->is_null(), has_load = load && !load->is_null();
  if (!has_layers && !has_load) return Status::OK();
  const auto bad = [](const std::string& what) {
    return Status::invalid_input("worker event \"step\": " + what + "; \"moe_layers\" is [layer, ...] and \"moe_load\" one array of "
                                 "token counts per layer");
  };
  if (!has_layers || !has_load || !layers->is_array() || !load->is_array() || layers->size() != load->size()) {
    return bad("\"moe_layers\" and \"moe_load\" must be arrays of the same length");
  }
  for (const Json& l : layers->as_array()) {
    if (!l.is_int() || l.as_int() < 0 || l.as_int() > (1 << 30)) return bad("\"moe_layers\" holds an entry that is not a layer index");
    e.moe_layers.push_back(static_cast<int>(l.as_int()));
  }
  for (const Json& row : load->as_array()) {
    if (!row.is_array()) return bad("\"moe_load\" holds an entry that is not an array");
    std::vector<int64_t> counts;
    for (const Json& c : row.as_array()) {
      if (!c.is_int() || c.as_int() < 0) return bad("\"moe_load\" holds a count that is not a whole number >= 0");
      counts.push_back(c.as_int());
    }
    e.moe_load.push_back(std::move(counts));
  }
  return Status::OK();
}

// "kernels": {"work": "path", ...}, in the order written.
Status read_kernels(const Json& j, std::vector<std::pair<std::string, std::string>>& out) {
  const Json* kernels = j.find("kernels");
  if (!kernels || kernels->is_null()) return Status::OK();
  const auto bad = [](const std::string& got) {
    return Status::invalid_input("worker event \"start\": \"kernels\" must be an object of strings (work: path), got " + got);
  };
  if (!kernels->is_object()) return bad(type_of(*kernels));
  for (const auto& [work, path] : kernels->as_object()) {
    if (!path.is_string()) return bad(json_quote(work) + ": " + type_of(path));
    out.emplace_back(work, path.as_string());
  }
  return Status::OK();
}

}  // namespace

bool has_timeline(int64_t step, int64_t steps) { return step <= 3 || step % 10 == 0 || step == steps; }

std::string encode_event(const WorkerEvent& event) {
  Json::Object o;
  o.emplace_back("event", std::string(event_name(event)));
  std::visit(Overloaded{
                 [&](const StartEvent& e) {
                   set_rank(o, e.rank);
                   o.emplace_back("world_size", e.world_size);
                   o.emplace_back("dp", e.dp);
                   o.emplace_back("tp", e.tp);
                   o.emplace_back("pp", e.pp);
                   if (e.cp > 1) o.emplace_back("cp", e.cp);
                   o.emplace_back("step", static_cast<long long>(e.step));
                   o.emplace_back("steps", static_cast<long long>(e.steps));
                   if (!e.kernels.empty()) {
                     Json::Object kernels;
                     for (const auto& [work, path] : e.kernels) kernels.emplace_back(work, path);
                     o.emplace_back("kernels", Json::object(std::move(kernels)));
                   }
                 },
                 [&](const StepEvent& e) {
                   set_rank(o, e.rank);
                   o.emplace_back("step", static_cast<long long>(e.step));
                   o.emplace_back("loss", e.loss);  // a NaN is written as null
                   o.emplace_back("lr", e.lr);
                   o.emplace_back("grad_norm", e.grad_norm);
                   o.emplace_back("tokens_per_s", e.tokens_per_s);
                   o.emplace_back("step_ms", e.step_ms);
                   if (e.mem_bytes >= 0) o.emplace_back("mem_bytes", static_cast<long long>(e.mem_bytes));
                   if (!std::isnan(e.loss_scale)) o.emplace_back("loss_scale", e.loss_scale);
                   if (e.skipped) o.emplace_back("skipped", true);
                   if (!std::isnan(e.tflops)) o.emplace_back("tflops", e.tflops);
                   if (!std::isnan(e.mfu)) o.emplace_back("mfu", e.mfu);
                   if (!std::isnan(e.lm_loss)) o.emplace_back("lm_loss", e.lm_loss);
                   if (!std::isnan(e.aux_loss)) o.emplace_back("aux_loss", e.aux_loss);
                   if (!e.moe_layers.empty()) {
                     Json::Array layers, load;
                     for (int l : e.moe_layers) layers.push_back(Json(l));
                     for (const auto& row : e.moe_load) {
                       Json::Array counts;
                       for (int64_t c : row) counts.push_back(Json(static_cast<long long>(c)));
                       load.push_back(Json(std::move(counts)));
                     }
                     o.emplace_back("moe_layers", Json(std::move(layers)));
                     o.emplace_back("moe_load", Json(std::move(load)));
                   }
                   if (e.moe_dropped >= 0) o.emplace_back("moe_dropped", static_cast<long long>(e.moe_dropped));
                 },
                 [&](const TimingEvent& e) {
                   set_rank(o, e.rank);
                   o.emplace_back("step", static_cast<long long>(e.step));
                   o.emplace_back("start", std::round(e.start * 1e6) / 1e6);
                   for (const auto& f : kTimingFields) {
                     // cp_ms only where the run splits sequences, so other runs' lines stay as they were.
                     if (f.field == &TimingEvent::cp_ms && e.cp_ms == 0) continue;
                     if (f.field == &TimingEvent::ep_ms && e.ep_ms == 0) continue;
                     if (f.field != &TimingEvent::start) o.emplace_back(f.key, to_us(e.*(f.field)));
                   }
                   if (!e.ops.empty()) {
                     Json::Array ops;
                     ops.reserve(e.ops.size());
                     for (const auto& op : e.ops) {
                       ops.push_back(Json(Json::Array{Json(std::string(op.backward ? "b" : "f")), Json(op.chunk), Json(op.micro_batch),
                                                      Json(to_us(op.start_ms)), Json(to_us(op.end_ms))}));
                     }
                     o.emplace_back("ops", Json(std::move(ops)));
                   }
                 },
                 [&](const CheckpointEvent& e) {
                   set_rank(o, e.rank);
                   o.emplace_back("step", static_cast<long long>(e.step));
                   o.emplace_back("path", e.path);
                 },
                 [&](const DoneEvent& e) {
                   set_rank(o, e.rank);
                   o.emplace_back("step", static_cast<long long>(e.step));
                   o.emplace_back("loss", e.loss);
                 },
                 [&](const ErrorEvent& e) {
                   set_rank(o, e.rank);
                   o.emplace_back("message", e.message);
                 },
             },
             event);
  return Json::object(std::move(o)).dump() + "\n";
}

Result<WorkerEvent> decode_event(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty() || line.front() != '{') return Status::invalid_input("worker event: not a JSON object line");
  auto parsed = Json::parse(line);
  if (!parsed.ok()) return parsed.status().with_context("worker event");
  const Json& j = parsed.value();
  if (!j.is_object()) return Status::invalid_input("worker event: not a JSON object line");
  const Json* kind = j.find("event");
  if (!kind || !kind->is_string()) return Status::invalid_input("worker event: no string \"event\" field naming its kind");
  const std::string& k = kind->as_string();
  Reader r(j, k);
  if (k == "start") {
    StartEvent e;
    r.rank(e.rank);
    r.integer("world_size", e.world_size, false);
    r.integer("dp", e.dp, false);
    r.integer("tp", e.tp, false);
    r.integer("pp", e.pp, false);
    r.integer("cp", e.cp, false);
    r.integer("step", e.step, false);
    r.integer("steps", e.steps, false);
    if (!r.status().ok()) return r.status();
    if (Status s = read_kernels(j, e.kernels); !s) return s;
    return WorkerEvent{std::move(e)};
  }
  if (k == "step") {
    StepEvent e;
    r.rank(e.rank);
    r.integer("step", e.step, true);
    r.number("loss", e.loss);
    r.number("lr", e.lr);
    r.number("grad_norm", e.grad_norm);
    r.number("tokens_per_s", e.tokens_per_s);
    r.number("step_ms", e.step_ms);
    r.integer("mem_bytes", e.mem_bytes, false);
    r.number("loss_scale", e.loss_scale);
    r.boolean("skipped", e.skipped);
    r.number("tflops", e.tflops);
    r.number("mfu", e.mfu);
    r.number("lm_loss", e.lm_loss);
    r.number("aux_loss", e.aux_loss);
    r.integer("moe_dropped", e.moe_dropped, false);
    if (!r.status().ok()) return r.status();
    if (Status s = read_moe_load(j, e); !s) return s;
    return WorkerEvent{std::move(e)};
  }
  if (k == "timing") {
    TimingEvent e;
    r.rank(e.rank);
    r.integer("step", e.step, true);
    for (const auto& f : kTimingFields) r.number(f.key, e.*(f.field));
    if (!r.status().ok()) return r.status();
    if (Status s = read_ops(j, e.ops); !s) return s;
    return WorkerEvent{std::move(e)};
  }
  if (k == "checkpoint") {
    CheckpointEvent e;
    r.rank(e.rank);
    r.integer("step", e.step, true);
    r.text("path", e.path, true);
    return finish(r, std::move(e));
  }
  if (k == "done") {
    DoneEvent e;
    r.rank(e.rank);
    r.integer("step", e.step, false);
    r.number("loss", e.loss);
    return finish(r, e);
  }
  if (k == "error") {
    ErrorEvent e;
    r.rank(e.rank);
    r.text("message", e.message, true);
    return finish(r, std::move(e));
  }
  return Status::invalid_input("worker event: unknown kind " + json_quote(k) +
                               "; expected start, step, timing, checkpoint, done or error");
}

std::string_view event_name(const WorkerEvent& event) {
  return std::visit(Overloaded{
                        [](const StartEvent&) { return std::string_view("start"); },
                        [](const StepEvent&) { return std::string_view("step"); },
                        [](const TimingEvent&) { return std::string_view("timing"); },
                        [](const CheckpointEvent&) { return std::string_view("checkpoint"); },
                        [](const DoneEvent&) { return std::string_view("done"); },
                        [](const ErrorEvent&) { return std::string_view("error"); },
                    },
                    event);
}

int event_rank(const WorkerEvent& event) {
  return std::visit([](const auto& e) { return e.rank; }, event);
}

bool same_event(const WorkerEvent& a, const WorkerEvent& b) {
  if (a.index() != b.index()) return false;
  return std::visit(Overloaded{
                        [&](const StepEvent& x) {
                          const auto& y = std::get<StepEvent>(b);
                          return x.rank == y.rank && x.step == y.step && same_number(x.loss, y.loss) &&
                                 same_number(x.lr, y.lr) && same_number(x.grad_norm, y.grad_norm) &&
                                 same_number(x.tokens_per_s, y.tokens_per_s) && same_number(x.step_ms, y.step_ms) &&
                                 x.mem_bytes == y.mem_bytes && same_number(x.loss_scale, y.loss_scale) && x.skipped == y.skipped &&
                                 same_number(x.tflops, y.tflops) && same_number(x.mfu, y.mfu) && same_number(x.lm_loss, y.lm_loss) &&
                                 same_number(x.aux_loss, y.aux_loss) && x.moe_layers == y.moe_layers && x.moe_load == y.moe_load &&
                                 x.moe_dropped == y.moe_dropped;
                        },
                        [&](const DoneEvent& x) {
                          const auto& y = std::get<DoneEvent>(b);
                          return x.rank == y.rank && x.step == y.step && same_number(x.loss, y.loss);
                        },
                        [&](const auto& x) { return x == std::get<std::decay_t<decltype(x)>>(b); },
                    },
                    a);
}

}  // namespace stagecraft::launch
