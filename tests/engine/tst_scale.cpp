// Scale: the sizes it tries, that each size's layout is search's best there, the ideal line,
// the days, and the failures.
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/scale.h"
#include "stagecraft/plan/search.h"

#include <QtTest>

using namespace stagecraft;

namespace {

config::RunConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto c = config::parse_config(yaml, "test.yaml", overrides, config::Rules::kExceptLayout);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

const char* kGpt3 =
    "cluster: {nodes: 1024, gpus_per_node: 8, device: A100-80GB}\n"
    "model: {layers: 96, hidden: 12288, heads: 96, ffn_hidden: 49152, seq_len: 2048, vocab: 51200}\n"
    "parallel: {tp: 8, pp: 8, sequence_parallel: true, zero: 1}\n"
    "train: {global_batch: 3072, micro_batch: 1, precision: bf16, recompute: selective, steps: 100000}\n";

const char* kSmall =
    "cluster: {nodes: 4, gpus_per_node: 8, device: A100-80GB}\n"
    "model: {layers: 24, hidden: 2048, heads: 16, seq_len: 2048}\n"
    "train: {global_batch: 256, precision: bf16, steps: 1000}\n";

}  // namespace

class TestScale : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void sizes_data() {
    QTest::addColumn<int>("max");
    QTest::addColumn<QList<int>>("sizes");
    QTest::newRow("one node") << 1 << QList<int>{1};
    QTest::newRow("power of two") << 16 << QList<int>{1, 2, 4, 8, 16};
    QTest::newRow("not a power of two ends at the limit") << 12 << QList<int>{1, 2, 4, 8, 12};
    QTest::newRow("three") << 3 << QList<int>{1, 2, 3};
  }
  void sizes() {
    QFETCH(int, max);
    QFETCH(QList<int>, sizes);
    const auto got = plan::scale_sizes(max);
    QCOMPARE(QList<int>(got.begin(), got.end()), sizes);
  }

  // Each size's layout is what search ranks first on a cluster of that size; the ideal line is
  // the first size's tokens/s per GPU times the GPUs; days follow from the tokens.
  void eachSizeIsSearchsBest() {
    const auto base = parse(kSmall);
    auto r = plan::scale(base);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(static_cast<int>(r->points.size()), 3);  // 1, 2, 4 nodes
    QCOMPARE(r->tokens, 1000.0 * 256 * 2048);
    const double per_gpu = r->points[0].best.estimate.tokens_per_s / 8;
    for (const auto& p : r->points) {
      QVERIFY(p.found);
      QCOMPARE(p.gpus, p.nodes * 8);
      auto c = base;
      c.cluster.nodes = p.nodes;
      auto s = plan::search(c);
      QVERIFY(s.ok());
      QCOMPARE(plan::layout_string(p.best.config), plan::layout_string(s->ranked.front().config));
      QCOMPARE(p.best.estimate.step_time_s, s->ranked.front().estimate.step_time_s);
      QCOMPARE(p.best.config.cluster.nodes, p.nodes);
      QCOMPARE(p.ideal_tokens_per_s, per_gpu * p.gpus);
      QCOMPARE(p.efficiency, p.best.estimate.tokens_per_s / p.ideal_tokens_per_s);
      QVERIFY(p.efficiency > 0.3 && p.efficiency < 1.2);
      QCOMPARE(p.days, r->tokens / p.best.estimate.tokens_per_s / 86400.0);
    }
    QCOMPARE(r->points[0].efficiency, 1.0);
    // More GPUs, more tokens/s, fewer days.
    QVERIFY(r->points[2].best.estimate.tokens_per_s > r->points[0].best.estimate.tokens_per_s);
    QVERIFY(r->points[2].days < r->points[0].days);
  }

  // GPT-3 175B at 8 and 16 nodes: the model's best layouts run above the 56.3% MFU published for
  // A100s; each such size is marked in the text and the JSON, and with the cap (--plausible) each
  // size's layout is the one a capped search ranks first.
  void implausibleSizesAreMarkedAndCapped() {
    plan::ScaleOptions o;
    o.max_nodes = 16;
    const auto base = parse(kGpt3);
    auto r = plan::scale(base, o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QVERIFY(!r->capped);
    int marked = 0;
    for (const auto& p : r->points) marked += p.found && !p.best.estimate.plausible ? 1 : 0;
    QVERIFY(marked > 0);
    const std::string text = plan::scale_to_text(*r);
    QVERIFY2(text.find("%!") != std::string::npos, text.c_str());
    QVERIFY(text.find("! above the best MFU published for the device: implausible. At ") != std::string::npos);
    QVERIFY(plan::scale_to_json(*r).dump().find("\"plausible\":false") != std::string::npos);
    o.search.cap_at_published_mfu = true;
    auto c = plan::scale(base, o);
    QVERIFY2(c.ok(), c.status().message().c_str());
    QVERIFY(c->capped);
    int capped_marked = 0;
    for (const auto& p : c->points) {
      if (!p.found) continue;
      capped_marked += p.best.estimate.plausible ? 0 : 1;
      auto b = base;
      b.cluster.nodes = p.nodes;
      plan::SearchOptions so;
      so.cap_at_published_mfu = true;
      auto s = plan::search(b, so);
      QVERIFY(s.ok());
      QCOMPARE(plan::layout_string(p.best.config), plan::layout_string(s->ranked.front().config));
    }
    QCOMPARE(plan::scale_to_text(*c).find("(--plausible)") != std::string::npos, capped_marked > 0);
  }

  // GPT-3 175B fits on no single 8-GPU node: that size carries search's reason, and the ideal
  // line starts from the first size that has a layout.
  void sizesWhereNothingFitsKeepTheirReason() {
    plan::ScaleOptions o;
    o.max_nodes = 64;
    o.tokens = 300e9;
    auto r = plan::scale(parse(kGpt3), o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(static_cast<int>(r->points.size()), 7);
    QCOMPARE(r->tokens, 300e9);
    QVERIFY(!r->points[0].found);
    QVERIFY2(QString::fromStdString(r->points[0].reason).contains("none of"), r->points[0].reason.c_str());
    QVERIFY(r->points.back().found);
    int first = -1;
    for (int i = 0; i < static_cast<int>(r->points.size()); ++i) {
      if (r->points[i].found && first < 0) first = i;
    }
    QVERIFY(first > 0);
    const auto& f = r->points[first];
    QCOMPARE(f.efficiency, 1.0);
    for (const auto& p : r->points) QCOMPARE(p.ideal_tokens_per_s, f.best.estimate.tokens_per_s / f.gpus * p.gpus);
    const auto json = plan::scale_to_json(r.value()).dump();
    QVERIFY(QString::fromStdString(json).contains("\"reason\""));
    const auto csv = QString::fromStdString(plan::scale_to_csv(r.value()));
    QCOMPARE(csv.count('\n'), 8);
    QVERIFY(csv.startsWith("nodes,gpus,layout,tokens_per_s,mfu,days,ideal_tokens_per_s,efficiency\n"));
    QVERIFY(csv.contains("\n1,8,,,,,"));
    const auto text = QString::fromStdString(plan::scale_to_text(r.value()));
    QVERIFY2(text.contains("Nothing fits at\n  1 node: search: none of"), qPrintable(text));
  }

  // A mixture of experts: every size ranks expert-parallel sizes too, and --ep fixes them in
  // each; one that does not divide the experts fails the table in one line.
  void expertParallelismPerSize() {
    const std::string moe =
        "cluster: {nodes: 2, gpus_per_node: 8, device: H100-SXM}\n"
        "model: {arch: llama, layers: 8, hidden: 2048, heads: 16, kv_heads: 4, ffn_hidden: 5632, seq_len: 4096, vocab: 32000,\n"
        "        tied_embeddings: false, moe: {experts: 8, top_k: 2}}\n"
        "train: {global_batch: 64, precision: bf16, attention: flash, steps: 1000}\n";
    plan::ScaleOptions o;
    o.search.constraints.ep = 4;
    auto r = plan::scale(parse(moe), o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(r->points.size(), size_t{2});
    for (const auto& p : r->points) {
      QVERIFY(p.found);
      QCOMPARE(p.best.config.parallel.ep, 4);
    }
    QVERIFY(QString::fromStdString(plan::scale_to_text(r.value())).contains(" ep=4 "));
    o.search.constraints.ep = 3;
    auto bad = plan::scale(parse(moe), o);
    QVERIFY(!bad.ok());
    QCOMPARE(bad.status().code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(bad.status().message()).contains("--ep 3 does not divide model.moe.experts=8"), bad.status().message().c_str());
  }

  void failures_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<int>("max_nodes");
    QTest::addColumn<double>("tokens");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("message");
    QTest::newRow("nothing fits at any size") << QString(kGpt3) << 2 << 0.0 << static_cast<int>(Status::Code::kUnavailable)
                                              << "no layout fits at any size up to 2 nodes";
    QTest::newRow("negative size") << QString(kSmall) << -1 << 0.0 << static_cast<int>(Status::Code::kInvalidInput) << "max nodes -1";
    QTest::newRow("negative tokens") << QString(kSmall) << 0 << -5.0 << static_cast<int>(Status::Code::kInvalidInput)
                                     << "tokens must be a positive number";
  }
  void failures() {
    QFETCH(QString, yaml);
    QFETCH(int, max_nodes);
    QFETCH(double, tokens);
    QFETCH(int, code);
    QFETCH(QString, message);
    plan::ScaleOptions o;
    o.max_nodes = max_nodes;
    o.tokens = tokens;
    auto r = plan::scale(parse(yaml.toStdString()), o);
    QVERIFY(!r.ok());
    QCOMPARE(static_cast<int>(r.status().code()), code);
    QVERIFY2(QString::fromStdString(r.status().message()).contains(message), r.status().message().c_str());
  }
};

QTEST_GUILESS_MAIN(TestScale)
#include "tst_scale.moc"
