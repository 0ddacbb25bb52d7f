// tst_plan_document: PlanDocument's edits, validation, undo/redo, files, import and export,
// checked against the engine's own plan of the same config.
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "document/PlanDocument.h"
#include "run_timing_support.h"
#include "stagecraft/config/config_io.h"

namespace cfg = stagecraft::config;
using stagecraft::config::Axis;

Q_DECLARE_METATYPE(stagecraft::interop::Framework)

namespace {

QString example(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + QLatin1String(name); }

std::vector<std::vector<int>> tpGroups(const PlanDocument& doc) { return doc.plan().topology.groups(Axis::kTp); }

}  // namespace

class TestPlanDocument : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void startsWithAValidPlan() {
    PlanDocument doc;
    QVERIFY(doc.hasPlan());
    QVERIFY(doc.isValid());
    QCOMPARE(doc.plan().tp, 2);
    QCOMPARE(doc.plan().dp, 2);
    QCOMPARE(doc.plan().pp, 2);
    // docs/ARCHITECTURE.md §4 worked example: 8 GPUs, dp = tp = pp = 2.
    QCOMPARE(tpGroups(doc), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
    QVERIFY(!doc.isModified());
    QCOMPARE(doc.displayName(), QStringLiteral("untitled"));
  }

  void applyEdit_data() {
    QTest::addColumn<QStringList>("edits");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("firstTpGroupSize");
    QTest::newRow("dp auto, tp 4 -> dp 1") << QStringList{"parallel.dp=auto", "parallel.tp=4"} << 1 << 4 << 2 << 4;
    QTest::newRow("dp auto, pp 1 -> dp 4") << QStringList{"parallel.dp=auto", "parallel.pp=1"} << 4 << 2 << 1 << 2;
    QTest::newRow("dp 8 tp 1 pp 1") << QStringList{"parallel.dp=auto", "parallel.tp=1", "parallel.pp=1"} << 8 << 1 << 1 << 1;
    QTest::newRow("two nodes, dp auto -> dp 4") << QStringList{"parallel.dp=auto", "cluster.nodes=2"} << 4 << 2 << 2 << 2;
  }
  void applyEdit() {
    QFETCH(QStringList, edits);
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(int, firstTpGroupSize);
    PlanDocument doc;
    QSignalSpy planSpy(&doc, &PlanDocument::planChanged);
    for (const QString& e : edits) {
      const qsizetype eq = e.indexOf(QLatin1Char('='));
      QString error;
      QVERIFY2(doc.applyEdit(e.left(eq), e.mid(eq + 1), &error), qPrintable(error));
    }
    QCOMPARE(planSpy.count(), edits.size());
    QCOMPARE(doc.plan().dp, dp);
    QCOMPARE(doc.plan().tp, tp);
    QCOMPARE(doc.plan().pp, pp);
    QCOMPARE(static_cast<int>(tpGroups(doc).front().size()), firstTpGroupSize);
    // The document's plan is the engine's plan of the document's config.
    auto expected = stagecraft::plan::make_plan(doc.config());
    QVERIFY(expected.ok());
    QCOMPARE(tpGroups(doc), expected->topology.groups(Axis::kTp));
    QCOMPARE(doc.plan().layer_stage, expected->layer_stage);
    QVERIFY(doc.isModified());
  }

  void invalidEditKeepsLastPlan_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<int>("value");
    QTest::addColumn<QString>("messagePart");
    QTest::newRow("tp=3 on 8 GPUs, dp auto") << "parallel.tp" << 3 << "not divisible by tp x pp = 6";
    QTest::newRow("pp=40 > 24 layers") << "parallel.pp" << 40 << "more pipeline stages than the model's 24 layers";
    QTest::newRow("heads=15 does not divide hidden") << "model.heads" << 15 << "must divide model.hidden=1024";
  }
  void invalidEditKeepsLastPlan() {
    QFETCH(QString, key);
    QFETCH(int, value);
    QFETCH(QString, messagePart);
    PlanDocument doc;
    doc.applyEdit(QStringLiteral("parallel.dp"), QStringLiteral("auto"));
    const auto before = tpGroups(doc);
    QSignalSpy planSpy(&doc, &PlanDocument::planChanged);
    QSignalSpy failSpy(&doc, &PlanDocument::validationFailed);
    cfg::RunConfig c = doc.config();
    if (key == "parallel.tp") c.parallel.tp = value;
    if (key == "parallel.pp") c.parallel.pp = value;
    if (key == "model.heads") c.model.heads = value;
    doc.setConfig(c, QStringLiteral("Change %1").arg(key), key);
    QVERIFY(!doc.isValid());
    QCOMPARE(planSpy.count(), 0);
    QCOMPARE(failSpy.count(), 1);
    QVERIFY2(doc.problemText(key).contains(messagePart), qPrintable(doc.problemText(key)));
    QVERIFY(doc.problemText(key).startsWith(key + QLatin1Char('=') + QString::number(value) + QLatin1Char(':')));
    // The edited config holds the bad value; the plan is still the last valid one.
    QCOMPARE(doc.config().parallel.tp == 3, key == "parallel.tp");
    QCOMPARE(tpGroups(doc), before);
    // Undo brings the valid config back and clears the problems.
    doc.undoStack()->undo();
    QVERIFY(doc.isValid());
    QVERIFY(doc.problemText(key).isEmpty());
  }

  void applyEditRefusesUnreadableValue() {
    PlanDocument doc;
    const cfg::RunConfig before = doc.config();
    QSignalSpy failSpy(&doc, &PlanDocument::validationFailed);
    QString error;
    QVERIFY(!doc.applyEdit(QStringLiteral("parallel.tp"), QStringLiteral("two"), &error));
    QVERIFY2(error.startsWith(QLatin1String("parallel.tp")), qPrintable(error));
    QCOMPARE(failSpy.count(), 1);
    QCOMPARE(failSpy.at(0).at(0).value<QList<ConfigProblem>>().first().key, QStringLiteral("parallel.tp"));
    QVERIFY(doc.config() == before);
    QCOMPARE(doc.undoStack()->count(), 0);
    // A value that reads but breaks a rule: the message starts with the key, not an inner place.
    QVERIFY(!doc.applyEdit(QStringLiteral("train.global_batch"), QStringLiteral("15"), &error));
    QVERIFY2(error.startsWith(QLatin1String("train.global_batch=15: must be a multiple of dp x micro_batch")), qPrintable(error));
  }

  void undoRedoRestoresConfigAndPlan() {
    PlanDocument doc;
    const cfg::RunConfig c0 = doc.config();
    const auto groups0 = tpGroups(doc);
    QVERIFY(doc.applyEdit(QStringLiteral("parallel.dp"), QStringLiteral("auto")));
    QVERIFY(doc.applyEdit(QStringLiteral("parallel.pp"), QStringLiteral("1")));
    QVERIFY(doc.applyEdit(QStringLiteral("parallel.tp"), QStringLiteral("8")));
    const cfg::RunConfig c3 = doc.config();
    QCOMPARE(tpGroups(doc), (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
    QCOMPARE(doc.undoStack()->count(), 3);
    QSignalSpy planSpy(&doc, &PlanDocument::planChanged);
    doc.undoStack()->undo();
    doc.undoStack()->undo();
    doc.undoStack()->undo();
    QCOMPARE(planSpy.count(), 3);
    QVERIFY(doc.config() == c0);
    QCOMPARE(tpGroups(doc), groups0);
    QVERIFY(!doc.isModified());
    doc.undoStack()->redo();
    doc.undoStack()->redo();
    doc.undoStack()->redo();
    QVERIFY(doc.config() == c3);
    QCOMPARE(doc.plan().tp, 8);
    QCOMPARE(doc.plan().pp, 1);
  }

  void editsOfOneKeyMerge() {
    PlanDocument doc;
    cfg::RunConfig c = doc.config();
    for (int h : {1, 12, 128}) {
      c.model.hidden = h * 16;
      doc.setConfig(c, QStringLiteral("Change model.hidden"), QStringLiteral("model.hidden"));
    }
    QCOMPARE(doc.undoStack()->count(), 1);
    doc.undoStack()->undo();
    QCOMPARE(doc.config().model.hidden, 1024);
    doc.undoStack()->redo();
    QCOMPARE(doc.config().model.hidden, 2048);
  }

  void mergedEditsBackToStartLeaveNoStep_data() {
    QTest::addColumn<QList<int>>("layers");
    QTest::addColumn<int>("steps");
    QTest::addColumn<bool>("modified");
    QTest::newRow("24 -> 25 -> 24 leaves no step") << QList<int>{25, 24} << 0 << false;
    QTest::newRow("24 -> 25 -> 24 -> 26 is one step") << QList<int>{25, 24, 26} << 1 << true;
    QTest::newRow("24 -> 25 -> 26 is one step") << QList<int>{25, 26} << 1 << true;
  }
  void mergedEditsBackToStartLeaveNoStep() {
    QFETCH(QList<int>, layers);
    QFETCH(int, steps);
    QFETCH(bool, modified);
    PlanDocument doc;
    QSignalSpy modifiedSpy(&doc, &PlanDocument::modifiedChanged);
    cfg::RunConfig c = doc.config();
    for (int l : layers) {
      c.model.layers = l;
      doc.setConfig(c, QStringLiteral("Change model.layers"), QStringLiteral("model.layers"));
    }
    QCOMPARE(doc.undoStack()->count(), steps);
    QCOMPARE(doc.isModified(), modified);
    QCOMPARE(doc.undoStack()->canUndo(), steps > 0);
    QCOMPARE(doc.config().model.layers, layers.last());
    // The last announcement matches the state.
    QVERIFY(!modifiedSpy.isEmpty());
    QCOMPARE(modifiedSpy.last().at(0).toBool(), modified);
  }

  void destroyingAModifiedDocumentAnnouncesNothing() {
    auto* doc = new PlanDocument;
    QVERIFY(doc->applyEdit(QStringLiteral("train.micro_batch"), QStringLiteral("1")));
    QVERIFY(doc->isModified());
    int announced = 0;
    QObject receiver;
    connect(doc, &PlanDocument::modifiedChanged, &receiver, [&announced] { ++announced; });
    connect(doc, &PlanDocument::configChanged, &receiver, [&announced] { ++announced; });
    delete doc;
    QCOMPARE(announced, 0);
  }

  void partitionEdits() {
    PlanDocument doc;  // 24 layers, pp 2: uniform 12 + 12
    QCOMPARE(doc.plan().stages[0].num_layers, 12);
    std::vector<int> ids(24, 1);
    std::fill(ids.begin(), ids.begin() + 10, 0);
    doc.setPartition(ids);
    QCOMPARE(doc.config().pipeline.partition, cfg::PartitionKind::kExplicit);
    QCOMPARE(doc.plan().layer_stage, ids);
    QCOMPARE(doc.plan().stages[0].num_layers, 10);
    QCOMPARE(doc.plan().stages[1].num_layers, 14);
    doc.setPartitionKind(cfg::PartitionKind::kUniform);
    QVERIFY(doc.config().pipeline.stage_ids.empty());
    QCOMPARE(doc.plan().stages[0].num_layers, 12);
    doc.undoStack()->undo();
    QCOMPARE(doc.plan().layer_stage, ids);
    doc.setPartitionKind(cfg::PartitionKind::kBalanced);
    QCOMPARE(doc.config().pipeline.partition, cfg::PartitionKind::kBalanced);
    auto expected = stagecraft::plan::make_plan(doc.config());
    QVERIFY(expected.ok());
    QCOMPARE(doc.plan().layer_stage, expected->layer_stage);
  }

  // pipeline.costs: run:ID — balanced by what a recorded run measured: a run whose last stage
  // (layers 2-3 and the head) took five times the first's moves layers to the first stage; the
  // window reads the history the CLI does ($STAGECRAFT_DB here) and hands workers the split.
  void balancedByARunsMeasuredTimes() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QByteArray db = dir.filePath("runs.sqlite").toUtf8();
    qputenv("STAGECRAFT_DB", db);
    auto st = stagecraft::store::RunStore::open(db.toStdString());
    QVERIFY(st.ok());
    const auto recorded = timing_test::tinyConfig({"train.steps=60"});
    using Op = stagecraft::launch::TimingEvent::Op;
    const qint64 id = timing_test::recordRun(
        *st.value(), recorded, 10, [](int, int, int64_t) { return timing_test::Parts{.step = 100, .forward = 20, .backward = 40}; },
        [](int, int ppRank, int64_t) {
          const double len = ppRank == 0 ? 1.0 : 5.0;  // per micro-batch, forward + backward
          return std::vector<Op>{{false, ppRank, 0, 0, len / 3}, {true, ppRank, 0, 10, 10 + 2 * len / 3},
                                 {false, ppRank, 1, 20, 20 + len / 3}, {true, ppRank, 1, 30, 30 + 2 * len / 3}};
        });
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("tiny-gpt.yaml"), &error), qPrintable(error));
    QVERIFY(doc.applyEdit(QStringLiteral("pipeline.partition"), QStringLiteral("balanced"), &error));
    const std::vector<int> by_model = doc.plan().layer_stage;
    QVERIFY2(doc.applyEdit(QStringLiteral("pipeline.costs"), QStringLiteral("run:%1").arg(id), &error), qPrintable(error));
    QVERIFY2(doc.isValid(), qPrintable(doc.problems().isEmpty() ? QString() : doc.problems().first().message));
    QCOMPARE(doc.config().pipeline.partition, cfg::PartitionKind::kBalanced);  // the document keeps what was asked
    QCOMPARE(doc.plan().layer_stage, (std::vector<int>{0, 0, 0, 1}));
    QVERIFY(doc.plan().layer_stage != by_model);
    // Launching: the workers' config carries the split itself, here and on hosts.
    QCOMPARE(doc.configForWorkers().pipeline.partition, cfg::PartitionKind::kExplicit);
    QCOMPARE(doc.configForWorkers().pipeline.stage_ids, (std::vector<int>{0, 0, 0, 1}));
    auto launched = doc.planForHosts({{"node-a", {0, 1}}, {"node-b", {0, 1}}}, &error);
    QVERIFY2(launched, qPrintable(error));
    QCOMPARE(launched->config.pipeline.partition, cfg::PartitionKind::kExplicit);
    QCOMPARE(launched->config.pipeline.stage_ids, (std::vector<int>{0, 0, 0, 1}));
    // A run that is not there: the document says so, keeping the last valid plan.
    QVERIFY(doc.applyEdit(QStringLiteral("pipeline.costs"), QStringLiteral("run:999"), &error) || !error.isEmpty());
    QVERIFY(!doc.isValid());
    QVERIFY(doc.problems().first().message.contains("run 999"));
    qunsetenv("STAGECRAFT_DB");
  }

  void openSaveRoundTrip() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    PlanDocument doc;
    QString error;
    QVERIFY2(doc.open(example("gpt3-175b-1024x8.yaml"), &error), qPrintable(error));
    QCOMPARE(doc.displayName(), QStringLiteral("gpt3-175b-1024x8.yaml"));
    QCOMPARE(doc.plan().topology.world_size(), 1024 * 8);
    QVERIFY(!doc.isModified());
    QVERIFY2(doc.applyEdit(QStringLiteral("train.micro_batch"), QStringLiteral("3"), &error), qPrintable(error));
    QVERIFY(doc.isModified());
    QSignalSpy modifiedSpy(&doc, &PlanDocument::modifiedChanged);
    const QString path = dir.filePath(QStringLiteral("saved.yaml"));
    QVERIFY2(doc.saveAs(path, &error), qPrintable(error));
    QVERIFY(!doc.isModified());
    QCOMPARE(modifiedSpy.count(), 1);
    QCOMPARE(doc.filePath(), QFileInfo(path).absoluteFilePath());

    PlanDocument other;
    QVERIFY2(other.open(path, &error), qPrintable(error));
    QVERIFY(other.config() == doc.config());
    QCOMPARE(other.plan().layer_stage, doc.plan().layer_stage);
    QCOMPARE(other.config().train.micro_batch, 3);
    // Save writes back to the same file.
    QVERIFY2(other.applyEdit(QStringLiteral("train.steps"), QStringLiteral("7000"), &error), qPrintable(error));
    QVERIFY2(other.save(&error), qPrintable(error));
    auto reread = cfg::load_config_file(path.toStdString());
    QVERIFY(reread.ok());
    QCOMPARE(reread->train.steps, 7000);
  }

  void fileErrors() {
    QTemporaryDir dir;
    PlanDocument doc;
    const cfg::RunConfig before = doc.config();
    QString error;
    QVERIFY(!doc.open(dir.filePath(QStringLiteral("missing.yaml")), &error));
    QVERIFY2(error.contains(QLatin1String("missing.yaml")), qPrintable(error));
    QVERIFY(doc.config() == before);

    const QString bad = dir.filePath(QStringLiteral("bad.yaml"));
    QVERIFY(cfg::write_text_file_atomic(bad.toStdString(), "model: {layers: 4, hidden: 64, heads: 4}\nparallel: {tp: 3}\n"));
    error.clear();
    QVERIFY(!doc.open(bad, &error));
    QVERIFY2(error.contains(QLatin1String("parallel.tp=3")), qPrintable(error));
    QVERIFY(doc.config() == before);

    error.clear();
    QVERIFY(!doc.save(&error));  // untitled
    QVERIFY2(error.contains(QLatin1String("Save As")), qPrintable(error));

    cfg::RunConfig c = doc.config();
    c.parallel.tp = 3;
    doc.setConfig(c, QStringLiteral("Change parallel.tp"));
    error.clear();
    QVERIFY(!doc.saveAs(dir.filePath(QStringLiteral("x.yaml")), &error));
    QVERIFY2(error.contains(QLatin1String("parallel.")), qPrintable(error));
    QVERIFY(!QFileInfo::exists(dir.filePath(QStringLiteral("x.yaml"))));
  }

  void exportWritesFiles_data() {
    QTest::addColumn<stagecraft::interop::Framework>("framework");
    QTest::addColumn<QString>("fileName");
    QTest::newRow("libai") << stagecraft::interop::Framework::kLibai << "libai_config.py";
    QTest::newRow("paddle") << stagecraft::interop::Framework::kPaddle << "paddle.yaml";
    QTest::newRow("colossalai") << stagecraft::interop::Framework::kColossalai << "colossal_config.py";
    QTest::newRow("megatron") << stagecraft::interop::Framework::kMegatron << "megatron.sh";
    QTest::newRow("deepspeed") << stagecraft::interop::Framework::kDeepspeed << "ds_config.json";
  }
  void exportWritesFiles() {
    QFETCH(stagecraft::interop::Framework, framework);
    QFETCH(QString, fileName);
    QTemporaryDir dir;
    PlanDocument doc;
    QString error;
    QVERIFY(doc.open(example("bert-large-3d.yaml"), &error));
    const QString path = dir.filePath(fileName);
    QStringList notes, written;
    QVERIFY2(doc.exportTo(framework, path, &error, &notes, &written), qPrintable(error));
    QVERIFY(!written.isEmpty());
    QCOMPARE(written.first(), path);
    auto expected = stagecraft::interop::export_files(doc.config(), framework, {fileName.toStdString()});
    QVERIFY(expected.ok());
    QCOMPARE(written.size(), static_cast<qsizetype>(expected->files.size()));
    for (const QString& f : written) {
      QVERIFY2(QFileInfo(f).size() > 0, qPrintable(f));
    }
    QFile main(path);
    QVERIFY(main.open(QIODevice::ReadOnly));
    QCOMPARE(main.readAll().toStdString(), expected->files[0].text);
  }

  void importAfterExportPlansTheSame_data() {
    QTest::addColumn<stagecraft::interop::Framework>("framework");
    QTest::newRow("libai") << stagecraft::interop::Framework::kLibai;
    QTest::newRow("deepspeed") << stagecraft::interop::Framework::kDeepspeed;
  }
  void importAfterExportPlansTheSame() {
    QFETCH(stagecraft::interop::Framework, framework);
    QTemporaryDir dir;
    PlanDocument source;
    QString error;
    QVERIFY(source.open(example("bert-large-3d.yaml"), &error));
    const QString path = dir.filePath(QStringLiteral("exported"));
    QVERIFY2(source.exportTo(framework, path, &error), qPrintable(error));

    PlanDocument doc;
    QVERIFY(doc.open(example("bert-large-3d.yaml"), &error));
    QVERIFY2(doc.importFrom(framework, path, &error), qPrintable(error));
    QVERIFY(doc.isModified());
    QVERIFY(doc.filePath().isEmpty());
    QCOMPARE(doc.plan().dp, source.plan().dp);
    QCOMPARE(doc.plan().tp, source.plan().tp);
    QCOMPARE(doc.plan().pp, source.plan().pp);
    QCOMPARE(doc.plan().micro_batches, source.plan().micro_batches);
    QCOMPARE(tpGroups(doc), tpGroups(source));
    QCOMPARE(doc.plan().layer_stage, source.plan().layer_stage);

    error.clear();
    QVERIFY(!doc.importFrom(stagecraft::interop::Framework::kLibai, dir.filePath(QStringLiteral("nothing.py")), &error));
    QVERIFY(!error.isEmpty());
  }

  void newDocumentClearsHistory() {
    PlanDocument doc;
    QString error;
    QVERIFY(doc.open(example("tiny-gpt.yaml"), &error));
    QVERIFY(doc.applyEdit(QStringLiteral("train.steps"), QStringLiteral("100")));
    doc.newDocument();
    QCOMPARE(doc.undoStack()->count(), 0);
    QVERIFY(doc.filePath().isEmpty());
    QVERIFY(!doc.isModified());
    QVERIFY(doc.config() == PlanDocument::defaultConfig());
  }
};

QTEST_MAIN(TestPlanDocument)
#include "tst_plan_document.moc"
