// The auto-planner: what it enumerates, what it drops, how it ranks, and its explanation.
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/plan/search.h"

#include <QtTest>

#include <algorithm>
#include <functional>
#include <set>

using namespace stagecraft;

namespace {

// Bases are loaded as `stagecraft-cli search` loads them: their layout need not be valid.
config::RunConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto c = config::parse_config(yaml, "test.yaml", overrides, config::Rules::kExceptLayout);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

}  // namespace

class TestSearch : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // 8 GPUs, a model every split accepts: each ranked layout is valid, fits, is estimated the same
  // way plan would estimate it, and the list is sorted.
  void rankedLayoutsAreValidAndSorted() {
    auto base = parse("model: {layers: 24, hidden: 1024, heads: 16, seq_len: 1024}\n"
                      "cluster: {nodes: 1, gpus_per_node: 8, device: A100-80GB}\ntrain: {global_batch: 64, precision: bf16}\n");
    plan::SearchOptions o;
    o.top = 50;
    auto r = plan::search(base, o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QVERIFY(r->evaluated > 100);
    QCOMPARE(static_cast<int>(r->ranked.size()), 50);
    for (size_t i = 0; i < r->ranked.size(); ++i) {
      const auto& cand = r->ranked[i];
      QVERIFY2(config::validate(cand.config).empty(), plan::layout_string(cand.config).c_str());
      QVERIFY(cand.estimate.fits);
      if (i) QVERIFY(r->ranked[i - 1].estimate.step_time_s <= cand.estimate.step_time_s);
      // plan on the candidate's config reproduces the estimate search ranked it by.
      auto p = plan::make_plan(cand.config);
      QVERIFY2(p.ok(), p.status().message().c_str());
      QCOMPARE(p->estimate.step_time_s, cand.estimate.step_time_s);
      QCOMPARE(p->estimate.peak_memory_bytes, cand.estimate.peak_memory_bytes);
    }
    QVERIFY(!r->why.empty());
    QVERIFY2(QString::fromStdString(r->why).contains("faster than"), r->why.c_str());
  }

  // Every (dp, tp, pp) split of 8 GPUs that the model allows is tried.
  void enumeratesEverySplit() {
    auto base = parse("model: {layers: 8, hidden: 512, heads: 8, seq_len: 512}\n"
                      "cluster: {nodes: 1, gpus_per_node: 8}\ntrain: {global_batch: 32, precision: bf16}\n");
    plan::SearchOptions o;
    o.top = 100000;
    auto r = plan::search(base, o);
    QVERIFY(r.ok());
    std::set<std::tuple<int, int, int>> splits;
    std::set<std::string> schedules;
    std::set<int> micro;
    for (const auto& c : r->ranked) {
      splits.insert({c.config.parallel.dp, c.config.parallel.tp, c.config.parallel.pp});
      schedules.insert(std::string(config::to_string(c.config.pipeline.schedule)));
      micro.insert(c.config.train.micro_batch);
    }
    // tp and pp in {1, 2, 4, 8} with tp x pp <= 8: 10 splits.
    QCOMPARE(static_cast<int>(splits.size()), 10);
    QVERIFY(splits.count({8, 1, 1}) && splits.count({1, 8, 1}) && splits.count({1, 1, 8}) && splits.count({2, 2, 2}));
    QCOMPARE(schedules, (std::set<std::string>{"1f1b", "gpipe", "interleaved"}));
    QVERIFY(micro.count(1) && micro.count(4) && micro.count(32));
    QCOMPARE(static_cast<long long>(r->ranked.size()), r->fitting);
  }

  // A model too big for the cluster: a clear failure naming the smallest peak.
  void nothingFitsSaysWhy() {
    auto base = parse("model: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}\n"
                      "cluster: {nodes: 1, gpus_per_node: 8, device: A100-40GB}\ntrain: {global_batch: 8, precision: bf16}\n");
    auto r = plan::search(base);
    QVERIFY(!r.ok());
    QVERIFY2(QString::fromStdString(r.status().message()).contains("the smallest peak is"), r.status().message().c_str());
  }

  // Heads divisible only by 1 and 3 (and 9): TP splits the model cannot take are not proposed.
  void respectsTheModel() {
    auto base = parse("model: {layers: 6, hidden: 576, heads: 9, seq_len: 256}\n"
                      "cluster: {nodes: 1, gpus_per_node: 6}\ntrain: {global_batch: 12, precision: bf16}\n");
    plan::SearchOptions o;
    o.top = 100000;
    auto r = plan::search(base, o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    for (const auto& c : r->ranked) QVERIFY(c.config.parallel.tp == 1 || c.config.parallel.tp == 3);
  }

  // A mixture's routed experts are split by expert_tp, not tp: 8 heads and ffn 256 allow tp 8
  // whatever the experts' width 36; every proposal is a valid config. Expert-parallel sizes range
  // over the divisors of the 4 experts that fold over a stage's ranks; each layout names its ep.
  void respectsTheExperts() {
    auto base = parse("model: {arch: llama, layers: 4, hidden: 256, heads: 8, ffn_hidden: 256, seq_len: 256,\n"
                      "        moe: {experts: 4, top_k: 2, ffn_hidden: 36}}\n"
                      "cluster: {nodes: 1, gpus_per_node: 8}\ntrain: {global_batch: 16, precision: bf16}\n");
    plan::SearchOptions o;
    o.top = 100000;
    auto r = plan::search(base, o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QVERIFY(!r->ranked.empty());
    std::set<int> tps, eps;
    for (const auto& c : r->ranked) {
      QVERIFY(config::validate(c.config).empty());
      tps.insert(c.config.parallel.tp);
      eps.insert(c.config.parallel.ep);
      QCOMPARE(c.config.parallel.expert_tp, 1);
      const int stage = c.config.parallel.tp * c.config.parallel.cp * c.config.parallel.dp;
      QCOMPARE(stage % c.config.parallel.ep, 0);
      QVERIFY(plan::layout_string(c.config).find(" ep=" + std::to_string(c.config.parallel.ep) + " ") != std::string::npos);
    }
    QVERIFY(tps.count(8));
    QCOMPARE(eps, (std::set<int>{1, 2, 4}));
    // expert_tp 2 splits every layout's experts in two; ep x 2 folds.
    o.expert_tp = 2;
    auto split = plan::search(base, o);
    QVERIFY2(split.ok(), split.status().message().c_str());
    for (const auto& c : split->ranked) {
      QCOMPARE(c.config.parallel.expert_tp, 2);
      QVERIFY(plan::layout_string(c.config).find(" etp=2") != std::string::npos);
      QCOMPARE((c.config.parallel.tp * c.config.parallel.cp * c.config.parallel.dp) % (2 * c.config.parallel.ep), 0);
      QVERIFY(config::validate(c.config).empty());
    }
  }

  // --ep fixes the expert-parallel size (a constraint: the same as filtering the full ranking);
  // one that does not divide the experts, an expert_tp that does not divide their width, or
  // either on a dense model is one line naming the fix.
  void fixesExpertParallelism() {
    auto base = parse("model: {arch: llama, layers: 4, hidden: 256, heads: 8, ffn_hidden: 256, seq_len: 256,\n"
                      "        moe: {experts: 8, top_k: 2, ffn_hidden: 64}}\n"
                      "cluster: {nodes: 1, gpus_per_node: 8}\ntrain: {global_batch: 16, precision: bf16}\n");
    plan::SearchOptions all;
    all.top = 100000;
    all.constraints.fits_only = false;
    auto full = plan::search(base, all);
    QVERIFY2(full.ok(), full.status().message().c_str());
    plan::SearchOptions four = all;
    four.constraints.ep = 4;
    auto fixed = plan::search(base, four);
    QVERIFY2(fixed.ok(), fixed.status().message().c_str());
    std::vector<std::string> filtered;
    for (const auto& c : full->ranked) {
      if (plan::allows(four.constraints, c)) filtered.push_back(plan::layout_string(c.config));
    }
    QCOMPARE(static_cast<int>(filtered.size()), static_cast<int>(fixed->ranked.size()));
    for (size_t i = 0; i < filtered.size(); ++i) {
      QCOMPARE(fixed->ranked[i].config.parallel.ep, 4);
      QCOMPARE(plan::layout_string(fixed->ranked[i].config), filtered[i]);
    }
    auto one_line = [](const stagecraft::Status& st, const char* starts) {
      return st.code() == stagecraft::Status::Code::kInvalidInput && st.message().rfind(starts, 0) == 0 && st.message().find('\n') == std::string::npos;
    };
    plan::SearchOptions three = all;
    three.constraints.ep = 3;
    auto bad = plan::search(base, three);
    QVERIFY(!bad.ok());
    QVERIFY2(one_line(bad.status(), "search: --ep 3 does not divide model.moe.experts=8"), bad.status().message().c_str());
    plan::SearchOptions etp = all;
    etp.expert_tp = 3;
    auto bad_etp = plan::search(base, etp);
    QVERIFY2(one_line(bad_etp.status(), "search: --expert-tp 3 does not divide model.moe.ffn_hidden=64"), bad_etp.status().message().c_str());
    auto dense = parse("model: {layers: 4, hidden: 256, heads: 8, seq_len: 256}\ncluster: {nodes: 1, gpus_per_node: 8}\ntrain: {global_batch: 16}\n");
    plan::SearchOptions two = all;
    two.constraints.ep = 2;
    auto bad_dense = plan::search(dense, two);
    QVERIFY2(one_line(bad_dense.status(), "search: --ep 2 splits the experts"), bad_dense.status().message().c_str());
    // A dense model's layouts name no ep; its overrides set none.
    auto dense_r = plan::search(dense, all);
    QVERIFY2(dense_r.ok(), dense_r.status().message().c_str());
    QVERIFY(plan::layout_string(dense_r->ranked.front().config).find("ep=") == std::string::npos);
    for (const auto& o : plan::layout_overrides(dense_r->ranked.front().config)) QVERIFY(o.find("parallel.ep") == std::string::npos);
    // A mixture's overrides reproduce its ep through the normal loader.
    const auto& best = fixed->ranked.front().config;
    auto again = config::parse_config("model: {arch: llama, layers: 4, hidden: 256, heads: 8, ffn_hidden: 256, seq_len: 256,\n"
                                      "        moe: {experts: 8, top_k: 2, ffn_hidden: 64}}\n"
                                      "cluster: {nodes: 1, gpus_per_node: 8}\ntrain: {global_batch: 16, precision: bf16}\n",
                                      "test.yaml", plan::layout_overrides(best));
    QVERIFY2(again.ok(), again.status().message().c_str());
    QCOMPARE(again->parallel.ep, 4);
    // JSON rows carry ep and expert_tp.
    const Json j = plan::search_to_json(fixed.value());
    const Json& row = j.find("plans")->as_array().front();
    QCOMPARE(static_cast<int>(row.find("ep")->as_int()), 4);
    QCOMPARE(static_cast<int>(row.find("expert_tp")->as_int()), 1);
  }

  // The 175B GPT on 1024 x 8 A100s: the winner keeps TP inside a node and uses the pipeline.
  void gpt175bOn8192Gpus() {
    auto base = parse("model: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}\n"
                      "cluster: {nodes: 1024, gpus_per_node: 8, device: A100-80GB}\ntrain: {global_batch: 1536, precision: bf16}\n");
    auto r = plan::search(base);
    QVERIFY2(r.ok(), r.status().message().c_str());
    const auto& best = r->ranked.front().config;
    QVERIFY(best.parallel.tp <= 8);
    QVERIFY(best.parallel.pp > 1);
    QVERIFY(r->ranked.front().estimate.mfu > 0.3 && r->ranked.front().estimate.mfu < 0.7);
    QVERIFY(r->evaluated > 1000);
  }

  // A constrained search keeps exactly the layouts that pass the constraints, in the order of the
  // unconstrained ranking: filtering one full result (as the window does) equals searching again.
  // Each row's check reads the layout directly, so a wrong allows() fails too.
  void constraintsEqualFilteringTheFullRanking_data() {
    QTest::addColumn<int>("row");
    QTest::newRow("fits only") << 0;
    QTest::newRow("fixed tp") << 1;
    QTest::newRow("fixed pp") << 2;
    QTest::newRow("interleaved only") << 3;
    QTest::newRow("no recompute or full only") << 4;
    QTest::newRow("no ZeRO") << 5;
    QTest::newRow("micro-batch at most 2") << 6;
    QTest::newRow("TP within a node") << 7;
  }
  void constraintsEqualFilteringTheFullRanking() {
    QFETCH(int, row);
    // 4 nodes of 4 GPUs: tp 8 and 16 span nodes; a model big enough that some layouts do not fit.
    auto base = parse("model: {layers: 16, hidden: 4096, heads: 32, seq_len: 2048}\n"
                      "cluster: {nodes: 4, gpus_per_node: 4, device: A100-40GB}\ntrain: {global_batch: 64, precision: bf16}\n");
    plan::LayoutConstraints k;
    std::function<bool(const config::RunConfig&, const plan::Estimate&)> check;
    switch (row) {
      case 0: check = [](const auto&, const auto& e) { return e.fits; }; break;
      case 1: k.tp = 2; check = [](const auto& c, const auto& e) { return e.fits && c.parallel.tp == 2; }; break;
      case 2: k.pp = 4; check = [](const auto& c, const auto& e) { return e.fits && c.parallel.pp == 4; }; break;
      case 3:
        k.schedules = {config::Schedule::kInterleaved};
        check = [](const auto& c, const auto& e) { return e.fits && (c.parallel.pp == 1 || c.pipeline.schedule == config::Schedule::kInterleaved); };
        break;
      case 4:
        k.recomputes = {config::Recompute::kNone, config::Recompute::kFull};
        check = [](const auto& c, const auto& e) { return e.fits && c.train.recompute != config::Recompute::kSelective; };
        break;
      case 5: k.max_zero = 0; check = [](const auto& c, const auto& e) { return e.fits && c.parallel.zero == 0; }; break;
      case 6: k.max_micro_batch = 2; check = [](const auto& c, const auto& e) { return e.fits && c.train.micro_batch <= 2; }; break;
      case 7: k.tp_within_node = true; check = [](const auto& c, const auto& e) { return e.fits && c.parallel.tp <= 4; }; break;
    }
    plan::SearchOptions all;
    all.top = 1 << 30;
    all.constraints.fits_only = false;
    auto full = plan::search(base, all);
    QVERIFY2(full.ok(), full.status().message().c_str());
    QVERIFY(full->fitting < static_cast<long long>(full->ranked.size()));  // the full ranking holds layouts that do not fit
    std::vector<std::string> expected;
    for (const auto& cand : full->ranked) {
      if (check(cand.config, cand.estimate)) expected.push_back(plan::layout_string(cand.config));
      QCOMPARE(plan::allows(k, cand), check(cand.config, cand.estimate));
    }
    plan::SearchOptions constrained;
    constrained.top = 1 << 30;
    constrained.constraints = k;
    auto r = plan::search(base, constrained);
    QVERIFY2(r.ok(), r.status().message().c_str());
    std::vector<std::string> got;
    for (const auto& cand : r->ranked) got.push_back(plan::layout_string(cand.config));
    QVERIFY(!got.empty());
    QVERIFY(got.size() < full->ranked.size());
    QCOMPARE(got, expected);
    QCOMPARE(r->evaluated, full->evaluated);
    QCOMPARE(r->fitting, full->fitting);
    QCOMPARE(r->why, plan::why_faster(r->ranked[0], r->ranked[1]));
  }

  // GPT-3 175B on 64 A100s: the model ranks tp 4 layouts at about 60% MFU, above the 56.3%
  // published for any A100 run of this class. They are marked with the model's reason (in the
  // text and the JSON too); --plausible ranks with each prediction capped there, so the winner's
  // capped step is no longer than any other's, and the fastest plausible layout ties the capped
  // ones. Filtering a full capped ranking with allows() still equals searching constrained.
  void implausiblyFastLayoutsAreMarkedAndCapped() {
    auto base = parse("model: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}\n"
                      "cluster: {nodes: 8, gpus_per_node: 8, device: A100-80GB}\ntrain: {global_batch: 1536, precision: bf16}\n");
    plan::SearchOptions o;
    o.top = 1 << 30;
    auto r = plan::search(base, o);
    QVERIFY2(r.ok(), r.status().message().c_str());
    const auto& best = r->ranked.front().estimate;
    qInfo("#1 %s: MFU %.1f%%: %s", plan::layout_string(r->ranked.front().config).c_str(), best.mfu * 100, best.implausible_because.c_str());
    QVERIFY(best.mfu > 0.563);
    QVERIFY(!best.plausible);
    QCOMPARE(best.published_mfu, 0.563);
    QVERIFY2(best.implausible_because.find("above the best published for A100-80GB (56.3%, 1T GPT, Korthikanti et al. 2022)") != std::string::npos,
             best.implausible_because.c_str());
    QVERIFY2(best.implausible_because.find("the parts besides compute take") != std::string::npos ||
                 best.implausible_because.find("compute alone runs at") != std::string::npos,
             best.implausible_because.c_str());
    long long plausible = 0;
    for (const auto& c : r->ranked) {
      QCOMPARE(c.estimate.plausible, c.estimate.mfu <= 0.563);
      QCOMPARE(c.estimate.capped_step_time_s() >= c.estimate.step_time_s, true);
      plausible += c.estimate.plausible ? 1 : 0;
    }
    QVERIFY(plausible > 0);
    const std::string text = plan::search_to_text(*r);
    QVERIFY2(text.find("%!") != std::string::npos, text.substr(0, 2000).c_str());
    QVERIFY(text.find("! above the best MFU published for the device: implausible") != std::string::npos);
    const std::string json = plan::search_to_json(*r).dump();
    QVERIFY(json.find("\"plausible\":false") != std::string::npos);
    QVERIFY(json.find("\"implausible_because\":\"MFU ") != std::string::npos);

    plan::SearchOptions capped = o;
    capped.cap_at_published_mfu = true;
    auto c = plan::search(base, capped);
    QVERIFY2(c.ok(), c.status().message().c_str());
    QVERIFY(c->capped);
    const double first = c->ranked.front().estimate.capped_step_time_s();
    for (const auto& cand : c->ranked) QVERIFY(cand.estimate.capped_step_time_s() >= first);
    // The capped ranking's head ends at most at the fastest plausible layout.
    double fastest_plausible = 1e30;
    for (const auto& cand : r->ranked) {
      if (cand.estimate.plausible) fastest_plausible = std::min(fastest_plausible, cand.estimate.step_time_s);
    }
    QVERIFY(first <= fastest_plausible);
    QVERIFY(first > best.step_time_s);  // the uncapped winner's optimism no longer counts
    QVERIFY(plan::search_to_text(*c).find("Ranked with each prediction capped at that MFU (--plausible)") != std::string::npos);
    // Why #1 leads: its own prediction is the faster, or the cap decided, never "-x% faster".
    QVERIFY2(c->why.find(" is -") == std::string::npos, c->why.c_str());
    if (c->ranked[0].estimate.step_time_s > c->ranked[1].estimate.step_time_s) {
      QVERIFY2(c->why.find("above the best published MFU (56.3%)") != std::string::npos, c->why.c_str());
    }
    // allows() on the capped ranking equals a constrained capped search.
    plan::LayoutConstraints k;
    k.tp = 8;
    std::vector<std::string> expected, got;
    for (const auto& cand : c->ranked) {
      if (plan::allows(k, cand)) expected.push_back(plan::layout_string(cand.config));
    }
    plan::SearchOptions ck = capped;
    ck.constraints = k;
    auto rk = plan::search(base, ck);
    QVERIFY2(rk.ok(), rk.status().message().c_str());
    for (const auto& cand : rk->ranked) got.push_back(plan::layout_string(cand.config));
    QVERIFY(!got.empty());
    QCOMPARE(got, expected);
  }

  void constraintsThatLeaveNothingSaySo() {
    auto base = parse("model: {layers: 8, hidden: 512, heads: 8}\ncluster: {nodes: 1, gpus_per_node: 4}\ntrain: {global_batch: 16}\n");
    plan::SearchOptions o;
    o.constraints.tp = 3;
    auto r = plan::search(base, o);
    QVERIFY(!r.ok());
    QVERIFY2(QString::fromStdString(r.status().message()).contains("satisfies the constraints"), r.status().message().c_str());
  }

  // Progress runs from 0 to 1 in order; returning false stops the search.
  void progressAndCancel() {
    auto base = parse("model: {layers: 24, hidden: 1024, heads: 16, seq_len: 1024}\n"
                      "cluster: {nodes: 2, gpus_per_node: 8}\ntrain: {global_batch: 64, precision: bf16}\n");
    std::vector<double> seen;
    plan::SearchOptions o;
    o.progress = [&](double f) {
      seen.push_back(f);
      return true;
    };
    auto r = plan::search(base, o);
    QVERIFY(r.ok());
    QVERIFY(seen.size() > 5);
    QCOMPARE(seen.front(), 0.0);
    QCOMPARE(seen.back(), 1.0);
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    int calls = 0;
    o.progress = [&](double) { return ++calls < 3; };
    auto cancelled = plan::search(base, o);
    QVERIFY(!cancelled.ok());
    QCOMPARE(QString::fromStdString(cancelled.status().message()), QString("search: cancelled"));
    QCOMPARE(calls, 3);
  }

  void jsonAndTextAgree() {
    auto base = parse("model: {layers: 8, hidden: 512, heads: 8}\ncluster: {nodes: 1, gpus_per_node: 4}\ntrain: {global_batch: 16}\n");
    plan::SearchOptions o;
    o.top = 3;
    auto r = plan::search(base, o);
    QVERIFY(r.ok());
    const Json j = plan::search_to_json(r.value());
    QCOMPARE(j.find("plans")->size(), size_t(3));
    const Json& first = (*j.find("plans"))[0];
    QCOMPARE(QString::fromStdString(first.find("layout")->as_string()), QString::fromStdString(plan::layout_string(r->ranked[0].config)));
    QVERIFY(first.find("estimate")->find("step_time_s"));
    // The overrides reproduce the layout through the normal loader.
    std::vector<std::string> overrides;
    for (const auto& x : first.find("overrides")->as_array()) overrides.push_back(x.as_string());
    auto again = config::apply_overrides(base, overrides);
    QVERIFY2(again.ok(), again.status().message().c_str());
    QCOMPARE(QString::fromStdString(plan::layout_string(again.value())), QString::fromStdString(plan::layout_string(r->ranked[0].config)));
    const std::string text = plan::search_to_text(r.value());
    QVERIFY(text.find(plan::layout_string(r->ranked[0].config)) != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestSearch)
#include "tst_search.moc"
