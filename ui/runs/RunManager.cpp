// RunManager: the Runs dock and the Run > Launch / Hosts entries of the main window.
#include "runs/RunManager.h"

#include <QDockWidget>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>

#include "document/PlanDocument.h"
#include "hosts/HostsEditor.h"
#include "mainwindow/MainWindow.h"
#include "runs/LaunchDialog.h"
#include "runs/RunsView.h"

RunManager* RunManager::install(MainWindow* window) { return new RunManager(window); }

RunManager::RunManager(MainWindow* window) : QObject(window), m_window(window) {
  setObjectName(QStringLiteral("runManager"));
  m_runs = new RunsView(window);
  auto* dock = new QDockWidget(tr("Runs"), window);
  dock->setObjectName(QStringLiteral("runsDock"));  // saveState() keys docks by object name
  dock->setWidget(m_runs);
  window->addViewDock(dock, Qt::BottomDockWidgetArea);
  // A tab beside Stages and Schedule: the topology keeps the height of the window.
  if (auto* stages = window->findChild<QDockWidget*>(QStringLiteral("stagesDock"))) {
    window->tabifyDockWidget(stages, dock);
    stages->raise();
  }
  m_launch = new LaunchDialog(window);

  QMenu* run = window->runMenu();
  run->addSeparator();
  QAction* launch = run->addAction(tr("&Launch..."), this, &RunManager::openLaunchDialog);
  launch->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R));
  run->addAction(tr("&Hosts..."), this, &RunManager::openHostsEditor);

  // The plan is redrawn for the chosen hosts (one undoable edit of the cluster).
  connect(m_launch, &LaunchDialog::hostsApplied, this, [this](const stagecraft::config::RunConfig& config) {
    stagecraft::config::RunConfig current = m_window->document()->config();  // edits made meanwhile stay
    current.cluster = config.cluster;
    m_window->document()->setConfig(current, tr("Use the hosts of %1").arg(m_launch->hostfilePath()));
  });
  connect(m_launch, &LaunchDialog::runStarted, this, [this, dock](qint64 id) {
    dock->show();
    dock->raise();
    m_runs->refresh();
    m_runs->selectRun(id);
  });
}

bool RunManager::openLaunchDialog() {
  PlanDocument* doc = m_window->document();
  if (!doc->isValid()) {
    const QString why = doc->problems().isEmpty() ? tr("the configuration is invalid") : doc->problems().first().message;
    QMessageBox::warning(m_window, tr("Cannot launch"), tr("Fix the configuration first: %1").arg(why));
    return false;
  }
  const QString base = doc->filePath().isEmpty() ? QString() : QFileInfo(doc->filePath()).absolutePath();
  m_launch->setDatabasePath(m_runs->databasePath());
  m_launch->setConfig(doc->config(), base);
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
