// tst_main_window: the real window offscreen — the form drives the topology scene, undo/redo
// through the Edit menu, the stage editor's signals reach the document, files, exports, errors
// that leave the window alive.
#include <QAction>
#include <QComboBox>
#include <QDockWidget>
#include <QImage>
#include <QLabel>
#include <QSettings>
#include <QFile>
#include <QMenuBar>
#include <QProcess>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QUndoStack>
#include <QtTest>

#include "document/PlanDocument.h"
#include "estimates/EstimateCharts.h"
#include "estimates/EstimatesView.h"
#include "run_timing_support.h"
#include "mainwindow/MainWindow.h"
#include "runs/RunManager.h"
#include "runs/RunsView.h"
#include "schedule/ScheduleView.h"
#include "setup/SetupPanel.h"
#include "stages/StageEditor.h"
#include "topology/TopologyScene.h"
#include "topology/TopologyView.h"

using stagecraft::config::Axis;
namespace cfg = stagecraft::config;

Q_DECLARE_METATYPE(stagecraft::interop::Framework)

namespace {

QString example(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + QLatin1String(name); }

QSpinBox* spin(MainWindow& w, const char* key) { return qobject_cast<QSpinBox*>(w.setupPanel()->field(QLatin1String(key))); }

QList<QList<int>> toList(const std::vector<std::vector<int>>& groups) {
  QList<QList<int>> out;
  for (const auto& g : groups) out.append(QList<int>(g.begin(), g.end()));
  return out;
}

QList<QList<int>> outlined(MainWindow& w) { return w.topologyView()->topologyScene()->outlinedTpGroups(); }

QAction* menuAction(MainWindow& w, const QString& menuTitle, const QString& text) {
  for (QAction* top : w.menuBar()->actions()) {
    if (top->text().remove(QLatin1Char('&')) != menuTitle || !top->menu()) continue;
    for (QAction* a : top->menu()->actions()) {
      if (a->text().remove(QLatin1Char('&')).startsWith(text)) return a;
    }
  }
  return nullptr;
}

}  // namespace

class TestMainWindow : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    // Keep the window's settings (geometry, recent files) out of the person's own.
    QCoreApplication::setOrganizationName(QStringLiteral("StagecraftTests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_main_window"));
    QVERIFY(m_settingsDir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_settingsDir.path());
  }

  void tpFromTheFormOutlinesTopology_data() {
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<QString>("order");
    // docs/ARCHITECTURE.md §4: 8 GPUs, rank = tp_rank + dp_rank * tp + pp_rank * tp * dp.
    QTest::newRow("tp2 pp2 tp-cp-dp-pp") << 2 << 2 << "tp-cp-dp-pp";
    QTest::newRow("tp4 pp2 tp-cp-dp-pp") << 4 << 2 << "tp-cp-dp-pp";
    QTest::newRow("tp8 pp1") << 8 << 1 << "tp-cp-dp-pp";
    QTest::newRow("tp2 pp2 dp-tp-cp-pp") << 2 << 2 << "dp-tp-cp-pp";
    QTest::newRow("tp4 pp1 pp-dp-tp-cp") << 4 << 1 << "pp-dp-tp-cp";
  }
  void tpFromTheFormOutlinesTopology() {
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(QString, order);
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    spin(w, "parallel.dp")->setValue(0);  // auto
    spin(w, "parallel.pp")->setValue(pp);
    auto* orderBox = qobject_cast<QComboBox*>(w.setupPanel()->field(QStringLiteral("parallel.order")));
    orderBox->setCurrentIndex(orderBox->findData(order));
    spin(w, "parallel.tp")->setValue(tp);
    QVERIFY2(w.document()->isValid(), qPrintable(w.document()->problems().value(0).message));
    QCOMPARE(w.document()->plan().tp, tp);
    // The scene draws exactly the engine's TP groups of the edited config.
    auto expected = stagecraft::plan::make_plan(w.document()->config());
    QVERIFY(expected.ok());
    QCOMPARE(outlined(w), toList(expected->topology.groups(Axis::kTp)));
    if (tp == 4 && pp == 2) QCOMPARE(outlined(w), (QList<QList<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    QVERIFY(orderBox->currentIndex() >= 0);
    if (order == QLatin1String("dp-tp-cp-pp")) QCOMPARE(outlined(w), (QList<QList<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    QVERIFY(w.summaryText().contains(QStringLiteral("tp %1").arg(tp)));
  }

  void invalidInputKeepsTheLastPlan() {
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    spin(w, "parallel.dp")->setValue(0);
    const auto before = outlined(w);
    const QString summary = w.summaryText();
    spin(w, "parallel.tp")->setValue(3);
    QVERIFY(w.setupPanel()->fieldError(QStringLiteral("parallel.tp")).contains(QLatin1String("not divisible by tp x pp = 6")));
    QCOMPARE(outlined(w), before);
    QCOMPARE(w.summaryText(), summary);
    auto* invalid = w.findChild<QLabel*>(QStringLiteral("invalidConfig"));
    QVERIFY(invalid && invalid->text().contains(QLatin1String("parallel.tp=3")));
    spin(w, "parallel.tp")->setValue(4);
    QCOMPARE(outlined(w), (QList<QList<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    QVERIFY(invalid->text().isEmpty());
  }

  void undoRedoThroughTheEditMenu() {
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    const cfg::RunConfig c0 = w.document()->config();
    const auto groups0 = outlined(w);
    spin(w, "parallel.dp")->setValue(0);
    spin(w, "parallel.pp")->setValue(1);
    spin(w, "parallel.tp")->setValue(8);
    QCOMPARE(outlined(w), (QList<QList<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
    QVERIFY(w.isWindowModified());
    QAction* undo = menuAction(w, QStringLiteral("Edit"), QStringLiteral("Undo"));
    QAction* redo = menuAction(w, QStringLiteral("Edit"), QStringLiteral("Redo"));
    QVERIFY(undo && redo);
    QCOMPARE(undo->shortcut(), QKeySequence(QKeySequence::Undo));
    undo->trigger();
    undo->trigger();
    undo->trigger();
    QVERIFY(w.document()->config() == c0);
    QCOMPARE(outlined(w), groups0);
    QCOMPARE(spin(w, "parallel.tp")->value(), 2);
    QVERIFY(!w.isWindowModified());
    QVERIFY(!undo->isEnabled());
    redo->trigger();
    redo->trigger();
    redo->trigger();
    QCOMPARE(w.document()->plan().tp, 8);
    QCOMPARE(outlined(w), (QList<QList<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  }

  void stageEditorSignalsEditThePartition() {
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));  // 24 layers, pp 2
    std::vector<int> ids(24, 1);
    std::fill(ids.begin(), ids.begin() + 9, 0);
    Q_EMIT w.stageEditor()->partitionEdited(ids);
    QCOMPARE(w.document()->config().pipeline.partition, cfg::PartitionKind::kExplicit);
    QCOMPARE(w.document()->plan().layer_stage, ids);
    Q_EMIT w.stageEditor()->uniformRequested();
    QCOMPARE(w.document()->plan().stages[0].num_layers, 12);
    Q_EMIT w.stageEditor()->balanceRequested();
    QCOMPARE(w.document()->config().pipeline.partition, cfg::PartitionKind::kBalanced);
    w.document()->undoStack()->undo();
    w.document()->undoStack()->undo();
    QCOMPARE(w.document()->plan().layer_stage, ids);
  }

  void openSaveRoundTripAndRecentFiles() {
    QTemporaryDir dir;
    MainWindow w;
    QVERIFY(w.openFile(example("libai-bert-dp2-tp4.yaml")));
    QCOMPARE(w.recentFiles().first(), QFileInfo(example("libai-bert-dp2-tp4.yaml")).absoluteFilePath());
    spin(w, "train.steps")->setValue(77);
    QVERIFY(w.windowTitle().contains(QLatin1String("libai-bert-dp2-tp4.yaml")));
    const QString path = dir.filePath(QStringLiteral("round.yaml"));
    QVERIFY(w.saveFileAs(path));
    QVERIFY(!w.isWindowModified());
    QVERIFY(w.windowTitle().contains(QLatin1String("round.yaml")));
    MainWindow other;
    QVERIFY(other.openFile(path));
    QVERIFY(other.document()->config() == w.document()->config());
    QCOMPARE(other.document()->config().train.steps, 77);
    QCOMPARE(outlined(other), outlined(w));
    QCOMPARE(other.recentFiles().first(), QFileInfo(path).absoluteFilePath());  // kept in QSettings
  }

  void errorsLeaveTheWindowAlive() {
    QTemporaryDir dir;
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    const cfg::RunConfig before = w.document()->config();
    QVERIFY(!w.openFile(dir.filePath(QStringLiteral("nope.yaml"))));
    QVERIFY2(w.lastError().contains(QLatin1String("nope.yaml")), qPrintable(w.lastError()));
    QVERIFY(w.document()->config() == before);
    QVERIFY(!w.exportTopologyImage(dir.filePath(QStringLiteral("diagram.bmpx"))));
    QVERIFY(!w.lastError().isEmpty());
    QVERIFY(!w.importFrom(stagecraft::interop::Framework::kDeepspeed, dir.filePath(QStringLiteral("missing.json"))));
    QVERIFY(w.document()->config() == before);
    // Colossal-AI's 2d mode cannot go to Megatron-LM: the engine's message names the key.
    QVERIFY(w.openFile(example("colossalai-2d.yaml")));
    QVERIFY(!w.exportTo(stagecraft::interop::Framework::kMegatron, dir.filePath(QStringLiteral("m.sh"))));
    QVERIFY2(w.lastError().contains(QLatin1String("tp_mode")), qPrintable(w.lastError()));
    QVERIFY(w.document()->hasPlan());
  }

  // File > Import from > Hugging Face model: a Llama's config.json becomes the plan's model, the
  // layout kept; the Estimates show its exact parameter count.
  void importsAHuggingFaceModel() {
    QTemporaryDir dir;
    MainWindow w;
    QVERIFY(w.openFile(example("llama3-8b-1x8.yaml")));
    const QString path = dir.filePath(QStringLiteral("config.json"));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "tie_word_embeddings": false, "vocab_size": 32768})");
    f.close();
    QVERIFY2(w.importFrom(stagecraft::interop::Framework::kHf, path), qPrintable(w.lastError()));
    const auto& m = w.document()->config().model;
    QCOMPARE(m.vocab, 32768);
    QCOMPARE(m.kv_heads, 8);
    QCOMPARE(m.rope_theta, 1000000.0);
    QCOMPARE(w.document()->config().parallel.tp, 2);
    QVERIFY(w.document()->hasPlan());
    QCOMPARE(w.document()->plan().estimate.params_total, 7248023552.0);
  }

  void exportsWriteFiles_data() {
    QTest::addColumn<QString>("what");
    QTest::addColumn<QString>("fileName");
    QTest::newRow("topology png") << "topology" << "topology.png";
    QTest::newRow("topology svg") << "topology" << "topology.svg";
    QTest::newRow("schedule png") << "schedule" << "schedule.png";
    QTest::newRow("schedule svg") << "schedule" << "schedule.svg";
    QTest::newRow("libai") << "libai" << "libai_config.py";
    QTest::newRow("paddle") << "paddle" << "paddle.yaml";
    QTest::newRow("colossalai") << "colossalai" << "colossal.py";
    QTest::newRow("megatron") << "megatron" << "megatron.sh";
    QTest::newRow("deepspeed") << "deepspeed" << "ds_config.json";
  }
  void exportsWriteFiles() {
    QFETCH(QString, what);
    QFETCH(QString, fileName);
    QTemporaryDir dir;
    MainWindow w;
    QVERIFY(w.openFile(example("bert-large-3d.yaml")));
    const QString path = dir.filePath(fileName);
    bool ok = false;
    if (what == QLatin1String("topology")) {
      ok = w.exportTopologyImage(path);
    } else if (what == QLatin1String("schedule")) {
      ok = w.exportScheduleImage(path);
    } else {
      ok = w.exportTo(*stagecraft::interop::parse_framework(what.toStdString()), path);
    }
    QVERIFY2(ok, qPrintable(w.lastError()));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray bytes = f.readAll();
    QVERIFY(bytes.size() > 100);
    if (fileName.endsWith(QLatin1String(".png"))) {
      QVERIFY(bytes.startsWith("\x89PNG"));
      QImage image;
      QVERIFY(image.loadFromData(bytes, "PNG"));
      QVERIFY(image.width() > 100 && image.height() > 50);
    } else if (fileName.endsWith(QLatin1String(".svg"))) {
      QVERIFY(bytes.contains("<svg"));
      QVERIFY(bytes.contains("</svg>"));
    } else {
      auto expected = stagecraft::interop::export_files(w.document()->config(), *stagecraft::interop::parse_framework(what.toStdString()),
                                        {fileName.toStdString()});
      QVERIFY(expected.ok());
      QCOMPARE(bytes.toStdString(), expected->files[0].text);
    }
  }

  void runMenuHasRunLocally() {
    MainWindow w;
    QVERIFY(w.runMenu());
    QAction* run = menuAction(w, QStringLiteral("Run"), QStringLiteral("Run Locally"));
    QVERIFY(run);
    QVERIFY(menuAction(w, QStringLiteral("File"), QStringLiteral("Import from")));
    QVERIFY(menuAction(w, QStringLiteral("File"), QStringLiteral("Export Topology Diagram")));
    QVERIFY(menuAction(w, QStringLiteral("Help"), QStringLiteral("About Stagecraft")));
    QVERIFY(menuAction(w, QStringLiteral("Help"), QStringLiteral("User Guide")));
  }

  // The runs view is a tab beside Stages; a run the run manager reports brings it forward.
  void runsDockIsATabBesideStages() {
    MainWindow w;
    w.show();
    auto* stages = w.findChild<QDockWidget*>(QStringLiteral("stagesDock"));
    auto* runs = w.findChild<QDockWidget*>(QStringLiteral("runsDock"));
    QVERIFY(stages && runs);
    QVERIFY(w.tabifiedDockWidgets(stages).contains(runs));
    QVERIFY(w.runManager());
    QCOMPARE(runs->widget(), static_cast<QWidget*>(w.runManager()->runsView()));
    runs->hide();
    Q_EMIT w.runManager()->runStarted(1);
    QVERIFY(runs->isVisible());
  }

  // The Estimates dock reads at the window's first-start size (1400 x 900) and at 1920 x 1080:
  // the memory chart keeps at least MemoryChart::kMinPlotHeight of plot, and every label the two
  // charts paint is whole (inside its box and the chart) and clear of every other label.
  void estimatesReadAtDefaultAndFullHdSizes_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QSize>("size");  // invalid: the first-start size
    for (const char* c : {"bert-large-3d.yaml", "gpt3-175b-1024x8.yaml", "llama3-405b-256x8.yaml"}) {
      QTest::newRow(qPrintable(QStringLiteral("%1 first start").arg(c))) << example(c) << QSize();
      QTest::newRow(qPrintable(QStringLiteral("%1 1920x1080").arg(c))) << example(c) << QSize(1920, 1080);
    }
  }
  void estimatesReadAtDefaultAndFullHdSizes() {
    QFETCH(QString, config);
    QFETCH(QSize, size);
    {
      QSettings settings;  // a first start: no saved geometry or dock layout
      settings.remove(QStringLiteral("window"));
    }
    MainWindow w;
    if (size.isValid()) w.resize(size);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openFile(config));
    QCOMPARE(w.size(), size.isValid() ? size : QSize(1400, 900));
    QApplication::processEvents();
    EstimatesView* view = w.estimatesView();
    QVERIFY(view->isVisible());
    MemoryChart* memory = view->memoryChart();
    StepTimeChart* step = view->stepTimeChart();
    QVERIFY2(memory->plotRect().height() >= MemoryChart::kMinPlotHeight,
             qPrintable(QStringLiteral("memory plot %1 px high in a %2 x %3 chart").arg(memory->plotRect().height()).arg(memory->width()).arg(memory->height())));
    QVERIFY2(memory->plotRect().width() >= 200, qPrintable(QStringLiteral("memory plot %1 px wide").arg(memory->plotRect().width())));
    memory->grab();  // paints, and records the labels
    step->grab();
    for (QWidget* chart : {static_cast<QWidget*>(memory), static_cast<QWidget*>(step)}) {
      const auto& labels = chart == memory ? memory->paintedLabels() : step->paintedLabels();
      QVERIFY(labels.size() >= 5);
      const QRectF bounds = QRectF(chart->rect()).adjusted(-0.5, -0.5, 0.5, 0.5);
      for (size_t i = 0; i < labels.size(); ++i) {
        const PaintedLabel& a = labels[i];
        QVERIFY2(bounds.contains(a.rect) && a.box.adjusted(-0.5, -0.5, 0.5, 0.5).contains(a.rect) && !a.text.contains(QChar(0x2026)),
                 qPrintable(QStringLiteral("\"%1\" is cut: glyphs %2,%3 %4x%5 in a box %6,%7 %8x%9 of a %10x%11 chart")
                                .arg(a.text)
                                .arg(a.rect.x()).arg(a.rect.y()).arg(a.rect.width()).arg(a.rect.height())
                                .arg(a.box.x()).arg(a.box.y()).arg(a.box.width()).arg(a.box.height())
                                .arg(chart->width()).arg(chart->height())));
        for (size_t j = i + 1; j < labels.size(); ++j) {
          QVERIFY2(!a.rect.intersects(labels[j].rect),
                   qPrintable(QStringLiteral("\"%1\" overlaps \"%2\"").arg(a.text, labels[j].text)));
        }
      }
    }
    // The memory chart names the device.
    bool device = false;
    for (const PaintedLabel& l : memory->paintedLabels()) device = device || l.text.contains(QStringLiteral("80.0 GiB"));
    QVERIFY(device);
  }

  // The application's screenshot of the Runs view on its Timeline tab (the README's picture), and
  // a view it does not have refused in one line.
  void screenshotOfTheTimelineTab() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QString db;
    auto st = timing_test::newHistory(dir, &db);
    const auto c = timing_test::tinyConfig({"train.steps=60"});
    using Op = stagecraft::launch::TimingEvent::Op;
    timing_test::recordRun(
        *st, c, 10, [](int, int, int64_t) { return timing_test::Parts{.step = 30, .forward = 5, .backward = 10, .ppWait = 10}; },
        [](int, int ppRank, int64_t) {
          return std::vector<Op>{{false, ppRank, 0, 0, 3}, {true, ppRank, 0, 10, 16}, {false, ppRank, 1, 3, 6}, {true, ppRank, 1, 16, 22}};
        });
    QProcess app;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("STAGECRAFT_DB", db);
    env.insert("QT_QPA_PLATFORM", "offscreen");
    app.setProcessEnvironment(env);
    const QString png = dir.filePath("timeline.png");
    app.start(STAGECRAFT_BIN_DIR "/stagecraft", {"--screenshot", png, "--show", "timeline", STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml"});
    QVERIFY(app.waitForFinished(60000));
    QCOMPARE(app.exitCode(), 0);
    const QImage image(png);
    QCOMPARE(image.size(), QSize(1400, 600));
    app.start(STAGECRAFT_BIN_DIR "/stagecraft", {"--screenshot", png, "--show", "timelines"});
    QVERIFY(app.waitForFinished(60000));
    QCOMPARE(app.exitCode(), 2);
    QVERIFY(QString::fromUtf8(app.readAllStandardError()).contains("--show timelines: no such view"));
  }

 private:
  QTemporaryDir m_settingsDir;

};

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
