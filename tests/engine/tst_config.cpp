// Run configuration I/O: YAML loading of every key (docs/ARCHITECTURE.md §3) and its default,
// `key.path=value` overrides, wrong types and ranges, all errors of a file reported together,
// YAML syntax errors, unknown and foreign keys, and the save/load round trip of configs/*.yaml.
// The consistency rules themselves are tst_validate's.
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/config_schema.h"
#include "stagecraft/config/validate.h"

namespace {
int host_slots(const stagecraft::config::HostSlots& h) { return h.slots; }
}  // namespace

#include <QtTest>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace stagecraft::config;
using stagecraft::Result;

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString number(double v) { return QString::number(v, 'g', 15); }

// Every configuration key rendered as text, so that rows can state what a key reads as.
using Field = std::function<QString(const RunConfig&)>;
const std::map<std::string, Field>& fields() {
  static const std::map<std::string, Field> kFields = {
      {"name", [](const RunConfig& c) { return qs(c.name); }},
      {"cluster.nodes", [](const RunConfig& c) { return QString::number(c.cluster.nodes); }},
      {"cluster.gpus_per_node", [](const RunConfig& c) { return QString::number(c.cluster.gpus_per_node); }},
      {"cluster.device",
       [](const RunConfig& c) {
         QString s = qs(c.cluster.device);
         const DeviceFields& f = c.cluster.device_fields;
         if (!f.name.empty()) s += "{name=" + qs(f.name) + "}";
         if (f.memory_gib) s += "{memory_gib=" + number(*f.memory_gib) + "}";
         if (f.bf16_tflops) s += "{bf16_tflops=" + number(*f.bf16_tflops) + "}";
         return s;
       }},
      {"cluster.intra_node_gbps", [](const RunConfig& c) { return number(c.cluster.intra_node_gbps); }},
      {"cluster.inter_node_gbps", [](const RunConfig& c) { return number(c.cluster.inter_node_gbps); }},
      {"cluster.hosts",
       [](const RunConfig& c) {
         QStringList hosts;
         for (const HostSlots& h : c.cluster.hosts) hosts << qs(h.host) + ":" + QString::number(host_slots(h));
         return hosts.join(",");
       }},
      {"model.arch", [](const RunConfig& c) { return qs(c.model.arch); }},
      {"model.layers", [](const RunConfig& c) { return QString::number(c.model.layers); }},
      {"model.hidden", [](const RunConfig& c) { return QString::number(c.model.hidden); }},
      {"model.heads", [](const RunConfig& c) { return QString::number(c.model.heads); }},
      {"model.kv_heads", [](const RunConfig& c) { return QString::number(c.model.kv_heads); }},
      {"model.ffn_hidden", [](const RunConfig& c) { return QString::number(c.model.ffn_hidden); }},
      {"model.seq_len", [](const RunConfig& c) { return QString::number(c.model.seq_len); }},
      {"model.vocab", [](const RunConfig& c) { return QString::number(c.model.vocab); }},
      {"model.tied_embeddings", [](const RunConfig& c) { return QString(c.model.tied_embeddings ? "true" : "false"); }},
      {"model.rope_theta", [](const RunConfig& c) { return number(c.model.rope_theta); }},
      {"model.norm_eps", [](const RunConfig& c) { return number(c.model.norm_eps); }},
      {"model.qkv_bias", [](const RunConfig& c) { return QString(c.model.qkv_bias ? "true" : "false"); }},
      {"model.head_dim", [](const RunConfig& c) { return QString::number(c.model.head_dim); }},
      {"model.qk_norm", [](const RunConfig& c) { return QString(c.model.qk_norm ? "true" : "false"); }},
      {"model.dropout", [](const RunConfig& c) { return number(c.model.dropout); }},
      {"model.moe.experts", [](const RunConfig& c) { return QString::number(c.model.moe.experts); }},
      {"model.moe.top_k", [](const RunConfig& c) { return QString::number(c.model.moe.top_k); }},
      {"model.moe.ffn_hidden", [](const RunConfig& c) { return QString::number(c.model.moe.ffn_hidden); }},
      {"model.moe.shared_experts", [](const RunConfig& c) { return QString::number(c.model.moe.shared_experts); }},
      {"model.moe.shared_ffn_hidden", [](const RunConfig& c) { return QString::number(c.model.moe.shared_ffn_hidden); }},
      {"model.moe.dense_layers", [](const RunConfig& c) { return QString::number(c.model.moe.dense_layers); }},
      {"model.moe.router", [](const RunConfig& c) { return qs(std::string(enum_to_string(kMoeRouterNames, c.model.moe.router))); }},
      {"model.moe.norm_topk", [](const RunConfig& c) { return QString(c.model.moe.norm_topk ? "true" : "false"); }},
      {"model.moe.aux_loss", [](const RunConfig& c) { return number(c.model.moe.aux_loss); }},
      {"model.moe.capacity_factor", [](const RunConfig& c) { return number(c.model.moe.capacity_factor); }},
      {"parallel.dp", [](const RunConfig& c) { return c.parallel.dp_auto() ? QString("auto") : QString::number(c.parallel.dp); }},
      {"parallel.tp", [](const RunConfig& c) { return QString::number(c.parallel.tp); }},
      {"parallel.pp", [](const RunConfig& c) { return QString::number(c.parallel.pp); }},
      {"parallel.cp", [](const RunConfig& c) { return QString::number(c.parallel.cp); }},
      {"parallel.cp_comm", [](const RunConfig& c) { return qs(std::string(to_string(c.parallel.cp_comm))); }},
      {"parallel.ep", [](const RunConfig& c) { return QString::number(c.parallel.ep); }},
      {"parallel.expert_tp", [](const RunConfig& c) { return QString::number(c.parallel.expert_tp); }},
      {"parallel.tp_mode", [](const RunConfig& c) { return qs(std::string(to_string(c.parallel.tp_mode))); }},
      {"parallel.tp_depth", [](const RunConfig& c) { return QString::number(c.parallel.tp_depth); }},
      {"parallel.order",
       [](const RunConfig& c) {
         QStringList axes;
         for (Axis a : c.parallel.order) axes << qs(std::string(to_string(a)));
         return axes.join("-");
       }},
      {"parallel.sequence_parallel", [](const RunConfig& c) { return QString(c.parallel.sequence_parallel ? "true" : "false"); }},
      {"parallel.zero", [](const RunConfig& c) { return QString::number(c.parallel.zero); }},
      {"train.tf32", [](const RunConfig& c) { return QString(c.train.tf32 ? "true" : "false"); }},
      {"train.fp32_residual", [](const RunConfig& c) { return QString(c.train.fp32_residual ? "true" : "false"); }},
      {"parallel.overlap_grad_reduce", [](const RunConfig& c) { return QString(c.parallel.overlap_grad_reduce ? "true" : "false"); }},
      {"parallel.grad_bucket_mb", [](const RunConfig& c) { return number(c.parallel.grad_bucket_mb); }},
      {"pipeline.schedule", [](const RunConfig& c) { return qs(std::string(to_string(c.pipeline.schedule))); }},
      {"pipeline.virtual_stages", [](const RunConfig& c) { return QString::number(c.pipeline.virtual_stages); }},
      {"pipeline.partition",
       [](const RunConfig& c) {
         if (c.pipeline.partition != PartitionKind::kExplicit) return qs(std::string(to_string(c.pipeline.partition)));
         QStringList ids;
         for (int id : c.pipeline.stage_ids) ids << QString::number(id);
         return "[" + ids.join(",") + "]";
       }},
      {"pipeline.costs", [](const RunConfig& c) { return qs(c.pipeline.costs); }},
      {"train.global_batch", [](const RunConfig& c) { return QString::number(c.train.global_batch); }},
      {"train.micro_batch", [](const RunConfig& c) { return QString::number(c.train.micro_batch); }},
      {"train.steps", [](const RunConfig& c) { return QString::number(c.train.steps); }},
      {"train.lr", [](const RunConfig& c) { return number(c.train.lr); }},
      {"train.min_lr", [](const RunConfig& c) { return number(c.train.min_lr); }},
      {"train.warmup_steps", [](const RunConfig& c) { return QString::number(c.train.warmup_steps); }},
      {"train.weight_decay", [](const RunConfig& c) { return number(c.train.weight_decay); }},
      {"train.beta1", [](const RunConfig& c) { return number(c.train.beta1); }},
      {"train.beta2", [](const RunConfig& c) { return number(c.train.beta2); }},
      {"train.grad_clip", [](const RunConfig& c) { return number(c.train.grad_clip); }},
      {"train.precision", [](const RunConfig& c) { return qs(std::string(to_string(c.train.precision))); }},
      {"train.recompute", [](const RunConfig& c) { return qs(std::string(to_string(c.train.recompute))); }},
      {"train.attention", [](const RunConfig& c) { return qs(std::string(to_string(c.train.attention))); }},
      {"train.seed", [](const RunConfig& c) { return QString::number(c.train.seed); }},
      {"train.data", [](const RunConfig& c) { return qs(c.train.data); }},
      {"train.data_dtype", [](const RunConfig& c) { return qs(std::string(to_string(c.train.data_dtype))); }},
      {"train.checkpoint_every", [](const RunConfig& c) { return QString::number(c.train.checkpoint_every); }},
      {"train.checkpoint_dir", [](const RunConfig& c) { return qs(c.train.checkpoint_dir); }},
      {"train.resume", [](const RunConfig& c) { return qs(c.train.resume); }},
      {"train.init", [](const RunConfig& c) { return qs(c.train.init); }},
      {"train.hang_timeout_s", [](const RunConfig& c) { return number(c.train.hang_timeout_s); }},
      {"train.kernels.flash", [](const RunConfig& c) { return qs(std::string(to_string(c.train.kernels.flash))); }},
      {"train.kernels.gemm_bias", [](const RunConfig& c) { return qs(std::string(to_string(c.train.kernels.gemm_bias))); }},
      {"train.kernels.layernorm_backward_warps", [](const RunConfig& c) { return qs(std::string(to_string(c.train.kernels.layernorm_backward_warps))); }},
      {"backend", [](const RunConfig& c) { return qs(std::string(to_string(c.backend))); }},
      {"comm", [](const RunConfig& c) { return qs(std::string(to_string(c.comm))); }},
      {"launch.program", [](const RunConfig& c) { return qs(c.launch.program); }},
      {"launch.python", [](const RunConfig& c) { return qs(c.launch.python); }},
      {"launch.metrics", [](const RunConfig& c) { return qs(std::string(to_string(c.launch.metrics))); }},
      {"launch.args", [](const RunConfig& c) { return qs(c.launch.args); }},
      {"launch.framework", [](const RunConfig& c) { return qs(std::string(to_string(c.launch.framework))); }},
  };
  return kFields;
}

QString field(const RunConfig& c, const QString& key) {
  auto it = fields().find(key.toStdString());
  return it == fields().end() ? QString("<no such key %1>").arg(key) : it->second(c);
}

// The smallest document the loader accepts: the model shape and nothing else.
constexpr const char* kMinimal = "model: {layers: 8, hidden: 64, heads: 8}\n";

// The documented default of every key (run_config.h, docs/ARCHITECTURE.md §3).
const std::vector<std::pair<const char*, const char*>> kDefaults = {
    {"name", "run"},
    {"cluster.nodes", "1"},
    {"cluster.gpus_per_node", "8"},
    {"cluster.device", "A100-80GB"},
    {"cluster.intra_node_gbps", "0"},
    {"cluster.inter_node_gbps", "0"},
    {"cluster.hosts", ""},
    {"model.arch", "gpt2"},
    {"model.layers", "8"},  // required: the minimal document's
    {"model.hidden", "64"},
    {"model.heads", "8"},
    {"model.kv_heads", "0"},  // 0 = heads (kv() below)
    {"model.ffn_hidden", "0"},  // 0 = 4 x hidden (ffn() below)
    {"model.seq_len", "1024"},
    {"model.vocab", "50257"},
    {"model.tied_embeddings", "true"},
    {"model.rope_theta", "10000"},
    {"model.norm_eps", "1e-05"},
    {"model.qkv_bias", "false"},
    {"model.head_dim", "0"},  // 0 = hidden / heads
    {"model.qk_norm", "false"},
    {"model.dropout", "0"},
    {"model.moe.experts", "0"},  // no mixture of experts
    {"model.moe.top_k", "2"},
    {"model.moe.ffn_hidden", "0"},
    {"model.moe.shared_experts", "0"},
    {"model.moe.shared_ffn_hidden", "0"},
    {"model.moe.dense_layers", "0"},
    {"model.moe.router", "softmax_topk"},
    {"model.moe.norm_topk", "true"},
    {"model.moe.aux_loss", "0.01"},
    {"model.moe.capacity_factor", "0"},
    {"parallel.dp", "auto"},
    {"parallel.tp", "1"},
    {"parallel.pp", "1"},
    {"parallel.cp", "1"},
    {"parallel.cp_comm", "ring"},
    {"parallel.ep", "1"},
    {"parallel.expert_tp", "1"},
    {"parallel.tp_mode", "1d"},
    {"parallel.tp_depth", "1"},
    {"parallel.order", "tp-cp-dp-pp"},
    {"parallel.sequence_parallel", "false"},
    {"parallel.zero", "0"},
    {"parallel.overlap_grad_reduce", "true"},
    {"train.tf32", "false"},
    {"train.fp32_residual", "true"},
    {"parallel.grad_bucket_mb", "25"},
    {"pipeline.schedule", "1f1b"},
    {"pipeline.virtual_stages", "1"},
    {"pipeline.partition", "uniform"},
    {"pipeline.costs", "model"},
    {"train.global_batch", "8"},
    {"train.micro_batch", "1"},
    {"train.steps", "100"},
    {"train.lr", "0.0003"},
    {"train.min_lr", "0"},
    {"train.warmup_steps", "0"},
    {"train.weight_decay", "0"},
    {"train.beta1", "0.9"},
    {"train.beta2", "0.95"},
    {"train.grad_clip", "1"},
    {"train.precision", "fp32"},
    {"train.recompute", "none"},
    {"train.attention", "standard"},
    {"train.seed", "1234"},
    {"train.data", ""},
    {"train.checkpoint_every", "0"},
    {"train.checkpoint_dir", "checkpoints"},
    {"train.resume", ""},
    {"train.init", ""},
    {"train.data_dtype", "auto"},
    {"train.hang_timeout_s", "300"},
    {"train.kernels.flash", "auto"},
    {"train.kernels.gemm_bias", "auto"},
    {"train.kernels.layernorm_backward_warps", "auto"},
    {"backend", "cpu"},
    {"comm", "auto"},
    {"launch.program", ""},
    {"launch.python", "python3"},
    {"launch.metrics", "auto"},
    {"launch.args", ""},
    {"launch.framework", "none"},
};

// One value for every key, written in a document: key, YAML value, companion keys that keep the
// config valid ("section.key: value" each), what the key then reads as.
struct KeyRow {
  const char* key;
  const char* yaml;
  std::vector<const char*> companions;
  const char* expected;
};
const std::vector<KeyRow> kKeyRows = {
    {"name", "my-run", {}, "my-run"},
    {"cluster.nodes", "2", {}, "2"},
    {"cluster.gpus_per_node", "4", {}, "4"},
    {"cluster.device", "H100-SXM", {}, "H100-SXM"},
    {"cluster.intra_node_gbps", "2400", {}, "2400"},
    {"cluster.inter_node_gbps", "1600.5", {}, "1600.5"},
    {"cluster.hosts", "[{host: node-a, slots: 4}, {host: node-b, slots: 4}]", {}, "node-a:4,node-b:4"},
    {"model.arch", "gpt", {}, "gpt"},
    {"model.arch", "llama", {}, "llama"},
    {"model.kv_heads", "4", {"model.arch: llama"}, "4"},
    {"model.rope_theta", "500000", {}, "500000"},
    {"model.norm_eps", "1e-06", {"model.arch: llama"}, "1e-06"},
    {"model.qkv_bias", "true", {"model.arch: llama"}, "true"},
    {"model.layers", "12", {}, "12"},
    {"model.hidden", "128", {}, "128"},
    {"model.heads", "16", {}, "16"},
    {"model.ffn_hidden", "200", {}, "200"},
    {"model.seq_len", "2048", {}, "2048"},
    {"model.vocab", "32000", {}, "32000"},
    {"model.tied_embeddings", "false", {}, "false"},
    {"model.dropout", "0.1", {}, "0.1"},
    {"model.head_dim", "16", {"model.arch: llama"}, "16"},
    {"model.qk_norm", "true", {"model.arch: llama"}, "true"},
    {"model.moe.experts", "8", {"model.arch: llama"}, "8"},
    {"model.moe.top_k", "1", {"model.arch: llama", "model.moe.experts: 4"}, "1"},
    {"model.moe.ffn_hidden", "96", {"model.arch: llama", "model.moe.experts: 4"}, "96"},
    {"model.moe.shared_experts", "1", {"model.arch: llama", "model.moe.experts: 4"}, "1"},
    {"model.moe.shared_ffn_hidden", "64", {"model.arch: llama", "model.moe.experts: 4", "model.moe.shared_experts: 1"}, "64"},
    {"model.moe.dense_layers", "2", {"model.arch: llama", "model.moe.experts: 4"}, "2"},
    {"model.moe.router", "softmax_topk", {"model.arch: llama", "model.moe.experts: 4"}, "softmax_topk"},
    {"model.moe.norm_topk", "false", {"model.arch: llama", "model.moe.experts: 4"}, "false"},
    {"model.moe.aux_loss", "0.001", {"model.arch: llama", "model.moe.experts: 4"}, "0.001"},
    {"model.moe.capacity_factor", "1.25", {"model.arch: llama", "model.moe.experts: 4"}, "1.25"},
    {"parallel.dp", "8", {}, "8"},
    {"parallel.tp", "2", {}, "2"},
    {"parallel.pp", "4", {}, "4"},
    {"parallel.cp", "2", {}, "2"},
    {"parallel.cp_comm", "all_to_all", {"parallel.cp: 2"}, "all_to_all"},
    {"parallel.ep", "4", {"model.arch: llama", "model.moe.experts: 8", "parallel.dp: 8"}, "4"},
    {"parallel.expert_tp", "2", {"model.arch: llama", "model.moe.experts: 8", "parallel.dp: 8"}, "2"},
    {"parallel.tp_mode", "2d", {"parallel.tp: 4"}, "2d"},
    {"parallel.tp_depth", "2", {"parallel.tp: 8", "parallel.tp_mode: 2.5d"}, "2"},
    {"parallel.order", "tp-pp-dp", {}, "tp-cp-pp-dp"},
    {"parallel.sequence_parallel", "true", {"parallel.tp: 2"}, "true"},
    {"parallel.zero", "3", {}, "3"},
    {"parallel.overlap_grad_reduce", "false", {}, "false"},
    {"train.tf32", "true", {}, "true"},
    {"train.fp32_residual", "false", {}, "false"},
    {"parallel.grad_bucket_mb", "2.5", {}, "2.5"},
    {"pipeline.schedule", "gpipe", {}, "gpipe"},
    {"pipeline.virtual_stages", "2", {"parallel.pp: 2", "pipeline.schedule: interleaved"}, "2"},
    {"pipeline.partition", "[0, 0, 0, 1, 1, 1, 1, 1]", {"parallel.pp: 2"}, "[0,0,0,1,1,1,1,1]"},
    {"pipeline.costs", "run:12", {}, "run:12"},
    {"train.global_batch", "128", {}, "128"},
    {"train.micro_batch", "2", {}, "2"},
    {"train.steps", "500", {}, "500"},
    {"train.lr", "1.5e-4", {}, "0.00015"},
    {"train.min_lr", "1.0e-5", {}, "1e-05"},
    {"train.warmup_steps", "10", {}, "10"},
    {"train.weight_decay", "0.1", {}, "0.1"},
    {"train.beta1", "0.8", {}, "0.8"},
    {"train.beta2", "0.999", {}, "0.999"},
    {"train.grad_clip", "0.5", {}, "0.5"},
    {"train.precision", "bf16", {}, "bf16"},
    {"train.recompute", "selective", {}, "selective"},
    {"train.attention", "flash", {}, "flash"},
    {"train.seed", "18446744073709551615", {}, "18446744073709551615"},
    {"train.data", "data/tokens.bin", {}, "data/tokens.bin"},
    {"train.checkpoint_every", "50", {}, "50"},
    {"train.checkpoint_dir", "/tmp/ckpt", {}, "/tmp/ckpt"},
    {"train.resume", "ckpt/step-100", {}, "ckpt/step-100"},
    {"train.init", "models/Llama-3.2-1B", {}, "models/Llama-3.2-1B"},
    {"train.data_dtype", "uint32", {}, "uint32"},
    {"train.hang_timeout_s", "60", {}, "60"},
    {"train.kernels.flash", "wgmma", {"backend: cuda", "train.attention: flash", "train.precision: bf16"}, "wgmma"},
    {"train.kernels.gemm_bias", "separate", {"backend: cuda"}, "separate"},
    {"train.kernels.layernorm_backward_warps", "8", {"backend: cuda"}, "8"},
    {"backend", "cuda", {}, "cuda"},
    {"comm", "gloo", {}, "gloo"},
    {"launch.program", "train/pretrain_gpt.py", {}, "train/pretrain_gpt.py"},
    {"launch.python", "/usr/bin/python3", {}, "/usr/bin/python3"},
    {"launch.metrics", "nanogpt", {}, "nanogpt"},
    {"launch.args", "\"--data-path 'my data' --lr 1e-4\"", {}, "--data-path 'my data' --lr 1e-4"},
    {"launch.framework", "deepspeed", {}, "deepspeed"},
};

// A block-style document from "section.key: value" entries (top-level keys have no dot). The base
// is a valid 8-GPU run of an 8-layer model with 64 samples per step, so that each row changes
// one thing.
std::string document(const std::vector<std::string>& entries) {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> sections;
  auto put = [&](const std::string& entry) {
    const size_t colon = entry.find(": ");
    const std::string path = entry.substr(0, colon), value = entry.substr(colon + 2);
    const size_t dot = path.find('.');
    const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    const std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
    for (auto& [name, keys] : sections) {
      if (name != section) continue;
      for (auto& kv : keys) {
        if (kv.first == key) {
          kv.second = value;
          return;
        }
      }
      keys.emplace_back(key, value);
      return;
    }
    sections.push_back({section, {{key, value}}});
  };
  for (const char* e : {"model.layers: 8", "model.hidden: 64", "model.heads: 8", "train.global_batch: 64"}) put(e);
  for (const auto& e : entries) put(e);
  std::string out;
  for (const auto& [name, keys] : sections) {
    if (name.empty()) {
      for (const auto& [k, v] : keys) out += k + ": " + v + "\n";
      continue;
    }
    out += name + ":\n";
    // Plain keys, then each nested mapping ("moe.experts" under "moe:") with its keys.
    std::vector<std::string> nested;
    for (const auto& [k, v] : keys) {
      const size_t dot = k.find('.');
      if (dot == std::string::npos) {
        out += "  " + k + ": " + v + "\n";
      } else if (std::find(nested.begin(), nested.end(), k.substr(0, dot)) == nested.end()) {
        nested.push_back(k.substr(0, dot));
      }
    }
    for (const std::string& sub : nested) {
      out += "  " + sub + ":\n";
      for (const auto& [k, v] : keys) {
        if (k.rfind(sub + ".", 0) == 0) out += "    " + k.substr(sub.size() + 1) + ": " + v + "\n";
      }
    }
  }
  return out;
}

QStringList error_lines(const Result<RunConfig>& r) {
  if (r.ok()) return {};
  return QString::fromStdString(r.status().message()).split('\n');
}

QStringList configs_dir_files() {
  QDir dir(QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs"));
  QStringList out;
  for (const QString& f : dir.entryList({"*.yaml"}, QDir::Files, QDir::Name)) out << dir.filePath(f);
  return out;
}

std::vector<std::string> to_std(const QStringList& l) {
  std::vector<std::string> v;
  for (const auto& s : l) v.push_back(s.toStdString());
  return v;
}

}  // namespace

class TestConfig : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // ---- loading every key and its default ----

  void schemaAndTestTablesCoverTheSameKeys() {
    std::set<std::string> schema(config_keys().begin(), config_keys().end());
    std::set<std::string> rendered, defaults, rows;
    for (const auto& [k, f] : fields()) rendered.insert(k);
    for (const auto& [k, v] : kDefaults) defaults.insert(k);
    for (const auto& r : kKeyRows) rows.insert(r.key);
    QCOMPARE(rendered, schema);
    QCOMPARE(defaults, schema);
    QCOMPARE(rows, schema);
    QCOMPARE(config_keys().front(), std::string("name"));
  }

  void minimalDocumentHasEveryDefault_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("expected");
    for (const auto& [k, v] : kDefaults) QTest::newRow(k) << QString(k) << QString(v);
  }
  void minimalDocumentHasEveryDefault() {
    QFETCH(QString, key);
    QFETCH(QString, expected);
    auto c = parse_config(kMinimal, "minimal.yaml");
    QVERIFY2(c.ok(), c.status().message().c_str());
    QCOMPARE(field(c.value(), key), expected);
  }

  void defaultsThatFollowFromOtherKeys() {
    auto c = parse_config(kMinimal, "minimal.yaml");
    QVERIFY(c.ok());
    QCOMPARE(c->model.ffn(), 4 * 64);                // ffn_hidden 0 = 4 x hidden
    QCOMPARE(resolved_dp(c.value()), 8);             // dp auto = 8 GPUs / (tp 1 x pp 1)
    QCOMPARE(micro_batches(c.value()), 1);           // 8 / (8 x 1)
    QCOMPARE(c->world_size(), 8);
    QVERIFY(c->cluster.device_fields.empty());
    QVERIFY(c->pipeline.stage_ids.empty());
  }

  void readsEveryKey_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QStringList>("companions");
    QTest::addColumn<QString>("expected");
    for (const auto& r : kKeyRows) {
      QStringList comp;
      for (const char* c : r.companions) comp << c;
      QTest::newRow(r.key) << QString(r.key) << QString(r.yaml) << comp << QString(r.expected);
    }
    QTest::newRow("parallel.dp auto") << "parallel.dp" << "auto" << QStringList{} << "auto";
    QTest::newRow("parallel.order Megatron-Core's tp-cp-ep-dp-pp") << "parallel.order" << "tp-cp-ep-dp-pp" << QStringList{} << "tp-cp-dp-pp";
    QTest::newRow("parallel.order with cp elsewhere") << "parallel.order" << "cp-dp-tp-pp" << QStringList{} << "cp-dp-tp-pp";
    QTest::newRow("pipeline.partition balanced") << "pipeline.partition" << "balanced" << QStringList{"parallel.pp: 2"} << "balanced";
    QTest::newRow("cluster.device mapping with a base") << "cluster.device" << "{base: A100-80GB, memory_gib: 40}" << QStringList{}
                                                        << "A100-80GB{memory_gib=40}";
    QTest::newRow("cluster.device defined from scratch")
        << "cluster.device" << "{name: MI-X, memory_gib: 64, fp32_tflops: 40, bf16_tflops: 400, memory_gbps: 3000}"
        << QStringList{"train.precision: bf16"} << "{name=MI-X}{memory_gib=64}{bf16_tflops=400}";
    QTest::newRow("model.tied_embeddings yes") << "model.tied_embeddings" << "yes" << QStringList{} << "true";
    QTest::newRow("name quoted number stays text") << "name" << "'1.5'" << QStringList{} << "1.5";
  }
  void readsEveryKey() {
    QFETCH(QString, key);
    QFETCH(QString, yaml);
    QFETCH(QStringList, companions);
    QFETCH(QString, expected);
    std::vector<std::string> entries = to_std(companions);
    entries.push_back(key.toStdString() + ": " + yaml.toStdString());
    const std::string doc = document(entries);
    auto c = parse_config(doc, "keys.yaml");
    QVERIFY2(c.ok(), (c.status().message() + "\n" + doc).c_str());
    QCOMPARE(field(c.value(), key), expected);
    // The same value as an override on the base document reads the same.
    std::vector<std::string> overrides;
    for (const QString& comp : companions) overrides.push_back(comp.section(": ", 0, 0).toStdString() + "=" + comp.section(": ", 1).toStdString());
    overrides.push_back(key.toStdString() + "=" + yaml.toStdString());
    auto o = parse_config(document({}), "base.yaml", overrides);
    QVERIFY2(o.ok(), o.status().message().c_str());
    QCOMPARE(field(o.value(), key), expected);
  }

  void hostsDefineTheCluster() {
    auto c = parse_config(document({"cluster.hosts: [{host: a, slots: 2}, {host: b, slots: 2}, {host: c, slots: 2}, {host: d, slots: 2}]"}),
                          "hosts.yaml");
    QVERIFY2(c.ok(), c.status().message().c_str());
    QCOMPARE(c->cluster.nodes, 4);
    QCOMPARE(c->cluster.gpus_per_node, 2);
    QCOMPARE(c->world_size(), 8);
  }

  // Each row's document follows a first line "model: {layers: 8, hidden: 64, heads: 8}".
  void wrongTypesAndRanges_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QString>("line");
    QTest::newRow("integer as a word") << "parallel: {tp: two}" << "types.yaml:2: parallel.tp=two: expected an integer";
    QTest::newRow("quoted integer") << "parallel: {tp: '2'}" << "types.yaml:2: parallel.tp=2: expected an integer";
    QTest::newRow("integer with a fraction") << "train: {steps: 2.5}" << "types.yaml:2: train.steps=2.5: expected an integer";
    QTest::newRow("integer below range") << "cluster: {gpus_per_node: 0}" << "types.yaml:2: cluster.gpus_per_node=0: must be between 1 and 1024";
    QTest::newRow("nodes above range") << "cluster: {nodes: 200000}" << "types.yaml:2: cluster.nodes=200000: must be between 1 and 131072";
    QTest::newRow("integer past 64 bits") << "parallel: {pp: 99999999999999999999}"
                                          << "types.yaml:2: parallel.pp=99999999999999999999: expected an integer";
    QTest::newRow("number as a word") << "train: {lr: fast}" << "types.yaml:2: train.lr=fast: expected a number";
    QTest::newRow("number not finite") << "train: {lr: .inf}" << "types.yaml:2: train.lr=.inf: expected a number";
    QTest::newRow("number out of range") << "train: {beta2: 1.5}" << "types.yaml:2: train.beta2=1.5: must be between 0 and 0.999999";
    QTest::newRow("seed negative") << "train: {seed: -1}" << "types.yaml:2: train.seed=-1: expected a non-negative integer";
    QTest::newRow("boolean") << "parallel: {sequence_parallel: maybe}" << "types.yaml:2: parallel.sequence_parallel=maybe: expected true or false";
    QTest::newRow("enum") << "pipeline: {schedule: zb-h1}" << "types.yaml:2: pipeline.schedule=zb-h1: expected gpipe, 1f1b or interleaved";
    QTest::newRow("tp_mode") << "parallel: {tp_mode: 4d}" << "types.yaml:2: parallel.tp_mode=4d: expected 1d, 2d, 2.5d or 3d";
    QTest::newRow("precision") << "train: {precision: fp8}" << "types.yaml:2: train.precision=fp8: expected fp32, fp16 or bf16";
    QTest::newRow("order misses an axis") << "parallel: {order: tp-dp}"
                                          << "types.yaml:2: parallel.order=tp-dp: must name tp, dp and pp once each, cp at most once and ep, if at all, right after cp (or tp), innermost first (e.g. tp-cp-dp-pp, tp-cp-ep-dp-pp, tp-pp-dp)";
    QTest::newRow("order repeats an axis") << "parallel: {order: tp-tp-pp}"
                                           << "types.yaml:2: parallel.order=tp-tp-pp: must name tp, dp and pp once each, cp at most once and ep, if at all, right after cp (or tp), innermost first (e.g. tp-cp-dp-pp, tp-cp-ep-dp-pp, tp-pp-dp)";
    QTest::newRow("order repeats cp") << "parallel: {order: tp-cp-dp-cp-pp}"
                                      << "types.yaml:2: parallel.order=tp-cp-dp-cp-pp: must name tp, dp and pp once each, cp at most once and ep, if at all, right after cp (or tp), innermost first (e.g. tp-cp-dp-pp, tp-cp-ep-dp-pp, tp-pp-dp)";
    QTest::newRow("zero stage 4") << "parallel: {zero: 4}"
                                  << "types.yaml:2: parallel.zero=4: must be 0 (no sharding), 1 (optimizer state), 2 (and gradients) or 3 (and parameters), sharded over dp x cp";
    QTest::newRow("cp_comm") << "parallel: {cp_comm: p2p}" << "types.yaml:2: parallel.cp_comm=p2p: expected ring or all_to_all";
    QTest::newRow("partition word") << "pipeline: {partition: even}"
                                    << "types.yaml:2: pipeline.partition=even: expected uniform, balanced, or a list of one stage id per layer";
    QTest::newRow("partition negative id") << "pipeline: {partition: [0, -1]}" << "types.yaml:2: pipeline.partition[1]=-1: must be between 0 and 1000000000";
    QTest::newRow("section not a mapping") << "train: 5" << "types.yaml:2: train: expected a mapping of train keys, got 5";
    QTest::newRow("scalar expected, list given") << "parallel: {tp: [2]}" << "types.yaml:2: parallel.tp: expected an integer, got a list";
    QTest::newRow("empty value") << "parallel:\n  pp:\n" << "types.yaml:3: parallel.pp: expected an integer, got nothing";
    QTest::newRow("name with a newline is refused") << "name: \"a\\nb\"" << "types.yaml:2: name: must be one line of text";
    QTest::newRow("empty name") << "name: ''" << "types.yaml:2: name: must not be empty";
    QTest::newRow("multi-line value shown on one line") << "backend: \"cpu\\ngpu\"" << "types.yaml:2: backend=cpu\\ngpu: expected cpu or cuda";
    QTest::newRow("long value shown cut") << "backend: " + QString(100, 'x')
                                          << "types.yaml:2: backend=" + QString(60, 'x') + "...: expected cpu or cuda";
    QTest::newRow("host slots above range") << "cluster: {hosts: [{host: a, slots: 2000}]}" << "types.yaml:2: cluster.hosts[0].slots=2000: must be between 1 and 1024";
    QTest::newRow("device figure negative") << "cluster: {device: {base: A100-80GB, memory_gib: -1}}"
                                            << "types.yaml:2: cluster.device.memory_gib=-1: must be between 0.001 and 1e+06";
    QTest::newRow("device mapping without base or name") << "cluster: {device: {memory_gib: 40}}"
                                                         << "types.yaml:2: cluster.device: a device mapping needs base (a catalog device to change) or name (a new device)";
  }
  void wrongTypesAndRanges() {
    QFETCH(QString, yaml);
    QFETCH(QString, line);
    const std::string doc = "model: {layers: 8, hidden: 64, heads: 8}\n" + yaml.toStdString() + "\n";
    auto c = parse_config(doc, "types.yaml");
    QVERIFY(!c.ok());
    QVERIFY2(error_lines(c).contains(line), (c.status().message() + "\n--- document:\n" + doc).c_str());
    QCOMPARE(c.status().code(), stagecraft::Status::Code::kInvalidInput);
  }

  // ---- overrides ----

  void overrides_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QStringList>("expected");  // key=value as field() renders it
    QTest::newRow("one integer") << QStringList{"parallel.tp=2"} << QStringList{"parallel.tp=2", "parallel.dp=auto"};
    QTest::newRow("LiBai's 3D command line") << QStringList{"parallel.dp=2", "parallel.tp=2", "parallel.pp=2"}
                                             << QStringList{"parallel.dp=2", "parallel.tp=2", "parallel.pp=2"};
    QTest::newRow("later override wins") << QStringList{"parallel.tp=2", "parallel.tp=4"} << QStringList{"parallel.tp=4"};
    QTest::newRow("dp back to auto") << QStringList{"parallel.dp=8", "parallel.dp=auto"} << QStringList{"parallel.dp=auto"};
    QTest::newRow("stage-id list") << QStringList{"parallel.pp=2", "pipeline.partition=[0,0,1,1,1,1,1,1]"}
                                   << QStringList{"pipeline.partition=[0,0,1,1,1,1,1,1]"};
    QTest::newRow("list replaces a word") << QStringList{"parallel.pp=2", "pipeline.partition=balanced", "pipeline.partition=[0,1,1,1,1,1,1,1]"}
                                          << QStringList{"pipeline.partition=[0,1,1,1,1,1,1,1]"};
    // Hosts define nodes and gpus_per_node; apply_overrides' base writes both, so they come along.
    QTest::newRow("hosts list") << QStringList{"cluster.nodes=2", "cluster.gpus_per_node=4", "cluster.hosts=[{host: a, slots: 4}, {host: b, slots: 4}]"}
                                << QStringList{"cluster.hosts=a:4,b:4", "cluster.nodes=2", "cluster.gpus_per_node=4"};
    QTest::newRow("new section made") << QStringList{"pipeline.schedule=gpipe"} << QStringList{"pipeline.schedule=gpipe"};
    QTest::newRow("top-level key") << QStringList{"backend=cuda"} << QStringList{"backend=cuda"};
    QTest::newRow("device figure turns a name into a mapping") << QStringList{"cluster.device=A100-80GB", "cluster.device.memory_gib=40"}
                                                               << QStringList{"cluster.device=A100-80GB{memory_gib=40}"};
    QTest::newRow("quoted text with a space") << QStringList{"name='my run'"} << QStringList{"name=my run"};
    QTest::newRow("empty value is empty text") << QStringList{"train.data="} << QStringList{"train.data="};
    QTest::newRow("double in exponent form") << QStringList{"train.lr=6.0e-5"} << QStringList{"train.lr=6e-05"};
    QTest::newRow("flow mapping as a section") << QStringList{"parallel={tp: 2, pp: 2}"} << QStringList{"parallel.tp=2", "parallel.pp=2"};
  }
  void overrides() {
    QFETCH(QStringList, overrides);
    QFETCH(QStringList, expected);
    auto c = parse_config(document({}), "base.yaml", to_std(overrides));
    QVERIFY2(c.ok(), c.status().message().c_str());
    for (const QString& e : expected) QCOMPARE(e.section('=', 0, 0) + "=" + field(c.value(), e.section('=', 0, 0)), e);
    // apply_overrides on an already loaded config gives the same config.
    auto base = parse_config(document({}), "base.yaml");
    QVERIFY(base.ok());
    auto applied = apply_overrides(base.value(), to_std(overrides));
    QVERIFY2(applied.ok(), applied.status().message().c_str());
    QVERIFY(applied.value() == c.value());
  }

  void badOverrides_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("line");
    const QString base = QString::fromStdString(document({"name: base", "parallel.pp: 2"}));
    QTest::newRow("no equals sign") << base << QStringList{"parallel.tp"} << "command line: 'parallel.tp' is not key.path=value (e.g. parallel.tp=2)";
    QTest::newRow("no key") << base << QStringList{"=4"} << "command line: '=4' is not key.path=value (e.g. parallel.tp=2)";
    QTest::newRow("empty key part") << base << QStringList{"parallel..tp=2"} << "command line: 'parallel..tp' has an empty part; keys look like parallel.tp";
    QTest::newRow("invalid YAML value") << base << QStringList{"parallel.tp=[1"}
                                        << "command line parallel.tp=[1: value is not valid YAML: line 2, column 1: while parsing a flow sequence: did not find expected ',' or ']'";
    QTest::newRow("key under a scalar") << base << QStringList{"name.x=1"} << "command line name.x=1: name is not a section";
    QTest::newRow("document not a mapping") << "- 1\n- 2\n" << QStringList{"parallel.tp=2"} << "command line parallel.tp=2: the document is not a section";
    QTest::newRow("misspelt key") << base << QStringList{"parallel.tpp=2"} << "command line: parallel.tpp: unknown key; did you mean parallel.tp?";
    QTest::newRow("wrong type") << base << QStringList{"parallel.tp=two"} << "command line: parallel.tp=two: expected an integer";
    QTest::newRow("out of range") << base << QStringList{"parallel.tp=0"} << "command line: parallel.tp=0: must be between 1 and 1048576";
    QTest::newRow("rule broken by an override") << base << QStringList{"parallel.dp=auto", "parallel.tp=3"}
                                                << "command line: parallel.tp=3: 8 GPUs are not divisible by tp x pp = 6";
    QTest::newRow("multi-line override shown on one line") << base << QStringList{"parallel\n.tp=2"}
                                                           << "command line: parallel\\n: unknown key; did you mean parallel.dp?";
    QTest::newRow("device figure without a device") << QString::fromStdString(document({})) << QStringList{"cluster.device.memory_gib=40"}
                                                    << "command line: cluster.device: a device mapping needs base (a catalog device to change) or name (a new device)";
  }
  void badOverrides() {
    QFETCH(QString, yaml);
    QFETCH(QStringList, overrides);
    QFETCH(QString, line);
    auto c = parse_config(yaml.toStdString(), "base.yaml", to_std(overrides));
    QVERIFY(!c.ok());
    bool found = false;
    for (const QString& l : error_lines(c)) found = found || l == line || (line.endsWith(' ') && l.startsWith(line));
    QVERIFY2(found, c.status().message().c_str());
    for (const QString& l : error_lines(c)) QVERIFY2(!l.isEmpty(), c.status().message().c_str());
  }

  // ---- every problem of a file at once ----

  void reportsEveryErrorOfAFileTogether() {
    const char* yaml =
        "name: many\n"                 // 1
        "cluster: {nodes: 1, gpus_per_node: 8}\n"  // 2
        "model:\n"                     // 3
        "  layers: 24\n"               // 4
        "  hidden: 1024\n"             // 5
        "  heads: 16\n"                // 6
        "  hiden: 3\n"                 // 7  unknown key
        "parallel:\n"                  // 8
        "  tp: 3\n"                    // 9  breaks world and heads
        "  pp: two\n"                  // 10 wrong type
        "  tensor_parallel_size: 2\n"  // 11 foreign key
        "pipeline: {schedule: interleaved, virtual_stages: 2}\n"  // 12 needs pp > 1
        "train:\n"                     // 13
        "  global_batch: 7\n"          // 14
        "  warmup_steps: 1000\n";      // 15
    auto c = parse_config(yaml, "many.yaml");
    QVERIFY(!c.ok());
    const QStringList lines = error_lines(c);
    const QStringList expected = {
        "many.yaml:7: model.hiden: unknown key; did you mean model.hidden?",
        "many.yaml:11: parallel.tensor_parallel_size: unknown key; Stagecraft calls it parallel.tp",
        "many.yaml:10: parallel.pp=two: expected an integer",
        "many.yaml:9: parallel.tp=3: 8 GPUs are not divisible by tp x pp = 3",
        "many.yaml:9: parallel.tp=3: tp must divide model.heads=16 so that every rank holds whole heads",
        "many.yaml:12: pipeline.schedule=interleaved: needs pipeline parallelism (parallel.pp > 1)",
        "many.yaml:15: train.warmup_steps=1000: must not exceed train.steps=100",
    };
    for (const QString& e : expected) QVERIFY2(lines.contains(e), qPrintable("missing: " + e + "\ngot:\n" + lines.join("\n")));
    // Each problem is one line that says where it is.
    for (const QString& l : lines) QVERIFY2(l.startsWith("many.yaml:") || l.startsWith("many.yaml: "), qPrintable(l));
    QCOMPARE(lines.size(), QSet<QString>(lines.begin(), lines.end()).size());  // no problem twice
  }

  void missingModelShapeIsReportedPerKey() {
    auto c = parse_config("name: x\n", "empty.yaml");
    QVERIFY(!c.ok());
    QCOMPARE(error_lines(c), (QStringList{
                                 "empty.yaml: model.layers: required; give the model shape (model.layers, model.hidden, model.heads)",
                                 "empty.yaml: model.hidden: required; give the model shape (model.layers, model.hidden, model.heads)",
                                 "empty.yaml: model.heads: required; give the model shape (model.layers, model.hidden, model.heads)",
                             }));
  }

  void yamlSyntaxErrors_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QString>("line");
    QTest::newRow("unclosed flow mapping") << "model: {layers: 4, hidden: 64\n"
                                           << "bad.yaml: line 2, column 1: while parsing a flow mapping: did not find expected ',' or '}'";
    QTest::newRow("duplicate key") << "model: {layers: 4}\nmodel: {layers: 5}\n" << "bad.yaml: line 2, column 1: duplicate key 'model'";
    QTest::newRow("two documents") << "name: a\n---\nname: b\n" << "bad.yaml: line 2, column 1: more than one YAML document; a run configuration is one document";
    QTest::newRow("root is a list") << "- 1\n- 2\n" << "bad.yaml:1: a run configuration is a mapping of sections (name, cluster, model, ...), got a list";
    QTest::newRow("root is text") << "hello\n" << "bad.yaml:1: a run configuration is a mapping of sections (name, cluster, model, ...), got hello";
    QTest::newRow("unknown alias") << "model: *m\n" << "bad.yaml: line 1, column 8: unknown alias *m";
    QTest::newRow("multi-line key shown on one line") << "? |\n  a\n  b\n: 1\n? |\n  a\n  b\n: 2\n" << "bad.yaml: line 5, column 3: duplicate key 'a\\nb\\n'";
  }
  void yamlSyntaxErrors() {
    QFETCH(QString, yaml);
    QFETCH(QString, line);
    auto c = parse_config(yaml.toStdString(), "bad.yaml");
    QVERIFY(!c.ok());
    QVERIFY2(error_lines(c).contains(line), c.status().message().c_str());
  }

  void aliasesAreSharedNotExpanded() {
    // A "billion laughs" document: 9 levels of 9 aliases would be 387 million nodes if copied.
    std::string doc = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 9; ++i) {
      doc += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
      for (int j = 0; j < 9; ++j) doc += std::string(j ? ", " : "") + "*a" + std::to_string(i - 1);
      doc += "]\n";
    }
    QElapsedTimer t;
    t.start();
    auto c = parse_config(doc, "laughs.yaml");
    QVERIFY(!c.ok());
    QVERIFY2(t.elapsed() < 2000, "the aliases were expanded");
    QVERIFY2(error_lines(c).contains("laughs.yaml:1: a0: unknown key; the sections are name, cluster, model, parallel, pipeline, train, backend, comm, launch"),
             c.status().message().c_str());
  }

  void nestingIsBounded() {
    std::string doc = "model: " + std::string(200, '[') + std::string(200, ']') + "\n";
    auto c = parse_config(doc, "deep.yaml");
    QVERIFY(!c.ok());
    QVERIFY2(QString::fromStdString(c.status().message()).contains("nested deeper than 64 levels"), c.status().message().c_str());
  }

  // ---- unknown keys ----

  void unknownKeysSuggestTheClosest_data() {
    QTest::addColumn<QString>("entry");
    QTest::addColumn<QString>("message");
    QTest::newRow("parallel.tpp") << "parallel.tpp: 2" << "parallel.tpp: unknown key; did you mean parallel.tp?";
    QTest::newRow("pipeline.schedul") << "pipeline.schedul: gpipe" << "pipeline.schedul: unknown key; did you mean pipeline.schedule?";
    QTest::newRow("model.hiden") << "model.hiden: 3" << "model.hiden: unknown key; did you mean model.hidden?";
    QTest::newRow("train.micro_bach") << "train.micro_bach: 1" << "train.micro_bach: unknown key; did you mean train.micro_batch?";
    QTest::newRow("cluster.gpus_per_nod") << "cluster.gpus_per_nod: 8" << "cluster.gpus_per_nod: unknown key; did you mean cluster.gpus_per_node?";
    QTest::newRow("misspelt section") << "trian.steps: 3" << "trian: unknown key; the sections are name, cluster, model, parallel, pipeline, train, backend, comm, launch";
    QTest::newRow("key in the wrong section") << "train.tp: 2" << "train.tp: unknown key; did you mean parallel.tp?";
    QTest::newRow("nothing close in a section") << "parallel.banana: 1"
                                                << "parallel.banana: unknown key; parallel keys are dp, tp, pp, cp, cp_comm, ep, expert_tp, tp_mode, tp_depth, order, sequence_parallel, zero, overlap_grad_reduce, grad_bucket_mb";
    QTest::newRow("nothing close at the top") << "zzzzzzzzzz: 1"
                                              << "zzzzzzzzzz: unknown key; the sections are name, cluster, model, parallel, pipeline, train, backend, comm, launch";
    QTest::newRow("device key") << "cluster.device: {base: A100-80GB, memory_gb: 40}" << "cluster.device.memory_gb: unknown key; did you mean cluster.device.memory_gib?";
    QTest::newRow("host key") << "cluster.hosts: [{host: a, slot: 8}]" << "cluster.hosts[0].slot: unknown key; a host has host and slots";
  }
  void unknownKeysSuggestTheClosest() {
    QFETCH(QString, entry);
    QFETCH(QString, message);
    std::string doc = document({entry.toStdString()});
    auto c = parse_config(doc, "keys.yaml");
    QVERIFY(!c.ok());
    bool found = false;
    for (const QString& l : error_lines(c)) found = found || l.endsWith(": " + message);
    QVERIFY2(found, (c.status().message() + "\n---\n" + doc).c_str());
  }

  void suggestKey_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("suggestion");
    QTest::newRow("full path typo") << "parallel.tpp" << "parallel.tp";
    QTest::newRow("leaf alone") << "micro_bach" << "train.micro_batch";
    QTest::newRow("exact key") << "train.lr" << "train.lr";
    QTest::newRow("far from everything") << "completely.unrelated" << "";
    QTest::newRow("empty") << "" << "";
    QTest::newRow("empty leaf") << "parallel." << "";
    QTest::newRow("two letters, nothing in common") << "a0" << "";
    QTest::newRow("two letters, one in common") << "tq" << "parallel.tp";
  }
  void suggestKey() {
    QFETCH(QString, key);
    QFETCH(QString, suggestion);
    QCOMPARE(qs(suggest_key(key.toStdString())), suggestion);
  }

  // Names other frameworks use for our keys (the seed documents' and Megatron's) are answered
  // with the Stagecraft key.
  void foreignKeysNameOurs_data() {
    QTest::addColumn<QString>("entry");
    QTest::addColumn<QString>("ours");
    QTest::newRow("LiBai data_parallel_size") << "parallel.data_parallel_size: 2" << "parallel.dp";
    QTest::newRow("LiBai tensor_parallel_size") << "parallel.tensor_parallel_size: 2" << "parallel.tp";
    QTest::newRow("LiBai pipeline_parallel_size") << "parallel.pipeline_parallel_size: 2" << "parallel.pp";
    QTest::newRow("LiBai pipeline_num_layers") << "model.pipeline_num_layers: 24" << "model.layers";
    QTest::newRow("LiBai custom_pipeline_stage_id") << "pipeline.custom_pipeline_stage_id: [0, 1]" << "pipeline.partition";
    QTest::newRow("Paddle dp_degree") << "parallel.dp_degree: 2" << "parallel.dp";
    QTest::newRow("Paddle mp_degree") << "parallel.mp_degree: 2" << "parallel.tp";
    QTest::newRow("Paddle pp_degree") << "parallel.pp_degree: 2" << "parallel.pp";
    QTest::newRow("Paddle global_batch_size") << "train.global_batch_size: 16" << "train.global_batch";
    QTest::newRow("Paddle micro_batch_size") << "train.micro_batch_size: 2" << "train.micro_batch";
    QTest::newRow("Megatron tensor_model_parallel_size") << "parallel.tensor_model_parallel_size: 8" << "parallel.tp";
    QTest::newRow("Megatron num_layers") << "model.num_layers: 24" << "model.layers";
    QTest::newRow("Megatron hidden_size") << "model.hidden_size: 1024" << "model.hidden";
    QTest::newRow("Megatron num_attention_heads") << "model.num_attention_heads: 16" << "model.heads";
    QTest::newRow("Megatron seq_length") << "model.seq_length: 2048" << "model.seq_len";
    QTest::newRow("DeepSpeed zero_stage") << "parallel.zero_stage: 1" << "parallel.zero";
    QTest::newRow("foreign key at the top") << "tensor_parallel_size: 2" << "parallel.tp";
  }
  void foreignKeysNameOurs() {
    QFETCH(QString, entry);
    QFETCH(QString, ours);
    auto c = parse_config(document({entry.toStdString()}), "foreign.yaml");
    QVERIFY(!c.ok());
    const QString key = entry.section(':', 0, 0);
    const QString expected = key + ": unknown key; Stagecraft calls it " + ours;
    bool found = false;
    for (const QString& l : error_lines(c)) found = found || l.endsWith(": " + expected);
    QVERIFY2(found, c.status().message().c_str());
  }

  // ---- save and load ----

  void roundTripsEveryExampleConfig_data() {
    QTest::addColumn<QString>("path");
    const QStringList files = configs_dir_files();
    QVERIFY(files.size() >= 17);
    for (const QString& f : files) QTest::newRow(qPrintable(QFileInfo(f).fileName())) << f;
  }
  void roundTripsEveryExampleConfig() {
    QFETCH(QString, path);
    auto c = load_config_file(path.toStdString());
    QVERIFY2(c.ok(), c.status().message().c_str());
    const std::string yaml = to_yaml(c.value());
    auto again = parse_config(yaml, "saved.yaml");
    QVERIFY2(again.ok(), (again.status().message() + "\n" + yaml).c_str());
    QVERIFY2(again.value() == c.value(), yaml.c_str());
    QCOMPARE(to_yaml(again.value()), yaml);  // a fixed point
    // Every key is written, defaults included, so that the saved file documents the whole run;
    // only keys the schema marks omit_default are left out while they hold their default (the
    // link speeds' "the device's", the launch.* keys of another program's run).
    static const RunConfig kDefaults;
    for (const auto& key : config_keys()) {
      const std::string leaf = key.substr(key.rfind('.') + 1);
      if (key == "cluster.hosts" && c->cluster.hosts.empty()) continue;  // written only when given
      const KeySpec* spec = find_key(key);
      QVERIFY(spec);
      if (spec->omit_default && field(c.value(), qs(key)) == field(kDefaults, qs(key))) continue;
      QVERIFY2(yaml.find(leaf + ":") != std::string::npos, key.c_str());
    }
    // Through a file as well.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string saved = dir.filePath("saved.yaml").toStdString();
    QVERIFY(save_config_file(saved, c.value()).ok());
    auto loaded = load_config_file(saved);
    QVERIFY2(loaded.ok(), loaded.status().message().c_str());
    QVERIFY(loaded.value() == c.value());
  }

  void roundTripsUnusualValues_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::newRow("name that reads as a boolean") << QStringList{"name='yes'"};
    QTest::newRow("name that reads as a number") << QStringList{"name='1.5e3'"};
    QTest::newRow("name with spaces and quotes") << QStringList{"name='a \"b\" c'"};
    QTest::newRow("name with a leading dash") << QStringList{"name='-x'"};
    QTest::newRow("name auto") << QStringList{"name='auto'"};
    QTest::newRow("unicode name") << QStringList{"name=模型-α"};
    QTest::newRow("device mapping") << QStringList{"cluster.device={base: H100-SXM, memory_gib: 40.5, bf16_tflops: 500}"};
    QTest::newRow("device from scratch") << QStringList{"cluster.device={name: MI-X, memory_gib: 64, fp32_tflops: 40, bf16_tflops: 400, memory_gbps: 3000}",
                                                        "train.precision=bf16"};
    QTest::newRow("hosts") << QStringList{"cluster.hosts=[{host: 10.0.0.1, slots: 4}, {host: node-b, slots: 4}]"};
    QTest::newRow("explicit stages") << QStringList{"parallel.pp=2", "pipeline.partition=[0,0,0,0,0,1,1,1]"};
    QTest::newRow("interleaved balanced") << QStringList{"parallel.pp=2", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2", "pipeline.partition=balanced"};
    QTest::newRow("every double") << QStringList{"train.lr=1.2345678901234567e-4", "train.min_lr=1e-300", "train.beta1=0.1", "train.hang_timeout_s=1e7",
                                                 "cluster.inter_node_gbps=0.001"};
    QTest::newRow("largest seed") << QStringList{"train.seed=18446744073709551615"};
    QTest::newRow("paths with spaces") << QStringList{"train.data='my data/tokens.bin'", "train.resume='ckpt #3'"};
    QTest::newRow("2.5d") << QStringList{"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2", "model.heads=8"};
    QTest::newRow("order tp-pp-dp") << QStringList{"parallel.order=pp-tp-dp"};
  }
  void roundTripsUnusualValues() {
    QFETCH(QStringList, overrides);
    auto c = parse_config(document({}), "base.yaml", to_std(overrides));
    QVERIFY2(c.ok(), c.status().message().c_str());
    const std::string yaml = to_yaml(c.value());
    auto again = parse_config(yaml, "saved.yaml");
    QVERIFY2(again.ok(), (again.status().message() + "\n" + yaml).c_str());
    QVERIFY2(again.value() == c.value(), yaml.c_str());
  }

  void fileErrors() {
    auto missing = load_config_file("/nonexistent/stagecraft.yaml");
    QVERIFY(!missing.ok());
    QCOMPARE(missing.status().code(), stagecraft::Status::Code::kNotFound);
    QCOMPARE(qs(missing.status().message()), QString("/nonexistent/stagecraft.yaml: no such file"));
    QTemporaryDir dir;
    auto directory = load_config_file(dir.path().toStdString());
    QVERIFY(!directory.ok());
    QCOMPARE(directory.status().code(), stagecraft::Status::Code::kInvalidInput);
    QVERIFY(qs(directory.status().message()).endsWith(": is a directory, expected a file"));
    // A failed save leaves no file behind.
    RunConfig c;
    const stagecraft::Status st = save_config_file(dir.filePath("no/such/dir/x.yaml").toStdString(), c);
    QCOMPARE(st.code(), stagecraft::Status::Code::kIoError);
    QVERIFY(!QFileInfo::exists(dir.filePath("no/such/dir/x.yaml")));
  }
};

QTEST_APPLESS_MAIN(TestConfig)
#include "tst_config.moc"
