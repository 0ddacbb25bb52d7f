// RunTimelineView: the Runs view's Timeline tab — where one recorded step's time went, beside
// what the plan predicted.
//
// Measured: launch::measured_timeline() of the chosen step (one of the run's timeline_steps; the
// last by default, a steady one) and replica (dp rank), drawn by the Schedule view's
// ScheduleTimelineItem from each forward's and backward's measured start and end: the hatched
// gaps between them are the bubble and the waits, and their share of the ranks' time is printed.
// Predicted: simulateSchedule() of the run's schedule with the cost model's forward and backward
// of one micro-batch on the bottleneck stage. The estimate gives a micro-batch's forward +
// backward as one figure (StepBreakdown::compute_s / m); it is split 1 : 2 as their FLOPs are,
// the recompute added to the backward and the TP collectives halved between them. Pipeline
// transfers are not drawn (the estimate's PP part). Both are in milliseconds on one scale,
// predicted above measured, so their lengths compare directly.
// Beside them, plan::compare() of the estimate with launch::measure_run()'s medians: part,
// predicted, measured, error.
//
// Reads the history when shown (measure_run reads every timing event of the run) and, for a run
// still writing, again at most every reloadInterval() ms (kReloadMs) while shown. A run without timing events (an
// older Stagecraft's, another program's, or one not yet past its first step) shows the engine's
// reason and still draws the prediction when its config plans.
#pragma once

#include <QElapsedTimer>
#include <QString>
#include <QWidget>

#include <algorithm>
#include <optional>
#include <vector>

#include "schedule/ScheduleTimeline.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/plan/calibrate.h"
#include "stagecraft/plan/plan.h"

class QComboBox;
class QGraphicsScene;
class QGraphicsSimpleTextItem;
class QGraphicsView;
class QLabel;
class QSpinBox;
class QTableWidget;
class QTimer;
class ScheduleTimelineItem;
namespace stagecraft::store {
class RunStore;
}

class RunTimelineView : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kReloadMs = 5000;

  explicit RunTimelineView(QWidget* parent = nullptr);
  ~RunTimelineView() override;

  // Shows run `id` of `store` (which must outlive the view or be replaced first); read now when
  // the view is visible, else when it is next shown. A null store or id 0 shows nothing.
  void setRun(stagecraft::store::RunStore* store, qint64 id);
  void clear();
  // New rows of the shown run were written: read it again (at most every reloadInterval() ms)
  // while shown.
  void runUpdated();
  void setReloadInterval(int ms) { m_reloadMs = std::max(0, ms); }
  int reloadInterval() const { return m_reloadMs; }
  // Reads the run now.
  void reload();

  // Draws step `step` (one of stepChoices()); false when the run has no timeline of it.
  bool setStep(qint64 step);
  // Draws the pipeline of DP replica `dpRank`; false when out of range.
  bool setReplica(int dpRank);

  qint64 runId() const { return m_runId; }
  qint64 step() const { return m_step; }
  int replica() const { return m_replica; }
  QList<qint64> stepChoices() const;
  QComboBox* stepChooser() const { return m_steps; }
  // The timelines drawn, in milliseconds; empty when there is none.
  const ScheduleTimeline& measuredTimeline() const;
  const ScheduleTimeline& predictedTimeline() const;
  // The measured step's idle share as measured_timeline() computed it; NaN without one.
  double measuredIdleFraction() const { return m_measuredIdle; }
  // Why something is missing (no timing events, no plan), "" when all is drawn.
  QString messageText() const;
  QString measuredTitle() const;
  QString predictedTitle() const;
  const std::vector<stagecraft::plan::ComparisonRow>& comparison() const { return m_rows; }
  QTableWidget* comparisonTable() const { return m_table; }
  QGraphicsScene* scene() const { return m_scene; }

  // A measured timeline as the Schedule view's blocks, in milliseconds; rows are pp ranks.
  static ScheduleTimeline toScheduleTimeline(const stagecraft::launch::MeasuredTimeline& measured, int pp, int virtualStages);
  // The predicted pipeline of `plan` (see above), in milliseconds.
  static ScheduleTimeline predictedSchedule(const stagecraft::plan::Plan& plan);
  // The estimate's forward and backward of one micro-batch on the bottleneck stage, seconds.
  static std::pair<double, double> predictedMicroBatchTimes(const stagecraft::plan::Plan& plan);

 protected:
  void showEvent(QShowEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void drawMeasured();
  void drawPredicted();
  void fillComparison();
  void layoutScene();
  void showMessages();

  stagecraft::store::RunStore* m_store = nullptr;
  qint64 m_runId = 0;
  qint64 m_step = 0;
  int m_replica = 0;
  bool m_stale = false;
  int m_reloadMs = kReloadMs;
  QElapsedTimer m_lastLoad;
  QTimer* m_reloadLater = nullptr;
  std::optional<stagecraft::launch::RunMeasurement> m_measurement;
  std::optional<stagecraft::plan::Plan> m_plan;
  std::vector<stagecraft::plan::ComparisonRow> m_rows;
  double m_measuredIdle = 0;
  QString m_runMessage;   // from reading the run (measure_run, the plan)
  QString m_stepMessage;  // from reading the chosen step

  QComboBox* m_steps = nullptr;
  QLabel* m_replicaLabel = nullptr;
  QSpinBox* m_replicaBox = nullptr;
  QLabel* m_message = nullptr;
  QGraphicsScene* m_scene = nullptr;
  QGraphicsView* m_view = nullptr;
  QGraphicsSimpleTextItem* m_predictedText = nullptr;
  QGraphicsSimpleTextItem* m_measuredText = nullptr;
  ScheduleTimelineItem* m_predicted = nullptr;
  ScheduleTimelineItem* m_measured = nullptr;
  QLabel* m_tableCaption = nullptr;
  QTableWidget* m_table = nullptr;
};
