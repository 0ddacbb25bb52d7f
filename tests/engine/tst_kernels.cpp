// The CPU kernels (runtime/kernels.h), the CPU device (runtime/device.h) and the counter-based
// RNG (runtime/rng.h): every backward against central finite differences in double, the float
// kernels against the double ones, a whole tiny GPT (forward, loss, every gradient) against an
// independent PyTorch reference (tests/engine/ref/gpt_ref.py), AdamW against its closed form,
// the segment calls (one call over many ranges) against one call per range, bf16 rounding
// (bf16.h) against an independent rule and bf16 activations in the Ops table against rounded
// fp32 outputs, and sharded RNG draws against unsharded ones.
#include "runtime/cpu/thread_pool.h"
#include "runtime/element_math.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/rng.h"
#include "stagecraft/runtime/segment_table.h"
#include "segment_test_support.h"
#include "tiny_gpt.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace stagecraft;
using namespace stagecraft::runtime;
using cpu::Layout;
using tiny_gpt::GptDims;
using tiny_gpt::TinyGpt;
using tiny_gpt::gpt_init;
using tiny_gpt::gpt_tensors;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Deterministic test data: N(0, scale) from the RNG under test's simplest path.
std::vector<double> randn(size_t n, uint64_t stream, double scale = 1.0) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * rng_normal(1234, stream, i);
  return v;
}

std::vector<int32_t> tokens_of(size_t n, int V, uint64_t stream) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t(rng_uniform(99, stream, i) * V);
  return t;
}

template <typename To>
std::vector<To> cast(const std::vector<double>& v) {
  return std::vector<To>(v.begin(), v.end());
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// max |a - b| / max(max |b|, floor): an error relative to the tensor's scale, so that tiny
// entries near zero do not dominate.
template <typename A>
// Infinite where the sizes differ or a difference is not finite: a NaN left in an output (a slot a
// kernel never writes, in a buffer filled with NaN) must fail, and std::max would pass it over.
double rel_err(const std::vector<A>& a, const std::vector<double>& b, double floor = 1e-12) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0, d = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double e = std::abs(double(a[i]) - b[i]);
    if (!std::isfinite(e)) return INFINITY;
    m = std::max(m, std::abs(b[i]));
    d = std::max(d, e);
  }
  return d / std::max(m, floor);
}

// Central differences of loss() with respect to x, at up to max_checks elements spread evenly,
// compared with `analytic`. In double with h = 1e-5 the truncation error is ~h^2 |f'''| ~ 1e-10 and
// the rounding error ~1e-16 |L| / h ~ 1e-11, so 1e-6 relative to the gradient's scale fails only on
// a wrong formula.
void check_grad(const char* what, std::vector<double>& x, const std::vector<double>& analytic,
                const std::function<double()>& loss, size_t max_checks = 400) {
  QCOMPARE(analytic.size(), x.size());
  const double h = 1e-5;
  double scale = 1e-3;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  const size_t stride = std::max<size_t>(1, x.size() / max_checks);
  for (size_t i = 0; i < x.size(); i += stride) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - analytic[i]) / scale;
    if (!(err < 1e-6)) {
      QFAIL(qPrintable(QString("%1[%2]: analytic %3, numeric %4").arg(what).arg(i).arg(analytic[i]).arg(numeric)));
    }
  }
}

bool all_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using testing::place_segments;

// v (n) rounded to bf16, its bits compared, and bf16 values widened back.
std::vector<bf16> rounded_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = to_bf16(v[i]);
  return r;
}
bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}
std::vector<float> widened_bf16(const std::vector<bf16>& v) {
  std::vector<float> w(v.size());
  cpu::from_bf16(w.data(), v.data(), v.size());
  return w;
}

// Grouped-query qkv (B, T, (NH + 2 NKV) HS) with each K/V head repeated for the NH / NKV query
// heads that read it, as transformers' repeat_kv does: the multi-head qkv (B, T, 3 NH HS) whose
// attention grouped-query attention must equal.
std::vector<double> repeat_kv(const std::vector<double>& qkv, int B, int T, int NH, int NKV, int HS) {
  const size_t C = size_t(NH) * HS, W = size_t(NH + 2 * NKV) * HS;
  std::vector<double> rep(size_t(B) * T * 3 * C);
  for (size_t bt = 0; bt < size_t(B) * T; ++bt) {
    const double* in = qkv.data() + bt * W;
    double* out = rep.data() + bt * 3 * C;
    for (int h = 0; h < NH; ++h) {
      const size_t kv = size_t(h / (NH / NKV));
      for (int d = 0; d < HS; ++d) {
        out[h * HS + d] = in[h * HS + d];
        out[C + h * HS + d] = in[C + kv * HS + d];
        out[2 * C + h * HS + d] = in[C + (NKV + kv) * HS + d];
      }
    }
  }
  return rep;
}

// The Llama kernels' PyTorch reference (tests/engine/ref/llama_ref.py): its sizes and inputs, and
// the CPU kernels' outputs in Real, named, in the order the script writes its own.
struct LlamaCase {
  int B = 0, T = 0, NH = 0, NKV = 0, HS = 0, F = 0;
  float theta = 0, eps = 0;
  // rms_x (B T, C), rms_w (C), rms_dout (B T, C), C = NH HS; qkv and rope_dout (B, T, (NH + 2 NKV) HS);
  // att_dout (B, T, C); glu_x (B T, 2F); glu_dout (B T, F)
  std::vector<double> rms_x, rms_w, rms_dout, qkv, rope_dout, att_dout, glu_x, glu_dout;
};

template <typename Real>
std::vector<std::pair<const char*, std::vector<Real>>> llama_outputs(const LlamaCase& c) {
  const int BT = c.B * c.T, C = c.NH * c.HS;
  const size_t n = size_t(BT) * C;
  std::vector<std::pair<const char*, std::vector<Real>>> out;
  {  // RMSNorm; both gradients accumulate onto zeros
    const auto x = cast<Real>(c.rms_x), w = cast<Real>(c.rms_w), dy = cast<Real>(c.rms_dout);
    std::vector<Real> y(n), rstd(BT), dx(n, Real(0)), dw(size_t(C), Real(0));
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), BT, C, c.eps);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), BT, C);
    out.insert(out.end(), {{"rmsnorm out", y}, {"rmsnorm dinp", dx}, {"rmsnorm dweight", dw}});
  }
  {  // rotary positions, in place
    std::vector<Real> y = cast<Real>(c.qkv), d = cast<Real>(c.rope_dout);
    cpu::rope_forward(y.data(), c.B, c.T, c.NH, c.NKV, c.HS, c.theta);
    cpu::rope_backward(d.data(), c.B, c.T, c.NH, c.NKV, c.HS, c.theta);
    out.insert(out.end(), {{"rope out", y}, {"rope dqkv", d}});
  }
  {  // grouped-query attention
    const auto qkv = cast<Real>(c.qkv), dy = cast<Real>(c.att_dout);
    std::vector<Real> y(n), att(size_t(c.B) * c.NH * c.T * c.T), scratch(att.size()), d(qkv.size());
    cpu::attention_forward(y.data(), att.data(), qkv.data(), c.B, c.T, c.NH, c.HS, c.NKV);
    cpu::attention_backward(d.data(), scratch.data(), dy.data(), qkv.data(), att.data(), c.B, c.T, c.NH, c.HS, c.NKV);
    out.insert(out.end(), {{"attention out", y}, {"attention dqkv", d}});
  }
  {  // SwiGLU
    const auto x = cast<Real>(c.glu_x), dy = cast<Real>(c.glu_dout);
    std::vector<Real> y(size_t(BT) * c.F), d(x.size());
    cpu::swiglu_forward(y.data(), x.data(), BT, c.F);
    cpu::swiglu_backward(d.data(), x.data(), dy.data(), BT, c.F);
    out.insert(out.end(), {{"swiglu out", y}, {"swiglu dinp", d}});
  }
  return out;
}

}  // namespace

class TestKernels : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { cpu::set_num_threads(2); }  // so that every split path runs

  // ---- backward against finite differences (double) ----------------------------------------------

  void matmulBackwardMatchesFiniteDifferences_data() {
    QTest::addColumn<int>("BT");
    QTest::addColumn<int>("C");
    QTest::addColumn<int>("OC");
    QTest::addColumn<bool>("bias");
    QTest::addColumn<bool>("out_in");
    QTest::newRow("conv1d 5x7 -> 3 with bias") << 5 << 7 << 3 << true << false;
    QTest::newRow("tied head 6x4 -> 9 no bias") << 6 << 4 << 9 << false << true;
    QTest::newRow("split over rows: 160x64 -> 96") << 160 << 64 << 96 << true << false;
    QTest::newRow("split over columns: 24x64 -> 700") << 24 << 64 << 700 << true << false;
    QTest::newRow("tied head split: 130x48 -> 200") << 130 << 48 << 200 << false << true;
  }
  void matmulBackwardMatchesFiniteDifferences() {
    QFETCH(int, BT);
    QFETCH(int, C);
    QFETCH(int, OC);
    QFETCH(bool, bias);
    QFETCH(bool, out_in);
    const Layout layout = out_in ? Layout::kOutIn : Layout::kInOut;
    auto inp = randn(size_t(BT) * C, 1), w = randn(size_t(C) * OC, 2), b = randn(OC, 3);
    const auto r = randn(size_t(BT) * OC, 4);
    std::vector<double> out(size_t(BT) * OC);
    auto loss = [&] {
      cpu::matmul_forward(out.data(), inp.data(), w.data(), bias ? b.data() : nullptr, BT, C, OC, layout);
      return dot(out, r);
    };
    // dinp is overwritten: NaN in it must vanish. Parameter gradients accumulate onto 0.5.
    std::vector<double> dinp(inp.size(), kNaN), dw(w.size(), 0.5), db(OC, 0.5);
    cpu::matmul_backward(dinp.data(), dw.data(), bias ? db.data() : nullptr, r.data(), inp.data(),
                         w.data(), BT, C, OC, layout);
    for (double& x : dw) x -= 0.5;
    for (double& x : db) x -= 0.5;
    check_grad("inp", inp, dinp, loss);
    check_grad("weight", w, dw, loss);
    if (bias) check_grad("bias", b, db, loss);
  }

  void layernormBackwardMatchesFiniteDifferences_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("C");
    QTest::newRow("3 rows of 5") << 3 << 5;
    QTest::newRow("70 rows of 48 (column split)") << 70 << 48;
  }
  void layernormBackwardMatchesFiniteDifferences() {
    QFETCH(int, N);
    QFETCH(int, C);
    auto inp = randn(size_t(N) * C, 10, 2.0), w = randn(C, 11), b = randn(C, 12);
    const auto r = randn(size_t(N) * C, 13);
    std::vector<double> out(inp.size()), mean(N), rstd(N);
    auto loss = [&] {
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
      return dot(out, r);
    };
    loss();
    // All three accumulate (dinp is the residual stream).
    std::vector<double> dinp(inp.size(), 0.25), dw(C, 0.25), db(C, 0.25);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    for (auto* v : {&dinp, &dw, &db})
      for (double& x : *v) x -= 0.25;
    check_grad("inp", inp, dinp, loss);
    check_grad("weight", w, dw, loss);
    check_grad("bias", b, db, loss);
  }

  void attentionBackwardMatchesFiniteDifferences_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("HS");
    QTest::addColumn<int>("NKV");
    QTest::newRow("B2 T5 NH2 HS3") << 2 << 5 << 2 << 3 << 2;
    QTest::newRow("T1: a single position") << 2 << 1 << 3 << 2 << 3;
    QTest::newRow("T70 crosses the 64-row block") << 1 << 70 << 2 << 4 << 2;
    QTest::newRow("T130: three blocks, 8 heads") << 1 << 130 << 8 << 2 << 8;
    QTest::newRow("GQA B2 T7: 4 heads over 2 K/V heads") << 2 << 7 << 4 << 3 << 2;
    QTest::newRow("MQA T70: 4 heads over 1 K/V head, two key blocks") << 1 << 70 << 4 << 2 << 1;
    QTest::newRow("GQA T130: 6 heads over 2, three key blocks") << 1 << 130 << 6 << 2 << 2;
  }
  void attentionBackwardMatchesFiniteDifferences() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, HS);
    QFETCH(int, NKV);
    const size_t C = size_t(NH) * HS;
    auto qkv = randn(size_t(B) * T * (NH + 2 * NKV) * HS, 20);
    const auto r = randn(size_t(B) * T * C, 21);
    std::vector<double> out(size_t(B) * T * C), att(size_t(B) * NH * T * T, kNaN);
    auto loss = [&] {
      cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, HS, NKV);
      return dot(out, r);
    };
    loss();
    // The saved probabilities: rows sum to 1, zero above the diagonal.
    for (int bh = 0; bh < B * NH; ++bh)
      for (int t = 0; t < T; ++t) {
        double s = 0;
        for (int j = 0; j < T; ++j) {
          const double pj = att[(size_t(bh) * T + t) * T + j];
          if (j > t) QCOMPARE(pj, 0.0);
          s += pj;
        }
        QVERIFY(std::abs(s - 1) < 1e-12);
      }
    std::vector<double> dqkv(qkv.size(), kNaN), scratch(att.size(), kNaN);
    cpu::attention_backward(dqkv.data(), scratch.data(), r.data(), qkv.data(), att.data(), B, T, NH, HS, NKV);
    check_grad("qkv", qkv, dqkv, loss, 600);
  }

  void geluBackwardMatchesFiniteDifferences() {
    // Includes large |x|, where the logistic form saturates.
    auto x = randn(300, 30, 3.0);
    x.push_back(30.0);
    x.push_back(-30.0);
    x.push_back(0.0);
    const auto r = randn(x.size(), 31);
    std::vector<double> out(x.size());
    auto loss = [&] {
      cpu::gelu_forward(out.data(), x.data(), x.size());
      return dot(out, r);
    };
    loss();
    // Against the tanh formula as GPT-2 writes it.
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      QVERIFY(std::abs(out[i] - ref) < 1e-14 * std::max(1.0, std::abs(ref)));
    }
    std::vector<double> dx(x.size(), kNaN);
    cpu::gelu_backward(dx.data(), x.data(), r.data(), x.size());
    check_grad("x", x, dx, loss);
  }

  void encoderBackwardMatchesFiniteDifferences_data() {
    QTest::addColumn<bool>("positions");
    QTest::newRow("learned positions (GPT-2)") << true;
    QTest::newRow("no learned positions (Llama): wpe nullptr") << false;
  }
  void encoderBackwardMatchesFiniteDifferences() {
    QFETCH(bool, positions);
    const int B = 3, T = 4, C = 40, V = 5;  // V < B*T: tokens repeat, so scatters collide
    const auto tokens = tokens_of(size_t(B) * T, V, 40);
    auto wte = randn(size_t(V) * C, 41), wpe = randn(size_t(T + 2) * C, 42);
    const auto r = randn(size_t(B) * T * C, 43);
    std::vector<double> out(r.size(), kNaN);
    auto loss = [&] {
      cpu::encoder_forward(out.data(), tokens.data(), wte.data(), positions ? wpe.data() : nullptr, B, T, C);
      return dot(out, r);
    };
    if (!positions) {  // each row is its token's embedding, as it is
      loss();
      for (size_t i = 0; i < tokens.size(); ++i)
        QVERIFY(std::memcmp(&out[i * C], &wte[size_t(tokens[i]) * C], C * sizeof(double)) == 0);
    }
    std::vector<double> dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
    cpu::encoder_backward(dwte.data(), positions ? dwpe.data() : nullptr, r.data(), tokens.data(), B, T, C);
    check_grad("wte", wte, dwte, loss);
    if (positions) check_grad("wpe", wpe, dwpe, loss);
  }

  void crossentropyBackwardMatchesFiniteDifferences_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("V");
    QTest::newRow("4 tokens, vocab 7") << 4 << 7;
    QTest::newRow("33 tokens, vocab 300") << 33 << 300;
  }
  void crossentropyBackwardMatchesFiniteDifferences() {
    QFETCH(int, N);
    QFETCH(int, V);
    auto logits = randn(size_t(N) * V, 50, 3.0);
    const auto targets = tokens_of(N, V, 51);
    std::vector<double> losses(N), probs(logits.size());
    auto loss = [&] { return cpu::crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V); };
    const double mean = loss();
    // Against log-sum-exp written out.
    double ref = 0;
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int j = 0; j < V; ++j) s += std::exp(logits[size_t(i) * V + j]);
      ref += std::log(s) - logits[size_t(i) * V + targets[i]];
    }
    QVERIFY(std::abs(mean - ref / N) < 1e-12 * std::abs(ref / N));
    std::vector<double> dlogits(logits.size(), kNaN);
    cpu::crossentropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0 / N, N, V);
    check_grad("logits", logits, dlogits, loss);
  }

  void residualAndInPlaceContracts() {
    std::vector<double> a = {1, 2, 3}, b = {10, 20, 30}, d = {0.5, 0.5, 0.5};
    cpu::residual_forward(a.data(), a.data(), b.data(), a.size());  // out aliases inp1
    QCOMPARE(a, (std::vector<double>{11, 22, 33}));
    cpu::residual_backward(a.data(), b.data(), d.data(), a.size());  // both accumulate
    QCOMPARE(a, (std::vector<double>{11.5, 22.5, 33.5}));
    QCOMPARE(b, (std::vector<double>{10.5, 20.5, 30.5}));
    // probs may alias logits, and dlogits may alias probs.
    std::vector<double> l = {0, std::log(3.0)}, losses(1);
    const int32_t target = 1;
    QVERIFY(std::abs(cpu::crossentropy_forward(losses.data(), l.data(), l.data(), &target, 1, 2) - std::log(4.0 / 3)) < 1e-15);
    cpu::crossentropy_backward(l.data(), l.data(), &target, 1.0, 1, 2);
    QVERIFY(std::abs(l[0] - 0.25) < 1e-15 && std::abs(l[1] + 0.25) < 1e-15);
  }

  // A GEMM that adds the residual stream (Ops::matmul_forward's residual, as the layers' c_proj
  // GEMMs use it) gives the GEMM and then residual_forward, bit for bit: into another buffer and
  // in place over the residual, from fp32 and bf16 inputs, in both layouts.
  void matmulForwardAddsTheResidual() {
    const Ops& k = cpu_ops();
    const int BT = 23, C = 40, OC = 36;
    const std::vector<float> x = cast<float>(randn(size_t(BT) * C, 110)), W = cast<float>(randn(size_t(C) * OC, 111, 0.2)),
                             bias = cast<float>(randn(size_t(OC), 112)), res = cast<float>(randn(size_t(BT) * OC, 113));
    std::vector<bf16> x16(x.size());
    std::vector<float> xw(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x16[i] = to_bf16(x[i]);
      xw[i] = to_float(x16[i]);
    }
    for (Layout layout : {Layout::kInOut, Layout::kOutIn}) {
      std::vector<float> want(res.size()), got(res.size(), float(kNaN)), inplace = res, want16(res.size()), got16(res.size());
      k.matmul_forward(want.data(), x.data(), W.data(), bias.data(), BT, C, OC, layout);
      k.residual_forward(want.data(), res.data(), want.data(), want.size());
      k.matmul_forward(got.data(), x.data(), W.data(), bias.data(), BT, C, OC, layout, res.data());
      QVERIFY(all_equal(got, want));
      k.matmul_forward(inplace.data(), x.data(), W.data(), bias.data(), BT, C, OC, layout, inplace.data());
      QVERIFY(all_equal(inplace, want));
      k.matmul_forward(want16.data(), xw.data(), W.data(), bias.data(), BT, C, OC, layout);
      k.residual_forward(want16.data(), res.data(), want16.data(), want16.size());
      k.matmul_forward(got16.data(), x16.data(), W.data(), nullptr, BT, C, OC, layout, res.data());
      QVERIFY(!all_equal(got16, want16));  // without the bias: not the same sum
      k.matmul_forward(got16.data(), x16.data(), W.data(), bias.data(), BT, C, OC, layout, res.data());
      QVERIFY(all_equal(got16, want16));
    }
  }

  // ---- float against double ------------------------------------------------------------------------

  // The float kernels are the double kernels in float, plus exp_fast (2 ulp). Relative to each
  // tensor's scale, float rounding over sums of <= 1024 terms stays below ~1e-5; 2e-5 would still
  // catch a wrong formula or a missed element (errors of order 1).
  void floatKernelsAgreeWithDouble() {
    const int B = 2, T = 70, NH = 4, HS = 16, C = NH * HS, V = 100, BT = B * T;
    const double tol = 2e-5;
    const auto x = randn(size_t(BT) * C, 60), w = randn(size_t(C) * 3 * C, 61, 0.1), b = randn(3 * C, 62);
    const auto lw = randn(C, 63), lb = randn(C, 64);
    // matmul forward and backward
    std::vector<double> o(size_t(BT) * 3 * C), di(x.size()), dw(w.size()), db(3 * C);
    cpu::matmul_forward(o.data(), x.data(), w.data(), b.data(), BT, C, 3 * C);
    cpu::matmul_backward(di.data(), dw.data(), db.data(), o.data(), x.data(), w.data(), BT, C, 3 * C);
    auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b);
    std::vector<float> of(o.size()), dif(di.size()), dwf(dw.size()), dbf(db.size());
    cpu::matmul_forward(of.data(), xf.data(), wf.data(), bf.data(), BT, C, 3 * C);
    cpu::matmul_backward(dif.data(), dwf.data(), dbf.data(), of.data(), xf.data(), wf.data(), BT, C, 3 * C);
    QVERIFY2(rel_err(of, o) < tol, "matmul out");
    QVERIFY2(rel_err(dif, di) < tol && rel_err(dwf, dw) < tol && rel_err(dbf, db) < tol, "matmul grads");
    // attention on that qkv
    std::vector<double> y(size_t(BT) * C), att(size_t(B) * NH * T * T), dqkv(o.size()), scr(att.size());
    cpu::attention_forward(y.data(), att.data(), o.data(), B, T, NH, HS, NH);
    cpu::attention_backward(dqkv.data(), scr.data(), x.data(), o.data(), att.data(), B, T, NH, HS, NH);
    std::vector<float> yf(y.size()), attf(att.size()), dqkvf(dqkv.size()), scrf(scr.size());
    auto of2 = cast<float>(o);
    cpu::attention_forward(yf.data(), attf.data(), of2.data(), B, T, NH, HS, NH);
    cpu::attention_backward(dqkvf.data(), scrf.data(), xf.data(), of2.data(), attf.data(), B, T, NH, HS, NH);
    QVERIFY2(rel_err(yf, y) < tol && rel_err(attf, att) < tol && rel_err(dqkvf, dqkv) < tol, "attention");
    // layernorm
    std::vector<double> ln(x.size()), m(BT), rs(BT), dln(x.size()), dlw(C), dlb(C);
    cpu::layernorm_forward(ln.data(), m.data(), rs.data(), x.data(), lw.data(), lb.data(), BT, C);
    cpu::layernorm_backward(dln.data(), dlw.data(), dlb.data(), y.data(), x.data(), lw.data(), m.data(), rs.data(), BT, C);
    auto lwf = cast<float>(lw), lbf = cast<float>(lb);
    std::vector<float> lnf(ln.size()), mf(BT), rsf(BT), dlnf(ln.size()), dlwf(C), dlbf(C);
    cpu::layernorm_forward(lnf.data(), mf.data(), rsf.data(), xf.data(), lwf.data(), lbf.data(), BT, C);
    cpu::layernorm_backward(dlnf.data(), dlwf.data(), dlbf.data(), yf.data(), xf.data(), lwf.data(), mf.data(), rsf.data(), BT, C);
    QVERIFY2(rel_err(lnf, ln) < tol && rel_err(dlnf, dln) < tol && rel_err(dlwf, dlw) < tol && rel_err(dlbf, dlb) < tol, "layernorm");
    // gelu over [-12, 12]
    std::vector<double> gx(4001), gy(gx.size()), gd(gx.size());
    for (size_t i = 0; i < gx.size(); ++i) gx[i] = -12.0 + 24.0 * double(i) / double(gx.size() - 1);
    cpu::gelu_forward(gy.data(), gx.data(), gx.size());
    cpu::gelu_backward(gd.data(), gx.data(), gx.data(), gx.size());
    auto gxf = cast<float>(gx);
    std::vector<float> gyf(gx.size()), gdf(gx.size());
    cpu::gelu_forward(gyf.data(), gxf.data(), gx.size());
    cpu::gelu_backward(gdf.data(), gxf.data(), gxf.data(), gx.size());
    QVERIFY2(rel_err(gyf, gy) < tol && rel_err(gdf, gd) < tol, "gelu");
    // cross-entropy with logits up to ~+-40, where exp_fast works hardest
    const auto logits = randn(size_t(BT) * V, 65, 10.0);
    const auto tg = tokens_of(BT, V, 66);
    std::vector<double> ls(BT), pr(logits.size());
    const double mean = cpu::crossentropy_forward(ls.data(), pr.data(), logits.data(), tg.data(), BT, V);
    auto lf = cast<float>(logits);
    std::vector<float> lsf(BT), prf(pr.size());
    const double meanf = cpu::crossentropy_forward(lsf.data(), prf.data(), lf.data(), tg.data(), BT, V);
    QVERIFY2(std::abs(meanf - mean) < tol * mean && rel_err(lsf, ls) < tol && rel_err(prf, pr) < tol, "cross-entropy");
    // Llama's kernels on the same data: RMSNorm of x, SwiGLU of the GEMM's output as (BT, 2F),
    // and rotary positions and grouped-query attention (4 heads over 2 K/V heads) on a qkv of their own.
    std::vector<double> rn(x.size()), rr(BT), drn(x.size(), 0.0), drw(C, 0.0);
    cpu::rmsnorm_forward(rn.data(), rr.data(), x.data(), lw.data(), BT, C, 1e-6f);
    cpu::rmsnorm_backward(drn.data(), drw.data(), y.data(), x.data(), lw.data(), rr.data(), BT, C);
    std::vector<float> rnf(x.size()), rrf(BT), drnf(x.size(), 0.0f), drwf(C, 0.0f);
    cpu::rmsnorm_forward(rnf.data(), rrf.data(), xf.data(), lwf.data(), BT, C, 1e-6f);
    cpu::rmsnorm_backward(drnf.data(), drwf.data(), yf.data(), xf.data(), lwf.data(), rrf.data(), BT, C);
    QVERIFY2(rel_err(rnf, rn) < tol && rel_err(rrf, rr) < tol && rel_err(drnf, drn) < tol && rel_err(drwf, drw) < tol, "rmsnorm");
    const int F = 3 * C / 2;
    std::vector<double> sw(size_t(BT) * F), dsw(o.size());
    const auto swd = randn(sw.size(), 67);
    cpu::swiglu_forward(sw.data(), o.data(), BT, F);
    cpu::swiglu_backward(dsw.data(), o.data(), swd.data(), BT, F);
    std::vector<float> swf(sw.size()), dswf(o.size());
    const auto swdf = cast<float>(swd);
    cpu::swiglu_forward(swf.data(), of2.data(), BT, F);
    cpu::swiglu_backward(dswf.data(), of2.data(), swdf.data(), BT, F);
    QVERIFY2(rel_err(swf, sw) < tol && rel_err(dswf, dsw) < tol, "swiglu");
    const int NKV = 2;
    auto q = randn(size_t(BT) * (NH + 2 * NKV) * HS, 68);
    auto qf = cast<float>(q);
    cpu::rope_forward(q.data(), B, T, NH, NKV, HS, 10000.0f);
    cpu::rope_forward(qf.data(), B, T, NH, NKV, HS, 10000.0f);
    QVERIFY2(rel_err(qf, q) < tol, "rope");
    std::vector<double> ay(size_t(BT) * C), aa(att.size()), ad(q.size()), as(att.size());
    cpu::attention_forward(ay.data(), aa.data(), q.data(), B, T, NH, HS, NKV);
    cpu::attention_backward(ad.data(), as.data(), x.data(), q.data(), aa.data(), B, T, NH, HS, NKV);
    std::vector<float> ayf(ay.size()), aaf(aa.size()), adf(ad.size()), asf(as.size());
    cpu::attention_forward(ayf.data(), aaf.data(), qf.data(), B, T, NH, HS, NKV);
    cpu::attention_backward(adf.data(), asf.data(), xf.data(), qf.data(), aaf.data(), B, T, NH, HS, NKV);
    QVERIFY2(rel_err(ayf, ay) < tol && rel_err(aaf, aa) < tol && rel_err(adf, ad) < tol, "grouped-query attention");
    cpu::rope_backward(ad.data(), B, T, NH, NKV, HS, 10000.0f);
    cpu::rope_backward(adf.data(), B, T, NH, NKV, HS, 10000.0f);
    QVERIFY2(rel_err(adf, ad) < tol, "rope backward");
  }

  // Same inputs, 1 and 3 threads: the element-wise kernels and sum_of_squares are bitwise equal
  // (each element is computed by the same code whoever owns it); GEMMs split differently may
  // round differently, so only float rounding is allowed there.
  void threadCountChangesNothingButGemmRounding() {
    const int B = 2, T = 100, NH = 4, HS = 16, C = NH * HS, BT = B * T;
    const auto x = cast<float>(randn(size_t(BT) * 3 * C, 70)), w = cast<float>(randn(size_t(3 * C) * C, 71, 0.1));
    auto run = [&](int threads) {
      cpu::set_num_threads(threads);
      std::vector<float> y(size_t(BT) * C), att(size_t(B) * NH * T * T), g(x.size()), o(size_t(BT) * C);
      cpu::attention_forward(y.data(), att.data(), x.data(), B, T, NH, HS, NH);
      cpu::gelu_forward(g.data(), x.data(), x.size());
      cpu::matmul_forward(o.data(), x.data(), w.data(), static_cast<const float*>(nullptr), BT, 3 * C, C);
      const double ss = cpu::sum_of_squares(x.data(), x.size());
      return std::make_tuple(y, g, o, ss);
    };
    const auto [y1, g1, o1, s1] = run(1);
    const auto [y3, g3, o3, s3] = run(3);
    cpu::set_num_threads(2);
    QVERIFY(all_equal(y1, y3));
    QVERIFY(all_equal(g1, g3));
    QCOMPARE(s1, s3);
    QVERIFY(rel_err(o3, std::vector<double>(o1.begin(), o1.end())) < 1e-6);
    // Llama's kernels, bit for bit: x as a grouped-query qkv of 8 heads over 2 K/V heads (12 HS
    // wide, as 3 C), rotated, its attention forward and backward (dK and dV summed per K/V head
    // and key block, in head order), RMSNorm and SwiGLU (x as (BT, 2F), F = 3C/2).
    const int GH = 8, GKV = 2, F = 3 * C / 2;
    const auto dy = cast<float>(randn(size_t(BT) * GH * HS, 72)), wn = cast<float>(randn(size_t(3 * C), 73));
    auto llama = [&](int threads) {
      cpu::set_num_threads(threads);
      std::vector<float> q = x, y(size_t(BT) * GH * HS), att(size_t(B) * GH * T * T), d(x.size()), scr(att.size());
      cpu::rope_forward(q.data(), B, T, GH, GKV, HS, 10000.0f);
      cpu::attention_forward(y.data(), att.data(), q.data(), B, T, GH, HS, GKV);
      cpu::attention_backward(d.data(), scr.data(), dy.data(), q.data(), att.data(), B, T, GH, HS, GKV);
      cpu::rope_backward(d.data(), B, T, GH, GKV, HS, 10000.0f);
      std::vector<float> n(x.size()), r(BT), dn(x.size(), 0.0f), dw(wn.size(), 0.0f), s(size_t(BT) * F), ds(x.size());
      cpu::rmsnorm_forward(n.data(), r.data(), x.data(), wn.data(), BT, 3 * C, 1e-6f);
      cpu::rmsnorm_backward(dn.data(), dw.data(), x.data(), x.data(), wn.data(), r.data(), BT, 3 * C);
      cpu::swiglu_forward(s.data(), x.data(), BT, F);
      cpu::swiglu_backward(ds.data(), x.data(), s.data(), BT, F);
      return std::vector<std::vector<float>>{q, y, att, d, n, r, dn, dw, s, ds};
    };
    const auto l1 = llama(1), l3 = llama(3);
    cpu::set_num_threads(2);
    for (size_t i = 0; i < l1.size(); ++i) QVERIFY2(all_equal(l1[i], l3[i]), qPrintable(QString("llama output %1").arg(i)));
  }

  // Two threads calling kernels at once (two pipeline stages in one process, a GUI thread): one
  // gets the pool, the other runs alone, and both get the answers a lone call gets. Also with more
  // threads than cores.
  void concurrentCallsGiveTheSameAnswers_data() {
    QTest::addColumn<int>("threads");
    QTest::newRow("2 threads") << 2;
    QTest::newRow("8 threads on fewer cores") << 8;
  }
  void concurrentCallsGiveTheSameAnswers() {
    QFETCH(int, threads);
    cpu::set_num_threads(threads);
    const int BT = 256, C = 64, OC = 192;
    struct Work {
      std::vector<float> x, w, out, g;
    };
    auto make = [&](uint64_t stream) {
      Work k{cast<float>(randn(size_t(BT) * C, stream)), cast<float>(randn(size_t(C) * OC, stream + 1, 0.1)),
             std::vector<float>(size_t(BT) * OC), std::vector<float>(size_t(BT) * OC)};
      return k;
    };
    auto run = [&](Work& k) {
      cpu::matmul_forward(k.out.data(), k.x.data(), k.w.data(), static_cast<const float*>(nullptr), BT, C, OC);
      cpu::gelu_forward(k.g.data(), k.out.data(), k.out.size());
    };
    Work a = make(120), b = make(130);
    run(a);
    run(b);
    const auto a_out = a.out, a_g = a.g, b_out = b.out, b_g = b.g;
    for (int round = 0; round < 20; ++round) {
      std::thread t1([&] { run(a); });
      std::thread t2([&] { run(b); });
      t1.join();
      t2.join();
      // GEMM split differently (pool or alone) may round differently; GELU of the same input not.
      QVERIFY(rel_err(a.out, std::vector<double>(a_out.begin(), a_out.end())) < 1e-6);
      QVERIFY(rel_err(b.out, std::vector<double>(b_out.begin(), b_out.end())) < 1e-6);
      QVERIFY(rel_err(a.g, std::vector<double>(a_g.begin(), a_g.end())) < 1e-6);
      QVERIFY(rel_err(b.g, std::vector<double>(b_g.begin(), b_g.end())) < 1e-6);
    }
    cpu::set_num_threads(2);
  }

  // The pool's end stops every worker, including one whose thread first runs after the end began:
  // a process whose last job's worker was that late (a loaded machine) never exited, and a run's
  // launcher took its rank for hung once it had trained every step. Here each worker waits 50 ms
  // before it starts, the caller runs every piece of the one job itself meanwhile, and the pool
  // ends at once; its end must return, in rounds of 1 and 3 workers.
  void poolEndsWorkersThatStartAfterIt_data() {
    QTest::addColumn<int>("threads");
    QTest::newRow("1 worker") << 2;
    QTest::newRow("3 workers") << 4;
  }
  void poolEndsWorkersThatStartAfterIt() {
    QFETCH(int, threads);
    for (int round = 0; round < 3; ++round) {
      std::atomic<bool> ended{false};
      std::atomic<int> ran{0}, workers{0};
      std::thread owner([&] {
        {
          cpu::detail::ThreadPool pool([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
          pool.run(8, threads, [](void* c, int) { static_cast<std::atomic<int>*>(c)->fetch_add(1); }, &ran);
          workers.store(pool.threads());
        }
        ended.store(true);
      });
      const auto start = std::chrono::steady_clock::now();
      while (!ended.load() && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (!ended.load()) {
        owner.detach();  // its pool's end is waiting for a worker that never ends
        QFAIL(qPrintable(QString("round %1: the pool's end still waits for a worker after 10 s").arg(round)));
      }
      owner.join();
      QCOMPARE(ran.load(), 8);
      QCOMPARE(workers.load(), threads - 1);
    }
  }

  // ---- a tiny GPT against PyTorch ------------------------------------------------------------------

  void tinyGptMatchesPyTorch_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("C");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("V");
    QTest::addColumn<int>("L");
    QTest::newRow("2 layers, C 16, 2 heads, T 8") << 2 << 8 << 16 << 2 << 23 << 2;
    QTest::newRow("1 layer, T 70 across attention blocks") << 2 << 70 << 24 << 3 << 50 << 1;
  }
  void tinyGptMatchesPyTorch() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, C);
    QFETCH(int, NH);
    QFETCH(int, V);
    QFETCH(int, L);
    const QString python = "/usr/bin/python3";
    static const bool have_torch = QProcess::execute(python, {"-c", "import torch"}) == 0;
    if (!have_torch) {
      QSKIP("/usr/bin/python3 has no torch: apt-get install -y python3-torch to run the PyTorch reference");
    }
    const GptDims d{B, T, C, NH, V, L};
    const auto init = gpt_init(d);
    const auto tokens = tokens_of(size_t(B) * T, V, 80), targets = tokens_of(size_t(B) * T, V, 81);

    // The reference: inputs out as little-endian binary, gpt_ref.py computes in float64.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    {
      QFile f(dir.filePath("in.bin"));
      QVERIFY(f.open(QIODevice::WriteOnly));
      const int32_t dims[6] = {B, T, C, NH, V, L};
      f.write(reinterpret_cast<const char*>(dims), sizeof dims);
      f.write(reinterpret_cast<const char*>(tokens.data()), qint64(tokens.size() * 4));
      f.write(reinterpret_cast<const char*>(targets.data()), qint64(targets.size() * 4));
      f.write(reinterpret_cast<const char*>(init.data()), qint64(init.size() * 8));
    }
    QProcess proc;
    proc.start(python, {QString(STAGECRAFT_SOURCE_DIR) + "/tests/engine/ref/gpt_ref.py", dir.filePath("in.bin"),
                        dir.filePath("out.bin")});
    QVERIFY(proc.waitForFinished(120000));
    QVERIFY2(proc.exitCode() == 0, proc.readAllStandardError().constData());
    QFile f(dir.filePath("out.bin"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray raw = f.readAll();
    const size_t nlogits = size_t(B) * T * V;
    QCOMPARE(size_t(raw.size()), (1 + nlogits + init.size()) * 8);
    const double* ref = reinterpret_cast<const double*>(raw.constData());
    const double ref_loss = ref[0];
    const std::vector<double> ref_logits(ref + 1, ref + 1 + nlogits), ref_grads(ref + 1 + nlogits, ref + 1 + nlogits + init.size());

    // Double: the same arithmetic in another order; 1e-10 relative is rounding, not formula.
    TinyGpt<double> gd(d, init);
    const double loss_d = gd.forward(tokens.data(), targets.data());
    QVERIFY2(std::abs(loss_d - ref_loss) < 1e-10 * ref_loss, qPrintable(QString("%1 vs %2").arg(loss_d).arg(ref_loss)));
    QVERIFY(rel_err(gd.logits, ref_logits) < 1e-10);
    gd.backward(tokens.data(), targets.data());
    size_t off = 0;
    for (auto& [name, n] : gpt_tensors(d)) {
      const std::vector<double> got(gd.grads.begin() + off, gd.grads.begin() + off + n);
      const std::vector<double> want(ref_grads.begin() + off, ref_grads.begin() + off + n);
      QVERIFY2(rel_err(got, want) < 1e-9, qPrintable(QString::fromStdString("double grad " + name)));
      off += n;
    }

    // Float: every tensor within float rounding of the float64 reference. Through L layers and sums
    // of up to B*T terms per weight gradient, errors stay near 1e-5 of each tensor's scale.
    TinyGpt<float> gf(d, init);
    const double loss_f = gf.forward(tokens.data(), targets.data());
    QVERIFY2(std::abs(loss_f - ref_loss) < 1e-5 * ref_loss, qPrintable(QString("%1 vs %2").arg(loss_f).arg(ref_loss)));
    QVERIFY(rel_err(gf.logits, ref_logits) < 1e-5);
    gf.backward(tokens.data(), targets.data());
    off = 0;
    for (auto& [name, n] : gpt_tensors(d)) {
      const std::vector<float> got(gf.grads.begin() + off, gf.grads.begin() + off + n);
      const std::vector<double> want(ref_grads.begin() + off, ref_grads.begin() + off + n);
      QVERIFY2(rel_err(got, want) < 1e-4, qPrintable(QString::fromStdString("float grad " + name) + QString(": %1").arg(rel_err(got, want))));
      off += n;
    }
  }

  // ---- AdamW and norms -----------------------------------------------------------------------------

  void adamwMatchesClosedForm_data() {
    QTest::addColumn<bool>("decay");
    QTest::addColumn<double>("grad_scale");
    QTest::addColumn<int>("steps");
    QTest::newRow("one step, no decay: every parameter moves by lr") << false << 1.0 << 1;
    QTest::newRow("one step, decay") << true << 1.0 << 1;
    QTest::newRow("five steps, no decay") << false << 1.0 << 5;
    QTest::newRow("three steps, decay, clipped by 0.5") << true << 0.5 << 3;
  }
  void adamwMatchesClosedForm() {
    QFETCH(bool, decay);
    QFETCH(double, grad_scale);
    QFETCH(int, steps);
    cpu::AdamWOptions opt;
    opt.lr = 1e-2f;
    opt.weight_decay = 0.1f;
    const size_t n = 100003;  // odd, and large enough for several threads
    auto p0 = randn(n, 90);
    std::vector<double> p = p0, m(n, 0.0), v(n, 0.0);
    std::vector<float> pf = cast<float>(p0), mf(n, 0.0f), vf(n, 0.0f);
    for (int t = 1; t <= steps; ++t) {
      const auto g = randn(n, 100 + t);
      const auto gf = cast<float>(g);
      cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, opt, t, decay, grad_scale);
      cpu::adamw_update(pf.data(), mf.data(), vf.data(), gf.data(), n, opt, t, decay, float(grad_scale));
    }
    // The closed form, element by element, in double.
    const double b1 = opt.beta1, b2 = opt.beta2, eps = opt.eps, lr = opt.lr, wd = decay ? double(opt.weight_decay) : 0.0;
    std::vector<double> want(n);
    for (size_t i = 0; i < n; ++i) {
      double pi = p0[i], mi = 0, vi = 0;
      for (int t = 1; t <= steps; ++t) {
        const double g = grad_scale * rng_normal(1234, 100 + t, i);
        mi = b1 * mi + (1 - b1) * g;
        vi = b2 * vi + (1 - b2) * g * g;
        const double mh = mi / (1 - std::pow(b1, t)), vh = vi / (1 - std::pow(b2, t));
        pi -= lr * (mh / (std::sqrt(vh) + eps) + wd * pi);
      }
      want[i] = pi;
    }
    // Double: the same formula; float: parameters ~1 stepped by lr 1e-2, so 1e-6 absolute is float
    // rounding and a wrong bias correction or decay (1e-3 or more) fails.
    QVERIFY(rel_err(p, want) < 1e-13);
    QVERIFY(rel_err(pf, want) < 1e-6);
    // One step moves each parameter by ~lr (Adam's normalised update), decay or not.
    if (steps == 1 && !decay) {
      for (size_t i = 0; i < 10; ++i) QVERIFY(std::abs(std::abs(p[i] - p0[i]) - lr) < 1e-6);
    }
  }

  void sumOfSquaresAndScale() {
    const size_t n = 300001;
    const auto x = randn(n, 110);
    double want = 0;
    for (double v : x) want += v * v;
    QVERIFY(std::abs(cpu::sum_of_squares(x.data(), n) - want) < 1e-12 * want);
    auto xf = cast<float>(x);
    QVERIFY(std::abs(cpu::sum_of_squares(xf.data(), n) - want) < 1e-6 * want);  // float inputs, double sums
    cpu::scale(xf.data(), n, 0.5f);
    QCOMPARE(xf[7], float(x[7]) * 0.5f);
    QCOMPARE(cpu::sum_of_squares(xf.data(), 0), 0.0);
  }

  // ---- segment calls: many ranges of one flat buffer in one call -----------------------------------

  // The lookup both backends' segment kernels run: every element of the concatenation, with every
  // hint (right, wrong, out of range), finds the one segment that holds it.
  // The CUDA backend's token gradient (element_math.h: links scanned chunk by chunk, as its
  // kernel scans tiles of the tokens, then each token's chain of rows) gives the bits of the CPU's
  // encoder_backward, which adds the rows in ascending order.
  void tokenChainsGiveTheCpusEmbeddingGradient_data() {
    QTest::addColumn<QList<int>>("tokens");  // empty: rows random tokens below vocab
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("vocab");
    QTest::addColumn<int>("chunk");
    QTest::newRow("the worked example") << QList<int>{4, 9, 4, 4} << 4 << 10 << 256;
    QTest::newRow("repeats, chunks of 8") << QList<int>{} << 37 << 5 << 8;
    QTest::newRow("one token throughout, chunks of 7") << QList<int>{} << 20 << 1 << 7;
    QTest::newRow("mostly distinct, chunks of 1") << QList<int>{} << 50 << 1000 << 1;
    QTest::newRow("GPT-2's vocabulary, 1024 rows, tiles of 256") << QList<int>{} << 1024 << 50257 << 256;
  }
  void tokenChainsGiveTheCpusEmbeddingGradient() {
    QFETCH(QList<int>, tokens);
    QFETCH(int, rows);
    QFETCH(int, vocab);
    QFETCH(int, chunk);
    const int C = 5;
    std::vector<int32_t> tok = tokens.isEmpty() ? tokens_of(size_t(rows), vocab, 41) : std::vector<int32_t>(tokens.begin(), tokens.end());
    std::vector<int32_t> links(static_cast<size_t>(rows));
    for (int row = 0; row < rows; ++row) {
      int next = -1;
      bool earlier = false;
      for (int j0 = 0; j0 < rows; j0 += chunk) {
        element::scan_token_links(tok.data() + j0, std::min(chunk, rows - j0), j0, row, tok[size_t(row)], next, earlier);
      }
      links[size_t(row)] = element::token_link(next, earlier);
    }
    if (!tokens.isEmpty()) {  // element_math.h's worked example
      QCOMPARE(element::link_next(links[0]), 2);
      QVERIFY(!element::link_has_earlier(links[0]));
      QCOMPARE(element::link_next(links[1]), -1);
      QVERIFY(!element::link_has_earlier(links[1]));
      QCOMPARE(element::link_next(links[2]), 3);
      QVERIFY(element::link_has_earlier(links[2]));
      QCOMPARE(element::link_next(links[3]), -1);
      QVERIFY(element::link_has_earlier(links[3]));
    }
    std::vector<float> dout(size_t(rows) * C), want(size_t(vocab) * C);
    const auto d = randn(dout.size(), 42), w = randn(want.size(), 43);
    std::copy(d.begin(), d.end(), dout.begin());
    std::copy(w.begin(), w.end(), want.begin());
    std::vector<float> got = want;
    cpu::encoder_backward(want.data(), static_cast<float*>(nullptr), dout.data(), tok.data(), 1, rows, C);
    int chains = 0;
    for (int row = 0; row < rows; ++row) {
      if (element::link_has_earlier(links[size_t(row)])) continue;
      ++chains;
      for (int c = 0; c < C; ++c) {
        float& g = got[size_t(tok[size_t(row)]) * C + c];
        g = element::token_chain_sum(g, dout.data(), links.data(), C, row, c);
      }
    }
    std::vector<int32_t> distinct = tok;
    std::sort(distinct.begin(), distinct.end());
    QCOMPARE(chains, int(std::unique(distinct.begin(), distinct.end()) - distinct.begin()));  // one chain a token
    QVERIFY(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }

  // The CUDA backend's cross-entropy (element_math.h's online softmax): a row's running maximum
  // and sum, added one value at a time and merged as its kernel merges them (256 threads adding
  // every 256th value four at a time, a warp's lanes by xor shuffles, then the warps in order),
  // give the two-pass log-sum-exp and probabilities; every lane of a warp ends with the same bits.
  void onlineSoftmaxGivesTheTwoPassStatistics_data() {
    QTest::addColumn<QList<double>>("values");  // empty: n random values
    QTest::addColumn<int>("n");
    const double inf = std::numeric_limits<double>::infinity();
    QTest::newRow("the worked example") << QList<double>{0.0, std::log(3.0)} << 2;
    QTest::newRow("one value") << QList<double>{-3.5} << 1;
    QTest::newRow("-inf values add nothing") << QList<double>{-inf, 0.5, -inf, 2.0, -inf} << 5;
    QTest::newRow("a rising row") << QList<double>{} << -300;  // -n: 0, 1, ..., n - 1 scaled
    QTest::newRow("odd length") << QList<double>{} << 301;
    QTest::newRow("GPT-2's padded vocabulary") << QList<double>{} << 50304;
  }
  void onlineSoftmaxGivesTheTwoPassStatistics() {
    QFETCH(QList<double>, values);
    QFETCH(int, n);
    std::vector<float> x;
    if (!values.isEmpty()) {
      for (double v : values) x.push_back(float(v));
    } else if (n < 0) {
      for (int i = 0; i < -n; ++i) x.push_back(0.05f * float(i));
    } else {
      x = cast<float>(randn(size_t(n), 120));
      for (float& v : x) v *= 4.0f;
    }
    const auto ex = [](float v) { return std::exp(v); };
    double M = -std::numeric_limits<double>::infinity(), S = 0;
    for (float v : x) M = std::max(M, double(v));
    for (float v : x) S += std::exp(double(v) - M);
    const double lse = M + std::log(S);
    // One float sum over the whole row drifts with its length (7e-5 over 50,304 values); the
    // kernel's sums are 256 times shorter.
    auto agrees = [&](const element::SoftmaxRun& r, const char* how, double tol) {
      QVERIFY2(std::abs(double(r.m) + std::log(double(r.s)) - lse) <= tol * std::max(1.0, std::abs(lse)),
               qPrintable(QString("%1: log-sum-exp %2, want %3").arg(how).arg(double(r.m) + std::log(double(r.s)), 0, 'g', 9).arg(lse, 0, 'g', 9)));
      double worst = 0;
      for (float v : x) {
        const double p = std::exp(double(v) - M) / S, got = std::exp(double(v) - double(r.m)) / double(r.s);
        worst = std::max(worst, std::abs(got - p) / std::max(p, 1e-30));
      }
      QVERIFY2(worst <= tol, qPrintable(QString("%1: probability off by %2 of itself").arg(how).arg(worst)));
    };
    element::SoftmaxRun seq = element::softmax_empty();
    for (float v : x) element::softmax_add(seq, v, ex);
    agrees(seq, "one value at a time", std::max(1e-5, 4e-9 * double(x.size())));
    if (values.size() == 2) {  // the worked example: {ln 3, 4/3}
      QCOMPARE(seq.m, float(std::log(3.0)));
      QVERIFY(std::abs(seq.s - 4.0f / 3.0f) < 1e-6f);
    }
    // The kernel's grouping.
    constexpr int kThreads = 256, kWarp = 32, kUnroll = 4;
    const int V = int(x.size());
    std::vector<element::SoftmaxRun> lane(kThreads, element::softmax_empty());
    for (int t = 0; t < kThreads; ++t) {
      for (int j0 = t; j0 < V; j0 += kUnroll * kThreads) {
        for (int u = 0; u < kUnroll; ++u) {
          element::softmax_add(lane[size_t(t)], j0 + u * kThreads < V ? x[size_t(j0 + u * kThreads)] : -INFINITY, ex);
        }
      }
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const std::vector<element::SoftmaxRun> before = lane;
      for (int t = 0; t < kThreads; ++t) lane[size_t(t)] = element::softmax_merge(before[size_t(t)], before[size_t(t ^ o)], ex);
    }
    for (int t = 0; t < kThreads; ++t) {
      const element::SoftmaxRun& first = lane[size_t(t / kWarp * kWarp)];
      QVERIFY2(std::memcmp(&lane[size_t(t)], &first, sizeof first) == 0, qPrintable(QString("lane %1 differs from its warp's first").arg(t)));
    }
    element::SoftmaxRun block = lane[0];
    for (int w = 1; w < kThreads / kWarp; ++w) block = element::softmax_merge(block, lane[size_t(w * kWarp)], ex);
    agrees(block, "the kernel's grouping", 1e-5);
  }

  // Empty runs merge into an empty run, and a NaN value makes the sum NaN wherever it comes (an
  // overflow upstream stays seen).
  void onlineSoftmaxKeepsEmptyRowsAndNaNs() {
    const auto ex = [](float v) { return std::exp(v); };
    element::SoftmaxRun a = element::softmax_empty(), b = element::softmax_empty();
    element::softmax_add(a, -INFINITY, ex);
    const element::SoftmaxRun e = element::softmax_merge(a, b, ex);
    QVERIFY(e.m == -INFINITY && e.s == 0.0f);
    for (int at = 0; at < 3; ++at) {
      element::SoftmaxRun r = element::softmax_empty();
      for (int i = 0; i < 3; ++i) element::softmax_add(r, i == at ? std::numeric_limits<float>::quiet_NaN() : float(i), ex);
      QVERIFY2(std::isnan(r.s), qPrintable(QString("NaN at %1: sum %2").arg(at).arg(r.s)));
      element::SoftmaxRun other = element::softmax_empty();
      element::softmax_add(other, 1.0f, ex);
      QVERIFY(std::isnan(element::softmax_merge(other, r, ex).s));
    }
  }

  void segmentOfFindsTheSegmentThatHoldsAnElement_data() {
    QTest::addColumn<QList<int>>("counts");
    QTest::newRow("one segment") << QList<int>{5};
    QTest::newRow("one element each") << QList<int>{1, 1, 1, 1, 1};
    QTest::newRow("the header's example") << QList<int>{3, 0, 2, 0};
    QTest::newRow("empty first, between and last") << QList<int>{0, 0, 3, 0, 0, 2, 1, 0, 0};
    QTest::newRow("all empty but one") << QList<int>{0, 0, 7, 0};
    QList<int> many;
    for (int k = 0; k < 67; ++k) many.append((k * 7) % 5);  // 0..4, an odd number of segments
    QTest::newRow("67 segments of 0 to 4") << many;
  }
  void segmentOfFindsTheSegmentThatHoldsAnElement() {
    QFETCH(QList<int>, counts);
    std::vector<cpu::Segment> segs(size_t(counts.size()));
    size_t want_total = 0;
    for (size_t k = 0; k < segs.size(); ++k) {
      segs[k].count = size_t(counts[qsizetype(k)]);
      want_total += segs[k].count;
    }
    const size_t n = segs.size(), total = cpu::layout_segments(segs.data(), n);
    QCOMPARE(total, want_total);
    size_t at = 0;
    for (const auto& s : segs) {
      QCOMPARE(s.first, at);
      at += s.count;
    }
    for (size_t i = 0; i < total; ++i) {
      for (size_t hint = 0; hint <= n + 1; ++hint) {
        const size_t k = cpu::segment_of(segs.data(), n, i, hint);
        QVERIFY2(k < n && segs[k].first <= i && i < segs[k].first + segs[k].count,
                 qPrintable(QString("element %1, hint %2: segment %3").arg(i).arg(hint).arg(k)));
      }
    }
    if (counts == QList<int>{3, 0, 2, 0}) {  // the worked example of element_math.h's segment_of
      for (size_t i : {0, 1, 2}) QCOMPARE(cpu::segment_of(segs.data(), n, i), size_t(0));
      for (size_t i : {3, 4}) QCOMPARE(cpu::segment_of(segs.data(), n, i), size_t(2));
    }
  }

  // The Ops segment calls (a SegmentTable on the CPU device) give the bits of one adamw_update and
  // one sum_of_squares per segment, the sums added in the list's order, for any thread count.
  void segmentCallsGiveThePerSegmentBits_data() {
    QTest::addColumn<QList<int>>("counts");
    QTest::addColumn<double>("grad_scale");
    QTest::addColumn<bool>("shard");     // moments indexed from a ZeRO shard's begin
    QTest::addColumn<bool>("shuffled");  // listed out of buffer order
    QTest::newRow("one segment of one element") << QList<int>{1} << 1.0 << false << false;
    QTest::newRow("odd sizes, empty first, between and last")
        << QList<int>{0, 17, 1, 0, 0, 100003, 3, 0} << 1.0 << false << false;
    QTest::newRow("a block's tensors, clipped by 0.37")
        << QList<int>{256, 256, 256 * 768, 768, 256 * 256, 256, 256, 256, 256 * 1024, 1024, 1024 * 256, 256} << 0.37 << false
        << false;
    QTest::newRow("a ZeRO shard: moments from the shard's begin") << QList<int>{5, 70001, 0, 33, 1} << 0.5 << true << false;
    QTest::newRow("listed out of buffer order") << QList<int>{9, 0, 65537, 2, 1000, 1} << 1.0 << false << true;
    QTest::newRow("several norm chunks in one segment") << QList<int>{300001, 7} << 2.0 << false << false;
    QList<int> many;
    for (int k = 0; k < 1100; ++k) many.append((k * 37) % 50);
    QTest::newRow("1100 small segments: more pieces than a norm window") << many << 1.0 << true << true;
  }
  void segmentCallsGiveThePerSegmentBits() {
    QFETCH(QList<int>, counts);
    QFETCH(double, grad_scale);
    QFETCH(bool, shard);
    QFETCH(bool, shuffled);
    const size_t shard_begin = shard ? 11 : 0;
    size_t end = 0;
    std::vector<cpu::Segment> segs = place_segments(counts, shard_begin + 2, shard_begin, &end);
    if (shuffled) std::shuffle(segs.begin(), segs.end(), std::mt19937(7));
    const size_t n = end + 5, nm = n - shard_begin;
    const auto p0 = cast<float>(randn(n, 120)), g = cast<float>(randn(n, 121)), m0 = cast<float>(randn(nm, 122, 0.1));
    std::vector<float> v0(nm);
    for (size_t i = 0; i < nm; ++i) v0[i] = float(0.01 * std::abs(rng_normal(1234, 123, i)));
    cpu::AdamWOptions opt;
    opt.lr = 1e-2f;
    opt.weight_decay = 0.1f;
    const int64_t step = 3;
    // One call per segment.
    auto pa = p0, ma = m0, va = v0;
    double want = 0;
    for (const auto& s : segs) {
      cpu::adamw_update(pa.data() + s.begin, ma.data() + s.moment, va.data() + s.moment, g.data() + s.begin, s.count, opt, step, s.decay,
                        float(grad_scale));
      want += cpu::sum_of_squares(g.data() + s.begin, s.count);
    }
    auto table = SegmentTable::make(host_device(), segs);
    QVERIFY(table.ok());
    size_t total = 0;
    for (const auto& s : segs) total += s.count;
    QCOMPARE(table->elements(), total);
    QCOMPARE(table->list().elements, total);
    QCOMPARE(table->list().count, segs.size());
    QCOMPARE(table->segments().back().first + table->segments().back().count, total);
    for (int threads : {1, 2, 3}) {
      cpu::set_num_threads(threads);
      auto pb = p0, mb = m0, vb = v0;
      cpu_ops().adamw_update_segments(pb.data(), mb.data(), vb.data(), g.data(), table->list(), opt, step, float(grad_scale));
      QVERIFY2(all_equal(pb, pa) && all_equal(mb, ma) && all_equal(vb, va), qPrintable(QString("adamw, %1 threads").arg(threads)));
      const double got = cpu_ops().sum_of_squares_segments(g.data(), table->list());
      QVERIFY2(got == want, qPrintable(QString("%1 threads: sum of squares %2, per segment %3").arg(threads).arg(got, 0, 'g', 17).arg(want, 0, 'g', 17)));
    }
    cpu::set_num_threads(2);
    // Both moved what the segments hold (and, equal, nothing else).
    for (const auto& s : segs) {
      if (s.count > 0) QVERIFY(pa[s.begin] != p0[s.begin] && pa[s.begin + s.count - 1] != p0[s.begin + s.count - 1]);
    }
  }

  // A NaN or an infinity in a listed range makes the sum non-finite (an fp16 overflow must reach
  // the loss scaler); one outside every range changes nothing.
  void segmentNormSeesNonFiniteGradients_data() {
    QTest::addColumn<double>("value");
    QTest::addColumn<bool>("inside");
    QTest::newRow("NaN in a segment") << kNaN << true;
    QTest::newRow("infinity in a segment") << std::numeric_limits<double>::infinity() << true;
    QTest::newRow("NaN between segments") << kNaN << false;
  }
  void segmentNormSeesNonFiniteGradients() {
    QFETCH(double, value);
    QFETCH(bool, inside);
    size_t end = 0;
    const auto segs = place_segments({1000, 70000, 0, 3}, 0, 0, &end);  // 70000: two chunks
    auto g = cast<float>(randn(end, 124));
    auto table = SegmentTable::make(host_device(), segs);
    QVERIFY(table.ok());
    const double clean = cpu_ops().sum_of_squares_segments(g.data(), table->list());
    QVERIFY(std::isfinite(clean) && clean > 0);
    const size_t at = inside ? segs[1].begin + 69999 : segs[1].begin - 1;  // the last element of a chunk, or a gap
    QVERIFY(inside || at == segs[0].begin + segs[0].count);
    g[at] = float(value);
    const double got = cpu_ops().sum_of_squares_segments(g.data(), table->list());
    if (!inside) {
      QVERIFY(got == clean);
    } else if (std::isnan(value)) {
      QVERIFY(std::isnan(got));
    } else {
      QVERIFY(std::isinf(got));
    }
  }

  void emptySegmentListDoesNothing() {
    const SegmentTable none;
    std::vector<float> p{1.0f}, m{0.0f}, v{0.0f}, g{1.0f};
    cpu_ops().adamw_update_segments(p.data(), m.data(), v.data(), g.data(), none.list(), cpu::AdamWOptions{}, 1, 1.0f);
    QCOMPARE(p[0], 1.0f);
    QVERIFY(cpu_ops().sum_of_squares_segments(g.data(), none.list()) == 0.0);
    auto made = SegmentTable::make(host_device(), {});
    QVERIFY(made.ok());
    QCOMPARE(made->list().count, size_t(0));
    QVERIFY(cpu_ops().sum_of_squares_segments(g.data(), made->list()) == 0.0);
  }

  // A table is in quads (ops.h: SegmentList::quads) only where every begin, moment and count is a
  // multiple of 4; one element off anywhere, and it is not.
  void segmentTableKnowsQuads() {
    size_t end = 0;
    auto quads = [&](std::vector<cpu::Segment> segs) {
      auto t = SegmentTable::make(host_device(), std::move(segs));
      return t.ok() && t->list().quads;
    };
    const auto four = place_segments({8, 0, 4, 100000}, 16, 12, &end, 4);
    QVERIFY(quads(four));
    QVERIFY(!quads(place_segments({8, 0, 4, 100000}, 16, 12, &end, 1)));  // begins 1 and 2 apart
    for (const auto field : {&cpu::Segment::begin, &cpu::Segment::moment, &cpu::Segment::count}) {
      auto off = four;
      off[3].*field += 1;
      QVERIFY(!quads(off));
    }
    QVERIFY(!SegmentTable().list().quads);
  }

  // ---- RNG ---------------------------------------------------------------------------------------

  // Known-answer vectors of Philox4x32-10 from Random123 (kat_vectors).
  // bf16.h's rounding: known values (ties to even, NaN stays NaN, overflow to infinity), then
  // 2^20 random bit patterns against an independent rule: the nearer of the two bf16 values
  // around x (its truncation and the next one up), the even one on a tie, computed in double.
  void bf16RoundsToNearestEven_data() {
    QTest::addColumn<uint>("in");
    QTest::addColumn<uint>("out");
    QTest::newRow("1") << 0x3f800000u << 0x3f80u;
    QTest::newRow("1 + 2^-8: tie, to even") << 0x3f808000u << 0x3f80u;
    QTest::newRow("1 + 3 x 2^-8: tie, to even") << 0x3f818000u << 0x3f82u;
    QTest::newRow("just above the tie") << 0x3f808001u << 0x3f81u;
    QTest::newRow("just below the tie") << 0x3f807fffu << 0x3f80u;
    QTest::newRow("-2") << 0xc0000000u << 0xc000u;
    QTest::newRow("-0") << 0x80000000u << 0x8000u;
    QTest::newRow("largest bf16") << 0x7f7f0000u << 0x7f7fu;
    QTest::newRow("FLT_MAX to infinity") << 0x7f7fffffu << 0x7f80u;
    QTest::newRow("infinity") << 0x7f800000u << 0x7f80u;
    QTest::newRow("-infinity") << 0xff800000u << 0xff80u;
    QTest::newRow("quiet NaN") << 0x7fc00000u << 0x7fc0u;
    QTest::newRow("signalling NaN stays NaN") << 0x7f800001u << 0x7fc0u;
    QTest::newRow("NaN with a low payload only") << 0xff80ffffu << 0xffc0u;
    QTest::newRow("subnormal, tie to even") << 0x00018000u << 0x0002u;
    QTest::newRow("smallest normal float") << 0x00800000u << 0x0080u;
  }
  void bf16RoundsToNearestEven() {
    QFETCH(uint, in);
    QFETCH(uint, out);
    float f;
    const uint32_t u = in;
    std::memcpy(&f, &u, sizeof f);
    QCOMPARE(uint(to_bf16(f).bits), out);
    if ((out & 0x7f80u) != 0x7f80u || (out & 0x7fu) == 0) {  // not NaN: the value comes back
      const float back = to_float(bf16{static_cast<uint16_t>(out)});
      uint32_t bu;
      std::memcpy(&bu, &back, sizeof bu);
      QCOMPARE(bu, uint32_t(out) << 16);
    }
  }
  void bf16RoundingMatchesAnIndependentRule() {
    std::mt19937 gen(7);
    for (int k = 0; k < (1 << 20); ++k) {
      const uint32_t u = gen();
      float x;
      std::memcpy(&x, &u, sizeof x);
      if (!std::isfinite(x)) continue;
      const uint32_t lo_bits = u & 0xffff0000u;  // towards zero
      float lo_f, hi_f;
      std::memcpy(&lo_f, &lo_bits, sizeof lo_f);
      const uint32_t hi_bits = lo_bits + 0x10000u;  // one bf16 step away from zero (may be infinity)
      std::memcpy(&hi_f, &hi_bits, sizeof hi_f);
      const double dlo = std::abs(double(x) - double(lo_f));
      // Past the largest finite bf16 the step up is infinity: round-to-nearest treats it as
      // 2^128, one step beyond.
      const double hi_val = std::isinf(hi_f) ? std::copysign(std::ldexp(1.0, 128), double(x)) : double(hi_f);
      const double dhi = std::abs(hi_val - double(x));
      const uint16_t want = static_cast<uint16_t>(
          (dlo < dhi || (dlo == dhi && ((lo_bits >> 16) & 1u) == 0)) ? lo_bits >> 16 : hi_bits >> 16);
      if (to_bf16(x).bits != want) {
        QFAIL(qPrintable(QString("0x%1 rounds to 0x%2, expected 0x%3").arg(u, 8, 16, QChar('0')).arg(to_bf16(x).bits, 4, 16, QChar('0'))
                             .arg(want, 4, 16, QChar('0'))));
      }
    }
    // The bulk kernels: each element as the scalar function, and back exactly.
    const std::vector<float> x = cast<float>(randn(100003, 91, 3.0));
    std::vector<bf16> h(x.size());
    std::vector<float> back(x.size());
    cpu::to_bf16(h.data(), x.data(), x.size());
    cpu::from_bf16(back.data(), h.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      QCOMPARE(h[i].bits, to_bf16(x[i]).bits);
      QCOMPARE(back[i], to_float(h[i]));
    }
  }

  // bf16 activations through the CPU's Ops table: a kernel that writes one gives the bf16
  // rounding of its fp32 output bit for bit, and a GEMM that reads one gives what it gives on the
  // widened values, bit for bit (GptStage's bf16 path on the CPU, as a GPU computes it).
  void bf16ActivationsAreRoundedFp32Outputs() {
    const Ops& k = cpu_ops();
    const int B = 2, T = 19, C = 40, NH = 4, HS = C / NH, OC = 33, BT = B * T;
    const size_t n = size_t(BT) * C;
    auto rounded = [](const std::vector<float>& v) {
      std::vector<bf16> r(v.size());
      for (size_t i = 0; i < v.size(); ++i) r[i] = to_bf16(v[i]);
      return r;
    };
    auto same = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
    };
    const std::vector<float> x = cast<float>(randn(n, 92, 2.0)), w = cast<float>(randn(size_t(C), 93)),
                             b = cast<float>(randn(size_t(C), 94));
    {  // layernorm
      std::vector<float> out(n), mean(BT), rstd(BT), mean16(BT), rstd16(BT);
      std::vector<bf16> out16(n);
      k.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), BT, C);
      k.layernorm_forward(out16.data(), mean16.data(), rstd16.data(), x.data(), w.data(), b.data(), BT, C);
      QVERIFY(same(out16, rounded(out)));
      QVERIFY(all_equal(mean16, mean) && all_equal(rstd16, rstd));  // statistics stay fp32
      // The backward's bf16 copy of the accumulated gradient at its input (the residual stream's
      // gradient, for c_proj's GEMMs): the rounding of dinp after the accumulation, bit for bit.
      const std::vector<float> dy = cast<float>(randn(n, 114)), d0 = cast<float>(randn(n, 115));
      std::vector<float> d1 = d0, d2 = d0, dw1(C), db1(C), dw2(C), db2(C);
      std::vector<bf16> dlow(n);
      k.layernorm_backward(d1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), BT, C);
      k.layernorm_backward(d2.data(), dw2.data(), db2.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), BT, C, dlow.data());
      QVERIFY(all_equal(d1, d2) && all_equal(dw1, dw2) && all_equal(db1, db2));
      QVERIFY(same(dlow, rounded(d1)) && !same(dlow, rounded(d0)));
      QVERIFY(!all_equal(out, [&] {
        std::vector<float> wide(n);
        cpu::from_bf16(wide.data(), out16.data(), n);
        return wide;
      }()));
    }
    {  // GELU, and the gradient at its input
      std::vector<float> y(n), dx(n);
      std::vector<bf16> y16(n), dx16(n);
      k.gelu_forward(y.data(), x.data(), n);
      k.gelu_forward(y16.data(), x.data(), n);
      QVERIFY(same(y16, rounded(y)));
      const std::vector<float> dy = cast<float>(randn(n, 102));
      k.gelu_backward(dx.data(), x.data(), dy.data(), n);
      k.gelu_backward(dx16.data(), x.data(), dy.data(), n);
      QVERIFY(same(dx16, rounded(dx)));
      // GELU reading a bf16 input: what it gives on the widened values.
      const std::vector<bf16> x16 = rounded(x);
      std::vector<float> xw(n), y1(n), y2(n), g1(n), g2(n);
      cpu::from_bf16(xw.data(), x16.data(), n);
      k.gelu_forward(y1.data(), xw.data(), n);
      k.gelu_forward(y2.data(), x16.data(), n);
      k.gelu_backward(g1.data(), xw.data(), dy.data(), n);
      k.gelu_backward(g2.data(), x16.data(), dy.data(), n);
      QVERIFY(all_equal(y1, y2) && all_equal(g1, g2));
      // A bf16 gradient at GELU's output, turned in place into the one at its input (GptStage's
      // bf16 path), with a bf16 input beside it: the rounding of what the widened values give.
      const std::vector<bf16> dy16 = rounded(dy);
      std::vector<float> dyw(n), g3(n);
      cpu::from_bf16(dyw.data(), dy16.data(), n);
      k.gelu_backward(g3.data(), xw.data(), dyw.data(), n);
      std::vector<bf16> inplace = dy16;
      k.gelu_backward(inplace.data(), x16.data(), inplace.data(), n);
      QVERIFY(same(inplace, rounded(g3)));
      QVERIFY(!same(inplace, dy16));
    }
    {  // attention, writing a bf16 output, and reading bf16 q k v
      const std::vector<float> qkv = cast<float>(randn(size_t(BT) * 3 * C, 95));
      std::vector<float> out(n), att(size_t(B) * NH * T * T), att16(att.size());
      std::vector<bf16> out16(n);
      k.attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, HS, NH);
      k.attention_forward(out16.data(), att16.data(), qkv.data(), B, T, NH, HS, NH);
      QVERIFY(same(out16, rounded(out)));
      QVERIFY(all_equal(att16, att));  // probabilities stay fp32
      const std::vector<bf16> qkv16 = rounded(qkv);
      std::vector<float> qkv_wide(qkv.size()), o1(n), o2(n), a1(att.size()), a2(att.size()), dout = cast<float>(randn(n, 103)),
          d1(qkv.size()), d2(qkv.size()), s1(att.size()), s2(att.size());
      cpu::from_bf16(qkv_wide.data(), qkv16.data(), qkv.size());
      k.attention_forward(o1.data(), a1.data(), qkv_wide.data(), B, T, NH, HS, NH);
      k.attention_forward(o2.data(), a2.data(), qkv16.data(), B, T, NH, HS, NH);
      QVERIFY(all_equal(o1, o2) && all_equal(a1, a2));
      k.attention_backward(d1.data(), s1.data(), dout.data(), qkv_wide.data(), a1.data(), B, T, NH, HS, NH);
      k.attention_backward(d2.data(), s2.data(), dout.data(), qkv16.data(), a2.data(), B, T, NH, HS, NH);
      QVERIFY(all_equal(d1, d2));
      // A bf16 gradient at the output, and dq dk dv written in bf16: the rounding of what the
      // widened values give.
      const std::vector<bf16> dout16 = rounded(dout);
      std::vector<float> dout_wide(n);
      cpu::from_bf16(dout_wide.data(), dout16.data(), n);
      std::vector<bf16> d16(qkv.size());
      k.attention_backward(d1.data(), s1.data(), dout_wide.data(), qkv_wide.data(), a1.data(), B, T, NH, HS, NH);
      k.attention_backward(d16.data(), s2.data(), dout16.data(), qkv16.data(), a2.data(), B, T, NH, HS, NH);
      QVERIFY(same(d16, rounded(d1)));
    }
    {  // the loss's gradient at the logits, into fp32 logits in place and into bf16
      const int V = 53;
      std::vector<float> logits = cast<float>(randn(size_t(BT) * V, 100, 3.0)), probs(logits.size()), losses(BT);
      const std::vector<int32_t> targets = tokens_of(size_t(BT), V, 101);
      k.crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), BT, V);
      std::vector<float> d32(probs.size());
      std::vector<bf16> d16(probs.size());
      k.crossentropy_backward(d32.data(), probs.data(), targets.data(), 1.0f / BT, BT, V);
      k.crossentropy_backward(d16.data(), probs.data(), targets.data(), 1.0f / BT, BT, V);
      QVERIFY(same(d16, rounded(d32)));
    }
    {  // GEMMs reading a bf16 input, both layouts, with the weight gradient accumulating
      const std::vector<bf16> in16 = rounded(x);
      std::vector<float> wide(n);
      cpu::from_bf16(wide.data(), in16.data(), n);
      for (Layout layout : {Layout::kInOut, Layout::kOutIn}) {
        const std::vector<float> W = cast<float>(randn(size_t(C) * OC, 96, 0.2)), bias = cast<float>(randn(size_t(OC), 97)),
                                 dout = cast<float>(randn(size_t(BT) * OC, 98));
        std::vector<float> o1(size_t(BT) * OC), o2(o1.size()), di1(n), di2(n), dw1 = cast<float>(randn(W.size(), 99)), dw2 = dw1,
                                                                 db1(static_cast<size_t>(OC)), db2(static_cast<size_t>(OC));
        k.matmul_forward(o1.data(), wide.data(), W.data(), bias.data(), BT, C, OC, layout);
        k.matmul_forward(o2.data(), in16.data(), W.data(), bias.data(), BT, C, OC, layout);
        QVERIFY(all_equal(o1, o2));
        k.matmul_backward(di1.data(), dw1.data(), db1.data(), dout.data(), wide.data(), W.data(), BT, C, OC, layout);
        k.matmul_backward(di2.data(), dw2.data(), db2.data(), dout.data(), in16.data(), W.data(), BT, C, OC, layout);
        QVERIFY(all_equal(di1, di2) && all_equal(dw1, dw2) && all_equal(db1, db2));
        // A bf16 incoming gradient and bf16 weights: the widened values' results.
        const std::vector<bf16> dout16 = rounded(dout), W16 = rounded(W);
        std::vector<float> dout_wide(dout.size()), W_wide(W.size());
        cpu::from_bf16(dout_wide.data(), dout16.data(), dout.size());
        cpu::from_bf16(W_wide.data(), W16.data(), W.size());
        k.matmul_backward(di1.data(), dw1.data(), db1.data(), dout_wide.data(), wide.data(), W_wide.data(), BT, C, OC, layout);
        k.matmul_backward(di2.data(), dw2.data(), db2.data(), dout16.data(), in16.data(), W16.data(), BT, C, OC, layout);
        QVERIFY(all_equal(di1, di2) && all_equal(dw1, dw2) && all_equal(db1, db2));
        // The gradient at the input written in bf16 (the next kernel reads it so), the weight's
        // and the bias's gradients as before.
        std::vector<bf16> di16(n);
        k.matmul_backward(di1.data(), dw1.data(), db1.data(), dout_wide.data(), wide.data(), W_wide.data(), BT, C, OC, layout);
        k.matmul_backward(di16.data(), dw2.data(), db2.data(), dout16.data(), in16.data(), W16.data(), BT, C, OC, layout);
        QVERIFY(same(di16, rounded(di1)) && all_equal(dw1, dw2) && all_equal(db1, db2));
        k.matmul_forward(o1.data(), wide.data(), W_wide.data(), bias.data(), BT, C, OC, layout);
        k.matmul_forward(o2.data(), in16.data(), W16.data(), bias.data(), BT, C, OC, layout);
        QVERIFY(all_equal(o1, o2));
        // A bf16 output with a bf16 bias: the rounded fp32 result on the widened bias.
        const std::vector<bf16> bias16 = rounded(bias);
        std::vector<float> bias_wide(bias.size());
        cpu::from_bf16(bias_wide.data(), bias16.data(), bias.size());
        std::vector<bf16> o16(o1.size());
        k.matmul_forward(o1.data(), wide.data(), W_wide.data(), bias_wide.data(), BT, C, OC, layout);
        k.matmul_forward(o16.data(), in16.data(), W16.data(), bias16.data(), BT, C, OC, layout);
        QVERIFY(same(o16, rounded(o1)));
      }
    }
  }

  // The tensor-core flash attention's tile program (src/runtime/flash_tiles.h), run here as the
  // GPU runs it, against attention in double on the same bf16 q, k, v: the tiling, the causal mask
  // at every tile edge and the online softmax must give attention, within what rounding P, dO and
  // dS to bf16 costs.
  void tiledFlashAttentionMatchesAttention_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("HS");
    QTest::addColumn<int>("NKV");
    QTest::newRow("T1: a single position") << 2 << 1 << 2 << 16 << 2;
    QTest::newRow("T17 HS32: one partial tile") << 2 << 17 << 2 << 32 << 2;
    QTest::newRow("T64: one whole tile") << 1 << 64 << 2 << 64 << 2;
    QTest::newRow("T65: a second tile of one row") << 1 << 65 << 2 << 64 << 2;
    QTest::newRow("T200 HS64: four tiles, GPT-2's head") << 2 << 200 << 2 << 64 << 2;
    QTest::newRow("T100 HS48") << 1 << 100 << 3 << 48 << 3;
    QTest::newRow("T130 HS128: the largest head") << 1 << 130 << 1 << 128 << 1;
    QTest::newRow("GQA T7 HS16: 4 heads over 2 K/V heads") << 2 << 7 << 4 << 16 << 2;
    QTest::newRow("MQA T7 HS16: 4 heads over 1 K/V head") << 2 << 7 << 4 << 16 << 1;
    QTest::newRow("GQA T130 HS64: 4 heads over 2, three tiles") << 2 << 130 << 4 << 64 << 2;
    QTest::newRow("MQA T65 HS128: 4 heads over 1, a second tile of one row") << 1 << 65 << 4 << 128 << 1;
  }
  void tiledFlashAttentionMatchesAttention() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, HS);
    QFETCH(int, NKV);
    const size_t C = size_t(NH) * HS, W = size_t(NH + 2 * NKV) * HS, rows = size_t(B) * NH * T;
    std::vector<bf16> qkv(size_t(B) * T * W);
    std::vector<double> wide(qkv.size());
    const std::vector<double> x = randn(qkv.size(), 96, 1.5);
    for (size_t i = 0; i < qkv.size(); ++i) {
      qkv[i] = to_bf16(float(x[i]));
      wide[i] = to_float(qkv[i]);
    }
    const std::vector<double> dout = randn(size_t(B) * T * C, 97);
    std::vector<double> out(size_t(B) * T * C), att(rows * T), dqkv(qkv.size()), scratch(att.size());
    cpu::attention_forward(out.data(), att.data(), wide.data(), B, T, NH, HS, NKV);
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), wide.data(), att.data(), B, T, NH, HS, NKV);
    // Each row's log-sum-exp of the scaled scores, in double, query head h against K/V head
    // h / (NH / NKV).
    std::vector<double> lse(rows);
    for (size_t r = 0; r < rows; ++r) {
      const size_t bh = r / T, t = r % T, b = bh / NH, h = bh % NH, kv = h / (NH / NKV);
      const double* q = wide.data() + (b * T + t) * W + h * HS;
      std::vector<double> s(t + 1);
      double m = -INFINITY, sum = 0;
      for (size_t j = 0; j <= t; ++j) {
        const double* kj = wide.data() + (b * T + j) * W + C + kv * HS;
        s[j] = 0;
        for (int d = 0; d < HS; ++d) s[j] += q[d] * kj[d];
        s[j] /= std::sqrt(double(HS));
        m = std::max(m, s[j]);
      }
      for (double v : s) sum += std::exp(v - m);
      lse[r] = m + std::log(sum);
    }
    std::vector<float> fout(out.size(), float(kNaN)), flse(rows, float(kNaN)), fdqkv(qkv.size(), float(kNaN)), delta(rows);
    cpu::flash_attention_tiled_forward(fout.data(), flse.data(), qkv.data(), B, T, NH, HS, NKV);
    const std::vector<float> fdout = cast<float>(dout);
    cpu::flash_attention_tiled_backward(fdqkv.data(), delta.data(), fdout.data(), qkv.data(), fout.data(), flse.data(), B, T, NH, HS,
                                        NKV);
    double lse_err = 0;
    for (size_t r = 0; r < rows; ++r) lse_err = std::max(lse_err, std::abs(double(flse[r]) - lse[r]));
    // The gradients of q, k and v apart: each has its own scale. Columns [first, first + width) of
    // every row.
    auto part = [&](const auto& v, size_t first, size_t width) {
      std::vector<double> p;
      for (size_t bt = 0; bt < size_t(B) * T; ++bt)
        for (size_t c = first; c < first + width; ++c) p.push_back(double(v[bt * W + c]));
      return p;
    };
    const size_t KV = size_t(NKV) * HS;
    // (With one position, q and k get no gradient: softmax over one key is 1 whatever they are.)
    const double eo = rel_err(fout, out), eq = rel_err(part(fdqkv, 0, C), part(dqkv, 0, C), 1e-3),
                 ek = rel_err(part(fdqkv, C, KV), part(dqkv, C, KV), 1e-3), ev = rel_err(part(fdqkv, C + KV, KV), part(dqkv, C + KV, KV));
    qInfo("out %.2e, lse %.2e (absolute), dq %.2e, dk %.2e, dv %.2e", eo, lse_err, eq, ek, ev);
    QVERIFY2(eo < 1e-2 && eq < 1e-2 && ek < 1e-2 && ev < 1e-2 && lse_err < 1e-4,
             qPrintable(QString("out %1, lse %2, dq %3, dk %4, dv %5").arg(eo).arg(lse_err).arg(eq).arg(ek).arg(ev)));
  }

  // ---- Llama's layers ------------------------------------------------------------------------------

  // Grouped-query attention is multi-head attention over K/V heads repeated per query head
  // (transformers' repeat_kv): the same output and probabilities, the same dq, and each K/V head's
  // gradient the sum of its repeats'. In double, where only the order of the sums differs.
  void groupedQueryAttentionIsAttentionWithRepeatedKeys_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("NKV");
    QTest::addColumn<int>("HS");
    QTest::newRow("T7: 4 heads over 2 K/V heads") << 2 << 7 << 4 << 2 << 8;
    QTest::newRow("T7: 4 heads over 1 (multi-query)") << 2 << 7 << 4 << 1 << 8;
    QTest::newRow("T70: 4 heads over 2, two key blocks") << 2 << 70 << 4 << 2 << 16;
    QTest::newRow("T130: 4 heads over 1, three key blocks") << 2 << 130 << 4 << 1 << 8;
    QTest::newRow("T9: 4 heads over 4 (multi-head)") << 2 << 9 << 4 << 4 << 8;
  }
  void groupedQueryAttentionIsAttentionWithRepeatedKeys() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, NKV);
    QFETCH(int, HS);
    const int group = NH / NKV;
    const size_t C = size_t(NH) * HS, W = size_t(NH + 2 * NKV) * HS, BT = size_t(B) * T;
    const auto qkv = randn(BT * W, 150), dout = randn(BT * C, 151);
    const auto rep = repeat_kv(qkv, B, T, NH, NKV, HS);
    std::vector<double> out(BT * C, kNaN), att(size_t(B) * NH * T * T, kNaN), dqkv(qkv.size(), kNaN), scratch(att.size(), kNaN);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, HS, NKV);
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH, HS, NKV);
    std::vector<double> rout(out.size()), ratt(att.size()), rdqkv(rep.size()), rscratch(att.size());
    cpu::attention_forward(rout.data(), ratt.data(), rep.data(), B, T, NH, HS, NH);
    cpu::attention_backward(rdqkv.data(), rscratch.data(), dout.data(), rep.data(), ratt.data(), B, T, NH, HS, NH);
    // What dqkv must be: dq as it is, and the repeats' dk and dv summed per K/V head.
    std::vector<double> want(qkv.size(), 0.0);
    for (size_t bt = 0; bt < BT; ++bt) {
      const double* r = rdqkv.data() + bt * 3 * C;
      double* w = want.data() + bt * W;
      for (int h = 0; h < NH; ++h) {
        const size_t kv = size_t(h / group);
        for (int d = 0; d < HS; ++d) {
          w[h * HS + d] = r[h * HS + d];
          w[C + kv * HS + d] += r[C + h * HS + d];
          w[C + (NKV + kv) * HS + d] += r[2 * C + h * HS + d];
        }
      }
    }
    QVERIFY2(rel_err(out, rout) < 1e-13, qPrintable(QString("out %1").arg(rel_err(out, rout))));
    QVERIFY2(rel_err(att, ratt) < 1e-13, qPrintable(QString("att %1").arg(rel_err(att, ratt))));
    QVERIFY2(rel_err(dqkv, want) < 1e-12, qPrintable(QString("dqkv %1").arg(rel_err(dqkv, want))));
    // And in float, within float rounding of the double answer.
    const auto qkvf = cast<float>(qkv), doutf = cast<float>(dout);
    std::vector<float> outf(out.size()), attf(att.size()), dqkvf(qkv.size(), float(kNaN)), scratchf(att.size());
    cpu::attention_forward(outf.data(), attf.data(), qkvf.data(), B, T, NH, HS, NKV);
    cpu::attention_backward(dqkvf.data(), scratchf.data(), doutf.data(), qkvf.data(), attf.data(), B, T, NH, HS, NKV);
    QVERIFY(rel_err(outf, out) < 1e-5 && rel_err(attf, att) < 1e-5 && rel_err(dqkvf, want) < 1e-5);
  }

  // Context parallelism's block kernels against attention over the whole sequence: the sequence of
  // T tokens cut into 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r (context_attention.h);
  // each rank's queries against every rank's keys, merged by the online softmax, give attention's
  // output and log-sum-exps at those positions; the pairs' backward, dq summed over the key blocks
  // and dkv over the query blocks, give attention's gradient; in double to 1e-12 and in float to
  // 1e-5. Grouped-query attention included; with one block (cp 1) it is attention itself.
  void blockAttentionMergesToAttention_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("NKV");
    QTest::addColumn<int>("HS");
    QTest::addColumn<int>("cp");
    QTest::newRow("one block") << 2 << 12 << 2 << 2 << 8 << 1;
    QTest::newRow("cp 2, multi-head") << 2 << 16 << 3 << 3 << 8 << 2;
    QTest::newRow("cp 3, 4 query heads on 2 K/V heads") << 2 << 24 << 4 << 2 << 8 << 3;
    QTest::newRow("cp 4, one K/V head, chunks of 1") << 1 << 8 << 4 << 1 << 16 << 4;
  }
  void blockAttentionMergesToAttention() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, NKV);
    QFETCH(int, HS);
    QFETCH(int, cp);
    const size_t Q = size_t(NH) * HS, KV = size_t(2) * NKV * HS, W = Q + KV, BT = size_t(B) * T;
    const auto qkv = randn(BT * W, 160), dout = randn(BT * Q, 161);
    // The whole sequence's attention, its log-sum-exps (from the probabilities' diagonal: p_tt =
    // exp(s_tt - lse_t)) and gradient.
    std::vector<double> out(BT * Q), att(size_t(B) * NH * T * T), dqkv(qkv.size()), scratch(att.size());
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, HS, NKV);
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH, HS, NKV);
    std::vector<double> lse(size_t(B) * NH * T);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const double* q = qkv.data() + (size_t(b) * T + t) * W + size_t(h) * HS;
          const double* k = qkv.data() + (size_t(b) * T + t) * W + Q + size_t(h / (NH / NKV)) * HS;
          double s = 0;
          for (int d = 0; d < HS; ++d) s += q[d] * k[d];
          s /= std::sqrt(double(HS));
          lse[(size_t(b) * NH + h) * T + t] = s - std::log(att[((size_t(b) * NH + h) * T + t) * T + t]);
        }
      }
    }
    // Each rank's rows: q (B, Tl, Q), kv (B, Tl, KV), positions (Tl); and the answers at those rows.
    const int Tl = T / cp, c = Tl / 2;
    auto positions = [&](int r) {
      std::vector<int32_t> p;
      for (int chunk : {r, 2 * cp - 1 - r}) {
        for (int t = 0; t < c; ++t) p.push_back(chunk * c + t);
      }
      if (cp == 1) {
        p.clear();
        for (int t = 0; t < T; ++t) p.push_back(t);
      }
      return p;
    };
    auto rows = [&](const std::vector<double>& x, size_t width, size_t col, size_t cols, const std::vector<int32_t>& pos) {
      std::vector<double> y;
      for (int b = 0; b < B; ++b) {
        for (int32_t t : pos) {
          const double* row = x.data() + (size_t(b) * T + size_t(t)) * width + col;
          y.insert(y.end(), row, row + cols);
        }
      }
      return y;
    };
    std::vector<std::vector<int32_t>> pos;
    std::vector<std::vector<double>> qs, kvs;
    for (int r = 0; r < cp; ++r) {
      pos.push_back(positions(r));
      qs.push_back(rows(qkv, W, 0, Q, pos.back()));
      kvs.push_back(rows(qkv, W, Q, KV, pos.back()));
    }
    const size_t ranks = static_cast<size_t>(cp);
    std::vector<std::vector<double>> outs(ranks), lses(ranks), dqs(ranks);
    std::vector<std::vector<double>> dkvs(ranks, std::vector<double>(size_t(B) * Tl * KV, 0.0));
    double worst_out = 0, worst_lse = 0, worst_dq = 0, worst_dkv = 0;
    for (int r = 0; r < cp; ++r) {
      std::vector<double>& acc = outs[size_t(r)];
      std::vector<double>& acc_lse = lses[size_t(r)];
      acc.assign(size_t(B) * Tl * Q, kNaN);
      acc_lse.assign(size_t(B) * NH * Tl, kNaN);
      // Ring order: its own block first, then the others; the blocks later than every query are
      // merged too (they add nothing).
      for (int s = 0; s < cp; ++s) {
        const int src = (r - s + cp) % cp;
        std::vector<double> o(acc.size(), kNaN), l(acc_lse.size(), kNaN);
        cpu::attention_block_forward(s == 0 ? acc.data() : o.data(), s == 0 ? acc_lse.data() : l.data(), qs[size_t(r)].data(),
                                     kvs[size_t(src)].data(), pos[size_t(r)].data(), pos[size_t(src)].data(), B, Tl, Tl, NH, HS, NKV);
        if (s > 0) cpu::attention_block_merge(acc.data(), acc_lse.data(), o.data(), l.data(), B, Tl, NH, HS);
      }
      const auto want_out = rows(out, Q, 0, Q, pos[size_t(r)]);
      std::vector<double> want_lse;
      for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
          for (int32_t t : pos[size_t(r)]) want_lse.push_back(lse[(size_t(b) * NH + h) * T + size_t(t)]);
        }
      }
      worst_out = std::max(worst_out, rel_err(acc, want_out));
      worst_lse = std::max(worst_lse, rel_err(acc_lse, want_lse));
    }
    for (int r = 0; r < cp; ++r) {
      const auto dout_r = rows(dout, Q, 0, Q, pos[size_t(r)]);
      dqs[size_t(r)].assign(size_t(B) * Tl * Q, 0.0);
      for (int src = 0; src < cp; ++src) {
        cpu::attention_block_backward(dqs[size_t(r)].data(), dkvs[size_t(src)].data(), dout_r.data(), qs[size_t(r)].data(),
                                      kvs[size_t(src)].data(), outs[size_t(r)].data(), lses[size_t(r)].data(), pos[size_t(r)].data(),
                                      pos[size_t(src)].data(), B, Tl, Tl, NH, HS, NKV);
      }
    }
    for (int r = 0; r < cp; ++r) {
      worst_dq = std::max(worst_dq, rel_err(dqs[size_t(r)], rows(dqkv, W, 0, Q, pos[size_t(r)])));
      worst_dkv = std::max(worst_dkv, rel_err(dkvs[size_t(r)], rows(dqkv, W, Q, KV, pos[size_t(r)])));
    }
    QVERIFY2(worst_out < 1e-12 && worst_lse < 1e-12 && worst_dq < 1e-12 && worst_dkv < 1e-12,
             qPrintable(QString("out %1, lse %2, dq %3, dkv %4").arg(worst_out).arg(worst_lse).arg(worst_dq).arg(worst_dkv)));
    // In float, rank 0's blocks: within float rounding of the double answer.
    std::vector<float> acc(size_t(B) * Tl * Q), acc_lse(size_t(B) * NH * Tl), o(acc.size()), l(acc_lse.size());
    const auto q0 = cast<float>(qs[0]);
    for (int s = 0; s < cp; ++s) {
      const int src = (cp - s) % cp;
      const auto kv = cast<float>(kvs[size_t(src)]);
      cpu::attention_block_forward(s == 0 ? acc.data() : o.data(), s == 0 ? acc_lse.data() : l.data(), q0.data(), kv.data(), pos[0].data(),
                                   pos[size_t(src)].data(), B, Tl, Tl, NH, HS, NKV);
      if (s > 0) cpu::attention_block_merge(acc.data(), acc_lse.data(), o.data(), l.data(), B, Tl, NH, HS);
    }
    QVERIFY2(rel_err(acc, outs[0]) < 1e-5 && rel_err(acc_lse, lses[0]) < 1e-5,
             qPrintable(QString("float: out %1, lse %2").arg(rel_err(acc, outs[0])).arg(rel_err(acc_lse, lses[0]))));
  }

  // A key block wholly after a query block: nothing seen, out 0 and lse -inf, and merging it
  // changes nothing; the backward of such a pair adds nothing.
  void blockAttentionOfLaterKeysIsEmpty() {
    const int B = 1, T = 4, NH = 2, NKV = 1, HS = 4;
    const auto q = randn(size_t(T) * NH * HS, 170), kv = randn(size_t(T) * 2 * NKV * HS, 171), dout = randn(q.size(), 172);
    const std::vector<int32_t> qp = {0, 1, 2, 3}, kp = {4, 5, 6, 7};
    std::vector<double> out(q.size(), kNaN), lse(size_t(NH) * T, kNaN);
    cpu::attention_block_forward(out.data(), lse.data(), q.data(), kv.data(), qp.data(), kp.data(), B, T, T, NH, HS, NKV);
    for (double x : out) QCOMPARE(x, 0.0);
    for (double x : lse) QVERIFY(std::isinf(x) && x < 0);
    std::vector<double> acc = randn(q.size(), 173), acc_lse = randn(lse.size(), 174);
    const auto acc0 = acc, lse0 = acc_lse;
    cpu::attention_block_merge(acc.data(), acc_lse.data(), out.data(), lse.data(), B, T, NH, HS);
    QCOMPARE(acc, acc0);
    QCOMPARE(acc_lse, lse0);
    std::vector<double> dq(q.size(), 0.5), dkv(kv.size(), 0.25);
    cpu::attention_block_backward(dq.data(), dkv.data(), dout.data(), q.data(), kv.data(), acc.data(), acc_lse.data(), qp.data(), kp.data(), B, T,
                                  T, NH, HS, NKV);
    for (double x : dq) QCOMPARE(x, 0.5);
    for (double x : dkv) QCOMPARE(x, 0.25);
  }

  // The rotary angle of a block that starts at position `first` is the whole sequence's there.
  void ropeAtAFirstPositionIsTheSequencesRotation() {
    const int T = 12, NH = 2, NKV = 1, HS = 8, first = 5, n = 4;
    const size_t W = size_t(NH + 2 * NKV) * HS;
    auto whole = randn(size_t(T) * W, 180);
    std::vector<double> block(whole.begin() + ptrdiff_t(first * W), whole.begin() + ptrdiff_t((first + n) * W));
    cpu::rope_forward(whole.data(), 1, T, NH, NKV, HS, 10000.0f);
    cpu::rope_forward(block.data(), 1, n, NH, NKV, HS, 10000.0f, first);
    const std::vector<double> want(whole.begin() + ptrdiff_t(first * W), whole.begin() + ptrdiff_t((first + n) * W));
    QVERIFY2(rel_err(block, want) < 1e-15, qPrintable(QString::number(rel_err(block, want))));
    cpu::rope_backward(block.data(), 1, n, NH, NKV, HS, 10000.0f, first);
    cpu::rope_backward(whole.data(), 1, T, NH, NKV, HS, 10000.0f);
    const std::vector<double> back(whole.begin() + ptrdiff_t(first * W), whole.begin() + ptrdiff_t((first + n) * W));
    QVERIFY2(rel_err(block, back) < 1e-15, qPrintable(QString::number(rel_err(block, back))));
  }

  // copy_columns moves a column range of every row between fp32 and bf16 buffers of other widths,
  // rounding as bf16.h does, and leaves the rest of the destination alone.
  void copyColumnsConvertsAndLeavesTheRest() {
    const Ops& k = cpu_ops();
    const int rows = 3, ld_src = 7, ld_dst = 5, width = 4;
    std::vector<float> src(size_t(rows) * ld_src);
    for (size_t i = 0; i < src.size(); ++i) src[i] = 1.0f + float(i) / 3.0f;
    std::vector<float> dst(size_t(rows) * ld_dst, -1.0f);
    k.copy_columns(dst.data() + 1, ld_dst, src.data() + 2, ld_src, rows, width);
    std::vector<bf16> low(size_t(rows) * ld_dst, to_bf16(-1.0f));
    k.copy_columns(low.data(), ld_dst, src.data() + 2, ld_src, rows, width);
    std::vector<float> back(size_t(rows) * width, 0.0f);
    k.copy_columns(back.data(), width, low.data(), ld_dst, rows, width);
    for (int r = 0; r < rows; ++r) {
      QCOMPARE(dst[size_t(r) * ld_dst], -1.0f);
      for (int c = 0; c < width; ++c) {
        const float x = src[size_t(r) * ld_src + 2 + size_t(c)];
        QCOMPARE(dst[size_t(r) * ld_dst + 1 + size_t(c)], x);
        QCOMPARE(back[size_t(r) * width + size_t(c)], to_float(to_bf16(x)));
      }
      QCOMPARE(to_float(low[size_t(r) * ld_dst + 4]), -1.0f);
    }
  }

  // The mixture of experts' row kernels (gather_rows, scatter_add_rows, row_dot) against their
  // loops written out, in double and float, with and without weights, a negative index (a zero
  // row, a skipped source) included; scatter_add_rows adds to what out held.
  void moeRowKernelsMatchTheirLoops_data() {
    QTest::addColumn<bool>("weighted");
    QTest::newRow("weighted") << true;
    QTest::newRow("unweighted") << false;
  }
  void moeRowKernelsMatchTheirLoops() {
    QFETCH(bool, weighted);
    const int R = 37, C = 24, N = 19, K = 3, IN = 23;  // rows, width, tokens, sources per token, input rows
    const std::vector<double> in = randn(size_t(IN) * C, 71), w = randn(size_t(R), 72), b = randn(size_t(R) * C, 73),
                              base = randn(size_t(N) * C, 74), wk = randn(size_t(N) * K, 75);
    std::vector<int32_t> gidx(static_cast<size_t>(R)), sidx(static_cast<size_t>(N) * K);
    for (int r = 0; r < R; ++r) gidx[size_t(r)] = r % 5 == 3 ? -1 : (r * 7) % IN;
    for (int s = 0; s < N * K; ++s) sidx[size_t(s)] = s % 4 == 1 ? -1 : (s * 5) % IN;
    // The loops, in double.
    std::vector<double> g_want(size_t(R) * C, 0.0), s_want = base, d_want(static_cast<size_t>(R), 0.0);
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        if (gidx[size_t(r)] >= 0) g_want[size_t(r) * C + c] = (weighted ? w[size_t(r)] : 1.0) * in[size_t(gidx[size_t(r)]) * C + c];
      }
    }
    for (int t = 0; t < N; ++t) {
      for (int j = 0; j < K; ++j) {
        const int32_t i = sidx[size_t(t) * K + j];
        if (i < 0) continue;
        for (int c = 0; c < C; ++c) s_want[size_t(t) * C + c] += (weighted ? wk[size_t(t) * K + j] : 1.0) * in[size_t(i) * C + c];
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) d_want[size_t(r)] += g_want[size_t(r) * C + c] * b[size_t(r) * C + c];
    }
    auto check = [&](auto tag, double tol) {
      using Real = decltype(tag);
      const std::vector<Real> in_r = cast<Real>(in), w_r = cast<Real>(w), wk_r = cast<Real>(wk), b_r = cast<Real>(b);
      std::vector<Real> g(size_t(R) * C, Real(7)), s = cast<Real>(base), d(static_cast<size_t>(R));
      cpu::gather_rows(g.data(), in_r.data(), gidx.data(), weighted ? w_r.data() : nullptr, R, C);
      cpu::scatter_add_rows(s.data(), in_r.data(), sidx.data(), weighted ? wk_r.data() : nullptr, N, K, C);
      cpu::row_dot(d.data(), g.data(), b_r.data(), R, C);
      for (size_t i = 0; i < g.size(); ++i) QVERIFY2(std::abs(g[i] - g_want[i]) <= tol, qPrintable(QString("gather %1").arg(i)));
      for (size_t i = 0; i < s.size(); ++i) QVERIFY2(std::abs(s[i] - s_want[i]) <= tol * 4, qPrintable(QString("scatter %1").arg(i)));
      for (size_t i = 0; i < d.size(); ++i) QVERIFY2(std::abs(d[i] - d_want[i]) <= tol * 8, qPrintable(QString("dot %1").arg(i)));
    };
    check(double(0), 1e-12);
    check(float(0), 2e-6);  // float inputs and products: ~1e-7 relative, sums of up to 24 terms of ~1
    // The Ops table calls the same kernels.
    const std::vector<float> in_f = cast<float>(in), w_f = cast<float>(w);
    std::vector<float> g(size_t(R) * C), g_ops(size_t(R) * C);
    cpu::gather_rows(g.data(), in_f.data(), gidx.data(), weighted ? w_f.data() : nullptr, R, C);
    cpu_ops().gather_rows(g_ops.data(), in_f.data(), gidx.data(), weighted ? w_f.data() : nullptr, R, C);
    QCOMPARE(g_ops, g);
  }

  // RMSNorm against its formula written out, and both gradients against finite differences; both
  // accumulate (dinp is the residual stream), so they start from 0.25 here.
  void rmsnormMatchesItsFormulaAndFiniteDifferences_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("C");
    QTest::addColumn<float>("eps");
    QTest::newRow("3 rows of 5, eps 1e-6 (Llama 2 and 3)") << 3 << 5 << 1e-6f;
    QTest::newRow("70 rows of 48 (column split), eps 1e-5") << 70 << 48 << 1e-5f;
    QTest::newRow("small inputs, where eps matters: eps 0.5") << 4 << 8 << 0.5f;
  }
  void rmsnormMatchesItsFormulaAndFiniteDifferences() {
    QFETCH(int, N);
    QFETCH(int, C);
    QFETCH(float, eps);
    auto inp = randn(size_t(N) * C, 140, eps > 0.1f ? 0.3 : 2.0), w = randn(C, 141);
    const auto r = randn(size_t(N) * C, 142);
    std::vector<double> out(inp.size(), kNaN), rstd(N, kNaN);
    auto loss = [&] {
      cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
      return dot(out, r);
    };
    loss();
    for (int i = 0; i < N; ++i) {
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += inp[size_t(i) * C + c] * inp[size_t(i) * C + c];
      const double rs = 1 / std::sqrt(ms / C + double(eps));
      QVERIFY(std::abs(rstd[i] - rs) < 1e-14 * rs);
      for (int c = 0; c < C; ++c) {
        const double ref = inp[size_t(i) * C + c] * rs * w[c];
        QVERIFY(std::abs(out[size_t(i) * C + c] - ref) < 1e-14 * std::max(1.0, std::abs(ref)));
      }
    }
    std::vector<double> dinp(inp.size(), 0.25), dw(C, 0.25);
    cpu::rmsnorm_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
    for (auto* v : {&dinp, &dw})
      for (double& x : *v) x -= 0.25;
    check_grad("inp", inp, dinp, loss);
    check_grad("weight", w, dw, loss);
    // A second call adds as much again.
    std::vector<double> twice(inp.size(), 0.0), once(inp.size(), 0.0), dw1(C, 0.0), dw2(C, 0.0);
    cpu::rmsnorm_backward(once.data(), dw1.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
    cpu::rmsnorm_backward(twice.data(), dw2.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
    cpu::rmsnorm_backward(twice.data(), dw2.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
    for (double& x : once) x *= 2;
    for (double& x : dw) x *= 2;
    QVERIFY(rel_err(twice, once) < 1e-13 && rel_err(dw2, dw) < 1e-13);
  }

  // Rotary positions against the rotation written out (Hugging Face's rotate-half: pair
  // (i, i + HS/2) of every q and k head, by t theta^(-2i/HS) at position t counted from 0 in each
  // sequence; v untouched, bit for bit); backward is the inverse rotation, and the gradient finite
  // differences give.
  void ropeIsTheRotationAndBackwardItsInverse_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("NKV");
    QTest::addColumn<int>("HS");
    QTest::addColumn<float>("theta");
    QTest::newRow("B2 T7: 4 heads over 2 K/V heads, HS 8") << 2 << 7 << 4 << 2 << 8 << 10000.0f;
    QTest::newRow("T70 multi-query, HS 132: 66 pairs, past one block of 64") << 1 << 70 << 2 << 1 << 132 << 500000.0f;
    QTest::newRow("T1: position 0 is the identity") << 3 << 1 << 2 << 2 << 4 << 10000.0f;
  }
  void ropeIsTheRotationAndBackwardItsInverse() {
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, NKV);
    QFETCH(int, HS);
    QFETCH(float, theta);
    const int half = HS / 2;
    const size_t W = size_t(NH + 2 * NKV) * HS, n = size_t(B) * T * W;
    auto x = randn(n, 160);
    const auto r = randn(n, 161);
    std::vector<double> want = x;
    for (size_t bt = 0; bt < size_t(B) * T; ++bt) {
      const double t = double(bt % size_t(T));
      for (int h = 0; h < NH + NKV; ++h)
        for (int i = 0; i < half; ++i) {
          const double a = t * std::pow(double(theta), -2.0 * i / HS);
          const size_t lo = bt * W + size_t(h) * HS + i, hi = lo + half;
          want[lo] = x[lo] * std::cos(a) - x[hi] * std::sin(a);
          want[hi] = x[hi] * std::cos(a) + x[lo] * std::sin(a);
        }
    }
    std::vector<double> y = x;
    cpu::rope_forward(y.data(), B, T, NH, NKV, HS, theta);
    QVERIFY2(rel_err(y, want) < 1e-14, qPrintable(QString("forward %1").arg(rel_err(y, want))));
    const size_t v0 = size_t(NH + NKV) * HS;
    for (size_t bt = 0; bt < size_t(B) * T; ++bt) QVERIFY(std::memcmp(&y[bt * W + v0], &x[bt * W + v0], (W - v0) * sizeof(double)) == 0);
    std::vector<double> back = y;
    cpu::rope_backward(back.data(), B, T, NH, NKV, HS, theta);
    QVERIFY2(rel_err(back, x) < 1e-14, qPrintable(QString("inverse %1").arg(rel_err(back, x))));
    // Float: the angles are taken in double either way, so only the products round.
    auto yf = cast<float>(x);
    cpu::rope_forward(yf.data(), B, T, NH, NKV, HS, theta);
    QVERIFY(rel_err(yf, want) < 1e-6);
    cpu::rope_backward(yf.data(), B, T, NH, NKV, HS, theta);
    QVERIFY(rel_err(yf, x) < 1e-6);
    std::vector<double> tmp(n);
    auto loss = [&] {
      tmp = x;
      cpu::rope_forward(tmp.data(), B, T, NH, NKV, HS, theta);
      return dot(tmp, r);
    };
    std::vector<double> dx = r;
    cpu::rope_backward(dx.data(), B, T, NH, NKV, HS, theta);
    check_grad("qkv", x, dx, loss);
  }

  // SwiGLU against silu(gate) up written out, including |gate| = 30 where the sigmoid saturates, and
  // its backward against finite differences; dinp is overwritten (NaN in it must vanish).
  void swigluMatchesItsFormulaAndFiniteDifferences_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("F");
    QTest::newRow("5 rows of 7") << 5 << 7;
    QTest::newRow("900 rows of 40: three row pieces") << 900 << 40;
  }
  void swigluMatchesItsFormulaAndFiniteDifferences() {
    QFETCH(int, N);
    QFETCH(int, F);
    auto x = randn(size_t(N) * 2 * F, 170, 3.0);
    x[0] = 30.0;
    x[1] = -30.0;
    x[2] = 0.0;
    const auto r = randn(size_t(N) * F, 171);
    std::vector<double> out(r.size(), kNaN);
    auto loss = [&] {
      cpu::swiglu_forward(out.data(), x.data(), N, F);
      return dot(out, r);
    };
    loss();
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < F; ++j) {
        const double g = x[size_t(i) * 2 * F + j], u = x[size_t(i) * 2 * F + F + j];
        const double ref = g / (1 + std::exp(-g)) * u;
        QVERIFY(std::abs(out[size_t(i) * F + j] - ref) < 1e-14 * std::max(1.0, std::abs(ref)));
      }
    std::vector<double> dx(x.size(), kNaN);
    cpu::swiglu_backward(dx.data(), x.data(), r.data(), N, F);
    check_grad("gate | up", x, dx, loss);
    // Float, with the fast sigmoid: within float rounding.
    const auto xf = cast<float>(x), rf = cast<float>(r);
    std::vector<float> outf(out.size()), dxf(x.size());
    cpu::swiglu_forward(outf.data(), xf.data(), N, F);
    cpu::swiglu_backward(dxf.data(), xf.data(), rf.data(), N, F);
    QVERIFY(rel_err(outf, out) < 2e-6 && rel_err(dxf, dx) < 2e-6);
  }

  // Llama's kernels through the CPU's Ops table with bf16 activations: a bf16 output is the
  // rounding of the fp32 one, a bf16 input gives what its widened values give, bit for bit; rotary
  // positions on a bf16 qkv in place are the rounding of the rotated widened values, v unchanged.
  void llamaBf16ActivationsAreRoundedFp32Outputs() {
    const Ops& k = cpu_ops();
    const int B = 2, T = 19, NH = 4, NKV = 2, HS = 8, C = NH * HS, F = 24, BT = B * T;
    const size_t n = size_t(BT) * C, W = size_t(NH + 2 * NKV) * HS, n3 = size_t(BT) * W;
    {  // RMSNorm, and the backward's bf16 copy of dinp after its accumulation
      const std::vector<float> x = cast<float>(randn(n, 180, 2.0)), w = cast<float>(randn(size_t(C), 181));
      std::vector<float> out(n), rstd(BT), rstd16(BT);
      std::vector<bf16> out16(n);
      k.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), BT, C, 1e-6f);
      k.rmsnorm_forward(out16.data(), rstd16.data(), x.data(), w.data(), BT, C, 1e-6f);
      QVERIFY(same_bits(out16, rounded_bf16(out)));
      QVERIFY(all_equal(rstd16, rstd));  // statistics stay fp32
      const std::vector<float> dy = cast<float>(randn(n, 182)), d0 = cast<float>(randn(n, 183));
      std::vector<float> d1 = d0, d2 = d0, dw1(size_t(C), 0.0f), dw2(size_t(C), 0.0f);
      std::vector<bf16> dlow(n);
      k.rmsnorm_backward(d1.data(), dw1.data(), dy.data(), x.data(), w.data(), rstd.data(), BT, C);
      k.rmsnorm_backward(d2.data(), dw2.data(), dy.data(), x.data(), w.data(), rstd.data(), BT, C, dlow.data());
      QVERIFY(all_equal(d1, d2) && all_equal(dw1, dw2));
      QVERIFY(same_bits(dlow, rounded_bf16(d1)) && !same_bits(dlow, rounded_bf16(d0)));
    }
    {  // rotary positions in place, forward and backward
      const std::vector<bf16> q16 = rounded_bf16(cast<float>(randn(n3, 184)));
      for (const bool forward : {true, false}) {
        std::vector<float> wide = widened_bf16(q16);
        std::vector<bf16> low = q16;
        if (forward) {
          k.rope_forward(wide.data(), B, T, NH, NKV, HS, 10000.0f);
          k.rope_forward(low.data(), B, T, NH, NKV, HS, 10000.0f);
        } else {
          k.rope_backward(wide.data(), B, T, NH, NKV, HS, 10000.0f);
          k.rope_backward(low.data(), B, T, NH, NKV, HS, 10000.0f);
        }
        QVERIFY(same_bits(low, rounded_bf16(wide)));
        QVERIFY(!same_bits(low, q16));
        const size_t v0 = size_t(NH + NKV) * HS;
        for (size_t bt = 0; bt < size_t(BT); ++bt)
          QVERIFY(std::memcmp(&low[bt * W + v0], &q16[bt * W + v0], (W - v0) * sizeof(bf16)) == 0);
      }
    }
    {  // SwiGLU: bf16 output, bf16 input, and the bf16 gradient at its input
      const std::vector<bf16> x16 = rounded_bf16(cast<float>(randn(size_t(BT) * 2 * F, 185, 2.0)));
      const std::vector<bf16> dy16 = rounded_bf16(cast<float>(randn(size_t(BT) * F, 186)));
      const std::vector<float> xw = widened_bf16(x16), dyw = widened_bf16(dy16);
      std::vector<float> y(size_t(BT) * F), y2(y.size()), dx(xw.size()), dx2(xw.size());
      std::vector<bf16> y16(y.size()), dx16(xw.size());
      k.swiglu_forward(y.data(), xw.data(), BT, F);
      k.swiglu_forward(y2.data(), x16.data(), BT, F);
      k.swiglu_forward(y16.data(), x16.data(), BT, F);
      QVERIFY(all_equal(y, y2) && same_bits(y16, rounded_bf16(y)));
      k.swiglu_backward(dx.data(), xw.data(), dyw.data(), BT, F);
      k.swiglu_backward(dx2.data(), x16.data(), dy16.data(), BT, F);
      k.swiglu_backward(dx16.data(), x16.data(), dy16.data(), BT, F);
      QVERIFY(all_equal(dx, dx2) && same_bits(dx16, rounded_bf16(dx)));
    }
    {  // grouped-query attention: bf16 q k v and output, a bf16 gradient in and bf16 dq dk dv out
      const std::vector<bf16> qkv16 = rounded_bf16(cast<float>(randn(n3, 187)));
      const std::vector<bf16> dout16 = rounded_bf16(cast<float>(randn(n, 188)));
      const std::vector<float> qkvw = widened_bf16(qkv16), doutw = widened_bf16(dout16);
      std::vector<float> out(n), a1(size_t(B) * NH * T * T), a2(a1.size()), s1(a1.size()), s2(a1.size()), d(n3);
      std::vector<bf16> out16(n), d16(n3);
      k.attention_forward(out.data(), a1.data(), qkvw.data(), B, T, NH, HS, NKV);
      k.attention_forward(out16.data(), a2.data(), qkv16.data(), B, T, NH, HS, NKV);
      QVERIFY(same_bits(out16, rounded_bf16(out)) && all_equal(a1, a2));
      k.attention_backward(d.data(), s1.data(), doutw.data(), qkvw.data(), a1.data(), B, T, NH, HS, NKV);
      k.attention_backward(d16.data(), s2.data(), dout16.data(), qkv16.data(), a2.data(), B, T, NH, HS, NKV);
      QVERIFY(same_bits(d16, rounded_bf16(d)));
    }
  }

  // RMSNorm, rotate-half rotary positions, SwiGLU and grouped-query attention against an
  // independent PyTorch reference in float64 (tests/engine/ref/llama_ref.py, written from
  // transformers' modeling_llama), forward and backward.
  void llamaKernelsMatchPyTorch_data() {
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("NKV");
    QTest::addColumn<int>("HS");
    QTest::addColumn<int>("F");
    QTest::addColumn<float>("theta");
    QTest::newRow("T7: 4 heads over 2 K/V heads") << 2 << 7 << 4 << 2 << 8 << 24 << 10000.0f;
    QTest::newRow("T7: 4 heads over 1 (multi-query)") << 2 << 7 << 4 << 1 << 8 << 24 << 10000.0f;
    QTest::newRow("T70: 4 heads over 2 across attention blocks, theta 500000") << 2 << 70 << 4 << 2 << 16 << 40 << 500000.0f;
    QTest::newRow("T9: 2 heads over 2 (multi-head)") << 1 << 9 << 2 << 2 << 6 << 10 << 10000.0f;
  }
  void llamaKernelsMatchPyTorch() {
    LlamaCase c;
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, NKV);
    QFETCH(int, HS);
    QFETCH(int, F);
    QFETCH(float, theta);
    c.B = B, c.T = T, c.NH = NH, c.NKV = NKV, c.HS = HS, c.F = F, c.theta = theta, c.eps = 1e-6f;
    const QString python = "/usr/bin/python3";
    static const bool have_torch = QProcess::execute(python, {"-c", "import torch"}) == 0;
    if (!have_torch) {
      QSKIP("/usr/bin/python3 has no torch: apt-get install -y python3-torch to run the PyTorch reference");
    }
    const size_t BT = size_t(B) * T, C = size_t(NH) * HS, W = size_t(NH + 2 * NKV) * HS;
    c.rms_x = randn(BT * C, 190, 2.0);
    c.rms_w = randn(C, 191);
    c.rms_dout = randn(BT * C, 192);
    c.qkv = randn(BT * W, 193);
    c.rope_dout = randn(BT * W, 194);
    c.att_dout = randn(BT * C, 195);
    c.glu_x = randn(BT * 2 * F, 196, 2.0);
    c.glu_dout = randn(BT * F, 197);

    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    {
      QFile f(dir.filePath("in.bin"));
      QVERIFY(f.open(QIODevice::WriteOnly));
      const int32_t dims[6] = {B, T, NH, NKV, HS, F};
      const float knobs[2] = {c.theta, c.eps};
      f.write(reinterpret_cast<const char*>(dims), sizeof dims);
      f.write(reinterpret_cast<const char*>(knobs), sizeof knobs);
      for (const auto* v : {&c.rms_x, &c.rms_w, &c.rms_dout, &c.qkv, &c.rope_dout, &c.att_dout, &c.glu_x, &c.glu_dout})
        f.write(reinterpret_cast<const char*>(v->data()), qint64(v->size() * 8));
    }
    QProcess proc;
    proc.start(python, {QString(STAGECRAFT_SOURCE_DIR) + "/tests/engine/ref/llama_ref.py", dir.filePath("in.bin"),
                        dir.filePath("out.bin")});
    QVERIFY(proc.waitForFinished(120000));
    QVERIFY2(proc.exitCode() == 0, proc.readAllStandardError().constData());
    QFile f(dir.filePath("out.bin"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray raw = f.readAll();
    const double* ref = reinterpret_cast<const double*>(raw.constData());

    // Double: the same formulas summed in another order; 1e-10 of each tensor's scale is rounding.
    // Float: single kernels over sums of at most 70 terms, within 2e-5 (as floatKernelsAgreeWithDouble).
    const auto got_d = llama_outputs<double>(c);
    const auto got_f = llama_outputs<float>(c);
    size_t total = 0;
    for (const auto& [name, v] : got_d) total += v.size();
    QCOMPARE(size_t(raw.size()), total * 8);
    size_t off = 0;
    QStringList wrong;  // every tensor that is off, not only the first
    for (size_t i = 0; i < got_d.size(); ++i) {
      const std::vector<double> want(ref + off, ref + off + got_d[i].second.size());
      const double ed = rel_err(got_d[i].second, want), ef = rel_err(got_f[i].second, want);
      if (!(ed < 1e-10 && ef < 2e-5)) wrong << QString("%1: double %2, float %3").arg(got_d[i].first).arg(ed).arg(ef);
      off += want.size();
    }
    QVERIFY2(wrong.isEmpty(), qPrintable(wrong.join("; ")));
  }

  void philoxMatchesRandom123KnownAnswers_data() {
    QTest::addColumn<QList<uint>>("ctr");
    QTest::addColumn<QList<uint>>("key");
    QTest::addColumn<QList<uint>>("expected");
    QTest::newRow("zeros") << QList<uint>{0, 0, 0, 0} << QList<uint>{0, 0}
                           << QList<uint>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
    QTest::newRow("ones") << QList<uint>{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}
                          << QList<uint>{0xffffffffu, 0xffffffffu}
                          << QList<uint>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu};
    QTest::newRow("pi digits") << QList<uint>{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}
                               << QList<uint>{0xa4093822u, 0x299f31d0u}
                               << QList<uint>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
  }
  void philoxMatchesRandom123KnownAnswers() {
    QFETCH(QList<uint>, ctr);
    QFETCH(QList<uint>, key);
    QFETCH(QList<uint>, expected);
    const auto out = philox4x32_10({ctr[0], ctr[1], ctr[2], ctr[3]}, {key[0], key[1]});
    for (int i = 0; i < 4; ++i) QCOMPARE(uint(out[i]), expected[i]);
  }

  // A Megatron TP shard of c_attn.weight [C, 3C] (the q, k and v columns of its heads), a row
  // shard (c_proj) and a 1-D slice (ZeRO) hold exactly the unsharded values.
  void shardedDrawsEqualUnsharded_data() {
    QTest::addColumn<int>("tp");
    QTest::newRow("tp 1") << 1;
    QTest::newRow("tp 2") << 2;
    QTest::newRow("tp 4") << 4;
  }
  void shardedDrawsEqualUnsharded() {
    QFETCH(int, tp);
    const int C = 64, C3 = 3 * C;
    const uint64_t seed = 42, stream = tensor_stream("h.0.attn.c_attn.weight");
    std::vector<float> full(size_t(C) * C3);
    fill_normal(full.data(), 0, TensorBlock::whole(C, C3), 0.0, 0.02, seed, stream);
    const int part = C / tp;
    for (int r = 0; r < tp; ++r) {
      // column-parallel: local (C, 3 part) = [q cols | k cols | v cols] of heads of rank r
      std::vector<float> local(size_t(C) * 3 * part);
      for (int j = 0; j < 3; ++j)
        fill_normal(local.data() + j * part, 3 * part, TensorBlock{C3, 0, C, j * C + r * part, part}, 0.0, 0.02,
                    seed, stream);
      for (int i = 0; i < C; ++i)
        for (int j = 0; j < 3; ++j)
          for (int c = 0; c < part; ++c)
            QCOMPARE(local[size_t(i) * 3 * part + j * part + c], full[size_t(i) * C3 + j * C + r * part + c]);
      // row-parallel: rows [r part, (r+1) part)
      std::vector<float> rows(size_t(part) * C3);
      fill_normal(rows.data(), 0, TensorBlock{C3, r * part, part, 0, C3}, 0.0, 0.02, seed, stream);
      QCOMPARE(std::memcmp(rows.data(), full.data() + size_t(r) * part * C3, rows.size() * 4), 0);
      // 1-D slice of the flattened tensor
      const int64_t n = int64_t(full.size()) / tp;
      std::vector<float> slice(n);
      fill_normal(slice.data(), 0, TensorBlock::range(r * n, n, int64_t(full.size())), 0.0, 0.02, seed, stream);
      QCOMPARE(std::memcmp(slice.data(), full.data() + r * n, n * 4), 0);
    }
  }

  void rngStatisticsAndStreams() {
    const int n = 200000;
    double s = 0, s2 = 0, us = 0, umin = 1, umax = 0;
    for (int i = 0; i < n; ++i) {
      const double z = rng_normal(5, 6, i);
      s += z;
      s2 += z * z;
      const double u = rng_uniform(5, 6, i);
      us += u;
      umin = std::min(umin, u);
      umax = std::max(umax, u);
    }
    // 5 standard errors: sd(mean) = 1/sqrt(n) ~ 0.0022, sd(var) = sqrt(2/n) ~ 0.0032, uniform
    // mean sd = sqrt(1/12/n) ~ 0.00065.
    QVERIFY(std::abs(s / n) < 0.011);
    QVERIFY(std::abs(s2 / n - 1) < 0.016);
    QVERIFY(std::abs(us / n - 0.5) < 0.0033);
    QVERIFY(umin > 0 && umax < 1);
    QVERIFY(rng_normal(5, 6, 0) != rng_normal(5, 7, 0));   // streams differ
    QVERIFY(rng_normal(5, 6, 0) != rng_normal(6, 6, 0));   // seeds differ
    QCOMPARE(rng_normal(5, 6, 123), rng_normal(5, 6, 123));  // pure
    QVERIFY(tensor_stream("h.0.attn.c_attn.weight") != tensor_stream("h.0.attn.c_attn.bias"));
    std::vector<double> u(1000);
    fill_uniform(u.data(), 0, TensorBlock::whole(10, 100), -2.0, 3.0, 1, 2);
    for (double x : u) QVERIFY(x > -2 && x < 3);
  }

  // ---- device ------------------------------------------------------------------------------------

  void cpuDeviceAllocatesCopiesAndZeroes() {
    auto dev = make_device(Backend::kCpu);
    QVERIFY(dev.ok());
    Device& d = **dev;
    QCOMPARE(d.backend(), Backend::kCpu);
    QVERIFY(QString::fromStdString(d.name()).startsWith("cpu"));
    auto a = Buffer<float>::make(d, 1000);
    QVERIFY(a.ok());
    QCOMPARE(reinterpret_cast<uintptr_t>(a->data()) % 64, uintptr_t(0));
    std::vector<float> host(1000);
    for (int i = 0; i < 1000; ++i) host[i] = float(i);
    QVERIFY(d.copy_from_host(a->data(), host.data(), a->bytes()));
    auto b = Buffer<float>::make_zeroed(d, 1000);
    QVERIFY(b.ok());
    QCOMPARE(b->data()[999], 0.0f);
    QVERIFY(d.copy(b->data(), a->data(), 500 * sizeof(float)));
    std::vector<float> back(1000, -1.0f);
    QVERIFY(d.copy_to_host(back.data(), b->data(), b->bytes()));
    QCOMPARE(back[499], 499.0f);
    QCOMPARE(back[500], 0.0f);
    QVERIFY(d.synchronize());
    Buffer<float> moved = std::move(*b);
    QCOMPARE(moved.size(), size_t(1000));
    QCOMPARE(b->data(), static_cast<float*>(nullptr));
    auto empty = Buffer<double>::make(d, 0);
    QVERIFY(empty.ok() && empty->data() == nullptr);
  }

  // Without the backend, or without a GPU, asking for one is a Status that says which.
  void cudaIsUnavailableWithoutABackendOrGpu() {
    if (cuda_built() && cuda_device_count() > 0) QSKIP("this machine has a GPU (tests/gpu covers it)");
    auto dev = make_device(Backend::kCuda, 0);
    QVERIFY(!dev.ok());
    QCOMPARE(dev.status().code(), Status::Code::kUnavailable);
    const QString message = QString::fromStdString(dev.status().message());
    QVERIFY2(message.contains(cuda_built() ? "no GPU is visible" : "cuda:0: this build of Stagecraft has no CUDA backend"),
             qPrintable(message));
  }

  void threadCountIsSettable() {
    cpu::set_num_threads(3);
    QCOMPARE(cpu::num_threads(), 3);
    cpu::set_num_threads(0);
    QVERIFY(cpu::num_threads() >= 1);
    cpu::set_num_threads(2);
  }
};

QTEST_APPLESS_MAIN(TestKernels)
#include "tst_kernels.moc"
