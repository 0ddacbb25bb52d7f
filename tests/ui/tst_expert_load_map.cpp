// tst_expert_load_map: the Runs view's expert heat map fed synthetic step events — the counts
// summed per (layer, expert) over ranks and steps, shares and dropped tokens, rows that do not
// count skipped, batches folded as one, and the painted cells (pixels) and tooltips saying what
// was fed.
#include <QImage>
#include <QtTest>

#include "runs/ExpertLoadMap.h"

namespace store = stagecraft::store;

namespace {

store::EventRow step(int rank, const QString& json) { return {rank, 0.0, "step", json.toStdString()}; }

// Two pipeline stages of a 4-expert model: rank 0 holds MoE layers 1 and 2, rank 1 layer 3
// (layer 0 dense); two steps each, and rank 2 (rank 0's data-parallel peer) one step.
std::vector<store::EventRow> events() {
  return {
      step(0, R"({"event":"step","rank":0,"step":1,"loss":3.1,"moe_layers":[1,2],"moe_load":[[10,20,30,40],[25,25,25,25]],"moe_dropped":3})"),
      step(1, R"({"event":"step","rank":1,"step":1,"loss":3.1,"moe_layers":[3],"moe_load":[[0,0,0,100]]})"),
      {0, 0.0, "timing", R"({"event":"timing","rank":0,"step":1})"},
      step(0, R"({"event":"step","rank":0,"step":2,"moe_layers":[1,2],"moe_load":[[10,20,30,40],[25,25,25,25]],"moe_dropped":2})"),
      step(1, R"({"event":"step","rank":1,"step":2,"moe_layers":[3],"moe_load":[[0,0,0,100]]})"),
      step(2, R"({"event":"step","rank":2,"step":1,"moe_layers":[1,2],"moe_load":[[80,0,0,0],[0,0,0,0]]})"),
      // Not counted: a dense step, a row of another width, a negative count, and no JSON at all.
      step(3, R"({"event":"step","rank":3,"step":1,"loss":3.0})"),
      step(3, R"({"event":"step","rank":3,"step":2,"moe_layers":[1],"moe_load":[[1,2,3]]})"),
      step(3, R"({"event":"step","rank":3,"step":3,"moe_layers":[2],"moe_load":[[1,-2,3,4]]})"),
      step(3, "not json"),
  };
}

}  // namespace

class TestExpertLoadMap : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void countsSumOverRanksAndSteps() {
    ExpertLoadMap map;
    QVERIFY(map.isEmpty());
    QVERIFY(map.caption().startsWith(QStringLiteral("No expert load recorded")));
    map.applyEvents(events());
    QCOMPARE(map.layers(), (QList<int>{1, 2, 3}));
    QCOMPARE(map.experts(), 4);
    QCOMPARE(map.tokens(1, 0), 100);  // 10 + 10 + 80
    QCOMPARE(map.tokens(1, 3), 80);
    QCOMPARE(map.tokens(2, 2), 50);   // the negative count's row is skipped
    QCOMPARE(map.tokens(3, 3), 200);
    QCOMPARE(map.tokens(3, 0), 0);
    QCOMPARE(map.tokens(0, 0), 0);    // a dense layer: no row
    QCOMPARE(map.share(1, 0), 100.0 / 280.0);
    QCOMPARE(map.share(2, 1), 0.25);
    QCOMPARE(map.share(3, 3), 1.0);
    QCOMPARE(map.dropped(), 5);
    QCOMPARE(map.stepEvents(), 7);   // those with a moe_load, counted or not
    QVERIFY2(map.caption().contains(QStringLiteral("darkest: 100.0% (even: 25.0%)")), qPrintable(map.caption()));
    QVERIFY2(map.caption().contains(QStringLiteral("5 tokens dropped over capacity")), qPrintable(map.caption()));
  }

  void batchesFoldAsOne() {
    const auto all = events();
    ExpertLoadMap once, inParts;
    once.applyEvents(all);
    for (size_t i = 0; i < all.size(); i += 3) {
      inParts.applyEvents(std::vector<store::EventRow>(all.begin() + static_cast<long>(i), all.begin() + static_cast<long>(std::min(all.size(), i + 3))));
    }
    QCOMPARE(inParts.layers(), once.layers());
    for (int layer : once.layers()) {
      for (int x = 0; x < once.experts(); ++x) QCOMPARE(inParts.tokens(layer, x), once.tokens(layer, x));
    }
    QCOMPARE(inParts.dropped(), once.dropped());
    inParts.clear();
    QVERIFY(inParts.isEmpty());
    QCOMPARE(inParts.dropped(), 0);
  }

  void rowsWithoutLayerIdsAreModelOrder() {
    ExpertLoadMap map;
    map.applyEvents({step(0, R"({"event":"step","rank":0,"step":1,"moe_load":[[1,3],[2,2]]})")});
    QCOMPARE(map.layers(), (QList<int>{0, 1}));
    QCOMPARE(map.share(0, 1), 0.75);
  }

  // The painted map: every cell in the colour its share gives (white for none, the darkest for
  // the largest share), the cells where cellAt finds them, the tooltip with the counts.
  void paintsTheCounts() {
    ExpertLoadMap map;
    map.applyEvents(events());
    map.resize(400, 200);
    const QImage image = map.grab().toImage();
    const QColor hottest = map.cellColor(2, 3);  // layer 3, expert 3: the whole layer
    QCOMPARE(map.cellColor(2, 0), QColor(Qt::white));
    for (int row = 0; row < 3; ++row) {
      for (int x = 0; x < 4; ++x) {
        const QRect cell = map.cellRect(row, x);
        QVERIFY(!cell.isEmpty());
        QCOMPARE(map.cellAt(cell.center()), std::make_pair(row, x));
        const qreal dpr = image.devicePixelRatio();
        QCOMPARE(QColor(image.pixel((QPointF(cell.center()) * dpr).toPoint())).rgb(), map.cellColor(row, x).rgb());
      }
    }
    // Darker is more: layer 1's experts in decreasing share 0 (100), 3 (80), 2 (60), 1 (40).
    auto lightness = [&](int row, int x) { return map.cellColor(row, x).lightnessF(); };
    QVERIFY(lightness(0, 0) < lightness(0, 3));
    QVERIFY(lightness(0, 3) < lightness(0, 2));
    QVERIFY(lightness(0, 2) < lightness(0, 1));
    QVERIFY(lightness(2, 3) <= lightness(0, 0));
    QCOMPARE(hottest.rgb(), map.cellColor(2, 3).rgb());
    QCOMPARE(map.cellAt(QPoint(1, 1)), std::make_pair(-1, -1));
    const QString tip = map.cellToolTip(0, 0);
    QVERIFY2(tip.startsWith(QStringLiteral("Layer 1, expert 0: 100 tokens of the layer's 280 over the run")), qPrintable(tip));
    QVERIFY2(tip.contains(QStringLiteral("35.7% of them, 1.43 x an even share (1 / 4)")), qPrintable(tip));
  }
};

QTEST_MAIN(TestExpertLoadMap)
#include "tst_expert_load_map.moc"
