// RunManager: plugs the run manager into the main window — the runs view as a "Runs" dock
// (toggled from View), Run > Launch... (the launch dialog on the document's current config) and
// Run > Hosts... (the launch dialog's hosts editor, so what is set there reaches the launch). It only wires; the views do the work. A run started from
// the launch dialog is selected in the runs view once the CLI reports its id.
#pragma once

#include <QObject>

class HostsEditor;
class LaunchDialog;
class MainWindow;
class QAction;
class RunsView;

class RunManager : public QObject {
  Q_OBJECT

 public:
  // Adds the dock and the menu entries to `window` (which owns the manager).
  static RunManager* install(MainWindow* window);

  RunsView* runsView() const { return m_runs; }
  LaunchDialog* launchDialog() const { return m_launch; }
  // The launch dialog's hosts editor: Run > Hosts opens this one.
  HostsEditor* hostsEditor() const;

  // Run > Launch: false (message shown) when the document's config is invalid.
  bool openLaunchDialog();
  void openHostsEditor();

 private:
  explicit RunManager(MainWindow* window);

  MainWindow* m_window = nullptr;
  RunsView* m_runs = nullptr;
  LaunchDialog* m_launch = nullptr;
};
