// Mixture of experts: the router's rule (runtime/moe_routing.h) on cases worked out by hand, its
// gradient against central differences in double, and the MoE layer inside GptStage (routing,
// dispatch, experts, combine, shared experts, the load-balancing loss; moe_layer.h) with every
// gradient of its tensors against central differences of the loss it optimises.
#include "stagecraft/model/model.h"
#include "stagecraft/runtime/gpt_stage.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/moe_routing.h"
#include "stagecraft/runtime/rng.h"

#include <QtTest>

#include <cmath>
#include <cstring>

using namespace stagecraft;
using namespace stagecraft::runtime;

namespace {

// N tokens' logits over E experts, N(0, scale) from the engine's RNG.
std::vector<float> logits_of(int N, int E, uint64_t stream, double scale = 1.0) {
  std::vector<float> l(size_t(N) * E);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(scale * rng_normal(77, stream, i));
  return l;
}

// A tiny Llama whose layer 1 is a mixture of 4 experts of width 8.
config::ModelConfig moe_model() {
  config::ModelConfig m;
  m.arch = "llama";
  m.layers = 2;
  m.hidden = 16;
  m.heads = 2;
  m.kv_heads = 2;
  m.ffn_hidden = 24;
  m.seq_len = 8;
  m.vocab = 32;
  m.tied_embeddings = false;
  m.moe.experts = 4;
  m.moe.top_k = 2;
  m.moe.ffn_hidden = 8;
  m.moe.dense_layers = 1;
  m.moe.aux_loss = 0.1;  // larger than usual, so that its gradient weighs in the check
  return m;
}

struct Objective {
  double loss = 0;              // LM loss + aux
  std::vector<int64_t> load;    // layer 1's tokens per expert
  int64_t dropped = 0;
};

// The objective of one micro-batch (B = 2) on `st`'s parameters; with `backward`, its gradients
// accumulate in the stage.
Objective objective(GptStage& st, bool backward) {
  const auto& m = st.spec().model;
  const int B = 2, T = m.seq_len;
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[size_t(i)] = (i * 7 + 3) % m.vocab;
    targets[size_t(i)] = (i * 11 + 1) % m.vocab;
  }
  double loss = 0;
  if (Status s = st.forward(0, 0, tokens.data(), nullptr, targets.data(), 1.0f / (B * T), nullptr, &loss); !s) qFatal("%s", s.message().c_str());
  Objective o;
  o.loss = loss + st.take_aux_loss();
  if (backward) {
    if (Status s = st.backward(0, 0, nullptr, nullptr); !s) qFatal("%s", s.message().c_str());
  } else {
    st.discard(0, 0);
  }
  auto stats = st.take_moe_stats();
  if (!stats.load.empty()) o.load = stats.load[0];
  o.dropped = stats.dropped;
  return o;
}

}  // namespace

class TestMoe : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { cpu::set_num_threads(1); }

  // Equal logits: the first K experts (ties go to the lower index), weights 1/K renormalised or
  // 1/E as the softmax gives them; the aux loss of a balanced router is its coefficient.
  void tiesGoToTheLowerExpert() {
    const std::vector<float> logits(size_t(3) * 4, 0.5f);
    MoeRouteOptions o;
    o.experts = 4;
    o.top_k = 2;
    for (bool norm : {true, false}) {
      o.norm_topk = norm;
      const MoeRouting r = moe_route(logits.data(), 3, o);
      for (int t = 0; t < 3; ++t) {
        QCOMPARE(r.expert[size_t(t) * 2], 0);
        QCOMPARE(r.expert[size_t(t) * 2 + 1], 1);
        QCOMPARE(r.weight[size_t(t) * 2], norm ? 0.5f : 0.25f);
      }
      QCOMPARE(r.routed, (std::vector<int64_t>{3, 3, 0, 0}));
      QCOMPARE(r.dropped, int64_t(0));
    }
    // Balanced: f_e = 1/E and P_e = 1/E give coef x E x E / E^2 = coef.
    const int64_t routed[4] = {2, 2, 2, 2};
    const double prob_sum[4] = {1, 1, 1, 1};
    double dprob[4];
    QVERIFY(std::abs(moe_aux_loss(routed, prob_sum, 4, 2, 4, 0.01, dprob) - 0.01) < 1e-15);
    QVERIFY(std::abs(dprob[0] - 0.01 * 4 * 0.25 / 4) < 1e-15);  // coef E f / N
  }

  // The top k in descending order, and the renormalised weights are p over their sum.
  void topKByDescendingProbability() {
    const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.0f};  // one token: order 1, 3, 0, 2
    MoeRouteOptions o;
    o.experts = 4;
    o.top_k = 3;
    const MoeRouting r = moe_route(logits.data(), 1, o);
    QCOMPARE(r.expert, (std::vector<int32_t>{1, 3, 0}));
    double z = 0;
    for (float l : logits) z += std::exp(double(l));
    const double p1 = std::exp(2.0) / z, p3 = std::exp(1.0) / z, p0 = std::exp(0.1) / z;
    QVERIFY(std::abs(r.weight[0] - p1 / (p1 + p3 + p0)) < 1e-7);
    QVERIFY(std::abs(r.weight[2] - p0 / (p1 + p3 + p0)) < 1e-7);
    QVERIFY(std::abs(r.probs[1] - p1) < 1e-7);
  }

  // Capacity ceil(cf x N x K / E): 5 tokens that all prefer expert 0 (top 1 of 2, cf 1) keep the
  // first ceil(2.5) = 3 in token order; the rows list the kept ones, expert by expert.
  void capacityDropsTheLaterTokens() {
    std::vector<float> logits;
    for (int t = 0; t < 5; ++t) logits.insert(logits.end(), {1.0f + 0.1f * t, 0.0f});
    MoeRouteOptions o;
    o.experts = 2;
    o.top_k = 1;
    o.capacity_factor = 1.0;
    const MoeRouting r = moe_route(logits.data(), 5, o);
    QCOMPARE(r.capacity, int64_t(3));
    QCOMPARE(r.dropped, int64_t(2));
    QCOMPARE(r.kept, (std::vector<uint8_t>{1, 1, 1, 0, 0}));
    QCOMPARE(r.routed, (std::vector<int64_t>{5, 0}));  // the router's choice, before capacity
    const MoeRows rows = moe_rows(r, 1, 5);  // tokens 1..4 (a tp rank's share)
    QCOMPARE(rows.token, (std::vector<int32_t>{1, 2}));
    QCOMPARE(rows.slot_row, (std::vector<int32_t>{0, 1, -1, -1}));
    QCOMPARE(rows.per_expert, (std::vector<int32_t>{2, 0}));
  }

  // Rows are expert by expert, each expert's in token order; every kept slot has its row.
  void rowsAreExpertMajorInTokenOrder() {
    const std::vector<float> logits = logits_of(9, 5, 1);
    MoeRouteOptions o;
    o.experts = 5;
    o.top_k = 2;
    const MoeRouting r = moe_route(logits.data(), 9, o);
    const MoeRows rows = moe_rows(r, 0, 9);
    QCOMPARE(rows.rows(), 18);
    int row = 0;
    for (int e = 0; e < 5; ++e) {
      int last = -1;
      for (int i = 0; i < rows.per_expert[size_t(e)]; ++i, ++row) {
        const int t = rows.token[size_t(row)];
        QVERIFY(t > last);
        last = t;
        const bool listed = r.expert[size_t(t) * 2] == e || r.expert[size_t(t) * 2 + 1] == e;
        QVERIFY(listed);
      }
    }
    for (int s = 0; s < 18; ++s) {
      const int32_t at = rows.slot_row[size_t(s)];
      QCOMPARE(rows.token[size_t(at)], s / 2);
      QCOMPARE(rows.weight[size_t(at)], r.weight[size_t(s)]);
    }
  }

  // moe_router_backward against central differences in double of
  //   L(logits) = sum over kept slots of c(t, j) x weight(t, j) + s x aux(p; f held),
  // the same top-k (no logit within reach of a tie), with and without renormalisation.
  void routerGradientMatchesFiniteDifferences_data() {
    QTest::addColumn<bool>("norm");
    QTest::addColumn<int>("top_k");
    QTest::newRow("top 2 of 6, renormalised") << true << 2;
    QTest::newRow("top 2 of 6, softmax weights") << false << 2;
    QTest::newRow("top 1 of 6, renormalised") << true << 1;
    QTest::newRow("top 3 of 6, softmax weights") << false << 3;
  }
  void routerGradientMatchesFiniteDifferences() {
    QFETCH(bool, norm);
    QFETCH(int, top_k);
    const int N = 7, E = 6, K = top_k;
    const std::vector<float> base = logits_of(N, E, 2, 2.0);
    std::vector<float> c(size_t(N) * K);
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(rng_normal(5, 3, i));
    MoeRouteOptions o;
    o.experts = E;
    o.top_k = K;
    o.norm_topk = norm;
    const double coef = 0.3, scale = 1.7;
    const MoeRouting r0 = moe_route(base.data(), N, o);
    std::vector<double> dprob(static_cast<size_t>(E));
    moe_aux_loss(r0.routed.data(), r0.prob_sum.data(), E, K, N, coef, dprob.data());
    std::vector<float> dlogits(size_t(N) * E);
    moe_router_backward(dlogits.data(), r0, c.data(), dprob.data(), scale, 0, N);
    // The objective, in double from double logits (moe_route takes float: the weights are
    // recomputed here from the softmax of the same experts, as the rule says).
    auto L = [&](const std::vector<double>& l) {
      double total = 0;
      std::vector<double> psum(static_cast<size_t>(E), 0.0);
      for (int t = 0; t < N; ++t) {
        double mx = -1e300, z = 0;
        for (int e = 0; e < E; ++e) mx = std::max(mx, l[size_t(t) * E + e]);
        std::vector<double> p(static_cast<size_t>(E));
        for (int e = 0; e < E; ++e) z += (p[size_t(e)] = std::exp(l[size_t(t) * E + e] - mx));
        for (int e = 0; e < E; ++e) psum[size_t(e)] += (p[size_t(e)] /= z);
        double S = 0;
        for (int j = 0; j < K; ++j) S += p[size_t(r0.expert[size_t(t) * K + j])];
        for (int j = 0; j < K; ++j) {
          const double pj = p[size_t(r0.expert[size_t(t) * K + j])];
          total += c[size_t(t) * K + j] * (norm ? pj / S : pj);
        }
      }
      return total + scale * moe_aux_loss(r0.routed.data(), psum.data(), E, K, N, coef, nullptr);
    };
    std::vector<double> l(base.begin(), base.end());
    const double h = 1e-5;
    for (size_t i = 0; i < l.size(); ++i) {
      const double keep = l[i];
      l[i] = keep + h;
      const double up = L(l);
      l[i] = keep - h;
      const double down = L(l);
      l[i] = keep;
      const double numeric = (up - down) / (2 * h);
      // dlogits is float: 1e-6 relative, plus the central difference's O(h^2).
      QVERIFY2(std::abs(numeric - dlogits[i]) <= 1e-5 * std::abs(numeric) + 1e-7,
               qPrintable(QString("logit %1: analytic %2 numeric %3").arg(i).arg(dlogits[i]).arg(numeric)));
    }
  }

  // Every tensor of an MoE layer — the router, each expert's gate | up and down, the shared
  // expert, the norm before them — and one of attention and of the dense layer before it: the
  // stage's gradient of (LM loss + aux) against central differences, element by element. The
  // router is made decisive (its weights x 40) so that no step of the difference changes a
  // token's experts (the loads are compared), and the experts' weights x 5 so that they weigh in
  // the loss. Rows: renormalised top 2, softmax weights with a shared expert, capacity 1 (2 of
  // the 32 assignments dropped here: their gradient is 0 both ways), top 1.
  void layerGradientsMatchFiniteDifferences_data() {
    QTest::addColumn<bool>("norm");
    QTest::addColumn<int>("top_k");
    QTest::addColumn<int>("shared");
    QTest::addColumn<double>("capacity");
    QTest::newRow("top 2, renormalised") << true << 2 << 0 << 0.0;
    QTest::newRow("top 2, softmax weights, a shared expert") << false << 2 << 1 << 0.0;
    QTest::newRow("top 2, capacity 1") << true << 2 << 0 << 1.0;
    QTest::newRow("top 1, a shared expert") << true << 1 << 1 << 0.0;
  }
  void layerGradientsMatchFiniteDifferences() {
    QFETCH(bool, norm);
    QFETCH(int, top_k);
    QFETCH(int, shared);
    QFETCH(double, capacity);
    config::ModelConfig m = moe_model();
    m.moe.norm_topk = norm;
    m.moe.top_k = top_k;
    m.moe.shared_experts = shared;
    m.moe.capacity_factor = capacity;
    auto made = GptStage::create(StageSpec::whole_model(m, 2), nullptr);
    QVERIFY2(made.ok(), made.status().message().c_str());
    GptStage& st = *made.value();
    QVERIFY(st.init_parameters(21).ok());
    for (const auto& s : st.param_slots()) {
      if (s.spec.role == model::Role::kRouter) {
        for (size_t i = 0; i < s.count; ++i) st.params()[s.offset + i] *= 40.0f;
      }
    }
    for (size_t i = 0; i < st.num_expert_params(); ++i) st.expert_params()[i] *= 5.0f;
    QVERIFY(st.zero_grads().ok());
    const Objective base = objective(st, true);
    if (capacity > 0) QVERIFY2(base.dropped > 0, "the capacity drops some assignments");
    // Every element's gradient, from the stage's own buffers (dense and experts).
    struct Probe {
      const char* name;
      bool expert;
    };
    std::vector<std::string> names = {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.0.gate_proj.weight",
                                      "model.layers.1.mlp.experts.2.up_proj.weight", "model.layers.1.mlp.experts.3.down_proj.weight",
                                      "model.layers.1.post_attention_layernorm.weight", "model.layers.1.self_attn.q_proj.weight",
                                      "model.layers.0.mlp.down_proj.weight"};
    if (shared) names.insert(names.end(), {"model.layers.1.mlp.shared_experts.up_proj.weight", "model.layers.1.mlp.shared_experts.down_proj.weight"});
    int checked = 0;
    for (const std::string& name : names) {
      float* param = nullptr;
      const float* grad = nullptr;
      size_t count = 0;
      for (const auto& s : st.param_slots()) {
        if (s.spec.name == name) param = st.params() + s.offset, grad = st.grads() + s.offset, count = s.count;
      }
      for (const auto& s : st.expert_slots()) {
        if (s.spec.name == name) param = st.expert_params() + s.offset, grad = st.expert_grads() + s.offset, count = s.count;
      }
      QVERIFY2(param, name.c_str());
      for (size_t i : {size_t(1), count / 3, count - 2}) {
        const float analytic = grad[i], saved = param[i];
        // As GptStage's own check: a step of 1e-2 in fp32, agreement to 2% or 2e-5.
        const float h = 1e-2f;
        param[i] = saved + h;
        const Objective up = objective(st, false);
        param[i] = saved - h;
        const Objective down = objective(st, false);
        param[i] = saved;
        QVERIFY2(up.load == base.load && down.load == base.load, qPrintable(QString("%1[%2] moved a token to another expert").arg(name.c_str()).arg(i)));
        const double numeric = (up.loss - down.loss) / (2 * h);
        QVERIFY2(std::abs(numeric - analytic) <= 0.02 * std::abs(numeric) + 2e-5,
                 qPrintable(QString("%1[%2]: analytic %3 numeric %4").arg(name.c_str()).arg(i).arg(analytic).arg(numeric)));
        ++checked;
      }
    }
    QCOMPARE(checked, int(names.size()) * 3);
  }
};

QTEST_APPLESS_MAIN(TestMoe)
#include "tst_moe.moc"
