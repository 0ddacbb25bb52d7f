// YAML <-> RunConfig and overrides, driven by the key schema (config_schema.h). See config_io.h
// for the contract.
//
// The document is first parsed into a YamlNode tree; overrides are then written into that tree
// (so that an override and a file entry are checked by the same code and report the same way);
// then the tree is read section by section. Reading never stops at the first problem: every
// unknown key, wrong type and broken rule is collected, and validate() runs on what was read.
#include "stagecraft/config/config_io.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "stagecraft/config/config_schema.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/core/text.h"
#include "yaml_tree.h"

namespace stagecraft::config {

namespace {

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
    // Top-level keys first, then each section in document order.
    for (const KeySpec& k : config_schema()) {
      if (!k.section().empty()) continue;
      if (const YamlNode* n = root.find(k.leaf())) read_key(k, n, root, c);
    }
    for (const std::string& name : root_names()) {
      if (find_key(name)) continue;  // a top-level key, read above
      if (const YamlNode* s = section(root, name, name)) read_section(*s, name, c);
    }
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

  // The mapping `name` in `holder`, whose full path is `path`; nullptr when absent or empty.
  const YamlNode* section(const YamlNode& holder, const std::string& name, const std::string& path) {
    const YamlNode* s = holder.find(name);
    if (!s) return nullptr;
    note(s, path);
    if (s->is_null()) return nullptr;  // "model:" with nothing under it
    if (!s->is_mapping()) {
      problem_plain(s, path + ": expected a mapping of " + path + " keys, got " + describe(*s));
      return nullptr;
    }
    check_keys(*s, path);
    return s;
  }

  // The keys of section `path` in document order, and its nested sections (model.moe) in turn.
  void read_section(const YamlNode& s, const std::string& path, RunConfig& c) {
    for (const std::string& name : section_keys(path)) {
      const std::string full = path + "." + name;
      if (const KeySpec* k = find_key(full)) {
        if (const YamlNode* n = s.find(name)) read_key(*k, n, s, c);
      } else if (const YamlNode* sub = section(s, name, full)) {
        read_section(*sub, full, c);
      }
    }
  }

  void check_keys(const YamlNode& map, const std::string& prefix) {
    const std::vector<std::string> keys = section_keys(prefix);
    for (const auto& [key, value] : map.entries) {
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      const std::string full = join_path(prefix, one_line(key));
      std::string hint;
      if (const std::string_view foreign = foreign_key(key); !foreign.empty()) {
        hint = "; Stagecraft calls it " + std::string(foreign);
      } else if (std::string s = suggest_key(full); !s.empty()) {
        hint = "; did you mean " + s + "?";
        // The key was likely meant as s, whose value is then the default: rules about s would
        // mislead. Not so when this mapping gives s as well (`hiden: 3` beside `hidden: 1024`).
        const std::string section_prefix = prefix.empty() ? "" : prefix + ".";
        const bool given = s.rfind(section_prefix, 0) == 0 && map.find(std::string_view(s).substr(section_prefix.size()));
        if (!given) bad_keys_.insert(s);
      } else {
        std::string known_list;
        for (const auto& k : keys) known_list += (known_list.empty() ? "" : ", ") + k;
        hint = prefix.empty() ? "; the sections are " + known_list : "; " + prefix + " keys are " + known_list;
      }
      problem_plain(value.get(), full + ": unknown key" + hint);
    }
  }

  // Reads one key as its schema entry says; a value that breaks the key's type, range or rule is
  // reported and leaves the config as it was.
  void read_key(const KeySpec& k, const YamlNode* n, const YamlNode& holder, RunConfig& c) {
    const std::string key(k.path);
    KeyValue value;
    switch (k.type) {
      case KeyType::kInt: {
        if (k.zero_label_is_yaml && n->is_scalar() && !n->quoted && n->scalar == k.zero_label) {
          note(n, key);
          value = 0LL;
          break;
        }
        long long v = 0;
        if (!read_int(n, key, v, static_cast<long long>(k.min), static_cast<long long>(k.max))) return;
        value = v;
        break;
      }
      case KeyType::kUint64: {
        uint64_t v = 0;
        if (!read_u64(n, key, v)) return;
        value = v;
        break;
      }
      case KeyType::kDouble: {
        double v = 0;
        if (!read_double(n, key, v, k.min, k.max)) return;
        value = v;
        break;
      }
      case KeyType::kBool: {
        bool v = false;
        if (!read_bool(n, key, v)) return;
        value = v;
        break;
      }
      case KeyType::kText: {
        std::string v;
        if (!read_string(n, key, v, k.allow_empty)) return;
        value = std::move(v);
        break;
      }
      case KeyType::kEnum: {
        const std::string choices = choices_text(k);
        if (!scalar_or_problem(n, key, choices.c_str())) return;
        if (std::find(k.choices.begin(), k.choices.end(), n->scalar) == k.choices.end()) {
          problem(n, key, "expected " + choices);
          return;
        }
        value = n->scalar;
        break;
      }
      case KeyType::kDevice: read_device(n, c.cluster); return;
      case KeyType::kHosts: read_hosts(n, holder, c.cluster); return;
      case KeyType::kOrder: read_order(n, c.parallel); return;
      case KeyType::kPartition: read_partition(n, c.pipeline); return;
    }
    if (k.rule) {
      if (const std::string broken = k.rule(value); !broken.empty()) {
        problem(n, key, broken);
        return;
      }
    }
    const bool stored = k.access.set(c, value);
    assert(stored && "the reader produced a value of the schema's type");
    (void)stored;
  }

  bool scalar_or_problem(const YamlNode* n, const std::string& key, const char* expected) {
    note(n, key);
    if (n->is_scalar() && !n->is_null()) return true;
    problem_plain(n, key + ": expected " + expected + ", got " + (n->is_null() ? std::string("nothing") : describe(*n)));
    return false;
  }

  // The typed readers: each reports a problem and returns false, or stores the value and returns
  // true.
  bool read_int(const YamlNode* n, const std::string& key, long long& out, long long min_value, long long max_value) {
    if (!scalar_or_problem(n, key, "an integer")) return false;
    long long v = 0;
    const std::string& s = n->scalar;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (n->quoted || ec != std::errc() || p != s.data() + s.size()) {
      problem(n, key, "expected an integer");
      return false;
    }
    if (v < min_value || v > max_value) {
      problem(n, key, "must be between " + std::to_string(min_value) + " and " + std::to_string(max_value));
      return false;
    }
    out = v;
    return true;
  }
  bool read_int(const YamlNode* n, const std::string& key, int& out, int min_value, int max_value) {
    long long v = 0;
    if (!read_int(n, key, v, min_value, max_value)) return false;
    out = static_cast<int>(v);
    return true;
  }

  bool read_u64(const YamlNode* n, const std::string& key, uint64_t& out) {
    if (!scalar_or_problem(n, key, "a non-negative integer")) return false;
    uint64_t v = 0;
    const std::string& s = n->scalar;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (n->quoted || ec != std::errc() || p != s.data() + s.size()) {
      problem(n, key, "expected a non-negative integer");
      return false;
    }
    out = v;
    return true;
  }

  bool read_double(const YamlNode* n, const std::string& key, double& out, double min_value, double max_value) {
    if (!scalar_or_problem(n, key, "a number")) return false;
    double v = 0;
    std::string s = n->scalar;
    if (!s.empty() && s[0] == '+') s.erase(0, 1);
    if (!s.empty() && s[0] == '.') s.insert(0, "0");
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (n->quoted || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
      problem(n, key, "expected a number");
      return false;
    }
    if (v < min_value || v > max_value) {
      std::ostringstream range;
      range << "must be between " << min_value << " and " << max_value;
      problem(n, key, range.str());
      return false;
    }
    out = v;
    return true;
  }

  bool read_bool(const YamlNode* n, const std::string& key, bool& out) {
    if (!scalar_or_problem(n, key, "true or false")) return false;
    const std::string& s = n->scalar;
    if (!n->quoted && (s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on")) {
      out = true;
    } else if (!n->quoted && (s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off")) {
      out = false;
    } else {
      problem(n, key, "expected true or false");
      return false;
    }
    return true;
  }

  bool read_string(const YamlNode* n, const std::string& key, std::string& out, bool allow_empty) {
    note(n, key);
    if (!n->is_scalar()) {
      problem_plain(n, key + ": expected text, got " + describe(*n));
      return false;
    }
    if (!allow_empty && (n->is_null() || n->scalar.empty())) {  // `name:` and `name: ''`
      problem_plain(n, key + ": must not be empty");
      return false;
    }
    if (n->scalar.find('\0') != std::string::npos || n->scalar.find('\n') != std::string::npos) {
      problem_plain(n, key + ": must be one line of text");
      return false;
    }
    out = n->is_null() ? std::string() : n->scalar;
    return true;
  }

  // `device: NAME`, or `device: {base: NAME, memory_gib: ...}`, or `device: {name: X, ...}` with
  // every figure given. Whether the names exist is validate()'s rule.
  void read_device(const YamlNode* n, ClusterConfig& c) {
    if (!n->is_mapping()) {
      read_string(n, "cluster.device", c.device, false);
      return;
    }
    note(n, "cluster.device");
    static const char* kKeys[] = {"base", "name", "profile", "memory_gib", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "memory_gbps"};
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
      if (hint.empty()) hint = "; device keys are base, name, profile, memory_gib, fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops, memory_gbps";
      problem_plain(value.get(), "cluster.device." + one_line(key) + ": unknown key" + hint);
    }
    c.device.clear();
    if (auto* b = n->find("base")) read_string(b, "cluster.device.base", c.device, false);
    DeviceFields& f = c.device_fields;
    if (auto* v = n->find("name")) read_string(v, "cluster.device.name", f.name, false);
    if (auto* v = n->find("profile")) read_string(v, "cluster.device.profile", f.profile, false);
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

  void read_order(const YamlNode* n, ParallelConfig& p) {
    if (!scalar_or_problem(n, "parallel.order", "axes innermost first, e.g. tp-cp-dp-pp")) return;
    auto order = parse_order(n->scalar);
    if (!order) {
      problem(n, "parallel.order", "must name tp, dp and pp once each, cp at most once and ep, if at all, right after cp (or tp), innermost first (e.g. tp-cp-dp-pp, tp-cp-ep-dp-pp, tp-pp-dp)");
      return;
    }
    p.order = std::move(*order);
  }

  void read_partition(const YamlNode* n, PipelineConfig& p) {
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
        ok = read_int(n->items[i].get(), "pipeline.partition[" + std::to_string(i) + "]", v, 0, 1'000'000'000) && ok;
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
    const KeySpec* spec = i == 1 ? find_key(parts[0] + "." + parts[1]) : nullptr;
    if (slot && (*slot)->is_scalar() && !(*slot)->is_null() && spec && spec->type == KeyType::kDevice) {
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

// cluster.device: the plain name, or the mapping when any figure is changed.
void write_device(std::ostringstream& o, const ClusterConfig& c) {
  if (c.device_fields.empty()) {
    o << "  device: " << yaml_string(c.device) << "\n";
    return;
  }
  const DeviceFields& f = c.device_fields;
  o << "  device:\n";
  if (!c.device.empty()) o << "    base: " << yaml_string(c.device) << "\n";
  if (!f.name.empty()) o << "    name: " << yaml_string(f.name) << "\n";
  if (!f.profile.empty()) o << "    profile: " << yaml_string(f.profile) << "\n";
  const std::pair<const char*, const std::optional<double>*> fields[] = {
      {"memory_gib", &f.memory_gib},   {"fp32_tflops", &f.fp32_tflops}, {"tf32_tflops", &f.tf32_tflops},
      {"fp16_tflops", &f.fp16_tflops}, {"bf16_tflops", &f.bf16_tflops}, {"memory_gbps", &f.memory_gbps}};
  for (const auto& [key, value] : fields) {
    if (*value) o << "    " << key << ": " << yaml_double(**value) << "\n";
  }
}

}  // namespace

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> keys;
    for (const KeySpec& k : config_schema()) keys.emplace_back(k.path);
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
  static const RunConfig kDefaults;
  std::ostringstream o;
  // A section's line is written with its first key (none: no line); `open` is the path whose
  // lines are written, a nested section's (model.moe) under its parent's.
  std::string open;
  for (const KeySpec& k : config_schema()) {
    const std::string_view section = k.section();
    const size_t depth = section.empty() ? 0 : static_cast<size_t>(std::count(section.begin(), section.end(), '.')) + 1;
    const std::string indent(2 * depth, ' ');
    const KeyValue v = k.access.get ? k.access.get(c) : KeyValue();
    if (k.omit_default && k.access.get && v == k.access.get(kDefaults)) continue;
    if (k.type == KeyType::kHosts && c.cluster.hosts.empty()) continue;
    if (open != section) {
      // Open every level of `section` that `open` does not already hold.
      size_t start = 0, level = 0;
      while (start < section.size()) {
        const size_t dot = section.find('.', start);
        const std::string_view upto = section.substr(0, dot == std::string_view::npos ? section.size() : dot);
        const bool held = open == upto || (open.size() > upto.size() && open.compare(0, upto.size(), upto) == 0 && open[upto.size()] == '.');
        if (!held) o << std::string(2 * level, ' ') << upto.substr(start) << ":\n";
        if (dot == std::string_view::npos) break;
        start = dot + 1;
        ++level;
      }
      open = std::string(section);
    }
    if (k.type == KeyType::kDevice) {
      write_device(o, c.cluster);
      continue;
    }
    if (k.type == KeyType::kHosts) {
      if (c.cluster.hosts.empty()) continue;
      o << indent << k.leaf() << ":\n";
      for (const auto& h : c.cluster.hosts) o << indent << "  - {host: " << yaml_string(h.host) << ", slots: " << h.slots << "}\n";
      continue;
    }
    if (k.type == KeyType::kInt && !k.zero_label.empty() && std::get<long long>(v) == 0) {
      if (k.zero_label_is_yaml) {
        o << indent << k.leaf() << ": " << k.zero_label << "\n";
      } else {
        o << indent << "# " << k.leaf() << ": " << k.derived(c) << " (" << k.zero_label << ", the default)\n";
      }
      continue;
    }
    o << indent << k.leaf() << ": ";
    switch (k.type) {
      case KeyType::kInt: o << std::get<long long>(v); break;
      case KeyType::kUint64: o << std::get<uint64_t>(v); break;
      case KeyType::kDouble: o << yaml_double(std::get<double>(v)); break;
      case KeyType::kBool: o << (std::get<bool>(v) ? "true" : "false"); break;
      case KeyType::kText: o << yaml_string(std::get<std::string>(v)); break;
      case KeyType::kEnum:
      case KeyType::kOrder: o << std::get<std::string>(v); break;
      case KeyType::kPartition:
        if (c.pipeline.partition == PartitionKind::kExplicit) {
          o << "[";
          for (size_t i = 0; i < c.pipeline.stage_ids.size(); ++i) o << (i ? ", " : "") << c.pipeline.stage_ids[i];
          o << "]";
        } else {
          o << std::get<std::string>(v);
        }
        break;
      case KeyType::kDevice:
      case KeyType::kHosts: break;  // written above
    }
    o << "\n";
  }
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

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::io_error(dir + ": cannot open the directory to sync it: " + std::strerror(errno));
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;  // some file systems cannot sync a directory
  const int err = errno;
  ::close(fd);
  return ok ? Status::OK() : Status::io_error(dir + ": syncing the directory failed: " + std::strerror(err));
}

Status write_text_file_atomic(const std::string& path, std::string_view text) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path target(path);
  const std::string tmp = target.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error(path + ": cannot write (is the directory there and writable?): " + std::strerror(errno));
  const char* p = text.data();
  size_t left = text.size();
  int err = 0;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // On the disk before it takes the name: a crash then leaves the old file or the whole new one.
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return Status::io_error(path + ": write failed: " + std::strerror(err) + (err == ENOSPC ? " (disk full)" : ""));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    ::unlink(tmp.c_str());
    return Status::io_error(path + ": cannot replace the file: " + why);
  }
  return sync_directory(target.parent_path().string());
}

Status save_config_file(const std::string& path, const RunConfig& config) {
  return write_text_file_atomic(path, to_yaml(config));
}

}  // namespace stagecraft::config
