// RunLocallyDialog: Run > Run locally — trains the current config on this machine through the
// engine's run session (launch::RunSession, the same path as `stagecraft-cli run`), drawing rank
// 0's loss as it arrives, with Cancel.
//
// The run happens on a worker std::thread; every engine callback crosses to the GUI thread as a
// queued call, so the dialog's state is only touched in the GUI thread. Cancel asks the run's
// Supervisor to stop (TERM, then KILL after the grace period) through the run's cancel flag;
// closing the dialog while a run is going cancels it (the thread is joined when the run reports
// its end, or in the destructor). A config that cannot run here (no train.data, a
// backend this build lacks, more than one node, a model the engine cannot train) is refused
// before anything starts, with launch::check_runnable's one-line message.
//
// Every run is recorded in the run history by its session, as `stagecraft-cli run` records its
// runs, so the Runs view shows it live and keeps it; historyRunId() names it.
//
// Relative paths of the config (train.data, train.checkpoint_dir) are taken from the directory
// of the config file (`baseDir`) when they do not exist from the working directory: the examples
// name their data as configs/data/..., relative to the repository.
#pragma once

#include <QDialog>
#include <QString>

#include <memory>
#include <thread>

#include "stagecraft/config/run_config.h"
#include "stagecraft/plan/plan.h"

class QLabel;
class QLineSeries;
class QPushButton;
class QValueAxis;
class QPlainTextEdit;
namespace stagecraft::launch {
class RunSession;
}

class RunLocallyDialog : public QDialog {
  Q_OBJECT

 public:
  explicit RunLocallyDialog(QWidget* parent = nullptr);
  ~RunLocallyDialog() override;

  // Checks `config` (planned as `plan`, the document's plan) and starts the run; false (with the
  // reason in *error and in the dialog) when it cannot run here. A dialog runs one config at a
  // time.
  bool start(const stagecraft::config::RunConfig& config, const stagecraft::plan::Plan& plan, const QString& baseDir,
             QString* error = nullptr);
  // Asks a running run to stop; it ends as "cancelled".
  void cancel();

  // The run history runs are recorded in; default store::RunStore::default_path().
  void setDatabasePath(const QString& path) { m_db = path; }
  QString databasePath() const { return m_db; }
  // The history's id of the current or last run; 0 before one starts.
  qint64 historyRunId() const { return m_historyRunId; }

  bool isRunning() const { return m_running; }
  // "succeeded" "failed" "hung" "cancelled", "" before the run ends.
  QString outcome() const { return m_outcome; }
  // The run's one-line reason when it did not succeed, or why it could not start.
  QString message() const { return m_message; }
  QLineSeries* lossSeries() const { return m_loss; }
  QString logText() const;

  // The config with relative paths resolved as described above; exposed for tests.
  static stagecraft::config::RunConfig resolvePaths(stagecraft::config::RunConfig config, const QString& baseDir);
  // Why `config`, planned as `plan`, cannot run on this machine, or "" when it can.
  static QString refusal(const stagecraft::config::RunConfig& config, const stagecraft::plan::Plan& plan);

 Q_SIGNALS:
  void lossRecorded(int step, double loss);
  void runFinished(const QString& outcome);

 protected:
  void reject() override;

 private:
  void addLoss(int step, double loss);
  void finish(const QString& outcome, const QString& reason);
  void appendLog(const QString& line);
  void joinWorker();
  bool refuse(const QString& why, QString* error);

  QLabel* m_status = nullptr;
  QLineSeries* m_loss = nullptr;
  QValueAxis* m_xAxis = nullptr;
  QValueAxis* m_yAxis = nullptr;
  QPlainTextEdit* m_log = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_close = nullptr;

  int m_totalSteps = 0;
  double m_minLoss = 0, m_maxLoss = 0;
  bool m_running = false;
  QString m_outcome;
  QString m_message;

  QString m_db;
  qint64 m_historyRunId = 0;
  std::unique_ptr<stagecraft::launch::RunSession> m_session;  // the current run; used by the worker thread
  std::thread m_worker;
};
