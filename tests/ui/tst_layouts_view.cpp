// tst_layouts_view: the Find layouts dock on real configs — its ranking equals `stagecraft-cli
// search --json` for the same constraints, the scatter holds one point per layout shown, a click
// previews without touching the document, Apply is one edit that Undo takes back exactly, the
// "why" line is the engine's, Cancel stops a search.
#include <QCheckBox>
#include <QComboBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QToolTip>
#include <QUndoStack>
#include <QtTest>

#include "../cli/cli_process.h"
#include "document/PlanDocument.h"
#include "estimates/EstimatesView.h"
#include "layouts/LayoutSearch.h"
#include "layouts/LayoutsChart.h"
#include "layouts/LayoutsModel.h"
#include "layouts/LayoutsView.h"
#include "mainwindow/MainWindow.h"
#include "topology/TopologyScene.h"
#include "topology/TopologyView.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/search.h"

namespace plan = stagecraft::plan;

namespace {

constexpr int kSearchTimeoutMs = 120000;

QString example(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + QLatin1String(name); }

// Until the chart has drawn the model's rows (it rebuilds in the next turn of the event loop).
bool settled(LayoutsView& v) {
  return QTest::qWaitFor([&] { return !v.chart()->isRebuildPending(); });
}

// Runs the dock's search to the end and lets the chart draw it.
bool searchAndWait(LayoutsView& v) {
  QSignalSpy done(v.search(), &LayoutSearch::finished);
  v.findLayouts();
  return done.wait(kSearchTimeoutMs) && settled(v);
}

// A constraint field changed as a person would, then the chart followed.
// GPT-3 175B on 8 nodes of 8 A100s (the example's 1024 nodes cut), written into `dir`; empty on failure.
QString gpt3On64(const QTemporaryDir& dir) {
  QFile in(example("gpt3-175b-1024x8.yaml"));
  if (!in.open(QIODevice::ReadOnly)) return {};
  QString yaml = QString::fromUtf8(in.readAll());
  if (!yaml.contains(QStringLiteral("nodes: 1024"))) return {};
  yaml.replace(QStringLiteral("nodes: 1024"), QStringLiteral("nodes: 8"));
  const QString path = dir.filePath(QStringLiteral("gpt3-64.yaml"));
  QFile out(path);
  if (!out.open(QIODevice::WriteOnly) || out.write(yaml.toUtf8()) < 0) return {};
  return path;
}

void setCheck(LayoutsView& v, const char* name, bool on) {
  qobject_cast<QCheckBox*>(v.field(QLatin1String(name)))->setChecked(on);
  QVERIFY(settled(v));
}
void setSpin(LayoutsView& v, const char* name, int value) {
  qobject_cast<QSpinBox*>(v.field(QLatin1String(name)))->setValue(value);
  QVERIFY(settled(v));
}

// The layout column of the table's first n rows, in the order the table shows them.
QStringList tableLayouts(LayoutsView& v, int n) {
  QStringList out;
  auto* m = v.table()->model();
  for (int r = 0; r < n && r < m->rowCount(); ++r) out << m->index(r, LayoutsModel::kLayout).data().toString();
  return out;
}

}  // namespace

class TestLayoutsView : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // The dock's top 5 on GPT-3 175B over 1,024 x 8 GPUs equal the CLI's for the same constraints,
  // typed into the fields after the search (they filter, no new search).
  void topFiveEqualsSearchJson_data() {
    QTest::addColumn<QStringList>("fields");  // name=value
    QTest::addColumn<QStringList>("cliArgs");
    QTest::newRow("defaults") << QStringList{} << QStringList{};
    QTest::newRow("cp 2") << QStringList{"cp=2"} << QStringList{"--cp", "2"};
    QTest::newRow("ZeRO 1 at most") << QStringList{"maxZero=1"} << QStringList{"--max-zero", "1"};
    QTest::newRow("pp 16 without ZeRO") << QStringList{"pp=16", "maxZero=0"} << QStringList{"--pp", "16", "--no-zero"};
    QTest::newRow("1f1b and gpipe, selective, micro-batch 2, TP in a node")
        << QStringList{"interleaved=0", "none=0", "full=0", "maxMicroBatch=2", "tpWithinNode=1"}
        << QStringList{"--schedules", "gpipe,1f1b", "--recompute", "selective", "--max-micro-batch", "2", "--tp-in-node"};
    QTest::newRow("tp 4") << QStringList{"tp=4"} << QStringList{"--tp", "4"};
  }
  void topFiveEqualsSearchJson() {
    QFETCH(QStringList, fields);
    QFETCH(QStringList, cliArgs);
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(searchAndWait(v));
    for (const QString& f : fields) {
      const QString name = f.section(QLatin1Char('='), 0, 0);
      const int value = f.section(QLatin1Char('='), 1).toInt();
      if (qobject_cast<QCheckBox*>(v.field(name))) setCheck(v, qPrintable(name), value != 0);
      else setSpin(v, qPrintable(name), value);
    }
    const auto cli = stagecraft::testing::run_cli(QStringList{"search", example("gpt3-175b-1024x8.yaml"), "--top", "5", "--json"} + cliArgs);
    QCOMPARE(cli.code, 0);
    const auto plans = QJsonDocument::fromJson(cli.out.toUtf8()).object()["plans"].toArray();
    QCOMPARE(plans.size(), 5);
    QStringList expected;
    for (const auto& p : plans) expected << p.toObject()["layout"].toString();
    QCOMPARE(tableLayouts(v, 5), expected);
    for (int r = 0; r < 5; ++r) {
      QCOMPARE(v.model()->candidate(r).estimate.tokens_per_s, plans[r].toObject()["estimate"].toObject()["tokens_per_s"].toDouble());
    }
  }

  // GPT-3 175B on 64 A100s: the model's fastest layouts run above the 56.3% MFU published for any
  // A100 run; the table marks their MFU with "!", in the warning colour, with the model's reason
  // as its tooltip, exactly for the layouts `search --json` calls implausible.
  void implausiblyFastLayoutsAreMarked() {
    QTemporaryDir dir;
    const QString path = gpt3On64(dir);
    QVERIFY(!path.isEmpty());
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(path, &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(searchAndWait(v));
    const auto cli = stagecraft::testing::run_cli(QStringList{"search", path, "--top", "10", "--json"});
    QCOMPARE(cli.code, 0);
    const auto plans = QJsonDocument::fromJson(cli.out.toUtf8()).object()["plans"].toArray();
    QCOMPARE(plans.size(), 10);
    auto* m = v.table()->model();
    int marked = 0;
    for (int r = 0; r < 10; ++r) {
      const QJsonObject p = plans[r].toObject();
      QCOMPARE(m->index(r, LayoutsModel::kLayout).data().toString(), p["layout"].toString());
      const QModelIndex mfu = m->index(r, LayoutsModel::kMfu);
      const bool plausible = p["plausible"].toBool();
      QCOMPARE(mfu.data().toString().endsWith(QStringLiteral(" !")), !plausible);
      if (!plausible) {
        ++marked;
        QCOMPARE(mfu.data(Qt::ToolTipRole).toString(), QStringLiteral("Implausibly fast: ") + p["implausible_because"].toString());
        QVERIFY(mfu.data(Qt::ForegroundRole).isValid());
      } else {
        QVERIFY(!mfu.data(Qt::ToolTipRole).isValid());
      }
    }
    QVERIFY(marked > 0);
  }

  // Capped at the published MFU, the table's order is `search --plausible`'s, with or without
  // other filters, and differs from the uncapped one (the model's winners on 64 A100s are above it).
  void cappedRankingEqualsSearchPlausible() {
    QTemporaryDir dir;
    const QString path = gpt3On64(dir);
    QVERIFY(!path.isEmpty());
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(path, &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(searchAndWait(v));
    const QStringList uncapped = tableLayouts(v, 5);
    auto cliTop = [&](const QStringList& args) {
      const auto cli = stagecraft::testing::run_cli(QStringList{"search", path, "--top", "5", "--json"} + args);
      QStringList out;
      for (const auto& p : QJsonDocument::fromJson(cli.out.toUtf8()).object()["plans"].toArray()) out << p.toObject()["layout"].toString();
      return out;
    };
    setCheck(v, "plausible", true);
    QVERIFY(v.statusText().contains(QStringLiteral("capped")));
    const QStringList capped = tableLayouts(v, 5);
    QCOMPARE(capped, cliTop({"--plausible"}));
    QVERIFY(capped != uncapped);
    setSpin(v, "tp", 8);
    QCOMPARE(tableLayouts(v, 5), cliTop({"--plausible", "--tp", "8"}));
    setCheck(v, "plausible", false);
    QCOMPARE(tableLayouts(v, 5), cliTop({"--tp", "8"}));
  }

  // A mixture of experts: the ep filter shows (a dense model's dock hides it), and fixing ep gives
  // `search --ep`'s layouts; applying an ep layout keeps the layouts (ep is the search's to choose).
  void expertParallelFilterEqualsSearchEp() {
    PlanDocument dense;
    QString error;
    QVERIFY2(dense.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    LayoutsView denseView(&dense);
    QVERIFY(denseView.field("ep")->isHidden());
    QCOMPARE(denseView.constraints().ep, 0);

    PlanDocument doc;
    QVERIFY2(doc.open(example("mixtral-8x7b-8x8.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(!v.field("ep")->isHidden());
    QVERIFY(searchAndWait(v));
    for (int ep : {4, 8}) {
      setSpin(v, "ep", ep);
      QCOMPARE(v.constraints().ep, ep);
      const auto cli = stagecraft::testing::run_cli({"search", example("mixtral-8x7b-8x8.yaml"), "--top", "5", "--json", "--ep", QString::number(ep)});
      QCOMPARE(cli.code, 0);
      QStringList expected;
      for (const auto& p : QJsonDocument::fromJson(cli.out.toUtf8()).object()["plans"].toArray()) expected << p.toObject()["layout"].toString();
      QCOMPARE(expected.size(), 5);
      QCOMPARE(tableLayouts(v, 5), expected);
      for (const QString& layout : expected) QVERIFY2(layout.contains(QStringLiteral("ep=%1").arg(ep)), qPrintable(layout));
    }
    v.selectRows({0});
    QVERIFY(v.applySelected());
    QCOMPARE(doc.config().parallel.ep, 8);
    QVERIFY(v.model()->rowCount() > 0);  // applying a layout keeps the search's layouts
  }

  // One point per layout that passes the filters, as the filters change; the Pareto front is
  // the fitting layouts that no other beats on both memory and speed.
  void onePointPerLayoutShown() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("bert-large-3d.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(searchAndWait(v));
    const auto& all = v.model()->allLayouts();
    auto count = [&](auto pred) { return static_cast<int>(std::count_if(all.begin(), all.end(), pred)); };
    QCOMPARE(v.chart()->pointCount(), count([](const plan::Candidate& c) { return c.estimate.fits; }));
    QCOMPARE(v.chart()->pointCount(), v.model()->rowCount());
    setCheck(v, "fitsOnly", false);
    QCOMPARE(v.chart()->pointCount(), static_cast<int>(all.size()));
    setSpin(v, "tp", 2);
    QCOMPARE(v.chart()->pointCount(), count([](const plan::Candidate& c) { return c.config.parallel.tp == 2; }));
    setCheck(v, "gpipe", false);
    QCOMPARE(v.chart()->pointCount(), count([](const plan::Candidate& c) {
               return c.config.parallel.tp == 2 && (c.config.parallel.pp == 1 || c.config.pipeline.schedule != stagecraft::config::Schedule::kGpipe);
             }));
    QCOMPARE(v.chart()->pointCount(), v.model()->rowCount());
    QVERIFY(v.chart()->pointCount() > 0);
    QVERIFY(v.chart()->deviceMemoryGiB() > 79.9 && v.chart()->deviceMemoryGiB() < 80.1);
    // Pareto: nothing fitting is both smaller and faster than a front point.
    const auto front = v.chart()->paretoRows();
    QVERIFY(!front.isEmpty());
    for (int f : front) {
      const auto& e = v.model()->candidate(f).estimate;
      for (int r = 0; r < v.model()->rowCount(); ++r) {
        const auto& o = v.model()->candidate(r).estimate;
        if (!o.fits) continue;
        QVERIFY(!(o.peak_memory_bytes < e.peak_memory_bytes && o.tokens_per_s > e.tokens_per_s));
      }
    }
    // The last allowed schedule cannot be cleared: a group never allows nothing.
    setCheck(v, "1f1b", false);
    setCheck(v, "interleaved", false);
    QVERIFY(qobject_cast<QCheckBox*>(v.field(QStringLiteral("interleaved")))->isChecked());
    QCOMPARE(v.constraints().schedules, std::vector<stagecraft::config::Schedule>{stagecraft::config::Schedule::kInterleaved});
    setCheck(v, "1f1b", true);
    // Colour by schedule: one series per schedule shown.
    auto* colour = qobject_cast<QComboBox*>(v.field(QStringLiteral("colourBy")));
    colour->setCurrentIndex(2);
    QVERIFY(v.chart()->seriesNames().contains(QStringLiteral("interleaved")));
    QVERIFY(!v.chart()->seriesNames().contains(QStringLiteral("gpipe")));
    QCOMPARE(v.chart()->pointCount(), v.model()->rowCount());
    // y = step time: the same points, at each layout's step time.
    qobject_cast<QComboBox*>(v.field(QStringLiteral("yAxis")))->setCurrentIndex(1);
    QCOMPARE(v.chart()->pointCount(), v.model()->rowCount());
    QCOMPARE(v.chart()->pointOfRow(0).y(), v.model()->candidate(0).estimate.step_time_s);
  }

  // Hovering a point names its layout.
  void hoverNamesTheLayout() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("bert-large-3d.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    v.resize(900, 900);
    v.show();
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QVERIFY(searchAndWait(v));
    QChart* chart = v.chart()->chart();
    const int row = 0;
    const QPointF scenePos = chart->mapToPosition(v.chart()->pointOfRow(row), chart->series().first());
    const QPoint at = v.chart()->mapFromScene(chart->mapToScene(scenePos));
    QTest::mouseMove(v.chart()->viewport(), at + QPoint(20, 20));
    QTest::mouseMove(v.chart()->viewport(), at);
    QTRY_VERIFY(QToolTip::isVisible());
    QVERIFY2(QToolTip::text().contains(qs(plan::layout_string(v.model()->candidate(row).config))), qPrintable(QToolTip::text()));
  }

  // In the window: a click on a point previews the layout in the views; the document, its undo
  // history and its modified flag stay as they were. Apply is one edit; Undo restores the config
  // exactly; Redo applies it again.
  void clickPreviewsApplyUndoes() {
    MainWindow w;
    w.resize(1600, 1000);
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    LayoutsView* v = w.layoutsView();
    QSignalSpy done(v->search(), &LayoutSearch::finished);
    w.findLayouts();
    QVERIFY(done.wait(kSearchTimeoutMs));
    QVERIFY(settled(*v));
    QVERIFY(v->isVisible());
    PlanDocument* doc = w.document();
    const auto before = doc->config();
    const int undoCount = doc->undoStack()->count();

    // Pin the document's plan to compare the preview with it.
    QVERIFY(w.estimatesView()->pin());
    QVERIFY(w.topologyView()->topologyScene()->hasPinnedPlan());

    // A layout below the first, clicked where the chart draws it: the first from the fourth on
    // whose point no other layout's covers (ZeRO stages can give two layouts one point).
    QChart* chart = v->chart()->chart();
    auto viewPoint = [&](int r) {
      const QPointF scenePos = chart->mapToPosition(v->chart()->pointOfRow(r), chart->series().first());
      return v->chart()->mapFromScene(chart->mapToScene(scenePos));
    };
    const int shown = v->model()->rowCount();
    int row = -1;
    for (int r = 3; r < shown && row < 0; ++r) {
      bool alone = true;
      for (int o = 0; o < shown && alone; ++o) alone = o == r || (viewPoint(o) - viewPoint(r)).manhattanLength() > 6;
      if (alone) row = r;
    }
    QVERIFY(row >= 3);
    const auto& cand = v->model()->candidate(row);
    const QPoint at = viewPoint(row);
    QSignalSpy previewed(v, &LayoutsView::previewRequested);
    QTest::mouseClick(v->chart()->viewport(), Qt::LeftButton, {}, at);
    QTRY_COMPARE(previewed.count(), 1);
    QCOMPARE(v->selectedRows(), QList<int>{row});
    const auto preview = previewed.first().first().value<plan::Plan>();
    QCOMPARE(preview.tp, cand.config.parallel.tp);
    QCOMPARE(preview.pp, cand.config.parallel.pp);
    QCOMPARE(preview.estimate.step_time_s, cand.estimate.step_time_s);
    QVERIFY2(w.summaryText().startsWith(QStringLiteral("Preview")), qPrintable(w.summaryText()));
    // The estimates compare the preview with the pinned plan.
    const QString cmp = w.estimatesView()->comparisonText();
    QVERIFY2(cmp.contains(QStringLiteral("step %1 vs %2")
                              .arg(qs(plan::format_seconds(cand.estimate.step_time_s)), qs(plan::format_seconds(doc->plan().estimate.step_time_s)))),
             qPrintable(cmp));
    w.estimatesView()->unpin();
    QVERIFY(!w.topologyView()->topologyScene()->hasPinnedPlan());
    QVERIFY(doc->config() == before);
    QCOMPARE(doc->undoStack()->count(), undoCount);
    QVERIFY(!doc->isModified());
    // The table follows the chart's selection.
    const auto selected = v->table()->selectionModel()->selectedRows();
    QCOMPARE(selected.size(), 1);
    QCOMPARE(selected.first().data().toInt(), row + 1);

    QVERIFY(v->applySelected());
    QCOMPARE(doc->undoStack()->count(), undoCount + 1);
    QCOMPARE(qs(plan::layout_string(doc->config())), qs(plan::layout_string(cand.config)));
    QCOMPARE(doc->plan().estimate.step_time_s, cand.estimate.step_time_s);
    QVERIFY(!w.summaryText().startsWith(QStringLiteral("Preview")));
    doc->undoStack()->undo();
    QVERIFY(doc->config() == before);
    QVERIFY(!doc->isModified());
    doc->undoStack()->redo();
    QCOMPARE(qs(plan::layout_string(doc->config())), qs(plan::layout_string(cand.config)));
  }

  // Two layouts selected: the line says why the faster one wins, in the CLI's words.
  void whyForTwoSelected() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("bert-large-3d.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(searchAndWait(v));
    v.selectRows({1, 0});
    QCOMPARE(v.selectedRows(), (QList<int>{1, 0}));
    auto base = stagecraft::config::load_config_file(example("bert-large-3d.yaml").toStdString(), {},
                                                     stagecraft::config::Rules::kExceptLayout);
    QVERIFY(base.ok());
    auto r = plan::search(base.value());
    QVERIFY(r.ok());
    QCOMPARE(v.whyText(), qs(r->why));
    v.selectRows({5, 9});
    QCOMPARE(v.whyText(), qs(plan::why_faster(v.model()->candidate(5), v.model()->candidate(9))));
    QVERIFY(v.whyText().contains(QStringLiteral("faster than")));
  }

  // Layouts are of the config searched: a layout edit (Apply) keeps them, a change of the model
  // (its sequence length) drops them.
  void anotherModelDropsTheLayouts() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("bert-large-3d.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    QVERIFY(searchAndWait(v));
    const int rows = v.model()->rowCount();
    QVERIFY(rows > 10);
    v.selectRows({2});
    QVERIFY(v.applySelected());
    QCOMPARE(v.model()->rowCount(), rows);
    QVERIFY2(doc.applyEdit(QStringLiteral("model.seq_len"), QStringLiteral("256"), &error), qPrintable(error));
    QCOMPARE(v.model()->rowCount(), 0);
    QVERIFY2(v.statusText().contains(QStringLiteral("changed since the search")), qPrintable(v.statusText()));
    QVERIFY(!v.applySelected());
  }

  // A double-click on a table row applies that layout as one edit.
  void doubleClickAppliesARow() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("bert-large-3d.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    v.resize(900, 900);
    v.show();
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QVERIFY(searchAndWait(v));
    const int undoCount = doc.undoStack()->count();
    const QModelIndex index = v.table()->model()->index(1, LayoutsModel::kLayout);
    const QString layout = index.data().toString();
    const QPoint at = v.table()->visualRect(index).center();
    QTest::mouseClick(v.table()->viewport(), Qt::LeftButton, {}, at);
    QTest::mouseDClick(v.table()->viewport(), Qt::LeftButton, {}, at);
    QTRY_COMPARE(doc.undoStack()->count(), undoCount + 1);
    QCOMPARE(qs(plan::layout_string(doc.config())), layout);
  }

  // A second search while one runs replaces it: one result, of the second config.
  void aNewSearchSupersedesTheRunningOne() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    LayoutSearch search;
    QSignalSpy finished(&search, &LayoutSearch::finished);
    search.start(doc.config());
    auto small = doc.config();
    small.cluster.nodes = 64;
    search.start(small);
    QVERIFY(finished.wait(kSearchTimeoutMs));
    QTest::qWait(300);
    QCOMPARE(finished.count(), 1);
    QVERIFY(!search.layouts()->empty());
    QCOMPARE(search.layouts()->front().config.cluster.nodes, 64);
  }

  // Cancel stops the search: no result arrives, the previous layouts stay.
  void cancelStopsTheSearch() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    LayoutsView v(&doc);
    QSignalSpy finished(v.search(), &LayoutSearch::finished);
    QSignalSpy cancelled(v.search(), &LayoutSearch::cancelled);
    v.findLayouts();
    QVERIFY(v.search()->isRunning());
    v.search()->cancel();
    QCOMPARE(cancelled.count(), 1);
    QVERIFY(!v.search()->isRunning());
    QTest::qWait(500);
    QCOMPARE(finished.count(), 0);
    QCOMPARE(v.model()->rowCount(), 0);
  }

 private:
  static QString qs(const std::string& s) { return QString::fromStdString(s); }
};

QTEST_MAIN(TestLayoutsView)
#include "tst_layouts_view.moc"
