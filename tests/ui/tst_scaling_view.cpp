// tst_scaling_view: the How it scales view against `stagecraft-cli scale` — the table equals
// `scale --json` row by row, the CSV export equals `scale --csv`, the chart has one point per size
// with a layout and the ideal line through every size, a bad token count is refused in one line.
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QLineSeries>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "../cli/cli_process.h"
#include "document/PlanDocument.h"
#include "mainwindow/MainWindow.h"
#include "scaling/ScalingView.h"

namespace {

constexpr int kTimeoutMs = 120000;

QString example(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + QLatin1String(name); }

}  // namespace

class TestScalingView : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void tableEqualsScaleJson() {
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    ScalingView v(&doc);
    v.maxNodesField()->setValue(64);
    v.tokensField()->setText(QStringLiteral("300e9"));
    QSignalSpy done(&v, &ScalingView::computed);
    v.compute();
    QVERIFY(done.wait(kTimeoutMs));

    const auto cli = stagecraft::testing::run_cli({"scale", example("gpt3-175b-1024x8.yaml"), "--max-nodes", "64", "--tokens", "300e9", "--json"});
    QCOMPARE(cli.code, 0);
    const auto points = QJsonDocument::fromJson(cli.out.toUtf8()).object()["points"].toArray();
    QCOMPARE(v.table()->rowCount(), points.size());
    QCOMPARE(points.size(), 7);
    int found = 0;
    for (int r = 0; r < points.size(); ++r) {
      const auto p = points[r].toObject();
      QCOMPARE(v.table()->item(r, 0)->text().toInt(), p["nodes"].toInt());
      QCOMPARE(v.table()->item(r, 1)->text().toInt(), p["gpus"].toInt());
      QCOMPARE(v.table()->item(r, 6)->text(), QString::number(p["ideal_tokens_per_s"].toDouble(), 'g', 4));
      if (!p["found"].toBool()) {
        QCOMPARE(v.table()->item(r, 3)->text(), QStringLiteral("-"));
        QCOMPARE(v.table()->item(r, 2)->toolTip(), p["reason"].toString());
        continue;
      }
      ++found;
      QCOMPARE(v.table()->item(r, 2)->text(), p["layout"].toString());
      QCOMPARE(v.table()->item(r, 3)->text(), QString::number(p["tokens_per_s"].toDouble(), 'g', 4));
      QCOMPARE(v.table()->item(r, 5)->text(), QString::number(p["days"].toDouble(), 'g', 3));
      QCOMPARE(v.result()->points[static_cast<size_t>(r)].best.estimate.tokens_per_s, p["tokens_per_s"].toDouble());
    }
    QVERIFY(found >= 3);
    // The chart: the ideal line through every size, the prediction through those with a layout.
    const auto series = v.chartView()->chart()->series();
    QCOMPARE(series.size(), 2);
    QCOMPARE(static_cast<QLineSeries*>(series[0])->count(), 7);
    QCOMPARE(static_cast<QLineSeries*>(series[1])->count(), found);
    v.setMetric(ScalingView::Metric::kDays);
    QCOMPARE(static_cast<QLineSeries*>(v.chartView()->chart()->series()[1])->count(), found);

    // Exports: CSV as `scale --csv` writes it (the timing column aside, none is in the CSV), PNG and SVG.
    QTemporaryDir dir;
    QVERIFY(v.exportCsv(dir.filePath("scale.csv"), &error));
    QFile f(dir.filePath("scale.csv"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto csv = stagecraft::testing::run_cli({"scale", example("gpt3-175b-1024x8.yaml"), "--max-nodes", "64", "--tokens", "300e9", "--csv"});
    QCOMPARE(QString::fromUtf8(f.readAll()), csv.out);
    QVERIFY2(v.exportImage(dir.filePath("scale.png"), &error), qPrintable(error));
    QVERIFY2(v.exportImage(dir.filePath("scale.svg"), &error), qPrintable(error));
    QVERIFY(QFileInfo(dir.filePath("scale.png")).size() > 1000);
    QVERIFY(QFileInfo(dir.filePath("scale.svg")).size() > 1000);
  }

  void plausibleRankingEqualsScalePlausible() {
    // Capped at the device's best published MFU, the winners are `scale --plausible`'s, and every
    // MFU above it is marked "!" with the model's reason.
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    ScalingView v(&doc);
    v.maxNodesField()->setValue(64);
    v.tokensField()->setText(QStringLiteral("300e9"));
    v.plausibleField()->setChecked(true);
    QSignalSpy done(&v, &ScalingView::computed);
    v.compute();
    QVERIFY(done.wait(kTimeoutMs));
    QVERIFY(v.result()->capped);
    QVERIFY(v.statusText().contains(QStringLiteral("capped")));
    const auto cli = stagecraft::testing::run_cli({"scale", example("gpt3-175b-1024x8.yaml"), "--max-nodes", "64", "--tokens", "300e9", "--json", "--plausible"});
    QCOMPARE(cli.code, 0);
    const auto points = QJsonDocument::fromJson(cli.out.toUtf8()).object()["points"].toArray();
    QCOMPARE(v.table()->rowCount(), points.size());
    int marked = 0;
    for (int r = 0; r < points.size(); ++r) {
      const auto p = points[r].toObject();
      if (!p["found"].toBool()) continue;
      QCOMPARE(v.table()->item(r, 2)->text(), p["layout"].toString());
      const bool plausible = p["plausible"].toBool();
      QCOMPARE(v.table()->item(r, 4)->text().endsWith(QStringLiteral(" !")), !plausible);
      if (!plausible) {
        ++marked;
        QCOMPARE(v.table()->item(r, 4)->toolTip(), QStringLiteral("Implausibly fast: ") + p["implausible_because"].toString());
      }
    }
    QVERIFY(marked > 0);  // GPT-3 175B on A100s: the model's winners beat the published 56.3%
  }

  void badTokensAreRefused() {
    PlanDocument doc;
    ScalingView v(&doc);
    v.tokensField()->setText(QStringLiteral("lots"));
    QSignalSpy failed(&v, &ScalingView::failed);
    v.compute();
    QCOMPARE(failed.count(), 1);
    QVERIFY(failed.first().first().toString().contains(QStringLiteral("tokens lots")));
    QVERIFY(!v.isComputing());
  }

  // In the window: View > How It Scales shows the dock and computes the current config.
  void windowShowsScaling() {
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    w.show();
    QSignalSpy done(w.scalingView(), &ScalingView::computed);
    w.showScaling();
    QVERIFY(done.wait(kTimeoutMs));
    QCOMPARE(w.scalingView()->table()->rowCount(), 1);  // one node
    QVERIFY(w.scalingView()->isVisible());
  }
};

QTEST_MAIN(TestScalingView)
#include "tst_scaling_view.moc"
