// RunsView: the run manager's view of the run history — the table of runs (sort by any column,
// filter by state and name) and, for the selected run, its live loss / throughput / memory
// charts with another run's loss overlaid to compare and its plan's prediction dashed beside
// them, its ranks as tiles coloured by state, its logs with search, its measured pipeline
// timeline beside the predicted one (RunTimelineView), and for a mixture of experts the load of
// every expert of every MoE layer over the run (ExpertLoadMap). A Cancel button stops a queued or running
// run. Several runs can be selected (the current row is the one shown); Calibrate fits the
// device's constants to the selected runs (CalibrateDialog).
//
// Where the data comes from: the SQLite history (store::RunStore), read again every
// pollInterval() ms (default 1000). The history is the one place every run is written, by the
// GUI's launches and by `stagecraft-cli run [--detach]` alike, so polling the file shows them all
// and needs nothing from the process that supervises a run. Selecting a run reads it whole; a
// poll then reads only the rows written since (metrics, events, log lines) while the run is
// queued or running or its row changed.
//
// Cancel asks the run's supervisor to stop, as `stagecraft-cli runs cancel` does
// (store::cancel_run: a request recorded in the history, which the supervising process polls,
// whether it is a CLI run, a detached supervisor or this application's Run locally); the
// supervisor stops every rank (TERM, then KILL) and records the run cancelled; the next polls
// show it. A run supervised on another host, or whose supervisor is gone (then marked lost), is
// refused with a one-line reason.
#pragma once

#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <string>
#include <vector>

#include "stagecraft/store/run_store.h"

class CalibrateDialog;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTabWidget;
class QTableView;
class QTimer;
class RankStateGrid;
class ExpertLoadMap;
class RunCharts;
class RunLogView;
class RunTimelineView;
class RunsFilterModel;
class RunsModel;
namespace stagecraft::store {
class RunStore;
}

class RunsView : public QWidget {
  Q_OBJECT

 public:
  explicit RunsView(QWidget* parent = nullptr);
  ~RunsView() override;

  // The history file (RunStore::default_path() unless set); reads it at once.
  void setDatabasePath(const QString& path);
  QString databasePath() const;
  // Milliseconds between reads of the history; 0 stops polling.
  void setPollInterval(int ms);
  int pollInterval() const;

  RunsModel* model() const { return m_model; }
  RunsFilterModel* filterModel() const { return m_filter; }
  QTableView* table() const { return m_table; }
  RunCharts* charts() const { return m_charts; }
  RankStateGrid* rankGrid() const { return m_rankGrid; }
  ExpertLoadMap* expertLoad() const { return m_expertLoad; }
  RunLogView* logView() const { return m_logs; }
  RunTimelineView* timelineView() const { return m_timeline; }
  CalibrateDialog* calibrateDialog() const { return m_calibrate; }
  QTabWidget* tabs() const { return m_tabs; }

  // Selects run `id` in the table; false when no shown row has that id (filtered out or absent).
  bool selectRun(qint64 id);
  qint64 selectedRunId() const { return m_selected; }
  // Every selected run, ascending (the shown run is one of them).
  QList<qint64> selectedRunIds() const;
  // Opens the calibrate dialog on the selected runs; false when the fit failed (the dialog says why).
  bool calibrateSelectedRuns();
  // Overlays run `id`'s loss on the selected run's; 0 removes it. False for an unknown run.
  bool setComparisonRun(qint64 id);
  qint64 comparisonRunId() const;

  // "" for every state.
  void setStateFilter(const QString& state);
  void setNameFilter(const QString& text);

  // Cancels the selected run without asking; false with the reason in *error.
  bool cancelSelectedRun(QString* error = nullptr);
  // Asks run `id`'s supervisor to stop (see above). Returns "" when the request was sent, else
  // one line saying why not.
  static QString requestCancel(stagecraft::store::RunStore& store, qint64 id);

  // The last error shown (reading the history, cancelling), "" when none.
  QString lastError() const { return m_lastError; }

 public Q_SLOTS:
  // Reads the history now (what the timer does).
  void refresh();

 Q_SIGNALS:
  void runSelected(qint64 id);

 private:
  void buildUi();
  void onRefreshed(const QList<qint64>& changed);
  void showRun(qint64 id);
  void loadRun(bool full);
  void loadComparison();
  void rebuildCompareChoices();
  void updateHeader();
  void showError(const QString& message);
  void askCancel();

  RunsModel* m_model = nullptr;
  RunsFilterModel* m_filter = nullptr;
  QTimer* m_poll = nullptr;
  QComboBox* m_stateFilter = nullptr;
  QLineEdit* m_nameFilter = nullptr;
  QTableView* m_table = nullptr;
  QLabel* m_header = nullptr;
  QLabel* m_status = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_calibrateButton = nullptr;
  CalibrateDialog* m_calibrate = nullptr;
  RunTimelineView* m_timeline = nullptr;
  QComboBox* m_compare = nullptr;
  QTabWidget* m_tabs = nullptr;
  RunCharts* m_charts = nullptr;
  RankStateGrid* m_rankGrid = nullptr;
  ExpertLoadMap* m_expertLoad = nullptr;
  RunLogView* m_logs = nullptr;
  qint64 m_selected = 0;
  // The selected run as read so far: rows up to the last row id of each table, its plan.
  // (Events are folded into the rank grid as they are read; the view keeps none.)
  std::vector<stagecraft::store::MetricRow> m_metrics;
  int64_t m_lastMetricRow = 0, m_lastEventRow = 0, m_lastLogRow = 0;
  stagecraft::store::RunState m_gridState = stagecraft::store::RunState::kQueued;  // as the rank grid shows it
  bool m_fullLoadPending = false;  // the last full read of the selected run failed part-way
  QStringList m_kernels;           // the selected run's kernel paths, a line per set of ranks (launch/run_kernels.h)
  QList<QPair<qint64, QString>> m_compareChoices;  // the compare combo's runs, as last built
  bool m_shownNewest = false;  // the newest run was selected once the history had runs
  QString m_lastError;
};
