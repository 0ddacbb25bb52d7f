// LaunchDialog: local, hosts or Slurm, preflight, and the detached `stagecraft-cli run` that starts a run.
#include "runs/LaunchDialog.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QVBoxLayout>

#include "common/Text.h"
#include "document/PlanDocument.h"
#include "hosts/HostsEditor.h"
#include "hosts/PreflightRunner.h"
#include "hosts/PreflightTable.h"
#include "runs/RunLocallyDialog.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/program.h"
#include "stagecraft/store/run_store.h"

namespace launch = stagecraft::launch;

LaunchDialog::LaunchDialog(PlanDocument* document, QWidget* parent) : QDialog(parent), m_document(document) {
  setWindowTitle(tr("Launch run"));
  resize(780, 560);
  m_db = qs(stagecraft::store::RunStore::default_path());
  m_runner = new PreflightRunner(this);
  m_hostsEditor = new HostsEditor(this);
  // The editor's connection test checks what this dialog's run needs (launch/preflight.h): GPUs
  // for a CUDA run, and another program in the directory the detached run starts from (the
  // document's, else this process's).
  m_hostsEditor->setRunChecks([this](launch::PreflightOptions base) {
    const QString dir = m_document->baseDir();
    return launch::preflight_options(m_document->config(), std::move(base), (dir.isEmpty() ? QDir::currentPath() : dir).toStdString());
  });
  auto* layout = new QVBoxLayout(this);
  m_summary = new QLabel(tr("No config"), this);
  m_summary->setWordWrap(true);
  layout->addWidget(m_summary);

  auto* where = new QHBoxLayout;
  m_local = new QRadioButton(tr("On this machine"), this);
  m_hosts = new QRadioButton(tr("On the hosts of a hostfile (SSH)"), this);
  m_slurm = new QRadioButton(tr("On a Slurm cluster"), this);
  m_local->setChecked(true);
  where->addWidget(m_local);
  where->addWidget(m_hosts);
  where->addWidget(m_slurm);
  where->addStretch(1);
  layout->addLayout(where);

  m_hostBox = new QGroupBox(tr("Hosts"), this);
  auto* form = new QFormLayout(m_hostBox);
  auto* fileRow = new QHBoxLayout;
  m_hostfile = new QLineEdit(m_hostBox);
  m_hostfile->setObjectName(QStringLiteral("hostfilePath"));
  auto* browse = new QPushButton(tr("Browse..."), m_hostBox);
  auto* edit = new QPushButton(tr("Edit hosts..."), m_hostBox);
  fileRow->addWidget(m_hostfile, 1);
  fileRow->addWidget(browse);
  fileRow->addWidget(edit);
  form->addRow(tr("Hostfile:"), fileRow);
  m_include = new QLineEdit(m_hostBox);
  m_include->setPlaceholderText(tr("every host (DeepSpeed syntax: node-a@node-b:0,1)"));
  m_exclude = new QLineEdit(m_hostBox);
  form->addRow(tr("Include:"), m_include);
  form->addRow(tr("Exclude:"), m_exclude);
  m_hostsPlan = new QLabel(m_hostBox);
  m_hostsPlan->setObjectName(QStringLiteral("hostsPlan"));
  m_hostsPlan->setWordWrap(true);
  m_applyHosts = new QPushButton(tr("Use these hosts in the plan"), m_hostBox);
  m_applyHosts->setObjectName(QStringLiteral("applyHosts"));
  auto* planRow = new QHBoxLayout;
  planRow->addWidget(m_hostsPlan, 1);
  planRow->addWidget(m_applyHosts);
  form->addRow(tr("Plan:"), planRow);
  m_preflight = new QPushButton(tr("Preflight"), m_hostBox);
  form->addRow(QString(), m_preflight);
  m_table = new PreflightTable(m_hostBox);
  form->addRow(m_table);
  layout->addWidget(m_hostBox, 1);

  // Slurm: the same options as `stagecraft-cli run --slurm`; nodes and tasks come from the plan.
  m_slurmBox = new QGroupBox(tr("Slurm"), this);
  auto* slurmForm = new QFormLayout(m_slurmBox);
  m_partition = new QLineEdit(m_slurmBox);
  m_partition->setPlaceholderText(tr("the cluster's default partition"));
  m_account = new QLineEdit(m_slurmBox);
  m_account->setPlaceholderText(tr("your default account"));
  m_time = new QLineEdit(m_slurmBox);
  m_time->setPlaceholderText(tr("the partition's default (e.g. 01:30:00 or 2-00:00:00)"));
  m_qos = new QLineEdit(m_slurmBox);
  m_constraint = new QLineEdit(m_slurmBox);
  m_sbatchArgs = new QLineEdit(m_slurmBox);
  m_sbatchArgs->setPlaceholderText(tr("more sbatch options, e.g. --mem=0 --exclusive"));
  slurmForm->addRow(tr("Partition:"), m_partition);
  slurmForm->addRow(tr("Account:"), m_account);
  slurmForm->addRow(tr("Time limit:"), m_time);
  slurmForm->addRow(tr("QOS:"), m_qos);
  slurmForm->addRow(tr("Constraint:"), m_constraint);
  slurmForm->addRow(tr("sbatch options:"), m_sbatchArgs);
  m_slurmPreflight = new QPushButton(tr("Preflight"), m_slurmBox);
  slurmForm->addRow(QString(), m_slurmPreflight);
  m_slurmResult = new QLabel(m_slurmBox);
  m_slurmResult->setObjectName(QStringLiteral("slurmResult"));
  m_slurmResult->setWordWrap(true);
  m_slurmResult->setTextInteractionFlags(Qt::TextSelectableByMouse);
  slurmForm->addRow(m_slurmResult);
  layout->addWidget(m_slurmBox);

  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("launchStatus"));
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_status);
  auto* buttons = new QHBoxLayout;
  buttons->addStretch(1);
  m_start = new QPushButton(tr("Start"), this);
  m_start->setDefault(true);
  auto* close = new QPushButton(tr("Close"), this);
  buttons->addWidget(m_start);
  buttons->addWidget(close);
  layout->addLayout(buttons);
  updateMode();

  connect(m_local, &QRadioButton::toggled, this, &LaunchDialog::updateMode);
  connect(m_slurm, &QRadioButton::toggled, this, &LaunchDialog::updateMode);
  for (QLineEdit* e : {m_partition, m_account, m_time, m_qos, m_constraint, m_sbatchArgs}) {
    connect(e, &QLineEdit::textChanged, this, &LaunchDialog::checkSlurmFields);
  }
  connect(m_slurmPreflight, &QPushButton::clicked, this, &LaunchDialog::runSlurmPreflight);
  for (QLineEdit* e : {m_hostfile, m_include, m_exclude}) connect(e, &QLineEdit::textChanged, this, &LaunchDialog::updateHostsSummary);
  connect(m_applyHosts, &QPushButton::clicked, this, &LaunchDialog::applyHostsToPlan);
  connect(browse, &QPushButton::clicked, this, &LaunchDialog::chooseHostfile);
  connect(edit, &QPushButton::clicked, this, &LaunchDialog::editHosts);
  connect(m_preflight, &QPushButton::clicked, this, &LaunchDialog::runPreflight);
  connect(m_start, &QPushButton::clicked, this, &LaunchDialog::start);
  connect(close, &QPushButton::clicked, this, &QDialog::reject);
  connect(m_runner, &PreflightRunner::finished, this, [this] {
    m_table->setChecks(m_runner->results(), m_checkedSlots);
    m_preflight->setEnabled(true);
    int failed = 0;
    for (const auto& c : m_runner->results()) failed += c.ok() ? 0 : 1;
    setMessage(failed == 0 ? tr("Preflight passed on every host") : tr("Preflight failed on %n host(s)", nullptr, failed));
  });
  connect(m_hostsEditor, &HostsEditor::hostfileSaved, this, &LaunchDialog::setHostfilePath);
  connect(m_document, &PlanDocument::configChanged, this, &LaunchDialog::refresh);
  refresh();
}

LaunchDialog::~LaunchDialog() = default;

void LaunchDialog::refresh() {
  const stagecraft::config::RunConfig& config = m_document->config();
  if (!m_document->isValid()) {
    m_summary->setText(tr("<b>%1</b>: the configuration is invalid; fix it before launching").arg(qs(config.name).toHtmlEscaped()));
  } else {
    // With a hostfile the hosts decide the cluster; the summary is the config's own layout.
    m_summary->setText(tr("<b>%1</b>: %2 node(s) x %3 ranks, dp %4 x tp %5 x pp %6, %7 steps")
                           .arg(qs(config.name).toHtmlEscaped())
                           .arg(config.cluster.nodes)
                           .arg(config.cluster.gpus_per_node)
                           .arg(stagecraft::config::resolved_dp(config))
                           .arg(config.parallel.tp)
                           .arg(config.parallel.pp)
                           .arg(config.train.steps));
  }
  updateHostsSummary();
}

void LaunchDialog::setDatabasePath(const QString& path) { m_db = path; }

bool LaunchDialog::hostsConfig(stagecraft::config::RunConfig* out, QString* error) const {
  if (hostfilePath().isEmpty()) {
    *error = tr("choose the hostfile that lists the hosts (`HOST slots=N` per line)");
    return false;
  }
  std::vector<launch::SelectedHost> selected;
  if (!selectedHosts(&selected, error)) return false;
  auto plan = m_document->planForHosts(selected, error);
  if (!plan) return false;
  *out = std::move(plan->config);
  return true;
}

bool LaunchDialog::selectedHosts(std::vector<launch::SelectedHost>* out, QString* error) const {
  auto entries = launch::parse_hostfile_file(hostfilePath().toStdString());
  if (!entries.ok()) {
    *error = qs(entries.status().message());
    return false;
  }
  auto selected = launch::select_hosts(entries.value(), m_include->text().trimmed().toStdString(), m_exclude->text().trimmed().toStdString());
  if (!selected.ok()) {
    *error = qs(selected.status().message());
    return false;
  }
  *out = std::move(selected).value();
  return true;
}

QString LaunchDialog::hostsSummary() const { return m_hostsPlan->text(); }

void LaunchDialog::updateHostsSummary() {
  stagecraft::config::RunConfig c;
  QString error;
  const bool ok = hostsConfig(&c, &error);
  m_applyHosts->setEnabled(ok && !(c.cluster == m_document->config().cluster));
  if (!ok) {
    m_hostsPlan->setText(error);
    m_hostsPlan->setStyleSheet(QStringLiteral("color: #d62728;"));
    return;
  }
  m_hostsPlan->setStyleSheet(QString());
  m_hostsPlan->setText(tr("%1 host(s) x %2 ranks: dp %3 x tp %4 x pp %5")
                           .arg(c.cluster.nodes)
                           .arg(c.cluster.gpus_per_node)
                           .arg(stagecraft::config::resolved_dp(c))
                           .arg(c.parallel.tp)
                           .arg(c.parallel.pp));
}

bool LaunchDialog::applyHostsToPlan() {
  stagecraft::config::RunConfig c;
  QString error;
  if (!hostsConfig(&c, &error)) {
    setMessage(error);
    return false;
  }
  Q_EMIT hostsApplied(c);  // the document takes the cluster; refresh() follows its change
  return true;
}

QString LaunchDialog::cliPath() const {
  if (!m_cli.isEmpty()) return m_cli;
  const QString env = qEnvironmentVariable("STAGECRAFT_CLI");
  if (!env.isEmpty()) return env;
  return QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("stagecraft-cli"));
}

void LaunchDialog::setLocal(bool local) { (local ? m_local : m_hosts)->setChecked(true); }
bool LaunchDialog::isLocal() const { return m_local->isChecked(); }

void LaunchDialog::setWhere(Where where) {
  (where == Where::Local ? m_local : where == Where::Hosts ? m_hosts : m_slurm)->setChecked(true);
}

LaunchDialog::Where LaunchDialog::where() const {
  return m_local->isChecked() ? Where::Local : m_hosts->isChecked() ? Where::Hosts : Where::Slurm;
}

void LaunchDialog::setSlurmOptions(const launch::SlurmOptions& o) {
  m_partition->setText(qs(o.partition));
  m_account->setText(qs(o.account));
  m_time->setText(qs(o.time));
  m_qos->setText(qs(o.qos));
  m_constraint->setText(qs(o.constraint));
  QStringList more;
  for (const auto& a : o.sbatch_args) more << qs(a);
  m_sbatchArgs->setText(more.join(QLatin1Char(' ')));
}

bool LaunchDialog::slurmOptions(launch::SlurmOptions* out, QString* error) const {
  launch::SlurmOptions o;
  o.partition = m_partition->text().trimmed().toStdString();
  o.account = m_account->text().trimmed().toStdString();
  o.time = m_time->text().trimmed().toStdString();
  o.qos = m_qos->text().trimmed().toStdString();
  o.constraint = m_constraint->text().trimmed().toStdString();
  for (const QString& a : m_sbatchArgs->text().split(QLatin1Char(' '), Qt::SkipEmptyParts)) o.sbatch_args.push_back(a.toStdString());
  if (const stagecraft::Status s = launch::check_slurm_options(o); !s) {
    *error = qs(s.message());
    return false;
  }
  *out = std::move(o);
  return true;
}

QStringList LaunchDialog::slurmArguments(const launch::SlurmOptions& o) const {
  QStringList args{QStringLiteral("--slurm")};
  auto add = [&](const char* option, const std::string& value) {
    if (!value.empty()) args << QLatin1String(option) << qs(value);
  };
  add("--partition", o.partition);
  add("--account", o.account);
  add("--time", o.time);
  add("--qos", o.qos);
  add("--constraint", o.constraint);
  for (const auto& a : o.sbatch_args) args << QStringLiteral("--sbatch-arg=") + qs(a);
  return args;
}

void LaunchDialog::checkSlurmFields() {
  launch::SlurmOptions o;
  QString error;
  const bool ok = slurmOptions(&o, &error);
  m_slurmResult->setStyleSheet(ok ? QString() : QStringLiteral("color: #d62728;"));
  m_slurmResult->setText(ok ? QString() : error);
}

QString LaunchDialog::slurmPreflightText() const { return m_slurmResult->text(); }

bool LaunchDialog::runSlurmPreflight() {
  if (m_slurmCheck && m_slurmCheck->state() != QProcess::NotRunning) {
    setMessage(tr("A Slurm preflight is running; wait for its answer"));
    return false;
  }
  launch::SlurmOptions o;
  QString error;
  if (!slurmOptions(&o, &error)) {
    setMessage(error);
    return false;
  }
  const QString config = writeConfig(&error);
  if (config.isEmpty()) {
    setMessage(error);
    return false;
  }
  delete m_slurmCheck;
  m_slurmCheck = new QProcess(this);
  if (const QString base = m_document->baseDir(); !base.isEmpty()) m_slurmCheck->setWorkingDirectory(base);
  connect(m_slurmCheck, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    QString text = QString::fromUtf8(m_slurmCheck->readAllStandardOutput()).trimmed();
    QString err = QString::fromUtf8(m_slurmCheck->readAllStandardError()).trimmed();
    err.remove(QStringLiteral("stagecraft-cli: error: "));
    if (!err.isEmpty()) text += (text.isEmpty() ? QString() : QStringLiteral("\n")) + err;
    const bool ok = status == QProcess::NormalExit && code == 0;
    m_slurmResult->setStyleSheet(ok ? QString() : QStringLiteral("color: #d62728;"));
    m_slurmResult->setText(text);
    m_slurmPreflight->setEnabled(true);
    setMessage(ok ? tr("Slurm preflight passed") : tr("Slurm preflight failed"));
    Q_EMIT slurmPreflightFinished(ok);
  });
  connect(m_slurmCheck, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    m_slurmPreflight->setEnabled(true);
    m_slurmResult->setText(tr("%1: cannot start: %2").arg(cliPath(), m_slurmCheck->errorString()));
    Q_EMIT slurmPreflightFinished(false);
  });
  m_slurmPreflight->setEnabled(false);
  m_slurmResult->setStyleSheet(QString());
  m_slurmResult->setText(tr("Asking Slurm..."));
  m_slurmCheck->start(cliPath(), QStringList{QStringLiteral("preflight"), config} + slurmArguments(o));
  return true;
}
void LaunchDialog::setHostfilePath(const QString& path) { m_hostfile->setText(path); }
QString LaunchDialog::hostfilePath() const { return m_hostfile->text().trimmed(); }
void LaunchDialog::setInclude(const QString& filter) { m_include->setText(filter); }
void LaunchDialog::setExclude(const QString& filter) { m_exclude->setText(filter); }

void LaunchDialog::updateMode() {
  m_hostBox->setEnabled(where() == Where::Hosts);
  m_slurmBox->setEnabled(where() == Where::Slurm);
}

void LaunchDialog::setMessage(const QString& text) {
  m_message = text;
  m_status->setText(text);
}

void LaunchDialog::chooseHostfile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Hostfile"), QFileInfo(hostfilePath()).absolutePath());
  if (!path.isEmpty()) setHostfilePath(path);
}

void LaunchDialog::editHosts() {
  if (!hostfilePath().isEmpty() && QFileInfo::exists(hostfilePath())) m_hostsEditor->openFile(hostfilePath());
  m_hostsEditor->show();
  m_hostsEditor->raise();
}

bool LaunchDialog::isPreflighting() const { return m_runner->isRunning(); }

bool LaunchDialog::runPreflight() {
  if (m_runner->isRunning()) {
    setMessage(tr("A preflight pass is running; wait for its results"));
    return false;
  }
  if (hostfilePath().isEmpty()) {
    setMessage(tr("Hostfile: none chosen; choose the file that lists the hosts (`HOST slots=N` per line)"));
    return false;
  }
  std::vector<launch::SelectedHost> selected;
  QString error;
  if (!selectedHosts(&selected, &error)) {
    setMessage(error);
    return false;
  }
  QStringList names;
  m_checkedSlots.clear();
  for (const auto& h : selected) {
    names << qs(h.host);
    m_checkedSlots.push_back(static_cast<int>(h.slot_ids.size()));
  }
  if (!m_runner->start(selected, preflightOptions())) {
    setMessage(tr("No host to check; the include / exclude filters leave none"));
    return false;
  }
  m_table->setPending(names);
  m_preflight->setEnabled(false);
  setMessage(tr("Checking %n host(s)...", nullptr, names.size()));
  return true;
}

launch::PreflightOptions LaunchDialog::preflightOptions() const {
  return m_hostsEditor->testOptions();  // what `stagecraft-cli run` checks
}

QStringList LaunchDialog::hostArguments() const {
  QStringList args{QStringLiteral("--hosts"), hostfilePath()};
  auto add = [&](const char* option, const QString& value) {
    if (!value.isEmpty()) args << QLatin1String(option) << value;
  };
  add("--include", m_include->text().trimmed());
  add("--exclude", m_exclude->text().trimmed());
  add("--ssh-config", m_hostsEditor->sshConfigPath());
  add("--known-hosts", m_hostsEditor->knownHostsPath());
  add("--worker", m_hostsEditor->workerPath());
  return args;
}

QString LaunchDialog::writeConfig(QString* error) {
  const auto resolved = RunLocallyDialog::resolvePaths(m_document->config(), m_document->baseDir());
  QDir dir(QFileInfo(m_db).absoluteDir().filePath(QStringLiteral("launches")));
  if (!dir.mkpath(QStringLiteral("."))) {
    *error = tr("%1: cannot create the folder for launched configs").arg(dir.path());
    return {};
  }
  QString name = qs(resolved.name);
  name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]")), QStringLiteral("_"));
  if (name.isEmpty()) name = QStringLiteral("run");
  const QString path =
      dir.filePath(QStringLiteral("%1-%2.yaml").arg(name, QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz"))));
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(QByteArray::fromStdString(stagecraft::config::to_yaml(resolved))) < 0 || !f.commit()) {
    *error = tr("%1: cannot write the config: %2").arg(path, f.errorString());
    return {};
  }
  return path;
}

bool LaunchDialog::start() {
  if (isStarting()) {
    setMessage(tr("A run is being started; wait for its id"));
    return false;
  }
  if (!m_document->isValid()) {
    const QString why = m_document->problems().isEmpty() ? tr("the configuration is invalid") : m_document->problems().first().message;
    setMessage(tr("Fix the configuration first: %1").arg(why));
    return false;
  }
  launch::SlurmOptions slurm;
  if (where() == Where::Slurm) {
    QString why;
    if (!slurmOptions(&slurm, &why)) {
      setMessage(why);
      return false;
    }
  }
  if (where() == Where::Hosts && hostfilePath().isEmpty()) {
    setMessage(tr("Hostfile: none chosen; choose the file that lists the hosts, or launch on this machine"));
    return false;
  }
  if (where() == Where::Hosts && !QFileInfo::exists(hostfilePath())) {
    setMessage(tr("Hostfile %1: no such file").arg(hostfilePath()));
    return false;
  }
  const QString cli = cliPath();
  if (!QFileInfo(cli).isExecutable()) {
    setMessage(tr("%1: stagecraft-cli not found; set STAGECRAFT_CLI to its path").arg(cli));
    return false;
  }
  QString error;
  m_savedConfig = writeConfig(&error);
  if (m_savedConfig.isEmpty()) {
    setMessage(error);
    return false;
  }
  QStringList args{QStringLiteral("run"), m_savedConfig, QStringLiteral("--detach"), QStringLiteral("--json"), QStringLiteral("--db"), m_db};
  if (where() == Where::Hosts) args << hostArguments();
  if (where() == Where::Slurm) args << slurmArguments(slurm);
  m_lastCommand = QStringList{cli} + args;
  m_runId = 0;
  delete m_process;
  m_process = new QProcess(this);
  if (const QString base = m_document->baseDir(); !base.isEmpty()) m_process->setWorkingDirectory(base);
  connect(m_process, &QProcess::finished, this, &LaunchDialog::onProcessFinished);
  connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    m_start->setEnabled(true);
    setMessage(tr("%1: cannot start: %2").arg(cliPath(), m_process->errorString()));
    Q_EMIT startFailed(m_message);
  });
  m_start->setEnabled(false);
  setMessage(where() == Where::Local ? tr("Starting...")
             : where() == Where::Hosts ? tr("Checking the hosts and starting...")
                                       : tr("Submitting the job to Slurm..."));
  m_process->start(cli, args);
  return true;
}

void LaunchDialog::onProcessFinished(int exitCode, QProcess::ExitStatus status) {
  m_start->setEnabled(true);
  const QString out = QString::fromUtf8(m_process->readAllStandardOutput());
  const QString err = QString::fromUtf8(m_process->readAllStandardError()).trimmed();
  // The first line is {"run_id":N,"db":"..."} once the run is recorded.
  const QString first = out.section(QLatin1Char('\n'), 0, 0).trimmed();
  auto parsed = stagecraft::Json::parse(first.toStdString());
  const stagecraft::Json* id = parsed.ok() ? parsed->find("run_id") : nullptr;
  if (status == QProcess::NormalExit && exitCode == 0 && id && id->is_number()) {
    m_runId = id->as_int();
    setMessage(tr("Run %1 started; it runs on when this window closes. Follow it in the runs view.").arg(m_runId));
    Q_EMIT runStarted(m_runId);
    return;
  }
  QString why = err;
  why.remove(QStringLiteral("stagecraft-cli: error: "));
  if (why.isEmpty()) why = tr("stagecraft-cli run ended with status %1 and no message").arg(exitCode);
  setMessage(why);
  Q_EMIT startFailed(why);
}
