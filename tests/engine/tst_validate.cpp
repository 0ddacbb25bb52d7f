// Validation (validate.h, docs/ARCHITECTURE.md §3): every consistency rule, each error naming the key, the
// value and the rule, from a file, from the command line and from a config built in code; dp auto
// and the micro-batch count; integer roots for the 2D/2.5D/3D grids.
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/validate.h"

#include <QtTest>

#include <string>
#include <vector>

using namespace stagecraft::config;
using stagecraft::Result;

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

// LiBai's 3D example as a block document, so that errors point at known lines.
constexpr const char* kRulesYaml =
    "name: rules\n"           // 1
    "cluster:\n"              // 2
    "  nodes: 1\n"            // 3
    "  gpus_per_node: 8\n"    // 4
    "model:\n"                // 5
    "  layers: 24\n"          // 6
    "  hidden: 1024\n"        // 7
    "  heads: 16\n"           // 8
    "  ffn_hidden: 4096\n"    // 9
    "  seq_len: 512\n"        // 10
    "parallel:\n"             // 11
    "  dp: 2\n"               // 12
    "  tp: 2\n"               // 13
    "  pp: 2\n"               // 14
    "pipeline:\n"             // 15
    "  schedule: 1f1b\n"      // 16
    "train:\n"                // 17
    "  global_batch: 16\n"    // 18
    "  micro_batch: 2\n";     // 19

QStringList error_lines(const Result<RunConfig>& r) {
  if (r.ok()) return {};
  return QString::fromStdString(r.status().message()).split('\n');
}

std::vector<std::string> to_std(const QStringList& l) {
  std::vector<std::string> v;
  for (const auto& s : l) v.push_back(s.toStdString());
  return v;
}

}  // namespace

class TestValidate : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // ---- validation rules (docs/ARCHITECTURE.md §3): each names the key, the value and the rule ----

  void rules_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("line");
    // world = dp x tp x pp
    QTest::newRow("dp x tp x pp != world") << QStringList{"parallel.dp=4"}
                                           << "command line: parallel.dp=4: dp x tp x pp = 16 but the cluster has 8 GPUs (1 node x 8); set dp: auto or change the sizes";
    QTest::newRow("dp x tp x pp != world on 2 nodes") << QStringList{"cluster.nodes=2"}
                                                      << "rules.yaml:12: parallel.dp=2: dp x tp x pp = 8 but the cluster has 16 GPUs (2 nodes x 8); set dp: auto or change the sizes";
    QTest::newRow("dp auto: world not divisible (DESIGN's example)") << QStringList{"parallel.dp=auto", "parallel.tp=3"}
                                                                     << "command line: parallel.tp=3: 8 GPUs are not divisible by tp x pp = 6";
    QTest::newRow("dp auto: tp x pp above world") << QStringList{"parallel.dp=auto", "parallel.tp=8", "parallel.pp=2"}
                                                  << "command line: parallel.tp=8: tp x pp = 16 is more than the 8 GPUs of the cluster (1 node x 8)";
    QTest::newRow("dp auto: pp alone above world") << QStringList{"parallel.dp=auto", "parallel.tp=1", "parallel.pp=16"}
                                                   << "command line: parallel.pp=16: tp x pp = 16 is more than the 8 GPUs of the cluster (1 node x 8)";
    // world = dp x tp x cp x pp; cp splits the sequence into 2 x cp chunks
    QTest::newRow("dp x tp x cp x pp != world") << QStringList{"parallel.cp=2"}
                                                << "rules.yaml:12: parallel.dp=2: dp x tp x cp x pp = 16 but the cluster has 8 GPUs (1 node x 8); set dp: auto or change the sizes";
    QTest::newRow("dp auto: tp x cp x pp above world") << QStringList{"parallel.dp=auto", "parallel.cp=4"}
                                                       << "rules.yaml:13: parallel.tp=2: tp x cp x pp = 16 is more than the 8 GPUs of the cluster (1 node x 8)";
    QTest::newRow("cp alone: world not divisible") << QStringList{"parallel.dp=auto", "parallel.tp=1", "parallel.pp=1", "parallel.cp=3"}
                                                   << "command line: parallel.cp=3: 8 GPUs are not divisible by tp x cp x pp = 3";
    QTest::newRow("2 x cp must divide seq_len") << QStringList{"parallel.dp=auto", "parallel.pp=1", "parallel.cp=4", "model.seq_len=500"}
                                                << "command line: parallel.cp=4: context parallelism splits model.seq_len=500 into 2 x cp = 8 chunks, so 2 x cp must divide it";
    QTest::newRow("Ulysses needs cp to divide the heads") << QStringList{"parallel.dp=1", "parallel.pp=1", "parallel.tp=2", "parallel.cp=4", "model.heads=4", "parallel.cp_comm=all_to_all"}
                                                          << "command line: parallel.cp_comm=all_to_all: exchanges heads over the cp=4 ranks, so cp must divide the 2 query and 2 key/value heads of each tp rank; use cp_comm: ring";
    QTest::newRow("cp with a 2d tensor grid") << QStringList{"parallel.dp=1", "parallel.pp=1", "parallel.tp=4", "parallel.cp=2", "parallel.tp_mode=2d"}
                                              << "command line: parallel.cp=2: context parallelism goes with tp_mode 1d; set cp: 1 or tp_mode: 1d";
    // TP divides heads and ffn_hidden
    QTest::newRow("tp does not divide heads") << QStringList{"parallel.dp=auto", "parallel.tp=8", "parallel.pp=1", "model.heads=4"}
                                              << "command line: parallel.tp=8: tp must divide model.heads=4 so that every rank holds whole heads";
    QTest::newRow("tp does not divide ffn_hidden") << QStringList{"model.ffn_hidden=4095"}
                                                   << "rules.yaml:13: parallel.tp=2: tp must divide model.ffn_hidden=4095";
    QTest::newRow("heads do not divide hidden") << QStringList{"model.heads=24"}
                                                << "command line: model.heads=24: must divide model.hidden=1024 (each head gets hidden / heads channels)";
    // architectures and grouped-query attention
    QTest::newRow("unknown architecture") << QStringList{"model.arch=bert"}
                                          << "command line: model.arch=bert: must be gpt2 (GPT-2 family; gpt is its older name) or llama (Llama, Mistral, Qwen2: RMSNorm, SwiGLU, rotary positions, grouped-query attention)";
    QTest::newRow("kv_heads divides heads") << QStringList{"model.arch=llama", "model.kv_heads=3"}
                                            << "command line: model.kv_heads=3: must divide model.heads=16 (each key/value head serves a whole group of query heads)";
    QTest::newRow("tp divides kv_heads") << QStringList{"model.arch=llama", "model.kv_heads=1"}
                                         << "rules.yaml:13: parallel.tp=2: tp must divide model.kv_heads=1 so that every rank holds whole key/value heads";
    QTest::newRow("gqa needs llama") << QStringList{"model.kv_heads=4"}
                                     << "command line: model.kv_heads=4: grouped-query attention needs model.arch: llama; gpt2 has one key/value head per query head";
    QTest::newRow("qkv_bias needs llama") << QStringList{"model.qkv_bias=true"}
                                          << "command line: model.qkv_bias=true: applies to model.arch: llama (gpt2 has biases on every projection already)";
    QTest::newRow("gpt2's LayerNorm eps") << QStringList{"model.norm_eps=1e-6"}
                                          << "command line: model.norm_eps=1e-06: gpt2's LayerNorm uses 1e-5; other values need model.arch: llama";
    QTest::newRow("rope needs an even head size") << QStringList{"model.arch=llama", "model.hidden=1040", "model.heads=16", "model.ffn_hidden=4096"}
                                                  << "command line: model.heads=16: gives a head size of 65; rotary positions need an even head size";
    QTest::newRow("head_dim needs llama") << QStringList{"model.head_dim=128"}
                                          << "command line: model.head_dim=128: a head size apart from hidden / heads needs model.arch: llama";
    QTest::newRow("odd head_dim") << QStringList{"model.arch=llama", "model.head_dim=65"}
                                  << "command line: model.head_dim=65: rotary positions need an even head size";
    QTest::newRow("qk_norm needs llama") << QStringList{"model.qk_norm=true"} << "command line: model.qk_norm=true: q/k RMSNorm needs model.arch: llama";
    QTest::newRow("experts need llama") << QStringList{"model.moe.experts=8"}
                                        << "command line: model.moe.experts=8: mixture-of-experts layers need model.arch: llama (SwiGLU experts)";
    QTest::newRow("top_k above experts") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.top_k=5"}
                                         << "command line: model.moe.top_k=5: must be between 1 and model.moe.experts=4";
    QTest::newRow("top_k zero") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.top_k=0"}
                                << "command line: model.moe.top_k=0: must be between 1 and 65536";
    QTest::newRow("every layer dense") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.dense_layers=24"}
                                       << "command line: model.moe.dense_layers=24: must be below model.layers=24 so that some layers have experts";
    QTest::newRow("capacity below 1") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.capacity_factor=0.5"}
                                      << "command line: model.moe.capacity_factor=0.5: must be 0 (dropless) or at least 1 (each expert's even share of the tokens)";
    QTest::newRow("router") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.router=sinkhorn"}
                            << "command line: model.moe.router=sinkhorn: expected softmax_topk";
    QTest::newRow("shared width without shared experts") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.shared_ffn_hidden=512"}
                                                         << "command line: model.moe.shared_ffn_hidden=512: sizes the shared experts; set model.moe.shared_experts too, or remove it";
    QTest::newRow("tp divides the shared experts' width") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.shared_experts=1", "model.moe.shared_ffn_hidden=1023"}
                                                          << "rules.yaml:13: parallel.tp=2: tp must divide model.moe.shared_ffn_hidden=1023";
    // expert parallelism folds over the tp x cp x dp ranks of a stage (2 x 1 x 2 here)
    QTest::newRow("ep needs experts") << QStringList{"parallel.ep=2"}
                                      << "command line: parallel.ep=2: splits the experts of mixture-of-experts layers and model.moe.experts is 0; set ep: 1";
    QTest::newRow("expert_tp needs experts") << QStringList{"parallel.expert_tp=2"}
                                             << "command line: parallel.expert_tp=2: splits the experts of mixture-of-experts layers and model.moe.experts is 0; set expert_tp: 1";
    QTest::newRow("ep divides experts") << QStringList{"model.arch=llama", "model.moe.experts=6", "parallel.ep=4"}
                                        << "command line: parallel.ep=4: must divide model.moe.experts=6 so that every ep rank holds as many experts";
    QTest::newRow("ep folds over a stage") << QStringList{"model.arch=llama", "model.moe.experts=8", "parallel.ep=8"}
                                           << "command line: parallel.ep=8: ep x expert_tp = 8 must divide the 4 ranks of a pipeline stage (tp x cp x dp = 2 x 1 x 2)";
    QTest::newRow("ep x expert_tp folds over a stage") << QStringList{"model.arch=llama", "model.moe.experts=8", "parallel.ep=2", "parallel.expert_tp=4"}
                                                       << "command line: parallel.ep=2: ep x expert_tp = 8 must divide the 4 ranks of a pipeline stage (tp x cp x dp = 2 x 1 x 2)";
    QTest::newRow("expert_tp divides the expert width") << QStringList{"model.arch=llama", "model.moe.experts=4", "model.moe.ffn_hidden=1023", "parallel.expert_tp=2"}
                                                        << "command line: parallel.expert_tp=2: must divide model.moe.ffn_hidden=1023";
    QTest::newRow("ep with pp inside dp") << QStringList{"model.arch=llama", "model.moe.experts=4", "parallel.ep=4", "parallel.order=tp-pp-dp"}
                                          << "command line: parallel.order=tp-cp-pp-dp: the expert layers' pipeline neighbours (ep x expert_tp inside) would be 4 ranks apart and the attention layers' 2; put pp last (tp-cp-dp-pp) or make ep x expert_tp equal tp x cp";
    QTest::newRow("ep's place in the order") << QStringList{"parallel.order=tp-dp-ep-pp"}
                                             << "command line: parallel.order=tp-dp-ep-pp: must name tp, dp and pp once each, cp at most once and ep, if at all, right after cp (or tp), innermost first (e.g. tp-cp-dp-pp, tp-cp-ep-dp-pp, tp-pp-dp)";
    QTest::newRow("unknown moe key") << QStringList{"model.arch=llama", "model.moe.expert=4"}
                                     << "command line: model.moe.expert: unknown key; did you mean model.moe.experts?";
    // tp_mode grids
    QTest::newRow("2d needs a square") << QStringList{"parallel.tp_mode=2d"}
                                       << "rules.yaml:13: parallel.tp=2: tp_mode 2d arranges the TP group as an N x N grid, so tp must be a square (4, 9, 16, ...)";
    QTest::newRow("2.5d needs N^2 x depth") << QStringList{"parallel.dp=1", "parallel.tp=4", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}
                                            << "command line: parallel.tp=4: tp_mode 2.5d needs tp = N x N x tp_depth (tp_depth=2), e.g. 8 with depth 2";
    QTest::newRow("2.5d depth does not divide tp") << QStringList{"parallel.dp=1", "parallel.tp=4", "parallel.tp_mode=2.5d", "parallel.tp_depth=3"}
                                                   << "command line: parallel.tp=4: tp_mode 2.5d needs tp = N x N x tp_depth (tp_depth=3), e.g. 8 with depth 2";
    QTest::newRow("3d needs a cube") << QStringList{"parallel.dp=1", "parallel.tp=4", "parallel.tp_mode=3d"}
                                     << "command line: parallel.tp=4: tp_mode 3d arranges the TP group as an N x N x N cube, so tp must be a cube (8, 27, 64, ...)";
    QTest::newRow("depth without 2.5d") << QStringList{"parallel.tp_depth=2"}
                                        << "command line: parallel.tp_depth=2: only tp_mode 2.5d has a depth; remove it or set tp_mode: 2.5d";
    QTest::newRow("grid side divides hidden") << QStringList{"parallel.dp=2", "parallel.tp=4", "parallel.pp=1", "parallel.tp_mode=2d", "model.hidden=1023", "model.heads=3"}
                                              << "command line: parallel.tp=4: the TP grid side N (N=2) must divide model.hidden=1023";
    QTest::newRow("grid side divides heads") << QStringList{"parallel.dp=1", "parallel.tp=8", "parallel.pp=1", "parallel.tp_mode=3d", "model.heads=1"}
                                             << "command line: parallel.tp=8: the TP grid side N (N=2) must divide model.heads=1 so that every rank holds whole heads";
    QTest::newRow("sequence parallel: tp divides seq_len") << QStringList{"parallel.sequence_parallel=true", "model.seq_len=511"}
                                                           << "command line: parallel.sequence_parallel=true: sequence parallelism splits the sequence over tp=2 ranks, so tp must divide model.seq_len=511";
    QTest::newRow("sequence parallel only with 1d") << QStringList{"parallel.dp=2", "parallel.tp=4", "parallel.pp=1", "parallel.tp_mode=2d", "parallel.sequence_parallel=true"}
                                                    << "command line: parallel.sequence_parallel=true: Megatron sequence parallelism goes with tp_mode 1d";
    // pp <= layers (x virtual stages)
    QTest::newRow("pp above layers") << QStringList{"model.layers=1"}
                                     << "rules.yaml:14: parallel.pp=2: more pipeline stages than the model's 1 layers; every stage needs at least one layer";
    QTest::newRow("pp x v above layers") << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=16"}
                                         << "rules.yaml:14: parallel.pp=2: pp x virtual_stages = 32 model chunks but the model has only 24 layers";
    // interleaved
    QTest::newRow("interleaved needs pp > 1") << QStringList{"parallel.dp=4", "parallel.pp=1", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}
                                              << "command line: pipeline.schedule=interleaved: needs pipeline parallelism (parallel.pp > 1)";
    QTest::newRow("interleaved needs v >= 2") << QStringList{"pipeline.schedule=interleaved"}
                                              << "rules.yaml: pipeline.virtual_stages=1: the interleaved schedule needs 2 or more virtual stages (model chunks) per pp rank";
    QTest::newRow("v > 1 needs interleaved") << QStringList{"pipeline.virtual_stages=2"}
                                             << "command line: pipeline.virtual_stages=2: only the interleaved schedule runs several model chunks per pp rank; set schedule: interleaved or virtual_stages: 1";
    QTest::newRow("interleaved needs m multiple of pp") << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2", "train.global_batch=12"}
                                                        << "command line: train.global_batch=12: the interleaved schedule needs the micro-batch count m = 3 to be a multiple of pp = 2";
    // stage-id lists
    QTest::newRow("stage list too short") << QStringList{"pipeline.partition=[0,1]"}
                                          << "command line: pipeline.partition=a list of 2 stage ids: needs one stage id per layer, 24 in all (model.layers)";
    QTest::newRow("stage id out of range") << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,0,0,0,0,0,1,1,1,1,1,1,1,1,1,1,1,2]"}
                                           << "command line: pipeline.partition=a list of 24 stage ids: layer 23 has stage 2, outside [0, 2)";
    QTest::newRow("stage ids decrease") << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,0,0,0,0,0,1,1,1,1,1,1,1,1,1,1,0,1]"}
                                        << "command line: pipeline.partition=a list of 24 stage ids: stage ids must not decrease (layer 22 goes back from stage 1 to 0); stages hold contiguous layers";
    QTest::newRow("empty stage") << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]"}
                                 << "command line: pipeline.partition=a list of 24 stage ids: stage 1 has no layer; every stage needs at least one";
    QTest::newRow("interleaved list counts chunks") << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2",
                                                                   "pipeline.partition=[0,0,0,0,0,0,1,1,1,1,1,1,2,2,2,2,2,2,2,2,2,2,2,2]"}
                                                    << "command line: pipeline.partition=a list of 24 stage ids: stage 3 has no layer; every stage needs at least one";
    // batch
    QTest::newRow("global batch not divisible by dp x micro") << QStringList{"train.global_batch=15"}
                                                              << "command line: train.global_batch=15: must be a multiple of dp x micro_batch = 2 x 2 = 4 (a whole number of micro-batches per replica)";
    QTest::newRow("micro batch does not fit") << QStringList{"train.micro_batch=16"}
                                              << "rules.yaml:18: train.global_batch=16: must be a multiple of dp x micro_batch = 2 x 16 = 32 (a whole number of micro-batches per replica)";
    QTest::newRow("dp auto batch uses the inferred dp") << QStringList{"parallel.dp=auto", "parallel.tp=1", "parallel.pp=1", "train.global_batch=12", "train.micro_batch=1"}
                                                        << "command line: train.global_batch=12: must be a multiple of dp x micro_batch = 8 x 1 = 8 (a whole number of micro-batches per replica)";
    // train and device
    QTest::newRow("min_lr above lr") << QStringList{"train.lr=0.1", "train.min_lr=1"} << "command line: train.min_lr=1: must not exceed train.lr=0.1";
    QTest::newRow("warm-up longer than the run") << QStringList{"train.warmup_steps=200"} << "command line: train.warmup_steps=200: must not exceed train.steps=100";
    QTest::newRow("unknown device") << QStringList{"cluster.device=A100-80G"}
                                    << "command line: cluster.device=A100-80G: unknown device; did you mean A100-80GB? (stagecraft-cli devices lists them; a mapping with name and figures defines a new one)";
    QTest::newRow("device without the precision") << QStringList{"cluster.device=V100", "train.precision=bf16"}
                                                   << "command line: train.precision=bf16: V100 has no bf16 math; use fp16";
    // train.kernels: CUDA paths of work the run has
    QTest::newRow("kernels need backend cuda") << QStringList{"train.attention=flash", "train.precision=bf16", "train.kernels.flash=wgmma"}
                                               << "command line: train.kernels.flash=wgmma: chooses among the CUDA backend's kernels and backend is cpu; set backend: cuda or remove the key";
    QTest::newRow("flash kernels need the fused attention") << QStringList{"backend=cuda", "train.precision=bf16", "train.kernels.flash=mma_sync"}
                                                            << "command line: train.kernels.flash=mma_sync: chooses the fused attention's kernels; set train.attention: flash";
    QTest::newRow("tensor-core attention needs bf16") << QStringList{"backend=cuda", "train.attention=flash", "train.kernels.flash=wgmma"}
                                                      << "command line: train.kernels.flash=wgmma: the tensor-core attention takes q, k and v in bf16; set train.precision: bf16 or flash: cuda_cores";
    QTest::newRow("the ring has its own attention kernels") << QStringList{"backend=cuda", "train.attention=flash", "train.precision=bf16", "parallel.dp=1", "parallel.cp=2", "train.kernels.flash=cuda_cores"}
                                                            << "command line: train.kernels.flash=cuda_cores: parallel.cp 2 with cp_comm ring attends by the ring's own block kernels; remove the key or set cp_comm: all_to_all";
    QTest::newRow("cuBLASLt epilogues serve 16-bit GEMMs") << QStringList{"backend=cuda", "train.kernels.gemm_bias=cublaslt"}
                                                           << "command line: train.kernels.gemm_bias=cublaslt: cuBLASLt's bias epilogues serve the 16-bit GEMMs; set train.precision: bf16 or fp16, or gemm_bias: auto";
    QTest::newRow("a separate bias needs backend cuda") << QStringList{"train.kernels.gemm_bias=separate"}
                                                        << "command line: train.kernels.gemm_bias=separate: chooses among the CUDA backend's kernels and backend is cpu; set backend: cuda or remove the key";
    QTest::newRow("RMSNorm has one backward") << QStringList{"backend=cuda", "model.arch=llama", "train.kernels.layernorm_backward_warps=8"}
                                              << "command line: train.kernels.layernorm_backward_warps=8: model.arch llama normalises with RMSNorm, which has one backward kernel; remove the key";
    QTest::newRow("layernorm warps: 4 or 8") << QStringList{"backend=cuda", "train.kernels.layernorm_backward_warps=16"}
                                             << "command line: train.kernels.layernorm_backward_warps=16: expected auto, 4 or 8";
    QTest::newRow("unknown flash kernels") << QStringList{"backend=cuda", "train.kernels.flash=tensor_cores"}
                                           << "command line: train.kernels.flash=tensor_cores: expected auto, mma_sync, wgmma or cuda_cores";
    // comm
    QTest::newRow("nccl needs the GPU backend") << QStringList{"comm=nccl"}
                                                << "command line: comm=nccl: NCCL exchanges GPU memory and backend=cpu keeps tensors in host memory; set comm: gloo (or auto)";
    // hosts
    QTest::newRow("hosts with unequal slots") << QStringList{"cluster.hosts=[{host: a, slots: 4}, {host: b, slots: 2}]"}
                                              << "command line: cluster.hosts: unequal slots (a 4, b 2); every node must run the same number of ranks, so give each host the same slots";
    QTest::newRow("hosts disagree with nodes") << QStringList{"cluster.hosts=[{host: a, slots: 8}, {host: b, slots: 8}]"}
                                               << "rules.yaml:3: cluster.nodes=1: cluster.hosts lists 2 hosts; remove nodes or make them agree";
    QTest::newRow("host listed twice") << QStringList{"cluster.nodes=2", "cluster.hosts=[{host: a, slots: 8}, {host: a, slots: 8}]"}
                                       << "command line: cluster.hosts[1].host=a: listed twice";
    QTest::newRow("host without slots") << QStringList{"cluster.hosts=[{host: a}]"} << "command line: cluster.hosts[0]: missing slots";
  }
  void rules() {
    QFETCH(QStringList, overrides);
    QFETCH(QString, line);
    auto c = parse_config(kRulesYaml, "rules.yaml", to_std(overrides));
    QVERIFY2(!c.ok(), "the config was accepted");
    QVERIFY2(error_lines(c).contains(line), c.status().message().c_str());
    QCOMPARE(c.status().code(), stagecraft::Status::Code::kInvalidInput);
    // The base document itself is valid: the override broke the rule.
    QVERIFY(parse_config(kRulesYaml, "rules.yaml").ok());
  }

  // validate() on a config built in code (as the GUI edits one): the key of every issue.
  void validateNamesTheKey_data() {
    QTest::addColumn<QString>("change");
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("message");
    QTest::newRow("world") << "dp=3" << "parallel.dp" << "parallel.dp=3: dp x tp x pp = 12 but the cluster has 8 GPUs (1 node x 8); set dp: auto or change the sizes";
    QTest::newRow("heads") << "tp=8" << "parallel.tp" << "parallel.tp=8: tp must divide model.heads=4 so that every rank holds whole heads";
    QTest::newRow("pp") << "pp=32" << "parallel.pp" << "parallel.pp=32: more pipeline stages than the model's 24 layers; every stage needs at least one layer";
    QTest::newRow("stage ids") << "ids" << "pipeline.partition" << "pipeline.partition=a list of 24 stage ids: stage 1 has no layer; every stage needs at least one";
    QTest::newRow("batch") << "batch" << "train.global_batch" << "train.global_batch=10: must be a multiple of dp x micro_batch = 2 x 2 = 4 (a whole number of micro-batches per replica)";
    QTest::newRow("layers") << "layers=0" << "model.layers" << "model.layers=0: required; the number of transformer blocks";
  }
  void validateNamesTheKey() {
    QFETCH(QString, change);
    QFETCH(QString, key);
    QFETCH(QString, message);
    RunConfig c;
    c.model.layers = 24;
    c.model.hidden = 1024;
    c.model.heads = 4;
    c.parallel = {.dp = 2, .tp = 2, .pp = 2};
    c.train.global_batch = 16;
    c.train.micro_batch = 2;
    QVERIFY(validate(c).empty());
    if (change == "dp=3") {
      c.parallel.dp = 3;
    } else if (change == "tp=8") {
      c.parallel = {.dp = 1, .tp = 8, .pp = 1};
    } else if (change == "pp=32") {
      c.parallel = {.dp = 0, .tp = 1, .pp = 32};
      c.cluster.nodes = 4;
    } else if (change == "ids") {
      c.pipeline.partition = PartitionKind::kExplicit;
      c.pipeline.stage_ids.assign(24, 0);
    } else if (change == "batch") {
      c.train.global_batch = 10;
    } else if (change == "layers=0") {
      c.model.layers = 0;
    } else {
      QFAIL("unknown change");
    }
    const auto issues = validate(c);
    QVERIFY(!issues.empty());
    bool found = false;
    for (const auto& i : issues) found = found || (qs(i.key) == key && qs(i.message) == message);
    QStringList all;
    for (const auto& i : issues) all << qs(i.key) + " | " + qs(i.message);
    QVERIFY2(found, qPrintable(all.join("\n")));
  }

  void dpAutoAndMicroBatches_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("m");
    // LiBai: only tp and pp set, dp = 8 / (2 x 2) = 2.
    QTest::newRow("LiBai dp = 8 / (2 x 2)") << QStringList{"parallel.dp=auto"} << 2 << 4;
    QTest::newRow("LiBai pure PP") << QStringList{"parallel.dp=auto", "parallel.tp=1", "parallel.pp=8"} << 1 << 8;
    QTest::newRow("Colossal-AI tensor 4, dp inferred") << QStringList{"parallel.dp=auto", "parallel.tp=4", "parallel.pp=1"} << 2 << 4;
    QTest::newRow("two nodes") << QStringList{"parallel.dp=auto", "cluster.nodes=2", "train.global_batch=32"} << 4 << 4;
    // Paddle: global 16, dp 2, accumulate_steps 2 -> micro_batch_size = 16 // 2 // 2 = 4.
    QTest::newRow("Paddle accumulate_steps 2") << QStringList{"train.micro_batch=4"} << 2 << 2;
  }
  void dpAutoAndMicroBatches() {
    QFETCH(QStringList, overrides);
    QFETCH(int, dp);
    QFETCH(int, m);
    auto c = parse_config(kRulesYaml, "rules.yaml", to_std(overrides));
    QVERIFY2(c.ok(), c.status().message().c_str());
    QCOMPARE(resolved_dp(c.value()), dp);
    QCOMPARE(micro_batches(c.value()), m);
  }

  void integerRoots_data() {
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("root");
    QTest::newRow("4 square") << 4 << 2 << 2;
    QTest::newRow("8 not square") << 8 << 2 << 0;
    QTest::newRow("8 cube") << 8 << 3 << 2;
    QTest::newRow("1 square") << 1 << 2 << 1;
    QTest::newRow("0 none") << 0 << 2 << 0;
    QTest::newRow("negative none") << -4 << 2 << 0;
    QTest::newRow("46340^2") << 46340 * 46340 << 2 << 46340;
    QTest::newRow("1290^3") << 1290 * 1290 * 1290 << 3 << 1290;
    QTest::newRow("1290^3 + 1") << 1290 * 1290 * 1290 + 1 << 3 << 0;
    QTest::newRow("int max") << 2147483647 << 2 << 0;
  }
  void integerRoots() {
    QFETCH(int, v);
    QFETCH(int, k);
    QFETCH(int, root);
    QCOMPARE(integer_root(v, k), root);
  }
};

QTEST_APPLESS_MAIN(TestValidate)
#include "tst_validate.moc"
