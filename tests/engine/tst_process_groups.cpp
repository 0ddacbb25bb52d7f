// Process groups (comm/process_groups.h): a golden table of configurations — sizes, axis order,
// tied embeddings, a rank — against the rank lists of its world, TP, DP, PP and embedding groups,
// written out by hand; the order in which build_process_groups calls the factory (the same on
// every rank, as Gloo's collective creation needs); errors that name the group; and the trainer's
// RankLayout derived from a plan. Communicators are in-process (thread_comm.h): no sockets here,
// tst_comm runs the same construction over Gloo.
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"
#include "thread_comm.h"

#include <QtTest>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

using namespace stagecraft;

namespace {

std::vector<int> to_vector(const QList<int>& l) { return std::vector<int>(l.begin(), l.end()); }

// "tp-dp-pp" -> the axes, innermost first.
std::vector<config::Axis> parse_order(const QString& order) {
  std::vector<config::Axis> axes;
  for (const QString& a : order.split('-')) {
    axes.push_back(a == "tp" ? config::Axis::kTp : a == "dp" ? config::Axis::kDp : config::Axis::kPp);
  }
  return axes;
}

plan::Topology make_topology(int dp, int tp, int pp, const QString& order) {
  plan::TopologySpec spec;
  spec.nodes = 1;
  spec.gpus_per_node = dp * tp * pp;
  spec.dp = dp;
  spec.tp = tp;
  spec.pp = pp;
  spec.order = parse_order(order);
  auto t = plan::Topology::create(spec);
  if (!t.ok()) qFatal("%s", t.status().message().c_str());
  return t.value();
}

QString text(const std::vector<int>& v) {
  QStringList parts;
  for (int x : v) parts << QString::number(x);
  return "[" + parts.join(',') + "]";
}

// One factory call: the label and the ranks.
using Call = std::pair<std::string, std::vector<int>>;

}  // namespace

class TestProcessGroups : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Each row: sizes, order, whether embeddings are tied, a rank, and its groups written out.
  void groupsOfARank_data() {
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QString>("order");
    QTest::addColumn<bool>("tied");
    QTest::addColumn<int>("rank");
    QTest::addColumn<QList<int>>("tp_group");
    QTest::addColumn<QList<int>>("dp_group");
    QTest::addColumn<QList<int>>("pp_group");
    QTest::addColumn<QList<int>>("embedding");
    using L = QList<int>;
    // rank = tp_rank + 2 dp_rank + 4 pp_rank
    QTest::newRow("8 ranks dp2 tp2 pp2 tp-dp-pp, rank 5 (last stage)")
        << 2 << 2 << 2 << "tp-dp-pp" << true << 5 << L{4, 5} << L{5, 7} << L{1, 5} << L{1, 5};
    QTest::newRow("8 ranks dp2 tp2 pp2 tp-dp-pp, rank 2 (first stage)")
        << 2 << 2 << 2 << "tp-dp-pp" << true << 2 << L{2, 3} << L{0, 2} << L{2, 6} << L{2, 6};
    QTest::newRow("8 ranks dp2 tp2 pp2 tp-dp-pp, rank 0")
        << 2 << 2 << 2 << "tp-dp-pp" << true << 0 << L{0, 1} << L{0, 2} << L{0, 4} << L{0, 4};
    QTest::newRow("8 ranks dp2 tp2 pp2, untied: no embedding pair")
        << 2 << 2 << 2 << "tp-dp-pp" << false << 5 << L{4, 5} << L{5, 7} << L{1, 5} << L{};
    // rank = tp_rank + 2 pp_rank + 4 dp_rank
    QTest::newRow("8 ranks dp2 tp2 pp2 tp-pp-dp, rank 5")
        << 2 << 2 << 2 << "tp-pp-dp" << true << 5 << L{4, 5} << L{1, 5} << L{5, 7} << L{5, 7};
    // rank = dp_rank + 2 tp_rank + 4 pp_rank
    QTest::newRow("8 ranks dp2 tp2 pp2 dp-tp-pp, rank 5")
        << 2 << 2 << 2 << "dp-tp-pp" << true << 5 << L{5, 7} << L{4, 5} << L{1, 5} << L{1, 5};
    // rank = pp_rank + 2 dp_rank + 4 tp_rank
    QTest::newRow("8 ranks dp2 tp2 pp2 pp-dp-tp, rank 6")
        << 2 << 2 << 2 << "pp-dp-tp" << true << 6 << L{2, 6} << L{4, 6} << L{6, 7} << L{6, 7};
    // rank = tp_rank + 2 pp_rank (dp 1)
    QTest::newRow("8 ranks tp2 pp4, rank 3 (middle stage): no embedding pair")
        << 1 << 2 << 4 << "tp-dp-pp" << true << 3 << L{2, 3} << L{3} << L{1, 3, 5, 7} << L{};
    QTest::newRow("8 ranks tp2 pp4, rank 7 (last stage)")
        << 1 << 2 << 4 << "tp-dp-pp" << true << 7 << L{6, 7} << L{7} << L{1, 3, 5, 7} << L{1, 7};
    QTest::newRow("8 ranks tp2 pp4, rank 1 (first stage)")
        << 1 << 2 << 4 << "tp-dp-pp" << true << 1 << L{0, 1} << L{1} << L{1, 3, 5, 7} << L{1, 7};
    // rank = tp_rank + 2 dp_rank + 6 pp_rank
    QTest::newRow("12 ranks dp3 tp2 pp2, rank 7")
        << 3 << 2 << 2 << "tp-dp-pp" << true << 7 << L{6, 7} << L{7, 9, 11} << L{1, 7} << L{1, 7};
    QTest::newRow("4 ranks dp2 tp2 pp1, tied: one stage holds both copies")
        << 2 << 2 << 1 << "tp-dp-pp" << true << 3 << L{2, 3} << L{1, 3} << L{3} << L{};
    QTest::newRow("1 rank") << 1 << 1 << 1 << "tp-dp-pp" << true << 0 << L{0} << L{0} << L{0} << L{};
  }
  void groupsOfARank() {
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(QString, order);
    QFETCH(bool, tied);
    QFETCH(int, rank);
    QFETCH(QList<int>, tp_group);
    QFETCH(QList<int>, dp_group);
    QFETCH(QList<int>, pp_group);
    QFETCH(QList<int>, embedding);
    const plan::Topology topo = make_topology(dp, tp, pp, order);
    auto g = comm::group_ranks(topo, rank, tied);
    QVERIFY2(g.ok(), g.status().message().c_str());
    std::vector<int> world(static_cast<size_t>(dp * tp * pp));
    for (size_t i = 0; i < world.size(); ++i) world[i] = static_cast<int>(i);
    QCOMPARE(text(g->world), text(world));
    QCOMPARE(text(g->tp), text(to_vector(tp_group)));
    QCOMPARE(text(g->dp), text(to_vector(dp_group)));
    QCOMPARE(text(g->pp), text(to_vector(pp_group)));
    QCOMPARE(text(g->embedding), text(to_vector(embedding)));

    // build_process_groups makes exactly these communicators, in order, and this rank's
    // coordinate on each axis is its group rank there.
    testing::ThreadHubs hubs;
    std::vector<Call> calls;
    auto thread_factory = testing::thread_communicator_factory(hubs, rank);
    auto built = comm::build_process_groups(topo, rank, tied, [&](const std::string& name, const std::vector<int>& ranks) {
      calls.emplace_back(name, ranks);
      return thread_factory(name, ranks);
    });
    QVERIFY2(built.ok(), built.status().message().c_str());
    std::vector<Call> want = {{"world", world}, {"tp", g->tp}, {"dp", g->dp}, {"pp", g->pp}};
    if (!embedding.isEmpty()) want.emplace_back("embedding", to_vector(embedding));
    QCOMPARE(calls.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      QCOMPARE(calls[i].first, want[i].first);
      QCOMPARE(text(calls[i].second), text(want[i].second));
    }
    const plan::RankCoord c = topo.coord(rank);
    QCOMPARE(built->tp().rank(), c.tp);
    QCOMPARE(built->dp().rank(), c.dp);
    QCOMPARE(built->pp().rank(), c.pp);
    QCOMPARE(built->world().rank(), rank);
    QCOMPARE(built->embedding() != nullptr, !embedding.isEmpty());
    const runtime::TrainerGroups tg = built->trainer_groups();
    QCOMPARE(tg.pp->size(), pp);
    QCOMPARE(tg.embedding != nullptr, !embedding.isEmpty());
  }

  // Creating a communicator waits for all its members, so any two ranks must create the groups
  // they share in the same order. Every rank of each configuration records its factory calls;
  // each group is created by exactly its members, and every pair of ranks meets its shared
  // groups in one order. Then all ranks build at once, as threads, over a factory that waits
  // for every member of the group (a rendezvous, as Gloo's): a wrong order would hang it.
  void constructionOrderIsTheSameOnEveryRank_data() {
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QString>("order");
    QTest::newRow("dp2 tp2 pp2 tp-dp-pp") << 2 << 2 << 2 << "tp-dp-pp";
    QTest::newRow("dp2 tp2 pp2 pp-tp-dp") << 2 << 2 << 2 << "pp-tp-dp";
    QTest::newRow("dp1 tp2 pp4") << 1 << 2 << 4 << "tp-dp-pp";
    QTest::newRow("dp3 tp1 pp3 dp-pp-tp") << 3 << 1 << 3 << "dp-pp-tp";
  }
  void constructionOrderIsTheSameOnEveryRank() {
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(QString, order);
    const plan::Topology topo = make_topology(dp, tp, pp, order);
    const int world = topo.world_size();
    std::vector<std::vector<Call>> calls(static_cast<size_t>(world));
    testing::ThreadHubs hubs;
    for (int r = 0; r < world; ++r) {
      auto f = testing::thread_communicator_factory(hubs, r);
      auto g = comm::build_process_groups(topo, r, true, [&, r](const std::string& name, const std::vector<int>& ranks) {
        calls[static_cast<size_t>(r)].emplace_back(name, ranks);
        return f(name, ranks);
      });
      QVERIFY2(g.ok(), g.status().message().c_str());
    }
    // Each group is created by its members and nobody else.
    std::map<Call, std::vector<int>> creators;
    for (int r = 0; r < world; ++r) {
      for (const Call& c : calls[static_cast<size_t>(r)]) creators[c].push_back(r);
    }
    for (const auto& [call, who] : creators) {
      QVERIFY2(who == call.second, qPrintable(QString::fromStdString(call.first) + text(call.second) + " created by " + text(who)));
    }
    // Any two ranks create their shared groups in the same relative order.
    for (int a = 0; a < world; ++a) {
      for (int b = a + 1; b < world; ++b) {
        std::vector<Call> shared_a, shared_b;
        const auto& ca = calls[static_cast<size_t>(a)];
        const auto& cb = calls[static_cast<size_t>(b)];
        for (const Call& c : ca) {
          if (std::find(cb.begin(), cb.end(), c) != cb.end()) shared_a.push_back(c);
        }
        for (const Call& c : cb) {
          if (std::find(ca.begin(), ca.end(), c) != ca.end()) shared_b.push_back(c);
        }
        QVERIFY2(shared_a == shared_b, qPrintable(QString("ranks %1 and %2 create their shared groups in different orders").arg(a).arg(b)));
      }
    }

    // All ranks at once over a rendezvous factory: each creation waits for every member.
    std::mutex mu;
    std::condition_variable cv;
    std::map<Call, int> arrived;
    std::vector<std::string> errors(static_cast<size_t>(world));
    testing::ThreadHubs live_hubs;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto f = testing::thread_communicator_factory(live_hubs, r);
        auto g = comm::build_process_groups(
            topo, r, true, [&, r](const std::string& name, const std::vector<int>& ranks) -> Result<std::unique_ptr<comm::Communicator>> {
              std::unique_lock<std::mutex> lock(mu);
              auto result = f(name, ranks);  // the hubs are made under the lock
              const Call key{name, ranks};
              ++arrived[key];
              cv.notify_all();
              if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived[key] >= static_cast<int>(ranks.size()); })) {
                return Status::timeout(name + text(ranks).toStdString() + ": not every member arrived");
              }
              return result;
            });
        if (!g.ok()) errors[static_cast<size_t>(r)] = g.status().message();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) QVERIFY2(errors[static_cast<size_t>(r)].empty(), errors[static_cast<size_t>(r)].c_str());
  }

  // A factory that fails: the error keeps its code and names the group and the rank; nothing
  // after it is created.
  void failureNamesTheGroup() {
    const plan::Topology topo = make_topology(2, 2, 2, "tp-dp-pp");
    testing::ThreadHubs hubs;
    auto f = testing::thread_communicator_factory(hubs, 5);
    std::vector<std::string> names;
    auto g = comm::build_process_groups(topo, 5, true, [&](const std::string& name, const std::vector<int>& ranks) -> Result<std::unique_ptr<comm::Communicator>> {
      names.push_back(name);
      if (name == "dp") return Status::timeout("members 7 did not arrive");
      return f(name, ranks);
    });
    QVERIFY(!g.ok());
    QCOMPARE(g.status().code(), Status::Code::kTimeout);
    QVERIFY2(g.status().message() == "process group dp[5,7] of rank 5: members 7 did not arrive", g.status().message().c_str());
    QCOMPARE(names, (std::vector<std::string>{"world", "tp", "dp"}));
  }

  // A factory that makes the wrong group is caught; a rank outside the world is refused.
  void wrongCommunicatorOrRankRefused() {
    const plan::Topology topo = make_topology(2, 2, 2, "tp-dp-pp");
    testing::ThreadHubs hubs;
    auto f = testing::thread_communicator_factory(hubs, 5);
    auto g = comm::build_process_groups(topo, 5, true, [&](const std::string& name, const std::vector<int>& ranks) {
      return name == "pp" ? f(name, {5}) : f(name, ranks);
    });
    QVERIFY(!g.ok());
    QCOMPARE(g.status().code(), Status::Code::kInternal);
    QVERIFY2(g.status().message().find("process group pp[1,5] of rank 5") == 0, g.status().message().c_str());
    for (int rank : {-1, 8}) {
      auto bad = comm::build_process_groups(topo, rank, true, f);
      QVERIFY(!bad.ok());
      QCOMPARE(bad.status().code(), Status::Code::kInvalidInput);
      QVERIFY(!comm::group_ranks(topo, rank, true).ok());
    }
  }

  // The trainer's layout from a plan: 8 ranks dp2 tp2 pp2, 4 layers, rank 5 (rank_layout.h's
  // worked example), others of it, the interleaved schedule's 4 chunks, another axis order.
  void rankLayoutFromAPlan_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("rank");
    QTest::addColumn<QList<int>>("coords");  // dp, tp, pp rank
    QTest::addColumn<QList<int>>("chunks");  // first, count of each chunk
    QTest::addColumn<QList<int>>("replica0");
    QTest::addColumn<int>("micro_batches");
    const QStringList base = {"cluster.gpus_per_node=8", "parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "pipeline.partition=uniform"};
    QTest::newRow("dp2 tp2 pp2, rank 5") << base << 5 << QList<int>{0, 1, 1} << QList<int>{0, 2, 2, 2} << QList<int>{0, 1, 4, 5} << 4;
    QTest::newRow("dp2 tp2 pp2, rank 2") << base << 2 << QList<int>{1, 0, 0} << QList<int>{0, 2, 2, 2} << QList<int>{0, 1, 4, 5} << 4;
    QTest::newRow("dp2 tp2 pp2 interleaved v2, rank 6")
        << base + QStringList{"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"} << 6 << QList<int>{1, 0, 1}
        << QList<int>{0, 1, 1, 1, 2, 1, 3, 1} << QList<int>{0, 1, 4, 5} << 4;
    QTest::newRow("dp2 tp2 pp2 order tp-pp-dp, rank 5")
        << base + QStringList{"parallel.order=tp-pp-dp"} << 5 << QList<int>{1, 1, 0} << QList<int>{0, 2, 2, 2} << QList<int>{0, 1, 2, 3} << 4;
  }
  void rankLayoutFromAPlan() {
    QFETCH(QStringList, overrides);
    QFETCH(int, rank);
    QFETCH(QList<int>, coords);
    QFETCH(QList<int>, chunks);
    QFETCH(QList<int>, replica0);
    QFETCH(int, micro_batches);
    std::vector<std::string> o = {"cluster.device=cpu"};
    for (const auto& x : overrides) o.push_back(x.toStdString());
    auto cfg = config::parse_config(
        "model: {layers: 4, hidden: 32, heads: 4, seq_len: 16, vocab: 64}\n"
        "train: {global_batch: 8, micro_batch: 1, steps: 5}\n",
        "test.yaml", o);
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    auto p = plan::make_plan(cfg.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    auto l = comm::rank_layout_of(p.value(), rank);
    QVERIFY2(l.ok(), l.status().message().c_str());
    QCOMPARE(l->rank, rank);
    QCOMPARE((QList<int>{l->dp, l->tp, l->pp}), (QList<int>{2, 2, 2}));
    QCOMPARE((QList<int>{l->dp_rank, l->tp_rank, l->pp_rank}), coords);
    QList<int> got_chunks;
    for (const auto& c : l->chunks) got_chunks << c.first << c.count;
    QCOMPARE(got_chunks, chunks);
    QCOMPARE(QList<int>(l->replica0_ranks.begin(), l->replica0_ranks.end()), replica0);
    QCOMPARE(l->virtual_stages, static_cast<int>(chunks.size() / 2) / 2);
    QCOMPARE(l->micro_batches, micro_batches);
    QVERIFY(runtime::check_rank_layout(l.value()).ok());
    QVERIFY(!comm::rank_layout_of(p.value(), 8).ok());
  }

  // A mixture of experts: the ep and expert-dp groups (plan/topology.h's folding), made after
  // grad and before embedding, the expert-dp one only where it is not the dp (or dp x cp) group;
  // the layout's ep coordinates and the ranks of expert-dp replica 0 (index pp x ep + ep rank).
  // Rows written out by hand: the topology's worked example (16 GPUs, tp 2, dp 4, pp 2, ep 4:
  // EP [4..7], expert-DP [1,5] for rank 5), ep over the tp pair (expert-DP [1,3], which is the dp
  // group), ep over dp, and ep 1 with tp 1 (the expert-dp group is the dp group: none made).
  void expertGroupsOfARank_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<int>("rank");
    QTest::addColumn<QList<int>>("ep_group");
    QTest::addColumn<QList<int>>("expert_dp_group");
    QTest::addColumn<QList<int>>("coords");  // ep rank, expert-dp rank
    QTest::addColumn<QList<int>>("replica0");
    using L = QList<int>;
    QTest::newRow("16 ranks tp2 dp4 pp2 ep4, rank 5") << QStringList{"cluster.gpus_per_node=16", "parallel.tp=2", "parallel.dp=4", "parallel.pp=2", "parallel.ep=4"}
                                                      << 5 << L{4, 5, 6, 7} << L{1, 5} << L{1, 1} << L{0, 1, 2, 3, 8, 9, 10, 11};
    // Its expert-dp group [1,3] is rank 3's dp group: none made.
    QTest::newRow("4 ranks tp2 dp2 ep2, rank 3: ep over the tp pair") << QStringList{"cluster.gpus_per_node=4", "parallel.tp=2", "parallel.dp=2", "parallel.ep=2"}
                                                                      << 3 << L{2, 3} << L{} << L{1, 1} << L{0, 1};
    QTest::newRow("4 ranks dp4 ep2, rank 2: ep over dp") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.ep=2"} << 2 << L{2, 3}
                                                         << L{0, 2} << L{0, 1} << L{0, 1};
    QTest::newRow("2 ranks dp2 ep1: the dp group") << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2"} << 1 << L{} << L{} << L{0, 1} << L{0};
  }
  void expertGroupsOfARank() {
    QFETCH(QStringList, overrides);
    QFETCH(int, rank);
    QFETCH(QList<int>, ep_group);
    QFETCH(QList<int>, expert_dp_group);
    QFETCH(QList<int>, coords);
    QFETCH(QList<int>, replica0);
    std::vector<std::string> o = {"cluster.device=cpu"};
    for (const auto& x : overrides) o.push_back(x.toStdString());
    auto cfg = config::parse_config(
        "model: {arch: llama, layers: 4, hidden: 32, heads: 4, seq_len: 16, vocab: 64, moe: {experts: 8, top_k: 2}}\n"
        "train: {global_batch: 8, micro_batch: 1, steps: 5}\n",
        "test.yaml", o);
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    auto p = plan::make_plan(cfg.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    auto g = comm::group_ranks(p->topology, rank, false);
    QVERIFY2(g.ok(), g.status().message().c_str());
    QCOMPARE(text(g->ep), text(to_vector(ep_group)));
    QCOMPARE(text(g->expert_dp), text(to_vector(expert_dp_group)));
    testing::ThreadHubs hubs;
    std::vector<Call> calls;
    auto thread_factory = testing::thread_communicator_factory(hubs, rank);
    auto built = comm::build_process_groups(p->topology, rank, false, [&](const std::string& name, const std::vector<int>& ranks) {
      calls.emplace_back(name, ranks);
      return thread_factory(name, ranks);
    });
    QVERIFY2(built.ok(), built.status().message().c_str());
    QStringList names;
    for (const auto& c : calls) names << QString::fromStdString(c.first);
    QStringList want = {"world", "tp", "dp", "pp"};
    if (!ep_group.isEmpty()) want << "ep";
    if (!expert_dp_group.isEmpty()) want << "expert_dp";
    QCOMPARE(names, want);
    const runtime::TrainerGroups tg = built->trainer_groups();
    QCOMPARE(tg.ep != nullptr, !ep_group.isEmpty());
    QCOMPARE(tg.expert_dp != nullptr, !expert_dp_group.isEmpty());
    auto l = comm::rank_layout_of(p.value(), rank);
    QVERIFY2(l.ok(), l.status().message().c_str());
    QCOMPARE((QList<int>{l->ep_rank, l->expert_dp_rank}), coords);
    QCOMPARE(QList<int>(l->expert_replica0_ranks.begin(), l->expert_replica0_ranks.end()), replica0);
    QVERIFY(runtime::check_rank_layout(l.value()).ok());
  }

  // check_rank_layout refuses what the trainer could not run, naming the field.
  void inconsistentLayoutRefused_data() {
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("mentions");
    QTest::newRow("tp 0") << "tp" << "at least 1";
    QTest::newRow("rank outside the world") << "rank" << "outside 0..7";
    QTest::newRow("pp rank outside pp") << "pp_rank" << "outside the sizes";
    QTest::newRow("one chunk missing") << "chunks" << "3 chunks for pp x virtual_stages = 4";
    QTest::newRow("replica-0 ranks short") << "replica0" << "3 replica-0 ranks for tp x pp = 4";
  }
  void inconsistentLayoutRefused() {
    QFETCH(QString, field);
    QFETCH(QString, mentions);
    runtime::RankLayout l;
    l.rank = 5;
    l.dp = l.tp = l.pp = 2;
    l.virtual_stages = 2;
    l.micro_batches = 4;
    l.dp_rank = 0;
    l.tp_rank = 1;
    l.pp_rank = 1;
    l.chunks = {{0, 1}, {1, 1}, {2, 1}, {3, 1}};
    l.replica0_ranks = {0, 1, 4, 5};
    QVERIFY(runtime::check_rank_layout(l).ok());
    if (field == "tp") l.tp = 0;
    if (field == "rank") l.rank = 8;
    if (field == "pp_rank") l.pp_rank = 2;
    if (field == "chunks") l.chunks.pop_back();
    if (field == "replica0") l.replica0_ranks.pop_back();
    const Status s = runtime::check_rank_layout(l);
    QCOMPARE(s.code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(s.message()).contains(mentions), s.message().c_str());
  }
};

QTEST_APPLESS_MAIN(TestProcessGroups)
#include "tst_process_groups.moc"
