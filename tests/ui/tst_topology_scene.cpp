// TopologyScene and TopologyView: the groups drawn match the engine's topology, selection
// highlights exactly a rank's groups, tiles take their stage's colour (also as rendered pixels),
// hover and click through real mouse events on the view, export, and 1024 x 8 GPUs.
#include <QElapsedTimer>
#include <QHelpEvent>
#include <QImage>
#include <QPainter>
#include <QScrollBar>
#include <QSignalSpy>
#include <QSvgRenderer>
#include <QTemporaryDir>
#include <QToolTip>
#include <QtTest>

#include "common/StageColors.h"
#include "topology/TopologyItems.h"
#include "topology/TopologyScene.h"
#include "topology/TopologyView.h"
#include "views_test_plans.h"

using stagecraft::config::Axis;
using Groups = QList<QList<int>>;

namespace {

Groups toGroups(const std::vector<std::vector<int>>& v) {
  Groups g;
  for (const auto& x : v) g.append(QList<int>(x.begin(), x.end()));
  return g;
}

// Renders the scene's rectangle `source` at `scale` pixels per scene unit without antialiasing.
QImage renderScene(QGraphicsScene* scene, const QRectF& source, double scale) {
  QImage image((source.size() * scale).toSize(), QImage::Format_RGB32);
  image.fill(Qt::white);
  QPainter p(&image);
  scene->render(&p, QRectF(QPointF(0, 0), QSizeF(image.size())), source, Qt::IgnoreAspectRatio);
  return image;
}

}  // namespace

class TestTopologyScene : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void outlinedTpGroups_data();
  void outlinedTpGroups();
  void selectRankHighlightsItsGroups();
  void contextParallelGroupsLitInTheirColour();
  void expertParallelGroupLitAndExpertsListed();
  void selectionClearsAndSurvivesReplan();
  void tileColourIsStageColour_data();
  void tileColourIsStageColour();
  void renderedTilesHaveStageColour();
  void rankAtInvertsTileRect();
  void tooltipNamesCoordinates();
  void colossal2dSubgroupsListed();
  void viewClickSelectsAndHoverReports();
  void viewDragPansWithoutSelecting();
  void viewZoomKeysAndWheel();
  void exportWritesFiles();
  void exportRefusesUnknownSuffix();
  void largeClusterSetPlan();
  void changedGroupsAgainstPinned_data();
  void changedGroupsAgainstPinned();
};

void TestTopologyScene::outlinedTpGroups_data() {
  QTest::addColumn<int>("nodes");
  QTest::addColumn<int>("gpus");
  QTest::addColumn<int>("dp");
  QTest::addColumn<int>("tp");
  QTest::addColumn<int>("pp");
  QTest::addColumn<QString>("order");
  QTest::addColumn<Groups>("expected");

  QTest::newRow("design worked example dp=tp=pp=2 tp-dp-pp")
      << 1 << 8 << 2 << 2 << 2 << "tp-dp-pp" << Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  QTest::newRow("paddle order tp-pp-dp") << 1 << 8 << 2 << 2 << 2 << "tp-pp-dp" << Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  QTest::newRow("tp strided: order dp-tp-pp") << 1 << 8 << 2 << 2 << 2 << "dp-tp-pp" << Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  QTest::newRow("libai dp=2 tp=4") << 1 << 8 << 2 << 4 << 1 << "tp-dp-pp" << Groups{{0, 1, 2, 3}, {4, 5, 6, 7}};
  QTest::newRow("tp spans nodes: 4 nodes x 2, tp=4")
      << 4 << 2 << 2 << 4 << 1 << "tp-dp-pp" << Groups{{0, 1, 2, 3}, {4, 5, 6, 7}};
  QTest::newRow("2 nodes x 8, tp=8 pp=2") << 2 << 8 << 1 << 8 << 2 << "tp-dp-pp"
                                          << Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  QTest::newRow("pp innermost: order pp-tp-dp tp=2 pp=2 dp=2")
      << 1 << 8 << 2 << 2 << 2 << "pp-tp-dp" << Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  QTest::newRow("tp=1 outlines nothing") << 1 << 8 << 8 << 1 << 1 << "tp-dp-pp" << Groups{};
}

void TestTopologyScene::outlinedTpGroups() {
  QFETCH(int, nodes);
  QFETCH(int, gpus);
  QFETCH(int, dp);
  QFETCH(int, tp);
  QFETCH(int, pp);
  QFETCH(QString, order);
  QFETCH(Groups, expected);
  bool ok = false;
  const auto plan = views_test::makePlan(nodes, gpus, dp, tp, pp, order.toStdString(), {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  QCOMPARE(scene.outlinedTpGroups(), expected);
  // Whatever the layout, the outlines are the engine's TP groups.
  if (tp > 1) QCOMPARE(scene.outlinedTpGroups(), toGroups(plan.topology.groups(Axis::kTp)));
}

void TestTopologyScene::contextParallelGroupsLitInTheirColour() {
  // 16 GPUs tp 2 x cp 2 x dp 2 x pp 2, Megatron-Core's order: rank 13 = tp 1, cp 0, dp 1, pp 1.
  bool ok = false;
  const auto plan = views_test::makePlan(2, 8, 2, 2, 2, "tp-cp-dp-pp", {"parallel.cp=2"}, &ok);
  QVERIFY(ok);
  QCOMPARE(plan.cp, 2);
  TopologyScene scene;
  scene.setPlan(plan);
  QCOMPARE(static_cast<int>(scene.axisMarks().size()), 4);
  scene.selectRank(13);
  QCOMPARE(scene.highlightedGroups(), (Groups{{12, 13}, {9, 13}, {5, 13}, {13, 15}}));  // TP, DP, PP, CP
  QCOMPARE(scene.highlight(15), uint8_t(TopologyScene::kInCp));
  QCOMPARE(scene.highlight(9), uint8_t(TopologyScene::kInDp));
  QCOMPARE(scene.highlight(13), uint8_t(TopologyScene::kInTp | TopologyScene::kInDp | TopologyScene::kInPp | TopologyScene::kInCp |
                                        TopologyScene::kIsSelected));
  QCOMPARE(scene.highlight(14), uint8_t{0});
  QVERIFY(scene.infoText().contains(QStringLiteral("CP [13,15]")));
  QVERIFY(scene.rankToolTip(13).contains(QStringLiteral("cp 0")));
  // Each axis its own colour, none shared.
  QSet<QRgb> colours;
  for (const auto& m : scene.axisMarks()) colours.insert(m.color.rgb());
  QCOMPARE(colours.size(), 4);
  // Without cp the CP mark is not listed.
  const auto flat = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  scene.setPlan(flat);
  QCOMPARE(static_cast<int>(scene.axisMarks().size()), 3);
}

void TestTopologyScene::expertParallelGroupLitAndExpertsListed() {
  // docs/ARCHITECTURE.md §4's example: 16 GPUs, tp 2 x dp 4 x pp 2, ep 4 over 8 experts. EP
  // [0,1,2,3] [4,5,6,7] ..., expert-DP [0,4] [1,5] ...; rank 5 (ep rank 1) holds experts 2 and 3.
  bool ok = false;
  const auto plan = views_test::makePlan(2, 8, 4, 2, 2, "tp-cp-dp-pp", {"model.arch=llama", "model.moe.experts=8", "parallel.ep=4"}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  const auto marks = scene.axisMarks();
  QCOMPARE(static_cast<int>(marks.size()), 4);
  QCOMPARE(QString::fromLatin1(marks.back().name), QStringLiteral("EP"));
  QVERIFY(marks.back().expert);
  scene.selectRank(5);
  QCOMPARE(scene.highlightedGroups(), (Groups{{4, 5}, {1, 3, 5, 7}, {5, 13}, {4, 5, 6, 7}}));  // TP, DP, PP, EP
  QCOMPARE(scene.highlight(6), uint8_t(TopologyScene::kInEp));
  QCOMPARE(scene.highlight(4), uint8_t(TopologyScene::kInTp | TopologyScene::kInEp));
  QCOMPARE(scene.highlight(3), uint8_t(TopologyScene::kInDp));
  QCOMPARE(scene.highlight(0), uint8_t{0});
  QVERIFY2(scene.infoText().contains(QStringLiteral("\nEP [4,5,6,7]\n")), qPrintable(scene.infoText()));
  QVERIFY2(scene.infoText().contains(QStringLiteral("experts 2-3 of 8 (ep rank 1), expert-DP group [1,5]")), qPrintable(scene.infoText()));
  QVERIFY2(scene.rankToolTip(13).contains(QStringLiteral("experts 2-3 of 8 (ep rank 1)")), qPrintable(scene.rankToolTip(13)));
  QCOMPARE(scene.expertsText(0), QStringLiteral("experts 0-1 of 8 (ep rank 0)"));
  QCOMPARE(scene.expertsText(15), QStringLiteral("experts 6-7 of 8 (ep rank 3)"));

  // Rendered: the EP mark, in its own colour, along the bottom of every tile of the group and of
  // no other; the legend explains it.
  const QColor ep = marks.back().color;
  QSet<QRgb> colours;
  for (const auto& m : marks) colours.insert(m.color.rgb());
  QCOMPARE(colours.size(), 4);
  const QRectF source = scene.sceneRect();
  const QImage image = renderScene(&scene, source, 1.0);
  auto epMarkPixel = [&](int r) {
    const QRectF t = scene.tileRect(r);
    const double w = t.width() / static_cast<double>(marks.size() + 1);
    const double height = std::max(2.0, t.height() * 0.08);
    const QPointF centre(t.left() + w * 3.5 + w * 0.45, t.bottom() - 1.5 * height);
    return QColor(image.pixel((centre - source.topLeft()).toPoint()));
  };
  for (int r = 0; r < 16; ++r) QCOMPARE(epMarkPixel(r) == ep, r >= 4 && r <= 7);
  auto legendPixels = [&](const QColor& c) {
    for (QGraphicsItem* item : scene.items()) {
      if (item->type() != TopologyLegendItem::Type) continue;
      const QRectF r = item->sceneBoundingRect();
      const QImage legend = renderScene(&scene, r, 1.0);
      int n = 0;
      for (int y = 0; y < legend.height(); ++y)
        for (int x = 0; x < legend.width(); ++x) n += QColor(legend.pixel(x, y)) == c;
      return n;
    }
    return -1;
  };
  QVERIFY(legendPixels(ep) > 0);

  // Experts on every rank (ep 1): no EP mark, the experts still listed.
  const auto whole = views_test::makePlan(2, 8, 4, 2, 2, "tp-cp-dp-pp", {"model.arch=llama", "model.moe.experts=8"}, &ok);
  QVERIFY(ok);
  scene.setPlan(whole);
  QCOMPARE(static_cast<int>(scene.axisMarks().size()), 3);
  QCOMPARE(scene.selectedRank(), 5);
  QVERIFY2(scene.infoText().contains(QStringLiteral("experts 0-7 of 8 (no expert parallelism), expert-DP group [0,1,2,3,4,5,6,7]")),
           qPrintable(scene.infoText()));
  QCOMPARE(legendPixels(ep), 0);
  // A dense model lists no experts.
  scene.setPlan(views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok));
  QVERIFY(!scene.infoText().contains(QStringLiteral("expert")));
  QVERIFY(scene.expertsText(5).isEmpty());
}

void TestTopologyScene::selectRankHighlightsItsGroups() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  QSignalSpy spy(&scene, &TopologyScene::rankSelected);
  QCOMPARE(scene.selectedRank(), -1);
  QVERIFY(scene.highlightedGroups().isEmpty());

  scene.selectRank(5);
  QCOMPARE(scene.selectedRank(), 5);
  QCOMPARE(spy.count(), 1);
  QCOMPARE(spy.at(0).at(0).toInt(), 5);
  // docs/ARCHITECTURE.md §4's worked example: rank 5 is in TP [4,5], DP [5,7], PP [1,5].
  QCOMPARE(scene.highlightedGroups(), (Groups{{4, 5}, {5, 7}, {1, 5}}));
  // Exactly those ranks are drawn bright; the others dimmed.
  const QList<int> bright{1, 4, 5, 7};
  for (int r = 0; r < 8; ++r) {
    if (bright.contains(r)) {
      QVERIFY2(scene.highlight(r) != 0, qPrintable(QString("rank %1").arg(r)));
      QCOMPARE(scene.tileFill(r), scene.tileColor(r));
    } else {
      QCOMPARE(scene.highlight(r), uint8_t{0});
      QCOMPARE(scene.tileFill(r), dimmedColor(scene.tileColor(r)));
      QVERIFY(scene.tileFill(r) != scene.tileColor(r));
    }
  }
  QCOMPARE(scene.highlight(4), uint8_t(TopologyScene::kInTp));
  QCOMPARE(scene.highlight(7), uint8_t(TopologyScene::kInDp));
  QCOMPARE(scene.highlight(1), uint8_t(TopologyScene::kInPp));
  QCOMPARE(scene.highlight(5), uint8_t(TopologyScene::kInTp | TopologyScene::kInDp | TopologyScene::kInPp | TopologyScene::kIsSelected));

  scene.selectRank(5);  // unchanged: no signal
  QCOMPARE(spy.count(), 1);
}

void TestTopologyScene::selectionClearsAndSurvivesReplan() {
  bool ok = false;
  const auto plan8 = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  const auto plan4 = views_test::makePlan(1, 4, 2, 2, 1, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan8);
  scene.selectRank(3);
  // A new layout on the same cluster keeps the rank and recomputes its groups.
  const auto tp4 = views_test::makePlan(1, 8, 2, 4, 1, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  scene.setPlan(tp4);
  QCOMPARE(scene.selectedRank(), 3);
  QCOMPARE(scene.highlightedGroups().at(0), (QList<int>{0, 1, 2, 3}));
  // A smaller world where rank 6 no longer exists clears the selection.
  scene.selectRank(6);
  QSignalSpy spy(&scene, &TopologyScene::rankSelected);
  scene.setPlan(plan4);
  QCOMPARE(scene.selectedRank(), -1);
  QCOMPARE(spy.count(), 1);
  QCOMPARE(spy.at(0).at(0).toInt(), -1);
  scene.selectRank(99);  // out of range: stays cleared
  QCOMPARE(scene.selectedRank(), -1);
}

void TestTopologyScene::tileColourIsStageColour_data() {
  QTest::addColumn<int>("pp");
  QTest::addColumn<QString>("order");
  QTest::newRow("pp=2 tp-dp-pp") << 2 << "tp-dp-pp";
  QTest::newRow("pp=4 pp innermost") << 4 << "pp-dp-tp";
  QTest::newRow("pp=8") << 8 << "tp-dp-pp";
}

void TestTopologyScene::tileColourIsStageColour() {
  QFETCH(int, pp);
  QFETCH(QString, order);
  bool ok = false;
  const auto plan = views_test::makePlan(2, 8, 16 / pp, 1, pp, order.toStdString(), {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  QSet<QRgb> colours;
  for (int r = 0; r < 16; ++r) {
    QCOMPARE(scene.tileColor(r), stageColor(plan.topology.coord(r).pp));
    colours.insert(scene.tileColor(r).rgb());
  }
  QCOMPARE(colours.size(), pp);  // one distinct colour per stage
}

void TestTopologyScene::renderedTilesHaveStageColour() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  // Scale 1 (labels drawn): sample a point left of the centred text, inside the outline.
  // Scale 0.2 (flat tiles): sample the tile's centre.
  for (double scale : {1.0, 0.2}) {
    const QRectF source = scene.sceneRect();
    const QImage image = renderScene(&scene, source, scale);
    for (int r = 0; r < 8; ++r) {
      const QRectF t = scene.tileRect(r);
      const QPointF sample = scale >= 1.0 ? QPointF(t.left() + 5, t.center().y()) : t.center();
      const QPoint px = ((sample - source.topLeft()) * scale).toPoint();
      QCOMPARE(QColor(image.pixel(px)), stageColor(plan.topology.coord(r).pp));
    }
  }
  // With rank 5 selected, rank 0 is rendered dimmed and rank 4 bright.
  scene.selectRank(5);
  const QImage image = renderScene(&scene, scene.sceneRect(), 1.0);
  auto pixelOf = [&](int r) {
    const QRectF t = scene.tileRect(r);
    return QColor(image.pixel(((QPointF(t.left() + 5, t.center().y()) - scene.sceneRect().topLeft())).toPoint()));
  };
  QCOMPARE(pixelOf(0), dimmedColor(stageColor(0)));
  QCOMPARE(pixelOf(4), stageColor(1));
}

void TestTopologyScene::rankAtInvertsTileRect() {
  bool ok = false;
  const auto plan = views_test::makePlan(3, 6, 9, 2, 1, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  for (int r = 0; r < 18; ++r) {
    const QRectF t = scene.tileRect(r);
    QCOMPARE(scene.rankAt(t.center()), r);
    QCOMPARE(scene.rankAt(t.topLeft() + QPointF(1, 1)), r);
    QCOMPARE(scene.rankAt(t.bottomRight() - QPointF(1, 1)), r);
    // The gap right of a tile and the panel header belong to no rank.
    QCOMPARE(scene.rankAt(QPointF(t.right() + TopologyScene::kTileGap / 2, t.center().y())), -1);
    QVERIFY(scene.nodeRect(r / 6).contains(t));
  }
  QCOMPARE(scene.rankAt(scene.nodeRect(0).topLeft() + QPointF(2, 2)), -1);
  QCOMPARE(scene.rankAt(QPointF(-5, -5)), -1);
}

void TestTopologyScene::tooltipNamesCoordinates() {
  bool ok = false;
  const auto plan = views_test::makePlan(2, 4, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  // Rank 6: node 1, local 2; tp 0, dp 1, pp 1; pp rank 1 holds layers 4-7 and the head.
  const QString tip = scene.rankToolTip(6);
  QVERIFY2(tip.contains("Rank 6"), qPrintable(tip));
  QVERIFY2(tip.contains("node 1, local rank 2"), qPrintable(tip));
  QVERIFY2(tip.contains("dp 1 · tp 0 · pp 1"), qPrintable(tip));
  QVERIFY2(tip.contains("stage 1: layers 4-7 + head, loss"), qPrintable(tip));
  QVERIFY(scene.rankToolTip(0).contains("stage 0: layers 0-3 + embedding"));
  QVERIFY(scene.rankToolTip(8).isEmpty());
}

void TestTopologyScene::colossal2dSubgroupsListed() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 4, 1, "tp-dp-pp", {"parallel.tp_mode=2d"}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(plan);
  QVERIFY(scene.selectedSubgroups().isEmpty());
  // 2d: tp rank t = i + 2 j; rank 5 is tp 1 of the group [4..7]: row (vary i) [4,5], column
  // (vary j) [5,7].
  scene.selectRank(5);
  const QStringList sub = scene.selectedSubgroups();
  QVERIFY2(sub.contains("row [4,5]"), qPrintable(sub.join(" | ")));
  QVERIFY2(sub.contains("column [5,7]"), qPrintable(sub.join(" | ")));
  QVERIFY(scene.rankToolTip(5).contains("tensor grid i 1 · j 0"));
  // The tiles carry the marks: 4 shares the row, 7 the column, 5 both, 6 neither; other TP
  // groups none.
  QCOMPARE(scene.subgroupMarks(5), QString("rc"));
  QCOMPARE(scene.subgroupMarks(4), QString("r"));
  QCOMPARE(scene.subgroupMarks(7), QString("c"));
  QCOMPARE(scene.subgroupMarks(6), QString());
  QCOMPARE(scene.subgroupMarks(1), QString());
  // Drawn: each family's frame inside the tiles of the selected rank's sub-group (row frames
  // one pen width in, column frames two), rendered at 4 pixels per scene unit.
  QCOMPARE(scene.tensorFamilies(), QStringList({"row", "column"}));
  QCOMPARE(int(scene.subgroupMask(4)), 1);
  QCOMPARE(int(scene.subgroupMask(7)), 2);
  const double scale = 4.0;
  const QImage image = renderScene(&scene, scene.sceneRect(), scale);
  auto ringPixel = [&](int rank, int family) {
    const QRectF t = scene.tileRect(rank);
    const double in = TopologyNodeItem::kSubgroupPen * (family + 1);
    const QPointF at(t.center().x(), t.top() + in);
    return QColor(image.pixel(((at - scene.sceneRect().topLeft()) * scale).toPoint()));
  };
  QCOMPARE(ringPixel(4, 0), TopologyNodeItem::subgroupColor(0));
  QCOMPARE(ringPixel(7, 1), TopologyNodeItem::subgroupColor(1));
  QVERIFY(ringPixel(7, 0) != TopologyNodeItem::subgroupColor(0));  // 7 is not in 5's row
  QVERIFY(ringPixel(6, 0) != TopologyNodeItem::subgroupColor(0));
  QVERIFY(ringPixel(6, 1) != TopologyNodeItem::subgroupColor(1));
  // 1d lists none.
  const auto plain = views_test::makePlan(1, 8, 2, 4, 1, "tp-dp-pp", {}, &ok);
  scene.setPlan(plain);
  QVERIFY(scene.selectedSubgroups().isEmpty());
  QCOMPARE(scene.subgroupMarks(5), QString());
  QVERIFY(scene.tensorFamilies().isEmpty());
  QCOMPARE(int(scene.subgroupMask(5)), 0);
}

void TestTopologyScene::viewClickSelectsAndHoverReports() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyView view;
  view.resize(900, 700);
  view.show();
  QVERIFY(QTest::qWaitForWindowExposed(&view));
  view.setPlan(plan);
  TopologyScene* scene = view.topologyScene();
  QSignalSpy selected(scene, &TopologyScene::rankSelected);
  QSignalSpy hovered(scene, &TopologyScene::rankHovered);

  const QPoint at5 = view.mapFromScene(scene->tileRect(5).center());
  QTest::mouseClick(view.viewport(), Qt::LeftButton, Qt::NoModifier, at5);
  QCOMPARE(scene->selectedRank(), 5);
  QCOMPARE(selected.count(), 1);
  QCOMPARE(selected.at(0).at(0).toInt(), 5);
  QCOMPARE(scene->highlightedGroups(), (Groups{{4, 5}, {5, 7}, {1, 5}}));

  const QPoint at3 = view.mapFromScene(scene->tileRect(3).center());
  QTest::mouseMove(view.viewport(), at3);
  QTRY_COMPARE(scene->hoveredRank(), 3);
  QVERIFY(!hovered.isEmpty());
  QCOMPARE(hovered.last().at(0).toInt(), 3);

  // The tooltip shown for a help event over rank 3.
  QHelpEvent help(QEvent::ToolTip, at3, view.viewport()->mapToGlobal(at3));
  QApplication::sendEvent(view.viewport(), &help);
  QTRY_VERIFY(QToolTip::isVisible());
  QVERIFY2(QToolTip::text().startsWith("Rank 3\n"), qPrintable(QToolTip::text()));

  // Clicking empty space clears the selection.
  const QPoint outside = view.mapFromScene(scene->nodeRect(0).bottomRight() + QPointF(5, 5));
  QTest::mouseClick(view.viewport(), Qt::LeftButton, Qt::NoModifier, outside);
  QCOMPARE(scene->selectedRank(), -1);
  QCOMPARE(selected.last().at(0).toInt(), -1);
}

void TestTopologyScene::viewDragPansWithoutSelecting() {
  bool ok = false;
  const auto plan = views_test::makePlan(16, 8, 32, 4, 1, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyView view;
  view.resize(500, 400);
  view.show();
  QVERIFY(QTest::qWaitForWindowExposed(&view));
  view.setPlan(plan);
  // Zoom in far enough that the drawing is larger than the window and can be panned.
  for (int i = 0; i < 8; ++i) view.zoomIn();
  QVERIFY(view.horizontalScrollBar()->maximum() > 0);
  view.horizontalScrollBar()->setValue(view.horizontalScrollBar()->maximum() / 2);
  view.verticalScrollBar()->setValue(view.verticalScrollBar()->maximum() / 2);
  const int h0 = view.horizontalScrollBar()->value();
  const int v0 = view.verticalScrollBar()->value();
  const QPoint start(250, 200);
  QTest::mousePress(view.viewport(), Qt::LeftButton, Qt::NoModifier, start);
  QTest::mouseMove(view.viewport(), start + QPoint(20, 0));
  QTest::mouseMove(view.viewport(), start + QPoint(60, 30));
  QTest::mouseRelease(view.viewport(), Qt::LeftButton, Qt::NoModifier, start + QPoint(60, 30));
  QCOMPARE(view.horizontalScrollBar()->value(), h0 - 60);
  QCOMPARE(view.verticalScrollBar()->value(), v0 - 30);
  QCOMPARE(view.topologyScene()->selectedRank(), -1);
}

void TestTopologyScene::viewZoomKeysAndWheel() {
  bool ok = false;
  const auto plan = views_test::makePlan(4, 8, 8, 4, 1, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyView view;
  view.resize(600, 500);
  view.show();
  QVERIFY(QTest::qWaitForWindowExposed(&view));
  view.setPlan(plan);
  const double fit = view.zoom();
  // Fitting shows the whole scene.
  const QRectF visible = view.mapToScene(view.viewport()->rect()).boundingRect();
  QVERIFY(visible.adjusted(-1, -1, 1, 1).contains(view.topologyScene()->itemsBoundingRect()));
  QTest::keyClick(&view, Qt::Key_Plus, Qt::ControlModifier);
  QVERIFY(qAbs(view.zoom() - fit * 1.25) < 1e-9);
  QTest::keyClick(&view, Qt::Key_Minus, Qt::ControlModifier);
  QTest::keyClick(&view, Qt::Key_Minus, Qt::ControlModifier);
  QVERIFY(qAbs(view.zoom() - fit / 1.25) < 1e-9);
  QTest::keyClick(&view, Qt::Key_0, Qt::ControlModifier);
  QVERIFY(qAbs(view.zoom() - fit) < 1e-9);
  QWheelEvent wheel(QPointF(300, 250), view.viewport()->mapToGlobal(QPointF(300, 250)), QPoint(), QPoint(0, 240),
                    Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(view.viewport(), &wheel);
  QVERIFY(qAbs(view.zoom() - fit * 1.25 * 1.25) < 1e-9);
}


void TestTopologyScene::exportWritesFiles() {
  bool ok = false;
  const auto plan = views_test::makePlan(2, 8, 4, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyView view;
  view.setPlan(plan);
  view.topologyScene()->selectRank(3);
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  QString error;
  const QString png = dir.filePath("topology.png");
  QVERIFY2(view.exportImage(png, &error), qPrintable(error));
  QImage image(png);
  QVERIFY(!image.isNull());
  QVERIFY(image.width() > 100 && image.height() > 100);
  // The image holds the stage colours, not a blank page.
  const QRectF t = view.topologyScene()->tileRect(3);
  Q_UNUSED(t);
  bool sawStage0 = false, sawStage1 = false;
  for (int y = 0; y < image.height(); y += 3)
    for (int x = 0; x < image.width(); x += 3) {
      const QRgb c = image.pixel(x, y) & 0xFFFFFF;
      sawStage0 |= c == (stageColor(0).rgb() & 0xFFFFFF);
      sawStage1 |= c == (stageColor(1).rgb() & 0xFFFFFF);
    }
  QVERIFY(sawStage0 && sawStage1);

  const QString svg = dir.filePath("topology.svg");
  QVERIFY2(view.exportImage(svg, &error), qPrintable(error));
  QTest::failOnWarning(QRegularExpression(".*"));  // the renderer understands every element
  QSvgRenderer renderer(svg);
  QVERIFY(renderer.isValid());
  QFile f(svg);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const QByteArray text = f.readAll();
  QVERIFY(text.contains("<svg"));
  QVERIFY(text.contains(stageColor(1).name().toLatin1()));  // the tiles' fill is in the vector file
}

void TestTopologyScene::exportRefusesUnknownSuffix() {
  bool ok = false;
  const auto plan = views_test::makePlan(1, 8, 2, 2, 2, "tp-dp-pp", {}, &ok);
  QVERIFY(ok);
  TopologyView view;
  view.setPlan(plan);
  QTemporaryDir dir;
  QString error;
  QVERIFY(!view.exportImage(dir.filePath("topology.bmp"), &error));
  QVERIFY2(error.contains(".png or .svg"), qPrintable(error));
  QVERIFY(!QFile::exists(dir.filePath("topology.bmp")));
  QVERIFY(!view.exportImage(dir.filePath("missing/folder/topology.png"), &error));
  QVERIFY2(error.contains("topology.png"), qPrintable(error));
}

// Pinned against current: the axes on which every rank's group changed (the same for every rank
// in these layouts), and the orange corner drawn on changed tiles only.
void TestTopologyScene::changedGroupsAgainstPinned_data() {
  QTest::addColumn<QList<int>>("pinned");   // nodes, gpus, dp, tp, pp
  QTest::addColumn<QString>("pinnedOrder");
  QTest::addColumn<QList<int>>("current");
  QTest::addColumn<QString>("currentOrder");
  QTest::addColumn<int>("changed");         // TopologyScene::kInTp | kInDp | kInPp of every rank
  QTest::newRow("the same plan") << QList<int>{1, 8, 2, 2, 2} << "tp-dp-pp" << QList<int>{1, 8, 2, 2, 2} << "tp-dp-pp" << 0;
  // tp-pp-dp: DP [0,4] [1,5] ... instead of [0,2] [1,3] ...; PP [0,2] ... instead of [0,4] ...
  QTest::newRow("order tp-dp-pp to tp-pp-dp") << QList<int>{1, 8, 2, 2, 2} << "tp-dp-pp" << QList<int>{1, 8, 2, 2, 2} << "tp-pp-dp"
                                              << int(TopologyScene::kInDp | TopologyScene::kInPp);
  // tp 2 -> 4 on 16 GPUs, pp 2 both: TP and DP groups change, PP stays [r, r+8].
  QTest::newRow("tp 2 to 4, pp kept") << QList<int>{2, 8, 4, 2, 2} << "tp-dp-pp" << QList<int>{2, 8, 2, 4, 2} << "tp-dp-pp"
                                      << int(TopologyScene::kInTp | TopologyScene::kInDp);
  QTest::newRow("another world size") << QList<int>{1, 8, 2, 2, 2} << "tp-dp-pp" << QList<int>{2, 8, 4, 2, 2} << "tp-dp-pp"
                                      << int(TopologyScene::kInTp | TopologyScene::kInDp | TopologyScene::kInPp);
}

void TestTopologyScene::changedGroupsAgainstPinned() {
  QFETCH(QList<int>, pinned);
  QFETCH(QString, pinnedOrder);
  QFETCH(QList<int>, current);
  QFETCH(QString, currentOrder);
  QFETCH(int, changed);
  bool ok = false;
  const auto then = views_test::makePlan(pinned[0], pinned[1], pinned[2], pinned[3], pinned[4], pinnedOrder.toStdString(), {}, &ok);
  QVERIFY(ok);
  const auto now = views_test::makePlan(current[0], current[1], current[2], current[3], current[4], currentOrder.toStdString(), {}, &ok);
  QVERIFY(ok);
  TopologyScene scene;
  scene.setPlan(now);
  QCOMPARE(scene.changedRankCount(), 0);  // nothing pinned
  scene.setPinnedPlan(&then);
  const int world = now.topology.world_size();
  for (int r = 0; r < world; ++r) QCOMPARE(int(scene.changedGroups(r)), changed);
  QCOMPARE(scene.changedRankCount(), changed ? world : 0);
  // The mark: the tile's top-right corner is orange exactly when the rank changed.
  const QImage image = renderScene(&scene, scene.sceneRect(), 1.0);
  const QRectF t = scene.tileRect(0);
  const QColor corner(image.pixel((QPointF(t.right() - 2, t.top() + 2) - scene.sceneRect().topLeft()).toPoint()));
  QCOMPARE(corner == QColor(0xFF, 0x8C, 0x00), changed != 0);
  // A re-plan keeps the comparison; unpinning ends it.
  scene.setPlan(then);
  QCOMPARE(scene.changedRankCount(), 0);
  scene.setPinnedPlan(nullptr);
  QVERIFY(!scene.hasPinnedPlan());
}

void TestTopologyScene::largeClusterSetPlan() {
  bool ok = false;
  const auto plan = views_test::examplePlan("gpt3-175b-1024x8", {}, &ok);
  QVERIFY(ok);
  QCOMPARE(plan.topology.world_size(), 8192);
  TopologyView view;
  view.resize(1000, 800);
  QElapsedTimer timer;
  timer.start();
  view.setPlan(plan);
  const qint64 first = timer.nsecsElapsed();
  timer.restart();
  view.setPlan(plan);  // a re-plan of the same cluster reuses the node items
  const qint64 again = timer.nsecsElapsed();
  qInfo("setPlan 1024 x 8 GPUs: first %.2f ms, again %.2f ms", first / 1e6, again / 1e6);
  TopologyScene* scene = view.topologyScene();
  QCOMPARE(scene->outlinedTpGroups().size(), 1024);
  QCOMPARE(scene->outlinedTpGroups(), toGroups(plan.topology.groups(Axis::kTp)));
  QCOMPARE(scene->rankAt(scene->tileRect(8191).center()), 8191);
  QCOMPARE(scene->tileColor(8191), stageColor(7));
  // One frame of the whole drawing at fit-to-window scale paints.
  QImage frame(view.viewport()->size(), QImage::Format_RGB32);
  timer.restart();
  {
    QPainter p(&frame);
    view.render(&p);
  }
  qInfo("one frame of 8192 GPUs at fit zoom: %.2f ms", timer.nsecsElapsed() / 1e6);
}

QTEST_MAIN(TestTopologyScene)
#include "tst_topology_scene.moc"
