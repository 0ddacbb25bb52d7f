// HostsEditor: hostfile text with per-line checks, SSH config aliases, connection tests and
// host key trust.
#include "hosts/HostsEditor.h"

#include <QApplication>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBlock>
#include <QVBoxLayout>

#include "common/Text.h"
#include "hosts/PreflightRunner.h"
#include "hosts/PreflightTable.h"
#include "hosts/SshConfigHosts.h"
#include "stagecraft/launch/ssh.h"

namespace launch = stagecraft::launch;

namespace {


QString originOf(const QString& path) { return path.isEmpty() ? QStringLiteral("hostfile") : QFileInfo(path).fileName(); }

}  // namespace

QList<HostfileProblem> HostsEditor::checkHostfile(const QString& text, const QString& origin, std::vector<launch::HostEntry>* good) {
  // The engine stops at the first bad line: report it, blank it, and parse again, until the
  // rest parses. Line numbers stay those of the text.
  QList<HostfileProblem> problems;
  QStringList lines = text.split(QLatin1Char('\n'));
  const std::string originText = origin.toStdString();
  const QRegularExpression where(QStringLiteral("^") + QRegularExpression::escape(origin) + QStringLiteral(":(\\d+): "));
  if (good) good->clear();
  for (int pass = 0; pass <= lines.size(); ++pass) {
    auto parsed = launch::parse_hostfile(lines.join(QLatin1Char('\n')).toStdString(), originText);
    if (parsed.ok()) {
      if (good) *good = std::move(parsed).value();
      break;
    }
    const QString message = qs(parsed.status().message());
    const auto m = where.match(message);
    const int line = m.hasMatch() ? m.captured(1).toInt() : 0;
    if (line < 1 || line > lines.size()) {
      // The text as a whole ("no hosts"): only worth saying when no line was at fault.
      if (problems.isEmpty()) problems.append({0, message});
      break;
    }
    problems.append({line, message});
    lines[line - 1].clear();
  }
  std::sort(problems.begin(), problems.end(), [](const auto& a, const auto& b) { return a.line < b.line; });
  return problems;
}

HostsEditor::HostsEditor(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Hosts"));
  resize(860, 640);
  m_runner = new PreflightRunner(this);
  auto* layout = new QVBoxLayout(this);

  auto* fileBar = new QHBoxLayout;
  auto* open = new QPushButton(tr("Open..."), this);
  auto* save = new QPushButton(tr("Save As..."), this);
  auto* addAlias = new QPushButton(tr("Add from SSH config..."), this);
  addAlias->setObjectName(QStringLiteral("addFromSshConfig"));
  m_aliasSlots = new QSpinBox(this);
  m_aliasSlots->setRange(1, 4096);
  m_aliasSlots->setPrefix(tr("slots="));
  fileBar->addWidget(open);
  fileBar->addWidget(save);
  fileBar->addStretch(1);
  fileBar->addWidget(addAlias);
  fileBar->addWidget(m_aliasSlots);
  layout->addLayout(fileBar);

  auto* split = new QSplitter(Qt::Vertical, this);
  auto* top = new QWidget(split);
  auto* tl = new QHBoxLayout(top);
  tl->setContentsMargins(0, 0, 0, 0);
  m_editor = new QPlainTextEdit(top);
  m_editor->setObjectName(QStringLiteral("hostfileText"));
  m_editor->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_editor->setPlaceholderText(tr("# one host per line\nnode-a slots=8\nnode-b slots=8"));
  m_problemList = new QListWidget(top);
  m_problemList->setObjectName(QStringLiteral("hostfileProblems"));
  tl->addWidget(m_editor, 3);
  tl->addWidget(m_problemList, 2);

  auto* bottom = new QWidget(split);
  auto* bl = new QVBoxLayout(bottom);
  bl->setContentsMargins(0, 0, 0, 0);
  auto* form = new QFormLayout;
  m_sshConfig = new QLineEdit(bottom);
  m_sshConfig->setPlaceholderText(QStringLiteral("~/.ssh/config"));
  m_knownHosts = new QLineEdit(bottom);
  m_knownHosts->setPlaceholderText(QStringLiteral("~/.ssh/known_hosts"));
  m_worker = new QLineEdit(bottom);
  m_worker->setPlaceholderText(tr("stagecraft-worker beside this program, same path on every host"));
  form->addRow(tr("SSH config:"), m_sshConfig);
  form->addRow(tr("Known hosts:"), m_knownHosts);
  form->addRow(tr("Worker:"), m_worker);
  bl->addLayout(form);
  auto* testBar = new QHBoxLayout;
  m_test = new QPushButton(tr("Test connection"), bottom);
  m_test->setObjectName(QStringLiteral("testConnection"));
  m_testOne = new QPushButton(tr("Test host at cursor"), bottom);
  m_trust = new QPushButton(tr("Trust host key..."), bottom);
  m_trust->setEnabled(false);
  testBar->addWidget(m_test);
  testBar->addWidget(m_testOne);
  testBar->addStretch(1);
  testBar->addWidget(m_trust);
  bl->addLayout(testBar);
  m_table = new PreflightTable(bottom);
  bl->addWidget(m_table, 1);
  split->addWidget(top);
  split->addWidget(bottom);
  layout->addWidget(split, 1);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("hostsStatus"));
  m_status->setWordWrap(true);
  layout->addWidget(m_status);
  auto* close = new QPushButton(tr("Close"), this);
  auto* closeBar = new QHBoxLayout;
  closeBar->addStretch(1);
  closeBar->addWidget(close);
  layout->addLayout(closeBar);

  connect(m_editor, &QPlainTextEdit::textChanged, this, &HostsEditor::revalidate);
  connect(open, &QPushButton::clicked, this, &HostsEditor::chooseOpen);
  connect(save, &QPushButton::clicked, this, &HostsEditor::chooseSave);
  connect(addAlias, &QPushButton::clicked, this, &HostsEditor::chooseAlias);
  connect(m_test, &QPushButton::clicked, this, [this] { testConnection(); });
  connect(m_testOne, &QPushButton::clicked, this, [this] {
    const int line = m_editor->textCursor().blockNumber() + 1;
    for (const auto& h : m_hosts) {
      if (h.line == line) {
        testConnection({qs(h.host)});
        return;
      }
    }
    showStatus(tr("Line %1 names no valid host; put the cursor on a host's line").arg(line));
  });
  connect(m_trust, &QPushButton::clicked, this, [this] { trustHostKey(m_table->currentRow()); });
  connect(m_table, &QTableWidget::currentCellChanged, this, &HostsEditor::updateTrustButton);
  connect(m_problemList, &QListWidget::currentRowChanged, this, [this](int row) {
    if (row < 0 || row >= m_problems.size() || m_problems[row].line < 1) return;
    QTextCursor c(m_editor->document()->findBlockByNumber(m_problems[row].line - 1));
    m_editor->setTextCursor(c);
    m_editor->setFocus();
  });
  connect(m_runner, &PreflightRunner::finished, this, &HostsEditor::onTestFinished);
  connect(close, &QPushButton::clicked, this, &QDialog::accept);
  revalidate();
}

HostsEditor::~HostsEditor() = default;

void HostsEditor::setText(const QString& text) { m_editor->setPlainText(text); }

QString HostsEditor::text() const { return m_editor->toPlainText(); }

QList<int> HostsEditor::badLines() const {
  QList<int> out;
  for (const auto& p : m_problems) {
    if (p.line > 0) out << p.line;
  }
  return out;
}

void HostsEditor::revalidate() {
  m_problems = checkHostfile(text(), originOf(m_path), &m_hosts);
  QList<QTextEdit::ExtraSelection> marks;
  m_problemList->clear();
  for (const auto& p : m_problems) {
    m_problemList->addItem(p.line > 0 ? tr("line %1: %2").arg(p.line).arg(p.message) : p.message);
    if (p.line < 1) continue;
    QTextEdit::ExtraSelection mark;
    mark.cursor = QTextCursor(m_editor->document()->findBlockByNumber(p.line - 1));
    mark.format.setBackground(QColor(0xf8, 0xd7, 0xd7));
    mark.format.setProperty(QTextFormat::FullWidthSelection, true);
    mark.format.setToolTip(p.message);
    marks << mark;
  }
  m_editor->setExtraSelections(marks);
  if (m_problems.isEmpty()) {
    showStatus(tr("%n host(s)", nullptr, static_cast<int>(m_hosts.size())));
  } else {
    showStatus(tr("%n line(s) to fix", nullptr, static_cast<int>(badLines().size())));
  }
  Q_EMIT problemsChanged();
}

void HostsEditor::showStatus(const QString& text) { m_status->setText(text); }

QString HostsEditor::statusText() const { return m_status->text(); }

bool HostsEditor::openFile(const QString& path, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) {
    const QString why = tr("%1: cannot read the hostfile: %2").arg(path, f.errorString());
    if (error) *error = why;
    showStatus(why);
    return false;
  }
  m_path = path;
  setWindowTitle(tr("Hosts — %1").arg(QFileInfo(path).fileName()));
  setText(QString::fromUtf8(f.readAll()));
  return true;
}

bool HostsEditor::saveFile(const QString& path, QString* error) {
  QSaveFile f(path);
  QString why;
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) {
    why = f.errorString();
  } else {
    QByteArray bytes = text().toUtf8();
    if (!bytes.endsWith('\n')) bytes += '\n';
    f.write(bytes);
    if (!f.commit()) why = f.errorString();
  }
  if (!why.isEmpty()) {
    why = tr("%1: cannot write the hostfile: %2").arg(path, why);
    if (error) *error = why;
    showStatus(why);
    return false;
  }
  m_path = path;
  setWindowTitle(tr("Hosts — %1").arg(QFileInfo(path).fileName()));
  revalidate();
  Q_EMIT hostfileSaved(path);
  return true;
}

void HostsEditor::chooseOpen() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open hostfile"), QFileInfo(m_path).absolutePath());
  if (!path.isEmpty()) openFile(path);
}

void HostsEditor::chooseSave() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save hostfile"), m_path);
  if (!path.isEmpty()) saveFile(path);
}

void HostsEditor::setSshConfigPath(const QString& path) { m_sshConfig->setText(path); }
QString HostsEditor::sshConfigPath() const { return m_sshConfig->text().trimmed(); }
void HostsEditor::setKnownHostsPath(const QString& path) { m_knownHosts->setText(path); }
QString HostsEditor::knownHostsPath() const { return m_knownHosts->text().trimmed(); }
void HostsEditor::setWorkerPath(const QString& path) { m_worker->setText(path); }
QString HostsEditor::workerPath() const { return m_worker->text().trimmed(); }

launch::PreflightOptions HostsEditor::preflightOptions() const {
  launch::PreflightOptions o;
  o.ssh.config_file = sshConfigPath().toStdString();
  o.ssh.known_hosts_file = knownHostsPath().toStdString();
  o.worker_path = workerPath().toStdString();
  return o;
}

void HostsEditor::setRunChecks(std::function<launch::PreflightOptions(launch::PreflightOptions)> checks) {
  m_runChecks = std::move(checks);
}

launch::PreflightOptions HostsEditor::testOptions() const { return m_runChecks ? m_runChecks(preflightOptions()) : preflightOptions(); }

QStringList HostsEditor::sshAliases() const {
  QString error;
  const QStringList aliases = sshConfigAliasesFromFile(sshConfigPath(), &error);
  if (!error.isEmpty()) const_cast<HostsEditor*>(this)->showStatus(error);
  return aliases;
}

void HostsEditor::addHost(const QString& host, int slotCount) {
  QString t = text();
  if (!t.isEmpty() && !t.endsWith(QLatin1Char('\n'))) t += QLatin1Char('\n');
  t += QStringLiteral("%1 slots=%2\n").arg(host).arg(slotCount);
  setText(t);
}

void HostsEditor::chooseAlias() {
  const QStringList aliases = sshAliases();
  if (aliases.isEmpty()) {
    showStatus(tr("No host aliases in %1").arg(sshConfigPath().isEmpty() ? QStringLiteral("~/.ssh/config") : sshConfigPath()));
    return;
  }
  QMenu menu(this);
  for (const QString& a : aliases) menu.addAction(a, this, [this, a] { addHost(a, m_aliasSlots->value()); });
  menu.exec(QCursor::pos());
}

bool HostsEditor::isTesting() const { return m_runner->isRunning(); }

bool HostsEditor::testConnection(const QStringList& hosts) {
  if (m_runner->isRunning()) {
    showStatus(tr("A connection test is running; wait for its results"));
    return false;
  }
  std::vector<launch::SelectedHost> selected;
  QStringList names;
  m_testedSlots.clear();
  for (const auto& h : m_hosts) {
    if (!hosts.isEmpty() && !hosts.contains(qs(h.host))) continue;
    launch::SelectedHost s{h.host, {}};
    for (int i = 0; i < h.slot_count; ++i) s.slot_ids.push_back(i);
    selected.push_back(std::move(s));
    names << qs(h.host);
    m_testedSlots.push_back(h.slot_count);
  }
  if (selected.empty()) {
    showStatus(m_hosts.empty() ? tr("No valid host to test; add a line `HOST slots=N`")
                               : tr("None of %1 is a valid host of this hostfile").arg(hosts.join(QStringLiteral(", "))));
    return false;
  }
  m_table->setPending(names);
  m_test->setEnabled(false);
  m_testOne->setEnabled(false);
  m_trust->setEnabled(false);
  showStatus(tr("Testing %n host(s)...", nullptr, names.size()));
  return m_runner->start(selected, testOptions());
}

void HostsEditor::onTestFinished() {
  m_table->setChecks(m_runner->results(), m_testedSlots);
  m_test->setEnabled(true);
  m_testOne->setEnabled(true);
  int failed = 0;
  for (const auto& c : m_runner->results()) failed += c.ok() ? 0 : 1;
  showStatus(failed == 0 ? tr("Every host passed") : tr("%n host(s) failed; see the problems column", nullptr, failed));
  updateTrustButton();
  Q_EMIT testFinished();
}

void HostsEditor::updateTrustButton() {
  const int row = m_table->currentRow();
  const auto& checks = m_table->checks();
  const bool can = row >= 0 && row < static_cast<int>(checks.size()) && checks[static_cast<size_t>(row)].connect.reachable &&
                   !checks[static_cast<size_t>(row)].connect.host_key_known && !checks[static_cast<size_t>(row)].connect.fingerprint.empty();
  m_trust->setEnabled(can && !m_runner->isRunning());
}

bool HostsEditor::trustHostKey(int row, bool ask, QString* error) {
  const auto& checks = m_table->checks();
  auto fail = [&](const QString& why) {
    if (error) *error = why;
    showStatus(why);
    return false;
  };
  if (row < 0 || row >= static_cast<int>(checks.size())) return fail(tr("Select a host in the results first"));
  // A copy: the question below runs a nested event loop, in which a finished test pass replaces
  // the table's checks.
  const launch::HostCheck c = checks[static_cast<size_t>(row)];
  if (!c.connect.reachable || c.connect.fingerprint.empty()) {
    return fail(tr("%1: its key was not seen; test the connection first").arg(qs(c.host)));
  }
  if (c.connect.host_key_known) return fail(tr("%1: its key is already trusted").arg(qs(c.host)));
  const QString fingerprint = qs(c.connect.fingerprint);
  if (ask) {
    const auto answer = QMessageBox::question(
        this, tr("Trust host key"),
        tr("The host %1 presented a key that known_hosts does not hold:\n\n%2\n\nCompare this fingerprint with the one the "
           "host's administrator gives you (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on the host). Trust it?")
            .arg(qs(c.host), fingerprint));
    if (answer != QMessageBox::Yes) return fail(tr("%1: key not trusted").arg(qs(c.host)));
  }
  launch::SshOptions ssh = preflightOptions().ssh;
  QApplication::setOverrideCursor(Qt::WaitCursor);
  const stagecraft::Status s = launch::trust_host_key(c.host, ssh, c.connect.fingerprint);
  QApplication::restoreOverrideCursor();
  if (!s) return fail(qs(s.message()));
  showStatus(tr("%1: key %2 trusted; test the connection again").arg(qs(c.host), fingerprint));
  return true;
}
