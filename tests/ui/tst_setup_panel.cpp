// tst_setup_panel: the setup form over a real PlanDocument — it shows the document, edits it as
// you type, puts every problem at its field while the last valid plan stays, follows undo.
#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QtTest>

#include "document/PlanDocument.h"
#include "setup/SetupPanel.h"
#include "stagecraft/config/config_schema.h"
#include "stagecraft/plan/plan.h"

using stagecraft::config::Axis;

namespace {

QString example(const char* name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + QLatin1String(name); }

QSpinBox* spin(const SetupPanel& panel, const QString& key) { return qobject_cast<QSpinBox*>(panel.field(key)); }

}  // namespace

class TestSetupPanel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void fieldsShowTheDocument_data() {
    QTest::addColumn<QString>("file");
    QTest::newRow("bert-large-3d") << "bert-large-3d.yaml";
    QTest::newRow("gpt3-175b-1024x8") << "gpt3-175b-1024x8.yaml";
    QTest::newRow("tiny-gpt") << "tiny-gpt.yaml";
    QTest::newRow("colossalai-2p5d") << "colossalai-2p5d.yaml";
  }
  void fieldsShowTheDocument() {
    QFETCH(QString, file);
    PlanDocument doc;
    SetupPanel panel(&doc);
    QString error;
    QVERIFY2(doc.open(example(file.toLatin1().constData()), &error), qPrintable(error));
    const auto& c = doc.config();
    QCOMPARE(spin(panel, "cluster.nodes")->value(), c.cluster.nodes);
    QCOMPARE(spin(panel, "cluster.gpus_per_node")->value(), c.cluster.gpus_per_node);
    QCOMPARE(spin(panel, "model.layers")->value(), c.model.layers);
    QCOMPARE(spin(panel, "model.hidden")->value(), c.model.hidden);
    QCOMPARE(spin(panel, "model.heads")->value(), c.model.heads);
    QCOMPARE(spin(panel, "parallel.dp")->value(), c.parallel.dp);
    QCOMPARE(spin(panel, "parallel.tp")->value(), c.parallel.tp);
    QCOMPARE(spin(panel, "parallel.pp")->value(), c.parallel.pp);
    QCOMPARE(spin(panel, "train.global_batch")->value(), c.train.global_batch);
    QCOMPARE(spin(panel, "train.micro_batch")->value(), c.train.micro_batch);
    auto* device = qobject_cast<QComboBox*>(panel.field("cluster.device"));
    QCOMPARE(device->currentData().toString().toStdString(), c.cluster.device);
    auto* mode = qobject_cast<QComboBox*>(panel.field("parallel.tp_mode"));
    QCOMPARE(mode->currentData().toString().toStdString(), std::string(stagecraft::config::to_string(c.parallel.tp_mode)));
    auto* schedule = qobject_cast<QComboBox*>(panel.field("pipeline.schedule"));
    QCOMPARE(schedule->currentData().toString().toStdString(), std::string(stagecraft::config::to_string(c.pipeline.schedule)));
    auto* sp = qobject_cast<QCheckBox*>(panel.field("parallel.sequence_parallel"));
    QCOMPARE(sp->isChecked(), c.parallel.sequence_parallel);
    // Showing a document is not an edit.
    QCOMPARE(doc.undoStack()->count(), 0);
    for (const QString& key : panel.keys()) QVERIFY2(panel.fieldError(key).isEmpty(), qPrintable(key));
  }

  void typingEditsTheDocument() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    spin(panel, "parallel.dp")->setValue(0);
    QCOMPARE(doc.config().parallel.dp, 0);  // auto
    // Type "4" into the tp field, keystroke by keystroke.
    QSpinBox* tp = spin(panel, "parallel.tp");
    auto* line = tp->findChild<QLineEdit*>();
    QVERIFY(line);
    line->selectAll();
    QTest::keyClicks(line, QStringLiteral("4"));
    QCOMPARE(doc.config().parallel.tp, 4);
    QCOMPARE(doc.plan().tp, 4);
    QCOMPARE(doc.plan().dp, 1);
    QCOMPARE(doc.plan().topology.groups(Axis::kTp), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    auto* schedule = qobject_cast<QComboBox*>(panel.field("pipeline.schedule"));
    schedule->setCurrentIndex(schedule->findData(QStringLiteral("gpipe")));
    QCOMPARE(doc.plan().config.pipeline.schedule, stagecraft::config::Schedule::kGpipe);
    QCOMPARE(doc.undoStack()->count(), 3);
  }

  void invalidValueShowsAtItsField_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<int>("value");
    QTest::addColumn<QString>("messagePart");
    QTest::addColumn<int>("fixValue");
    QTest::addColumn<QStringList>("alsoFlagged");  // keys a second broken rule is about
    // dp is auto in these rows (set first), so the world rule is reported at tp.
    QTest::newRow("tp=3 on 8 GPUs") << "parallel.tp" << 3 << "8 GPUs are not divisible by tp x pp = 6" << 4 << QStringList{};
    QTest::newRow("pp=30 > 24 layers") << "parallel.pp" << 30 << "more pipeline stages than the model's 24 layers" << 4
                                       << QStringList{"parallel.tp"};  // tp x pp = 60 > 8 GPUs
    QTest::newRow("heads=15") << "model.heads" << 15 << "must divide model.hidden=1024" << 32
                              << QStringList{"parallel.tp"};  // tp=2 must divide heads
    QTest::newRow("global_batch=15") << "train.global_batch" << 15 << "must be a multiple of dp x micro_batch" << 32 << QStringList{};
  }
  void invalidValueShowsAtItsField() {
    QFETCH(QString, key);
    QFETCH(int, value);
    QFETCH(QString, messagePart);
    QFETCH(int, fixValue);
    QFETCH(QStringList, alsoFlagged);
    PlanDocument doc;
    SetupPanel panel(&doc);
    spin(panel, "parallel.dp")->setValue(0);
    const auto groupsBefore = doc.plan().topology.groups(Axis::kTp);
    const auto stagesBefore = doc.plan().layer_stage;

    spin(panel, key)->setValue(value);
    const QString error = panel.fieldError(key);
    QVERIFY2(error.contains(messagePart), qPrintable(error));
    QVERIFY2(error.startsWith(key + QLatin1Char('=') + QString::number(value) + QLatin1Char(':')), qPrintable(error));
    QCOMPARE(panel.field(key)->toolTip(), error);
    QVERIFY(panel.field(key)->styleSheet().contains(QLatin1String("border")));
    auto* label = panel.findChild<QLabel*>(key + QStringLiteral(".error"));
    QVERIFY(label);
    QVERIFY(!label->isHidden());
    // Other fields stay clean; the plan is the last valid one.
    for (const QString& k : panel.keys()) {
      if (k != key) QCOMPARE(panel.fieldError(k).isEmpty(), !alsoFlagged.contains(k));
    }
    QCOMPARE(doc.plan().topology.groups(Axis::kTp), groupsBefore);
    QCOMPARE(doc.plan().layer_stage, stagesBefore);

    spin(panel, key)->setValue(fixValue);
    QVERIFY2(panel.fieldError(key).isEmpty(), qPrintable(panel.fieldError(key)));
    for (const QString& k : alsoFlagged) QVERIFY2(panel.fieldError(k).isEmpty(), qPrintable(panel.fieldError(k)));
    QVERIFY(panel.field(key)->styleSheet().isEmpty());
    QVERIFY(label->isHidden());
    QVERIFY(doc.isValid());
  }

  void problemWithoutFieldIsListed() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    QString error;
    QVERIFY(doc.open(example("tiny-gpt.yaml"), &error));  // warmup_steps: 50
    spin(panel, "train.steps")->setValue(5);
    QVERIFY2(panel.otherErrors().contains(QLatin1String("train.warmup_steps=50")), qPrintable(panel.otherErrors()));
    spin(panel, "train.steps")->setValue(100);
    QVERIFY(panel.otherErrors().isEmpty());
  }

  void formFollowsUndoAndRedo() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    spin(panel, "parallel.dp")->setValue(0);
    spin(panel, "parallel.pp")->setValue(1);
    QCOMPARE(doc.plan().dp, 4);
    doc.undoStack()->undo();
    QCOMPARE(spin(panel, "parallel.pp")->value(), 2);
    QCOMPARE(doc.plan().dp, 2);
    doc.undoStack()->undo();
    QCOMPARE(spin(panel, "parallel.dp")->value(), 2);
    QVERIFY(!doc.isModified());
    doc.undoStack()->redo();
    QCOMPARE(spin(panel, "parallel.dp")->value(), 0);
    QCOMPARE(spin(panel, "parallel.dp")->text(), QStringLiteral("auto"));
    // An invalid value undone clears its error.
    spin(panel, "parallel.tp")->setValue(3);
    QVERIFY(!panel.fieldError("parallel.tp").isEmpty());
    doc.undoStack()->undo();
    QCOMPARE(spin(panel, "parallel.tp")->value(), 2);
    QVERIFY(panel.fieldError("parallel.tp").isEmpty());
  }

  void partitionChoice() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    auto* partition = qobject_cast<QComboBox*>(panel.field("pipeline.partition"));
    partition->setCurrentIndex(partition->findData(QStringLiteral("explicit")));
    // Explicit keeps the stages as they were, now as a list.
    QCOMPARE(doc.config().pipeline.partition, stagecraft::config::PartitionKind::kExplicit);
    QCOMPARE(doc.config().pipeline.stage_ids, doc.plan().layer_stage);
    std::vector<int> ids(24, 1);
    std::fill(ids.begin(), ids.begin() + 5, 0);
    doc.setPartition(ids);
    QCOMPARE(partition->currentData().toString(), QStringLiteral("explicit"));
    partition->setCurrentIndex(partition->findData(QStringLiteral("uniform")));
    QVERIFY(doc.config().pipeline.stage_ids.empty());
    QCOMPARE(doc.plan().stages[0].num_layers, 12);
  }

  void explicitPartitionOfAnInvalidConfigTakesNoStaleIds() {
    PlanDocument doc;  // 24 layers; the plan's layer_stage has 24 entries
    SetupPanel panel(&doc);
    spin(panel, "model.heads")->setValue(15);  // invalid: the plan stays the 24-layer one
    spin(panel, "model.layers")->setValue(30);
    QVERIFY(!doc.isValid());
    QCOMPARE(static_cast<int>(doc.plan().layer_stage.size()), 24);
    auto* partition = qobject_cast<QComboBox*>(panel.field("pipeline.partition"));
    partition->setCurrentIndex(partition->findData(QStringLiteral("explicit")));
    QCOMPARE(doc.config().pipeline.partition, stagecraft::config::PartitionKind::kExplicit);
    QVERIFY(doc.config().pipeline.stage_ids.empty());
    // Once valid again, choosing explicit takes the current plan's 30 ids.
    partition->setCurrentIndex(partition->findData(QStringLiteral("uniform")));
    spin(panel, "model.heads")->setValue(16);
    QVERIFY2(doc.isValid(), qPrintable(doc.problems().isEmpty() ? QString() : doc.problems().first().message));
    partition->setCurrentIndex(partition->findData(QStringLiteral("explicit")));
    QCOMPARE(static_cast<int>(doc.config().pipeline.stage_ids.size()), 30);
    QCOMPARE(doc.config().pipeline.stage_ids, doc.plan().layer_stage);
  }

  void fieldsShowValuesOutsideTheirUsualRange_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<int>("value");
    QTest::newRow("tp 0") << "parallel.tp" << 0;
    QTest::newRow("pp 0") << "parallel.pp" << 0;
    QTest::newRow("gpus_per_node 2048") << "cluster.gpus_per_node" << 2048;
    QTest::newRow("dp 200000") << "parallel.dp" << 200000;
    QTest::newRow("tp -1") << "parallel.tp" << -1;
  }
  void fieldsShowValuesOutsideTheirUsualRange() {
    QFETCH(QString, key);
    QFETCH(int, value);
    PlanDocument doc;
    SetupPanel panel(&doc);
    auto c = doc.config();
    if (key == "parallel.tp") c.parallel.tp = value;
    if (key == "parallel.pp") c.parallel.pp = value;
    if (key == "parallel.dp") c.parallel.dp = value;
    if (key == "cluster.gpus_per_node") c.cluster.gpus_per_node = value;
    doc.setConfig(c, QStringLiteral("as read from a file"));
    QCOMPARE(spin(panel, key)->value(), value);
    // Showing it is not an edit: the config keeps the value and the engine's rule is shown.
    QCOMPARE(doc.undoStack()->count(), 1);
    QVERIFY(!doc.isValid());
    bool shown = !panel.otherErrors().isEmpty();
    for (const QString& k : panel.keys()) shown = shown || !panel.fieldError(k).isEmpty();
    QVERIFY2(shown, qPrintable(key));
  }

  // The form keeps its fields, order and grouping; each field is its schema entry's.
  void formHasTheSameFieldsInOrder() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    const QStringList expected = {
        "cluster.nodes", "cluster.gpus_per_node", "cluster.device",
        "model.arch", "model.layers", "model.hidden", "model.heads", "model.kv_heads", "model.ffn_hidden", "model.seq_len", "model.vocab",
        "parallel.dp", "parallel.tp", "parallel.pp", "parallel.cp", "parallel.cp_comm", "parallel.ep", "parallel.expert_tp", "parallel.tp_mode", "parallel.tp_depth", "parallel.order",
        "parallel.sequence_parallel", "parallel.zero", "parallel.overlap_grad_reduce",
        "pipeline.schedule", "pipeline.virtual_stages", "pipeline.partition", "pipeline.costs",
        "train.global_batch", "train.micro_batch", "train.steps", "train.precision", "train.recompute", "train.tf32", "train.attention",
        "launch.program", "launch.metrics", "launch.args", "launch.framework"};
    QCOMPARE(panel.keys(), expected);
    QStringList groups;
    for (const QGroupBox* box : panel.findChildren<QGroupBox*>()) groups << box->title();
    QCOMPARE(groups, (QStringList{"Cluster", "Model", "Parallel", "Pipeline", "Training", "Launch"}));
  }

  // Text keys (launch.program, launch.args) are line edits: typing edits the document, one undo
  // step per keystroke as in the spin boxes, and the document's value shows in the field.
  void textFieldEditsItsKey() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    auto* program = qobject_cast<QLineEdit*>(panel.field(QStringLiteral("launch.program")));
    auto* args = qobject_cast<QLineEdit*>(panel.field(QStringLiteral("launch.args")));
    QVERIFY(program && args);
    QVERIFY(program->text().isEmpty());
    QTest::keyClicks(program, "ddp.py");
    QCOMPARE(doc.config().launch.program, std::string("ddp.py"));
    QCOMPARE(doc.undoStack()->count() > 0, true);
    QTest::keyClicks(args, "--format 'nano gpt'");
    QCOMPARE(doc.config().launch.args, std::string("--format 'nano gpt'"));
    doc.undoStack()->undo();
    QCOMPARE(args->text().toStdString(), doc.config().launch.args);
    QVERIFY(args->text() != QStringLiteral("--format 'nano gpt'"));
    stagecraft::config::RunConfig c = doc.config();
    c.launch.program = "other.sh";
    doc.setConfig(c, QStringLiteral("set program"), QStringLiteral("launch.program"));
    QCOMPARE(program->text(), QStringLiteral("other.sh"));
  }

  void fieldsFollowTheSchema_data() {
    QTest::addColumn<QString>("key");
    for (const auto& k : stagecraft::config::config_schema()) {
      if (!k.label.empty()) QTest::newRow(std::string(k.path).c_str()) << QString::fromUtf8(k.path.data(), k.path.size());
    }
  }
  void fieldsFollowTheSchema() {
    QFETCH(QString, key);
    namespace cfg = stagecraft::config;
    const cfg::KeySpec* k = cfg::find_key(key.toStdString());
    QVERIFY(k);
    PlanDocument doc;
    SetupPanel panel(&doc);
    QWidget* editor = panel.field(key);
    QVERIFY(editor);
    QCOMPARE(editor->whatsThis().toStdString(), std::string(k->help));
    auto* form = qobject_cast<QFormLayout*>(editor->parentWidget()->parentWidget()->layout());
    QVERIFY(form);
    auto* label = qobject_cast<QLabel*>(form->labelForField(editor->parentWidget()));
    QVERIFY(label);
    QCOMPARE(label->text().toStdString(), std::string(k->label));
    if (auto* spin = qobject_cast<QSpinBox*>(editor)) {
      QCOMPARE(spin->minimum(), k->zero_label.empty() ? static_cast<int>(k->min) : 0);
      QCOMPARE(spin->maximum(), static_cast<int>(k->max));
      QCOMPARE(spin->specialValueText().toStdString(), std::string(k->zero_label));
    } else if (auto* combo = qobject_cast<QComboBox*>(editor); combo && !k->choices.empty()) {
      QStringList values;
      for (int i = 0; i < combo->count(); ++i) values << combo->itemData(i).toString();
      QStringList choices;
      for (std::string_view c : k->choices) choices << QString::fromUtf8(c.data(), c.size());
      QCOMPARE(values, choices);
    }
  }

  // The expert layout's fields are shown for a mixture of experts only (or when set away from 1
  // on a dense model, so the problem stays in view); they edit parallel.ep and expert_tp, the plan
  // folds the experts accordingly, and they follow the document (undo).
  void expertFieldsForMixtures() {
    PlanDocument doc;
    SetupPanel panel(&doc);
    QString error;
    QVERIFY2(doc.open(example("bert-large-3d.yaml"), &error), qPrintable(error));
    QVERIFY(!panel.isFieldShown("parallel.ep"));
    QVERIFY(!panel.isFieldShown("parallel.expert_tp"));
    QVERIFY(panel.isFieldShown("parallel.cp"));
    QVERIFY2(doc.open(example("mixtral-8x7b-8x8.yaml"), &error), qPrintable(error));
    QVERIFY(panel.isFieldShown("parallel.ep"));
    QVERIFY(panel.isFieldShown("parallel.expert_tp"));
    QCOMPARE(spin(panel, "parallel.ep")->value(), 8);  // the example: tp 1, pp 4, ep 8, dp 16
    spin(panel, "parallel.ep")->setValue(4);
    QCOMPARE(doc.config().parallel.ep, 4);
    QVERIFY2(doc.isValid(), qPrintable(panel.otherErrors()));
    using stagecraft::plan::ExpertAxis;
    QCOMPARE(doc.plan().topology.expert_size(ExpertAxis::kEp), 4);
    QCOMPARE(doc.plan().topology.expert_group_of(5, ExpertAxis::kEp), (std::vector<int>{4, 5, 6, 7}));
    spin(panel, "parallel.expert_tp")->setValue(2);
    QCOMPARE(doc.config().parallel.expert_tp, 2);
    // ep 4 x expert tp 2 fold over a stage's 16 ranks (dp 16): valid.
    QVERIFY2(doc.isValid(), qPrintable(panel.fieldError("parallel.expert_tp")));
    spin(panel, "parallel.expert_tp")->setValue(8);  // 4 x 8 = 32 ranks: more than a stage's 16
    QVERIFY(!doc.isValid());
    QVERIFY(!panel.fieldError("parallel.expert_tp").isEmpty() || !panel.fieldError("parallel.ep").isEmpty());
    doc.undoStack()->undo();  // the two expert_tp edits merged into one step
    QCOMPARE(spin(panel, "parallel.expert_tp")->value(), 1);
    QCOMPARE(spin(panel, "parallel.ep")->value(), 4);
    // A dense model with ep set: the row stays shown with its problem.
    stagecraft::config::RunConfig dense = doc.config();
    dense.model.moe = {};
    doc.setConfig(dense, "dense");
    QVERIFY(panel.isFieldShown("parallel.ep"));
    QVERIFY(!panel.isFieldShown("parallel.expert_tp"));
  }
};

QTEST_MAIN(TestSetupPanel)
#include "tst_setup_panel.moc"
