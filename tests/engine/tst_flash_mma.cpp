// The CUDA backend's flash attention program (src/runtime/flash_mma.h: scores in mma.sync
// fragments, ldmatrix from shared memory) run on the CPU under warp_emulator.h, against the tile
// program (src/runtime/flash_tiles.h, cpu::flash_attention_tiled_*) that has the same roundings
// and is itself checked against attention in double (tst_kernels). Every tile edge, head sizes
// 16 to 128 (padded to 32, 64, 128), fp32 and bf16 outputs and gradients, as the GPU runs them;
// and the single products of Hopper's Core that tst_cuda also runs on a GPU (wgmma_products.h).
#include <QtTest>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/flash_mma.h"
#include "stagecraft/runtime/kernels.h"
#include "warp_emulator.h"
#include "wgmma_products.h"

using namespace stagecraft;
using namespace stagecraft::runtime;
using stagecraft::test::WarpEmulator;

namespace {

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// ||a - b|| / ||b||; any non-finite element or a size mismatch gives infinity.
template <typename A>
double rel_err(const std::vector<A>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = double(element::load(&a[i])), y = b[i];
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Every block of a pass over (sequence, query head) x tile, one after another.
template <typename Core, typename F>
void each_block(flash::Pass pass, int D, int B, int T, int NH, int HS, int NKV, F&& f) {
  const size_t bytes = flash_mma::bytes_for_head<Core>(pass, HS);
  QVERIFY(bytes > 0 && flash_mma::padded_head(HS) == D);
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < flash_mma::tiles(T); ++t) {
      WarpEmulator::run_block(bytes, [&](const WarpEmulator::Lane& e) { f(e, flash::slice_of(T, NH, HS, NKV, bh), t); });
    }
  }
}

template <int D, typename Core, typename Out>
void emulated_forward(Out* out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV) {
  each_block<Core>(flash::Pass::kForward, D, B, T, NH, HS, NKV,
                   [&](const WarpEmulator::Lane& e, const flash::Slice& s, int t) { flash_mma::forward<D, Core>(e, out, lse, qkv, s, t); });
}

// Both gradient passes as the GPU's one launch takes them: block y of a head's 2 x tiles runs
// grads_tile's pass and tile, in the larger pass's shared memory.
template <int D, typename Core, typename Grads>
void emulated_backward(Grads* dqkv, const Grads* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH, int HS, int NKV) {
  QVERIFY(flash_mma::padded_head(HS) == D);
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int y = 0; y < 2 * flash_mma::tiles(T); ++y) {
      const flash_mma::GradsTile g = flash_mma::grads_tile(flash_mma::tiles(T), y);
      WarpEmulator::run_block(flash_mma::grads_bytes<D, Core>(), [&](const WarpEmulator::Lane& e) {
        if (g.key) {  // as the GPU's launch: blocks past B x NKV have no key/value head
          if (bh < B * NKV) flash_mma::key_grads<D, Core>(e, dqkv, qkv, dout, lse, delta, flash::key_slice_of(T, NH, HS, NKV, bh), g.tile);
        } else {
          flash_mma::query_grads<D, Core>(e, dqkv, qkv, dout, lse, delta, flash::slice_of(T, NH, HS, NKV, bh), g.tile);
        }
      });
    }
  }
}

}  // namespace

class TestFlashMma : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void headSizesPadToTheCompiledOnes() {
    QCOMPARE(flash_mma::padded_head(16), 32);
    QCOMPARE(flash_mma::padded_head(32), 32);
    QCOMPARE(flash_mma::padded_head(48), 64);
    QCOMPARE(flash_mma::padded_head(64), 64);
    QCOMPARE(flash_mma::padded_head(96), 128);
    QCOMPARE(flash_mma::padded_head(128), 128);
    QCOMPARE(flash_mma::padded_head(0), 0);
    QCOMPARE(flash_mma::padded_head(40), 0);   // not a multiple of 16
    QCOMPARE(flash_mma::padded_head(144), 0);  // above 128
    // Every sm_80-or-later GPU gives a block 99 KiB of shared memory or more: every pass fits,
    // double buffers included (forward at head size 128: Q and two buffers of K and V, 5 tiles of
    // 64 x 136 bf16, 87040 bytes).
    QCOMPARE(flash_mma::bytes<128>(flash::Pass::kForward), size_t(87040));
    for (const flash::Pass pass : {flash::Pass::kForward, flash::Pass::kKeyGrads, flash::Pass::kQueryGrads}) {
      QVERIFY(flash_mma::bytes<128>(pass) <= 99 * 1024);
      QVERIFY(flash_mma::bytes<64>(pass) < flash_mma::bytes<128>(pass));
    }
  }

  // The one-launch order of the gradient passes: every tile of both passes once, longest first
  // by the walk each makes (four products a walked tile in the key pass, three in the query
  // pass), and flash_mma.h's worked example.
  void gradientTilesStartLongestFirst() {
    const flash_mma::GradsTile example[] = {{true, 0}, {false, 1}, {true, 1}, {false, 0}};
    for (int y = 0; y < 4; ++y) {
      const flash_mma::GradsTile g = flash_mma::grads_tile(2, y);
      QVERIFY2(g.key == example[y].key && g.tile == example[y].tile, qPrintable(QString("block %1").arg(y)));
    }
    for (int n = 1; n <= 70; ++n) {
      std::vector<int> keys(size_t(n), 0), queries(size_t(n), 0);
      int last = std::numeric_limits<int>::max();
      for (int y = 0; y < 2 * n; ++y) {
        const flash_mma::GradsTile g = flash_mma::grads_tile(n, y);
        QVERIFY2(g.tile >= 0 && g.tile < n, qPrintable(QString("%1 tiles, block %2: tile %3").arg(n).arg(y).arg(g.tile)));
        ++(g.key ? keys : queries)[size_t(g.tile)];
        const int cost = g.key ? 4 * (n - g.tile) : 3 * (g.tile + 1);
        QVERIFY2(cost <= last, qPrintable(QString("%1 tiles, block %2: %3 after %4").arg(n).arg(y).arg(cost).arg(last)));
        last = cost;
      }
      for (int t = 0; t < n; ++t) QVERIFY2(keys[size_t(t)] == 1 && queries[size_t(t)] == 1, qPrintable(QString("%1 tiles: tile %2").arg(n).arg(t)));
    }
  }

  // The 128-byte swizzle of flash_wgmma.h's tiles: row r's 16-byte unit u at unit u ^ (r % 8),
  // 64-column blocks one after another; and its descriptors' fields where the PTX ISA puts them.
  void warpgroupTilesAreSwizzled() {
    bf16* tile = nullptr;
    QCOMPARE(flash_mma::Wgmma::unit<64>(tile, 32, 0, 0) - tile, 0);
    QCOMPARE(flash_mma::Wgmma::unit<64>(tile, 32, 0, 8) - tile, 8);
    QCOMPARE(flash_mma::Wgmma::unit<64>(tile, 32, 1, 0) - tile, 64 + 8);
    QCOMPARE(flash_mma::Wgmma::unit<64>(tile, 32, 3, 16) - tile, 3 * 64 + (2 ^ 3) * 8);
    QCOMPARE(flash_mma::Wgmma::unit<64>(tile, 32, 9, 56) - tile, 9 * 64 + (7 ^ 1) * 8);
    QCOMPARE(flash_mma::Wgmma::unit<128>(tile, 32, 2, 72) - tile, 32 * 64 + 2 * 64 + (1 ^ 2) * 8);
    QCOMPARE(flash_mma::descriptor(0x1230, 16, 1024), uint64_t(0x123) | uint64_t(1) << 16 | uint64_t(64) << 32 | uint64_t(1) << 62);
    // Every pass fits a block on Hopper (227 KiB) with its 1 KiB of slack, and each tile starts
    // on a 1024-byte swizzle pattern.
    for (const flash::Pass pass : {flash::Pass::kForward, flash::Pass::kKeyGrads, flash::Pass::kQueryGrads}) {
      QVERIFY((flash_mma::bytes<128, flash_mma::Wgmma>(pass) <= 227 * 1024));
      QCOMPARE((flash_mma::walked_bytes<64, flash_mma::Wgmma>(pass) % 1024), size_t(0));
    }
    QCOMPARE((flash_mma::bytes<64, flash_mma::Wgmma>(flash::Pass::kForward)), size_t(5 * 64 * 128 + 1024));
  }

  // wgmma_products.h's single products of the Wgmma Core under the emulator against the plain
  // products, at every shape the probe takes: the programs that tst_cuda runs on a GPU
  // (warpgroupProductsMatchPlainProducts), checked here, so that a failure there is the GPU's
  // reading of the descriptors, swizzle or fragments, not the probe's.
  void warpgroupProductsMatchPlainProducts() {
    namespace wp = test::wgmma_products;
    unsigned seed = 60;
    for (wp::Case& c : wp::cases([&](size_t n) { return randn(n, ++seed); })) {
      QVERIFY(wp::with_shape(c.D, c.N, [&]<int kD, int kN>() {
        WarpEmulator::run_block(wp::kTimesTransposedBytes<kD, kN>, [&](const WarpEmulator::Lane& e) {
          wp::times_transposed_block<kD, kN>(e, c.s.data(), c.q.data(), c.k.data());
        });
        WarpEmulator::run_block(wp::kTimesBytes<kD, kN>, [&](const WarpEmulator::Lane& e) { wp::times_block<kD, kN>(e, c.o.data(), c.p.data(), c.v.data()); });
      }));
      const std::string off = wp::check(c, 1e-5);
      QVERIFY2(off.empty(), off.c_str());
    }
    QVERIFY(!wp::with_shape(32, 32, []<int, int>() {}));
  }

  void programMatchesTheTileProgram_data() {
    QTest::addColumn<bool>("warpgroup");
    QTest::addColumn<int>("B");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("NH");
    QTest::addColumn<int>("HS");
    QTest::addColumn<int>("NKV");
    QTest::newRow("T1 HS16: a single position, padded head") << false << 1 << 1 << 2 << 16 << 2;
    QTest::newRow("T17 HS32: one partial tile") << false << 2 << 17 << 1 << 32 << 1;
    QTest::newRow("T64 HS64: one whole tile") << false << 1 << 64 << 2 << 64 << 2;
    QTest::newRow("T65 HS64: a second tile of one row") << false << 1 << 65 << 1 << 64 << 1;
    QTest::newRow("T200 HS48: four tiles, padded head") << false << 1 << 200 << 2 << 48 << 2;
    QTest::newRow("T130 HS128: walked tiles of 32") << false << 1 << 130 << 1 << 128 << 1;
    QTest::newRow("T100 HS96") << false << 1 << 100 << 1 << 96 << 1;
    // flash_wgmma.h's warpgroup products, the same program.
    QTest::newRow("wgmma T1 HS64: a single position") << true << 1 << 1 << 2 << 64 << 2;
    QTest::newRow("wgmma T64 HS64: one whole tile") << true << 1 << 64 << 2 << 64 << 2;
    QTest::newRow("wgmma T200 HS48: four tiles, padded head") << true << 2 << 200 << 1 << 48 << 1;
    QTest::newRow("wgmma T130 HS128: two column blocks") << true << 1 << 130 << 1 << 128 << 1;
    QTest::newRow("wgmma T100 HS96") << true << 1 << 100 << 1 << 96 << 1;
      // Grouped-query attention: a key-gradient block walks each query head of its K/V head's group.
    QTest::newRow("T1 HS16: 2 query heads over 1 K/V head") << false << 1 << 1 << 2 << 16 << 1;
    QTest::newRow("T70 HS32: 4 query heads over 2") << false << 2 << 70 << 4 << 32 << 2;
    QTest::newRow("T130 HS64: 4 query heads over 1") << false << 1 << 130 << 4 << 64 << 1;
    QTest::newRow("T100 HS128: 6 query heads over 2") << false << 1 << 100 << 6 << 128 << 2;
    QTest::newRow("wgmma T130 HS64: 4 query heads over 2") << true << 1 << 130 << 4 << 64 << 2;
    QTest::newRow("wgmma T100 HS128: 4 query heads over 1") << true << 1 << 100 << 4 << 128 << 1;
  }

  void programMatchesTheTileProgram() {
    QFETCH(bool, warpgroup);
    QFETCH(int, B);
    QFETCH(int, T);
    QFETCH(int, NH);
    QFETCH(int, HS);
    QFETCH(int, NKV);
    const size_t C = size_t(NH) * HS, n = size_t(B) * T * C, rows = size_t(B) * NH * T, n3 = size_t(B) * T * (NH + 2 * NKV) * HS;
    std::vector<bf16> qkv(n3);
    const std::vector<float> x = randn(qkv.size(), 31, 1.5f);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = to_bf16(x[i]);
    const std::vector<float> dout = randn(n, 32);
    const float nan = std::numeric_limits<float>::quiet_NaN();

    // The reference: the tile program, forward, then backward from its own out.
    std::vector<float> tout(n, nan), tlse(rows, nan), tdqkv(n3, nan), delta(rows);
    cpu::flash_attention_tiled_forward(tout.data(), tlse.data(), qkv.data(), B, T, NH, HS, NKV);
    cpu::flash_attention_tiled_backward(tdqkv.data(), delta.data(), dout.data(), qkv.data(), tout.data(), tlse.data(), B, T, NH, HS, NKV);

    // The GPU's program, fp32 out and gradients; the backward from the same out, lse and delta.
    std::vector<float> mout(n, nan), mlse(rows, nan), mdqkv(n3, nan);
    // bf16 out, dout and dqkv, as GptStage passes them with bf16 activations.
    std::vector<bf16> mout16(n, to_bf16(nan)), dout16(n), mdqkv16(n3, to_bf16(nan));
    std::vector<float> mlse16(rows, nan), tdqkv16(n3, nan), delta16(rows);
    for (size_t i = 0; i < n; ++i) dout16[i] = to_bf16(dout[i]);
    std::vector<float> dout16_wide(n);
    for (size_t i = 0; i < n; ++i) dout16_wide[i] = to_float(dout16[i]);
    cpu::flash_attention_tiled_backward(tdqkv16.data(), delta16.data(), dout16_wide.data(), qkv.data(), tout.data(), tlse.data(), B, T, NH, HS, NKV);
    for (float& v : tdqkv16) v = to_float(to_bf16(v));
    auto emulate = [&]<typename Core>() {
      return flash_mma::with_padded_head(HS, [&]<int D>() {
        if constexpr (Core::template kTakes<D>) {
          emulated_forward<D, Core>(mout.data(), mlse.data(), qkv.data(), B, T, NH, HS, NKV);
          emulated_backward<D, Core>(mdqkv.data(), dout.data(), qkv.data(), tlse.data(), delta.data(), B, T, NH, HS, NKV);
          emulated_forward<D, Core>(mout16.data(), mlse16.data(), qkv.data(), B, T, NH, HS, NKV);
          emulated_backward<D, Core>(mdqkv16.data(), dout16.data(), qkv.data(), tlse.data(), delta16.data(), B, T, NH, HS, NKV);
        } else {
          QFAIL("a head size the core does not take");
        }
      });
    };
    const bool taken = warpgroup ? emulate.template operator()<flash_mma::Wgmma>() : emulate.template operator()<flash_mma::MmaSync>();
    QVERIFY(taken);
    std::vector<float> tout16(n);
    for (size_t i = 0; i < n; ++i) tout16[i] = to_float(to_bf16(tout[i]));
    double lse_err = 0;
    for (size_t r = 0; r < rows; ++r) {
      lse_err = std::max({lse_err, double(std::abs(mlse[r] - tlse[r])), double(std::abs(mlse16[r] - tlse[r]))});
      if (!std::isfinite(mlse[r]) || !std::isfinite(mlse16[r])) lse_err = INFINITY;
    }
    // The gradients of q, k and v apart: each has its own scale. (With one position, q and k get
    // no gradient: softmax over one key is 1 whatever they are; both programs give zeros.)
    auto part = [&](const auto& v, int which) {
      std::vector<std::decay_t<decltype(v[0])>> p;
      for (size_t bt = 0; bt < size_t(B) * T; ++bt)
        for (size_t c = 0; c < size_t(which == 0 ? NH : NKV) * HS; ++c)  // q: NH heads, k and v: NKV
          p.push_back(v[bt * (NH + 2 * NKV) * HS + (which == 0 ? 0 : size_t(NH + (which - 1) * NKV) * HS) + c]);
      return p;
    };
    const double eo = rel_err(mout, tout), eo16 = rel_err(mout16, tout16);
    double eg = 0, eg16 = 0;
    for (int which = T > 1 ? 0 : 2; which < 3; ++which) {
      eg = std::max(eg, rel_err(part(mdqkv, which), part(tdqkv, which)));
      eg16 = std::max(eg16, rel_err(part(mdqkv16, which), part(tdqkv16, which)));
    }
    if (T == 1) {  // q's and k's gradients: exactly zero, and written
      for (int which = 0; which < 2; ++which) {
        for (float v : part(mdqkv, which)) QCOMPARE(v, 0.0f);
      }
    }
    qInfo("against the tile program: out %.2e (bf16 %.2e), lse %.2e (absolute), dqkv %.2e (bf16 %.2e)", eo, eo16, lse_err, eg, eg16);
    // Only the order of accumulation inside a product differs, and with it the occasional bf16
    // rounding of P or dS.
    QVERIFY2(eo < 2e-3 && eo16 < 5e-3 && lse_err < 1e-5 && eg < 5e-3 && eg16 < 1e-2,
             qPrintable(QString("out %1 (bf16 %2), lse %3, dqkv %4 (bf16 %5)").arg(eo).arg(eo16).arg(lse_err).arg(eg).arg(eg16)));
  }
};

QTEST_APPLESS_MAIN(TestFlashMma)
#include "tst_flash_mma.moc"
