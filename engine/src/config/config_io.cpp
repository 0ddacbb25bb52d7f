// YAML <-> RunConfig, overrides, and the key schema. See config_io.h for the contract.
//
// The document is first parsed into a YamlNode tree; overrides are then written into that tree
// (so that an override and a file entry are checked by the same code and report the same way);
// then the tree is read section by section. Reading never stops at the first problem: every
// unknown key, wrong type and broken rule is collected, and validate() runs on what was read.
#include "stagecraft/config/config_io.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include <unistd.h>

#include "stagecraft/config/validate.h"
#include "stagecraft/core/text.h"
#include "yaml_tree.h"

namespace stagecraft::config {

namespace {

// The schema: every section and its keys, in document order.
struct Section {
  const char* name;
  std::vector<const char*> keys;
};

const std::vector<Section>& schema() {
  static const std::vector<Section> kSchema = {
      {"", {"name", "cluster", "model", "parallel", "pipeline", "train", "backend"}},
      {"cluster", {"nodes", "gpus_per_node", "device", "intra_node_gbps", "inter_node_gbps", "hosts"}},
      {"model", {"arch", "layers", "hidden", "heads", "ffn_hidden", "seq_len", "vocab", "tied_embeddings", "dropout"}},
      {"parallel", {"dp", "tp", "pp", "tp_mode", "tp_depth", "order", "sequence_parallel", "zero"}},
      {"pipeline", {"schedule", "virtual_stages", "partition"}},
      {"train", {"global_batch", "micro_batch", "steps", "lr", "min_lr", "warmup_steps", "weight_decay",
                 "beta1", "beta2", "grad_clip", "precision", "recompute", "attention", "seed", "data",
                 "checkpoint_every", "checkpoint_dir", "resume", "hang_timeout_s"}},
  };
  return kSchema;
}

// Names that other frameworks use for our keys: an unknown key that matches one of these is
// answered with the Stagecraft key, which beats an edit-distance guess.
const std::map<std::string, std::string>& foreign_names() {
  static const std::map<std::string, std::string> kNames = {
      {"data_parallel_size", "parallel.dp"},        {"tensor_parallel_size", "parallel.tp"},
      {"pipeline_parallel_size", "parallel.pp"},    {"dp_degree", "parallel.dp"},
      {"mp_degree", "parallel.tp"},                 {"pp_degree", "parallel.pp"},
      {"tensor_model_parallel_size", "parallel.tp"}, {"pipeline_model_parallel_size", "parallel.pp"},
      {"pipeline_num_layers", "model.layers"},      {"num_layers", "model.layers"},
      {"n_layer", "model.layers"},                  {"hidden_size", "model.hidden"},
      {"n_embd", "model.hidden"},                   {"num_attention_heads", "model.heads"},
      {"n_head", "model.heads"},                    {"ffn_hidden_size", "model.ffn_hidden"},
      {"seq_length", "model.seq_len"},              {"max_position_embeddings", "model.seq_len"},
      {"vocab_size", "model.vocab"},                {"custom_pipeline_stage_id", "pipeline.partition"},
      {"global_batch_size", "train.global_batch"},  {"micro_batch_size", "train.micro_batch"},
      {"train_iters", "train.steps"},               {"num_layers_per_virtual_pipeline_stage", "pipeline.virtual_stages"},
      {"gpus", "cluster.gpus_per_node"},            {"nproc_per_node", "cluster.gpus_per_node"},
      {"nnodes", "cluster.nodes"},                  {"zero_stage", "parallel.zero"},
  };
  return kNames;
}


std::string join_path(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : std::string(prefix) + "." + std::string(key);
}

std::string describe(const YamlNode& n) {
  if (n.is_scalar()) return one_line(n.scalar);
  if (n.is_sequence()) return "a list";
  return "a mapping";
}

// Reads a YamlNode tree into a RunConfig, collecting every problem.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  void read(const YamlNode& root, RunConfig& c) {
    if (!root.is_mapping()) {
      problem(&root, "", "a run configuration is a mapping of sections (name, cluster, model, ...), got " + describe(root));
      return;
    }
    check_keys(root, "");
    if (auto* n = root.find("name")) read_string(n, "name", c.name, /*allow_empty=*/false);
    if (auto* n = root.find("backend")) read_enum(n, "backend", c.backend, parse_backend, "cpu or cuda");
    if (auto* s = section(root, "cluster")) read_cluster(*s, c.cluster);
    if (auto* s = section(root, "model")) read_model(*s, c.model);
    if (auto* s = section(root, "parallel")) read_parallel(*s, c.parallel);
    if (auto* s = section(root, "pipeline")) read_pipeline(*s, c.pipeline);
    if (auto* s = section(root, "train")) read_train(*s, c.train);
  }

  // Where a key was written: "file:line: ", "command line: ", or the file alone.
  std::string where(const std::string& key) const {
    auto it = where_.find(key);
    if (it != where_.end()) return it->second;
    // A rule about a key that was left at its default: point at the file.
    return origin_ + ": ";
  }

  std::vector<std::string>& problems() { return problems_; }
  // Keys whose value could not be read; rules about them are not checked.
  bool is_bad(const std::string& key) const { return bad_keys_.count(key) != 0; }
  // Whether a model key whose value the rules need could not be read. An unknown key under
  // model (a typo beside the real key) leaves the shape known.
  bool any_bad_model_key() const {
    for (const auto& k : bad_keys_) {
      if (k == "model") return true;
      if (k.rfind("model.", 0) == 0 && std::find(config_keys().begin(), config_keys().end(), k) != config_keys().end()) return true;
    }
    return false;
  }

 private:
  std::string location(const YamlNode* n) const {
    if (n && !n->origin.empty()) return n->origin + ": ";
    if (n && n->line > 0) return origin_ + ":" + std::to_string(n->line) + ": ";
    return origin_ + ": ";
  }

  void problem(const YamlNode* n, const std::string& key, const std::string& text) {
    bad_keys_.insert(key);
    problems_.push_back(location(n) + (key.empty() ? "" : key + "=" + (n ? describe(*n) : "") + ": ") + text);
  }
  void problem_plain(const YamlNode* n, const std::string& text) {
    bad_keys_.insert(text.substr(0, text.find_first_of(":=")));
    problems_.push_back(location(n) + text);
  }

  void note(const YamlNode* n, const std::string& key) { where_[key] = location(n); }

  const YamlNode* section(const YamlNode& root, const char* name) {
    const YamlNode* s = root.find(name);
    if (!s) return nullptr;
    note(s, name);
    if (s->is_null()) return nullptr;  // "model:" with nothing under it
    if (!s->is_mapping()) {
      problem_plain(s, std::string(name) + ": expected a mapping of " + name + " keys, got " + describe(*s));
      return nullptr;
    }
    check_keys(*s, name);
    return s;
  }

  void check_keys(const YamlNode& map, const std::string& prefix) {
    const Section* sec = nullptr;
    for (const auto& s : schema()) {
      if (prefix == s.name) sec = &s;
    }
    for (const auto& [key, value] : map.entries) {
      bool known = false;
      for (const char* k : sec->keys) known = known || key == k;
      if (known) continue;
      const std::string full = join_path(prefix, one_line(key));
      std::string hint;
      auto foreign = foreign_names().find(key);
      if (foreign != foreign_names().end()) {
        hint = "; Stagecraft calls it " + foreign->second;
      } else if (std::string s = suggest_key(full); !s.empty()) {
        hint = "; did you mean " + s + "?";
        // The key was likely meant as s, whose value is then the default: rules about s would
        // mislead. Not so when this mapping gives s as well (`hiden: 3` beside `hidden: 1024`).
        const std::string section_prefix = prefix.empty() ? "" : prefix + ".";
        const bool given = s.rfind(section_prefix, 0) == 0 && map.find(std::string_view(s).substr(section_prefix.size()));
        if (!given) bad_keys_.insert(s);
      } else {
        std::string known_list;
        for (const char* k : sec->keys) known_list += (known_list.empty() ? "" : ", ") + std::string(k);
        hint = prefix.empty() ? "; the sections are " + known_list : "; " + prefix + " keys are " + known_list;
      }
      problem_plain(value.get(), full + ": unknown key" + hint);
    }
  }

  bool scalar_or_problem(const YamlNode* n, const std::string& key, const char* expected) {
    note(n, key);
    if (n->is_scalar() && !n->is_null()) return true;
    problem_plain(n, key + ": expected " + expected + ", got " + (n->is_null() ? std::string("nothing") : describe(*n)));
    return false;
  }

  void read_int(const YamlNode* n, const std::string& key, int& out, int min_value, int max_value = 1'000'000'000) {
    if (!scalar_or_problem(n, key, "an integer")) return;
    long long v = 0;
    const std::string& s = n->scalar;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (n->quoted || ec != std::errc() || p != s.data() + s.size()) {
      problem(n, key, "expected an integer");
      return;
    }
    if (v < min_value || v > max_value) {
      problem(n, key, "must be between " + std::to_string(min_value) + " and " + std::to_string(max_value));
      return;
    }
    out = static_cast<int>(v);
  }

  void read_u64(const YamlNode* n, const std::string& key, uint64_t& out) {
    if (!scalar_or_problem(n, key, "a non-negative integer")) return;
    uint64_t v = 0;
    const std::string& s = n->scalar;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (n->quoted || ec != std::errc() || p != s.data() + s.size()) {
      problem(n, key, "expected a non-negative integer");
      return;
    }
    out = v;
  }

  void read_double(const YamlNode* n, const std::string& key, double& out, double min_value, double max_value) {
    if (!scalar_or_problem(n, key, "a number")) return;
    double v = 0;
    std::string s = n->scalar;
    if (!s.empty() && s[0] == '+') s.erase(0, 1);
    if (!s.empty() && s[0] == '.') s.insert(0, "0");
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (n->quoted || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
      problem(n, key, "expected a number");
      return;
    }
    if (v < min_value || v > max_value) {
      std::ostringstream range;
      range << "must be between " << min_value << " and " << max_value;
      problem(n, key, range.str());
      return;
    }
    out = v;
  }

  void read_bool(const YamlNode* n, const std::string& key, bool& out) {
    if (!scalar_or_problem(n, key, "true or false")) return;
    const std::string& s = n->scalar;
    if (!n->quoted && (s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on")) {
      out = true;
    } else if (!n->quoted && (s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off")) {
      out = false;
    } else {
      problem(n, key, "expected true or false");
    }
  }

  void read_string(const YamlNode* n, const std::string& key, std::string& out, bool allow_empty) {
    note(n, key);
    if (!n->is_scalar()) {
      problem_plain(n, key + ": expected text, got " + describe(*n));
      return;
    }
    if (!allow_empty && (n->is_null() || n->scalar.empty())) {  // `name:` and `name: ''`
      problem_plain(n, key + ": must not be empty");
      return;
    }
    if (n->scalar.find('\0') != std::string::npos || n->scalar.find('\n') != std::string::npos) {
      problem_plain(n, key + ": must be one line of text");
      return;
    }
    out = n->is_null() ? std::string() : n->scalar;
  }

  template <typename E, typename Parse>
  void read_enum(const YamlNode* n, const std::string& key, E& out, Parse parse, const char* choices) {
    if (!scalar_or_problem(n, key, choices)) return;
    if (auto v = parse(n->scalar)) {
      out = *v;
    } else {
      problem(n, key, std::string("expected ") + choices);
    }
  }

  void read_cluster(const YamlNode& s, ClusterConfig& c) {
    if (auto* n = s.find("nodes")) read_int(n, "cluster.nodes", c.nodes, 1, 1 << 17);  // validate() bounds nodes x gpus_per_node
    if (auto* n = s.find("gpus_per_node")) read_int(n, "cluster.gpus_per_node", c.gpus_per_node, 1, 1024);
    if (auto* n = s.find("device")) read_device(n, c);
    if (auto* n = s.find("intra_node_gbps")) read_double(n, "cluster.intra_node_gbps", c.intra_node_gbps, 0.001, 1e6);
    if (auto* n = s.find("inter_node_gbps")) read_double(n, "cluster.inter_node_gbps", c.inter_node_gbps, 0.001, 1e6);
    if (auto* n = s.find("hosts")) read_hosts(n, s, c);
  }

  // `device: NAME`, or `device: {base: NAME, memory_gib: ...}`, or `device: {name: X, ...}` with
  // every figure given. Whether the names exist is validate()'s rule.
  void read_device(const YamlNode* n, ClusterConfig& c) {
    if (!n->is_mapping()) {
      read_string(n, "cluster.device", c.device, false);
      return;
    }
    note(n, "cluster.device");
    static const char* kKeys[] = {"base", "name", "memory_gib", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "memory_gbps"};
    for (const auto& [key, value] : n->entries) {
      bool known = false;
      for (const char* k : kKeys) known = known || key == k;
      if (known) continue;
      std::string hint;
      size_t best = 3;
      for (const char* k : kKeys) {
        if (const size_t d = edit_distance(key, k); d < best) {
          best = d;
          hint = std::string("; did you mean cluster.device.") + k + "?";
        }
      }
      if (hint.empty()) hint = "; device keys are base, name, memory_gib, fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops, memory_gbps";
      problem_plain(value.get(), "cluster.device." + one_line(key) + ": unknown key" + hint);
    }
    c.device.clear();
    if (auto* b = n->find("base")) read_string(b, "cluster.device.base", c.device, false);
    DeviceFields& f = c.device_fields;
    if (auto* v = n->find("name")) read_string(v, "cluster.device.name", f.name, false);
    auto number = [&](const char* key, std::optional<double>& out, double lo, double hi) {
      if (auto* v = n->find(key)) {
        double x = 0;
        const size_t before = problems_.size();
        read_double(v, std::string("cluster.device.") + key, x, lo, hi);
        if (problems_.size() == before) out = x;
      }
    };
    number("memory_gib", f.memory_gib, 0.001, 1e6);
    number("fp32_tflops", f.fp32_tflops, 0.0, 1e6);
    number("tf32_tflops", f.tf32_tflops, 0.0, 1e6);
    number("fp16_tflops", f.fp16_tflops, 0.0, 1e6);
    number("bf16_tflops", f.bf16_tflops, 0.0, 1e6);
    number("memory_gbps", f.memory_gbps, 0.001, 1e7);
    if (c.device.empty() && f.name.empty() && !is_bad("cluster.device.base") && !is_bad("cluster.device.name")) {
      problem_plain(n, "cluster.device: a device mapping needs base (a catalog device to change) or name (a new device)");
    }
  }

  void read_hosts(const YamlNode* n, const YamlNode& cluster, ClusterConfig& c) {
    note(n, "cluster.hosts");
    if (n->is_null()) return;
    if (!n->is_sequence()) {
      problem_plain(n, "cluster.hosts: expected a list of {host: NAME, slots: N}, got " + describe(*n));
      return;
    }
    std::vector<HostSlots> hosts;
    const size_t problems_before = problems_.size();
    for (size_t i = 0; i < n->items.size(); ++i) {
      const YamlNode& item = *n->items[i];
      const std::string key = "cluster.hosts[" + std::to_string(i) + "]";
      if (!item.is_mapping()) {
        problem_plain(&item, key + ": expected {host: NAME, slots: N}, got " + describe(item));
        continue;
      }
      HostSlots h;
      for (const auto& [k, v] : item.entries) {
        if (k != "host" && k != "slots") problem_plain(v.get(), key + "." + one_line(k) + ": unknown key; a host has host and slots");
      }
      if (auto* hn = item.find("host")) read_string(hn, key + ".host", h.host, false);
      else problem_plain(&item, key + ": missing host");
      if (auto* sn = item.find("slots")) read_int(sn, key + ".slots", h.slots, 1, 1024);
      else problem_plain(&item, key + ": missing slots");
      for (const auto& other : hosts) {
        if (!h.host.empty() && other.host == h.host) problem_plain(&item, key + ".host=" + h.host + ": listed twice");
      }
      hosts.push_back(h);
    }
    // A host without a usable name or slots defines no cluster: keep nodes and gpus_per_node as
    // written rather than derive "0 GPUs" from it and report that too.
    if (hosts.empty() || problems_.size() != problems_before) return;
    const int slots = hosts.front().slots;
    for (const auto& h : hosts) {
      if (h.slots != slots && h.slots > 0 && slots > 0) {
        problem_plain(n, "cluster.hosts: unequal slots (" + hosts.front().host + " " + std::to_string(slots) + ", " +
                             h.host + " " + std::to_string(h.slots) +
                             "); every node must run the same number of ranks, so give each host the same slots");
        return;
      }
    }
    // Hosts define the cluster; explicit nodes / gpus_per_node must agree with them.
    if (cluster.find("nodes") && c.nodes != static_cast<int>(hosts.size())) {
      problem_plain(cluster.find("nodes"), "cluster.nodes=" + std::to_string(c.nodes) + ": cluster.hosts lists " +
                                               std::to_string(hosts.size()) + " hosts; remove nodes or make them agree");
    }
    if (cluster.find("gpus_per_node") && c.gpus_per_node != slots) {
      problem_plain(cluster.find("gpus_per_node"), "cluster.gpus_per_node=" + std::to_string(c.gpus_per_node) +
                                                       ": cluster.hosts give " + std::to_string(slots) +
                                                       " slots per host; remove gpus_per_node or make them agree");
    }
    c.nodes = static_cast<int>(hosts.size());
    c.gpus_per_node = slots;
    c.hosts = std::move(hosts);
  }

  void read_model(const YamlNode& s, ModelConfig& m) {
    if (auto* n = s.find("arch")) {
      read_string(n, "model.arch", m.arch, false);
      if (m.arch != "gpt") problem(n, "model.arch", "the only architecture is gpt (decoder-only, GPT-2 family)");
    }
    if (auto* n = s.find("layers")) read_int(n, "model.layers", m.layers, 1, 1'000'000);
    if (auto* n = s.find("hidden")) read_int(n, "model.hidden", m.hidden, 1, 1 << 20);
    if (auto* n = s.find("heads")) read_int(n, "model.heads", m.heads, 1);
    if (auto* n = s.find("ffn_hidden")) read_int(n, "model.ffn_hidden", m.ffn_hidden, 1);
    if (auto* n = s.find("seq_len")) read_int(n, "model.seq_len", m.seq_len, 1);
    if (auto* n = s.find("vocab")) read_int(n, "model.vocab", m.vocab, 1);
    if (auto* n = s.find("tied_embeddings")) read_bool(n, "model.tied_embeddings", m.tied_embeddings);
    if (auto* n = s.find("dropout")) read_double(n, "model.dropout", m.dropout, 0.0, 0.9);
  }

  void read_parallel(const YamlNode& s, ParallelConfig& p) {
    if (auto* n = s.find("dp")) {
      if (n->is_scalar() && !n->quoted && n->scalar == "auto") {
        note(n, "parallel.dp");
        p.dp = 0;
      } else {
        read_int(n, "parallel.dp", p.dp, 1, 1 << 20);
      }
    }
    if (auto* n = s.find("tp")) read_int(n, "parallel.tp", p.tp, 1, 1 << 20);
    if (auto* n = s.find("pp")) read_int(n, "parallel.pp", p.pp, 1, 1 << 20);
    if (auto* n = s.find("tp_mode")) read_enum(n, "parallel.tp_mode", p.tp_mode, parse_tp_mode, "1d, 2d, 2.5d or 3d");
    if (auto* n = s.find("tp_depth")) read_int(n, "parallel.tp_depth", p.tp_depth, 1, 1024);
    if (auto* n = s.find("order")) read_order(n, p);
    if (auto* n = s.find("sequence_parallel")) read_bool(n, "parallel.sequence_parallel", p.sequence_parallel);
    if (auto* n = s.find("zero")) {
      read_int(n, "parallel.zero", p.zero, 0);
      if (p.zero > 1) {
        problem(n, "parallel.zero", "must be 0 (no sharding) or 1 (optimizer state sharded over data parallel ranks)");
        p.zero = 0;
      }
    }
  }

  void read_order(const YamlNode* n, ParallelConfig& p) {
    if (!scalar_or_problem(n, "parallel.order", "axes innermost first, e.g. tp-dp-pp")) return;
    std::vector<Axis> order;
    bool bad = false;
    std::string_view rest = n->scalar;
    while (!rest.empty()) {
      const size_t dash = rest.find('-');
      const std::string_view word = rest.substr(0, dash);
      rest = dash == std::string_view::npos ? std::string_view() : rest.substr(dash + 1);
      if (word == "tp") order.push_back(Axis::kTp);
      else if (word == "dp") order.push_back(Axis::kDp);
      else if (word == "pp") order.push_back(Axis::kPp);
      else if (word == "cp" || word == "ep") continue;  // Megatron's context / expert axes: size 1 here
      else bad = true;
    }
    auto count = [&](Axis a) { return std::count(order.begin(), order.end(), a); };
    if (bad || order.size() != 3 || count(Axis::kTp) != 1 || count(Axis::kDp) != 1 || count(Axis::kPp) != 1) {
      problem(n, "parallel.order", "must name tp, dp and pp once each, innermost first (e.g. tp-dp-pp, tp-pp-dp)");
      return;
    }
    p.order = order;
  }

  void read_pipeline(const YamlNode& s, PipelineConfig& p) {
    if (auto* n = s.find("schedule")) read_enum(n, "pipeline.schedule", p.schedule, parse_schedule, "gpipe, 1f1b or interleaved");
    if (auto* n = s.find("virtual_stages")) read_int(n, "pipeline.virtual_stages", p.virtual_stages, 1, 1024);
    if (auto* n = s.find("partition")) {
      note(n, "pipeline.partition");
      if (n->is_scalar() && !n->quoted && n->scalar == "uniform") {
        p.partition = PartitionKind::kUniform;
        p.stage_ids.clear();
      } else if (n->is_scalar() && !n->quoted && n->scalar == "balanced") {
        p.partition = PartitionKind::kBalanced;
        p.stage_ids.clear();
      } else if (n->is_sequence()) {
        std::vector<int> ids;
        bool ok = true;
        for (size_t i = 0; i < n->items.size(); ++i) {
          int v = 0;
          const size_t before = problems_.size();
          read_int(n->items[i].get(), "pipeline.partition[" + std::to_string(i) + "]", v, 0);
          ok = ok && problems_.size() == before;
          ids.push_back(v);
        }
        if (ok) {
          p.partition = PartitionKind::kExplicit;
          p.stage_ids = std::move(ids);
        }
        note(n, "pipeline.partition");
      } else {
        problem(n, "pipeline.partition", "expected uniform, balanced, or a list of one stage id per layer");
      }
    }
  }

  void read_train(const YamlNode& s, TrainConfig& t) {
    if (auto* n = s.find("global_batch")) read_int(n, "train.global_batch", t.global_batch, 1);
    if (auto* n = s.find("micro_batch")) read_int(n, "train.micro_batch", t.micro_batch, 1);
    if (auto* n = s.find("steps")) read_int(n, "train.steps", t.steps, 1);
    if (auto* n = s.find("lr")) read_double(n, "train.lr", t.lr, 0.0, 10.0);
    if (auto* n = s.find("min_lr")) read_double(n, "train.min_lr", t.min_lr, 0.0, 10.0);
    if (auto* n = s.find("warmup_steps")) read_int(n, "train.warmup_steps", t.warmup_steps, 0);
    if (auto* n = s.find("weight_decay")) read_double(n, "train.weight_decay", t.weight_decay, 0.0, 10.0);
    if (auto* n = s.find("beta1")) read_double(n, "train.beta1", t.beta1, 0.0, 0.999999);
    if (auto* n = s.find("beta2")) read_double(n, "train.beta2", t.beta2, 0.0, 0.999999);
    if (auto* n = s.find("grad_clip")) read_double(n, "train.grad_clip", t.grad_clip, 0.0, 1e9);
    if (auto* n = s.find("precision")) read_enum(n, "train.precision", t.precision, parse_precision, "fp32, fp16 or bf16");
    if (auto* n = s.find("recompute")) read_enum(n, "train.recompute", t.recompute, parse_recompute, "none, selective or full");
    if (auto* n = s.find("attention")) read_enum(n, "train.attention", t.attention, parse_attention, "standard or flash");
    if (auto* n = s.find("seed")) read_u64(n, "train.seed", t.seed);
    if (auto* n = s.find("data")) read_string(n, "train.data", t.data, true);
    if (auto* n = s.find("checkpoint_every")) read_int(n, "train.checkpoint_every", t.checkpoint_every, 0);
    if (auto* n = s.find("checkpoint_dir")) read_string(n, "train.checkpoint_dir", t.checkpoint_dir, false);
    if (auto* n = s.find("resume")) read_string(n, "train.resume", t.resume, true);
    if (auto* n = s.find("hang_timeout_s")) read_double(n, "train.hang_timeout_s", t.hang_timeout_s, 1.0, 1e7);
  }

  std::string origin_;
  std::vector<std::string> problems_;
  std::map<std::string, std::string> where_;
  std::set<std::string> bad_keys_;
};

// Writes `key.path=value` into the tree, making mappings on the way as needed.
Status apply_override(YamlNode& root, const std::string& text) {
  const size_t eq = text.find('=');
  const std::string origin = "command line";
  if (eq == std::string::npos || eq == 0) {
    return Status::invalid_input("command line: '" + one_line(text) + "' is not key.path=value (e.g. parallel.tp=2)");
  }
  const std::string key = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts) {
    if (p.empty()) return Status::invalid_input("command line: '" + one_line(key) + "' has an empty part; keys look like parallel.tp");
  }
  auto parsed = parse_yaml(value);
  if (!parsed.ok()) return Status::invalid_input("command line " + one_line(text) + ": value is not valid YAML: " + parsed.status().message());
  YamlNode::Ptr leaf = parsed.value();
  if (value.empty()) {  // "train.data=" sets an empty string
    leaf = std::make_shared<YamlNode>();
  }
  // Mark the whole value (and its items) as coming from the command line.
  std::vector<YamlNode*> stack{leaf.get()};
  while (!stack.empty()) {
    YamlNode* n = stack.back();
    stack.pop_back();
    n->origin = origin;
    for (auto& i : n->items) stack.push_back(i.get());
    for (auto& [k, v] : n->entries) stack.push_back(v.get());
  }
  YamlNode* cur = &root;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!cur->is_mapping()) {
      // At the root (i == 0) the document itself is not a mapping; the reader reports what it is.
      const std::string holder = i == 0 ? std::string("the document") : parts[i - 1];
      return Status::invalid_input("command line " + one_line(text) + ": " + one_line(holder) + " is not a section");
    }
    const bool last = i + 1 == parts.size();
    YamlNode::Ptr* slot = nullptr;
    for (auto& [k, v] : cur->entries) {
      if (k == parts[i]) slot = &v;
    }
    if (last) {
      if (slot) *slot = leaf;
      else cur->entries.emplace_back(parts[i], leaf);
      return Status::OK();
    }
    if (slot && (*slot)->is_scalar() && !(*slot)->is_null() && i == 1 && parts[0] == "cluster" && parts[1] == "device") {
      // cluster.device.memory_gib=40 on `device: A100-80GB` changes that device: {base: A100-80GB}.
      auto m = std::make_shared<YamlNode>();
      m->kind = YamlNode::Kind::kMapping;
      m->origin = (*slot)->origin;
      m->line = (*slot)->line;
      m->entries.emplace_back("base", *slot);
      *slot = m;
      cur = m.get();
    } else if (!slot || (*slot)->is_null()) {
      auto m = std::make_shared<YamlNode>();
      m->kind = YamlNode::Kind::kMapping;
      m->origin = origin;
      if (slot) *slot = m;
      else cur->entries.emplace_back(parts[i], m);
      cur = m.get();
    } else {
      // Copy on write: aliases may share this node with other places in the document.
      auto copy = std::make_shared<YamlNode>(**slot);
      *slot = copy;
      cur = copy.get();
    }
  }
  return Status::OK();
}

Result<RunConfig> read_tree(YamlNode& root, const std::string& origin, const std::vector<std::string>& overrides, Rules rules) {
  std::vector<std::string> problems;
  for (const auto& o : overrides) {
    if (Status st = apply_override(root, o); !st) problems.push_back(st.message());
  }
  RunConfig c;
  Reader reader(origin);
  reader.read(root, c);
  for (auto& p : reader.problems()) problems.push_back(std::move(p));
  // Consistency rules run even when some keys had problems, so that one pass reports all; rules
  // about keys that could not be read are skipped (their value is a default, not the author's).
  bool shape_known = root.is_mapping() && !reader.any_bad_model_key();
  const YamlNode* model = root.is_mapping() ? root.find("model") : nullptr;
  for (const char* k : {"layers", "hidden", "heads"}) {
    if (root.is_mapping() && (!model || !model->is_mapping() || !model->find(k))) {
      problems.push_back(origin + ": model." + k + ": required; give the model shape (model.layers, model.hidden, model.heads)");
      shape_known = false;
    }
  }
  if (shape_known) {
    for (const auto& issue : validate(c, rules)) {
      if (!reader.is_bad(issue.key)) problems.push_back(reader.where(issue.key) + issue.message);
    }
  }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    return Status::invalid_input(msg);
  }
  return c;
}

// YAML text for a string: plain when it reads back as the same string, else double-quoted.
std::string yaml_string(const std::string& s) {
  bool plain = !s.empty();
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    plain = plain && (std::isalnum(u) || ch == '-' || ch == '_' || ch == '.' || ch == '/' || u >= 0x80);
  }
  static const char* kReserved[] = {"true", "false", "yes", "no", "on", "off", "null", "True", "False", "Null",
                                    "TRUE", "FALSE", "NULL", "auto", "uniform", "balanced", "~"};
  for (const char* r : kReserved) plain = plain && s != r;
  if (plain) {
    // Anything that parses as a number must be quoted to stay a string.
    double d;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec == std::errc() && p == s.data() + s.size()) plain = false;
    if (s[0] == '-' || s[0] == '.') plain = false;
  }
  if (plain) return s;
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string yaml_double(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> keys;
    for (const auto& s : schema()) {
      for (const char* k : s.keys) {
        const std::string full = join_path(s.name, k);
        bool is_section = false;
        for (const auto& t : schema()) is_section = is_section || full == t.name;
        if (!is_section) keys.push_back(full);
      }
    }
    return keys;
  }();
  return kKeys;
}

std::string suggest_key(std::string_view key) {
  std::string best;
  size_t best_d = std::string::npos;
  // Compare with full paths and with the leaf names, so that "parallel.tpp" and "tpp" both work.
  const size_t dot = key.rfind('.');
  const std::string_view leaf = dot == std::string_view::npos ? key : key.substr(dot + 1);
  if (leaf.empty()) return {};  // every two-letter key would be "close" to nothing
  for (const auto& k : config_keys()) {
    const size_t kd = k.rfind('.');
    const std::string_view kleaf = kd == std::string::npos ? std::string_view(k) : std::string_view(k).substr(kd + 1);
    const size_t d = std::min(edit_distance(key, k), edit_distance(leaf, kleaf) + (dot == std::string_view::npos ? 0 : 1));
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  const size_t limit = std::max<size_t>(2, leaf.size() / 3);
  // A guess that replaces every character of the key ("a0" -> "dp") is no guess.
  return best_d <= limit && best_d < leaf.size() ? best : std::string();
}

Result<RunConfig> parse_config(std::string_view yaml, std::string_view origin, const std::vector<std::string>& overrides, Rules rules) {
  auto tree = parse_yaml(yaml);
  if (!tree.ok()) return Status::invalid_input(std::string(origin) + ": " + tree.status().message());
  return read_tree(*tree.value(), std::string(origin), overrides, rules);
}

Result<RunConfig> load_config_file(const std::string& path, const std::vector<std::string>& overrides, Rules rules) {
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  return parse_config(text.value(), path, overrides, rules);
}

Result<RunConfig> apply_overrides(const RunConfig& base, const std::vector<std::string>& overrides) {
  return parse_config(to_yaml(base), "configuration", overrides);
}

std::string to_yaml(const RunConfig& c) {
  std::ostringstream o;
  o << "name: " << yaml_string(c.name) << "\n";
  o << "cluster:\n";
  o << "  nodes: " << c.cluster.nodes << "\n";
  o << "  gpus_per_node: " << c.cluster.gpus_per_node << "\n";
  if (c.cluster.device_fields.empty()) {
    o << "  device: " << yaml_string(c.cluster.device) << "\n";
  } else {
    const DeviceFields& f = c.cluster.device_fields;
    o << "  device:\n";
    if (!c.cluster.device.empty()) o << "    base: " << yaml_string(c.cluster.device) << "\n";
    if (!f.name.empty()) o << "    name: " << yaml_string(f.name) << "\n";
    const std::pair<const char*, const std::optional<double>*> fields[] = {
        {"memory_gib", &f.memory_gib},   {"fp32_tflops", &f.fp32_tflops}, {"tf32_tflops", &f.tf32_tflops},
        {"fp16_tflops", &f.fp16_tflops}, {"bf16_tflops", &f.bf16_tflops}, {"memory_gbps", &f.memory_gbps}};
    for (const auto& [key, value] : fields) {
      if (*value) o << "    " << key << ": " << yaml_double(**value) << "\n";
    }
  }
  if (c.cluster.intra_node_gbps > 0) o << "  intra_node_gbps: " << yaml_double(c.cluster.intra_node_gbps) << "\n";
  if (c.cluster.inter_node_gbps > 0) o << "  inter_node_gbps: " << yaml_double(c.cluster.inter_node_gbps) << "\n";
  if (!c.cluster.hosts.empty()) {
    o << "  hosts:\n";
    for (const auto& h : c.cluster.hosts) o << "    - {host: " << yaml_string(h.host) << ", slots: " << h.slots << "}\n";
  }
  o << "model:\n";
  o << "  arch: " << yaml_string(c.model.arch) << "\n";
  o << "  layers: " << c.model.layers << "\n";
  o << "  hidden: " << c.model.hidden << "\n";
  o << "  heads: " << c.model.heads << "\n";
  if (c.model.ffn_hidden > 0) {
    o << "  ffn_hidden: " << c.model.ffn_hidden << "\n";
  } else {
    o << "  # ffn_hidden: " << c.model.ffn() << " (4 x hidden, the default)\n";
  }
  o << "  seq_len: " << c.model.seq_len << "\n";
  o << "  vocab: " << c.model.vocab << "\n";
  o << "  tied_embeddings: " << (c.model.tied_embeddings ? "true" : "false") << "\n";
  o << "  dropout: " << yaml_double(c.model.dropout) << "\n";
  o << "parallel:\n";
  o << "  dp: " << (c.parallel.dp_auto() ? std::string("auto") : std::to_string(c.parallel.dp)) << "\n";
  o << "  tp: " << c.parallel.tp << "\n";
  o << "  pp: " << c.parallel.pp << "\n";
  o << "  tp_mode: " << to_string(c.parallel.tp_mode) << "\n";
  o << "  tp_depth: " << c.parallel.tp_depth << "\n";
  std::string order;
  for (Axis a : c.parallel.order) order += (order.empty() ? "" : "-") + std::string(to_string(a));
  o << "  order: " << order << "\n";
  o << "  sequence_parallel: " << (c.parallel.sequence_parallel ? "true" : "false") << "\n";
  o << "  zero: " << c.parallel.zero << "\n";
  o << "pipeline:\n";
  o << "  schedule: " << to_string(c.pipeline.schedule) << "\n";
  o << "  virtual_stages: " << c.pipeline.virtual_stages << "\n";
  if (c.pipeline.partition == PartitionKind::kExplicit) {
    o << "  partition: [";
    for (size_t i = 0; i < c.pipeline.stage_ids.size(); ++i) o << (i ? ", " : "") << c.pipeline.stage_ids[i];
    o << "]\n";
  } else {
    o << "  partition: " << to_string(c.pipeline.partition) << "\n";
  }
  o << "train:\n";
  o << "  global_batch: " << c.train.global_batch << "\n";
  o << "  micro_batch: " << c.train.micro_batch << "\n";
  o << "  steps: " << c.train.steps << "\n";
  o << "  lr: " << yaml_double(c.train.lr) << "\n";
  o << "  min_lr: " << yaml_double(c.train.min_lr) << "\n";
  o << "  warmup_steps: " << c.train.warmup_steps << "\n";
  o << "  weight_decay: " << yaml_double(c.train.weight_decay) << "\n";
  o << "  beta1: " << yaml_double(c.train.beta1) << "\n";
  o << "  beta2: " << yaml_double(c.train.beta2) << "\n";
  o << "  grad_clip: " << yaml_double(c.train.grad_clip) << "\n";
  o << "  precision: " << to_string(c.train.precision) << "\n";
  o << "  recompute: " << to_string(c.train.recompute) << "\n";
  o << "  attention: " << to_string(c.train.attention) << "\n";
  o << "  seed: " << c.train.seed << "\n";
  o << "  data: " << (c.train.data.empty() ? std::string("\"\"") : yaml_string(c.train.data)) << "\n";
  o << "  checkpoint_every: " << c.train.checkpoint_every << "\n";
  o << "  checkpoint_dir: " << yaml_string(c.train.checkpoint_dir) << "\n";
  o << "  resume: " << (c.train.resume.empty() ? std::string("\"\"") : yaml_string(c.train.resume)) << "\n";
  o << "  hang_timeout_s: " << yaml_double(c.train.hang_timeout_s) << "\n";
  o << "backend: " << to_string(c.backend) << "\n";
  return o.str();
}

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::not_found(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) return Status::invalid_input(path + ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::io_error(path + ": read failed");
  return ss.str();
}

Status write_text_file_atomic(const std::string& path, std::string_view text) {
  const std::filesystem::path target(path);
  const std::filesystem::path tmp = target.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::io_error(path + ": cannot write (is the directory there and writable?)");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      out.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return Status::io_error(path + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::io_error(path + ": cannot replace the file: " + ec.message());
  }
  return Status::OK();
}

Status save_config_file(const std::string& path, const RunConfig& config) {
  return write_text_file_atomic(path, to_yaml(config));
}

}  // namespace stagecraft::config
