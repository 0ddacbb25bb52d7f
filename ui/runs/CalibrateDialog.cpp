// CalibrateDialog: the fit of the device constants to recorded runs, and its profile (see the
// header).
#include "runs/CalibrateDialog.h"

#include <QCheckBox>
#include <QDateTime>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "common/Text.h"
#include "stagecraft/config/device.h"
#include "stagecraft/config/device_profile.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/store/run_store.h"

namespace config = stagecraft::config;
namespace plan = stagecraft::plan;

namespace {

enum ConstantColumn { ConstantName, ConstantBefore, ConstantAfter, ConstantFitted, ConstantColumns };
enum RunColumn { RunLabel, RunBefore, RunAfter, RunColumns };
constexpr int kMaxIdsInName = 4;  // more runs name the profile by the first and the last
constexpr int kRowPadding = 4;     // pixels above and below a table row's text
constexpr int kWidth = 920;        // the dialog's first size: both tables whole side by side
constexpr int kHeight = 480;

QString signedPercent(double fraction) {
  if (!std::isfinite(fraction)) return QStringLiteral("–");
  return (fraction >= 0 ? QStringLiteral("+") : QString()) + QString::number(100.0 * fraction, 'f', 1) + QLatin1Char('%');
}

QTableWidgetItem* cell(const QString& text, bool number) {
  auto* item = new QTableWidgetItem(text);
  if (number) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return item;
}

QTableWidget* makeTable(const QStringList& headers, QWidget* parent, const char* name) {
  auto* t = new QTableWidget(0, static_cast<int>(headers.size()), parent);
  t->setObjectName(QString::fromLatin1(name));
  t->setHorizontalHeaderLabels(headers);
  t->verticalHeader()->hide();
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setStretchLastSection(true);
  t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + kRowPadding);
  return t;
}

// The built-in device a run's device stands on: itself, or a user-catalog profile's base.
stagecraft::Result<std::string> builtinBase(const std::string& name) {
  if (const config::DeviceSpec* d = config::find_builtin_device(name)) return d->name;
  if (const config::DeviceSpec* d = config::find_device(name); d && !d->profile.empty()) {
    auto profile = config::read_device_profile(d->profile);
    if (!profile.ok()) return profile.status();
    if (const config::DeviceSpec* base = config::find_builtin_device(profile->base)) return base->name;
  }
  return stagecraft::Status::invalid_input("device " + name + " is not a catalog device; a profile calibrates a built-in device");
}

}  // namespace

CalibrateDialog::CalibrateDialog(QWidget* parent) : QDialog(parent) {
  setObjectName(QStringLiteral("calibrateDialog"));
  setWindowTitle(tr("Calibrate from Runs"));
  auto* layout = new QVBoxLayout(this);
  m_summary = new QLabel(this);
  m_summary->setObjectName(QStringLiteral("calibrateSummary"));
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_summary);

  m_constants = makeTable({tr("constant"), tr("before"), tr("after"), tr("fitted")}, this, "calibrationConstants");
  m_runs = makeTable({tr("run"), tr("step error before"), tr("after")}, this, "calibrationRuns");
  auto* tables = new QHBoxLayout;
  tables->addWidget(m_constants, 1);
  tables->addWidget(m_runs, 1);
  layout->addLayout(tables, 1);

  auto* form = new QFormLayout;
  m_name = new QLineEdit(this);
  m_name->setObjectName(QStringLiteral("profileName"));
  m_path = new QLineEdit(this);
  m_path->setObjectName(QStringLiteral("profilePath"));
  m_choose = new QPushButton(tr("Choose..."), this);
  auto* pathRow = new QHBoxLayout;
  pathRow->addWidget(m_path, 1);
  pathRow->addWidget(m_choose);
  form->addRow(tr("Profile name:"), m_name);
  form->addRow(tr("File:"), pathRow);
  m_use = new QCheckBox(tr("Use it as the open plan's device (cluster.device profile)"), this);
  m_use->setObjectName(QStringLiteral("useProfileInPlan"));
  m_use->setChecked(true);
  form->addRow(QString(), m_use);
  layout->addLayout(form);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("calibrateStatus"));
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_status);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  m_save = buttons->addButton(tr("Save Profile"), QDialogButtonBox::AcceptRole);
  m_save->setObjectName(QStringLiteral("saveProfile"));
  layout->addWidget(buttons);
  resize(kWidth, kHeight);

  connect(m_name, &QLineEdit::textEdited, this, [this](const QString& name) { setProfileName(name); });
  connect(m_path, &QLineEdit::textEdited, this, [this](const QString& path) { m_pathChosen = !path.isEmpty(); });
  connect(m_choose, &QPushButton::clicked, this, &CalibrateDialog::chooseFile);
  connect(m_save, &QPushButton::clicked, this, [this] {
    if (saveProfile()) accept();
  });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  updateButtons();
}

QString CalibrateDialog::defaultProfileName(const QString& base, const QList<qint64>& ids) {
  QStringList parts;
  if (ids.size() <= kMaxIdsInName) {
    for (qint64 id : ids) parts << QString::number(id);
  } else {
    parts << QString::number(ids.first()) << QStringLiteral("to") << QString::number(ids.last());
  }
  return base + QStringLiteral("-runs-") + parts.join(QLatin1Char('-'));
}

bool CalibrateDialog::calibrate(stagecraft::store::RunStore& store, const QList<qint64>& ids) {
  m_ids = ids;
  std::sort(m_ids.begin(), m_ids.end());
  m_fit.reset();
  m_base.clear();
  m_labels.clear();
  m_error.clear();
  m_historyPath = qs(store.path());
  m_constants->setRowCount(0);
  m_runs->setRowCount(0);
  m_status->clear();
  if (m_ids.isEmpty()) {
    showError(tr("Select one or more runs to calibrate from."));
    return false;
  }
  const std::vector<int64_t> runIds(m_ids.begin(), m_ids.end());
  auto samples = stagecraft::launch::calibration_samples(store, runIds);
  if (!samples.ok()) {
    showError(qs(samples.status().message()));
    return false;
  }
  if (samples->empty()) {
    showError(tr("The selected runs gave nothing to calibrate from."));
    return false;
  }
  // One device: the constants belong to it.
  std::string base;
  for (const auto& s : samples.value()) {
    auto b = builtinBase(s.input.config.cluster.device);
    if (!b.ok()) {
      showError(tr("%1: %2").arg(qs(s.label), qs(b.status().message())));
      return false;
    }
    if (!base.empty() && b.value() != base) {
      showError(tr("The runs ran on different devices (%1, %2); calibrate the runs of one device together.").arg(qs(base), qs(b.value())));
      return false;
    }
    base = b.value();
    m_labels.push_back(s.label);
  }
  m_base = qs(base);
  m_start = samples->front().input.device.calibration;
  auto fit = plan::calibrate(samples.value(), m_start);
  if (!fit.ok()) {
    showError(qs(fit.status().message()));
    return false;
  }
  m_fit = std::move(fit).value();
  if (!m_pathChosen) setProfileName(defaultProfileName(m_base, m_ids));
  showFit();
  return true;
}

QString CalibrateDialog::summaryText() const { return m_summary->text(); }

void CalibrateDialog::showFit() {
  const plan::CalibrationFit& f = *m_fit;
  QStringList ids;
  for (qint64 id : m_ids) ids << QString::number(id);
  QString summary = tr("Fitted %1 of the %2 device's constants to run(s) %3. Error over every compared part (rms): %4 before, %5 after.")
                        .arg(f.fitted.size())
                        .arg(m_base, ids.join(QStringLiteral(", ")))
                        .arg(percentText(f.rms_before), percentText(f.rms_after));
  if (!f.kept.empty()) {
    QStringList kept;
    for (const auto& k : f.kept) kept << qs(k);
    summary += QLatin1Char(' ') + tr("What the runs could not tell: %1.").arg(kept.join(QStringLiteral("; ")));
  }
  m_summary->setText(summary);
  const auto& fields = config::calibration_fields();
  m_constants->setRowCount(static_cast<int>(fields.size()));
  for (int r = 0; r < static_cast<int>(fields.size()); ++r) {
    const config::CalibrationField& field = fields[static_cast<size_t>(r)];
    const bool fitted = std::find(f.fitted.begin(), f.fitted.end(), field.key) != f.fitted.end();
    auto* name = cell(QString::fromLatin1(field.key), false);
    name->setToolTip(QString::fromUtf8(field.help));
    m_constants->setItem(r, ConstantName, name);
    m_constants->setItem(r, ConstantBefore, cell(QString::number(m_start.*(field.field), 'g', 4), true));
    m_constants->setItem(r, ConstantAfter, cell(QString::number(f.calibration.*(field.field), 'g', 4), true));
    auto* how = cell(fitted ? tr("fitted") : tr("kept"), false);
    for (const auto& k : f.constants) {
      if (k.key == field.key && !k.informed) how->setToolTip(qs(k.why_kept));
    }
    m_constants->setItem(r, ConstantFitted, how);
  }
  m_runs->setRowCount(static_cast<int>(m_labels.size()));
  for (int r = 0; r < static_cast<int>(m_labels.size()); ++r) {
    const auto at = static_cast<size_t>(r);
    m_runs->setItem(r, RunLabel, cell(qs(m_labels[at]), false));
    m_runs->setItem(r, RunBefore, cell(at < f.step_error_before.size() ? signedPercent(f.step_error_before[at]) : QStringLiteral("–"), true));
    m_runs->setItem(r, RunAfter, cell(at < f.step_error_after.size() ? signedPercent(f.step_error_after[at]) : QStringLiteral("–"), true));
  }
  updateButtons();
}

void CalibrateDialog::showError(const QString& message) {
  m_error = message;
  m_summary->setText(message);
  m_status->setText(message);
  updateButtons();
}

QString CalibrateDialog::profileName() const { return m_name->text().trimmed(); }

void CalibrateDialog::setProfileName(const QString& name) {
  if (m_name->text() != name) m_name->setText(name);
  if (!m_pathChosen) {
    const QString trimmed = name.trimmed();
    m_path->setText(trimmed.isEmpty() ? QString() : QDir(qs(config::user_devices_dir())).filePath(trimmed + QStringLiteral(".yaml")));
  }
  updateButtons();
}

QString CalibrateDialog::profilePath() const { return m_path->text().trimmed(); }

void CalibrateDialog::setProfilePath(const QString& path) {
  m_pathChosen = !path.trimmed().isEmpty();
  if (m_pathChosen) {
    m_path->setText(path.trimmed());
  } else {
    setProfileName(profileName());
  }
  updateButtons();
}

bool CalibrateDialog::useInPlan() const { return m_use->isChecked(); }
void CalibrateDialog::setUseInPlan(bool use) { m_use->setChecked(use); }

void CalibrateDialog::chooseFile() {
  const QString start = profilePath().isEmpty() ? qs(config::user_devices_dir()) : profilePath();
  const QString path = QFileDialog::getSaveFileName(this, tr("Save Device Profile"), start, tr("Device profiles (*.yaml *.yml)"));
  if (!path.isEmpty()) setProfilePath(path);
}

void CalibrateDialog::updateButtons() { m_save->setEnabled(m_fit.has_value() && !profileName().isEmpty() && !profilePath().isEmpty()); }

bool CalibrateDialog::saveProfile(QString* error) {
  QString why;
  const QString name = profileName();
  if (!m_fit) {
    why = m_error.isEmpty() ? tr("there is no fit to save") : m_error;
  } else if (name.isEmpty() || name.contains(QLatin1Char('/'))) {
    why = tr("give the profile a name (no '/')");
  } else if (config::find_builtin_device(name.toStdString())) {
    why = tr("%1 is a built-in device's name; the profile needs its own").arg(name);
  } else if (profilePath().isEmpty()) {
    why = tr("choose the file to write");
  }
  if (why.isEmpty()) {
    config::DeviceProfile profile;
    profile.name = name.toStdString();
    profile.base = m_base.toStdString();
    profile.calibration = m_fit->calibration;
    QStringList ids;
    for (qint64 id : m_ids) ids << QString::number(id);
    profile.comments.push_back(tr("fitted on %1 from runs %2 of %3")
                                   .arg(QDateTime::currentDateTimeUtc().toString(Qt::ISODate), ids.join(QStringLiteral(", ")), m_historyPath)
                                   .toStdString());
    profile.comments.push_back(
        tr("error over every compared part (rms): %1 before, %2 after").arg(percentText(m_fit->rms_before), percentText(m_fit->rms_after)).toStdString());
    for (size_t i = 0; i < m_labels.size(); ++i) {
      const double before = i < m_fit->step_error_before.size() ? m_fit->step_error_before[i] : NAN;
      const double after = i < m_fit->step_error_after.size() ? m_fit->step_error_after[i] : NAN;
      profile.comments.push_back(tr("%1: step time error %2 before, %3 after").arg(qs(m_labels[i]), signedPercent(before), signedPercent(after)).toStdString());
    }
    const stagecraft::Status s = config::write_device_profile(profilePath().toStdString(), profile);
    if (!s) why = qs(s.message());
  }
  if (error) *error = why;
  if (!why.isEmpty()) {
    m_status->setText(tr("Not saved: %1").arg(why));
    return false;
  }
  const QString path = profilePath();
  m_status->setText(tr("Saved %1").arg(path));
  Q_EMIT profileSaved(path, m_base);
  if (useInPlan()) Q_EMIT useProfileRequested(path, m_base);
  return true;
}
