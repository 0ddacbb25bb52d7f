// MainWindow: the desktop application's window. It owns the PlanDocument and only wires: the
// topology view in the centre; the setup form, stage editor, estimates and schedule in docks;
// the plan's summary and warnings in the status bar; the Layouts dock (find layouts), whose
// previews it draws in the views without touching the document; menus for files, import/export, undo/redo,
// views, Run (Run locally; the run manager's runs view as a dock, Launch and Hosts) and About.
// Geometry, dock layout and recent files persist in QSettings.
//
// Every menu action that asks for a file has a method taking the path (openFile, exportTo...),
// which the action calls after its file dialog and which tests call directly. Failures never end
// the program: each shows the engine's one-line message (a non-blocking message box and the
// status bar) and is kept in lastError().
#pragma once

#include <QMainWindow>
#include <QStringList>

#include "stagecraft/interop/frameworks.h"

class EstimatesView;
class LayoutsView;
class ScalingView;
class PlanDocument;
class QAction;
class QLabel;
class QMenu;
class QDockWidget;
class RunLocallyDialog;
class RunManager;
class ScheduleView;
class SetupPanel;
class StageEditor;
class TopologyView;
struct ConfigProblem;
namespace stagecraft::plan {
struct Plan;
}

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  PlanDocument* document() const { return m_document; }
  TopologyView* topologyView() const { return m_topology; }
  SetupPanel* setupPanel() const { return m_setup; }
  StageEditor* stageEditor() const { return m_stages; }
  EstimatesView* estimatesView() const { return m_estimates; }
  ScheduleView* scheduleView() const { return m_schedule; }
  LayoutsView* layoutsView() const { return m_layouts; }
  ScalingView* scalingView() const { return m_scaling; }
  RunLocallyDialog* runDialog() const { return m_runDialog; }
  RunManager* runManager() const { return m_runs; }
  // The Run menu: Run locally, then the run manager's Launch and Hosts.
  QMenu* runMenu() const { return m_runMenu; }
  // Adds a dock (the run history, hosts) with its toggle in the View menu.
  void addViewDock(QDockWidget* dock, Qt::DockWidgetArea area);

  // The summary text of the status bar and the warnings it lists (one a line).
  QString summaryText() const;
  QString warningsText() const;
  // The last error shown, "" when none since the window opened.
  QString lastError() const { return m_lastError; }
  QStringList recentFiles() const { return m_recent; }

  // File operations by path; false after showing the error.
  bool openFile(const QString& path);
  bool saveFile();
  bool saveFileAs(const QString& path);
  bool importFrom(stagecraft::interop::Framework from, const QString& path);
  bool exportTo(stagecraft::interop::Framework to, const QString& path);
  bool exportTopologyImage(const QString& path);
  bool exportScheduleImage(const QString& path);
  // Run > Run locally on the current config; false (message shown) when it cannot run.
  bool runLocally();
  // Edit > Find Layouts (Ctrl+F): shows the Layouts dock and searches the current config.
  void findLayouts();
  // View > How It Scales: shows the Scaling dock and computes it for the current config.
  void showScaling();
  // Help > User Guide (F1): opens the guide's folder, installed or the source tree's docs/, with the
  // desktop's file handler; a message when there is none.
  void openUserGuide();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  // The size a first start opens at (no saved geometry); empty otherwise.
  QSize m_firstStartSize;
  void createViews();
  void createMenus();
  void createRunViews();
  void createFileMenu();
  void wireDocument();
  void showPlan(const stagecraft::plan::Plan& plan);
  // Draws `plan` in the views (a layout's preview); the document keeps its own.
  void showPreview(const stagecraft::plan::Plan& plan);
  void showProblems(const QList<ConfigProblem>& problems);
  void updateTitle();
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void showError(const QString& title, const QString& message);
  void showInfo(const QString& title, const QString& message);
  bool maybeSave();
  void readSettings();
  void writeSettings() const;
  QString startDir() const;

  PlanDocument* m_document = nullptr;
  TopologyView* m_topology = nullptr;
  SetupPanel* m_setup = nullptr;
  StageEditor* m_stages = nullptr;
  EstimatesView* m_estimates = nullptr;
  ScheduleView* m_schedule = nullptr;
  LayoutsView* m_layouts = nullptr;
  QDockWidget* m_layoutsDock = nullptr;
  ScalingView* m_scaling = nullptr;
  QDockWidget* m_scalingDock = nullptr;
  RunLocallyDialog* m_runDialog = nullptr;
  RunManager* m_runs = nullptr;
  QDockWidget* m_stagesDock = nullptr;
  QDockWidget* m_runsDock = nullptr;
  QMenu* m_viewMenu = nullptr;
  QMenu* m_runMenu = nullptr;
  QMenu* m_recentMenu = nullptr;
  QLabel* m_summary = nullptr;
  QLabel* m_warnings = nullptr;
  QLabel* m_invalid = nullptr;
  QStringList m_recent;
  QString m_lastError;
};
