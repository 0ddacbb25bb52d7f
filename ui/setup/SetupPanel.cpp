// SetupPanel: the fields, their bindings to config keys, and how problems are shown at them.
#include "setup/SetupPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include "common/Text.h"
#include "document/PlanDocument.h"
#include "stagecraft/config/device.h"

namespace cfg = stagecraft::config;

namespace {

// The frame and text colour of a field whose value breaks a rule.
constexpr auto kErrorStyle = "border: 2px solid #d62728;";
constexpr auto kErrorTextStyle = "color: #d62728;";
// Generous upper bounds: the engine's rules, not the widgets, decide what is valid.
constexpr int kMaxCount = 1 << 20;
constexpr int kMaxNodes = 1 << 17;
// Parallel degrees and GPUs per node: a file may hold any of these; the field must show it.
constexpr int kMaxDegree = 1 << 20;


template <typename E>
QList<QPair<QString, QString>> enumItems(std::initializer_list<E> values) {
  QList<QPair<QString, QString>> items;
  for (E v : values) items.append({qs(cfg::to_string(v)), qs(cfg::to_string(v))});
  return items;
}

QString orderText(const std::vector<cfg::Axis>& order) {
  QStringList parts;
  for (cfg::Axis a : order) parts << qs(cfg::to_string(a));
  return parts.join(QLatin1Char('-'));
}

std::vector<cfg::Axis> parseOrder(const QString& text) {
  std::vector<cfg::Axis> order;
  for (const QString& p : text.split(QLatin1Char('-'))) {
    if (p == QLatin1String("tp")) order.push_back(cfg::Axis::kTp);
    if (p == QLatin1String("dp")) order.push_back(cfg::Axis::kDp);
    if (p == QLatin1String("pp")) order.push_back(cfg::Axis::kPp);
  }
  return order;
}

}  // namespace

SetupPanel::SetupPanel(PlanDocument* document, QWidget* parent) : QWidget(parent), m_document(document) {
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  m_content = new QWidget(scroll);
  auto* column = new QVBoxLayout(m_content);
  scroll->setWidget(m_content);
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(scroll);

  buildForm();
  m_other = new QLabel(m_content);
  m_other->setObjectName(QStringLiteral("otherErrors"));
  m_other->setWordWrap(true);
  m_other->setStyleSheet(QLatin1String(kErrorTextStyle));
  m_other->setVisible(false);
  column->addWidget(m_other);
  column->addStretch(1);

  connect(m_document, &PlanDocument::configChanged, this, &SetupPanel::refreshValues);
  connect(m_document, &PlanDocument::problemsChanged, this, &SetupPanel::showProblems);
  refreshValues();
  showProblems(m_document->problems());
}

QFormLayout* SetupPanel::addSection(const QString& title) {
  auto* box = new QGroupBox(title, m_content);
  auto* form = new QFormLayout(box);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  static_cast<QVBoxLayout*>(m_content->layout())->addWidget(box);
  return form;
}

void SetupPanel::buildForm() {
  using C = cfg::RunConfig;
  QFormLayout* f = addSection(tr("Cluster"));
  addSpin(f, "cluster.nodes", tr("Nodes"), 1, kMaxNodes, [](const C& c) { return c.cluster.nodes; },
          [](C& c, int v) {
            c.cluster.nodes = v;
            c.cluster.hosts.clear();  // a host list fixes the node count; editing it replaces the list
          });
  addSpin(f, "cluster.gpus_per_node", tr("GPUs per node"), 1, kMaxDegree, [](const C& c) { return c.cluster.gpus_per_node; },
          [](C& c, int v) {
            c.cluster.gpus_per_node = v;
            c.cluster.hosts.clear();
          });
  QList<QPair<QString, QString>> devices;
  for (const auto& d : stagecraft::config::device_catalog()) {
    devices.append({qs(d.name) + QStringLiteral("  (%1 GiB)").arg(d.memory_gib, 0, 'f', 0), qs(d.name)});
  }
  addCombo(f, "cluster.device", tr("Device"), devices, [](const C& c) { return qs(c.cluster.device); },
           [](C& c, const QString& v) { c.cluster.device = v.toStdString(); });

  f = addSection(tr("Model"));
  addSpin(f, "model.layers", tr("Layers"), 1, kMaxCount, [](const C& c) { return c.model.layers; }, [](C& c, int v) { c.model.layers = v; });
  addSpin(f, "model.hidden", tr("Hidden size"), 1, kMaxCount, [](const C& c) { return c.model.hidden; }, [](C& c, int v) { c.model.hidden = v; });
  addSpin(f, "model.heads", tr("Attention heads"), 1, kMaxCount, [](const C& c) { return c.model.heads; }, [](C& c, int v) { c.model.heads = v; });
  addSpin(f, "model.ffn_hidden", tr("FFN hidden"), 0, kMaxCount, [](const C& c) { return c.model.ffn_hidden; },
          [](C& c, int v) { c.model.ffn_hidden = v; }, tr("4 x hidden"));
  addSpin(f, "model.seq_len", tr("Sequence length"), 1, kMaxCount, [](const C& c) { return c.model.seq_len; }, [](C& c, int v) { c.model.seq_len = v; });
  addSpin(f, "model.vocab", tr("Vocabulary"), 1, kMaxCount, [](const C& c) { return c.model.vocab; }, [](C& c, int v) { c.model.vocab = v; });

  // Degrees start at 0: a file may say tp: 0, and the engine's rule is reported at the field
  // rather than the field quietly showing 1.
  f = addSection(tr("Parallel"));
  addSpin(f, "parallel.dp", tr("Data parallel (dp)"), 0, kMaxDegree, [](const C& c) { return c.parallel.dp; },
          [](C& c, int v) { c.parallel.dp = v; }, tr("auto"));
  addSpin(f, "parallel.tp", tr("Tensor parallel (tp)"), 0, kMaxDegree, [](const C& c) { return c.parallel.tp; }, [](C& c, int v) { c.parallel.tp = v; });
  addSpin(f, "parallel.pp", tr("Pipeline parallel (pp)"), 0, kMaxDegree, [](const C& c) { return c.parallel.pp; }, [](C& c, int v) { c.parallel.pp = v; });
  addCombo(f, "parallel.tp_mode", tr("TP mode"), enumItems({cfg::TpMode::k1d, cfg::TpMode::k2d, cfg::TpMode::k2p5d, cfg::TpMode::k3d}),
           [](const C& c) { return qs(cfg::to_string(c.parallel.tp_mode)); },
           [](C& c, const QString& v) { c.parallel.tp_mode = cfg::parse_tp_mode(v.toStdString()).value_or(cfg::TpMode::k1d); });
  addSpin(f, "parallel.tp_depth", tr("TP depth (2.5d)"), 1, kMaxCount, [](const C& c) { return c.parallel.tp_depth; },
          [](C& c, int v) { c.parallel.tp_depth = v; });
  QList<QPair<QString, QString>> orders;
  for (const char* o : {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"}) {
    orders.append(qMakePair(QString::fromLatin1(o), QString::fromLatin1(o)));
  }
  addCombo(f, "parallel.order", tr("Rank order"), orders, [](const C& c) { return orderText(c.parallel.order); },
           [](C& c, const QString& v) { c.parallel.order = parseOrder(v); });
  addCheck(f, "parallel.sequence_parallel", tr("Sequence parallel"), [](const C& c) { return c.parallel.sequence_parallel; },
           [](C& c, bool v) { c.parallel.sequence_parallel = v; });
  addCombo(f, "parallel.zero", tr("ZeRO"), {{tr("0: none"), "0"}, {tr("1: optimizer state sharded"), "1"}},
           [](const C& c) { return QString::number(c.parallel.zero); }, [](C& c, const QString& v) { c.parallel.zero = v.toInt(); });

  f = addSection(tr("Pipeline"));
  addCombo(f, "pipeline.schedule", tr("Schedule"), enumItems({cfg::Schedule::kGpipe, cfg::Schedule::k1f1b, cfg::Schedule::kInterleaved}),
           [](const C& c) { return qs(cfg::to_string(c.pipeline.schedule)); },
           [](C& c, const QString& v) { c.pipeline.schedule = cfg::parse_schedule(v.toStdString()).value_or(cfg::Schedule::k1f1b); });
  addSpin(f, "pipeline.virtual_stages", tr("Virtual stages"), 1, kMaxCount, [](const C& c) { return c.pipeline.virtual_stages; },
          [](C& c, int v) { c.pipeline.virtual_stages = v; });
  PlanDocument* doc = m_document;
  addCombo(f, "pipeline.partition", tr("Partition"),
           {{tr("uniform"), "uniform"}, {tr("balanced"), "balanced"}, {tr("explicit (stage editor)"), "explicit"}},
           [](const C& c) { return qs(cfg::to_string(c.pipeline.partition)); },
           [doc](C& c, const QString& v) {
             if (v == QLatin1String("explicit")) {
               // Keep the stages as they are now, as an explicit list the stage editor can change.
               // The plan is the last VALID one: while the config is invalid it may be for another
               // layer count, so then the list stays empty for the stage editor to fill.
               c.pipeline.partition = cfg::PartitionKind::kExplicit;
               if (c.pipeline.stage_ids.empty() && doc->isValid() && doc->hasPlan()) c.pipeline.stage_ids = doc->plan().layer_stage;
               return;
             }
             c.pipeline.partition = v == QLatin1String("balanced") ? cfg::PartitionKind::kBalanced : cfg::PartitionKind::kUniform;
             c.pipeline.stage_ids.clear();
           });

  f = addSection(tr("Training"));
  addSpin(f, "train.global_batch", tr("Global batch"), 1, kMaxCount, [](const C& c) { return c.train.global_batch; },
          [](C& c, int v) { c.train.global_batch = v; });
  addSpin(f, "train.micro_batch", tr("Micro-batch"), 1, kMaxCount, [](const C& c) { return c.train.micro_batch; },
          [](C& c, int v) { c.train.micro_batch = v; });
  addSpin(f, "train.steps", tr("Steps"), 1, 1 << 30, [](const C& c) { return c.train.steps; }, [](C& c, int v) { c.train.steps = v; });
  addCombo(f, "train.precision", tr("Precision"), enumItems({cfg::Precision::kFp32, cfg::Precision::kFp16, cfg::Precision::kBf16}),
           [](const C& c) { return qs(cfg::to_string(c.train.precision)); },
           [](C& c, const QString& v) { c.train.precision = cfg::parse_precision(v.toStdString()).value_or(cfg::Precision::kFp32); });
  addCombo(f, "train.recompute", tr("Recompute"), enumItems({cfg::Recompute::kNone, cfg::Recompute::kSelective, cfg::Recompute::kFull}),
           [](const C& c) { return qs(cfg::to_string(c.train.recompute)); },
           [](C& c, const QString& v) { c.train.recompute = cfg::parse_recompute(v.toStdString()).value_or(cfg::Recompute::kNone); });
  addCombo(f, "train.attention", tr("Attention"), enumItems({cfg::Attention::kStandard, cfg::Attention::kFlash}),
           [](const C& c) { return qs(cfg::to_string(c.train.attention)); },
           [](C& c, const QString& v) { c.train.attention = cfg::parse_attention(v.toStdString()).value_or(cfg::Attention::kStandard); });
}

void SetupPanel::addRow(QFormLayout* form, const QString& key, const QString& label, QWidget* editor, std::function<void()> refresh) {
  editor->setObjectName(key);
  auto* holder = new QWidget(form->parentWidget());
  auto* v = new QVBoxLayout(holder);
  v->setContentsMargins(0, 0, 0, 0);
  v->setSpacing(1);
  editor->setParent(holder);
  v->addWidget(editor);
  auto* error = new QLabel(holder);
  error->setObjectName(key + QStringLiteral(".error"));
  error->setWordWrap(true);
  error->setStyleSheet(QLatin1String(kErrorTextStyle));
  error->setVisible(false);
  v->addWidget(error);
  form->addRow(label, holder);
  m_fields.insert(key, Field{editor, error, std::move(refresh)});
  m_order << key;
}

void SetupPanel::addSpin(QFormLayout* form, const QString& key, const QString& label, int min, int max,
                         std::function<int(const cfg::RunConfig&)> get, std::function<void(cfg::RunConfig&, int)> set,
                         const QString& specialValueText) {
  auto* spin = new QSpinBox;
  spin->setRange(min, max);
  spin->setKeyboardTracking(true);  // every keystroke is an edit: validated as you type
  if (!specialValueText.isEmpty()) spin->setSpecialValueText(specialValueText);
  addRow(form, key, label, spin, [this, spin, get] {
    const int v = get(m_document->config());
    // A value from a file outside the field's range is shown as it is, not clamped: the engine's
    // rules report what is wrong with it.
    if (v < spin->minimum()) spin->setMinimum(v);
    if (v > spin->maximum()) spin->setMaximum(v);
    if (spin->value() != v) spin->setValue(v);
  });
  connect(spin, &QSpinBox::valueChanged, this, [this, key, set](int v) { edit(key, [&](cfg::RunConfig& c) { set(c, v); }); });
}

void SetupPanel::addCombo(QFormLayout* form, const QString& key, const QString& label, const QList<QPair<QString, QString>>& items,
                          std::function<QString(const cfg::RunConfig&)> get, std::function<void(cfg::RunConfig&, const QString&)> set) {
  auto* combo = new QComboBox;
  for (const auto& [text, value] : items) combo->addItem(text, value);
  addRow(form, key, label, combo, [this, combo, get] {
    const QString v = get(m_document->config());
    int i = combo->findData(v);
    if (i < 0) {  // a value the list does not know (a device defined in the file): show it as is
      combo->addItem(v, v);
      i = combo->count() - 1;
    }
    if (combo->currentIndex() != i) combo->setCurrentIndex(i);
  });
  connect(combo, &QComboBox::currentIndexChanged, this, [this, key, set, combo](int i) {
    if (i < 0) return;
    const QString v = combo->itemData(i).toString();
    edit(key, [&](cfg::RunConfig& c) { set(c, v); });
  });
}

void SetupPanel::addCheck(QFormLayout* form, const QString& key, const QString& label, std::function<bool(const cfg::RunConfig&)> get,
                          std::function<void(cfg::RunConfig&, bool)> set) {
  auto* check = new QCheckBox;
  addRow(form, key, label, check, [this, check, get] {
    const bool v = get(m_document->config());
    if (check->isChecked() != v) check->setChecked(v);
  });
  connect(check, &QCheckBox::toggled, this, [this, key, set](bool v) { edit(key, [&](cfg::RunConfig& c) { set(c, v); }); });
}

void SetupPanel::edit(const QString& key, const Setter& change) {
  if (m_refreshing) return;
  cfg::RunConfig c = m_document->config();
  change(c);
  m_document->setConfig(c, tr("Change %1").arg(key), key);
}

void SetupPanel::refreshValues() {
  m_refreshing = true;
  for (const QString& key : std::as_const(m_order)) {
    const Field& f = m_fields[key];
    const QSignalBlocker block(f.editor);
    f.refresh();
  }
  m_refreshing = false;
}

void SetupPanel::showProblems(const QList<ConfigProblem>& problems) {
  QHash<QString, QStringList> byKey;
  QStringList other;
  for (const auto& p : problems) {
    if (m_fields.contains(p.key)) {
      byKey[p.key] << p.message;
    } else {
      other << p.message;
    }
  }
  for (auto it = m_fields.begin(); it != m_fields.end(); ++it) {
    const QString text = byKey.value(it.key()).join(QLatin1Char('\n'));
    it->error->setText(text);
    it->error->setVisible(!text.isEmpty());
    it->editor->setToolTip(text);
    it->editor->setStyleSheet(text.isEmpty() ? QString() : QLatin1String(kErrorStyle));
  }
  m_other->setText(other.join(QLatin1Char('\n')));
  m_other->setVisible(!other.isEmpty());
}

QWidget* SetupPanel::field(const QString& key) const {
  auto it = m_fields.find(key);
  return it == m_fields.end() ? nullptr : it->editor;
}

QString SetupPanel::fieldError(const QString& key) const {
  auto it = m_fields.find(key);
  return it == m_fields.end() ? QString() : it->error->text();
}

QString SetupPanel::otherErrors() const { return m_other->text(); }
