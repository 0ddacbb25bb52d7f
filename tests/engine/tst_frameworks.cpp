// Export to and import from other frameworks (frameworks.h) and the Python evaluator behind the
// import (python_literal.h): values the evaluator computes and those it reports as unevaluable,
// files it rejects with their line, inputs that must neither hang nor crash; LiBai's own stage
// rule; golden exports of the seed documents' examples; Megatron's split flags and layout; every
// Megatron flag written checked against Megatron-LM's parser's own list; the
// layouts each framework refuses and the differences it notes; the seed documents' examples
// imported with the groups they describe; import errors with their lines; and every
// configs/*.yaml exported and imported back through every format with an import.
#include "stagecraft/config/config_io.h"
#include "stagecraft/interop/frameworks.h"
#include "stagecraft/interop/python_literal.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>
#include <QFile>
#include <QSet>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

using namespace stagecraft::config;
using namespace stagecraft::interop;
using stagecraft::plan::Plan;

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
std::string configs_dir() { return STAGECRAFT_SOURCE_DIR "/configs/"; }

RunConfig load(const QString& name) {
  auto c = load_config_file(configs_dir() + name.toStdString());
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

Plan plan_of(const RunConfig& c) {
  auto p = stagecraft::plan::make_plan(c);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return p.value();
}

std::vector<int> counts(const Plan& p) {
  std::vector<int> out;
  for (const auto& s : p.stages) out.push_back(s.num_layers);
  return out;
}

QList<int> ql(const std::vector<int>& v) { return QList<int>(v.begin(), v.end()); }

// Megatron's reading of --pipeline-model-parallel-layout (PipelineParallelLayerLayout
// .parse_str_to_list): commas dropped, (...)*n then x*n unrolled, stages split by '|'; here the
// decoder layers ('t') of every stage.
std::vector<int> megatron_layout_counts(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  const std::regex group(R"(\(([^)]+)\)\*(\d+))"), single(R"((.)\*(\d+))");
  for (const auto* re : {&group, &single}) {
    std::smatch m;
    while (std::regex_search(s, m, *re)) {
      std::string rep;
      for (int k = 0; k < std::stoi(m[2]); ++k) rep += m[1];
      s = m.prefix().str() + rep + m.suffix().str();
    }
  }
  std::vector<int> out(1, 0);
  for (char ch : s) {
    if (ch == '|') out.push_back(0);
    else if (ch == 't') ++out.back();
  }
  return out;
}

QString int_list(const std::vector<int>& v) {
  QStringList parts;
  for (int x : v) parts << QString::number(x);
  return "[" + parts.join(", ") + "]";
}


// The names of a list in tests/engine/data (one a line, # comments).
QSet<QString> names_in(const char* file) {
  QSet<QString> out;
  QFile f(QString(STAGECRAFT_SOURCE_DIR "/tests/engine/data/") + file);
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) qFatal("cannot read %s", qPrintable(f.fileName()));
  for (const QByteArray& line : f.readAll().split('\n')) {
    const QString l = QString::fromUtf8(line).trimmed();
    if (!l.isEmpty() && !l.startsWith('#')) out.insert(l);
  }
  return out;
}

// Megatron-LM's option names: tests/engine/data/megatron_lm_flags.txt lists what its parse_args
// registers (add_argument names and those generated from its config dataclasses) at the commit
// its header names.
const QSet<QString>& megatron_lm_flags() {
  static const QSet<QString> flags = names_in("megatron_lm_flags.txt");
  return flags;
}

// The Megatron flags an export passes: every `--` token in its MEGATRON_ARGS array and after
// pretrain_gpt.py on the launch line (torchrun's own flags come before it).
QStringList megatron_flags_written(const QString& text) {
  QStringList out;
  const qsizetype begin = text.indexOf("MEGATRON_ARGS=(\n"), end = text.indexOf("\n)\n", begin);
  if (begin < 0 || end < 0) return out;
  const qsizetype script = text.indexOf("pretrain_gpt.py", end);
  QString words = text.mid(begin, end - begin);
  if (script >= 0) words += " " + text.mid(script, text.indexOf('\n', script) - script);
  for (const auto& w : words.split(QRegularExpression("\\s+"), Qt::SkipEmptyParts)) {
    if (w.startsWith("--")) out << w;
  }
  return out;
}

// The commented launch line of a Megatron export, the one that runs torchrun.
QString megatron_launch_line(const QString& text) {
  for (const auto& line : text.split('\n')) {
    if (line.contains("torchrun --nnodes")) return line;
  }
  return {};
}

// Layouts that between them reach every branch of export_megatron and megatron_arch_args.
struct MegatronVariant {
  const char* name;
  const char* config;
  QStringList overrides;
};
std::vector<MegatronVariant> megatron_variants() {
  return {
      {"tp 1, pp 4, fp16", "libai-bert-dp2-pp4.yaml", {}},
      {"interleaved on pp 2", "libai-bert-dp2-pp4.yaml", {"parallel.pp=2", "parallel.dp=4", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}},
      {"interleaved on pp 4", "libai-bert-dp2-pp4.yaml", {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}},
      {"interleaved, uneven first rank", "libai-bert-dp2-pp4.yaml",
       {"model.layers=22", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2",
        "pipeline.partition=[0,0,1,1,1,2,2,2,3,3,3,4,4,5,5,5,6,6,6,7,7,7]"}},
      {"interleaved, chunks of one rank differ: layout", "libai-bert-dp2-pp4.yaml",
       {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2", "pipeline.partition=[0,0,0,0,1,1,1,2,2,2,3,3,3,4,4,4,5,5,5,6,6,6,7,7]"}},
      {"first and last differ", "libai-bert-dp2-pp4.yaml", {"pipeline.partition=[0,0,0,0,0,0,1,1,1,1,1,1,1,2,2,2,2,2,2,2,3,3,3,3]"}},
      {"middle stages differ: layout", "libai-bert-dp2-pp4.yaml", {"pipeline.partition=[0,0,0,0,0,1,1,1,1,1,1,1,2,2,2,2,2,2,3,3,3,3,3,3]"}},
      {"zero 1, bf16, warmup", "bert-large-3d.yaml", {"parallel.zero=1", "train.precision=bf16", "train.warmup_steps=100"}},
      {"sequence parallel, fp16", "bert-large-3d.yaml", {"parallel.sequence_parallel=true", "train.precision=fp16"}},
      {"sequence parallel asked on tp 1", "libai-bert-dp2-pp4.yaml", {"parallel.sequence_parallel=true"}},
      {"recompute full", "bert-large-3d.yaml", {"train.recompute=full"}},
      {"recompute selective", "bert-large-3d.yaml", {"train.recompute=selective"}},
      {"overlapped grad reduce, 5 MiB buckets, tp-pp-dp", "paddle-gpt-dp2-mp2-pp2.yaml", {"parallel.grad_bucket_mb=5"}},
      {"grad reduce after the backward", "paddle-gpt-dp2-mp2-pp2.yaml", {"parallel.overlap_grad_reduce=false"}},
      {"GPT-2 untied", "paddle-gpt-dp2-mp2-pp2.yaml", {"model.tied_embeddings=false"}},
      {"Llama 3 8B: GQA, untied", "llama3-8b-1x8.yaml", {}},
      {"Qwen2-like: qkv bias, norm eps, no GQA", "llama3-8b-1x8.yaml", {"model.qkv_bias=true", "model.norm_eps=1e-6", "model.kv_heads=32"}},
      {"Mixtral: 8 experts over ep 8", "mixtral-8x7b-8x8.yaml", {"parallel.ep=8"}},
      {"Qwen3-MoE: q/k norm, head size, a dense layer, shared experts, capacity, pre-softmax, expert tp", "qwen3-30b-a3b-2x8.yaml",
       {"parallel.ep=4", "parallel.expert_tp=2", "model.moe.dense_layers=1", "model.moe.shared_experts=2", "model.moe.shared_ffn_hidden=512",
        "model.moe.capacity_factor=1.25", "model.moe.norm_topk=false", "model.moe.aux_loss=0"}},
  };
}

RunConfig load(const QString& name, const QStringList& overrides) {
  std::vector<std::string> ov;
  for (const auto& o : overrides) ov.push_back(o.toStdString());
  auto c = load_config_file(configs_dir() + name.toStdString(), ov);
  if (!c.ok()) qFatal("%s: %s", qPrintable(name), c.status().message().c_str());
  return c.value();
}

}  // namespace

class TestFrameworks : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // ----------------------------------------------------------------- the Python evaluator
  void pythonEvaluates_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("repr");
    QTest::newRow("LiBai custom_pipeline_stage_id") << "train.dist.custom_pipeline_stage_id = [0]*2 + [1]*3 + [2]*1\n"
                                                    << "train.dist.custom_pipeline_stage_id" << "[0, 0, 1, 1, 1, 2]";
    QTest::newRow("dict() call with nested dicts") << "parallel = dict(\npipeline=dict(size=2),\ntensor=dict(size=4, mode='2d')\n)\n"
                                                   << "parallel" << "{'pipeline': {'size': 2}, 'tensor': {'size': 4, 'mode': '2d'}}";
    QTest::newRow("names and floor division (Paddle seed)") << "G=16\nA=2\nDP=2\nc = {'m': G // DP // A}\n" << "c.m" << "4";
    QTest::newRow("if on an evaluable condition") << "PP=2\nif PP > 1:\n    x = 'pipe'\nelif PP == 1:\n    x = 'flat'\nelse:\n    x = 0\n"
                                                  << "x" << "'pipe'";
    QTest::newRow("else branch") << "PP=1\nif PP > 1: x = 1\nelse: x = 2\n" << "x" << "2";
    QTest::newRow("imported object gains attributes") << "from .common.train import train\ntrain.dist.tensor_parallel_size = 8\n"
                                                      << "train.dist.tensor_parallel_size" << "8";
    QTest::newRow("unknown call result gains attributes") << "s = fleet.DistributedStrategy()\ns.hybrid_configs = {'dp_degree': 2}\n"
                                                          << "s.hybrid_configs" << "{'dp_degree': 2}";
    QTest::newRow("subscript and augmented assignment") << "d = {}\nd['k'] = 5\nd['k'] += 1\n" << "d" << "{'k': 6}";
    QTest::newRow("tuple unpacking with a star") << "a, *b = 1, 2, 3\n" << "b" << "[2, 3]";
    QTest::newRow("dict.update statement") << "cfg = dict(a=1)\ncfg.update(b=2)\ncfg.update({'a': 3})\n" << "cfg" << "{'a': 3, 'b': 2}";
    QTest::newRow("list.append statement") << "l = [1]\nl.append(2)\nl.extend([3, 4])\n" << "l" << "[1, 2, 3, 4]";
    QTest::newRow("omegaconf DictConfig keeps the dict") << "train = DictConfig(dict(seed=1))\ntrain.seed = 2\n" << "train" << "{'seed': 2}";
    QTest::newRow("precedence: -2**2 and 7 // -2") << "x = (-2**2, 7 // -2, 7 % -2, 2**10, 1 + 2 * 3)\n" << "x" << "(-4, -4, -1, 1024, 7)";
    QTest::newRow("comparison chains and boolean operators") << "x = (1 < 2 < 3, 1 < 3 < 2, not 0, 0 or 'b', 1 and 2, 3 in [1, 3])\n"
                                                             << "x" << "(True, False, True, 'b', 2, True)";
    QTest::newRow("conditional expression") << "PP = 4\nx = 'a' if PP > 2 else 'b'\n" << "x" << "'a'";
    QTest::newRow("numbers: hex, underscores, floats") << "x = [0x10, 1_000, 1e-3, .5, 2.]\n" << "x" << "[16, 1000, 0.001, 0.5, 2.0]";
    QTest::newRow("strings: implicit concat, escapes, raw") << "s = 'a' \"b\" '\\n' r'\\n' '''c'''\n" << "s" << "'ab\\n\\\\nc'";
    QTest::newRow("builtins") << "x = [len([1, 2]), min(3, 1), max([4, 9]), sum([1, 2, 3]), abs(-2), int('7'), float(2), list(range(3))]\n"
                              << "x" << "[2, 1, 9, 6, 2, 7, 2.0, [0, 1, 2]]";
    QTest::newRow("slices and negative index") << "l = [0, 1, 2, 3]\nx = (l[1:3], l[-1], l[:2])\n" << "x" << "([1, 2], 3, [0, 1])";
    QTest::newRow("dict.get with default") << "d = {'a': 1}\nx = [d.get('a'), d.get('b', 5)]\n" << "x" << "[1, 5]";
    QTest::newRow("backslash continuation and comments") << "x = 1 + \\\n    2  # three\n" << "x" << "3";
    QTest::newRow("semicolons") << "a = 1; b = a + 1\n" << "b" << "2";
    QTest::newRow("def bodies are skipped") << "x = 1\ndef f():\n    x = 2\n    return x\n" << "x" << "1";
    QTest::newRow("with and try bodies run") << "with open('f') as fh:\n    x = 1\ntry:\n    y = x + 1\nexcept Exception:\n    z = 0\n"
                                             << "y" << "2";
  }
  void pythonEvaluates() {
    QFETCH(QString, source);
    QFETCH(QString, name);
    QFETCH(QString, repr);
    auto m = run_python_config(source.toStdString(), "x.py");
    QVERIFY2(m.ok(), m.status().message().c_str());
    const PyValue* v = m->find(name.toStdString());
    QVERIFY2(v, "not set");
    QCOMPARE(qs(py_repr(*v)), repr);
  }

  void pythonOpaque_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("line");
    QTest::addColumn<QString>("why");
    QTest::newRow("undefined name") << "\nx = model.cfg.hidden_layers\n" << "x" << 2 << "the name 'model' is not defined in this file";
    QTest::newRow("lambda") << "x = lambda a: a\n" << "x" << 1 << "a lambda";
    QTest::newRow("list comprehension") << "x = [i for i in range(3)]\n" << "x" << 1 << "a list comprehension";
    QTest::newRow("assigned in a for loop") << "for i in range(2):\n    x = i\n" << "x" << 2 << "inside the `for` loop on line 1";
    QTest::newRow("behind an unknown condition") << "if flag:\n    x = 1\nelse:\n    x = 2\n" << "x" << 4 << "under the condition on line 1";
    QTest::newRow("in an except block") << "try:\n    pass\nexcept:\n    x = 1\n" << "x" << 4 << "`except` block";
    QTest::newRow("in try and in except") << "try:\n    x = 1\nexcept ImportError:\n    x = 2\n" << "x" << 4 << "`except` block on line 3";
    QTest::newRow("f-string") << "x = f'{a}'\n" << "x" << 1 << "f-string";
    QTest::newRow("integer past 64 bits") << "x = 10**30\n" << "x" << 1 << "integer overflow";
    QTest::newRow("literal past 64 bits") << "x = 99999999999999999999\n" << "x" << 1 << "larger than 64 bits";
    QTest::newRow("division by zero") << "x = 1 / 0\n" << "x" << 1 << "division by zero";
    QTest::newRow("attribute of an import") << "from colossalai.amp import AMP_TYPE\nx = AMP_TYPE.TORCH\n" << "x" << 2
                                            << "AMP_TYPE.TORCH is not set in this file";
    QTest::newRow("string plus number") << "x = 'a' + 1\n" << "x" << 1 << "cannot apply '+' to a string and an integer";
    QTest::newRow("repetition past the limit") << "x = [0] * 100000000\n" << "x" << 1 << "more than";
  }
  void pythonOpaque() {
    QFETCH(QString, source);
    QFETCH(QString, name);
    QFETCH(int, line);
    QFETCH(QString, why);
    auto m = run_python_config(source.toStdString(), "x.py");
    QVERIFY2(m.ok(), m.status().message().c_str());
    const PyValue* v = m->find(name.toStdString());
    QVERIFY(v);
    QCOMPARE(v->kind, PyValue::Kind::kOpaque);
    QCOMPARE(v->line, line);
    QVERIFY2(qs(v->s).contains(why), v->s.c_str());
  }

  void pythonRejects_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("message");
    QTest::newRow("unterminated string") << "x = 1\ny = 'abc\n" << "x.py:2: unterminated string";
    QTest::newRow("unterminated triple-quoted string") << "x = '''abc\n\n" << "x.py:1: unterminated string";
    QTest::newRow("bracket never closed") << "x = [1,\n 2\n" << "x.py:1: '[' is never closed";
    QTest::newRow("mismatched bracket") << "x = (1]\n" << "x.py:1: closing ']' does not match '(' on line 1";
    QTest::newRow("unmatched closing bracket") << "x = 1)\n" << "x.py:1: unmatched ')'";
    QTest::newRow("unexpected indent") << "x = 1\n    y = 2\n" << "x.py:2: unexpected indent";
    QTest::newRow("inconsistent dedent") << "if x:\n        y = 1\n    z = 2\n" << "x.py:3: unindent does not match";
    QTest::newRow("if without a body") << "if x:\ny = 1\n" << "x.py:1: expected an indented block after 'if' on line 1";
    QTest::newRow("elif without if") << "elif x:\n    y = 1\n" << "x.py:1: 'elif' without a matching 'if'";
    QTest::newRow("stray character") << "x = 1 $ 2\n" << "x.py:1: invalid character '$'";
    QTest::newRow("NUL byte") << QString("x = 1\n") + QChar(0) << "x.py:2: the file contains a NUL byte";
    QTest::newRow("invalid number") << "x = 12abc\n" << "x.py:1: invalid number";
    QString deep;
    for (int k = 0; k < 120; ++k) deep += QString(k * 2, ' ') + "if True:\n";
    deep += QString(240, ' ') + "x = 1\n";
    QTest::newRow("blocks nested too deep") << deep << "blocks nested deeper than 100 levels";
  }
  void pythonRejects() {
    QFETCH(QString, source);
    QFETCH(QString, message);
    auto m = run_python_config(source.toStdString(), "x.py");
    QVERIFY(!m.ok());
    QVERIFY2(qs(m.status().message()).contains(message), m.status().message().c_str());
  }

  // Hostile inputs finish quickly with a module or an error; the destructor of deeply nested
  // and cyclic values must not overflow the stack.
  void pythonNeverHangsOrCrashes_data() {
    QTest::addColumn<QByteArray>("source");
    QTest::newRow("deep parentheses") << QByteArray("x = ") + QByteArray(5000, '(') + "1" + QByteArray(5000, ')');
    QTest::newRow("deep unary minus") << QByteArray("x = ") + QByteArray(100000, '-') + "1";
    QTest::newRow("unclosed brackets") << QByteArray(100000, '[');
    QTest::newRow("repetition of an empty list") << QByteArray("x = [] * 1000000000000000000\ny = '' * 1000000000000000000\n");
    QByteArray many = "x = []\n";
    for (int k = 0; k < 20; ++k) many += "x = x + [0] * 1000000\n";
    QTest::newRow("list growth past the budget") << many;
    QByteArray chain = "p = {}\nt = p\n";
    for (int k = 0; k < 50000; ++k) chain += "p.a = {}\np = p.a\n";
    chain += "t = 0\n";
    QTest::newRow("50,000-deep nesting, then dropped") << chain;
    QTest::newRow("cycles") << QByteArray("a = {}\na['self'] = a\nb = [0]\nb.append(b)\nx = a == a['self']\nc = [1]\nc.append(c)\nc = 0\n");
    QByteArray wide = "x = 1\n";
    for (int k = 0; k < 50000; ++k) wide += "v" + QByteArray::number(k) + " = {" + QByteArray::number(k) + ": 1}\n";
    QTest::newRow("50,000 globals") << wide;
    QByteArray noise;
    uint32_t state = 12345;
    const char* atoms[] = {"(", ")", "[", "]", "{", "}", ",", ":", "=", "+", "*", "**", "x", "y.z", "1", "'s'", "\n", "\n  ", "if", "for",
                           "lambda", "dict(", "not", ";", ".", "@", "\\", "#", "\"\"\"", "0x", "1e9"};
    for (int k = 0; k < 20000; ++k) {
      state = state * 1664525u + 1013904223u;
      noise += atoms[(state >> 16) % (sizeof atoms / sizeof atoms[0])];
      noise += ' ';
    }
    QTest::newRow("token noise") << noise;
  }
  void pythonNeverHangsOrCrashes() {
    QFETCH(QByteArray, source);
    QElapsedTimer timer;
    timer.start();
    { auto m = run_python_config(std::string_view(source.constData(), static_cast<size_t>(source.size())), "x.py"); }
    QVERIFY2(timer.elapsed() < 20000, qPrintable(QString("took %1 ms").arg(timer.elapsed())));
  }

  void pythonFileSizeLimit() {
    PyLimits limits;
    limits.max_bytes = 100;
    auto m = run_python_config(std::string(200, ' '), "x.py", limits);
    QVERIFY(!m.ok());
    QVERIFY(qs(m.status().message()).startsWith("x.py: the file is 200 bytes, more than the 100"));
  }

  // ----------------------------------------------------------------- LiBai's own split
  void libaiAutoStageIds_data() {
    QTest::addColumn<int>("layers");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QList<int>>("counts");
    QTest::newRow("24 on 4: the documentation's [6, 7, 7, 4]") << 24 << 4 << QList<int>{6, 7, 7, 4};
    QTest::newRow("24 on 8: three extra layers, cut at 24") << 24 << 8 << QList<int>{3, 3, 3, 3, 3, 4, 4, 1};
    QTest::newRow("24 on 2: fewer than 4 stages, even") << 24 << 2 << QList<int>{12, 12};
    QTest::newRow("26 on 4: not divisible, extras last") << 26 << 4 << QList<int>{6, 6, 7, 7};
    QTest::newRow("12 on 4") << 12 << 4 << QList<int>{3, 4, 4, 1};
    QTest::newRow("8 on 8") << 8 << 8 << QList<int>{1, 1, 1, 1, 1, 1, 1, 1};
    QTest::newRow("7 on 3") << 7 << 3 << QList<int>{2, 2, 3};
    QTest::newRow("5 on 1") << 5 << 1 << QList<int>{5};
  }
  void libaiAutoStageIds() {
    QFETCH(int, layers);
    QFETCH(int, pp);
    QFETCH(QList<int>, counts);
    const auto ids = libai_auto_stage_ids(layers, pp);
    QCOMPARE(static_cast<int>(ids.size()), layers);
    QVERIFY(std::is_sorted(ids.begin(), ids.end()));
    QList<int> got(pp, 0);
    for (int id : ids) ++got[id];
    QCOMPARE(got, counts);
  }

  // ----------------------------------------------------------------- export
  void exportGolden_data();
  void exportGolden() {
    QFETCH(QString, config);
    QFETCH(QString, to);
    QFETCH(QString, golden);
    auto text = export_config(load(config), *parse_framework(to.toStdString()));
    QVERIFY2(text.ok(), text.status().message().c_str());
    QCOMPARE(qs(text.value()), golden);
  }

  void exportContains_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QStringList>("present");
    QTest::addColumn<QStringList>("absent");
    const QStringList none;
    QTest::newRow("LiBai: uniform split that is not LiBai's own") << "libai-bert-dp2-pp4.yaml" << none << "libai"
        << QStringList{"train.dist.custom_pipeline_stage_id = [0]*6 + [1]*6 + [2]*6 + [3]*6", "LiBai's own split would be [6, 7, 7, 4]",
                       "'train.dist.custom_pipeline_stage_id=[0,0,0,0,0,0,1,"}
        << none;
    QTest::newRow("LiBai: the documented custom split is LiBai's own") << "libai-bert-custom-stages.yaml" << none << "libai"
        << QStringList{"is this plan's: no custom_pipeline_stage_id", "train.num_accumulation_steps = 16"}
        << QStringList{"train.dist.custom_pipeline_stage_id ="};
    QTest::newRow("LiBai: dp auto is derived") << "libai-bert-auto-dp.yaml" << none << "libai"
        << QStringList{"LiBai derives the data parallel size as world / (tp x pp) = 8 / 4 = 2", "train.dist.data_parallel_size = 2"} << none;
    QTest::newRow("Megatron: DP buckets of 5 MiB") << "paddle-gpt-dp2-mp2-pp2.yaml" << QStringList{"parallel.grad_bucket_mb=5"} << "megatron"
        << QStringList{"--overlap-grad-reduce\n", "--ddp-bucket-size 1310720\n"} << none;
    QTest::newRow("Megatron: default buckets, reduced after the backward") << "paddle-gpt-dp2-mp2-pp2.yaml"
        << QStringList{"parallel.overlap_grad_reduce=false"} << "megatron" << none << QStringList{"--overlap-grad-reduce", "--ddp-bucket-size"};
    QTest::newRow("DeepSpeed: DP buckets of 5 MiB") << "paddle-gpt-dp2-mp2-pp2.yaml"
        << QStringList{"parallel.grad_bucket_mb=5", "pipeline.schedule=1f1b"} << "deepspeed"
        << QStringList{"\"overlap_comm\": true", "\"reduce_bucket_size\": 1310720"} << none;
    QTest::newRow("DeepSpeed: reduced after the backward") << "paddle-gpt-dp2-mp2-pp2.yaml" << QStringList{"parallel.overlap_grad_reduce=false"}
        << "deepspeed" << QStringList{"\"overlap_comm\": false"} << QStringList{"reduce_bucket_size"};
    QTest::newRow("Paddle: zero runs as the sharding axis") << "gpt3-175b-1024x8.yaml" << none << "paddle"
        << QStringList{"\"dp_degree\": 1,", "\"sharding_degree\": 128,", "num_virtual_pipeline_stages=2", "--ips \"$NODE_IPS\""}
        << QStringList{"NOTE: PaddlePaddle orders ranks"};
    QTest::newRow("Paddle: hosts in the launch line") << "paddle-gpt-dp2-mp2-pp2.yaml"
        << QStringList{"cluster.nodes=2", "cluster.gpus_per_node=4", "cluster.hosts=[{host: a, slots: 4}, {host: b, slots: 4}]"} << "paddle"
        << QStringList{"--gpus \"0,1,2,3\" --ips \"a,b\""} << none;
    QTest::newRow("Colossal-AI: pipeline and 2d tensor") << "colossalai-pp2-2d.yaml" << none << "colossalai"
        << QStringList{"    pipeline=2,\n    tensor=dict(size=4, mode='2d'),\n)", "BATCH_SIZE = 32\nNUM_MICRO_BATCHES = 8"} << none;
    QTest::newRow("Colossal-AI: interleaved chunks") << "gpt3-175b-1024x8.yaml" << none << "colossalai"
        << QStringList{"model = dict(num_chunks=2)", "NUM_MICRO_BATCHES = 24", "NOTE: Colossal-AI orders ranks tp-pp-dp"} << QStringList{"fp16 ="};
    QTest::newRow("Megatron: GPT-3 interleaved, SP, distributed optimizer") << "gpt3-175b-1024x8.yaml" << none << "megatron"
        << QStringList{"--tensor-model-parallel-size 8\n", "--pipeline-model-parallel-size 8\n", "--num-layers-per-virtual-pipeline-stage 6\n",
                       "--sequence-parallel\n", "--use-distributed-optimizer\n", "--recompute-granularity selective\n", "--bf16\n",
                       "--global-batch-size 3072\n", "--lr-warmup-iters 2000\n",
                       "#   CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 1024 --nproc_per_node 8"}
        << QStringList{"overlap-p2p", "--use-tp-pp-dp-mapping", "--fp16"};
    QTest::newRow("Megatron: Paddle's order maps to --use-tp-pp-dp-mapping") << "paddle-gpt-dp2-mp2-pp2.yaml" << none << "megatron"
        << QStringList{"--use-tp-pp-dp-mapping\n", "--fp16\n"} << QStringList{"NOTE:"};
    QTest::newRow("Megatron: full recompute") << "bert-large-3d.yaml" << QStringList{"train.recompute=full"} << "megatron"
        << QStringList{"--recompute-granularity full\n    --recompute-method uniform\n    --recompute-num-layers 1\n"} << none;
    QTest::newRow("DeepSpeed: ds_config, hostfile and PipelineModule") << "bert-large-3d.yaml" << QStringList{"parallel.zero=1", "train.precision=bf16"}
        << "deepspeed"
        << QStringList{"\"train_batch_size\": 16,", "\"train_micro_batch_size_per_gpu\": 2,", "\"gradient_accumulation_steps\": 4,",
                       "\"stage\": 1", "\"bf16\": {\n    \"enabled\": true\n  }", "==> hostfile <==", "localhost slots=8",
                       "PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2)", "partition_method=\"type:transformer\"",
                       "NOTE: ds_config.json does not carry tensor parallelism"}
        << QStringList{"\"fp16\""};
    QTest::newRow("DeepSpeed: hosts become the hostfile") << "libai-bert-dp8.yaml"
        << QStringList{"cluster.nodes=2", "cluster.gpus_per_node=4", "cluster.hosts=[{host: n1, slots: 4}, {host: n2, slots: 4}]"} << "deepspeed"
        << QStringList{"n1 slots=4\nn2 slots=4\n"} << QStringList{"==> pipeline.py <=="};
    QTest::newRow("Megatron: 128k context over cp 4 (Ulysses), ZeRO-3 as Megatron-FSDP") << "llama3-8b-128k-4x8.yaml" << none << "megatron"
        << QStringList{"--context-parallel-size 4", "--cp-comm-type a2a", "--use-distributed-optimizer", "--use-megatron-fsdp",
                       "--data-parallel-sharding-strategy optim_grads_params", "--ckpt-format fsdp_dtensor",
                       "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun"}
        << QStringList{"--use-tp-pp-dp-mapping"};
    QTest::newRow("Megatron: the K/V ring, ZeRO-2") << "llama3-8b-128k-4x8.yaml" << QStringList{"parallel.cp_comm=ring", "parallel.zero=2"} << "megatron"
        << QStringList{"--cp-comm-type p2p", "--data-parallel-sharding-strategy optim_grads"} << QStringList{"optim_grads_params"};
    QTest::newRow("DeepSpeed: Ulysses and ZeRO-3") << "llama3-8b-128k-4x8.yaml" << none << "deepspeed"
        << QStringList{"\"sequence_parallel_size\": 4", "\"stage\": 3"} << QStringList{"not a K/V ring"};
    QTest::newRow("DeepSpeed: a ring runs as Ulysses") << "llama3-8b-128k-4x8.yaml" << QStringList{"parallel.cp_comm=ring"} << "deepspeed"
        << QStringList{"runs as all_to_all there"} << none;
    QTest::newRow("torchtitan: context parallel degree, FSDP for ZeRO-3") << "llama3-8b-128k-4x8.yaml" << none << "torchtitan"
        << QStringList{"--parallelism.context_parallel_degree 4", "--parallelism.data_parallel_shard_degree 4", "Ulysses' head exchange"}
        << QStringList{"fsdp_reshard_after_forward"};
    QTest::newRow("torchtitan: ZeRO-2 keeps the gathered weights") << "llama3-8b-1x8.yaml" << QStringList{"parallel.zero=2"} << "torchtitan"
        << QStringList{"--parallelism.fsdp_reshard_after_forward never"} << QStringList{"not the optimizer state only"};
    QTest::newRow("LiBai: ZeRO-3") << "libai-bert-dp8.yaml" << QStringList{"parallel.zero=3"} << "libai"
        << QStringList{"train.zero_optimization.enabled = True", "train.zero_optimization.stage = 3"} << none;
    QTest::newRow("Paddle: ZeRO-2 wraps the model") << "libai-bert-dp8.yaml" << QStringList{"parallel.zero=2"} << "paddle"
        << QStringList{"\"sharding_degree\": 8", "level='os_g'"} << none;
    QTest::newRow("Megatron: Llama 3 8B's architecture") << "llama3-8b-1x8.yaml" << none << "megatron"
        << QStringList{"--normalization RMSNorm\n", "--swiglu\n", "--position-embedding-type rope\n", "--rotary-base 500000\n",
                       "--group-query-attention\n", "--num-query-groups 8\n", "--disable-bias-linear\n",
                       "--untie-embeddings-and-output-weights\n", "--ffn-hidden-size 14336\n",
                       "--tokenizer-type HuggingFaceTokenizer --tokenizer-model ..."}
        << QStringList{"--add-qkv-bias", "--norm-epsilon", "--vocab-file"};
    QTest::newRow("Megatron: Qwen2's q/k/v biases and RMSNorm eps") << "llama3-8b-1x8.yaml"
        << QStringList{"model.qkv_bias=true", "model.norm_eps=1e-6", "model.kv_heads=32"} << "megatron"
        << QStringList{"--add-qkv-bias\n", "--norm-epsilon 1e-06\n"} << QStringList{"--group-query-attention", "--num-query-groups"};
    QTest::newRow("Megatron: GPT-2 adds no architecture flags") << "paddle-gpt-dp2-mp2-pp2.yaml" << none << "megatron" << none
        << QStringList{"--swiglu", "--normalization", "--position-embedding-type", "--disable-bias-linear"};
    QTest::newRow("LiBai: a Llama is built in the training code") << "llama3-8b-1x8.yaml" << none << "libai"
        << QStringList{"NOTE: LiBai builds the model in the training code: make it a Llama (RMSNorm, SwiGLU, rotary"}
        << none;
    QTest::newRow("torchtitan: GPT-3 interleaved, FSDP for ZeRO") << "gpt3-175b-1024x8.yaml" << none << "torchtitan"
        << QStringList{"TORCHTITAN_ARGS=(\n", "    --parallelism.data_parallel_replicate_degree 1\n", "    --parallelism.data_parallel_shard_degree 128\n",
                       "    --parallelism.tensor_parallel_degree 8\n", "    --parallelism.pipeline_parallel_degree 8\n",
                       "    --parallelism.pipeline_parallel_schedule Interleaved1F1B\n", "    --parallelism.num_pp_microbatches 24\n",
                       "    --parallelism.pipeline_parallel_layers_per_stage 6\n", "    --training.num_tokens_per_train_step 6291456\n",
                       "    --training.max_context_length 2048\n", "    --training.mixed_precision_param bfloat16\n",
                       "    --lr_scheduler.warmup_steps 2000\n", "NOTE: torchtitan's FSDP shards the parameters and gradients over dp too (ZeRO-3)",
                       "NOTE: recompute selective: choose that activation checkpointing", "#   torchrun --nnodes 1024 --nproc_per_node 8",
                       "-m torchtitan.train --module torchtitan_recipes.MODULE --config CONFIG \"${TORCHTITAN_ARGS[@]}\""}
        << QStringList{"NOTE: torchtitan orders ranks"};
    QTest::newRow("torchtitan: Llama 3 8B replicated over dp") << "llama3-8b-1x8.yaml" << QStringList{"parallel.zero=0"} << "torchtitan"
        << QStringList{"--parallelism.data_parallel_replicate_degree 4\n", "--parallelism.data_parallel_shard_degree 1\n",
                       "--parallelism.pipeline_parallel_degree 1\n", "--module torchtitan_recipes.llama3",
                       "NOTE: the model comes from the configuration (--module, --config): llama"}
        << QStringList{"--parallelism.pipeline_parallel_schedule", "ZeRO-3", "make it a Llama"};
    QTest::newRow("torchtitan: an uneven split") << "bert-large-3d.yaml" << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,1,1,1,1,1,1,1,1,1]", "train.precision=fp32"}
        << "torchtitan" << QStringList{"NOTE: the plan's stages hold [14, 10] layers; torchtitan splits evenly", "--training.mixed_precision_param float32\n"}
        << QStringList{"--parallelism.pipeline_parallel_layers_per_stage"};
    QTest::newRow("Hugging Face: the model's config.json") << "llama3-8b-1x8.yaml" << none << "hf"
        << QStringList{"\"architectures\": [\"LlamaForCausalLM\"]", "\"num_key_value_heads\": 8", "\"rope_theta\": 500000"}
        << none;
  }
  void exportContains() {
    QFETCH(QString, config);
    QFETCH(QStringList, overrides);
    QFETCH(QString, to);
    QFETCH(QStringList, present);
    QFETCH(QStringList, absent);
    std::vector<std::string> ov;
    for (const auto& o : overrides) ov.push_back(o.toStdString());
    auto c = load_config_file(configs_dir() + config.toStdString(), ov);
    QVERIFY2(c.ok(), c.status().message().c_str());
    auto text = export_config(c.value(), *parse_framework(to.toStdString()));
    QVERIFY2(text.ok(), text.status().message().c_str());
    for (const auto& p : present) QVERIFY2(qs(text.value()).contains(p), qPrintable("missing: " + p + "\n" + qs(text.value())));
    for (const auto& a : absent) QVERIFY2(!qs(text.value()).contains(a), qPrintable("present: " + a));
  }

  // How Megatron is told the split: nothing when even, first/last when only they differ, else
  // the layout, which must expand to the plan's layers per stage.
  void megatronSplit_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QStringList>("present");
    QTest::addColumn<QStringList>("absent");
    const QStringList all_flags = {"--decoder-first", "--decoder-last", "--pipeline-model-parallel-layout", "virtual"};
    QTest::newRow("uniform 24 on 4") << QStringList{} << QStringList{} << all_flags;
    QTest::newRow("LiBai's [6, 7, 7, 4]: first and last") << QStringList{"pipeline.partition=[0,0,0,0,0,0,1,1,1,1,1,1,1,2,2,2,2,2,2,2,3,3,3,3]"}
        << QStringList{"--decoder-first-pipeline-num-layers 6\n", "--decoder-last-pipeline-num-layers 4\n"}
        << QStringList{"--pipeline-model-parallel-layout"};
    QTest::newRow("only the last differs") << QStringList{"pipeline.partition=[0,0,0,0,0,0,0,1,1,1,1,1,1,1,2,2,2,2,2,2,2,3,3,3]"}
        << QStringList{"--decoder-last-pipeline-num-layers 3\n"} << QStringList{"--decoder-first", "--pipeline-model-parallel-layout"};
    QTest::newRow("middle stages differ: layout") << QStringList{"pipeline.partition=[0,0,0,0,0,1,1,1,1,1,1,1,2,2,2,2,2,2,3,3,3,3,3,3]"}
        << QStringList{"--pipeline-model-parallel-layout \"Et*5|t*7|t*6|t*6L\""} << QStringList{"--decoder-first"};
    QTest::newRow("uniform 27 on 8: runs compressed") << QStringList{"model.layers=27", "parallel.pp=8", "parallel.dp=1", "train.global_batch=64"}
        << QStringList{"--pipeline-model-parallel-layout \"Et*3|t*3|(t*4|)*3,t*3|t*3|t*3L\""} << QStringList{};
    QTest::newRow("interleaved, even chunks") << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}
        << QStringList{"--num-layers-per-virtual-pipeline-stage 3\n"} << QStringList{"overlap-p2p", "--pipeline-model-parallel-layout"};
    // Megatron overlaps p2p by default, which is what lets the interleaved schedule run on pp 2.
    QTest::newRow("interleaved on pp 2: p2p overlap is Megatron's default") << QStringList{"parallel.pp=2", "parallel.dp=4", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"}
        << QStringList{"--num-layers-per-virtual-pipeline-stage 6\n"} << QStringList{"overlap-p2p"};
    QTest::newRow("interleaved, uneven first rank") << QStringList{"model.layers=22", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2",
                                                                   "pipeline.partition=[0,0,1,1,1,2,2,2,3,3,3,4,4,5,5,5,6,6,6,7,7,7]"}
        << QStringList{"--num-virtual-stages-per-pipeline-rank 2\n", "--decoder-first-pipeline-num-layers 4\n"}
        << QStringList{"--decoder-last", "--num-layers-per-virtual-pipeline-stage", "--pipeline-model-parallel-layout"};
    QTest::newRow("interleaved, chunks of one rank differ: layout") << QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2",
                                                                                   "pipeline.partition=[0,0,0,0,1,1,1,2,2,2,3,3,3,4,4,4,5,5,5,6,6,6,7,7]"}
        << QStringList{"--pipeline-model-parallel-layout \"Et*4|(t*3|)*6,t*2L\""} << QStringList{"--num-virtual"};
  }
  void megatronSplit() {
    QFETCH(QStringList, overrides);
    QFETCH(QStringList, present);
    QFETCH(QStringList, absent);
    std::vector<std::string> ov;
    for (const auto& o : overrides) ov.push_back(o.toStdString());
    auto c = load_config_file(configs_dir() + "libai-bert-dp2-pp4.yaml", ov);
    QVERIFY2(c.ok(), c.status().message().c_str());
    auto text = export_config(c.value(), Framework::kMegatron);
    QVERIFY2(text.ok(), text.status().message().c_str());
    const QString t = qs(text.value());
    for (const auto& p : present) QVERIFY2(t.contains(p), qPrintable("missing: " + p + "\n" + t));
    for (const auto& a : absent) QVERIFY2(!t.contains(a), qPrintable("present: " + a + "\n" + t));
    const QRegularExpression layout("--pipeline-model-parallel-layout \"([^\"]+)\"");
    if (auto m = layout.match(t); m.hasMatch()) {
      QCOMPARE(ql(megatron_layout_counts(m.captured(1).toStdString())), ql(counts(plan_of(c.value()))));
    }
  }

  // Every flag a Megatron export writes is one Megatron-LM's parser defines (an unknown flag
  // stops parse_args), and the launch line sets CUDA_DEVICE_MAX_CONNECTIONS=1 exactly when
  // tp > 1, which validate_args asserts before Blackwell. Rows: every configs/*.yaml (those the
  // export refuses skipped) and the variants.
  void megatronFlagsKnown_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<bool>("mayRefuse");
    const auto files = QDir(QString::fromStdString(configs_dir())).entryList({"*.yaml"}, QDir::Files, QDir::Name);
    QVERIFY(files.size() >= 16);
    for (const auto& f : files) QTest::newRow(qPrintable(f)) << f << QStringList{} << true;
    for (const auto& v : megatron_variants()) QTest::newRow(v.name) << QString(v.config) << v.overrides << false;
  }
  void megatronFlagsKnown() {
    QFETCH(QString, config);
    QFETCH(QStringList, overrides);
    QFETCH(bool, mayRefuse);
    const RunConfig c = load(config, overrides);
    auto text = export_config(c, Framework::kMegatron);
    if (!text.ok() && mayRefuse && text.status().code() == stagecraft::Status::Code::kInvalidInput) {
      QSKIP(qPrintable("refused: " + qs(text.status().message())));
    }
    QVERIFY2(text.ok(), text.status().message().c_str());
    const QString t = qs(text.value());
    const QStringList written = megatron_flags_written(t);
    QVERIFY2(written.size() >= 20, qPrintable(t));
    QStringList unknown;
    for (const auto& f : written) {
      if (!megatron_lm_flags().contains(f)) unknown << f;
    }
    QVERIFY2(unknown.isEmpty(), qPrintable("not Megatron-LM flags: " + unknown.join(", ") + "\n" + t));
    const bool tp = plan_of(c).tp > 1;
    QCOMPARE(megatron_launch_line(t).startsWith("#   CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes "), tp);
    QCOMPARE(t.contains("CUDA_DEVICE_MAX_CONNECTIONS"), tp);
  }

  // Every option the torchtitan export writes, for every configs/*.yaml (and variants reaching
  // each of its branches), is one torchtitan's configuration defines (data/torchtitan_options.txt,
  // the version named there); each is followed by one value.
  void torchtitanOptionsKnown_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("overrides");
    const auto files = QDir(QString::fromStdString(configs_dir())).entryList({"*.yaml"}, QDir::Files, QDir::Name);
    for (const auto& f : files) QTest::newRow(qPrintable(f)) << f << QStringList{};
    QTest::newRow("gpipe, no zero") << QString("bert-large-3d.yaml") << QStringList{"pipeline.schedule=gpipe", "parallel.zero=0"};
  }
  void torchtitanOptionsKnown() {
    static const QSet<QString> known = names_in("torchtitan_options.txt");
    QFETCH(QString, config);
    QFETCH(QStringList, overrides);
    auto text = export_config(load(config, overrides), Framework::kTorchtitan);
    if (!text.ok() && text.status().code() == stagecraft::Status::Code::kInvalidInput) QSKIP(qPrintable("refused: " + qs(text.status().message())));
    QVERIFY2(text.ok(), text.status().message().c_str());
    const QString t = qs(text.value());
    const qsizetype begin = t.indexOf("TORCHTITAN_ARGS=(\n"), end = t.indexOf("\n)\n", begin);
    QVERIFY(begin >= 0 && end > begin);
    const QStringList lines = t.mid(begin + 18, end - begin - 18).split('\n', Qt::SkipEmptyParts);
    QVERIFY(lines.size() >= 12);
    for (const QString& line : lines) {
      const QStringList w = line.trimmed().split(' ');
      QCOMPARE(w.size(), 2);
      QVERIFY2(known.contains(w[0]), qPrintable(w[0] + " is no torchtitan option"));
    }
  }

  // The variants reach every flag the Megatron export can write, so megatronFlagsKnown checks
  // each branch; a flag the export learns must be added here, with a variant that writes it.
  void megatronVariantsCoverEveryFlag() {
    const QStringList every = {
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--pipeline-model-parallel-layout", "--use-tp-pp-dp-mapping", "--sequence-parallel", "--use-distributed-optimizer",
        "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size", "--seq-length", "--max-position-embeddings",
        "--normalization", "--norm-epsilon", "--swiglu", "--position-embedding-type", "--rotary-base", "--group-query-attention",
        "--num-query-groups", "--disable-bias-linear", "--add-qkv-bias", "--untie-embeddings-and-output-weights",
        "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
        "--bf16", "--fp16", "--fp32-residual-connection", "--train-iters", "--lr", "--min-lr", "--lr-decay-style", "--lr-warmup-iters", "--weight-decay",
        "--adam-beta1", "--adam-beta2", "--clip-grad", "--seed", "--overlap-grad-reduce", "--ddp-bucket-size",
        "--data-path", "--vocab-file", "--merge-file", "--tokenizer-type", "--tokenizer-model",
        "--qk-layernorm", "--kv-channels", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
        "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-router-pre-softmax", "--moe-router-load-balancing-type",
        "--moe-aux-loss-coeff", "--moe-expert-capacity-factor", "--moe-token-drop-policy", "--expert-model-parallel-size",
        "--expert-tensor-parallel-size", "--moe-token-dispatcher-type", "--moe-grouped-gemm"};
    QSet<QString> seen;
    for (const auto& v : megatron_variants()) {
      auto text = export_config(load(v.config, v.overrides), Framework::kMegatron);
      QVERIFY2(text.ok(), qPrintable(QString(v.name) + ": " + qs(text.status().message())));
      for (const auto& f : megatron_flags_written(qs(text.value()))) seen.insert(f);
    }
    for (const auto& f : every) QVERIFY2(seen.contains(f), qPrintable("no variant writes " + f));
    for (const auto& f : seen) QVERIFY2(every.contains(f), qPrintable("not in the list of flags the export writes: " + f));
  }

  void exportRefuses_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("message");
    QTest::newRow("2d tensor to LiBai") << "colossalai-2d.yaml" << "libai" << "parallel.tp_mode=2d: LiBai has only 1D";
    QTest::newRow("2.5d tensor to Paddle") << "colossalai-2p5d.yaml" << "paddle" << "parallel.tp_mode=2.5d: PaddlePaddle's hybrid parallelism has only 1D";
    QTest::newRow("3d tensor to Megatron") << "colossalai-3d.yaml" << "megatron" << "parallel.tp_mode=3d: Megatron-LM has only 1D";
    QTest::newRow("2d tensor to DeepSpeed") << "colossalai-pp2-2d.yaml" << "deepspeed" << "parallel.tp_mode=2d: DeepSpeed's model parallelism is Megatron's 1D";
    QTest::newRow("interleaved to LiBai") << "gpt3-175b-1024x8.yaml" << "libai" << "pipeline.schedule=interleaved: LiBai runs the non-interleaved 1F1B";
    QTest::newRow("interleaved to DeepSpeed") << "gpt3-175b-1024x8.yaml" << "deepspeed" << "pipeline.schedule=interleaved: DeepSpeed's PipelineEngine";
    QTest::newRow("2d tensor to torchtitan") << "colossalai-2d.yaml" << "torchtitan" << "parallel.tp_mode=2d: torchtitan has only 1D";
    QTest::newRow("fp16 to torchtitan") << "paddle-gpt-dp2-mp2-pp2.yaml" << "torchtitan" << "train.precision=fp16: torchtitan trains in bf16 or fp32";
    QTest::newRow("cp to LiBai") << "llama3-8b-128k-4x8.yaml" << "libai" << "parallel.cp=4: LiBai has no context parallelism";
    QTest::newRow("cp to Paddle") << "llama3-8b-128k-4x8.yaml" << "paddle" << "parallel.cp=4: PaddlePaddle's hybrid strategy has no context parallelism";
    QTest::newRow("cp to Colossal-AI") << "llama3-8b-128k-4x8.yaml" << "colossalai" << "parallel.cp=4: Colossal-AI's legacy parallel config has no context";
  }
  void exportRefuses() {
    QFETCH(QString, config);
    QFETCH(QString, to);
    QFETCH(QString, message);
    auto e = export_files(load(config), *parse_framework(to.toStdString()));
    QVERIFY(!e.ok());
    QCOMPARE(e.status().code(), stagecraft::Status::Code::kInvalidInput);
    QVERIFY2(qs(e.status().message()).startsWith(message), e.status().message().c_str());
  }

  void exportRefusesInvalidConfig() {
    RunConfig c = load("bert-large-3d.yaml");
    c.parallel.tp = 3;
    auto e = export_files(c, Framework::kLibai);
    QVERIFY(!e.ok());
    QVERIFY(qs(e.status().message()).contains("parallel.dp=2: dp x tp x pp = 12 but the cluster has 8 GPUs"));
  }

  // ----------------------------------------------------------------- import
  void importSeedExamples_data();
  void importSeedExamples() {
    QFETCH(QString, format);
    QFETCH(QString, base);
    QFETCH(QString, source);
    QFETCH(QList<int>, sizes);
    QFETCH(QList<int>, stage_layers);
    QFETCH(QString, tp_groups);
    QFETCH(QString, dp_groups);
    const RunConfig b = load(base);
    auto c = import_config(source.toStdString(), *parse_framework(format.toStdString()), &b, "seed.py");
    QVERIFY2(c.ok(), c.status().message().c_str());
    const Plan p = plan_of(c.value());
    QCOMPARE((QList<int>{p.dp, p.tp, p.pp}), sizes);
    QCOMPARE(ql(counts(p)), stage_layers);
    auto text = [](const std::vector<std::vector<int>>& gs) {
      QStringList parts;
      for (const auto& g : gs) parts << int_list(g);
      return parts.join(' ');
    };
    QCOMPARE(text(p.topology.groups(Axis::kTp)), tp_groups);
    QCOMPARE(text(p.topology.groups(Axis::kDp)), dp_groups);
  }

  void importBatches() {
    // Paddle's seed: micro_batch_size = 16 // 2 // 2 = 4 with accumulate_steps 2.
    const RunConfig b = load("paddle-gpt-dp2-mp2-pp2.yaml");
    auto c = import_config("G=16\nA=2\nDP=2\nstrategy = fleet.DistributedStrategy()\nstrategy.hybrid_configs = {'dp_degree': DP, "
                           "'mp_degree': 2, 'pp_degree': 2}\nif 2 > 1:\n    strategy.pipeline_configs = {'accumulate_steps': A, "
                           "'micro_batch_size': G // DP // A}\n",
                           Framework::kPaddle, &b, "p.py");
    QVERIFY2(c.ok(), c.status().message().c_str());
    QCOMPARE(c->train.micro_batch, 4);
    QCOMPARE(c->train.global_batch, 16);
    QCOMPARE(micro_batches(c.value()), 2);
    // DeepSpeed: dp from the batch triple; the base keeps tp and pp.
    const RunConfig d = load("bert-large-3d.yaml");
    auto ds = import_config(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4, "bf16": {"enabled": true}})",
                            Framework::kDeepspeed, &d, "ds.json");
    QVERIFY2(ds.ok(), ds.status().message().c_str());
    QCOMPARE(ds->parallel.dp, 2);
    QCOMPARE(ds->parallel.tp, 2);
    QCOMPARE(ds->train.micro_batch, 4);
    QCOMPARE(ds->train.global_batch, 32);
    QCOMPARE(ds->train.precision, Precision::kBf16);
    // LiBai's model config overrides give the shape without a base; the run is named after the file.
    auto lb = import_config("model.cfg.hidden_layers = 12\nmodel.cfg.hidden_size = 768\nmodel.cfg.num_attention_heads = 12\n"
                            "train.dist.tensor_parallel_size = 2\n",
                            Framework::kLibai, nullptr, "dir/bert_base.py");
    QVERIFY2(lb.ok(), lb.status().message().c_str());
    QCOMPARE(lb->name, std::string("bert_base"));
    QCOMPARE(lb->model.layers, 12);
    QCOMPARE(resolved_dp(lb.value()), 4);
  }

  // Hugging Face config.json files as the hub publishes them: the model section, parameters exact.
  void importHuggingFace_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("arch");
    QTest::addColumn<QList<int>>("shape");  // layers, hidden, heads, kv_heads, ffn_hidden, vocab
    QTest::addColumn<bool>("tied");
    QTest::addColumn<bool>("qkv_bias");
    QTest::addColumn<double>("params");
    QTest::addColumn<double>("active");  // per token: top_k of a mixture's experts
    QTest::newRow("Llama 3 8B") << R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
        "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
        "use_cache": true, "vocab_size": 128256})"
        << "llama" << QList<int>{32, 4096, 32, 8, 14336, 128256} << false << false << 8030261248.0 << 8030261248.0;
    QTest::newRow("Llama 3 70B") << R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 8192,
        "intermediate_size": 28672, "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 64,
        "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "tie_word_embeddings": false, "vocab_size": 128256})"
        << "llama" << QList<int>{80, 8192, 64, 8, 28672, 128256} << false << false << 70553706496.0 << 70553706496.0;
    QTest::newRow("Mistral 7B v0.1") << R"({"architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
        "tie_word_embeddings": false, "vocab_size": 32000})"
        << "llama" << QList<int>{32, 4096, 32, 8, 14336, 32000} << false << false << 7241732096.0 << 7241732096.0;
    QTest::newRow("Qwen2.5 7B") << R"({"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 3584,
        "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2",
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 131072, "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 152064})"
        << "llama" << QList<int>{28, 3584, 28, 4, 18944, 152064} << false << true << 7615616512.0 << 7615616512.0;
    QTest::newRow("SmolLM-135M") << R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 576,
        "intermediate_size": 1536, "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 9,
        "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "tie_word_embeddings": true, "vocab_size": 49152})"
        << "llama" << QList<int>{30, 576, 9, 3, 1536, 49152} << true << false << 134515008.0 << 134515008.0;
    QTest::newRow("GPT-2") << R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})"
        << "gpt2" << QList<int>{12, 768, 12, 0, 0, 50257} << true << false << 124439808.0 << 124439808.0;
    // Mixtral 8x7B's config.json (mistralai/Mixtral-8x7B-v0.1): intermediate_size is each expert's.
    QTest::newRow("Mixtral 8x7B") << R"({"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})"
        << "llama" << QList<int>{32, 4096, 32, 8, 14336, 32000} << false << false << 46702792704.0 << 12879925248.0;
    // Qwen/Qwen3-30B-A3B's and Qwen/Qwen3-235B-A22B's config.json (their model cards: 30.5B and
    // 3.3B activated, 235B and 22B activated).
    QTest::newRow("Qwen3-30B-A3B") << R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
        "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
        "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
        "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})"
        << "llama" << QList<int>{48, 2048, 32, 4, 6144, 151936} << false << false << 30532122624.0 << 3353032704.0;
    QTest::newRow("Qwen3-235B-A22B") << R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "decoder_sparse_step": 1,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
        "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 1536, "norm_topk_prob": true,
        "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "tie_word_embeddings": false,
        "vocab_size": 151936})"
        << "llama" << QList<int>{94, 4096, 64, 4, 12288, 151936} << false << false << 235093634560.0 << 22190763520.0;
    // Qwen/Qwen1.5-MoE-A2.7B's config.json (Qwen2MoeForCausalLM): 60 experts of 1408, top 4, one
    // shared expert of 5632, q/k/v biases. transformers counts 14,315,784,192 parameters: the 24
    // layers' shared-expert gates (2048 x 1 each, 49,152 in all) are not modelled, so 14,315,735,040.
    QTest::newRow("Qwen1.5-MoE-A2.7B") << R"({"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "decoder_sparse_step": 1, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21, "model_type": "qwen2_moe",
        "moe_intermediate_size": 1408, "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
        "num_hidden_layers": 24, "num_key_value_heads": 16, "output_router_logits": false, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})"
        << "llama" << QList<int>{24, 2048, 16, 16, 5632, 151936} << false << true << 14315735040.0 << 2689124352.0;
    // Qwen3-8B (dense; heads x head_dim = hidden, q/k norms).
    QTest::newRow("Qwen3-8B") << R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960, "model_type": "qwen3",
        "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
        "tie_word_embeddings": false, "vocab_size": 151936})"
        << "llama" << QList<int>{36, 4096, 32, 8, 12288, 151936} << false << false << 8190735360.0 << 8190735360.0;
  }
  void importHuggingFace() {
    QFETCH(QString, json);
    QFETCH(QString, arch);
    QFETCH(QList<int>, shape);
    QFETCH(bool, tied);
    QFETCH(bool, qkv_bias);
    QFETCH(double, params);
    QFETCH(double, active);
    auto c = import_config(json.toStdString(), Framework::kHf, nullptr, "models/config.json");
    QVERIFY2(c.ok(), c.status().message().c_str());
    const auto& m = c->model;
    QCOMPARE(qs(m.arch), arch);
    QCOMPARE((QList<int>{m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab}), shape);
    QCOMPARE(m.tied_embeddings, tied);
    QCOMPARE(m.qkv_bias, qkv_bias);
    QCOMPARE(c->name, std::string("config"));
    auto p = stagecraft::plan::make_plan(c.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    QCOMPARE(p->estimate.params_total, params);
    QCOMPARE(p->estimate.params_active, active);
    // The base keeps everything but the model, and its sequence length.
    const RunConfig base = load("llama3-8b-1x8.yaml");
    auto b = import_config(json.toStdString(), Framework::kHf, &base, "config.json");
    QVERIFY2(b.ok() || m.heads % 2 != 0 || m.kv() % 2 != 0, b.ok() ? "" : b.status().message().c_str());
    if (b.ok()) {
      QCOMPARE(b->model.seq_len, base.model.seq_len);
      QCOMPARE(b->parallel, base.parallel);
      QCOMPARE(b->name, base.name);
    }
  }
  // What the mixtures and Qwen3 carry beside the shape, and what Stagecraft cannot express,
  // refused in one line naming the key.
  void importHuggingFaceMixtures() {
    const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.02, "vocab_size": 300})";
    auto m = import_config(mixtral, Framework::kHf, nullptr, "config.json");
    QVERIFY2(m.ok(), m.status().message().c_str());
    QCOMPARE(m->model.moe.experts, 4);
    QCOMPARE(m->model.moe.top_k, 2);
    QCOMPARE(m->model.moe.ffn_hidden, 0);  // the expert's width is model.ffn_hidden
    QCOMPARE(m->model.ffn_hidden, 96);
    QVERIFY(m->model.moe.norm_topk);
    QCOMPARE(m->model.moe.aux_loss, 0.02);
    QVERIFY(!m->model.qk_norm);
    const std::string qwen = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "head_dim": 16, "intermediate_size": 96,
        "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 2, "num_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "norm_topk_prob": false, "mlp_only_layers": [0, 1], "decoder_sparse_step": 1,
        "router_aux_loss_coef": 0.001, "vocab_size": 300})";
    auto q = import_config(qwen, Framework::kHf, nullptr, "config.json");
    QVERIFY2(q.ok(), q.status().message().c_str());
    QCOMPARE(q->model.moe.experts, 8);
    QCOMPARE(q->model.moe.ffn_hidden, 32);
    QCOMPARE(q->model.moe.dense_layers, 2);
    QVERIFY(!q->model.moe.norm_topk);
    QCOMPARE(q->model.head_dim, 16);
    QVERIFY(q->model.qk_norm);
    auto refused = [&](std::string text, const std::string& from, const std::string& to, const QString& start) {
      text.replace(text.find(from), from.size(), to);
      auto r = import_config(text, Framework::kHf, nullptr, "config.json");
      QVERIFY2(!r.ok(), qPrintable(start));
      const QString msg = qs(r.status().message());
      QVERIFY2(msg.contains(start), qPrintable(msg));
      QVERIFY2(!msg.contains('\n'), qPrintable(msg));
    };
    refused(qwen, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2", "decoder_sparse_step=2: ");
    refused(qwen, "[0, 1]", "[1, 3]", "mlp_only_layers=[1,3]: ");
    refused(qwen, "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9", "num_experts_per_tok=9: more than num_experts=8");
    refused(mixtral, "\"num_local_experts\": 4, ", "", "num_local_experts is missing");
    refused(mixtral, "\"hidden_size\": 64,", "\"hidden_size\": 64, \"head_dim\": 16,", "head_dim=16: Stagecraft's MixtralForCausalLM has head_dim");
  }

  // The planned model's config.json reads back as the same model.
  void huggingFaceRoundTrip() {
    for (const char* f : {"llama3-8b-1x8.yaml", "llama3-70b-8x8.yaml", "tiny-gpt.yaml", "tiny-llama.yaml"}) {
      const RunConfig x = load(f);
      auto e = export_files(x, Framework::kHf);
      QVERIFY2(e.ok(), e.status().message().c_str());
      QCOMPARE(e->files.front().name, std::string("config.json"));
      auto back = import_config(e->files.front().text, Framework::kHf, &x, "config.json");
      QVERIFY2(back.ok(), back.status().message().c_str());
      RunConfig want = x;
      if (want.model.arch == "gpt") want.model.arch = "gpt2";
      QCOMPARE(qs(to_yaml(back.value())), qs(to_yaml(want)));
    }
  }

  void importErrors_data();
  void importErrors() {
    QFETCH(QString, format);
    QFETCH(QString, base);
    QFETCH(QString, source);
    QFETCH(QString, message);
    const RunConfig b = base.isEmpty() ? RunConfig{} : load(base);
    auto c = import_config(source.toStdString(), *parse_framework(format.toStdString()), base.isEmpty() ? nullptr : &b, "x.py");
    QVERIFY(!c.ok());
    QCOMPARE(c.status().code(), stagecraft::Status::Code::kInvalidInput);
    QVERIFY2(qs(c.status().message()).contains(message), c.status().message().c_str());
  }

  // Every example configuration, exported and imported back with itself as the base, plans
  // exactly like itself: the same config where the framework can say everything, else (a
  // fixed rank order that forms other groups, noted by the export) the same sizes, stages and
  // micro-batches with the framework's groups. Layouts a framework cannot run are refused.
  // torchtitan: every example exported as its options and read back plans the same sizes,
  // schedule and batch; what torchtitan runs differently (sequence parallelism on with tp, FSDP
  // for any ZeRO stage, its ring for cp) comes back as torchtitan runs it.
  void torchtitanRoundTrip_data() {
    QTest::addColumn<QString>("config");
    const auto files = QDir(QString::fromStdString(configs_dir())).entryList({"*.yaml"}, QDir::Files, QDir::Name);
    for (const auto& f : files) QTest::newRow(qPrintable(f)) << f;
  }
  void torchtitanRoundTrip() {
    QFETCH(QString, config);
    const RunConfig x = load(config);
    auto e = export_files(x, Framework::kTorchtitan);
    // moe-tiny-cpu: ep 2 over replicated dp (zero 0), which torchtitan cannot fold (exportRefusesExpertLayouts).
    const bool refused = x.parallel.tp_mode != TpMode::k1d || x.train.precision == stagecraft::config::Precision::kFp16 ||
                         (x.parallel.ep > 1 && x.parallel.zero == 0 && (x.parallel.tp * x.parallel.cp) % x.parallel.ep != 0);
    QCOMPARE(!e.ok(), refused);
    if (refused) return;
    auto back = import_config(e->files.front().text, Framework::kTorchtitan, &x, "exported.sh");
    QVERIFY2(back.ok(), back.status().message().c_str());
    const Plan px = plan_of(x), pb = plan_of(back.value());
    QCOMPARE((QList<int>{pb.dp, pb.tp, pb.pp, pb.cp, pb.virtual_stages, pb.micro_batches}),
             (QList<int>{px.dp, px.tp, px.pp, px.cp, px.virtual_stages, px.micro_batches}));
    bool uneven = false;
    for (const auto& st : px.stages) uneven = uneven || st.num_layers != px.stages.front().num_layers;
    if (!uneven) QCOMPARE(pb.layer_stage, px.layer_stage);
    const RunConfig& b = back.value();
    if (px.pp > 1) QCOMPARE(b.pipeline.schedule, x.pipeline.schedule);
    QCOMPARE(b.parallel.sequence_parallel, x.parallel.tp > 1);
    // Experts: the same ep; with ep 1 torchtitan splits each expert over the tp ranks (noted).
    QCOMPARE(b.parallel.ep, x.parallel.ep);
    QCOMPARE(b.parallel.expert_tp, x.model.moe.enabled() && x.parallel.ep == 1 ? px.tp : 1);
    const int zero = px.dp > 1 && x.parallel.zero > 0 ? (x.parallel.zero == 2 ? 2 : 3) : 0;
    QCOMPARE(b.parallel.zero, zero);
    QCOMPARE(b.model.seq_len, x.model.seq_len);
    QCOMPARE(b.train.global_batch, x.train.global_batch);
    QCOMPARE(b.train.micro_batch, x.train.micro_batch);
    QCOMPARE(b.train.steps, x.train.steps);
    QCOMPARE(b.train.warmup_steps, x.train.warmup_steps);
    QCOMPARE(b.train.seed, x.train.seed);
    QCOMPARE(b.train.grad_clip, x.train.grad_clip);
    QCOMPARE(b.train.precision, x.train.precision);
    QVERIFY(std::abs(b.train.min_lr - x.train.min_lr) <= 1e-9 * std::max(1e-12, x.train.lr));
  }

  // A mixture of experts is written for Megatron-LM, DeepSpeed and torchtitan and refused, in one
  // line naming the key, where the target has no expert layer (LiBai, Paddle's strategy,
  // Colossal-AI's legacy config, the Hugging Face writer); Qwen3's attention is refused where the
  // written config describes the model without a key for it (LiBai, Hugging Face).
  void exportsRefuseWhatTheyCannotWrite_data() {
    QTest::addColumn<QString>("to");
    QTest::addColumn<bool>("writesMoe");
    QTest::addColumn<bool>("writesQwen3Attention");
    QTest::newRow("libai") << "libai" << false << false;
    QTest::newRow("paddle") << "paddle" << false << true;
    QTest::newRow("colossalai") << "colossalai" << false << true;
    QTest::newRow("megatron") << "megatron" << true << true;
    QTest::newRow("deepspeed") << "deepspeed" << true << true;
    QTest::newRow("torchtitan") << "torchtitan" << true << true;
    QTest::newRow("hf") << "hf" << false << false;
  }
  void exportsRefuseWhatTheyCannotWrite() {
    QFETCH(QString, to);
    QFETCH(bool, writesMoe);
    QFETCH(bool, writesQwen3Attention);
    const Framework f = *parse_framework(to.toStdString());
    auto moe = export_files(load("mixtral-8x7b-8x8.yaml"), f);
    QCOMPARE(moe.ok(), writesMoe);
    if (!moe.ok()) {
      QCOMPARE(moe.status().code(), stagecraft::Status::Code::kInvalidInput);
      QVERIFY2(qs(moe.status().message()).startsWith("model.moe.experts=8: "), moe.status().message().c_str());
      QVERIFY(!qs(moe.status().message()).contains('\n'));
    }
    auto qk = export_files(load("llama3-8b-1x8.yaml", {"model.qk_norm=true"}), f);
    QCOMPARE(qk.ok(), writesQwen3Attention);
    if (!qk.ok()) QVERIFY2(qs(qk.status().message()).startsWith("model.qk_norm=true: "), qk.status().message().c_str());
    auto hd = export_files(load("llama3-8b-1x8.yaml", {"model.head_dim=64"}), f);
    QCOMPARE(hd.ok(), writesQwen3Attention);
    if (!hd.ok()) QVERIFY2(qs(hd.status().message()).startsWith("model.head_dim=64: "), hd.status().message().c_str());
    QVERIFY(export_files(load("llama3-8b-1x8.yaml"), f).ok());
  }

  // Expert layouts a target cannot run, refused naming the key.
  void exportRefusesExpertLayouts_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("message");
    QTest::newRow("DeepSpeed: ep over tensor-parallel ranks") << "mixtral-8x7b-8x8.yaml"
        << QStringList{"parallel.tp=8", "parallel.sequence_parallel=true", "parallel.ep=8"} << "deepspeed"
        << "parallel.ep=8: DeepSpeed forms its expert-parallel groups inside the data-parallel group (deepspeed/utils/groups.py): ep must divide dp = 2";
    QTest::newRow("DeepSpeed: experts split over part of tp") << "mixtral-8x7b-8x8.yaml"
        << QStringList{"parallel.tp=8", "parallel.sequence_parallel=true", "parallel.ep=2", "parallel.expert_tp=4"}
        << "deepspeed" << "parallel.expert_tp=4: DeepSpeed keeps each expert whole or splits it over the whole tensor-parallel group";
    QTest::newRow("torchtitan: expert tp with ep") << "qwen3-30b-a3b-2x8.yaml" << QStringList{"parallel.ep=4", "parallel.expert_tp=2"} << "torchtitan"
        << "parallel.expert_tp=2: torchtitan's expert parallelism keeps every expert whole on its rank";
    QTest::newRow("torchtitan: ep over replicated dp") << "qwen3-30b-a3b-2x8.yaml" << QStringList{"parallel.ep=8", "parallel.zero=0"} << "torchtitan"
        << "parallel.ep=8: torchtitan folds the experts over dp_shard x cp x tp, and with parallel.zero=0 its data parallelism is replicated "
           "(dp_shard 1): ep must divide tp x cp = 4";
    QTest::newRow("Megatron-LM: ep with tp needs sequence parallelism") << "qwen3-30b-a3b-2x8.yaml"
        << QStringList{"parallel.sequence_parallel=false"} << "megatron"
        << "parallel.sequence_parallel=false: Megatron-Core requires sequence parallelism with expert and tensor parallelism (ep=4, tp=4); "
           "set parallel.sequence_parallel=true to export to Megatron-LM";
    QTest::newRow("Paddle: no expert axis") << "qwen3-30b-a3b-2x8.yaml" << QStringList{} << "paddle"
        << "model.moe.experts=128: PaddlePaddle's hybrid strategy as this export writes it (dp, mp, pp, sharding) has no expert parallel axis; "
           "export to megatron, deepspeed or torchtitan";
    QTest::newRow("Colossal-AI: the plugin is code") << "qwen3-30b-a3b-2x8.yaml" << QStringList{} << "colossalai"
        << "model.moe.experts=128: Colossal-AI's legacy parallel config has no experts (its MoE runs under the booster's MoeHybridParallelPlugin";
    QTest::newRow("LiBai: no expert layer") << "qwen3-30b-a3b-2x8.yaml" << QStringList{} << "libai"
        << "model.moe.experts=128: LiBai's GPT has no mixture-of-experts layer and LiBai no expert parallelism";
  }
  void exportRefusesExpertLayouts() {
    QFETCH(QString, config);
    QFETCH(QStringList, overrides);
    QFETCH(QString, to);
    QFETCH(QString, message);
    auto e = export_files(load(config, overrides), *parse_framework(to.toStdString()));
    QVERIFY(!e.ok());
    QCOMPARE(e.status().code(), stagecraft::Status::Code::kInvalidInput);
    QVERIFY2(qs(e.status().message()).startsWith(message), e.status().message().c_str());
    QVERIFY(!qs(e.status().message()).contains('\n'));
  }

  // The exact Megatron-LM and torchtitan arguments of the two example mixtures with expert
  // parallelism, and DeepSpeed's MoE layer.
  void exportMixtures_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("args");  // the MEGATRON_ARGS or TORCHTITAN_ARGS array, or the file moe.py
    QTest::newRow("Mixtral 8x7B, ep 8, to Megatron-LM") << "mixtral-8x7b-8x8.yaml"
        << QStringList{"parallel.tp=8", "parallel.sequence_parallel=true", "parallel.ep=8"} << "megatron" << R"(MEGATRON_ARGS=(
    --tensor-model-parallel-size 8
    --pipeline-model-parallel-size 4
    --sequence-parallel
    --use-distributed-optimizer
    --num-layers 32
    --hidden-size 4096
    --num-attention-heads 32
    --ffn-hidden-size 14336
    --seq-length 4096
    --max-position-embeddings 4096
    --normalization RMSNorm
    --swiglu
    --position-embedding-type rope
    --rotary-base 1000000
    --group-query-attention
    --num-query-groups 8
    --disable-bias-linear
    --num-experts 8
    --moe-router-topk 2
    --moe-ffn-hidden-size 14336
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 0.02
    --expert-model-parallel-size 8
    --expert-tensor-parallel-size 1
    --moe-token-dispatcher-type alltoall
    --moe-grouped-gemm
    --untie-embeddings-and-output-weights
    --micro-batch-size 1
    --global-batch-size 256
    --recompute-granularity selective
    --bf16
    --fp32-residual-connection
    --train-iters 10000
    --lr 1e-04
    --min-lr 1e-05
    --lr-decay-style cosine
    --lr-warmup-iters 500
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --clip-grad 1.0
    --seed 1234
    --overlap-grad-reduce
)
)";
    QTest::newRow("Qwen3-30B-A3B, ep 8, to Megatron-LM") << "qwen3-30b-a3b-2x8.yaml" << QStringList{"parallel.ep=8"} << "megatron" << R"(MEGATRON_ARGS=(
    --tensor-model-parallel-size 4
    --pipeline-model-parallel-size 2
    --sequence-parallel
    --use-distributed-optimizer
    --num-layers 48
    --hidden-size 2048
    --num-attention-heads 32
    --ffn-hidden-size 6144
    --seq-length 4096
    --max-position-embeddings 4096
    --normalization RMSNorm
    --norm-epsilon 1e-06
    --swiglu
    --position-embedding-type rope
    --rotary-base 1000000
    --group-query-attention
    --num-query-groups 4
    --disable-bias-linear
    --qk-layernorm
    --kv-channels 128
    --num-experts 128
    --moe-router-topk 8
    --moe-ffn-hidden-size 768
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 0.001
    --expert-model-parallel-size 8
    --expert-tensor-parallel-size 1
    --moe-token-dispatcher-type alltoall
    --moe-grouped-gemm
    --untie-embeddings-and-output-weights
    --micro-batch-size 1
    --global-batch-size 256
    --recompute-granularity selective
    --bf16
    --fp32-residual-connection
    --train-iters 10000
    --lr 3e-04
    --min-lr 3e-05
    --lr-decay-style cosine
    --lr-warmup-iters 500
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --clip-grad 1.0
    --seed 1234
    --overlap-grad-reduce
)
)";
    QTest::newRow("Qwen3-30B-A3B, ep 8, to torchtitan") << "qwen3-30b-a3b-2x8.yaml" << QStringList{"parallel.ep=8"} << "torchtitan" << R"(TORCHTITAN_ARGS=(
    --parallelism.data_parallel_replicate_degree 1
    --parallelism.data_parallel_shard_degree 2
    --parallelism.tensor_parallel_degree 4
    --parallelism.pipeline_parallel_degree 2
    --parallelism.expert_parallel_degree 8
    --parallelism.pipeline_parallel_schedule 1F1B
    --parallelism.num_pp_microbatches 128
    --parallelism.pipeline_parallel_layers_per_stage 24
    --training.num_tokens_per_microbatch_per_dp_rank 4096
    --training.num_tokens_per_train_step 1048576
    --training.max_context_length 4096
    --training.max_norm 1.0
    --training.steps 10000
    --training.mixed_precision_param bfloat16
    --lr_scheduler.warmup_steps 500
    --lr_scheduler.decay_type cosine
    --lr_scheduler.min_lr_factor 0.1
    --debug.seed 1234
)
)";
    QTest::newRow("Qwen3-30B-A3B, ep 2, a dense layer, capacity 1.25, to DeepSpeed") << "qwen3-30b-a3b-2x8.yaml"
        << QStringList{"parallel.ep=2", "model.moe.dense_layers=1", "model.moe.capacity_factor=1.25"} << "deepspeed" << R"(from deepspeed.moe.layer import MoE

# Layer 0 keeps the dense MLP (FFN 6144); layers 1-47 put this in its place:
moe = MoE(
    hidden_size=2048,
    expert=expert,  # one SwiGLU MLP of FFN 768, from the model code
    num_experts=128,
    ep_size=2,  # 64 experts on each rank
    k=8,
    capacity_factor=1.25,
    eval_capacity_factor=1.25,
    drop_tokens=True,
    enable_expert_tensor_parallelism=False,
)
# moe(hidden_states) returns (output, l_aux, expert_counts): add 0.001 * l_aux to the loss.
# With ZeRO the optimizer takes the expert parameters as their own groups:
#   deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer(param_groups)
)";
  }
  void exportMixtures() {
    QFETCH(QString, config);
    QFETCH(QStringList, overrides);
    QFETCH(QString, to);
    QFETCH(QString, args);
    const Framework f = *parse_framework(to.toStdString());
    auto e = export_files(load(config, overrides), f);
    QVERIFY2(e.ok(), e.status().message().c_str());
    QString text;
    if (f == Framework::kDeepspeed) {
      for (const auto& file : e->files) {
        if (file.name == "moe.py") text = qs(file.text);
      }
      text = text.mid(text.indexOf("from deepspeed.moe.layer"));
    } else {
      text = qs(e->files.front().text);
      const QString head = f == Framework::kMegatron ? "MEGATRON_ARGS=(\n" : "TORCHTITAN_ARGS=(\n";
      text = text.mid(text.indexOf(head));
      text = text.left(text.indexOf("\n)\n") + 3);
    }
    QCOMPARE(text, args);
  }

  // torchtitan's expert parallel degree comes back as parallel.ep, each expert whole on its rank;
  // a degree on a dense model, or one that does not fold over dp_shard x cp x tp, is refused.
  void torchtitanExperts() {
    const RunConfig x = load("qwen3-30b-a3b-2x8.yaml", {"parallel.ep=8"});
    auto e = export_files(x, Framework::kTorchtitan);
    QVERIFY2(e.ok(), e.status().message().c_str());
    QVERIFY(qs(e->files.front().text).contains("--module torchtitan_recipes.qwen3 --config CONFIG"));
    RunConfig base = x;
    base.parallel.ep = 1;
    auto back = import_config(e->files.front().text, Framework::kTorchtitan, &base, "qwen3.sh");
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(back->parallel.ep, 8);
    QCOMPARE(back->parallel.expert_tp, 1);
    const Plan px = plan_of(x), pb = plan_of(back.value());
    using stagecraft::plan::ExpertAxis;
    for (ExpertAxis a : {ExpertAxis::kTp, ExpertAxis::kEp, ExpertAxis::kDp}) QCOMPARE(pb.topology.expert_groups(a), px.topology.expert_groups(a));
    const RunConfig dense = load("llama3-8b-1x8.yaml");
    auto d = import_config("--parallelism.tensor_parallel_degree 2\n--parallelism.expert_parallel_degree 2\n", Framework::kTorchtitan, &dense, "d.sh");
    QVERIFY(!d.ok());
    QVERIFY2(qs(d.status().message()).startsWith("d.sh:2: parallelism.expert_parallel_degree=2: the model has no experts"), d.status().message().c_str());
    auto odd = import_config("--parallelism.tensor_parallel_degree 4\n--parallelism.data_parallel_replicate_degree 4\n"
                             "--parallelism.data_parallel_shard_degree 1\n--parallelism.expert_parallel_degree 8\n",
                             Framework::kTorchtitan, &x, "o.sh");
    QVERIFY(!odd.ok());
    QVERIFY2(qs(odd.status().message()).contains("o.sh:4: parallelism.expert_parallel_degree=8: torchtitan needs it to divide "
                                                 "data_parallel_shard_degree x context x tensor parallel degree = 4"),
             odd.status().message().c_str());
  }

  void torchtitanTomlJobConfig() {
    // torchtitan's TOML job config form: [section] then option = value.
    const RunConfig base = load("llama3-8b-1x8.yaml");
    const std::string toml =
        "[job]\ndump_folder = \"./outputs\"\n\n[parallelism]\ndata_parallel_replicate_degree = 1\n"
        "data_parallel_shard_degree = -1  # the rest\ntensor_parallel_degree = 2\ncontext_parallel_degree = 2\n"
        "fsdp_reshard_after_forward = \"never\"\n\n[training]\nmax_context_length = 8192\nnum_tokens_per_microbatch_per_dp_rank = 16384\n"
        "num_tokens_per_train_step = 1048576\nsteps = 500\nmixed_precision_param = \"bfloat16\"\n";
    auto c = import_config(toml, Framework::kTorchtitan, &base, "llama.toml");
    QVERIFY2(c.ok(), c.status().message().c_str());
    QCOMPARE(c->parallel.tp, 2);
    QCOMPARE(c->parallel.cp, 2);
    QCOMPARE(resolved_dp(c.value()), 2);
    QCOMPARE(c->parallel.zero, 2);
    QCOMPARE(c->train.micro_batch, 2);
    QCOMPARE(c->train.global_batch, 128);
    QCOMPARE(c->train.steps, 500);
    // HSDP and a schedule Stagecraft does not plan are refused, each naming the option and line.
    auto hsdp = import_config("[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 2\n", Framework::kTorchtitan,
                              &base, "h.toml");
    QVERIFY(!hsdp.ok());
    QVERIFY2(qs(hsdp.status().message()).startsWith("h.toml:3: parallelism.data_parallel_replicate_degree=2 and data_parallel_shard_degree=2 (HSDP)"),
             hsdp.status().message().c_str());
    auto zb = import_config("TORCHTITAN_ARGS=(\n  --parallelism.pipeline_parallel_degree 2\n  --parallelism.pipeline_parallel_schedule ZBVZeroBubble\n)\n",
                            Framework::kTorchtitan, &base, "z.sh");
    QVERIFY(!zb.ok());
    QVERIFY2(qs(zb.status().message()).contains("z.sh:3: parallelism.pipeline_parallel_schedule=ZBVZeroBubble: Stagecraft plans GPipe"),
             zb.status().message().c_str());
    auto none = import_config("echo hello\n", Framework::kTorchtitan, &base, "e.sh");
    QVERIFY(!none.ok());
    QVERIFY(qs(none.status().message()).contains("no torchtitan settings found"));
  }

  void roundTrip_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("to");
    const auto files = QDir(QString::fromStdString(configs_dir())).entryList({"*.yaml"}, QDir::Files, QDir::Name);
    QVERIFY(files.size() >= 16);
    for (const auto& f : files) {
      for (const char* to : {"libai", "paddle", "colossalai", "deepspeed"}) {
        QTest::newRow(qPrintable(f + " via " + to)) << f << QString(to);
      }
    }
  }
  void roundTrip() {
    QFETCH(QString, config);
    QFETCH(QString, to);
    const RunConfig x = load(config);
    const Framework f = *parse_framework(to.toStdString());
    const bool tensor_grid = x.parallel.tp_mode != TpMode::k1d;
    const bool interleaved = x.pipeline.schedule == Schedule::kInterleaved;
    const bool cp = x.parallel.cp > 1;
    const bool refused = (tensor_grid && f != Framework::kColossalai) || (interleaved && (f == Framework::kLibai || f == Framework::kDeepspeed)) ||
                         (cp && f != Framework::kDeepspeed) || (f == Framework::kDeepspeed && x.parallel.zero >= 2 && x.parallel.pp > 1) ||
                         (x.model.moe.enabled() && f != Framework::kDeepspeed) ||
                         // DeepSpeed's expert groups lie inside its data-parallel group: ep must divide dp.
                         (x.model.moe.enabled() && f == Framework::kDeepspeed && plan_of(x).dp % x.parallel.ep != 0);
    auto e = export_files(x, f);
    QCOMPARE(!e.ok(), refused);
    if (refused) return;
    // The framework's fixed order, as the test knows it independently of the engine.
    std::vector<Axis> order = {Axis::kTp, Axis::kDp, Axis::kPp};
    if (f == Framework::kColossalai || (f == Framework::kPaddle && x.parallel.zero == 0)) order = {Axis::kTp, Axis::kPp, Axis::kDp};
    RunConfig theirs = x;
    theirs.parallel.order = order;
    const Plan px = plan_of(x), pt = plan_of(theirs);
    bool same = true;
    for (Axis a : {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp}) same = same && px.topology.groups(a) == pt.topology.groups(a);
    bool noted = false;
    for (const auto& n : e->notes) noted = noted || qs(n).contains("forms other groups");
    QCOMPARE(noted, !same);

    auto back = import_config(e->files.front().text, f, &x, "exported");
    QVERIFY2(back.ok(), back.status().message().c_str());
    const Plan pb = plan_of(back.value());
    QCOMPARE((QList<int>{pb.dp, pb.tp, pb.pp, pb.cp, pb.virtual_stages, pb.micro_batches}),
             (QList<int>{px.dp, px.tp, px.pp, px.cp, px.virtual_stages, px.micro_batches}));
    QCOMPARE(pb.layer_stage, px.layer_stage);
    const Plan& expected = same ? px : pt;
    for (Axis a : {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp}) QCOMPARE(pb.topology.groups(a), expected.topology.groups(a));
    if (same) {
      if (back.value() != x) QCOMPARE(qs(to_yaml(back.value())), qs(to_yaml(x)));  // shows the difference
      QVERIFY(back.value() == x);
    }
  }
};

void TestFrameworks::exportGolden_data() {
  QTest::addColumn<QString>("config");
  QTest::addColumn<QString>("to");
  QTest::addColumn<QString>("golden");
  QTest::newRow("LiBai dp 2 x tp 4 (seed 001)") << "libai-bert-dp2-tp4.yaml" << "libai" << R"GOLD(# LiBai configuration for libai-bert-dp2-tp4, written by stagecraft-cli export. Merge it into a
#     LiBai training config whose model is LiBai's GPT (configs/common/models/gpt.py), e.g.
#     configs/gpt2_pretrain.py.
# 8 GPUs (1 node x 8 A100-80GB); dp 2 x tp 4 x pp 1; 1 micro-batch of 16 per step and
#     data-parallel rank, global batch 32.
# LiBai numbers ranks tp innermost, then dp, then pp (stages are contiguous blocks of 8 ranks;
#     libai/utils/distributed.py).
#
# The same layout on LiBai's command line (GPUs per node; on several nodes run it on each):
#   bash tools/train.sh tools/train_net.py configs/libai-bert-dp2-tp4.py 8 train.dist.data_parallel_size=2 train.dist.tensor_parallel_size=4 train.dist.pipeline_parallel_size=1 train.dist.pipeline_num_layers=24
from .common.models.gpt import pretrain_model as model
from .common.optim import optim
from .common.train import train

model.cfg.num_layers = 24
model.cfg.hidden_size = 1024
model.cfg.num_attention_heads = 16
model.cfg.ffn_hidden_size = 4096
model.cfg.max_seq_length = 512
model.cfg.vocab_size = 30522

train.dist.num_nodes = 1
train.dist.num_gpus_per_node = 8
train.dist.data_parallel_size = 2
train.dist.tensor_parallel_size = 4
train.dist.pipeline_parallel_size = 1
train.dist.pipeline_num_layers = 24

train.train_micro_batch_size = 16
train.num_accumulation_steps = 1
train.global_batch_size = 32
train.train_iter = 100
train.amp.enabled = True
train.activation_checkpoint.enabled = False
train.zero_optimization.enabled = False
train.seed = 1234
optim.lr = 3e-04
optim.weight_decay = 0.0
)GOLD";
  QTest::newRow("Paddle dp 2 x mp 2 x pp 2 (seed 003)") << "paddle-gpt-dp2-mp2-pp2.yaml" << "paddle" << R"GOLD(# PaddlePaddle hybrid parallel configuration for paddle-gpt-dp2-mp2-pp2, written by stagecraft-cli
#     export.
# 8 GPUs (1 node x 8 V100); dp 2 x tp 2 x pp 2; 4 micro-batches of 2 per step and data-parallel
#     rank, global batch 16.
# Paddle numbers ranks mp (tp) innermost, then sharding, then pp, then dp:
#     CommunicateTopology(["data", "pipe", "sharding", "model"]) in paddle/distributed/fleet, here
#     tp-pp-dp.
# NOTE: precision fp16 is set in the training loop: paddle.amp.auto_cast(dtype='float16')
from paddle.distributed import fleet

strategy = fleet.DistributedStrategy()
strategy.hybrid_configs = {
    "dp_degree": 2,
    "mp_degree": 2,
    "pp_degree": 2,
    "sharding_degree": 1,
}
strategy.pipeline_configs = {
    "accumulate_steps": 4,
    "micro_batch_size": 2,
}
fleet.init(is_collective=True, strategy=strategy)

# The model is a fleet.meta_parallel.PipelineLayer(layers=..., num_stages=2, ...);
# layers per stage: [6, 6].

# Launch on each node:
#   python -m paddle.distributed.launch --gpus "0,1,2,3,4,5,6,7" --ips "127.0.0.1" train.py
)GOLD";
  QTest::newRow("Colossal-AI 2.5d, depth 2 (seed 004)") << "colossalai-2p5d.yaml" << "colossalai" << R"GOLD(# Colossal-AI configuration for colossalai-2p5d (the `parallel = dict(...)` config of
#     colossalai.launch), written by stagecraft-cli export.
# 8 GPUs (1 node x 8 A100-40GB); dp 1 x tp 8 x pp 1; 8 micro-batches of 4 per step and
#     data-parallel rank, global batch 32. Colossal-AI infers the data parallel size, world /
#     (pipeline x tensor).
# Colossal-AI numbers ranks tensor innermost, then pipeline, then data (Initializer_Pipeline),
#     here tp-pp-dp; each tensor group is its 2.5d grid.
from colossalai.amp import AMP_TYPE

parallel = dict(
    tensor=dict(size=8, mode='2.5d', depth=2),
)
# Samples per data-parallel rank and micro-batch; gradient_accumulation micro-batches per step.
BATCH_SIZE = 4
gradient_accumulation = 8
fp16 = dict(mode=AMP_TYPE.TORCH)
clip_grad_norm = 1.0
)GOLD";
}

void TestFrameworks::importSeedExamples_data() {
  QTest::addColumn<QString>("format");
  QTest::addColumn<QString>("base");
  QTest::addColumn<QString>("source");
  QTest::addColumn<QList<int>>("sizes");  // dp, tp, pp
  QTest::addColumn<QList<int>>("stage_layers");
  QTest::addColumn<QString>("tp_groups");
  QTest::addColumn<QString>("dp_groups");
  const QString libai = "from .common.train import train\n...\n\n";
  const QString b = "libai-bert-dp8.yaml";
  const QString eight = "[0] [1] [2] [3] [4] [5] [6] [7]";
  QTest::newRow("LiBai pure DP on 8") << "libai" << b << libai + "train.dist.data_parallel_size = 8\n" << QList<int>{8, 1, 1} << QList<int>{24}
                                      << eight << "[0, 1, 2, 3, 4, 5, 6, 7]";
  QTest::newRow("LiBai pure TP on 8") << "libai" << b << libai + "train.dist.tensor_parallel_size = 8\n" << QList<int>{1, 8, 1} << QList<int>{24}
                                      << "[0, 1, 2, 3, 4, 5, 6, 7]" << eight;
  QTest::newRow("LiBai pure PP on 8: LiBai's own split") << "libai" << b
      << libai + "train.dist.pipeline_parallel_size = 8\n\ntrain.dist.pipeline_num_layers = model.cfg.hidden_layers\n" << QList<int>{1, 1, 8}
      << QList<int>{3, 3, 3, 3, 3, 4, 4, 1} << eight << eight;
  QTest::newRow("LiBai DP 2 x TP 4: groups [0,1,2,3] [4,5,6,7]") << "libai" << b
      << libai + "train.dist.data_parallel_size = 2\ntrain.dist.tensor_parallel_size = 4\n" << QList<int>{2, 4, 1} << QList<int>{24}
      << "[0, 1, 2, 3] [4, 5, 6, 7]" << "[0, 4] [1, 5] [2, 6] [3, 7]";
  QTest::newRow("LiBai DP 2 x PP 4") << "libai" << b
      << libai + "train.dist.data_parallel_size = 2\ntrain.dist.pipeline_parallel_size = 4\n\ntrain.dist.pipeline_num_layers = model.cfg.hidden_layers\n"
      << QList<int>{2, 1, 4} << QList<int>{6, 7, 7, 4} << eight << "[0, 1] [2, 3] [4, 5] [6, 7]";
  QTest::newRow("LiBai TP 2 x PP 4") << "libai" << b
      << libai + "train.dist.tensor_parallel_size = 2\ntrain.dist.pipeline_parallel_size = 4\n\ntrain.dist.pipeline_num_layers = model.cfg.hidden_layers\n"
      << QList<int>{1, 2, 4} << QList<int>{6, 7, 7, 4} << "[0, 1] [2, 3] [4, 5] [6, 7]" << eight;
  QTest::newRow("LiBai 3D 2 x 2 x 2 (docs/ARCHITECTURE.md §4's worked example)") << "libai" << b
      << libai + "train.dist.data_parallel_size = 2\ntrain.dist.tensor_parallel_size = 2\ntrain.dist.pipeline_parallel_size = 2\n\n"
                 "train.dist.pipeline_num_layers = model.cfg.hidden_layers\n"
      << QList<int>{2, 2, 2} << QList<int>{12, 12} << "[0, 1] [2, 3] [4, 5] [6, 7]" << "[0, 2] [1, 3] [4, 6] [5, 7]";
  QTest::newRow("LiBai only TP and PP: dp = 8 / (2 x 2)") << "libai" << b
      << "from .common.train import train\n# only set tensor_parallel_size and pipeline_parallel_size\ntrain.dist.tensor_parallel_size = 2\n"
         "train.dist.pipeline_parallel_size = 2\n\ntrain.dist.pipeline_num_layers = model.cfg.hidden_layers\n"
      << QList<int>{2, 2, 2} << QList<int>{12, 12} << "[0, 1] [2, 3] [4, 5] [6, 7]" << "[0, 2] [1, 3] [4, 6] [5, 7]";
  QTest::newRow("LiBai custom_pipeline_stage_id [6, 7, 7, 4]") << "libai" << b
      << "train.dist.pipeline_parallel_size = 4\ntrain.dist.pipeline_num_layers = 24\ntrain.dist.custom_pipeline_stage_id = [0]*6 + [1]*7 + [2]*7 + [3]*4\n"
      << QList<int>{2, 1, 4} << QList<int>{6, 7, 7, 4} << eight << "[0, 1] [2, 3] [4, 5] [6, 7]";
  QTest::newRow("Paddle seed: DP=MP=PP=2, ranks mp-pp-dp") << "paddle" << "paddle-gpt-dp2-mp2-pp2.yaml"
      << "from paddle.distributed import fleet\nstrategy = fleet.DistributedStrategy()\n\nglobal_batch_size=16\naccumulate_steps=2\nDP=2\nMP=2\nPP=2\n"
         "strategy.hybrid_configs = {\n        \"dp_degree\": DP,\n        \"mp_degree\": MP,\n        \"pp_degree\": PP,\n         }\nif PP > 1:\n"
         "    strategy.pipeline_configs = {\n            \"accumulate_steps\": accumulate_steps,\n"
         "            \"micro_batch_size\": global_batch_size // DP // accumulate_steps\n    }\n\n"
         "fleet.init(is_collective=True, strategy=strategy)\nhcg = fleet.get_hybrid_communicate_group()\n\n"
         "dp_group = hcg.get_data_parallel_group()\n"
      << QList<int>{2, 2, 2} << QList<int>{6, 6} << "[0, 1] [2, 3] [4, 5] [6, 7]" << "[0, 4] [1, 5] [2, 6] [3, 7]";
  const QString cb = "colossalai-1d.yaml";
  QTest::newRow("Colossal-AI pipeline=dict(size=2), 2d tensor 4") << "colossalai" << cb
      << "parallel = dict(\npipeline=dict(size=2),\ntensor=dict(size=4, mode='2d')\n)\n" << QList<int>{1, 4, 2} << QList<int>{12, 12}
      << "[0, 1, 2, 3] [4, 5, 6, 7]" << eight;
  QTest::newRow("Colossal-AI pipeline=2 alone") << "colossalai" << cb << "parallel = dict(\npipeline=2\n)\n" << QList<int>{4, 1, 2}
      << QList<int>{12, 12} << eight << "[0, 2, 4, 6] [1, 3, 5, 7]";
  QTest::newRow("Colossal-AI 1d tensor 4") << "colossalai" << cb << "parallel = dict(\ntensor=dict(size=4, mode='1d')\n)\n" << QList<int>{2, 4, 1}
      << QList<int>{24} << "[0, 1, 2, 3] [4, 5, 6, 7]" << "[0, 4] [1, 5] [2, 6] [3, 7]";
  QTest::newRow("Colossal-AI 2.5d tensor 8, depth 2") << "colossalai" << cb << "parallel = dict(\ntensor=dict(size=8, mode='2.5d', depth=2)\n)\n"
      << QList<int>{1, 8, 1} << QList<int>{24} << "[0, 1, 2, 3, 4, 5, 6, 7]" << eight;
  QTest::newRow("Colossal-AI 3d tensor 8") << "colossalai" << cb << "parallel = dict(\ntensor=dict(size=8, mode='3d')\n)\n" << QList<int>{1, 8, 1}
      << QList<int>{24} << "[0, 1, 2, 3, 4, 5, 6, 7]" << eight;
  QTest::newRow("Colossal-AI pipeline=dict(size=4)") << "colossalai" << cb << "parallel = dict(\n    pipeline=dict(size=4), # number of pipeline stages\n)\n"
      << QList<int>{2, 1, 4} << QList<int>{6, 6, 6, 6} << eight << "[0, 4] [1, 5] [2, 6] [3, 7]";
}

void TestFrameworks::importErrors_data() {
  QTest::addColumn<QString>("format");
  QTest::addColumn<QString>("base");
  QTest::addColumn<QString>("source");
  QTest::addColumn<QString>("message");
  const QString b = "libai-bert-dp8.yaml";
  QTest::newRow("LiBai without a base or model shape") << "libai" << "" << "train.dist.tensor_parallel_size = 2\n"
      << "x.py: the libai config does not give the model shape (model.layers, model.hidden, model.heads); pass --base CONFIG";
  QTest::newRow("LiBai tp that does not divide the GPUs") << "libai" << b << "\ntrain.dist.tensor_parallel_size = 3\n"
      << "x.py:2: parallel.tp=3: 8 GPUs are not divisible by tp x pp = 3";
  QTest::newRow("LiBai size that cannot be evaluated") << "libai" << b << "train.dist.tensor_parallel_size = TP\n"
      << "x.py:1: train.dist.tensor_parallel_size: cannot evaluate it: the name 'TP' is not defined in this file";
  QTest::newRow("LiBai size as a string") << "libai" << b << "train.dist.tensor_parallel_size = '2'\n"
      << "x.py:1: train.dist.tensor_parallel_size='2': expected an integer, got a string";
  QTest::newRow("LiBai size set in a loop") << "libai" << b << "for i in range(2):\n    train.dist.tensor_parallel_size = 2\n"
      << "x.py:2: train.dist.tensor_parallel_size: cannot evaluate it: it is assigned inside the `for` loop on line 1";
  QTest::newRow("LiBai custom ids of the wrong length") << "libai" << b
      << "train.dist.pipeline_parallel_size = 2\ntrain.dist.custom_pipeline_stage_id = [0]*10 + [1]*10\n"
      << "x.py:2: pipeline.partition=a list of 20 stage ids: needs one stage id per layer, 24 in all";
  QTest::newRow("LiBai pipeline_num_layers unlike the model") << "libai" << b
      << "train.dist.pipeline_parallel_size = 2\ntrain.dist.pipeline_num_layers = 12\n"
      << "x.py:2: train.dist.pipeline_num_layers=12: the model has 24 layers (model.layers from the base); LiBai needs them equal";
  QTest::newRow("LiBai ZeRO stage 4") << "libai" << b << "train.zero_optimization.enabled = True\ntrain.zero_optimization.stage = 4\n"
      << "x.py:2: train.zero_optimization.stage=4";
  QTest::newRow("LiBai file that is not Python") << "libai" << b << "train.dist.tensor_parallel_size = (2\n" << "x.py:1: '(' is never closed";
  QTest::newRow("Paddle without hybrid_configs") << "paddle" << b << "strategy = fleet.DistributedStrategy()\n"
      << "x.py: no `strategy.hybrid_configs = {...}` found";
  QTest::newRow("Paddle degrees over the GPUs") << "paddle" << b << "s = fleet.DistributedStrategy()\ns.hybrid_configs = {\n  'dp_degree': 4,\n  'mp_degree': 4,\n}\n"
      << "x.py:3: parallel.dp=4: dp x tp x pp = 16 but the cluster has 8 GPUs";
  QTest::newRow("Paddle dp and sharding both above 1") << "paddle" << b << "s = fleet.DistributedStrategy()\ns.hybrid_configs = {'dp_degree': 2, 'sharding_degree': 2}\n"
      << "x.py:2: s.hybrid_configs: dp_degree 2 and sharding_degree 2 are both above 1";
  QTest::newRow("Colossal-AI tensor without a mode") << "colossalai" << b << "parallel = dict(\npipeline=2,\ntensor=4\n)\n"
      << "x.py:3: parallel.tensor=4: give dict(size=..., mode='1d'|'2d'|'2.5d'|'3d'); Colossal-AI needs the mode";
  QTest::newRow("Colossal-AI data key") << "colossalai" << b << "parallel = dict(data=2)\n"
      << "x.py:1: parallel.data: unknown key; the parallel dict has pipeline and tensor (Colossal-AI infers the data parallel size)";
  QTest::newRow("Colossal-AI sequence mode") << "colossalai" << b << "parallel = dict(tensor=dict(size=2, mode='sequence'))\n"
      << "x.py:1: parallel.tensor.mode='sequence': Stagecraft plans '1d', '2d', '2.5d' and '3d'";
  QTest::newRow("DeepSpeed not JSON") << "deepspeed" << b << "{\"train_batch_size\": 8,}" << "x.py: JSON line 1, column 24: expected a string key";
  QTest::newRow("DeepSpeed batch not a multiple") << "deepspeed" << b
      << "{\n\"train_batch_size\": 10,\n\"train_micro_batch_size_per_gpu\": 4,\n\"gradient_accumulation_steps\": 1\n}"
      << "x.py:2: train_batch_size=10 is not a multiple of train_micro_batch_size_per_gpu x gradient_accumulation_steps = 4";
  QTest::newRow("DeepSpeed batch implies another dp") << "deepspeed" << "bert-large-3d.yaml"
      << "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 4}"
      << "x.py:1: parallel.dp=8: dp x tp x pp = 32 but the cluster has 8 GPUs";
  QTest::newRow("DeepSpeed ZeRO 4") << "deepspeed" << b << "{\"zero_optimization\": {\"stage\": 4}}"
      << "zero_optimization.stage=4";
  QTest::newRow("DeepSpeed Ulysses over the heads") << "deepspeed" << b << "{\"sequence_parallel_size\": 3}"
      << "parallel.cp=3";
  QTest::newRow("Megatron has no import") << "megatron" << b << "" << "megatron: Stagecraft cannot import it";
  QTest::newRow("HF architecture Stagecraft does not model") << "hf" << "" << "{\"architectures\": [\"BertForMaskedLM\"], \"hidden_size\": 768}"
      << "x.py:1: architectures=BertForMaskedLM: Stagecraft reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
         "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM or GPT2LMHeadModel";
  QTest::newRow("HF o_proj bias") << "hf" << ""
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,\n\"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"vocab_size\": 100,\n\"attention_bias\": true}"
      << "x.py:3: attention_bias=true: its biases include o_proj's; Stagecraft's llama has biases on q, k and v only (Qwen2)";
  QTest::newRow("HF decoupled head_dim") << "hf" << ""
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"vocab_size\": 100, \"head_dim\": 32}"
      << "head_dim=32: Stagecraft's LlamaForCausalLM has head_dim = hidden_size / num_attention_heads = 16 (Qwen3ForCausalLM decouples them)";
  QTest::newRow("HF missing size") << "hf" << "" << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64}"
      << "x.py: num_hidden_layers is missing: a LlamaForCausalLM config.json gives it";
  QTest::newRow("HF kv heads that do not divide") << "hf" << ""
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"vocab_size\": 100}"
      << "model.kv_heads=3: must divide model.heads=4";
  QTest::newRow("HF not an object") << "hf" << "" << "[1, 2]" << "x.py:1: a Hugging Face config.json is a JSON object";
}

QTEST_APPLESS_MAIN(TestFrameworks)
#include "tst_frameworks.moc"
