// Import of LiBai, PaddlePaddle and Colossal-AI Python configs, DeepSpeed ds_config JSON and
// torchtitan's options (or a TOML job config) into a RunConfig. See frameworks.h for the contract.
//
// Each reader sets what its format carries on a copy of the base (or of RunConfig's defaults)
// and records the file line each Stagecraft key came from; finish() then keeps the base's
// spellings where they mean the same plan, validates, and reports every problem with its line.
// Python files are evaluated by python_literal.h: values it cannot evaluate are errors only
// when they are read here.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "frameworks_common.h"
#include "stagecraft/interop/frameworks.h"
#include "stagecraft/interop/python_literal.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/core/json.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::interop {

namespace {

using K = PyValue::Kind;

// Where a value was read: the file line, the name it has in the file, and its text.
struct Source {
  int line = 0;
  std::string name;
};

// Problems and the line of every Stagecraft key set from the file.
class Report {
 public:
  explicit Report(std::string origin) : origin_(std::move(origin)) {}

  const std::string& origin() const { return origin_; }
  std::string at(int line) const { return origin_ + (line > 0 ? ":" + std::to_string(line) : "") + ": "; }
  void problem(int line, const std::string& msg) { problems_.push_back(at(line) + msg); }
  void set_line(const std::string& key, int line) {
    if (line > 0) lines_[key] = line;
  }
  int line_of(const std::string& key) const {
    auto it = lines_.find(key);
    return it == lines_.end() ? 0 : it->second;
  }
  bool ok() const { return problems_.empty(); }
  std::vector<std::string>& problems() { return problems_; }

 private:
  std::string origin_;
  std::vector<std::string> problems_;
  std::map<std::string, int> lines_;
};

// ----------------------------------------------------------------------------- Python values

// Typed reads of a Python module's values, reporting what is wrong with the file line.
class PyReader {
 public:
  PyReader(const PyModule& m, Report& r) : m_(m), r_(r) {}

  // The value at `dotted`, or nullptr when the file does not set it. An unevaluable value is
  // reported (it matters: the caller asked for it) and also yields nullptr.
  const PyValue* get(const std::string& dotted) {
    const PyValue* v = m_.find(dotted);
    if (v && v->kind == K::kOpaque) {
      r_.problem(v->line, dotted + ": cannot evaluate it: " + v->s);
      return nullptr;
    }
    if (v && v->kind == K::kObject) {
      r_.problem(v->line, dotted + " is " + v->s + ", not a value Stagecraft can read");
      return nullptr;
    }
    return v;
  }
  // Like get(), but an unevaluable value is returned quietly (for values the caller can do without).
  const PyValue* peek(const std::string& dotted) const { return m_.find(dotted); }

  std::optional<int> integer(const std::string& dotted, const PyValue* v, int lo, int hi) {
    if (!v) return std::nullopt;
    if (v->kind != K::kInt) {
      r_.problem(v->line, dotted + "=" + py_repr(*v, 60) + ": expected an integer, got " + py_kind_name(*v));
      return std::nullopt;
    }
    if (v->i < lo || v->i > hi) {
      r_.problem(v->line, dotted + "=" + std::to_string(v->i) + ": must be between " + std::to_string(lo) + " and " + std::to_string(hi));
      return std::nullopt;
    }
    return static_cast<int>(v->i);
  }
  std::optional<int> integer(const std::string& dotted, int lo, int hi) { return integer(dotted, get(dotted), lo, hi); }

  std::optional<double> number(const std::string& dotted, const PyValue* v, double lo, double hi) {
    if (!v) return std::nullopt;
    if (v->kind != K::kInt && v->kind != K::kFloat) {
      r_.problem(v->line, dotted + "=" + py_repr(*v, 60) + ": expected a number, got " + py_kind_name(*v));
      return std::nullopt;
    }
    const double d = v->kind == K::kInt ? static_cast<double>(v->i) : v->f;
    if (!(d >= lo && d <= hi)) {
      r_.problem(v->line, dotted + "=" + py_repr(*v) + ": must be between " + py_float(lo) + " and " + py_float(hi));
      return std::nullopt;
    }
    return d;
  }
  std::optional<double> number(const std::string& dotted, double lo, double hi) { return number(dotted, get(dotted), lo, hi); }

  std::optional<bool> boolean(const std::string& dotted) {
    const PyValue* v = get(dotted);
    if (!v) return std::nullopt;
    if (v->kind != K::kBool) {
      r_.problem(v->line, dotted + "=" + py_repr(*v, 60) + ": expected True or False, got " + py_kind_name(*v));
      return std::nullopt;
    }
    return v->b;
  }

  // A list or tuple of integers.
  std::optional<std::vector<int>> int_list(const std::string& dotted, const PyValue* v) {
    if (!v) return std::nullopt;
    if (!v->is_container()) {
      r_.problem(v->line, dotted + "=" + py_repr(*v, 60) + ": expected a list of stage ids, got " + py_kind_name(*v));
      return std::nullopt;
    }
    std::vector<int> out;
    for (size_t k = 0; k < v->items.size(); ++k) {
      const PyValue& it = *v->items[k];
      if (it.kind != K::kInt || it.i < 0 || it.i > 1'000'000) {
        r_.problem(v->line, dotted + "[" + std::to_string(k) + "]=" + py_repr(it, 40) + ": expected a stage id (an integer from 0)");
        return std::nullopt;
      }
      out.push_back(static_cast<int>(it.i));
    }
    return out;
  }

 private:
  const PyModule& m_;
  Report& r_;
};

// What the formats say about precision and recompute: values a format cannot tell apart keep
// the base's choice.
Precision amp_precision(bool enabled, Precision base) {
  if (!enabled) return Precision::kFp32;
  return base == Precision::kBf16 ? Precision::kBf16 : Precision::kFp16;
}

// The schedule of a framework that only runs one chunk per pp rank.
void non_interleaved(RunConfig& c) {
  if (c.pipeline.schedule == Schedule::kInterleaved) c.pipeline.schedule = Schedule::k1f1b;
  c.pipeline.virtual_stages = 1;
}

// Sets the batch split from what the file gives: any of micro-batch size, micro-batch count
// and global batch, the rest from `c` (the base). dp is the data parallel size the file implies.
void set_batch(RunConfig& c, Report& r, std::optional<int> micro, std::optional<int> count, std::optional<int> global,
               int micro_line, int count_line, int global_line, const std::string& count_name) {
  const int dp = std::max(1, resolved_dp(c));
  if (micro) {
    c.train.micro_batch = *micro;
    r.set_line("train.micro_batch", micro_line);
  }
  if (global) {
    c.train.global_batch = *global;
    r.set_line("train.global_batch", global_line);
    if (count && micro && static_cast<long long>(*micro) * *count * dp != *global) {
      r.problem(global_line, "the global batch " + std::to_string(*global) + " is not micro-batch " + std::to_string(*micro) + " x " + count_name +
                                 " " + std::to_string(*count) + " x data parallel size " + std::to_string(dp));
    }
    if (count && !micro) {
      const long long per = static_cast<long long>(*count) * dp;
      if (*global % per != 0) {
        r.problem(count_line, count_name + "=" + std::to_string(*count) + ": the global batch " + std::to_string(*global) +
                                  " is not a multiple of it x data parallel size " + std::to_string(dp));
      } else {
        c.train.micro_batch = static_cast<int>(*global / per);
        r.set_line("train.micro_batch", count_line);
      }
    }
  } else if (count) {
    c.train.global_batch = static_cast<int>(std::min<long long>(static_cast<long long>(c.train.micro_batch) * *count * dp, 1'000'000'000));
    r.set_line("train.global_batch", count_line);
  }
}

// ----------------------------------------------------------------------------- LiBai

void read_libai(const PyModule& m, RunConfig& c, const RunConfig* base, Report& r) {
  PyReader py(m, r);
  const int lo = 1, hi = 1 << 20;
  // The model shape, when the file overrides LiBai's model config.
  auto model_int = [&](std::initializer_list<const char*> names, int& out, const char* key) {
    for (const char* n : names) {
      if (!py.peek(n)) continue;
      if (auto v = py.integer(n, 1, 1 << 30)) {
        out = *v;
        r.set_line(key, py.peek(n)->line);
      }
      return;
    }
  };
  model_int({"model.cfg.num_layers", "model.cfg.hidden_layers"}, c.model.layers, "model.layers");
  model_int({"model.cfg.hidden_size"}, c.model.hidden, "model.hidden");
  model_int({"model.cfg.num_attention_heads"}, c.model.heads, "model.heads");
  model_int({"model.cfg.ffn_hidden_size", "model.cfg.intermediate_size"}, c.model.ffn_hidden, "model.ffn_hidden");
  model_int({"model.cfg.max_seq_length", "model.cfg.max_position_embeddings"}, c.model.seq_len, "model.seq_len");
  model_int({"model.cfg.vocab_size"}, c.model.vocab, "model.vocab");
  if (auto v = py.integer("train.dist.num_nodes", 1, 1 << 17)) {
    c.cluster.nodes = *v;
    r.set_line("cluster.nodes", py.peek("train.dist.num_nodes")->line);
  }
  if (auto v = py.integer("train.dist.num_gpus_per_node", 1, 1024)) {
    c.cluster.gpus_per_node = *v;
    r.set_line("cluster.gpus_per_node", py.peek("train.dist.num_gpus_per_node")->line);
  }
  if (!c.cluster.hosts.empty() && (static_cast<int>(c.cluster.hosts.size()) != c.cluster.nodes || c.cluster.hosts.front().slots != c.cluster.gpus_per_node)) {
    c.cluster.hosts.clear();  // the base's hosts describe another cluster
  }
  // LiBai's defaults (configs/common/train.py) for the layout keys a fragment leaves out.
  c.parallel.tp = 1;
  c.parallel.pp = 1;
  c.parallel.dp = 0;  // LiBai always derives it: world / (tp x pp)
  c.parallel.tp_mode = TpMode::k1d;
  c.parallel.tp_depth = 1;
  if (auto v = py.integer("train.dist.tensor_parallel_size", lo, hi)) {
    c.parallel.tp = *v;
    r.set_line("parallel.tp", py.peek("train.dist.tensor_parallel_size")->line);
  }
  if (auto v = py.integer("train.dist.pipeline_parallel_size", lo, hi)) {
    c.parallel.pp = *v;
    r.set_line("parallel.pp", py.peek("train.dist.pipeline_parallel_size")->line);
  }
  if (auto v = py.integer("train.dist.data_parallel_size", lo, hi)) {
    c.parallel.dp = *v;
    r.set_line("parallel.dp", py.peek("train.dist.data_parallel_size")->line);
  }
  non_interleaved(c);
  const bool layers_known = c.model.layers > 0;
  // pipeline_num_layers is the model's layer count (LiBai: "must be set consistent with the model
  // layers"); `= model.cfg.hidden_layers` from an imported model config reads as the model's.
  const PyValue* nl = py.peek("train.dist.pipeline_num_layers");
  if (nl && (nl->kind == K::kOpaque || nl->kind == K::kObject) && !layers_known) {
    r.problem(nl->line, "train.dist.pipeline_num_layers: cannot evaluate it (" + nl->s +
                            "); pass --base CONFIG for the model's layers, or write the number");
  } else if (nl && nl->kind != K::kOpaque && nl->kind != K::kObject && !nl->is_container() && nl->kind != K::kNone) {
    if (auto v = py.integer("train.dist.pipeline_num_layers", nl, 1, 1'000'000)) {
      if (!layers_known) {
        c.model.layers = *v;
        r.set_line("model.layers", nl->line);
      } else if (*v != c.model.layers && c.parallel.pp > 1) {
        r.problem(nl->line, "train.dist.pipeline_num_layers=" + std::to_string(*v) + ": the model has " + std::to_string(c.model.layers) +
                                " layers (model.layers" + std::string(r.line_of("model.layers") ? "" : " from the base") + "); LiBai needs them equal");
      }
    }
  }
  // The stage of every layer: custom_pipeline_stage_id, or LiBai's own rule.
  c.pipeline.partition = PartitionKind::kUniform;
  c.pipeline.stage_ids.clear();
  if (c.parallel.pp > 1 && c.model.layers > 0) {
    const PyValue* ids = py.peek("train.dist.custom_pipeline_stage_id");
    if (ids && ids->kind != K::kNone) {
      if (auto list = py.int_list("train.dist.custom_pipeline_stage_id", py.get("train.dist.custom_pipeline_stage_id"))) {
        c.pipeline.partition = PartitionKind::kExplicit;
        c.pipeline.stage_ids = *list;
        r.set_line("pipeline.partition", ids->line);
      }
    } else if (c.parallel.pp <= c.model.layers) {
      c.pipeline.partition = PartitionKind::kExplicit;
      c.pipeline.stage_ids = libai_auto_stage_ids(c.model.layers, c.parallel.pp);
      r.set_line("pipeline.partition", r.line_of("parallel.pp"));
    }
  }
  // Batches: global = micro x accumulation x dp (configs/common/train.py).
  std::optional<int> micro = py.integer("train.train_micro_batch_size", 1, 1 << 30);
  std::optional<int> acc = py.integer("train.num_accumulation_steps", 1, 1 << 30);
  std::optional<int> global = py.integer("train.global_batch_size", 1, 1 << 30);
  auto line = [&](const char* n) { return py.peek(n) ? py.peek(n)->line : 0; };
  set_batch(c, r, micro, acc, global, line("train.train_micro_batch_size"), line("train.num_accumulation_steps"),
            line("train.global_batch_size"), "num_accumulation_steps");
  if (auto v = py.integer("train.train_iter", 1, 1 << 30)) {
    c.train.steps = *v;
    r.set_line("train.steps", line("train.train_iter"));
  }
  if (auto v = py.boolean("train.amp.enabled")) c.train.precision = amp_precision(*v, base ? base->train.precision : Precision::kFp32);
  if (auto v = py.boolean("train.activation_checkpoint.enabled")) {
    c.train.recompute = *v ? Recompute::kFull : (c.train.recompute == Recompute::kSelective ? Recompute::kSelective : Recompute::kNone);
  }
  if (auto enabled = py.boolean("train.zero_optimization.enabled")) {
    c.parallel.zero = 0;
    if (*enabled) {
      c.parallel.zero = py.integer("train.zero_optimization.stage", 1, 3).value_or(1);
    }
  }
  if (const PyValue* v = py.get("train.seed"); v && v->kind == K::kInt && v->i >= 0) c.train.seed = static_cast<uint64_t>(v->i);
  if (auto v = py.number("optim.lr", 0.0, 10.0)) c.train.lr = *v;
  if (auto v = py.number("optim.weight_decay", 0.0, 10.0)) c.train.weight_decay = *v;
}

// ----------------------------------------------------------------------------- PaddlePaddle

void read_paddle(const PyModule& m, RunConfig& c, Report& r) {
  PyReader py(m, r);
  // The strategy: whichever global has hybrid_configs (strategy.hybrid_configs = {...}).
  std::string owner;
  for (const auto& [k, v] : m.globals().entries) {
    if (k->kind == K::kStr && (v->kind == K::kObject || v->kind == K::kDict) && v->get("hybrid_configs")) {
      owner = k->s;
      break;
    }
  }
  if (owner.empty()) {
    r.problem(0, "no `strategy.hybrid_configs = {...}` found; a PaddlePaddle hybrid parallel config sets dp_degree, mp_degree and pp_degree there");
    return;
  }
  const std::string hc = owner + ".hybrid_configs";
  const PyValue* configs = py.get(hc);
  if (!configs) return;
  if (configs->kind != K::kDict) {
    r.problem(configs->line, hc + "=" + py_repr(*configs, 60) + ": expected a dict of degrees");
    return;
  }
  auto degree = [&](const char* key, int fallback) -> int {
    const PyValue* v = configs->get(key);
    if (!v) return fallback;
    if (v->kind == K::kOpaque) {
      r.problem(v->line, hc + "[\"" + key + "\"]: cannot evaluate it: " + v->s);
      return fallback;
    }
    if (v->kind != K::kInt || v->i < -1 || v->i > (1 << 20) || v->i == 0) {
      r.problem(v->line, hc + "[\"" + key + "\"]=" + py_repr(*v, 40) + ": expected a positive integer" +
                             std::string(std::string(key) == "dp_degree" ? " (or -1: world / (mp x pp))" : ""));
      return fallback;
    }
    return static_cast<int>(v->i);
  };
  auto line_of = [&](const char* key) { return configs->get(key) ? configs->get(key)->line : configs->line; };
  const int dp = degree("dp_degree", -1);
  const int mp = degree("mp_degree", 1);
  const int pp = degree("pp_degree", 1);
  const int sharding = degree("sharding_degree", 1);
  const int sep = degree("sep_degree", 1);
  if (mp < 1 || pp < 1 || sharding < 1 || sep < 1) {
    r.problem(configs->line, hc + ": only dp_degree may be -1 (Paddle derives it as world / (mp x pp))");
    return;
  }
  if (sep > 1) r.problem(line_of("sep_degree"), hc + "[\"sep_degree\"]=" + std::to_string(sep) + ": Stagecraft plans no segment (sequence) parallel axis");
  c.parallel.tp = mp;
  c.parallel.pp = pp;
  c.parallel.tp_mode = TpMode::k1d;
  c.parallel.tp_depth = 1;
  r.set_line("parallel.tp", line_of("mp_degree"));
  r.set_line("parallel.pp", line_of("pp_degree"));
  if (sharding > 1) {
    // The sharding axis splits the data like dp and shards the optimizer state (ZeRO-1).
    if (dp > 1) {
      r.problem(line_of("sharding_degree"), hc + ": dp_degree " + std::to_string(dp) + " and sharding_degree " + std::to_string(sharding) +
                                                " are both above 1; Stagecraft plans ZeRO over the whole data parallel group (dp_degree 1, sharding_degree = dp)");
    } else if (dp == -1) {
      r.problem(line_of("dp_degree"), hc + "[\"dp_degree\"]: set it to 1 with sharding_degree " + std::to_string(sharding) +
                                          " (Paddle's automatic dp_degree leaves the sharding axis out)");
    }
    c.parallel.dp = sharding;
    c.parallel.zero = 1;
    r.set_line("parallel.dp", line_of("sharding_degree"));
  } else {
    c.parallel.dp = dp == -1 ? 0 : dp;
    c.parallel.zero = 0;
    r.set_line("parallel.dp", line_of("dp_degree"));
  }
  const std::string pc = owner + ".pipeline_configs";
  const PyValue* pipe = py.get(pc);
  if (pipe && pipe->kind != K::kDict) {
    r.problem(pipe->line, pc + "=" + py_repr(*pipe, 60) + ": expected a dict");
    pipe = nullptr;
  }
  std::optional<int> micro, acc;
  int micro_line = 0, acc_line = 0;
  // A value of pipeline_configs: an integer from 1, or a problem on its line.
  auto pipe_int = [&](const char* key, int* line) -> std::optional<int> {
    const PyValue* v = pipe ? pipe->get(key) : nullptr;
    if (!v) return std::nullopt;
    *line = v->line;
    const std::string name = pc + "[\"" + key + "\"]";
    if (v->kind == K::kOpaque) {
      r.problem(v->line, name + ": cannot evaluate it: " + v->s);
      return std::nullopt;
    }
    return py.integer(name, v, 1, 1 << 30);
  };
  micro = pipe_int("micro_batch_size", &micro_line);
  acc = pipe_int("accumulate_steps", &acc_line);
  if (acc && !micro) {
    set_batch(c, r, std::nullopt, acc, std::nullopt, 0, acc_line, 0, "accumulate_steps");
  } else if (micro && acc) {
    const int dp_total = std::max(1, resolved_dp(c));
    set_batch(c, r, micro, acc, static_cast<int>(std::min<long long>(static_cast<long long>(*micro) * *acc * dp_total, 1'000'000'000)),
              micro_line, acc_line, acc_line, "accumulate_steps");
  } else if (micro) {
    // Keep the base's number of micro-batches.
    const int count = std::max(1, micro_batches(c));
    set_batch(c, r, micro, count, std::nullopt, micro_line, micro_line, 0, "accumulate_steps");
  }
}

// ----------------------------------------------------------------------------- Colossal-AI

void read_colossalai(const PyModule& m, RunConfig& c, Report& r) {
  PyReader py(m, r);
  c.parallel.pp = 1;
  c.parallel.tp = 1;
  c.parallel.tp_mode = TpMode::k1d;
  c.parallel.tp_depth = 1;
  c.parallel.dp = 0;  // Colossal-AI infers data parallelism
  if (const PyValue* par = py.get("parallel")) {
    if (par->kind != K::kDict) {
      r.problem(par->line, "parallel=" + py_repr(*par, 60) + ": expected dict(pipeline=..., tensor=dict(size=..., mode=...))");
      return;
    }
    for (const auto& [k, v] : par->entries) {
      const std::string key = k->kind == K::kStr ? k->s : py_repr(*k);
      if (key == "pipeline" || key == "tensor") continue;
      r.problem(v->line, "parallel." + key + ": unknown key; the parallel dict has pipeline and tensor" +
                             std::string(key == "data" ? " (Colossal-AI infers the data parallel size)" : ""));
    }
    // pipeline=2 or pipeline=dict(size=2)
    if (const PyValue* p = par->get("pipeline")) {
      const PyValue* size = p->kind == K::kDict ? p->get("size") : p;
      if (size) {
        if (auto v = py.integer("parallel.pipeline", size, 1, 1 << 20)) {
          c.parallel.pp = *v;
          r.set_line("parallel.pp", size->line);
        }
      } else {
        r.problem(p->line, "parallel.pipeline: expected an integer or dict(size=...)");
      }
    }
    if (const PyValue* t = par->get("tensor")) {
      if (t->kind != K::kDict) {
        r.problem(t->line, "parallel.tensor=" + py_repr(*t, 40) + ": give dict(size=..., mode='1d'|'2d'|'2.5d'|'3d'); Colossal-AI needs the mode");
      } else {
        const PyValue* size = t->get("size");
        const PyValue* mode = t->get("mode");
        std::optional<int> tp = size ? py.integer("parallel.tensor.size", size, 1, 1 << 20) : std::optional<int>(1);
        if (tp) {
          c.parallel.tp = *tp;
          r.set_line("parallel.tp", size ? size->line : t->line);
        }
        if (mode && mode->kind == K::kStr) {
          if (auto tm = parse_tp_mode(mode->s)) {
            c.parallel.tp_mode = *tm;
            r.set_line("parallel.tp_mode", mode->line);
          } else {
            r.problem(mode->line, "parallel.tensor.mode='" + mode->s + "': Stagecraft plans '1d', '2d', '2.5d' and '3d' tensor parallelism");
          }
        } else if (mode && mode->kind != K::kNone) {
          r.problem(mode->line, "parallel.tensor.mode=" + py_repr(*mode, 40) + ": expected '1d', '2d', '2.5d' or '3d'");
        } else if (c.parallel.tp > 1) {
          r.problem(t->line, "parallel.tensor: a tensor size above 1 needs a mode ('1d', '2d', '2.5d' or '3d')");
        }
        if (const PyValue* depth = t->get("depth")) {
          if (auto d = py.integer("parallel.tensor.depth", depth, 1, 1024)) {
            c.parallel.tp_depth = *d;
            r.set_line("parallel.tp_depth", depth->line);
          }
        } else if (c.parallel.tp_mode == TpMode::k2p5d) {
          r.problem(t->line, "parallel.tensor: mode '2.5d' needs depth=...");
        }
      }
    }
  }
  // The schedule: model.num_chunks picks InterleavedPipelineSchedule (colossalai.initialize).
  const PyValue* chunks = py.peek("model.num_chunks");
  if (chunks && c.parallel.pp > 1) {
    if (auto v = py.integer("model.num_chunks", 1, 1024); v && *v > 1) {
      c.pipeline.schedule = Schedule::kInterleaved;
      c.pipeline.virtual_stages = *v;
      r.set_line("pipeline.virtual_stages", chunks->line);
    } else {
      non_interleaved(c);
    }
  } else {
    non_interleaved(c);
  }
  // Batches: global = BATCH_SIZE x dp x gradient_accumulation; with a pipeline, BATCH_SIZE is
  // split into NUM_MICRO_BATCHES micro-batches.
  std::optional<int> batch = py.integer("BATCH_SIZE", 1, 1 << 30);
  std::optional<int> nmb;
  if (c.parallel.pp > 1) nmb = py.integer("NUM_MICRO_BATCHES", 1, 1 << 30);
  std::optional<int> ga = py.integer("gradient_accumulation", 1, 1 << 30);
  auto line = [&](const char* n) { return py.peek(n) ? py.peek(n)->line : 0; };
  if (batch) {
    const int dp = std::max(1, resolved_dp(c));
    int micro = *batch, count = ga.value_or(1);
    if (nmb) {
      if (*batch % *nmb != 0) {
        r.problem(line("NUM_MICRO_BATCHES"), "NUM_MICRO_BATCHES=" + std::to_string(*nmb) + ": BATCH_SIZE=" + std::to_string(*batch) + " is not a multiple of it");
      }
      micro = std::max(1, *batch / *nmb);
      count = *nmb * ga.value_or(1);
    }
    set_batch(c, r, micro, count, static_cast<int>(std::min<long long>(static_cast<long long>(micro) * count * dp, 1'000'000'000)),
              line("BATCH_SIZE"), nmb ? line("NUM_MICRO_BATCHES") : line("gradient_accumulation"), line("BATCH_SIZE"),
              nmb ? "NUM_MICRO_BATCHES" : "gradient_accumulation");
  }
  // fp16 = dict(mode=AMP_TYPE.TORCH) in any mode means fp16; the legacy config has no bf16, so
  // without it the base's bf16 stands.
  if (py.peek("fp16")) c.train.precision = Precision::kFp16;
  else if (c.train.precision == Precision::kFp16) c.train.precision = Precision::kFp32;
  if (auto v = py.number("clip_grad_norm", 0.0, 1e9)) c.train.grad_clip = *v;
}

// ----------------------------------------------------------------------------- DeepSpeed

// The line of the first "key" in a JSON text (Json keeps no positions); 0 if not found.
int json_line(std::string_view text, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  const size_t at = text.find(quoted);
  if (at == std::string_view::npos) return 0;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
}

void read_deepspeed(std::string_view text, RunConfig& c, Report& r) {
  auto parsed = Json::parse(text);
  if (!parsed.ok()) {
    r.problem(0, parsed.status().message());
    return;
  }
  const Json& ds = parsed.value();
  if (!ds.is_object()) {
    r.problem(1, "a ds_config is a JSON object of settings");
    return;
  }
  auto integer = [&](const Json* j, const std::string& key, int lo, int hi) -> std::optional<int> {
    if (!j || (j->is_string() && j->as_string() == "auto")) return std::nullopt;  // filled in by another tool: not carried
    if (!j->is_int() || j->as_int() < lo || j->as_int() > hi) {
      r.problem(json_line(text, key), key + "=" + j->dump() + ": expected an integer from " + std::to_string(lo));
      return std::nullopt;
    }
    return static_cast<int>(j->as_int());
  };
  auto number = [&](const Json* j, const std::string& key, double lo, double hi) -> std::optional<double> {
    if (!j || (j->is_string() && j->as_string() == "auto")) return std::nullopt;
    if (!j->is_number() || !(j->as_double() >= lo && j->as_double() <= hi)) {
      r.problem(json_line(text, key), key + "=" + j->dump() + ": expected a number from " + py_float(lo) + " to " + py_float(hi));
      return std::nullopt;
    }
    return j->as_double();
  };
  auto enabled = [&](const char* section) -> std::optional<bool> {
    const Json* s = ds.find(section);
    if (!s) return std::nullopt;
    const Json* e = s->is_object() ? s->find("enabled") : nullptr;
    if (!e || (e->is_string() && e->as_string() == "auto")) return std::nullopt;
    if (!e->is_bool()) {
      r.problem(json_line(text, section), std::string(section) + ".enabled=" + e->dump() + ": expected true or false");
      return std::nullopt;
    }
    return e->as_bool();
  };
  c.parallel.tp_mode = TpMode::k1d;
  c.parallel.tp_depth = 1;
  non_interleaved(c);
  // DeepSpeed: train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x
  // data parallel size. tp and pp are not in ds_config: they come from the base.
  std::optional<int> global = integer(ds.find("train_batch_size"), "train_batch_size", 1, 1'000'000'000);
  std::optional<int> micro = integer(ds.find("train_micro_batch_size_per_gpu"), "train_micro_batch_size_per_gpu", 1, 1 << 30);
  std::optional<int> gas = integer(ds.find("gradient_accumulation_steps"), "gradient_accumulation_steps", 1, 1 << 30);
  if (global && micro && gas) {
    const long long per = static_cast<long long>(*micro) * *gas;
    if (*global % per != 0) {
      r.problem(json_line(text, "train_batch_size"), "train_batch_size=" + std::to_string(*global) +
                                                         " is not a multiple of train_micro_batch_size_per_gpu x gradient_accumulation_steps = " + std::to_string(per));
    } else {
      c.parallel.dp = static_cast<int>(*global / per);
      r.set_line("parallel.dp", json_line(text, "train_batch_size"));
    }
  }
  set_batch(c, r, micro, gas, global, json_line(text, "train_micro_batch_size_per_gpu"), json_line(text, "gradient_accumulation_steps"),
            json_line(text, "train_batch_size"), "gradient_accumulation_steps");
  // DeepSpeed-Ulysses: the sequence-parallel group exchanges heads (parallel.cp_comm all_to_all).
  if (auto sp = integer(ds.find("sequence_parallel_size"), "sequence_parallel_size", 1, 1 << 20)) {
    c.parallel.cp = *sp;
    c.parallel.cp_comm = config::CpComm::kAllToAll;
    r.set_line("parallel.cp", json_line(text, "sequence_parallel_size"));
  }
  if (const Json* z = ds.find("zero_optimization")) {
    if (auto stage = integer(z->is_object() ? z->find("stage") : z, "zero_optimization.stage", 0, 3)) {
      c.parallel.zero = *stage;
      r.set_line("parallel.zero", json_line(text, "stage"));
    }
  }
  const auto fp16 = enabled("fp16");
  const auto bf16 = enabled("bf16");
  if (fp16.value_or(false) && bf16.value_or(false)) {
    r.problem(json_line(text, "bf16"), "fp16 and bf16 are both enabled; enable one");
  } else if (fp16.value_or(false)) {
    c.train.precision = Precision::kFp16;
  } else if (bf16.value_or(false)) {
    c.train.precision = Precision::kBf16;
  } else if (fp16 || bf16 || (!ds.find("fp16") && !ds.find("bf16"))) {
    c.train.precision = Precision::kFp32;
  }
  if (auto v = number(ds.find("gradient_clipping"), "gradient_clipping", 0.0, 1e9)) c.train.grad_clip = *v;
  if (const Json* opt = ds.find("optimizer"); opt && opt->is_object()) {
    if (const Json* p = opt->find("params"); p && p->is_object()) {
      if (auto v = number(p->find("lr"), "lr", 0.0, 10.0)) c.train.lr = *v;
      if (auto v = number(p->find("weight_decay"), "weight_decay", 0.0, 10.0)) c.train.weight_decay = *v;
      if (const Json* b = p->find("betas"); b && b->is_array() && b->size() == 2) {
        if (auto b1 = number(&(*b)[0], "betas", 0.0, 0.999999)) c.train.beta1 = *b1;
        if (auto b2 = number(&(*b)[1], "betas", 0.0, 0.999999)) c.train.beta2 = *b2;
      }
    }
  }
  if (const Json* s = ds.find("scheduler"); s && s->is_object()) {
    const Json* type = s->find("type");
    const Json* p = s->find("params");
    if (type && type->is_string() && type->as_string() == "WarmupCosineLR" && p && p->is_object()) {
      if (auto v = integer(p->find("total_num_steps"), "total_num_steps", 1, 1 << 30)) c.train.steps = *v;
      if (auto v = integer(p->find("warmup_num_steps"), "warmup_num_steps", 0, 1 << 30)) c.train.warmup_steps = *v;
      if (auto v = number(p->find("cos_min_ratio"), "cos_min_ratio", 0.0, 1.0)) {
        // The product to 15 significant digits, which the ratio was written with: 0.1 x 3e-4 is
        // 3e-05, not 2.9999999999999997e-05.
        char text[32];
        std::snprintf(text, sizeof text, "%.15g", *v * c.train.lr);
        c.train.min_lr = std::strtod(text, nullptr);
      }
    }
  }
}

// ----------------------------------------------------------------------------- Hugging Face

// A Hugging Face config.json: the model section (transformers' LlamaConfig, MistralConfig,
// Qwen2Config, GPT2Config). The sequence length is the base's where there is one (a model's
// max_position_embeddings is how far it can reach, not what a run trains at), else that maximum.
// ----------------------------------------------------------------------------- torchtitan

// torchtitan's settings as `section.option` = text with the line it is on: from its
// `--section.option VALUE` (or `=VALUE`) command-line options, anywhere outside comments (the
// exported TORCHTITAN_ARGS, a torchrun line), or from a TOML job config's `[section]` and
// `option = value` lines.
std::map<std::string, std::pair<std::string, int>> torchtitan_settings(std::string_view text) {
  std::map<std::string, std::pair<std::string, int>> out;
  std::string section;
  int line_no = 0;
  size_t pos = 0;
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r' || v.back() == '\\')) v.remove_suffix(1);
    return v;
  };
  auto unquote = [](std::string_view v) {
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
    return std::string(v);
  };
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = trim(text.substr(pos, end - pos));
    ++line_no;
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(trim(line.substr(1, line.size() - 2)));
      continue;
    }
    // TOML: option = value (its comment after '#' dropped).
    if (line.rfind("--", 0) != 0 && line.find('=') != std::string_view::npos && !section.empty()) {
      const size_t eq = line.find('=');
      std::string_view value = line.substr(eq + 1);
      if (const size_t hash = value.find('#'); hash != std::string_view::npos && value.find('"') == std::string_view::npos) value = value.substr(0, hash);
      out[section + "." + std::string(trim(line.substr(0, eq)))] = {unquote(trim(value)), line_no};
      continue;
    }
    // Command-line options: --section.option VALUE or --section.option=VALUE.
    std::vector<std::string_view> words;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      const size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      if (i > start) words.push_back(line.substr(start, i - start));
    }
    for (size_t w = 0; w < words.size(); ++w) {
      std::string_view word = words[w];
      if (word.rfind("--", 0) != 0 || word.find('.') == std::string_view::npos) continue;
      word.remove_prefix(2);
      if (const size_t eq = word.find('='); eq != std::string_view::npos) {
        out[std::string(word.substr(0, eq))] = {unquote(word.substr(eq + 1)), line_no};
      } else if (w + 1 < words.size() && words[w + 1].rfind("--", 0) != 0) {
        out[std::string(word)] = {unquote(words[w + 1]), line_no};
        ++w;
      } else {
        out[std::string(word)] = {"true", line_no};  // a flag
      }
    }
  }
  return out;
}

void read_torchtitan(std::string_view text, RunConfig& c, Report& r) {
  const auto settings = torchtitan_settings(text);
  if (settings.empty()) {
    r.problem(0, "no torchtitan settings found: expected its --section.option command-line options (export --to torchtitan) or a TOML job config");
    return;
  }
  auto line = [&](const std::string& key) {
    auto it = settings.find(key);
    return it == settings.end() ? 0 : it->second.second;
  };
  auto text_of = [&](const std::string& key) -> std::optional<std::string> {
    auto it = settings.find(key);
    if (it == settings.end()) return std::nullopt;
    return it->second.first;
  };
  auto integer = [&](const std::string& key, long long lo, long long hi) -> std::optional<long long> {
    auto t = text_of(key);
    if (!t) return std::nullopt;
    long long v = 0;
    auto [p, ec] = std::from_chars(t->data(), t->data() + t->size(), v);
    if (ec != std::errc() || p != t->data() + t->size() || v < lo || v > hi) {
      r.problem(line(key), key + "=" + *t + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
      return std::nullopt;
    }
    return v;
  };
  auto number = [&](const std::string& key, double lo, double hi) -> std::optional<double> {
    auto t = text_of(key);
    if (!t) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(t->c_str(), &end);
    if (t->empty() || end != t->c_str() + t->size() || !(v >= lo && v <= hi)) {
      r.problem(line(key), key + "=" + *t + ": expected a number from " + py_float(lo) + " to " + py_float(hi));
      return std::nullopt;
    }
    return v;
  };
  c.parallel.tp_mode = TpMode::k1d;
  c.parallel.tp_depth = 1;
  // Sizes: torchtitan's mesh is pp x dp_replicate x dp_shard x cp x tp; dp_shard -1 takes what the
  // others leave of the world.
  const long long tp = integer("parallelism.tensor_parallel_degree", 1, 1 << 20).value_or(1);
  const long long pp = integer("parallelism.pipeline_parallel_degree", 1, 1 << 20).value_or(1);
  const long long cp = integer("parallelism.context_parallel_degree", 1, 1 << 20).value_or(1);
  const long long replicate = integer("parallelism.data_parallel_replicate_degree", 1, 1 << 20).value_or(1);
  long long shard = integer("parallelism.data_parallel_shard_degree", -1, 1 << 20).value_or(-1);
  if (shard == 0) {
    r.problem(line("parallelism.data_parallel_shard_degree"), "parallelism.data_parallel_shard_degree=0: expected -1 (the rest of the world) or a size");
    return;
  }
  if (shard == -1) {
    const long long rest = static_cast<long long>(c.world_size()) / std::max(1LL, tp * pp * cp * replicate);
    if (rest < 1 || rest * tp * pp * cp * replicate != c.world_size()) {
      r.problem(line("parallelism.data_parallel_shard_degree"), "parallelism.data_parallel_shard_degree=-1: the " + std::to_string(c.world_size()) +
                                                                    " GPUs of the cluster are not a multiple of the other degrees' product " +
                                                                    std::to_string(tp * pp * cp * replicate));
      return;
    }
    shard = rest;
  }
  if (replicate > 1 && shard > 1) {
    r.problem(line("parallelism.data_parallel_shard_degree"),
              "parallelism.data_parallel_replicate_degree=" + std::to_string(replicate) + " and data_parallel_shard_degree=" + std::to_string(shard) +
                  " (HSDP): Stagecraft shards over the whole data-parallel group; set one of them to 1");
    return;
  }
  c.parallel.tp = static_cast<int>(tp);
  c.parallel.pp = static_cast<int>(pp);
  c.parallel.cp = static_cast<int>(cp);
  c.parallel.cp_comm = config::CpComm::kRing;
  // Experts (torchtitan/distributed/parallel_dims.py): expert_parallel_degree folds them over
  // dp_shard x cp x tp, each whole on its rank; at 1 every expert is split over the tp ranks.
  const long long ep = integer("parallelism.expert_parallel_degree", 1, 1 << 20).value_or(1);
  if (ep > 1 && !c.model.moe.enabled()) {
    r.problem(line("parallelism.expert_parallel_degree"), "parallelism.expert_parallel_degree=" + std::to_string(ep) +
                                                              ": the model has no experts (model.moe.experts" +
                                                              std::string(r.line_of("model.moe.experts") ? "" : " from the base") + " is 0)");
  } else if (ep > 1 && (shard * cp * tp) % ep != 0) {
    r.problem(line("parallelism.expert_parallel_degree"), "parallelism.expert_parallel_degree=" + std::to_string(ep) +
                                                              ": torchtitan needs it to divide data_parallel_shard_degree x context x tensor parallel degree = " +
                                                              std::to_string(shard * cp * tp));
  }
  c.parallel.ep = static_cast<int>(ep);
  c.parallel.expert_tp = c.model.moe.enabled() && ep == 1 ? static_cast<int>(tp) : 1;
  r.set_line("parallel.ep", line("parallelism.expert_parallel_degree"));
  c.parallel.dp = static_cast<int>(replicate * shard);
  r.set_line("parallel.tp", line("parallelism.tensor_parallel_degree"));
  r.set_line("parallel.pp", line("parallelism.pipeline_parallel_degree"));
  r.set_line("parallel.cp", line("parallelism.context_parallel_degree"));
  r.set_line("parallel.dp", line(shard > 1 ? "parallelism.data_parallel_shard_degree" : "parallelism.data_parallel_replicate_degree"));
  // FSDP shards weights, gradients and optimizer state (ZeRO-3); kept gathered from the forward to
  // the backward it moves ZeRO-2's traffic.
  const std::string reshard = text_of("parallelism.fsdp_reshard_after_forward").value_or("default");
  c.parallel.zero = shard > 1 ? (reshard == "never" ? 2 : 3) : 0;
  r.set_line("parallel.zero", line("parallelism.data_parallel_shard_degree"));
  // torchtitan runs tensor parallelism with sequence parallelism unless told not to.
  c.parallel.sequence_parallel = tp > 1 && text_of("parallelism.enable_sequence_parallel").value_or("true") != "false";
  // Batch: tokens per micro-batch and per step over the sequence length.
  if (auto seq = integer("training.max_context_length", 1, 1 << 30)) {
    c.model.seq_len = static_cast<int>(*seq);
    r.set_line("model.seq_len", line("training.max_context_length"));
  }
  const long long s = std::max(1, c.model.seq_len);
  std::optional<int> micro, global;
  if (auto t = integer("training.num_tokens_per_microbatch_per_dp_rank", 1, 1LL << 40)) {
    if (*t % s != 0) {
      r.problem(line("training.num_tokens_per_microbatch_per_dp_rank"), "training.num_tokens_per_microbatch_per_dp_rank=" + std::to_string(*t) +
                                                                              ": not a whole number of " + std::to_string(s) + "-token sequences");
    } else {
      micro = static_cast<int>(*t / s);
    }
  }
  if (auto t = integer("training.num_tokens_per_train_step", 1, 1LL << 50)) {
    if (*t % s != 0) {
      r.problem(line("training.num_tokens_per_train_step"), "training.num_tokens_per_train_step=" + std::to_string(*t) + ": not a whole number of " +
                                                                std::to_string(s) + "-token sequences");
    } else {
      global = static_cast<int>(std::min<long long>(*t / s, 1'000'000'000));
    }
  }
  set_batch(c, r, micro, std::nullopt, global, line("training.num_tokens_per_microbatch_per_dp_rank"), 0,
            line("training.num_tokens_per_train_step"), "");
  // The pipeline schedule.
  c.pipeline.schedule = Schedule::k1f1b;
  c.pipeline.virtual_stages = 1;
  if (auto name = text_of("parallelism.pipeline_parallel_schedule"); name && pp > 1) {
    if (*name == "GPipe") {
      c.pipeline.schedule = Schedule::kGpipe;
    } else if (*name == "Interleaved1F1B") {
      c.pipeline.schedule = Schedule::kInterleaved;
    } else if (*name != "1F1B") {
      r.problem(line("parallelism.pipeline_parallel_schedule"), "parallelism.pipeline_parallel_schedule=" + *name +
                                                                    ": Stagecraft plans GPipe, 1F1B and Interleaved1F1B (gpipe, 1f1b, interleaved)");
    }
    r.set_line("pipeline.schedule", line("parallelism.pipeline_parallel_schedule"));
  }
  if (auto per_stage = integer("parallelism.pipeline_parallel_layers_per_stage", 1, 1 << 20); per_stage && c.model.layers > 0) {
    const long long chunks = c.model.layers / *per_stage;
    if (chunks * *per_stage != c.model.layers || chunks % pp != 0) {
      r.problem(line("parallelism.pipeline_parallel_layers_per_stage"), "parallelism.pipeline_parallel_layers_per_stage=" + std::to_string(*per_stage) +
                                                                            ": the model's " + std::to_string(c.model.layers) + " layers do not split into " +
                                                                            "whole stages of that size over pp=" + std::to_string(pp));
    } else if (c.pipeline.schedule == Schedule::kInterleaved) {
      c.pipeline.virtual_stages = static_cast<int>(chunks / pp);
      r.set_line("pipeline.virtual_stages", line("parallelism.pipeline_parallel_layers_per_stage"));
    } else if (chunks != pp) {
      r.problem(line("parallelism.pipeline_parallel_layers_per_stage"), "parallelism.pipeline_parallel_layers_per_stage=" + std::to_string(*per_stage) +
                                                                            ": " + std::to_string(chunks) + " stages over pp=" + std::to_string(pp) +
                                                                            " ranks needs an interleaved schedule");
    }
    c.pipeline.partition = PartitionKind::kUniform;
    c.pipeline.stage_ids.clear();
  }
  if (auto v = integer("training.steps", 1, 1'000'000'000)) c.train.steps = static_cast<int>(*v);
  if (auto v = number("training.max_norm", 0.0, 1e6)) c.train.grad_clip = *v;
  if (auto v = text_of("training.mixed_precision_param")) {
    if (*v == "bfloat16") {
      c.train.precision = Precision::kBf16;
    } else if (*v == "float32") {
      c.train.precision = Precision::kFp32;
    } else {
      r.problem(line("training.mixed_precision_param"), "training.mixed_precision_param=" + *v + ": expected bfloat16 or float32");
    }
  }
  if (auto v = integer("lr_scheduler.warmup_steps", 0, 1'000'000'000)) c.train.warmup_steps = static_cast<int>(*v);
  if (auto v = number("lr_scheduler.min_lr_factor", 0.0, 1.0)) c.train.min_lr = c.train.lr * *v;
  if (auto v = integer("debug.seed", 0, (1LL << 53))) c.train.seed = static_cast<uint64_t>(*v);
}

void read_hf(std::string_view text, RunConfig& c, const RunConfig* base, Report& r) {
  auto parsed = Json::parse(text);
  if (!parsed.ok()) {
    r.problem(0, parsed.status().message());
    return;
  }
  const Json& hf = parsed.value();
  if (!hf.is_object()) {
    r.problem(1, "a Hugging Face config.json is a JSON object (transformers' PretrainedConfig)");
    return;
  }
  std::string arch;
  if (const Json* a = hf.find("architectures"); a && a->is_array() && a->size() > 0 && (*a)[0].is_string()) {
    arch = (*a)[0].as_string();
  } else if (const Json* t = hf.find("model_type"); t && t->is_string()) {
    const std::string& mt = t->as_string();
    static const std::pair<const char*, const char*> kTypes[] = {
        {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"},
        {"mixtral", "MixtralForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"}, {"qwen2_moe", "Qwen2MoeForCausalLM"},
        {"gpt2", "GPT2LMHeadModel"}};
    arch = mt;
    for (const auto& [type, name] : kTypes) {
      if (mt == type) arch = name;
    }
  }
  static const char* kKnown =
      "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM "
      "or GPT2LMHeadModel";
  const bool gpt2 = arch == "GPT2LMHeadModel";
  const bool qwen2 = arch == "Qwen2ForCausalLM";
  const bool mixtral = arch == "MixtralForCausalLM";
  const bool qwen3_moe = arch == "Qwen3MoeForCausalLM";
  const bool qwen2_moe = arch == "Qwen2MoeForCausalLM";  // Qwen2's attention (q/k/v biases), Qwen3-MoE's router, a shared expert
  const bool qwen3 = arch == "Qwen3ForCausalLM" || qwen3_moe;
  if (!gpt2 && !qwen2 && !qwen2_moe && !qwen3 && !mixtral && arch != "LlamaForCausalLM" && arch != "MistralForCausalLM") {
    r.problem(json_line(text, arch.empty() ? "model_type" : "architectures"),
              "architectures=" + (arch.empty() ? std::string("(none)") : arch) + ": Stagecraft reads " + kKnown);
    return;
  }
  auto integer = [&](const char* key, int lo, int hi) -> std::optional<int> {
    const Json* j = hf.find(key);
    if (!j || j->is_null()) return std::nullopt;
    if (!j->is_int() || j->as_int() < lo || j->as_int() > hi) {
      r.problem(json_line(text, key), std::string(key) + "=" + j->dump() + ": expected an integer from " + std::to_string(lo) + " to " +
                                          std::to_string(hi));
      return std::nullopt;
    }
    return static_cast<int>(j->as_int());
  };
  auto number = [&](const char* key, double lo, double hi) -> std::optional<double> {
    const Json* j = hf.find(key);
    if (!j || j->is_null()) return std::nullopt;
    if (!j->is_number() || !(j->as_double() >= lo && j->as_double() <= hi)) {
      r.problem(json_line(text, key), std::string(key) + "=" + j->dump() + ": expected a number from " + py_float(lo) + " to " + py_float(hi));
      return std::nullopt;
    }
    return j->as_double();
  };
  auto boolean = [&](const char* key) -> std::optional<bool> {
    const Json* j = hf.find(key);
    if (!j || j->is_null()) return std::nullopt;
    if (!j->is_bool()) {
      r.problem(json_line(text, key), std::string(key) + "=" + j->dump() + ": expected true or false");
      return std::nullopt;
    }
    return j->as_bool();
  };
  auto required = [&](const char* key, int lo, int hi) -> int {
    auto v = integer(key, lo, hi);
    if (!v && !hf.find(key)) r.problem(0, std::string(key) + " is missing: a " + arch + " config.json gives it");
    return v.value_or(0);
  };
  auto refuse = [&](const char* key, const std::string& why) { r.problem(json_line(text, key), why); };
  auto& m = c.model;
  const int seq_base = base ? base->model.seq_len : 0;
  if (gpt2) {
    m.arch = "gpt2";
    m.layers = required("n_layer", 1, 1'000'000);
    m.hidden = required("n_embd", 1, 1 << 20);
    m.heads = required("n_head", 1, 1 << 20);
    m.kv_heads = 0;
    m.ffn_hidden = integer("n_inner", 1, 1 << 30).value_or(0);
    m.vocab = required("vocab_size", 1, 1 << 30);
    const int positions = integer("n_positions", 1, 1 << 30).value_or(1024);
    m.seq_len = seq_base > 0 ? seq_base : positions;
    m.tied_embeddings = boolean("tie_word_embeddings").value_or(true);
    m.qkv_bias = false;
    if (auto eps = number("layer_norm_epsilon", 0.0, 1.0); eps && *eps != 1e-5) {
      refuse("layer_norm_epsilon", "layer_norm_epsilon=" + py_float(*eps) + ": Stagecraft's GPT-2 trains with LayerNorm's 1e-5");
    }
    if (const Json* act = hf.find("activation_function"); act && act->is_string() && act->as_string() != "gelu_new" &&
                                                          act->as_string() != "gelu_pytorch_tanh") {
      refuse("activation_function", "activation_function=" + act->as_string() + ": Stagecraft's GPT-2 MLP is GELU's tanh form (gelu_new)");
    }
    return;
  }
  m.arch = "llama";
  m.layers = required("num_hidden_layers", 1, 1'000'000);
  m.hidden = required("hidden_size", 1, 1 << 20);
  m.heads = required("num_attention_heads", 1, 1 << 20);
  m.kv_heads = integer("num_key_value_heads", 1, 1 << 20).value_or(m.heads);
  m.ffn_hidden = required("intermediate_size", 1, 1 << 30);
  m.vocab = required("vocab_size", 1, 1 << 30);
  const int positions = integer("max_position_embeddings", 1, 1 << 30).value_or(2048);
  m.seq_len = seq_base > 0 ? seq_base : positions;
  m.tied_embeddings = boolean("tie_word_embeddings").value_or(false);
  m.rope_theta = number("rope_theta", 1.0, 1e12).value_or(10000.0);
  m.norm_eps = number("rms_norm_eps", 1e-12, 0.1).value_or(1e-6);
  m.qkv_bias = qwen2 || qwen2_moe;
  if (!m.qkv_bias && boolean("attention_bias").value_or(false)) {
    refuse("attention_bias", "attention_bias=true: its biases include o_proj's; Stagecraft's llama has biases on q, k and v only (Qwen2)");
  }
  if (boolean("mlp_bias").value_or(false)) refuse("mlp_bias", "mlp_bias=true: Stagecraft's llama MLP has no biases");
  if (const Json* act = hf.find("hidden_act"); act && act->is_string() && act->as_string() != "silu") {
    refuse("hidden_act", "hidden_act=" + act->as_string() + ": Stagecraft's llama MLP is SwiGLU (silu)");
  }
  m.head_dim = 0;
  m.qk_norm = qwen3;  // Qwen3's attention norms each head of q and k
  m.moe = config::MoeConfig{};
  if (auto hd = integer("head_dim", 1, 1 << 20); hd && m.heads > 0 && *hd * m.heads != m.hidden) {
    if (qwen3) {
      m.head_dim = *hd;  // Qwen3 decouples the head size from hidden_size
    } else {
      refuse("head_dim", "head_dim=" + std::to_string(*hd) + ": Stagecraft's " + arch +
                             " has head_dim = hidden_size / num_attention_heads = " + std::to_string(m.hidden / m.heads) +
                             " (Qwen3ForCausalLM decouples them)");
    }
  }
  if (mixtral) {
    // Every layer sparse; intermediate_size is each expert's width; the top-k weights renormalised.
    m.moe.experts = required("num_local_experts", 1, 1 << 16);
    m.moe.top_k = integer("num_experts_per_tok", 1, 1 << 16).value_or(2);
    m.moe.norm_topk = true;
    m.moe.aux_loss = number("router_aux_loss_coef", 0.0, 10.0).value_or(0.001);
  } else if (qwen3_moe || qwen2_moe) {
    m.moe.experts = required("num_experts", 1, 1 << 16);
    m.moe.top_k = integer("num_experts_per_tok", 1, 1 << 16).value_or(qwen2_moe ? 4 : 8);
    m.moe.ffn_hidden = required("moe_intermediate_size", 1, 1 << 30);
    m.moe.norm_topk = boolean("norm_topk_prob").value_or(false);
    m.moe.aux_loss = number("router_aux_loss_coef", 0.0, 10.0).value_or(0.001);
    // Qwen2-MoE's one shared expert (Qwen2MoeSparseMoeBlock.shared_expert). Its output is scaled
    // by sigmoid(shared_expert_gate(x)), a hidden x 1 linear per layer that Stagecraft's model does
    // not have: the import keeps the shared expert and drops the gate (hidden parameters a layer,
    // and a scalar per token, left out of the counts and the cost model; docs/cli.md).
    if (qwen2_moe) {
      if (auto shared = integer("shared_expert_intermediate_size", 0, 1 << 30); shared.value_or(0) > 0) {
        m.moe.shared_experts = 1;
        m.moe.shared_ffn_hidden = *shared;
      }
    }
    // transformers: layer i is sparse when i is not in mlp_only_layers and (i + 1) % step == 0.
    // Stagecraft's dense layers are the first ones: mlp_only_layers must be 0 ... k-1, step 1.
    if (auto step = integer("decoder_sparse_step", 1, 1 << 20); step && *step != 1) {
      refuse("decoder_sparse_step", "decoder_sparse_step=" + std::to_string(*step) +
                                        ": Stagecraft's MoE layers are every layer after the first model.moe.dense_layers; 1 only");
    }
    if (const Json* dense = hf.find("mlp_only_layers"); dense && !dense->is_null()) {
      bool prefix = dense->is_array();
      for (size_t i = 0; prefix && i < dense->size(); ++i) prefix = (*dense)[i].is_int() && (*dense)[i].as_int() == static_cast<int64_t>(i);
      if (prefix) {
        m.moe.dense_layers = static_cast<int>(dense->size());
      } else {
        refuse("mlp_only_layers", "mlp_only_layers=" + dense->dump() +
                                      ": Stagecraft's dense layers are the first ones (model.moe.dense_layers); give 0, 1, ..., k-1");
      }
    }
    if (m.moe.experts > 0 && m.moe.top_k > m.moe.experts) {
      refuse("num_experts_per_tok", "num_experts_per_tok=" + std::to_string(m.moe.top_k) + ": more than num_experts=" + std::to_string(m.moe.experts));
    }
  }
}

// ----------------------------------------------------------------------------- finishing

std::string stem_of(std::string_view origin) {
  const size_t slash = origin.find_last_of("/\\");
  std::string_view name = slash == std::string_view::npos ? origin : origin.substr(slash + 1);
  const size_t dot = name.find('.');
  std::string s(name.substr(0, dot));
  return s.empty() ? "imported" : s;
}

// The base's spelling where it plans the same: dp auto, its order, its partition kind.
void keep_base_spellings(RunConfig& c, Framework from, const RunConfig* base, bool split_carried) {
  if (!validate(c).empty()) return;  // the problems are reported as they are
  // Order: the framework's fixed one, or the base's when it forms the same groups.
  const std::vector<Axis> fw = framework_order(from, c);
  const std::vector<Axis> base_order = base ? base->parallel.order : c.parallel.order;
  c.parallel.order = base_order;
  if (!same_groups(c, fw)) c.parallel.order = fw;
  // ffn_hidden: 0 (4 x hidden) when the base leaves it at that default and the file agrees.
  if (base && base->model.ffn_hidden == 0 && c.model.ffn_hidden == 4 * c.model.hidden) c.model.ffn_hidden = 0;
  // dp: `auto` or the number, as the base writes it, when both mean the same size.
  if (base && (base->parallel.dp_auto() || base->parallel.dp == resolved_dp(c))) {
    RunConfig alt = c;
    alt.parallel.dp = base->parallel.dp;
    if (resolved_dp(alt) == resolved_dp(c)) c.parallel.dp = base->parallel.dp;
  }
  if (!split_carried || c.pipeline.partition != PartitionKind::kExplicit) return;
  auto explicit_plan = plan::make_plan(c);
  if (!explicit_plan.ok()) return;
  std::vector<PartitionKind> kinds;
  if (base && base->pipeline.partition != PartitionKind::kExplicit) kinds.push_back(base->pipeline.partition);
  kinds.push_back(PartitionKind::kUniform);
  for (PartitionKind kind : kinds) {
    RunConfig alt = c;
    alt.pipeline.partition = kind;
    alt.pipeline.stage_ids.clear();
    auto p = plan::make_plan(alt);
    if (p.ok() && p->layer_stage == explicit_plan->layer_stage) {
      c.pipeline.partition = kind;
      c.pipeline.stage_ids.clear();
      return;
    }
  }
}

}  // namespace

Result<RunConfig> import_config(std::string_view text, Framework from, const RunConfig* base, std::string_view origin) {
  Report r{std::string(origin)};
  if (!can_import(from)) {
    return Status::invalid_input(std::string(to_string(from)) + ": Stagecraft cannot import it (its plan is a command line); import from " +
                                 framework_choices(true));
  }
  RunConfig c = base ? *base : RunConfig{};
  if (!base) c.name = stem_of(origin);
  bool split_carried = false;
  if (from == Framework::kDeepspeed) {
    read_deepspeed(text, c, r);
  } else if (from == Framework::kTorchtitan) {
    read_torchtitan(text, c, r);
  } else if (from == Framework::kHf) {
    read_hf(text, c, base, r);
  } else {
    auto module = run_python_config(text, origin);
    if (!module.ok()) return module.status();
    if (from == Framework::kLibai) {
      read_libai(module.value(), c, base, r);
      split_carried = true;
    } else if (from == Framework::kPaddle) {
      read_paddle(module.value(), c, r);
    } else {
      read_colossalai(module.value(), c, r);
    }
  }
  if (c.model.layers <= 0 || c.model.hidden <= 0 || c.model.heads <= 0) {
    r.problem(0, "the " + std::string(to_string(from)) + " config does not give the model shape (model.layers, model.hidden, model.heads); "
                 "pass --base CONFIG, a Stagecraft config with them");
  }
  if (r.ok()) {
    keep_base_spellings(c, from, base, split_carried);
    for (const auto& issue : validate(c)) {
      const int line = r.line_of(issue.key);
      r.problems().push_back(r.at(line) + issue.message + (line == 0 && base ? " (with the base's values)" : ""));
    }
  }
  if (!r.ok()) {
    std::string msg;
    for (const auto& p : r.problems()) msg += (msg.empty() ? "" : "\n") + p;
    return Status::invalid_input(msg);
  }
  return c;
}

}  // namespace stagecraft::interop
