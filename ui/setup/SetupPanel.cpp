// SetupPanel: the fields, built from the config schema (config_schema.h), their bindings to
// config keys, and how problems are shown at them.
#include "setup/SetupPanel.h"

#include <QCheckBox>
#include <QCoreApplication>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>
#include <climits>

#include "common/Text.h"
#include "document/PlanDocument.h"
#include "stagecraft/config/config_schema.h"
#include "stagecraft/config/device.h"

namespace cfg = stagecraft::config;

namespace {

// The frame and text colour of a field whose value breaks a rule.
constexpr auto kErrorStyle = "border: 2px solid #d62728;";
constexpr auto kErrorTextStyle = "color: #d62728;";

// The widgets take the schema's bounds, capped to what a QSpinBox holds.
int spinBound(double v) { return static_cast<int>(std::clamp(v, double(INT_MIN), double(INT_MAX))); }

QString text(std::string_view s) { return QCoreApplication::translate("SetupPanel", std::string(s).c_str()); }

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

// One field per schema key with a label, in schema order, one group per section. The schema gives
// the label, help, bounds and choices; the form adds only what is its own: the device catalog's
// names, ZeRO's spelled-out choices, what choosing an explicit partition does, and that editing
// the node count replaces a host list.
void SetupPanel::buildForm() {
  const QHash<QString, QString> titles = {{QStringLiteral("cluster"), tr("Cluster")},   {QStringLiteral("model"), tr("Model")},
                                          {QStringLiteral("parallel"), tr("Parallel")}, {QStringLiteral("pipeline"), tr("Pipeline")},
                                          {QStringLiteral("train"), tr("Training")},   {QStringLiteral("launch"), tr("Launch")}};
  QFormLayout* form = nullptr;
  QString section;
  for (const cfg::KeySpec& k : cfg::config_schema()) {
    if (k.label.empty()) continue;
    if (!form || qs(k.section()) != section) {
      section = qs(k.section());
      form = addSection(titles.value(section, section));
    }
    addField(form, k);
  }
}

void SetupPanel::addField(QFormLayout* form, const cfg::KeySpec& k) {
  using C = cfg::RunConfig;
  const QString key = qs(k.path);
  const QString label = text(k.label);
  const cfg::KeyAccess access = k.access;
  auto setText = [access](C& c, const QString& v) { (void)access.set(c, v.toStdString()); };
  auto getText = [access](const C& c) { return qs(std::get<std::string>(access.get(c))); };
  switch (k.type) {
    case cfg::KeyType::kInt: {
      if (k.path == "parallel.zero") {  // two stages, spelled out as choices
        addCombo(form, key, label, {{tr("0: none"), "0"}, {tr("1: optimizer state sharded"), "1"}},
                 [access](const C& c) { return QString::number(std::get<long long>(access.get(c))); },
                 [access](C& c, const QString& v) { (void)access.set(c, v.toLongLong()); });
        break;
      }
      // Editing the node count or the ranks per node replaces a host list, which fixes both.
      const bool replacesHosts = k.path == "cluster.nodes" || k.path == "cluster.gpus_per_node";
      addSpin(form, key, label, k.zero_label.empty() ? spinBound(k.min) : 0, spinBound(k.max),
              [access](const C& c) { return static_cast<int>(std::get<long long>(access.get(c))); },
              [access, replacesHosts](C& c, int v) {
                (void)access.set(c, static_cast<long long>(v));
                if (replacesHosts) c.cluster.hosts.clear();
              },
              text(k.zero_label));
      break;
    }
    case cfg::KeyType::kEnum:
    case cfg::KeyType::kOrder: {
      QList<QPair<QString, QString>> items;
      for (std::string_view c : k.choices) items.append({qs(c), qs(c)});
      addCombo(form, key, label, items, getText, setText);
      break;
    }
    case cfg::KeyType::kDevice: {
      QList<QPair<QString, QString>> devices;
      for (const auto& d : cfg::device_catalog()) {
        devices.append({qs(d.name) + QStringLiteral("  (%1 GiB)").arg(d.memory_gib, 0, 'f', 0), qs(d.name)});
      }
      addCombo(form, key, label, devices, getText, setText);
      break;
    }
    case cfg::KeyType::kPartition: {
      QList<QPair<QString, QString>> items;
      for (std::string_view c : k.choices) {
        const QString v = qs(c);
        items.append({v == QLatin1String("explicit") ? tr("explicit (stage editor)") : text(c), v});
      }
      PlanDocument* doc = m_document;
      addCombo(form, key, label, items, getText, [doc, setText](C& c, const QString& v) {
        // Choosing explicit keeps the stages as they are now, as a list the stage editor can
        // change. The plan is the last VALID one: while the config is invalid it may be for
        // another layer count, so then the list stays empty for the stage editor to fill.
        if (v == QLatin1String("explicit") && c.pipeline.stage_ids.empty() && doc->isValid() && doc->hasPlan()) {
          c.pipeline.stage_ids = doc->plan().layer_stage;
        }
        setText(c, v);
      });
      break;
    }
    case cfg::KeyType::kBool:
      addCheck(form, key, label, [access](const C& c) { return std::get<bool>(access.get(c)); },
               [access](C& c, bool v) { (void)access.set(c, v); });
      break;
    case cfg::KeyType::kText:
      if (k.path == "model.arch") {  // the architectures, by their names ("gpt" reads as gpt2)
        addCombo(form, key, label, {{tr("gpt2 (GPT-2 family)"), "gpt2"}, {tr("llama (Llama, Mistral, Qwen2)"), "llama"}},
                 [access](const C& c) {
                   const QString a = qs(std::get<std::string>(access.get(c)));
                   return a == QLatin1String("gpt") ? QStringLiteral("gpt2") : a;
                 },
                 setText);
        break;
      }
      addLine(form, key, label, getText, setText);
      break;
    case cfg::KeyType::kUint64:
    case cfg::KeyType::kDouble:
    case cfg::KeyType::kHosts:
      Q_ASSERT_X(false, "SetupPanel", "the form has no editor for this key type");
      return;
  }
  field(key)->setWhatsThis(qs(k.help));
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
  m_fields.insert(key, Field{editor, error, std::move(refresh), form, holder});
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

void SetupPanel::addLine(QFormLayout* form, const QString& key, const QString& label, std::function<QString(const cfg::RunConfig&)> get,
                         std::function<void(cfg::RunConfig&, const QString&)> set) {
  auto* line = new QLineEdit;
  line->setClearButtonEnabled(true);
  addRow(form, key, label, line, [this, line, get] {
    const QString v = get(m_document->config());
    if (line->text() != v) line->setText(v);
  });
  // Every keystroke is an edit, as in the spin boxes: checked as you type.
  connect(line, &QLineEdit::textEdited, this, [this, key, set](const QString& v) { edit(key, [&](cfg::RunConfig& c) { set(c, v); }); });
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
  showApplicableRows();
}

void SetupPanel::showApplicableRows() {
  const cfg::RunConfig& c = m_document->config();
  const bool experts = c.model.moe.enabled();
  const std::pair<const char*, int> expertRows[] = {{"parallel.ep", c.parallel.ep}, {"parallel.expert_tp", c.parallel.expert_tp}};
  for (const auto& [key, value] : expertRows) {
    auto it = m_fields.find(QLatin1String(key));
    if (it != m_fields.end()) it->form->setRowVisible(it->row, experts || value != 1);
  }
}

bool SetupPanel::isFieldShown(const QString& key) const {
  auto it = m_fields.find(key);
  return it != m_fields.end() && !it->row->isHidden();
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
