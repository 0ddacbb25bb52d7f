// bench_kernels: throughput of the CPU kernels (runtime/kernels.h), as tables.
//
// 1. GFLOP/s of matmul forward and backward at the GEMM shapes of a GPT-2 block with C = 256,
//    B*T = 2048 (c_attn, attn.c_proj, c_fc, mlp.c_proj, the tied LM head with V = 256).
// 2. ms per forward + backward of one GPT-2 block (C 256, NH 4, T 256, B 8), per kernel.
// 3. A whole training step of the 4-layer model (V 256): embeddings, blocks, ln_f, tied head,
//    cross-entropy, backward, AdamW; tokens/s. tests/bench/bench_kernels_torch.py measures the same
//    step in PyTorch for comparison.
// 4. The optimizer of GPT-2 124M (one stage, its 148 tensors in one flat buffer): the gradient's
//    sum of squares and AdamW, one call per tensor against one call over the segment list.
// Each at 1 and 2 threads (or those given: bench_kernels 1 2 4). Times are the best of several
// repeats after a warm-up: on a shared machine the best run is the one that other processes
// disturbed least, and it is the most repeatable figure. Asserts nothing.
#include "stagecraft/model/gpt_layout.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/rng.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

using namespace stagecraft::runtime;
using cpu::Layout;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of this process, all threads: on a busy machine wall time also counts the time other
// processes held our cores; with 1 thread, CPU time is what the step would take on an idle one.
double cpu_s() { return double(std::clock()) / CLOCKS_PER_SEC; }

// Best seconds of `reps` runs after `warm` unmeasured ones.
double best_time(const std::function<void()>& f, int reps, int warm = 2) {
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    f();
    t.push_back(now_s() - t0);
  }
  return *std::min_element(t.begin(), t.end());
}

std::vector<float> randn(size_t n, uint64_t stream, double std = 0.02) {
  std::vector<float> v(n);
  fill_normal(v.data(), 0, TensorBlock::range(0, int64_t(n), int64_t(n)), 0.0, std, 1, stream);
  return v;
}

// One GPT-2 block: parameters, their gradients, saved activations, reused gradient buffers.
struct Block {
  int B, T, C, NH;
  std::vector<float> ln1w, ln1b, attnw, attnb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  std::vector<float> g_ln1w, g_ln1b, g_attnw, g_attnb, g_projw, g_projb, g_ln2w, g_ln2b, g_fcw, g_fcb,
      g_fcprojw, g_fcprojb;
  // activations: (B, T, C) unless noted
  std::vector<float> ln1, mean1, rstd1, qkv /* (B, T, 3C) */, atty, att /* (B, NH, T, T) */, xmid, ln2,
      mean2, rstd2, fch /* (B, T, 4C) */, fcg /* (B, T, 4C) */;

  Block(int B_, int T_, int C_, int NH_, int L, uint64_t id) : B(B_), T(T_), C(C_), NH(NH_) {
    const size_t c = C, BT = size_t(B) * T;
    ln1w.assign(c, 1.0f), ln1b.assign(c, 0.0f), ln2w.assign(c, 1.0f), ln2b.assign(c, 0.0f);
    attnw = randn(c * 3 * c, id * 10 + 1), attnb.assign(3 * c, 0.0f);
    projw = randn(c * c, id * 10 + 2, 0.02 / std::sqrt(2.0 * L)), projb.assign(c, 0.0f);
    fcw = randn(c * 4 * c, id * 10 + 3), fcb.assign(4 * c, 0.0f);
    fcprojw = randn(4 * c * c, id * 10 + 4, 0.02 / std::sqrt(2.0 * L)), fcprojb.assign(c, 0.0f);
    for (auto [g, p] : params()) g->assign(p->size(), 0.0f);
    ln1.resize(BT * c), mean1.resize(BT), rstd1.resize(BT), qkv.resize(BT * 3 * c), atty.resize(BT * c);
    att.resize(size_t(B) * NH * T * T), xmid.resize(BT * c), ln2.resize(BT * c), mean2.resize(BT);
    rstd2.resize(BT), fch.resize(BT * 4 * c), fcg.resize(BT * 4 * c);
  }

  std::vector<std::pair<std::vector<float>*, std::vector<float>*>> params() {
    return {{&g_ln1w, &ln1w}, {&g_ln1b, &ln1b}, {&g_attnw, &attnw}, {&g_attnb, &attnb},
            {&g_projw, &projw}, {&g_projb, &projb}, {&g_ln2w, &ln2w}, {&g_ln2b, &ln2b},
            {&g_fcw, &fcw}, {&g_fcb, &fcb}, {&g_fcprojw, &fcprojw}, {&g_fcprojb, &fcprojb}};
  }

  // out (B, T, C) = block(x (B, T, C)); `time` collects seconds per kernel when given.
  void forward(float* out, const float* x, std::map<std::string, double>* time = nullptr) {
    const int BT = B * T;
    const size_t n = size_t(BT) * C;
    Timer t{time};
    t("layernorm", [&] { cpu::layernorm_forward(ln1.data(), mean1.data(), rstd1.data(), x, ln1w.data(), ln1b.data(), BT, C); });
    t("matmul", [&] { cpu::matmul_forward(qkv.data(), ln1.data(), attnw.data(), attnb.data(), BT, C, 3 * C); });
    t("attention", [&] { cpu::attention_forward(atty.data(), att.data(), qkv.data(), B, T, NH, C / NH, NH); });
    t("matmul", [&] { cpu::matmul_forward(xmid.data(), atty.data(), projw.data(), projb.data(), BT, C, C); });
    t("residual", [&] { cpu::residual_forward(xmid.data(), xmid.data(), x, n); });
    t("layernorm", [&] { cpu::layernorm_forward(ln2.data(), mean2.data(), rstd2.data(), xmid.data(), ln2w.data(), ln2b.data(), BT, C); });
    t("matmul", [&] { cpu::matmul_forward(fch.data(), ln2.data(), fcw.data(), fcb.data(), BT, C, 4 * C); });
    t("gelu", [&] { cpu::gelu_forward(fcg.data(), fch.data(), 4 * n); });
    t("matmul", [&] { cpu::matmul_forward(out, fcg.data(), fcprojw.data(), fcprojb.data(), BT, 4 * C, C); });
    t("residual", [&] { cpu::residual_forward(out, out, xmid.data(), n); });
  }

  // dres (B, T, C): in, dL/d(out); out, dL/dx. x: the block's input. ws: the shared gradient
  // buffers dln (B, T, C), dqkv (B, T, 3C), datty (B, T, C), dfch and dfcg (B, T, 4C), scratch
  // (B, NH, T, T).
  struct Workspace {
    std::vector<float> dln, dqkv, datty, dfch, dfcg, scratch;
    Workspace(int B, int T, int C, int NH) {
      const size_t n = size_t(B) * T * C;
      dln.resize(n), dqkv.resize(3 * n), datty.resize(n), dfch.resize(4 * n), dfcg.resize(4 * n);
      scratch.resize(size_t(B) * NH * T * T);
    }
  };
  void backward(float* dres, const float* x, Workspace& ws, std::map<std::string, double>* time = nullptr) {
    const int BT = B * T;
    Timer t{time};
    t("matmul", [&] { cpu::matmul_backward(ws.dfcg.data(), g_fcprojw.data(), g_fcprojb.data(), dres, fcg.data(), fcprojw.data(), BT, 4 * C, C); });
    t("gelu", [&] { cpu::gelu_backward(ws.dfch.data(), fch.data(), ws.dfcg.data(), size_t(4) * BT * C); });
    t("matmul", [&] { cpu::matmul_backward(ws.dln.data(), g_fcw.data(), g_fcb.data(), ws.dfch.data(), ln2.data(), fcw.data(), BT, C, 4 * C); });
    t("layernorm", [&] { cpu::layernorm_backward(dres, g_ln2w.data(), g_ln2b.data(), ws.dln.data(), xmid.data(), ln2w.data(), mean2.data(), rstd2.data(), BT, C); });
    t("matmul", [&] { cpu::matmul_backward(ws.datty.data(), g_projw.data(), g_projb.data(), dres, atty.data(), projw.data(), BT, C, C); });
    t("attention", [&] { cpu::attention_backward(ws.dqkv.data(), ws.scratch.data(), ws.datty.data(), qkv.data(), att.data(), B, T, NH, C / NH, NH); });
    t("matmul", [&] { cpu::matmul_backward(ws.dln.data(), g_attnw.data(), g_attnb.data(), ws.dqkv.data(), ln1.data(), attnw.data(), BT, C, 3 * C); });
    t("layernorm", [&] { cpu::layernorm_backward(dres, g_ln1w.data(), g_ln1b.data(), ws.dln.data(), x, ln1w.data(), mean1.data(), rstd1.data(), BT, C); });
  }

  struct Timer {
    std::map<std::string, double>* time;
    void operator()(const char* name, const std::function<void()>& f) {
      if (time == nullptr) return f();
      const double t0 = now_s();
      f();
      (*time)[name] += now_s() - t0;
    }
  };
};

void bench_matmul(int threads) {
  const int BT = 2048, C = 256;
  struct Shape {
    const char* name;
    int C, OC;
    Layout layout;
  };
  const Shape shapes[] = {{"attn.c_attn 256->768", C, 3 * C, Layout::kInOut},
                          {"attn.c_proj 256->256", C, C, Layout::kInOut},
                          {"mlp.c_fc 256->1024", C, 4 * C, Layout::kInOut},
                          {"mlp.c_proj 1024->256", 4 * C, C, Layout::kInOut},
                          {"lm head 256->V 256 (wte)", C, 256, Layout::kOutIn}};
  for (const Shape& s : shapes) {
    auto inp = randn(size_t(BT) * s.C, 1, 1.0), w = randn(size_t(s.C) * s.OC, 2), b = randn(s.OC, 3);
    std::vector<float> out(size_t(BT) * s.OC), dinp(inp.size()), dw(w.size()), db(s.OC);
    const double flops = 2.0 * BT * s.C * s.OC;
    const double tf = best_time([&] { cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), BT, s.C, s.OC, s.layout); }, 20);
    const double tb = best_time([&] { cpu::matmul_backward(dinp.data(), dw.data(), db.data(), out.data(), inp.data(), w.data(), BT, s.C, s.OC, s.layout); }, 20);
    std::printf("%7d  %-26s %9.2f %9.1f %9.2f %9.1f\n", threads, s.name, tf * 1e3, flops / tf * 1e-9, tb * 1e3,
                2 * flops / tb * 1e-9);
  }
}

void bench_block(int threads) {
  const int B = 8, T = 256, C = 256, NH = 4;
  const size_t n = size_t(B) * T * C;
  Block blk(B, T, C, NH, 4, 0);
  Block::Workspace ws(B, T, C, NH);
  auto x = randn(n, 9, 1.0);
  std::vector<float> y(n), dres(n);
  auto dy = randn(n, 10, 1e-3);
  auto step = [&] {
    blk.forward(y.data(), x.data());
    std::copy(dy.begin(), dy.end(), dres.begin());
    blk.backward(dres.data(), x.data(), ws);
  };
  const double t = best_time(step, 15);
  // per kernel, over 5 more steps
  std::map<std::string, double> fwd, bwd;
  for (int i = 0; i < 5; ++i) {
    blk.forward(y.data(), x.data(), &fwd);
    std::copy(dy.begin(), dy.end(), dres.begin());
    blk.backward(dres.data(), x.data(), ws, &bwd);
  }
  std::printf("%7d  %9.2f", threads, t * 1e3);
  for (const char* k : {"matmul", "attention", "layernorm", "gelu", "residual"})
    std::printf("  %5.2f/%5.2f", fwd[k] / 5 * 1e3, bwd[k] / 5 * 1e3);
  std::printf("\n");
}

void bench_model(int threads) {
  const int L = 4, B = 8, T = 256, C = 256, NH = 4, V = 256, BT = B * T;
  const size_t n = size_t(BT) * C;
  std::vector<Block> blocks;
  for (int l = 0; l < L; ++l) blocks.emplace_back(B, T, C, NH, L, uint64_t(l + 1));
  Block::Workspace ws(B, T, C, NH);
  auto wte = randn(size_t(V) * C, 100), wpe = randn(size_t(T) * C, 101, 0.01);
  auto lnfw = std::vector<float>(C, 1.0f), lnfb = std::vector<float>(C, 0.0f);
  std::vector<float> g_wte(wte.size()), g_wpe(wpe.size()), g_lnfw(C), g_lnfb(C);
  std::vector<float> res((L + 1) * n), lnf(n), meanf(BT), rstdf(BT), logits(size_t(BT) * V), losses(BT), dres(n), dlnf(n);
  std::vector<int32_t> tokens(BT), targets(BT);
  for (int i = 0; i < BT; ++i) tokens[i] = (i * 7 + 3) % V, targets[i] = (i * 13 + 5) % V;
  // every parameter tensor with its gradient and Adam moments, and whether it decays
  struct P {
    std::vector<float>*p, *g;
    std::vector<float> m, v;
    bool decay;
  };
  std::vector<P> ps = {{&wte, &g_wte, {}, {}, true}, {&wpe, &g_wpe, {}, {}, true}, {&lnfw, &g_lnfw, {}, {}, false},
                       {&lnfb, &g_lnfb, {}, {}, false}};
  for (auto& b : blocks)
    for (auto [g, p] : b.params()) ps.push_back({p, g, {}, {}, p->size() > size_t(4 * C)});
  for (auto& p : ps) p.m.assign(p.p->size(), 0.0f), p.v.assign(p.p->size(), 0.0f);
  cpu::AdamWOptions opt;
  opt.lr = 1e-4f;
  int64_t step_no = 0;
  double loss = 0;
  auto step = [&] {
    for (auto& p : ps) std::fill(p.g->begin(), p.g->end(), 0.0f);
    cpu::encoder_forward(res.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    for (int l = 0; l < L; ++l) blocks[l].forward(&res[(l + 1) * n], &res[l * n]);
    cpu::layernorm_forward(lnf.data(), meanf.data(), rstdf.data(), &res[L * n], lnfw.data(), lnfb.data(), BT, C);
    cpu::matmul_forward(logits.data(), lnf.data(), wte.data(), static_cast<const float*>(nullptr), BT, C, V, Layout::kOutIn);
    loss = cpu::crossentropy_forward(losses.data(), logits.data(), logits.data(), targets.data(), BT, V);
    cpu::crossentropy_backward(logits.data(), logits.data(), targets.data(), 1.0f / BT, BT, V);
    cpu::matmul_backward(dlnf.data(), g_wte.data(), static_cast<float*>(nullptr), logits.data(), lnf.data(), wte.data(), BT, C, V, Layout::kOutIn);
    std::fill(dres.begin(), dres.end(), 0.0f);
    cpu::layernorm_backward(dres.data(), g_lnfw.data(), g_lnfb.data(), dlnf.data(), &res[L * n], lnfw.data(), meanf.data(), rstdf.data(), BT, C);
    for (int l = L - 1; l >= 0; --l) blocks[l].backward(dres.data(), &res[l * n], ws);
    cpu::encoder_backward(g_wte.data(), g_wpe.data(), dres.data(), tokens.data(), B, T, C);
    double ss = 0;
    for (auto& p : ps) ss += cpu::sum_of_squares(p.g->data(), p.g->size());
    const float clip = float(std::min(1.0, 1.0 / (std::sqrt(ss) + 1e-6)));
    ++step_no;
    for (auto& p : ps) cpu::adamw_update(p.p->data(), p.m.data(), p.v.data(), p.g->data(), p.p->size(), opt, step_no, p.decay, clip);
  };
  const double c0 = cpu_s();
  const double t = best_time(step, 10, 3);
  const double cpu = (cpu_s() - c0) / 13;  // mean over warm-up and timed steps
  std::printf("%7d  %9.1f %10.0f %12.1f   %.4f\n", threads, t * 1e3, BT / t, cpu * 1e3, loss);
}

// GPT-2 124M's parameter tensors as one stage lays them out, with weight decay on the matrices.
std::vector<cpu::Segment> gpt2_124m_segments() {
  stagecraft::config::ModelConfig m;
  m.layers = 12;
  m.hidden = 768;
  m.heads = 12;
  m.seq_len = 1024;
  m.vocab = 50257;
  std::vector<cpu::Segment> segs;
  size_t at = 0;
  for (const auto& p : stagecraft::model::gpt_params(m)) {
    cpu::Segment s;
    s.begin = s.moment = at;
    s.count = size_t(p.numel());
    s.decay = p.weight_decay;
    segs.push_back(s);
    at += s.count;
  }
  cpu::layout_segments(segs.data(), segs.size());
  return segs;
}

// Best of 5 for each: the per-tensor loops the trainer ran before, then the segment calls.
void bench_optimizer(int threads, const std::vector<cpu::Segment>& segs, std::vector<float>& p, std::vector<float>& g,
                     std::vector<float>& m, std::vector<float>& v) {
  cpu::AdamWOptions opt;
  opt.lr = 1e-4f;
  volatile double sink = 0;  // the sums go somewhere
  const double norm_each = best_time([&] {
    double ss = 0;
    for (const auto& s : segs) ss += cpu::sum_of_squares(g.data() + s.begin, s.count);
    sink = sink + ss;
  }, 5, 1);
  const double norm_one = best_time([&] { sink = sink + cpu::sum_of_squares_segments(g.data(), segs.data(), segs.size()); }, 5, 1);
  const double adamw_each = best_time([&] {
    for (const auto& s : segs) {
      cpu::adamw_update(p.data() + s.begin, m.data() + s.moment, v.data() + s.moment, g.data() + s.begin, s.count, opt, 1, s.decay, 0.5f);
    }
  }, 5, 1);
  const double adamw_one = best_time([&] {
    cpu::adamw_update_segments(p.data(), m.data(), v.data(), g.data(), segs.data(), segs.size(), opt, 1, 0.5f);
  }, 5, 1);
  std::printf("%7d  %12.1f %12.1f %12.1f %12.1f\n", threads, norm_each * 1e3, norm_one * 1e3, adamw_each * 1e3, adamw_one * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2};

  std::printf("matmul, B*T = 2048 (float)\n");
  std::printf("%7s  %-26s %9s %9s %9s %9s\n", "threads", "shape", "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s");
  for (int t : threads) {
    cpu::set_num_threads(t);
    bench_matmul(t);
  }
  std::printf("\nGPT-2 block C 256, NH 4, T 256, B 8: forward + backward (ms; per kernel fwd/bwd)\n");
  std::printf("%7s  %9s  %11s  %11s  %11s  %11s  %11s\n", "threads", "fwd+bwd", "matmul", "attention", "layernorm",
              "gelu", "residual");
  for (int t : threads) {
    cpu::set_num_threads(t);
    bench_block(t);
  }
  std::printf("\nTraining step, 4 layers, C 256, NH 4, T 256, B 8, V 256 (fwd + bwd + clip + AdamW)\n");
  std::printf("%7s  %9s %10s %12s   %s\n", "threads", "ms/step", "tokens/s", "cpu ms/step", "loss");
  for (int t : threads) {
    cpu::set_num_threads(t);
    bench_model(t);
  }
  const auto segs = gpt2_124m_segments();
  const size_t n = segs.back().first + segs.back().count;
  std::printf("\nOptimizer of GPT-2 124M, %zu tensors, %.1fM parameters (ms): per tensor vs one segment call\n", segs.size(), n * 1e-6);
  std::printf("%7s  %12s %12s %12s %12s\n", "threads", "norm each", "norm one", "adamw each", "adamw one");
  auto p = randn(n, 200), g = randn(n, 201);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  for (int t : threads) {
    cpu::set_num_threads(t);
    bench_optimizer(t, segs, p, g, m, v);
  }
  return 0;
}
