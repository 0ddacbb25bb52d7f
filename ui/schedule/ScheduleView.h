// ScheduleView: the pipeline timeline of the plan's schedule (gpipe, 1f1b, interleaved) for
// p = pp and m = micro-batches: one row per pp rank, forward blocks one unit wide and backward
// blocks two (a chunk's blocks 1/v of that when interleaved), the micro-batch (and chunk) in each
// block, idle time hatched, and the simulated bubble fraction printed beside the cost model's.
// Block times come from simulateSchedule() (ScheduleTimeline.h). Huge m is capped: the view
// draws the first micro-batches only and says so.
#pragma once

#include <QString>
#include <QWidget>

#include "schedule/ScheduleTimeline.h"
#include "stagecraft/plan/plan.h"

class QGraphicsScene;
class QGraphicsView;
class QLabel;
class ScheduleTimelineItem;

class ScheduleView : public QWidget {
  Q_OBJECT

 public:
  explicit ScheduleView(QWidget* parent = nullptr);

  // Schedule, pp, virtual stages and m from the plan.
  void setPlan(const stagecraft::plan::Plan& plan);
  // The timeline to .png or .svg by the path's suffix; false with *error set on failure.
  bool exportImage(const QString& path, QString* error);

  const ScheduleTimeline& timeline() const { return m_timeline; }
  QString headerText() const;
  QGraphicsScene* scene() const { return m_scene; }

  // Most micro-batches drawn; plans with more draw this many (a multiple of p when interleaved).
  static int drawnMicroBatches(int pp, int virtualStages, int microBatches, bool interleaved);

 private:
  QLabel* m_header = nullptr;
  QGraphicsScene* m_scene = nullptr;
  QGraphicsView* m_view = nullptr;
  ScheduleTimelineItem* m_item = nullptr;
  ScheduleTimeline m_timeline;
};
