// stagecraft-cli devices, search and plan's estimate, driven as a person would: the real binary,
// real files, exit codes, stdout and the one-line errors on stderr.
#include <QtTest>

#include "cli_process.h"

#include <algorithm>
#include <thread>

#include "stagecraft/core/units.h"

namespace {

using Run = stagecraft::testing::CliRun;

Run cli(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  return stagecraft::testing::run_cli(args, env, 60000);
}

QString config(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + name; }

QJsonDocument json(const QString& text) {
  QJsonParseError e;
  auto d = QJsonDocument::fromJson(text.toUtf8(), &e);
  if (e.error != QJsonParseError::NoError) qWarning() << e.errorString();
  return d;
}

}  // namespace

class TestCliCost : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void devicesListsTheCatalog() {
    const Run r = cli({"devices"});
    QCOMPARE(r.code, 0);
    for (const char* name : {"V100", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "H200-stagecraft", "L40S", "RTX-4090", "cpu"}) {
      QVERIFY2(r.out.contains(QString(name) + " "), name);
    }
    // Peaks carry their unit by magnitude: a GPU in TFLOP/s, the cpu device (80 GFLOP/s a core)
    // in GFLOP/s up to 12 cores, never as "0.2 TFLOP/s".
    const QStringList lines = r.out.split('\n');
    const QString a100 = lines.filter(QRegularExpression("^A100-80GB ")).value(0);
    QVERIFY2(a100.contains("19.5 TFLOP/s") && a100.contains("312.0 TFLOP/s"), qPrintable(a100));
    const QString cpu = lines.filter(QRegularExpression("^cpu ")).value(0);
    const double cpuPeak = 80e9 * std::max(1u, std::thread::hardware_concurrency());
    QVERIFY2(cpu.contains(QString::fromStdString(stagecraft::format_flop_rate(cpuPeak))), qPrintable(cpu));
    if (cpuPeak < 1e12) QVERIFY2(cpu.contains("GFLOP/s") && !cpu.contains("TFLOP/s"), qPrintable(cpu));
    const Run j = cli({"devices", "--json"});
    QCOMPARE(j.code, 0);
    const auto arr = json(j.out).array();
    QCOMPARE(arr.size(), 10);
    QCOMPARE(arr[2].toObject()["name"].toString(), QString("A100-80GB"));
    QCOMPARE(arr[2].toObject()["peak_tflops"].toObject()["bf16"].toDouble(), 312.0);
    QCOMPARE(arr[2].toObject()["memory_gib"].toDouble(), 80.0);
    // The best MFU published on it, and whose run; the cpu device has none.
    QCOMPARE(arr[2].toObject()["published_mfu"].toDouble(), 0.563);
    QCOMPARE(arr[2].toObject()["published_mfu_source"].toString(), QString("1T GPT, Korthikanti et al. 2022"));
    QVERIFY(!arr[9].toObject().contains("published_mfu"));
    // The H200 as the engine runs on it: the H200's peaks and published MFU, constants of its own.
    const QJsonObject h200 = arr[5].toObject(), engine = arr[6].toObject();
    QCOMPARE(engine["name"].toString(), QString("H200-stagecraft"));
    QCOMPARE(engine["peak_tflops"].toObject()["bf16"].toDouble(), h200["peak_tflops"].toObject()["bf16"].toDouble());
    QCOMPARE(engine["published_mfu"].toDouble(), h200["published_mfu"].toDouble());
    QVERIFY(engine["calibration"].toObject()["memory_efficiency"].toDouble() < h200["calibration"].toObject()["memory_efficiency"].toDouble());
    // The name column fits the longest name.
    const QString row = lines.filter(QRegularExpression("^H200-stagecraft ")).value(0);
    QVERIFY2(row.startsWith("H200-stagecraft ") && row.indexOf("140") > 0, qPrintable(row));
    QCOMPARE(lines.value(0).indexOf("memory"), lines.filter(QRegularExpression("^A100-80GB ")).value(0).indexOf("80.0") + 4 - 6);
  }

  void devicesRejectsArguments() {
    const Run r = cli({"devices", "A100"});
    QCOMPARE(r.code, 2);
    QCOMPARE(r.err.count('\n'), 1);
  }

  // A mixture of experts: both counts in the text and the JSON (Mixtral 8x7B: every expert in
  // the total, 2 of 8 per token in the active count).
  void planGivesTotalAndActiveParameters() {
    const Run text = cli({"plan", config("mixtral-8x7b-8x8.yaml")});
    QCOMPARE(text.code, 0);
    QVERIFY2(text.out.contains("46.7 B parameters, 12.9 B active per token"), qPrintable(text.out));
    const Run r = cli({"plan", config("mixtral-8x7b-8x8.yaml"), "--json"});
    QCOMPARE(r.code, 0);
    const auto est = json(r.out).object()["estimate"].toObject();
    QCOMPARE(est["params_total"].toDouble(), 46702792704.0);
    QCOMPARE(est["params_active"].toDouble(), 12879925248.0);
    QVERIFY(est["fits"].toBool());
    // A dense model's are equal, and its text line keeps one count.
    const Run dense = cli({"plan", config("llama3-70b-8x8.yaml"), "--json"});
    const auto d = json(dense.out).object()["estimate"].toObject();
    QCOMPARE(d["params_active"].toDouble(), d["params_total"].toDouble());
    QVERIFY(!cli({"plan", config("llama3-70b-8x8.yaml")}).out.contains("active per token"));
  }

  // plan --json carries the estimate with the fields front ends read.
  void planJsonHasTheEstimate() {
    const Run r = cli({"plan", config("gpt3-175b-1024x8.yaml"), "--json"});
    QCOMPARE(r.code, 0);
    const auto est = json(r.out).object()["estimate"].toObject();
    for (const char* key : {"params_total", "params_active", "memory", "peak_memory_bytes", "fits", "step_time_s", "tflops_per_gpu", "mfu",
                            "tokens_per_s", "bubble_fraction", "breakdown"}) {
      QVERIFY2(est.contains(key), key);
    }
    for (const char* key : {"compute_s", "recompute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s"}) {
      QVERIFY2(est["breakdown"].toObject().contains(key), key);
    }
    const auto mem = est["memory"].toArray();
    QCOMPARE(mem.size(), 8);  // one per pp rank
    for (const auto& m : mem) {
      const auto o = m.toObject();
      const double sum = o["weights"].toDouble() + o["grads"].toDouble() + o["optimizer"].toDouble() + o["activations"].toDouble() +
                         o["workspace"].toDouble();
      QVERIFY(qAbs(sum - o["total"].toDouble()) < 1.0);
    }
    QCOMPARE(mem[1].toObject()["rank"].toInt(), 1024);  // pp rank 1 starts at rank tp x dp = 1024
    QVERIFY(est["fits"].toBool());
    QVERIFY(est["params_total"].toDouble() > 170e9 && est["params_total"].toDouble() < 180e9);
    const double sum = est["breakdown"].toObject()["compute_s"].toDouble();
    QVERIFY(sum > 0 && sum < est["step_time_s"].toDouble());
  }

  void planTextShowsTheEstimate() {
    const Run r = cli({"plan", config("bert-large-3d.yaml"), "--tokens", "1e9"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains("Estimate (A100-80GB"));
    QVERIFY(r.out.contains("<- peak"));
    QVERIFY2(r.out.contains(QRegularExpression("[0-9.]+ (days|hours|minutes) to train on 1e\\+09 tokens")), qPrintable(r.out));
    const Run bad = cli({"plan", config("bert-large-3d.yaml"), "--tokens", "lots"});
    QCOMPARE(bad.code, 2);
    QVERIFY(bad.err.contains("--tokens lots"));
  }

  void planWarnsWhenMemoryDoesNotFit() {
    const Run r = cli({"plan", config("gpt3-175b-1024x8.yaml"), "parallel.tp=1", "parallel.pp=1", "parallel.zero=0",
                       "pipeline.schedule=1f1b", "pipeline.virtual_stages=1", "train.global_batch=8192", "--json"});
    QCOMPARE(r.code, 0);
    const auto doc = json(r.out).object();
    QVERIFY(!doc["estimate"].toObject()["fits"].toBool());
    bool warned = false;
    for (const auto& w : doc["warnings"].toArray()) warned = warned || w.toString().contains("exceeds the 80.0 GiB of A100-80GB");
    QVERIFY(warned);
  }

  void searchRanksLayouts() {
    const Run r = cli({"search", config("gpt3-175b-1024x8.yaml"), "--top", "5"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains("layouts estimated"));
    QVERIFY(r.out.contains("Why #1:"));
    const Run j = cli({"search", config("gpt3-175b-1024x8.yaml"), "--top", "3", "--json"});
    QCOMPARE(j.code, 0);
    const auto doc = json(j.out).object();
    QCOMPARE(doc["plans"].toArray().size(), 3);
    QVERIFY(doc["evaluated"].toInt() > 1000);
    QVERIFY(doc["seconds"].toDouble() < 5.0);
    // The best layout's overrides plan with the same predicted step time.
    const auto best = doc["plans"].toArray()[0].toObject();
    QStringList args = {"plan", config("gpt3-175b-1024x8.yaml")};
    for (const auto& o : best["overrides"].toArray()) args << o.toString();
    args << "--json";
    const Run p = cli(args);
    QCOMPARE(p.code, 0);
    QCOMPARE(json(p.out).object()["estimate"].toObject()["step_time_s"].toDouble(),
             best["estimate"].toObject()["step_time_s"].toDouble());
  }

  // Constraint options: every ranked layout keeps them; --all also ranks layouts that do not fit.
  void searchConstraints() {
    const Run j = cli({"search", config("gpt3-175b-1024x8.yaml"), "--top", "50", "--pp", "16", "--schedules", "1f1b,gpipe",
                       "--recompute", "selective", "--no-zero", "--max-micro-batch", "2", "--tp-in-node", "--json"});
    QCOMPARE(j.code, 0);
    const auto plans = json(j.out).object()["plans"].toArray();
    QVERIFY(plans.size() >= 5);
    for (const auto& v : plans) {
      const auto p = v.toObject();
      QCOMPARE(p["pp"].toInt(), 16);
      QVERIFY(p["schedule"].toString() == "1f1b" || p["schedule"].toString() == "gpipe");
      QCOMPARE(p["recompute"].toString(), QString("selective"));
      QCOMPARE(p["zero"].toInt(), 0);
      QVERIFY(p["micro_batch"].toInt() <= 2);
      QVERIFY(p["tp"].toInt() <= 8);
      QVERIFY(p["estimate"].toObject()["fits"].toBool());
    }
    const Run all = cli({"search", config("gpt3-175b-1024x8.yaml"), "cluster.nodes=8", "--all", "--top", "100000", "--json"});
    QCOMPARE(all.code, 0);
    const auto doc = json(all.out).object();
    QVERIFY(doc["plans"].toArray().size() > doc["fitting"].toInt());
    const Run text = cli({"search", config("gpt3-175b-1024x8.yaml"), "cluster.nodes=8", "--all", "--top", "100000"});
    QCOMPARE(text.code, 0);
    QVERIFY(text.out.contains("* over the device memory: does not fit"));
    const Run fitting = cli({"search", config("gpt3-175b-1024x8.yaml"), "cluster.nodes=8", "--top", "100000"});
    QVERIFY(!fitting.out.contains("does not fit"));
  }

  // Context parallelism and ZeRO stages: a fixed cp, a cap on the stage, and both in scale.
  void searchAndScaleOverCpAndZero() {
    const Run j = cli({"search", config("llama3-8b-128k-4x8.yaml"), "--top", "20", "--cp", "4", "--max-zero", "2", "--json"});
    QCOMPARE(j.code, 0);
    const auto plans = json(j.out).object()["plans"].toArray();
    QVERIFY(plans.size() >= 5);
    for (const auto& v : plans) {
      const auto p = v.toObject();
      QCOMPARE(p["cp"].toInt(), 4);
      QVERIFY(p["zero"].toInt() <= 2);
      QCOMPARE(p["dp"].toInt() * p["tp"].toInt() * p["pp"].toInt() * p["cp"].toInt(), 32);
      QVERIFY(p["overrides"].toArray().contains(QJsonValue("parallel.cp=4")));
    }
    // Unconstrained, the 128k sequences are split: every kept layout uses cp > 1 or fits otherwise,
    // and ZeRO 3 is among the stages tried.
    const Run any = cli({"search", config("llama3-8b-128k-4x8.yaml"), "--top", "100000", "--json"});
    QCOMPARE(any.code, 0);
    bool cp = false, zero3 = false;
    for (const auto& v : json(any.out).object()["plans"].toArray()) {
      cp = cp || v.toObject()["cp"].toInt() > 1;
      zero3 = zero3 || v.toObject()["zero"].toInt() == 3;
    }
    QVERIFY(cp && zero3);
    const Run s = cli({"scale", config("llama3-8b-128k-4x8.yaml"), "--cp", "2", "--json"});
    QCOMPARE(s.code, 0);
    for (const auto& v : json(s.out).object()["points"].toArray()) {
      const auto p = v.toObject();
      if (p["found"].toBool()) QVERIFY2(p["layout"].toString().contains(" cp=2"), qPrintable(p["layout"].toString()));
    }
    const Run bad = cli({"search", config("bert-large-3d.yaml"), "--max-zero", "4"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("--max-zero 4: expected a whole number from 0 to 3"), qPrintable(bad.err));
    const Run both = cli({"search", config("bert-large-3d.yaml"), "--no-zero", "--max-zero", "1"});
    QCOMPARE(both.code, 2);
    QVERIFY(both.err.contains("--no-zero and --max-zero together"));
    const Run badScale = cli({"scale", config("bert-large-3d.yaml"), "--cp", "0"});
    QCOMPARE(badScale.code, 2);
    QVERIFY2(badScale.err.contains("scale: --cp 0: expected a whole number from 1"), qPrintable(badScale.err));
  }

  // Expert parallelism: --ep fixes it in search and in every size of scale, --expert-tp splits
  // the experts, each layout names its ep (text, JSON, overrides); a bad size is one line.
  void searchAndScaleOverExperts() {
    const Run j = cli({"search", config("mixtral-8x7b-8x8.yaml"), "--top", "10", "--ep", "8", "--json"});
    QCOMPARE(j.code, 0);
    const auto plans = json(j.out).object()["plans"].toArray();
    QCOMPARE(plans.size(), 10);
    for (const auto& v : plans) {
      const auto p = v.toObject();
      QCOMPARE(p["ep"].toInt(), 8);
      QCOMPARE(p["expert_tp"].toInt(), 1);
      QVERIFY(p["layout"].toString().contains(" ep=8 "));
      QVERIFY(p["overrides"].toArray().contains(QJsonValue("parallel.ep=8")));
      QVERIFY(p["estimate"].toObject()["breakdown"].toObject()["moe_a2a_s"].toDouble() > 0);
    }
    const Run text = cli({"search", config("mixtral-8x7b-8x8.yaml"), "--top", "3", "--ep", "4", "--expert-tp", "2"});
    QCOMPARE(text.code, 0);
    QVERIFY2(text.out.contains(" ep=4 etp=2 "), qPrintable(text.out));
    // Unconstrained, several expert-parallel sizes are ranked.
    const Run any = cli({"search", config("mixtral-8x7b-8x8.yaml"), "--top", "100000", "--json"});
    QCOMPARE(any.code, 0);
    QSet<int> eps;
    for (const auto& v : json(any.out).object()["plans"].toArray()) eps.insert(v.toObject()["ep"].toInt());
    QVERIFY2(eps.contains(1) && eps.contains(8) && eps.size() >= 3, qPrintable(QString::number(eps.size())));
    const Run s = cli({"scale", config("mixtral-8x7b-8x8.yaml"), "--ep", "8", "--json"});
    QCOMPARE(s.code, 0);
    int found = 0;
    for (const auto& v : json(s.out).object()["points"].toArray()) {
      const auto p = v.toObject();
      if (!p["found"].toBool()) continue;
      ++found;
      QVERIFY2(p["layout"].toString().contains(" ep=8 "), qPrintable(p["layout"].toString()));
      QVERIFY(p["overrides"].toArray().contains(QJsonValue("parallel.ep=8")));
    }
    QVERIFY(found >= 2);
    const Run bad = cli({"search", config("mixtral-8x7b-8x8.yaml"), "--ep", "3"});
    QCOMPARE(bad.code, 2);
    QCOMPARE(bad.err.count('\n'), 1);
    QVERIFY2(bad.err.contains("--ep 3 does not divide model.moe.experts=8"), qPrintable(bad.err));
    const Run badScale = cli({"scale", config("mixtral-8x7b-8x8.yaml"), "--ep", "3"});
    QCOMPARE(badScale.code, 2);
    QVERIFY2(badScale.err.contains("--ep 3 does not divide model.moe.experts=8"), qPrintable(badScale.err));
    const Run badEtp = cli({"search", config("qwen3-30b-a3b-2x8.yaml"), "--expert-tp", "5"});
    QCOMPARE(badEtp.code, 2);
    QVERIFY2(badEtp.err.contains("--expert-tp 5 does not divide model.moe.ffn_hidden=768"), qPrintable(badEtp.err));
    const Run dense = cli({"search", config("bert-large-3d.yaml"), "--ep", "2"});
    QCOMPARE(dense.code, 2);
    QVERIFY2(dense.err.contains("model.moe.experts is 0"), qPrintable(dense.err));
    const Run zero = cli({"search", config("mixtral-8x7b-8x8.yaml"), "--ep", "0"});
    QCOMPARE(zero.code, 2);
    QVERIFY2(zero.err.contains("--ep 0: expected a whole number from 1"), qPrintable(zero.err));
  }

  // plan reports expert parallelism's parts: the all-to-all in the step (text and JSON), the
  // experts' share of DP, and the memory of the experts a rank holds.
  void planReportsExpertParallelism() {
    const Run text = cli({"plan", config("mixtral-8x7b-8x8.yaml")});
    QCOMPARE(text.code, 0);
    QVERIFY2(text.out.contains(" + EP all-to-all "), qPrintable(text.out));
    QVERIFY2(text.out.contains("1 of 8 per MoE layer (ep=8)"), qPrintable(text.out));
    const Run r = cli({"plan", config("mixtral-8x7b-8x8.yaml"), "--json"});
    QCOMPARE(r.code, 0);
    const auto est = json(r.out).object()["estimate"].toObject();
    const auto b = est["breakdown"].toObject();
    QVERIFY(b["moe_a2a_s"].toDouble() > 0);
    QVERIFY(b["expert_dp_comm_s"].toDouble() > 0 && b["expert_dp_comm_s"].toDouble() <= b["dp_comm_s"].toDouble());
    QCOMPARE(est["moe_imbalance"].toDouble(), 1.0);
    for (const auto& m : est["memory"].toArray()) {
      const auto o = m.toObject();
      for (const char* key : {"expert_params", "expert_weights", "expert_grads", "expert_optimizer", "moe_activations", "moe_dispatch"}) {
        QVERIFY2(o.contains(key), key);
      }
      QVERIFY(o["expert_weights"].toDouble() > 0 && o["expert_weights"].toDouble() < o["weights"].toDouble());
      QVERIFY(o["moe_dispatch"].toDouble() < o["activations"].toDouble());
    }
    // A dense model's estimate has the part at 0 and no expert fields.
    const auto dense = json(cli({"plan", config("bert-large-3d.yaml"), "--json"}).out).object()["estimate"].toObject();
    QCOMPARE(dense["breakdown"].toObject()["moe_a2a_s"].toDouble(), 0.0);
    QVERIFY(!dense["memory"].toArray()[0].toObject().contains("expert_params"));
    QVERIFY(!cli({"plan", config("bert-large-3d.yaml")}).out.contains("EP all-to-all"));
  }

  // A base whose own layout is invalid is fine: search chooses the layout.
  void searchAcceptsAnyBaseLayout() {
    const Run r = cli({"search", config("bert-large-3d.yaml"), "parallel.tp=3", "--top", "1"});
    QCOMPARE(r.code, 0);
  }

  // scale --json: one point per size, each the layout `search --top 1` ranks first on a cluster of
  // that size; --csv the same rows; sizes where nothing fits carry search's reason.
  void scaleGivesSearchsBestPerSize() {
    const Run j = cli({"scale", config("gpt3-175b-1024x8.yaml"), "--max-nodes", "16", "--tokens", "300e9", "--json"});
    QCOMPARE(j.code, 0);
    const auto doc = json(j.out).object();
    QCOMPARE(doc["tokens"].toDouble(), 300e9);
    const auto points = doc["points"].toArray();
    QCOMPARE(points.size(), 5);
    QVERIFY(!points[0].toObject()["found"].toBool());
    QVERIFY(points[0].toObject()["reason"].toString().contains("none of"));
    for (const auto& v : points) {
      const auto p = v.toObject();
      if (!p["found"].toBool()) continue;
      const Run s = cli({"search", config("gpt3-175b-1024x8.yaml"), "cluster.nodes=" + QString::number(p["nodes"].toInt()), "--top", "1",
                         "--json"});
      QCOMPARE(s.code, 0);
      const auto best = json(s.out).object()["plans"].toArray()[0].toObject();
      QCOMPARE(p["layout"].toString(), best["layout"].toString());
      QCOMPARE(p["tokens_per_s"].toDouble(), best["estimate"].toObject()["tokens_per_s"].toDouble());
      QCOMPARE(p["days"].toDouble(), 300e9 / p["tokens_per_s"].toDouble() / 86400.0);
    }
    QVERIFY(points[4].toObject()["found"].toBool());
    const Run c = cli({"scale", config("gpt3-175b-1024x8.yaml"), "--max-nodes", "16", "--tokens", "300e9", "--csv"});
    QCOMPARE(c.code, 0);
    const auto rows = c.out.trimmed().split('\n');
    QCOMPARE(rows.size(), 6);
    QCOMPARE(rows[5].split(',')[2], points[4].toObject()["layout"].toString());
    const Run t = cli({"scale", config("gpt3-175b-1024x8.yaml"), "--max-nodes", "16"});
    QCOMPARE(t.code, 0);
    QVERIFY2(t.out.contains("Nothing fits at"), qPrintable(t.out));
  }

  void scaleErrors_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("message");
    QTest::newRow("bad --max-nodes") << QStringList{"scale", config("bert-large-3d.yaml"), "--max-nodes", "0"} << 2 << "--max-nodes 0";
    QTest::newRow("bad --tokens") << QStringList{"scale", config("bert-large-3d.yaml"), "--tokens", "x"} << 2 << "--tokens x";
    QTest::newRow("json and csv") << QStringList{"scale", config("bert-large-3d.yaml"), "--json", "--csv"} << 2 << "choose one";
    QTest::newRow("nothing fits anywhere") << QStringList{"scale", config("gpt3-175b-1024x8.yaml"), "--max-nodes", "2"} << 1
                                           << "no layout fits at any size up to 2 nodes";
  }
  void scaleErrors() {
    QFETCH(QStringList, args);
    QFETCH(int, code);
    QFETCH(QString, message);
    const Run r = cli(args);
    QCOMPARE(r.code, code);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(r.out.isEmpty());
  }

  void searchErrors_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("message");
    QTest::newRow("no config") << QStringList{"search"} << 2 << "expected one CONFIG file";
    QTest::newRow("bad --top") << QStringList{"search", config("bert-large-3d.yaml"), "--top", "0"} << 2 << "--top 0";
    QTest::newRow("unknown device") << QStringList{"search", config("bert-large-3d.yaml"), "cluster.device=B200"} << 2
                                    << "cluster.device=B200: unknown device";
    QTest::newRow("nothing fits") << QStringList{"search", config("gpt3-175b-1024x8.yaml"), "cluster.nodes=1"} << 1
                                  << "none of";
    QTest::newRow("missing file") << QStringList{"search", "/nonexistent/x.yaml"} << 2 << "/nonexistent/x.yaml";
    QTest::newRow("bad --schedules") << QStringList{"search", config("bert-large-3d.yaml"), "--schedules", "1f1b,zigzag"} << 2
                                     << "'zigzag' is not one of gpipe, 1f1b, interleaved";
    QTest::newRow("bad --tp") << QStringList{"search", config("bert-large-3d.yaml"), "--tp", "0"} << 2 << "--tp 0";
    QTest::newRow("constraints leave nothing") << QStringList{"search", config("bert-large-3d.yaml"), "--tp", "3"} << 1
                                               << "satisfies the constraints";
  }
  void searchErrors() {
    QFETCH(QStringList, args);
    QFETCH(int, code);
    QFETCH(QString, message);
    const Run r = cli(args);
    QCOMPARE(r.code, code);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(r.out.isEmpty());
  }
};

QTEST_GUILESS_MAIN(TestCliCost)
#include "tst_cli_cost.moc"
