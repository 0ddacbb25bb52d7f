// LaunchDialog: Run > Launch — starts the current config as a run kept in the run history,
// on this machine, on the hosts of a hostfile (with --include / --exclude) after an optional
// preflight whose results are shown per host, or as a Slurm batch job (partition, account, time
// limit, QOS, constraint, more sbatch options; `stagecraft-cli preflight --slurm` on request).
//
// The run is the document's current config (PlanDocument), read when it is needed: the dialog
// keeps no copy, and plans for the chosen hosts come from the document (planForHosts).
//
// How a run starts: the dialog writes the document's config (relative data and checkpoint
// paths resolved as Run locally resolves them) to <history folder>/launches/NAME-TIME.yaml and
// starts `stagecraft-cli run FILE --detach --json --db HISTORY [--hosts FILE ... | --slurm ...]`. The CLI
// records the run, prints its id and leaves a supervisor of its own in the background (its own
// session), then exits; that supervisor runs the run through launch::RunSession. Chosen over supervising inside the GUI process because the run must not
// depend on the GUI: closing the window, or the GUI crashing, never stops a run, and every run,
// whoever started it, is watched and cancelled the same way, through the history (runs view).
// The CLI checks the config (launch::check_runnable, as Run locally does); its one-line error is
// shown here.
//
// The CLI is found as $STAGECRAFT_CLI, else stagecraft-cli beside this program (setCliPath()
// overrides both).
#pragma once

#include <QDialog>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/slurm.h"

class HostsEditor;
class PlanDocument;
class PreflightRunner;
class PreflightTable;
class QGroupBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QRadioButton;

class LaunchDialog : public QDialog {
  Q_OBJECT

 public:
  // Launches `document`'s config; the document outlives the dialog.
  explicit LaunchDialog(PlanDocument* document, QWidget* parent = nullptr);
  ~LaunchDialog() override;

  PlanDocument* document() const { return m_document; }
  // Shows the document's current config and its plan on the chosen hosts (also done on every
  // change of the document).
  void refresh();
  void setDatabasePath(const QString& path);
  QString databasePath() const { return m_db; }
  void setCliPath(const QString& path) { m_cli = path; }
  QString cliPath() const;

  // Where the run goes: this machine, the hosts of a hostfile (SSH), or a Slurm cluster.
  enum class Where { Local, Hosts, Slurm };
  void setWhere(Where where);
  Where where() const;
  void setLocal(bool local);  // Local, or else Hosts
  bool isLocal() const;

  // The Slurm fields (sbatch_args: the "More sbatch options" field split at spaces).
  void setSlurmOptions(const stagecraft::launch::SlurmOptions& options);
  // What the fields ask of Slurm; false with the one-line reason (a bad time limit, a name with a
  // space, an option the plan sets) in *error.
  bool slurmOptions(stagecraft::launch::SlurmOptions* out, QString* error) const;
  // `stagecraft-cli preflight CONFIG --slurm ...` in the background; its lines arrive in
  // slurmPreflightText() and slurmPreflightFinished(ok). False (reason in message()) when the
  // fields are wrong or a check is already running.
  bool runSlurmPreflight();
  QString slurmPreflightText() const;
  void setHostfilePath(const QString& path);
  QString hostfilePath() const;
  void setInclude(const QString& filter);
  void setExclude(const QString& filter);
  // Its SSH settings (config, known hosts, worker) are the launch's too.
  HostsEditor* hostsEditor() const { return m_hostsEditor; }

  // The document's config as it runs on the chosen hosts (nodes = hosts, gpus_per_node =
  // slots), planned by the document; false with the reason in *error when the config, the
  // hostfile, the selection or the plan for those hosts is wrong. The dialog shows the same as its hosts summary while they are edited.
  bool hostsConfig(stagecraft::config::RunConfig* out, QString* error) const;
  QString hostsSummary() const;
  // Hands hostsConfig() to the main window (hostsApplied): the plan is redrawn for the hosts.
  bool applyHostsToPlan();

  // Checks the selected hosts on a background thread; false (reason in message()) when the
  // hostfile or the selection is wrong, or a pass is already running.
  bool runPreflight();
  // What a preflight pass checks with: the hosts editor's SSH settings and worker, and GPUs
  // counted (cuda) when the config's backend is cuda, as `stagecraft-cli preflight` does.
  stagecraft::launch::PreflightOptions preflightOptions() const;
  bool isPreflighting() const;
  PreflightTable* preflightTable() const { return m_table; }

  // Starts the run; false (reason in message()) when the input is incomplete. The outcome
  // arrives as runStarted() or startFailed().
  bool start();
  bool isStarting() const { return m_process && m_process->state() != QProcess::NotRunning; }
  qint64 startedRunId() const { return m_runId; }
  QString message() const { return m_message; }
  // The command line of the last start (program first), and the config file it wrote.
  QStringList lastCommand() const { return m_lastCommand; }
  QString savedConfigPath() const { return m_savedConfig; }

 Q_SIGNALS:
  void runStarted(qint64 id);
  void startFailed(const QString& message);
  void hostsApplied(const stagecraft::config::RunConfig& config);
  void slurmPreflightFinished(bool ok);

 private:
  void chooseHostfile();
  void updateHostsSummary();
  void editHosts();
  void updateMode();
  void setMessage(const QString& text);
  void onProcessFinished(int exitCode, QProcess::ExitStatus status);
  QString writeConfig(QString* error);
  QStringList hostArguments() const;
  QStringList slurmArguments(const stagecraft::launch::SlurmOptions& options) const;
  void checkSlurmFields();
  // The hostfile parsed and the include / exclude filters applied; false with the reason.
  bool selectedHosts(std::vector<stagecraft::launch::SelectedHost>* out, QString* error) const;

  PlanDocument* m_document = nullptr;
  QString m_db;
  QString m_cli;
  QRadioButton* m_local = nullptr;
  QRadioButton* m_hosts = nullptr;
  QRadioButton* m_slurm = nullptr;
  QGroupBox* m_slurmBox = nullptr;
  QLineEdit* m_partition = nullptr;
  QLineEdit* m_account = nullptr;
  QLineEdit* m_time = nullptr;
  QLineEdit* m_qos = nullptr;
  QLineEdit* m_constraint = nullptr;
  QLineEdit* m_sbatchArgs = nullptr;
  QPushButton* m_slurmPreflight = nullptr;
  QLabel* m_slurmResult = nullptr;
  QProcess* m_slurmCheck = nullptr;
  QGroupBox* m_hostBox = nullptr;
  QLineEdit* m_hostfile = nullptr;
  QLineEdit* m_include = nullptr;
  QLineEdit* m_exclude = nullptr;
  QPushButton* m_preflight = nullptr;
  QPushButton* m_start = nullptr;
  QLabel* m_summary = nullptr;
  QLabel* m_hostsPlan = nullptr;      // the plan on the chosen hosts, or why there is none
  QPushButton* m_applyHosts = nullptr;
  QLabel* m_status = nullptr;
  PreflightTable* m_table = nullptr;
  PreflightRunner* m_runner = nullptr;
  HostsEditor* m_hostsEditor = nullptr;
  QProcess* m_process = nullptr;
  qint64 m_runId = 0;
  QString m_message;
  QStringList m_lastCommand;
  QString m_savedConfig;
  std::vector<int> m_checkedSlots;  // slots asked of each host of the running / last preflight
};
