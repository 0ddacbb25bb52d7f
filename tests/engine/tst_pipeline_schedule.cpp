// Pipeline schedules: each rank's order, completeness, freedom from deadlock (simulated with
// buffered sends), and the activations each rank holds, which the cost model also predicts.
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/estimate.h"
#include "stagecraft/runtime/pipeline_schedule.h"

#include <QtTest>

#include <map>
#include <set>

using namespace stagecraft;
using runtime::PipeOp;

namespace {

struct SimResult {
  bool completed = false;
  std::vector<int> max_inflight;  // per rank: forwards done minus backwards done, at its peak
};

// Runs every rank's ops: a forward of chunk c waits for chunk c-1's forward of the same
// micro-batch; a backward of chunk c for its own forward and chunk c+1's backward. Sends never
// block. Returns whether all ranks finished.
SimResult simulate(config::Schedule s, int p, int v, int m) {
  std::vector<std::vector<PipeOp>> ops(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) ops[static_cast<size_t>(r)] = runtime::pipeline_schedule(s, p, r, v, m);
  const int chunks = p * v;
  std::set<std::tuple<int, int, int>> done;  // (kind, mb, chunk)
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  SimResult res;
  res.max_inflight.assign(static_cast<size_t>(p), 0);
  std::vector<int> inflight(static_cast<size_t>(p), 0);
  while (true) {
    bool progress = false, all = true;
    for (int r = 0; r < p; ++r) {
      auto& i = next[static_cast<size_t>(r)];
      if (i == ops[static_cast<size_t>(r)].size()) continue;
      all = false;
      const PipeOp& op = ops[static_cast<size_t>(r)][i];
      bool ready;
      if (op.kind == PipeOp::Kind::kForward) {
        ready = op.chunk == 0 || done.count({0, op.micro_batch, op.chunk - 1});
      } else {
        ready = done.count({0, op.micro_batch, op.chunk}) && (op.chunk == chunks - 1 || done.count({1, op.micro_batch, op.chunk + 1}));
      }
      if (!ready) continue;
      done.insert({op.kind == PipeOp::Kind::kForward ? 0 : 1, op.micro_batch, op.chunk});
      inflight[static_cast<size_t>(r)] += op.kind == PipeOp::Kind::kForward ? 1 : -1;
      res.max_inflight[static_cast<size_t>(r)] = std::max(res.max_inflight[static_cast<size_t>(r)], inflight[static_cast<size_t>(r)]);
      ++i;
      progress = true;
    }
    if (all) {
      res.completed = true;
      return res;
    }
    if (!progress) return res;
  }
}

}  // namespace

class TestPipelineSchedule : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void everyScheduleCompletes_data() {
    QTest::addColumn<int>("schedule");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("m");
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 7, 8, 16}) {
        QTest::addRow("gpipe p=%d m=%d", p, m) << int(config::Schedule::kGpipe) << p << 1 << m;
        QTest::addRow("1f1b p=%d m=%d", p, m) << int(config::Schedule::k1f1b) << p << 1 << m;
        if (p > 1 && m % p == 0) {
          for (int v : {2, 3, 4}) QTest::addRow("interleaved p=%d v=%d m=%d", p, v, m) << int(config::Schedule::kInterleaved) << p << v << m;
        }
      }
    }
  }
  void everyScheduleCompletes() {
    QFETCH(int, schedule);
    QFETCH(int, p);
    QFETCH(int, v);
    QFETCH(int, m);
    const auto s = static_cast<config::Schedule>(schedule);
    // Each rank runs exactly the forward and backward of each micro-batch of each of its chunks.
    for (int r = 0; r < p; ++r) {
      const auto ops = runtime::pipeline_schedule(s, p, r, v, m);
      QCOMPARE(static_cast<int>(ops.size()), 2 * m * v);
      std::set<std::tuple<int, int, int>> seen;
      for (const auto& op : ops) {
        QCOMPARE(op.chunk % p, r);
        QVERIFY(op.micro_batch >= 0 && op.micro_batch < m);
        QVERIFY(seen.insert({int(op.kind), op.micro_batch, op.chunk}).second);
      }
    }
    const SimResult sim = simulate(s, p, v, m);
    QVERIFY(sim.completed);
    // The activations each rank holds at its peak are what the cost model charges for.
    auto c = config::parse_config("model: {layers: 48, hidden: 64, heads: 4}\n", "t.yaml", {});
    QVERIFY(c.ok());
    c.value().pipeline.schedule = s;
    for (int r = 0; r < p; ++r) {
      const int predicted = plan::inflight_micro_batches(c.value(), r, p, v, m);
      const int expected = s == config::Schedule::kGpipe ? m : predicted;
      QCOMPARE(sim.max_inflight[static_cast<size_t>(r)], expected);
    }
  }

  // Megatron's worked example: p=4, v=2, m=8; rank 0 warms up with (4-0-1)*2 + (2-1)*4 = 10
  // forwards, alternating chunks every p micro-batches.
  void interleavedOrderOfRankZero() {
    const auto ops = runtime::pipeline_schedule(config::Schedule::kInterleaved, 4, 0, 2, 8);
    const std::vector<std::pair<int, int>> first_forwards = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {0, 4}, {1, 4}, {2, 4}, {3, 4}, {4, 0}, {5, 0}};
    for (size_t i = 0; i < first_forwards.size(); ++i) {
      QCOMPARE(ops[i].kind, PipeOp::Kind::kForward);
      QCOMPARE(ops[i].micro_batch, first_forwards[i].first);
      QCOMPARE(ops[i].chunk, first_forwards[i].second);
    }
    QCOMPARE(ops[10].kind, PipeOp::Kind::kForward);
    QCOMPARE(ops[11].kind, PipeOp::Kind::kBackward);
    QCOMPARE(ops[11].chunk, 4);  // the first backward is of the rank's last chunk
    QCOMPARE(ops[11].micro_batch, 0);
  }

  void oneFOneBOrderOfTheFirstStage() {
    // p=4, m=6, rank 0: 3 warm-up forwards, then F B pairs, then 3 backwards.
    const auto ops = runtime::pipeline_schedule(config::Schedule::k1f1b, 4, 0, 1, 6);
    QString order;
    for (const auto& op : ops) order += QString(op.kind == PipeOp::Kind::kForward ? "F" : "B") + QString::number(op.micro_batch);
    QCOMPARE(order, QString("F0F1F2F3B0F4B1F5B2B3B4B5"));
  }
};

QTEST_APPLESS_MAIN(TestPipelineSchedule)
#include "tst_pipeline_schedule.moc"
