// Topology: the seed documents' examples as golden groups (LiBai's 8-GPU layouts, docs/ARCHITECTURE.md §4's
// worked example, PaddlePaddle's hybrid groups, Colossal-AI's 2D/2.5D/3D sub-groups), checked
// against re-implementations of the frameworks' own group builders; rank <-> coordinate round
// trips for every axis order; a table of large clusters against the closed formula and the
// structural properties every topology must have.
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/plan/estimate.h"
#include "stagecraft/plan/topology.h"

#include <QtTest>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

using stagecraft::config::Axis;
using stagecraft::config::TpMode;
using stagecraft::plan::ExpertAxis;
using stagecraft::plan::Topology;
using stagecraft::plan::TopologySpec;
using Groups = std::vector<std::vector<int>>;

namespace {

// "tp-pp-dp" -> axes, innermost first.
std::vector<Axis> axes(const QString& order) {
  std::vector<Axis> out;
  for (const QString& a : order.split('-')) out.push_back(a == "tp" ? Axis::kTp : a == "dp" ? Axis::kDp : a == "cp" ? Axis::kCp : Axis::kPp);
  return out;
}

TpMode mode(const QString& m) {
  if (m == "2d") return TpMode::k2d;
  if (m == "2.5d") return TpMode::k2p5d;
  if (m == "3d") return TpMode::k3d;
  return TpMode::k1d;
}

Topology make(int nodes, int gpus, int dp, int tp, int pp, const QString& order = "tp-dp-pp", const QString& tp_mode = "1d", int depth = 1) {
  TopologySpec s;
  s.nodes = nodes;
  s.gpus_per_node = gpus;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.order = axes(order);
  s.tp_mode = mode(tp_mode);
  s.tp_depth = depth;
  auto t = Topology::create(s);
  if (!t.ok()) qFatal("Topology::create failed: %s", t.status().message().c_str());
  return t.value();
}

// A spec of the expert tests: 8 GPUs per node, sizes tp, cp, dp, pp and the expert layers' ep, expert_tp.
TopologySpec expert_spec(int tp, int cp, int dp, int pp, int ep, int etp, const QString& order = "tp-cp-dp-pp") {
  TopologySpec s;
  s.gpus_per_node = 8;
  s.nodes = tp * cp * dp * pp / 8;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.experts = true;
  s.ep = ep;
  s.expert_tp = etp;
  s.order = axes(order);
  return s;
}

// Groups by brute force: every rank with the ranks `same` pairs it with, each group once, by its
// lowest rank.
template <class Same>
Groups enumerate_groups(int world, Same same) {
  Groups out;
  std::vector<bool> placed(static_cast<size_t>(world), false);
  for (int r = 0; r < world; ++r) {
    if (placed[static_cast<size_t>(r)]) continue;
    std::vector<int> g;
    for (int q = 0; q < world; ++q) {
      if (same(r, q)) {
        g.push_back(q);
        placed[static_cast<size_t>(q)] = true;
      }
    }
    out.push_back(g);
  }
  return out;
}

// "[0,1] [2,3]": the groups as the seed documents write them.
QString fmt(const Groups& gs) {
  QStringList parts;
  for (const auto& g : gs) {
    QStringList members;
    for (int r : g) members << QString::number(r);
    parts << "[" + members.join(",") + "]";
  }
  return parts.join(" ");
}
QString fmt_one(const std::vector<int>& g) { return fmt({g}); }

Groups sorted(Groups gs) {
  std::sort(gs.begin(), gs.end());
  return gs;
}

const stagecraft::plan::TensorSubgroups* family(const std::vector<stagecraft::plan::TensorSubgroups>& fams, const std::string& name) {
  for (const auto& f : fams) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// ---- the frameworks' own group builders, re-implemented from their sources ----

// PaddlePaddle fleet's CommunicateTopology (python/paddle/distributed/fleet/base/topology.py):
// hybrid_group_names ["data", "pipe", "model"], ranks numbered by itertools.product over the
// dims (the last name varies fastest); get_comm_list(axis) holds the others fixed in product
// order and varies `axis`.
Groups paddle_comm_list(int dp, int pp, int mp, const std::string& axis) {
  const int dims[3] = {dp, pp, mp};
  auto rank = [&](int d, int p, int m) { return (d * pp + p) * mp + m; };  // product order
  const int which = axis == "data" ? 0 : axis == "pipe" ? 1 : 2;
  Groups out;
  int other[2], n = 0;
  for (int a = 0; a < 3; ++a) {
    if (a != which) other[n++] = a;
  }
  for (int x = 0; x < dims[other[0]]; ++x) {
    for (int y = 0; y < dims[other[1]]; ++y) {
      std::vector<int> g;
      for (int i = 0; i < dims[which]; ++i) {
        int c[3];
        c[other[0]] = x;
        c[other[1]] = y;
        c[which] = i;
        g.push_back(rank(c[0], c[1], c[2]));
      }
      out.push_back(g);
    }
  }
  return out;
}

// Colossal-AI's process-group initialisers (colossalai/context/process_group_initializer/):
// tensor groups are blocks of tp consecutive ranks (initializer_tensor.py); data groups
// [i + j * world/dp] (initializer_data.py); pipeline groups range(i * world/dp + j, (i+1) * world/dp,
// world/(dp pp)) (initializer_pipeline.py); and inside tensor group h:
//   2D   row    [h tp + j N + k for k]            col [h tp + j + k N for k]        (initializer_2d.py)
//   2.5D row    [h tp + i + N (j + N k) for i]    col ... for j, dep ... for k,
//        xz     [... for k for j]                                                   (initializer_2p5d.py)
//   3D   input  [h N^3 + i + N (j + N k) for j]   weight ... for i, output ... for k (initializer_3d.py)
struct Colossal {
  int world, dp, pp, tp, n, depth;

  Groups tensor() const {
    Groups out;
    for (int h = 0; h < world / tp; ++h) {
      std::vector<int> g;
      for (int j = 0; j < tp; ++j) g.push_back(h * tp + j);
      out.push_back(g);
    }
    return out;
  }
  Groups data() const {
    Groups out;
    const int groups = world / dp;
    for (int i = 0; i < groups; ++i) {
      std::vector<int> g;
      for (int j = 0; j < dp; ++j) g.push_back(i + j * groups);
      out.push_back(g);
    }
    return out;
  }
  Groups pipeline() const {
    Groups out;
    const int data_group_size = world / dp, stage_size = data_group_size / pp;
    for (int i = 0; i < dp; ++i) {
      for (int j = 0; j < stage_size; ++j) {
        std::vector<int> g;
        for (int r = i * data_group_size + j; r < (i + 1) * data_group_size; r += stage_size) g.push_back(r);
        out.push_back(g);
      }
    }
    return out;
  }
  // One family: `vary` names the coordinates that change inside a group, innermost listed last.
  Groups family(const std::string& name) const {
    Groups out;
    const int d = depth;
    auto at = [&](int h, int i, int j, int k) { return h * tp + i + n * (j + n * k); };
    for (int h = 0; h < world / tp; ++h) {
      if (name == "row") {  // 2d: fixed j, vary k in j*N + k, i.e. vary i of i + N*j
        for (int j = 0; j < n; ++j) {
          for (int k = 0; k < d; ++k) {
            std::vector<int> g;
            for (int i = 0; i < n; ++i) g.push_back(at(h, i, j, k));
            out.push_back(g);
          }
        }
      } else if (name == "column") {
        for (int i = 0; i < n; ++i) {
          for (int k = 0; k < d; ++k) {
            std::vector<int> g;
            for (int j = 0; j < n; ++j) g.push_back(at(h, i, j, k));
            out.push_back(g);
          }
        }
      } else if (name == "depth" || name == "output") {
        for (int i = 0; i < n; ++i) {
          for (int j = 0; j < n; ++j) {
            std::vector<int> g;
            for (int k = 0; k < d; ++k) g.push_back(at(h, i, j, k));
            out.push_back(g);
          }
        }
      } else if (name == "xz") {
        for (int i = 0; i < n; ++i) {
          std::vector<int> g;
          for (int k = 0; k < d; ++k) {
            for (int j = 0; j < n; ++j) g.push_back(at(h, i, j, k));
          }
          out.push_back(g);
        }
      } else if (name == "input") {
        for (int i = 0; i < n; ++i) {
          for (int k = 0; k < d; ++k) {
            std::vector<int> g;
            for (int j = 0; j < n; ++j) g.push_back(at(h, i, j, k));
            out.push_back(g);
          }
        }
      } else if (name == "weight") {
        for (int k = 0; k < d; ++k) {
          for (int j = 0; j < n; ++j) {
            std::vector<int> g;
            for (int i = 0; i < n; ++i) g.push_back(at(h, i, j, k));
            out.push_back(g);
          }
        }
      }
    }
    return sorted(out);
  }
};

}  // namespace

class TestTopology : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // ---- LiBai's 8-GPU examples (seeds 000 and 001) and docs/ARCHITECTURE.md §4 ----

  void libaiEightGpuExamples_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QString>("tpGroups");
    QTest::addColumn<QString>("dpGroups");
    QTest::addColumn<QString>("ppGroups");
    QTest::addColumn<QStringList>("stages");  // ranks of each pp rank
    const QString singles = "[0] [1] [2] [3] [4] [5] [6] [7]";
    QTest::newRow("pure data parallel, dp=8") << "libai-bert-dp8.yaml" << 8 << 1 << 1 << singles << "[0,1,2,3,4,5,6,7]" << singles
                                              << QStringList{"[0,1,2,3,4,5,6,7]"};
    QTest::newRow("pure tensor parallel, tp=8") << "libai-bert-tp8.yaml" << 1 << 8 << 1 << "[0,1,2,3,4,5,6,7]" << singles << singles
                                                << QStringList{"[0,1,2,3,4,5,6,7]"};
    QTest::newRow("pure pipeline parallel, pp=8") << "libai-bert-pp8.yaml" << 1 << 1 << 8 << singles << singles << "[0,1,2,3,4,5,6,7]"
                                                  << QStringList{"[0]", "[1]", "[2]", "[3]", "[4]", "[5]", "[6]", "[7]"};
    // "8 GPUs will be split into 2 groups as [[0, 1, 2, 3], [4, 5, 6, 7]]" (TP inside each).
    QTest::newRow("dp=2 tp=4") << "libai-bert-dp2-tp4.yaml" << 2 << 4 << 1 << "[0,1,2,3] [4,5,6,7]" << "[0,4] [1,5] [2,6] [3,7]" << singles
                               << QStringList{"[0,1,2,3,4,5,6,7]"};
    // "4 stages. Each stage contains 2 GPUs which will be split into 2 data-parallel groups."
    QTest::newRow("dp=2 pp=4") << "libai-bert-dp2-pp4.yaml" << 2 << 1 << 4 << singles << "[0,1] [2,3] [4,5] [6,7]" << "[0,2,4,6] [1,3,5,7]"
                               << QStringList{"[0,1]", "[2,3]", "[4,5]", "[6,7]"};
    // "4 stages, each stage contains 2 GPUs as a group ... split into 2 parts for tensor parallel".
    QTest::newRow("tp=2 pp=4") << "libai-bert-tp2-pp4.yaml" << 1 << 2 << 4 << "[0,1] [2,3] [4,5] [6,7]" << singles << "[0,2,4,6] [1,3,5,7]"
                               << QStringList{"[0,1]", "[2,3]", "[4,5]", "[6,7]"};
    // docs/ARCHITECTURE.md §4's worked example: 2 stages, each of 2 DP groups of 2 TP ranks.
    QTest::newRow("3D dp=tp=pp=2") << "libai-bert-3d.yaml" << 2 << 2 << 2 << "[0,1] [2,3] [4,5] [6,7]" << "[0,2] [1,3] [4,6] [5,7]"
                                   << "[0,4] [1,5] [2,6] [3,7]" << QStringList{"[0,1,2,3]", "[4,5,6,7]"};
    // "data_parallel_size will be automatically set to (8 / (2 * 2)) = 2": the same groups.
    QTest::newRow("3D with dp auto") << "libai-bert-auto-dp.yaml" << 2 << 2 << 2 << "[0,1] [2,3] [4,5] [6,7]" << "[0,2] [1,3] [4,6] [5,7]"
                                     << "[0,4] [1,5] [2,6] [3,7]" << QStringList{"[0,1,2,3]", "[4,5,6,7]"};
    QTest::newRow("BERT-large 3D (DESIGN §3)") << "bert-large-3d.yaml" << 2 << 2 << 2 << "[0,1] [2,3] [4,5] [6,7]" << "[0,2] [1,3] [4,6] [5,7]"
                                               << "[0,4] [1,5] [2,6] [3,7]" << QStringList{"[0,1,2,3]", "[4,5,6,7]"};
  }
  void libaiEightGpuExamples() {
    QFETCH(QString, config);
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(QString, tpGroups);
    QFETCH(QString, dpGroups);
    QFETCH(QString, ppGroups);
    QFETCH(QStringList, stages);
    // The topology alone, from the sizes the seed gives ...
    const Topology t = make(1, 8, dp, tp, pp);
    QCOMPARE(fmt(t.groups(Axis::kTp)), tpGroups);
    QCOMPARE(fmt(t.groups(Axis::kDp)), dpGroups);
    QCOMPARE(fmt(t.groups(Axis::kPp)), ppGroups);
    QCOMPARE(t.size(Axis::kPp), static_cast<int>(stages.size()));
    for (int s = 0; s < pp; ++s) QCOMPARE(fmt_one(t.stage_ranks(s)), stages[s]);
    // ... and through the example config in configs/, as `stagecraft-cli plan` builds it.
    auto c = stagecraft::config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/" + config.toStdString());
    QVERIFY2(c.ok(), c.status().message().c_str());
    auto p = stagecraft::plan::make_plan(c.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    QCOMPARE(p->dp, dp);
    QCOMPARE(p->tp, tp);
    QCOMPARE(p->pp, pp);
    QCOMPARE(fmt(p->topology.groups(Axis::kTp)), tpGroups);
    QCOMPARE(fmt(p->topology.groups(Axis::kDp)), dpGroups);
    QCOMPARE(fmt(p->topology.groups(Axis::kPp)), ppGroups);
    for (const auto& st : p->stages) QCOMPARE(fmt_one(p->topology.stage_ranks(st.pp_rank)), stages[st.pp_rank]);
  }

  void designWorkedExampleCoordinates() {
    // rank = tp_rank + dp_rank * tp + pp_rank * tp * dp, so rank 6 is tp 0, dp 1, pp 1.
    const Topology t = make(1, 8, 2, 2, 2);
    const int expected[8][3] = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}, {0, 0, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}};  // dp, tp, pp
    for (int r = 0; r < 8; ++r) {
      const auto c = t.coord(r);
      QCOMPARE(c.dp, expected[r][0]);
      QCOMPARE(c.tp, expected[r][1]);
      QCOMPARE(c.pp, expected[r][2]);
      QCOMPARE(c.node, 0);
      QCOMPARE(c.local_rank, r);
    }
    QCOMPARE(fmt_one(t.group_of(6, Axis::kTp)), QString("[6,7]"));
    QCOMPARE(fmt_one(t.group_of(6, Axis::kDp)), QString("[4,6]"));
    QCOMPARE(fmt_one(t.group_of(6, Axis::kPp)), QString("[2,6]"));
  }

  // ---- PaddlePaddle: dp_degree = mp_degree = pp_degree = 2 (seed 003) ----

  void paddleSeedExample() {
    auto c = stagecraft::config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/paddle-gpt-dp2-mp2-pp2.yaml");
    QVERIFY2(c.ok(), c.status().message().c_str());
    auto p = stagecraft::plan::make_plan(c.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    const Topology& t = p->topology;
    QCOMPARE(fmt(t.groups(Axis::kTp)), QString("[0,1] [2,3] [4,5] [6,7]"));  // mp_group
    QCOMPARE(fmt(t.groups(Axis::kPp)), QString("[0,2] [1,3] [4,6] [5,7]"));  // pp_group
    QCOMPARE(fmt(t.groups(Axis::kDp)), QString("[0,4] [1,5] [2,6] [3,7]"));  // dp_group
    QCOMPARE(fmt_one(t.stage_ranks(0)), QString("[0,1,4,5]"));
    QCOMPARE(fmt_one(t.stage_ranks(1)), QString("[2,3,6,7]"));
    QCOMPARE(p->micro_batches, 4);  // --global_batch_size 16 --micro_batch_size 2 over dp 2
  }

  void paddleGroupsMatchItsTopology_data() {
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("mp");
    QTest::newRow("seed dp=mp=pp=2") << 2 << 2 << 2;
    QTest::newRow("dp=4 pp=2 mp=1") << 4 << 2 << 1;
    QTest::newRow("dp=1 pp=4 mp=2") << 1 << 4 << 2;
    QTest::newRow("dp=3 pp=5 mp=2") << 3 << 5 << 2;
    QTest::newRow("dp=8 pp=4 mp=8 on 32 nodes") << 8 << 4 << 8;
  }
  void paddleGroupsMatchItsTopology() {
    QFETCH(int, dp);
    QFETCH(int, pp);
    QFETCH(int, mp);
    const int world = dp * pp * mp;
    const int gpus = world % 8 == 0 ? 8 : world;
    const Topology t = make(world / gpus, gpus, dp, mp, pp, "tp-pp-dp");
    QCOMPARE(fmt(t.groups(Axis::kDp)), fmt(sorted(paddle_comm_list(dp, pp, mp, "data"))));
    QCOMPARE(fmt(t.groups(Axis::kPp)), fmt(sorted(paddle_comm_list(dp, pp, mp, "pipe"))));
    QCOMPARE(fmt(t.groups(Axis::kTp)), fmt(sorted(paddle_comm_list(dp, pp, mp, "model"))));
    // get_coord(rank): the product's coordinates.
    for (int r = 0; r < world; ++r) {
      const auto c = t.coord(r);
      QCOMPARE(c.tp, r % mp);
      QCOMPARE(c.pp, (r / mp) % pp);
      QCOMPARE(c.dp, r / (mp * pp));
    }
  }

  // ---- Colossal-AI (seed 004) ----

  void colossalSeedExamples_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("tpGroups");
    QTest::addColumn<QStringList>("families");  // "name: groups"
    QTest::newRow("1d size=4") << "colossalai-1d.yaml" << "[0,1,2,3] [4,5,6,7]" << QStringList{};
    QTest::newRow("2d size=4") << "colossalai-2d.yaml" << "[0,1,2,3] [4,5,6,7]"
                               << QStringList{"row: [0,1] [2,3] [4,5] [6,7]", "column: [0,2] [1,3] [4,6] [5,7]"};
    QTest::newRow("2.5d size=8 depth=2") << "colossalai-2p5d.yaml" << "[0,1,2,3,4,5,6,7]"
                                         << QStringList{"row: [0,1] [2,3] [4,5] [6,7]", "column: [0,2] [1,3] [4,6] [5,7]",
                                                        "depth: [0,4] [1,5] [2,6] [3,7]", "xz: [0,2,4,6] [1,3,5,7]"};
    QTest::newRow("3d size=8") << "colossalai-3d.yaml" << "[0,1,2,3,4,5,6,7]"
                               << QStringList{"input: [0,2] [1,3] [4,6] [5,7]", "weight: [0,1] [2,3] [4,5] [6,7]", "output: [0,4] [1,5] [2,6] [3,7]"};
    QTest::newRow("pipeline 2 with 2d size=4") << "colossalai-pp2-2d.yaml" << "[0,1,2,3] [4,5,6,7]"
                                               << QStringList{"row: [0,1] [2,3] [4,5] [6,7]", "column: [0,2] [1,3] [4,6] [5,7]"};
  }
  void colossalSeedExamples() {
    QFETCH(QString, config);
    QFETCH(QString, tpGroups);
    QFETCH(QStringList, families);
    auto c = stagecraft::config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/" + config.toStdString());
    QVERIFY2(c.ok(), c.status().message().c_str());
    auto p = stagecraft::plan::make_plan(c.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    QCOMPARE(fmt(p->topology.groups(Axis::kTp)), tpGroups);
    const auto fams = p->topology.tensor_subgroups();
    QCOMPARE(static_cast<int>(fams.size()), static_cast<int>(families.size()));
    for (const QString& f : families) {
      const auto* fam = family(fams, f.section(": ", 0, 0).toStdString());
      QVERIFY2(fam, qPrintable("no family " + f));
      QCOMPARE(f.section(": ", 0, 0) + ": " + fmt(fam->groups), f);
    }
    // Data parallel is inferred, as Colossal-AI does: world / (tensor x pipeline).
    QCOMPARE(p->dp, 8 / (p->tp * p->pp));
    // Colossal-AI's pipeline groups for the one example with a pipeline.
    if (p->pp == 2) QCOMPARE(fmt(p->topology.groups(Axis::kPp)), QString("[0,4] [1,5] [2,6] [3,7]"));
  }

  // Larger layouts against the initialisers' own formulas, with Colossal-AI's rank order
  // (tensor innermost, then pipeline, then data: tp-pp-dp).
  void colossalGroupsMatchItsInitializers_data() {
    QTest::addColumn<int>("nodes");
    QTest::addColumn<int>("gpus");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<QString>("tpMode");
    QTest::addColumn<int>("depth");
    QTest::newRow("2d tp=16 (N=4), dp 4, pp 2") << 16 << 8 << 2 << 16 << "2d" << 1;
    QTest::newRow("2d tp=9 (N=3) on 6 x 6") << 6 << 6 << 2 << 9 << "2d" << 1;
    QTest::newRow("2.5d tp=8 (N=2, d=2), dp 8, pp 4") << 32 << 8 << 4 << 8 << "2.5d" << 2;
    QTest::newRow("2.5d tp=18 (N=3, d=2) on 9 x 4") << 9 << 4 << 1 << 18 << "2.5d" << 2;
    QTest::newRow("2.5d tp=32 (N=4, d=2)") << 8 << 8 << 1 << 32 << "2.5d" << 2;
    QTest::newRow("3d tp=8, dp 16, pp 2") << 32 << 8 << 2 << 8 << "3d" << 1;
    QTest::newRow("3d tp=27 (N=3) on 27 x 2") << 27 << 2 << 2 << 27 << "3d" << 1;
    QTest::newRow("3d tp=64 (N=4), 1024 x 8") << 1024 << 8 << 8 << 64 << "3d" << 1;
  }
  void colossalGroupsMatchItsInitializers() {
    QFETCH(int, nodes);
    QFETCH(int, gpus);
    QFETCH(int, pp);
    QFETCH(int, tp);
    QFETCH(QString, tpMode);
    QFETCH(int, depth);
    const int world = nodes * gpus;
    const int dp = world / (tp * pp);
    const Topology t = make(nodes, gpus, dp, tp, pp, "tp-pp-dp", tpMode, depth);
    const int n = t.tensor_grid_side();
    const int d = tpMode == "2d" ? 1 : tpMode == "3d" ? n : depth;
    QCOMPARE(tpMode == "3d" ? n * n * n : n * n * d, tp);
    const Colossal ref{world, dp, pp, tp, n, d};
    QVERIFY(t.groups(Axis::kTp) == ref.tensor());
    QVERIFY(t.groups(Axis::kDp) == sorted(ref.data()));
    QVERIFY(t.groups(Axis::kPp) == sorted(ref.pipeline()));
    const std::vector<std::string> names = tpMode == "2d"     ? std::vector<std::string>{"row", "column"}
                                           : tpMode == "2.5d" ? std::vector<std::string>{"row", "column", "depth", "xz"}
                                                              : std::vector<std::string>{"input", "weight", "output"};
    const auto fams = t.tensor_subgroups();
    QCOMPARE(fams.size(), names.size());
    for (const auto& name : names) {
      const auto* fam = family(fams, name);
      QVERIFY2(fam, name.c_str());
      QVERIFY2(fam->groups == ref.family(name), name.c_str());
      // Every family partitions every TP group.
      std::vector<int> all;
      for (const auto& g : fam->groups) all.insert(all.end(), g.begin(), g.end());
      std::sort(all.begin(), all.end());
      QCOMPARE(static_cast<int>(all.size()), world);
      QVERIFY(std::adjacent_find(all.begin(), all.end()) == all.end());
    }
  }

  void oneDimensionalHasNoSubgroups() {
    QVERIFY(make(1, 8, 2, 4, 1).tensor_subgroups().empty());
    QCOMPARE(make(1, 8, 2, 4, 1).tensor_grid_side(), 0);
  }

  // ---- rank <-> coordinates ----

  void rankCoordRoundTrip_data() {
    QTest::addColumn<QString>("order");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    for (const char* o : {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"}) {
      QTest::newRow(qPrintable(QString(o) + " 2x2x2")) << QString(o) << 2 << 2 << 2;
      QTest::newRow(qPrintable(QString(o) + " 3x4x5")) << QString(o) << 3 << 4 << 5;
      QTest::newRow(qPrintable(QString(o) + " 16x8x8")) << QString(o) << 16 << 8 << 8;
    }
  }
  void rankCoordRoundTrip() {
    QFETCH(QString, order);
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    const int world = dp * tp * pp;
    const int gpus = world % 8 == 0 ? 8 : world;
    const Topology t = make(world / gpus, gpus, dp, tp, pp, order);
    std::set<std::tuple<int, int, int>> seen;
    for (int r = 0; r < world; ++r) {
      const auto c = t.coord(r);
      QCOMPARE(c.rank, r);
      QVERIFY(c.dp >= 0 && c.dp < dp && c.tp >= 0 && c.tp < tp && c.pp >= 0 && c.pp < pp);
      QCOMPARE(t.rank_of(c.dp, c.tp, c.pp), r);
      QCOMPARE(c.node, r / gpus);
      QCOMPARE(c.local_rank, r % gpus);
      seen.insert({c.dp, c.tp, c.pp});
    }
    QCOMPARE(static_cast<int>(seen.size()), world);  // a bijection
    // The leftmost axis varies fastest: rank 1 moves one step along it.
    const Axis inner = axes(order).front();
    QCOMPARE(t.stride(inner), 1);
    const auto c1 = t.coord(1);
    QCOMPARE(inner == Axis::kTp ? c1.tp : inner == Axis::kDp ? c1.dp : c1.pp, 1);
  }

  // ---- four axes: cp in the one rank generator ----

  void contextParallelWorkedExample() {
    // The header's example: 16 GPUs, tp = cp = dp = pp = 2, tp-cp-dp-pp.
    TopologySpec s;
    s.nodes = 2;
    s.gpus_per_node = 8;
    s.dp = s.tp = s.pp = s.cp = 2;
    s.order = axes("tp-cp-dp-pp");
    auto t = Topology::create(s);
    QVERIFY2(t.ok(), t.status().message().c_str());
    QCOMPARE(fmt(t->groups(Axis::kTp)).left(11), QString("[0,1] [2,3]"));
    QCOMPARE(fmt(t->groups(Axis::kCp)).left(11), QString("[0,2] [1,3]"));
    QCOMPARE(fmt(t->groups(Axis::kDp)).left(11), QString("[0,4] [1,5]"));
    QCOMPARE(fmt(t->groups(Axis::kPp)).left(12), QString("[0,8] [1,9] "));
    QCOMPARE(fmt(t->groups({Axis::kDp, Axis::kCp})), QString("[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]"));
    QCOMPARE(t->group_of(13, {Axis::kCp, Axis::kDp}), (std::vector<int>{9, 11, 13, 15}));
    const auto c = t->coord(13);  // 13 = 1 + 2 x 0 + 4 x 1 + 8 x 1
    QCOMPARE(c.tp, 1);
    QCOMPARE(c.cp, 0);
    QCOMPARE(c.dp, 1);
    QCOMPARE(c.pp, 1);
    QCOMPARE(t->rank_of(1, 1, 1, 0), 13);
    QCOMPARE(t->rank_of(1, 1, 1, 1), 15);
    QCOMPARE(t->order(), axes("tp-cp-dp-pp"));
  }

  void threeAxisOrdersKeepTheirRanks_data() {
    QTest::addColumn<QString>("order");
    QTest::addColumn<QString>("completed");
    QTest::newRow("tp-dp-pp") << "tp-dp-pp" << "tp-cp-dp-pp";
    QTest::newRow("tp-pp-dp") << "tp-pp-dp" << "tp-cp-pp-dp";
    QTest::newRow("dp-tp-pp") << "dp-tp-pp" << "dp-tp-cp-pp";
    QTest::newRow("pp-dp-tp") << "pp-dp-tp" << "pp-dp-tp-cp";
  }
  void threeAxisOrdersKeepTheirRanks() {
    // An order without cp is completed with cp after tp; with cp = 1 it forms the same groups as
    // the order did before cp existed, and with cp > 1 the same as the completed order.
    QFETCH(QString, order);
    QFETCH(QString, completed);
    QCOMPARE(stagecraft::config::complete_order(axes(order)), axes(completed));
    QCOMPARE(stagecraft::config::order_text(*stagecraft::config::parse_order(order.toStdString())), completed.toStdString());
    for (int cp : {1, 2}) {
      TopologySpec a, b;
      a.nodes = b.nodes = 2;
      a.gpus_per_node = b.gpus_per_node = 8;
      a.dp = b.dp = 2;
      a.tp = b.tp = 2;
      a.pp = b.pp = 4 / cp;
      a.cp = b.cp = cp;
      a.order = axes(order);
      b.order = axes(completed);
      auto ta = Topology::create(a), tb = Topology::create(b);
      QVERIFY(ta.ok() && tb.ok());
      for (Axis x : {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp}) QCOMPARE(ta->groups(x), tb->groups(x));
    }
    // cp = 1: the strides of tp, dp and pp are those of the three-axis formula.
    const Topology t = make(1, 8, 2, 2, 2, order);
    int stride = 1;
    for (Axis x : axes(order)) {
      QCOMPARE(t.stride(x), stride);
      stride *= 2;
    }
  }

  void fourAxesAgainstEnumeration_data() {
    QTest::addColumn<QString>("order");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("cp");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("pp");
    QTest::newRow("Megatron-Core default 2x2x2x2") << "tp-cp-dp-pp" << 2 << 2 << 2 << 2;
    QTest::newRow("tp-cp-pp-dp 4x2x3x2") << "tp-cp-pp-dp" << 4 << 2 << 3 << 2;
    QTest::newRow("cp innermost 2x4x2x1") << "cp-tp-dp-pp" << 2 << 4 << 2 << 1;
    QTest::newRow("dp-pp-tp-cp 1x8x2x2") << "dp-pp-tp-cp" << 1 << 8 << 2 << 2;
    QTest::newRow("pp-tp-cp-dp 2x2x4x2") << "pp-tp-cp-dp" << 2 << 2 << 4 << 2;
  }
  void fourAxesAgainstEnumeration() {
    // Independent of the generator: coordinates as digits of the rank in the order's mixed
    // radix, and a group as every rank that agrees on the other axes.
    QFETCH(QString, order);
    QFETCH(int, tp);
    QFETCH(int, cp);
    QFETCH(int, dp);
    QFETCH(int, pp);
    const int world = tp * cp * dp * pp;
    TopologySpec s;
    s.nodes = world % 8 == 0 ? world / 8 : 1;
    s.gpus_per_node = world % 8 == 0 ? 8 : world;
    s.tp = tp;
    s.cp = cp;
    s.dp = dp;
    s.pp = pp;
    s.order = axes(order);
    auto made = Topology::create(s);
    QVERIFY2(made.ok(), made.status().message().c_str());
    const Topology& t = made.value();
    std::map<Axis, int> size{{Axis::kTp, tp}, {Axis::kCp, cp}, {Axis::kDp, dp}, {Axis::kPp, pp}};
    auto digits = [&](int r) {
      std::map<Axis, int> d;
      for (Axis a : axes(order)) {
        d[a] = r % size[a];
        r /= size[a];
      }
      return d;
    };
    const std::vector<std::vector<Axis>> families = {{Axis::kTp}, {Axis::kCp}, {Axis::kDp}, {Axis::kPp}, {Axis::kDp, Axis::kCp}, {Axis::kTp, Axis::kCp}};
    for (const auto& fam : families) {
      const Groups expected = enumerate_groups(world, [&](int r, int q) {
        bool same = true;
        for (auto [a, v] : digits(r)) {
          if (std::find(fam.begin(), fam.end(), a) == fam.end()) same = same && digits(q)[a] == v;
        }
        return same;
      });
      QCOMPARE(t.groups(fam), expected);
      for (int r = 0; r < world; ++r) {
        const auto g = t.group_of(r, fam);
        QVERIFY(std::find(expected.begin(), expected.end(), g) != expected.end());
        QVERIFY(std::find(g.begin(), g.end(), r) != g.end());
      }
      // The cost model's node count of group 0 agrees with the topology's.
      QCOMPARE(stagecraft::plan::axis_group_nodes(s, fam), static_cast<int>(t.nodes_of(t.group_of(0, fam)).size()));
    }
    for (int r = 0; r < world; ++r) {
      auto d = digits(r);
      const auto c = t.coord(r);
      QCOMPARE(c.tp, d[Axis::kTp]);
      QCOMPARE(c.cp, d[Axis::kCp]);
      QCOMPARE(c.dp, d[Axis::kDp]);
      QCOMPARE(c.pp, d[Axis::kPp]);
      QCOMPARE(t.rank_of(c.dp, c.tp, c.pp, c.cp), r);
    }
  }

  // ---- expert layers: Megatron-Core's MoE parallel folding ----

  void expertWorkedExample() {
    // The header's example: 16 GPUs, tp = 2, dp = 4, pp = 2, ep = 4, expert_tp = 1.
    auto t = Topology::create(expert_spec(2, 1, 4, 2, 4, 1));
    QVERIFY2(t.ok(), t.status().message().c_str());
    QCOMPARE(t->expert_size(ExpertAxis::kDp), 2);
    QCOMPARE(fmt(t->expert_groups(ExpertAxis::kEp)), QString("[0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]"));
    QCOMPARE(fmt(t->expert_groups(ExpertAxis::kDp)), QString("[0,4] [1,5] [2,6] [3,7] [8,12] [9,13] [10,14] [11,15]"));
    QCOMPARE(fmt(t->expert_groups(ExpertAxis::kTp)).left(11), QString("[0] [1] [2]"));
    QCOMPARE(fmt(t->groups(Axis::kDp)).left(23), QString("[0,2,4,6] [1,3,5,7] [8,"));
    const auto c = t->coord(5);
    QCOMPARE(c.ep, 1);
    QCOMPARE(c.edp, 1);
    QCOMPARE(c.etp, 0);
    QCOMPARE(t->experts_of(5, 8).first, 2);
    QCOMPARE(t->experts_of(5, 8).count, 2);
    QCOMPARE(t->expert_group_of(13, ExpertAxis::kEp), (std::vector<int>{12, 13, 14, 15}));
    QCOMPARE(t->expert_group_of(13, ExpertAxis::kDp), (std::vector<int>{9, 13}));
  }

  void expertGroupsAgainstEnumeration_data() {
    QTest::addColumn<QString>("order");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("cp");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("ep");
    QTest::addColumn<int>("etp");
    QTest::newRow("ep spans tp and dp") << "tp-cp-dp-pp" << 2 << 1 << 4 << 2 << 8 << 1;
    QTest::newRow("ep within dp, expert_tp = tp") << "tp-cp-dp-pp" << 2 << 1 << 4 << 2 << 2 << 2;
    QTest::newRow("ep over cp and dp") << "tp-cp-dp-pp" << 2 << 2 << 2 << 2 << 4 << 2;
    QTest::newRow("ep 1: expert-dp is every rank of a stage") << "tp-cp-dp-pp" << 4 << 1 << 2 << 2 << 1 << 1;
    QTest::newRow("tp-cp-pp-dp, ep x etp = tp x cp") << "tp-cp-pp-dp" << 2 << 2 << 2 << 2 << 2 << 2;
    QTest::newRow("dp innermost") << "dp-tp-cp-pp" << 2 << 1 << 4 << 2 << 4 << 1;
  }
  void expertGroupsAgainstEnumeration() {
    // Independent of the generator: the expert coordinates as digits of the rank in the expert
    // order's mixed radix (tp -> etp, cp -> ep, dp -> edp), a group as every rank that agrees
    // on the other digits; every group inside one pipeline stage of the dense mapping.
    QFETCH(QString, order);
    QFETCH(int, tp);
    QFETCH(int, cp);
    QFETCH(int, dp);
    QFETCH(int, pp);
    QFETCH(int, ep);
    QFETCH(int, etp);
    const int world = tp * cp * dp * pp;
    const int edp = tp * cp * dp / (ep * etp);
    auto made = Topology::create(expert_spec(tp, cp, dp, pp, ep, etp, order));
    QVERIFY2(made.ok(), made.status().message().c_str());
    const Topology& t = made.value();
    // digit 0 etp, 1 ep, 2 edp, 3 pp
    std::map<Axis, int> slot{{Axis::kTp, 0}, {Axis::kCp, 1}, {Axis::kDp, 2}, {Axis::kPp, 3}};
    const int size[4] = {etp, ep, edp, pp};
    auto digits = [&](int r) {
      std::array<int, 4> d{};
      for (Axis a : axes(order)) {
        d[static_cast<size_t>(slot[a])] = r % size[slot[a]];
        r /= size[slot[a]];
      }
      return d;
    };
    const ExpertAxis eaxes[3] = {ExpertAxis::kTp, ExpertAxis::kEp, ExpertAxis::kDp};
    for (int k = 0; k < 3; ++k) {
      const Groups expected = enumerate_groups(world, [&](int r, int q) {
        bool same = true;
        for (int j = 0; j < 4; ++j) same = same && (j == k || digits(q)[static_cast<size_t>(j)] == digits(r)[static_cast<size_t>(j)]);
        return same;
      });
      QCOMPARE(t.expert_groups(eaxes[k]), expected);
      for (const auto& g : expected) {
        for (int r : g) {
          QCOMPARE(t.coord(r).pp, t.coord(g.front()).pp);
          QCOMPARE(t.expert_group_of(r, eaxes[k]), g);
        }
      }
    }
    for (int r = 0; r < world; ++r) {
      const auto d = digits(r);
      const auto c = t.coord(r);
      QCOMPARE(c.etp, d[0]);
      QCOMPARE(c.ep, d[1]);
      QCOMPARE(c.edp, d[2]);
      QCOMPARE(c.pp, d[3]);  // both mappings agree on the stage
      QCOMPARE(t.experts_of(r, 16).first, d[1] * (16 / ep));
    }
  }

  void expertFoldingRefusals() {
    TopologySpec s = expert_spec(2, 1, 2, 2, 8, 1);
    auto t = Topology::create(s);
    QVERIFY(!t.ok());
    QCOMPARE(QString::fromStdString(t.status().message()), QString("ep x expert_tp = 8 does not divide the 4 ranks of a pipeline stage (tp x cp x dp)"));
    s.ep = 4;
    s.order = axes("tp-pp-dp");
    t = Topology::create(s);
    QVERIFY(!t.ok());
    QCOMPARE(QString::fromStdString(t.status().message()),
             QString("with ep = 4 and expert_tp = 1 the expert layers' pipeline stages differ from the attention layers' under order tp-cp-pp-dp; put pp last"));
    s.ep = 2;  // ep x expert_tp = tp x cp: the same stages
    QVERIFY(Topology::create(s).ok());
    s.ep = 4;  // a dense model has no expert layers to place
    s.experts = false;
    QVERIFY(Topology::create(s).ok());
    // ep in the order text sits right after cp (or tp)
    using stagecraft::config::parse_order;
    QCOMPARE(stagecraft::config::order_text(*parse_order("tp-cp-ep-dp-pp")), std::string("tp-cp-dp-pp"));
    QCOMPARE(stagecraft::config::order_text(*parse_order("tp-ep-pp-dp")), std::string("tp-cp-pp-dp"));
    QVERIFY(!parse_order("tp-dp-ep-pp"));
    QVERIFY(!parse_order("ep-tp-dp-pp"));
    QVERIFY(!parse_order("tp-cp-ep-ep-dp-pp"));
  }

  // ---- large clusters: the closed formula and the structure ----

  void largeConfigurations_data() {
    QTest::addColumn<int>("nodes");
    QTest::addColumn<int>("gpus");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QString>("order");
    QTest::addColumn<bool>("tpSpansNodes");
    QTest::newRow("GPT-3 175B 1024x8 tp8 pp8 dp128") << 1024 << 8 << 128 << 8 << 8 << "tp-dp-pp" << false;
    QTest::newRow("1024x8 Megatron tp-pp-dp") << 1024 << 8 << 128 << 8 << 8 << "tp-pp-dp" << false;
    QTest::newRow("1024x8 dp innermost: TP strided over nodes") << 1024 << 8 << 128 << 8 << 8 << "dp-tp-pp" << true;
    QTest::newRow("1024x8 pp-dp-tp") << 1024 << 8 << 64 << 16 << 8 << "pp-dp-tp" << true;
    QTest::newRow("1024x8 tp16 spans two nodes") << 1024 << 8 << 64 << 16 << 8 << "tp-dp-pp" << true;
    QTest::newRow("1024x8 pure dp") << 1024 << 8 << 8192 << 1 << 1 << "tp-dp-pp" << false;
    QTest::newRow("1024x8 pp64 tp4 dp32 pp-tp-dp") << 1024 << 8 << 32 << 4 << 64 << "pp-tp-dp" << true;
    QTest::newRow("512x8 tp8 pp16 dp32") << 512 << 8 << 32 << 8 << 16 << "tp-dp-pp" << false;
    QTest::newRow("96x8 dp12 tp8 pp8") << 96 << 8 << 12 << 8 << 8 << "tp-pp-dp" << false;
    QTest::newRow("7x6 dp7 tp3 pp2") << 7 << 6 << 7 << 3 << 2 << "tp-dp-pp" << false;
    QTest::newRow("7x6 dp7 tp3 pp2, dp innermost") << 7 << 6 << 7 << 3 << 2 << "dp-tp-pp" << true;
    QTest::newRow("3x4 tp3 across nodes") << 3 << 4 << 2 << 3 << 2 << "tp-dp-pp" << true;
    QTest::newRow("1x1") << 1 << 1 << 1 << 1 << 1 << "tp-dp-pp" << false;
    QTest::newRow("2048x4 tp4 pp8 dp256") << 2048 << 4 << 256 << 4 << 8 << "tp-dp-pp" << false;
  }
  void largeConfigurations() {
    QFETCH(int, nodes);
    QFETCH(int, gpus);
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(QString, order);
    QFETCH(bool, tpSpansNodes);
    const Topology t = make(nodes, gpus, dp, tp, pp, order);
    const int world = nodes * gpus;
    QCOMPARE(t.world_size(), world);
    // Closed formula: rank = sum over axes of coord * stride, stride = product of inner sizes.
    std::map<Axis, int> size{{Axis::kTp, tp}, {Axis::kDp, dp}, {Axis::kPp, pp}}, stride;
    int s = 1;
    for (Axis a : axes(order)) {
      stride[a] = s;
      s *= size[a];
    }
    for (Axis a : {Axis::kTp, Axis::kDp, Axis::kPp}) {
      QCOMPARE(t.stride(a), stride[a]);
      QCOMPARE(t.size(a), size[a]);
    }
    for (int r = 0; r < world; r += std::max(1, world / 4096)) {
      const auto c = t.coord(r);
      QCOMPARE(c.tp * stride[Axis::kTp] + c.dp * stride[Axis::kDp] + c.pp * stride[Axis::kPp], r);
      QCOMPARE(c.node, r / gpus);
    }
    // Every axis's groups partition the world; members differ only along the axis, in order.
    for (Axis a : {Axis::kTp, Axis::kDp, Axis::kPp}) {
      const Groups gs = t.groups(a);
      QCOMPARE(static_cast<int>(gs.size()), world / size[a]);
      std::vector<int> owner(static_cast<size_t>(world), -1);
      for (size_t gi = 0; gi < gs.size(); ++gi) {
        const auto& g = gs[gi];
        QCOMPARE(static_cast<int>(g.size()), size[a]);
        if (gi > 0) QVERIFY(gs[gi - 1].front() < g.front());  // listed by lowest rank
        const auto c0 = t.coord(g.front());
        for (size_t i = 0; i < g.size(); ++i) {
          QVERIFY(owner[static_cast<size_t>(g[i])] == -1);
          owner[static_cast<size_t>(g[i])] = static_cast<int>(gi);
          const auto ci = t.coord(g[i]);
          QCOMPARE(a == Axis::kTp ? ci.tp : a == Axis::kDp ? ci.dp : ci.pp, static_cast<int>(i));
          if (a != Axis::kTp) QCOMPARE(ci.tp, c0.tp);
          if (a != Axis::kDp) QCOMPARE(ci.dp, c0.dp);
          if (a != Axis::kPp) QCOMPARE(ci.pp, c0.pp);
        }
      }
      QVERIFY(std::find(owner.begin(), owner.end(), -1) == owner.end());
      for (int r = 0; r < world; r += std::max(1, world / 512)) {
        const auto g = t.group_of(r, a);
        QVERIFY(g == gs[static_cast<size_t>(owner[static_cast<size_t>(r)])]);
      }
    }
    // Stages: pp rank p holds world / pp ranks, exactly those with pp coordinate p.
    for (int p = 0; p < pp; p += std::max(1, pp / 8)) {
      const auto ranks = t.stage_ranks(p);
      QCOMPARE(static_cast<int>(ranks.size()), world / pp);
      for (int r : ranks) QCOMPARE(t.coord(r).pp, p);
    }
    QCOMPARE(t.tp_spans_nodes(), tpSpansNodes);
    bool spans = false;
    for (const auto& g : t.groups(Axis::kTp)) spans = spans || t.nodes_of(g).size() > 1;
    QCOMPARE(spans, tpSpansNodes);
  }

  void nodesOfAGroup() {
    const Topology t = make(4, 2, 2, 4, 1);  // TP groups of 4 over nodes of 2
    QCOMPARE(t.nodes_of({0, 1, 2, 3}), (std::vector<int>{0, 1}));
    QCOMPARE(t.nodes_of({7, 0, 6}), (std::vector<int>{0, 3}));
    QVERIFY(t.tp_spans_nodes());
    QVERIFY(!make(4, 8, 8, 4, 1).tp_spans_nodes());
  }

  void createRefusesInconsistentSpecs_data() {
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QString>("order");
    QTest::addColumn<QString>("tpMode");
    QTest::addColumn<int>("depth");
    QTest::addColumn<QString>("message");
    QTest::newRow("product != world") << 2 << 2 << 1 << "tp-dp-pp" << "1d" << 1 << "dp x tp x pp = 4 but the cluster has 8 GPUs";
    QTest::newRow("axis twice") << 2 << 2 << 2 << "tp-tp-pp" << "1d" << 1 << "parallel.order must name each of tp, cp, dp and pp at most once";
    QTest::newRow("cp twice") << 2 << 2 << 2 << "cp-tp-cp-dp-pp" << "1d" << 1 << "parallel.order must name each of tp, cp, dp and pp at most once";
    QTest::newRow("2d, tp not square") << 4 << 2 << 1 << "tp-dp-pp" << "2d" << 1 << "tp=2 does not form the grid of tp_mode 2d";
    QTest::newRow("3d, tp not cube") << 2 << 4 << 1 << "tp-dp-pp" << "3d" << 1 << "tp=4 does not form the grid of tp_mode 3d";
    QTest::newRow("2.5d, depth does not divide") << 1 << 8 << 1 << "tp-dp-pp" << "2.5d" << 3 << "tp=8 does not form the grid of tp_mode 2.5d";
    QTest::newRow("zero size") << 0 << 8 << 1 << "tp-dp-pp" << "1d" << 1 << "dp, tp, cp and pp must be at least 1";
  }
  void createRefusesInconsistentSpecs() {
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(QString, order);
    QFETCH(QString, tpMode);
    QFETCH(int, depth);
    QFETCH(QString, message);
    TopologySpec s;
    s.nodes = 1;
    s.gpus_per_node = 8;
    s.dp = dp;
    s.tp = tp;
    s.pp = pp;
    s.order = axes(order);
    s.tp_mode = mode(tpMode);
    s.tp_depth = depth;
    auto t = Topology::create(s);
    QVERIFY(!t.ok());
    QCOMPARE(QString::fromStdString(t.status().message()), message);
  }
};

QTEST_APPLESS_MAIN(TestTopology)
#include "tst_topology.moc"
