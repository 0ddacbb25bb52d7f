// RunManager: the run side of the desktop application for one document — the runs view, Run >
// Launch (the launch dialog on the document's current config) and Run > Hosts (the launch
// dialog's hosts editor, so what is set there reaches the launch). It only wires; the views do
// the work, and the window places them (a dock, menu entries): the manager knows no window
// type. A run started from the launch dialog is selected in the runs view once the CLI reports
// its id, and runStarted() tells the window to bring the view forward.
#pragma once

#include <QObject>

class HostsEditor;
class LaunchDialog;
class PlanDocument;
class QMenu;
class QWidget;
class RunsView;

class RunManager : public QObject {
  Q_OBJECT

 public:
  // `window` parents the views and dialogs and owns the manager; `document` outlives it.
  RunManager(PlanDocument* document, QWidget* window);

  RunsView* runsView() const { return m_runs; }
  LaunchDialog* launchDialog() const { return m_launch; }
  // The launch dialog's hosts editor: Run > Hosts opens this one.
  HostsEditor* hostsEditor() const;
  // Adds Launch..., Hosts... and Calibrate from Selected Runs... (the runs view's) to `menu`.
  void addRunActions(QMenu* menu);

  // Run > Launch: false (message shown) when the document's config is invalid.
  bool openLaunchDialog();
  void openHostsEditor();

 Q_SIGNALS:
  // A launched run was recorded as `id` and selected in the runs view; show the view.
  void runStarted(qint64 id);

 private:
  PlanDocument* m_document = nullptr;
  QWidget* m_window = nullptr;
  RunsView* m_runs = nullptr;
  LaunchDialog* m_launch = nullptr;
};
