// RunManager: the runs view and the Run > Launch / Hosts entries for a document.
#include "runs/RunManager.h"

#include <QMenu>
#include <QMessageBox>

#include "document/PlanDocument.h"
#include "hosts/HostsEditor.h"
#include "runs/LaunchDialog.h"
#include "runs/RunsView.h"

RunManager::RunManager(PlanDocument* document, QWidget* window)
    : QObject(window), m_document(document), m_window(window) {
  setObjectName(QStringLiteral("runManager"));
  m_runs = new RunsView(window);
  m_launch = new LaunchDialog(document, window);

  // The plan is redrawn for the chosen hosts (one undoable edit of the cluster).
  connect(m_launch, &LaunchDialog::hostsApplied, this, [this](const stagecraft::config::RunConfig& config) {
    stagecraft::config::RunConfig current = m_document->config();  // only the cluster is taken
    current.cluster = config.cluster;
    m_document->setConfig(current, tr("Use the hosts of %1").arg(m_launch->hostfilePath()));
  });
  connect(m_launch, &LaunchDialog::runStarted, this, [this](qint64 id) {
    m_runs->refresh();
    m_runs->selectRun(id);
    Q_EMIT runStarted(id);
  });
}

void RunManager::addRunActions(QMenu* menu) {
  QAction* launch = menu->addAction(tr("&Launch..."), this, &RunManager::openLaunchDialog);
  launch->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R));
  menu->addAction(tr("&Hosts..."), this, &RunManager::openHostsEditor);
  menu->addAction(tr("&Calibrate from Selected Runs..."), m_runs, &RunsView::calibrateSelectedRuns);
}

bool RunManager::openLaunchDialog() {
  if (!m_document->isValid()) {
    const QString why = m_document->problems().isEmpty() ? tr("the configuration is invalid") : m_document->problems().first().message;
    QMessageBox::warning(m_window, tr("Cannot launch"), tr("Fix the configuration first: %1").arg(why));
    return false;
  }
  m_launch->setDatabasePath(m_runs->databasePath());
  m_launch->refresh();
  m_launch->show();
  m_launch->raise();
  return true;
}

HostsEditor* RunManager::hostsEditor() const { return m_launch->hostsEditor(); }

void RunManager::openHostsEditor() {
  // The launch dialog's own editor: its SSH config, known_hosts and worker path are the ones a
  // launch from that dialog uses.
  HostsEditor* editor = hostsEditor();
  editor->show();
  editor->raise();
}
