// ScheduleTimelineItem: paints a ScheduleTimeline — one row per pp rank, each row's span hatched
// grey (idle) under its forward (light) and backward (dark) blocks, micro-batch numbers (and the
// chunk when interleaved) in blocks wide enough, a time axis. Culls to the exposed rectangle, so
// thousands of blocks pan smoothly.
//
// Time is in the timeline's own unit: the Schedule view's forward passes (kUnit scene units
// each, the default scale), or milliseconds for the Runs view's measured and predicted timelines,
// which set one scale and one span on both items so that they share an axis.
#pragma once

#include <QGraphicsItem>

#include "schedule/ScheduleTimeline.h"

class ScheduleTimelineItem : public QGraphicsItem {
 public:
  enum { Type = UserType + 10 };

  ScheduleTimelineItem();
  int type() const override { return Type; }
  void setTimeline(const ScheduleTimeline& timeline);
  const ScheduleTimeline& timeline() const { return m_timeline; }
  // Scene units per unit of time (default kUnit); > 0.
  void setTimeScale(double sceneUnitsPerTime);
  double timeScale() const { return m_scale; }
  // The time the rows and the axis reach at least (default 0: the makespan), so that timelines
  // drawn one above the other on one scale end together.
  void setSpan(double span);
  double span() const;
  // Written after the axis's last number ("ms"); empty (the default) writes none.
  void setAxisUnit(const QString& unit);

  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

  // Scene rectangle of one block (item coordinates).
  QRectF blockRect(const ScheduleBlock& block) const;
  // Fill of a block: forward light, backward dark, shaded by the block's local chunk.
  static QColor blockColor(const ScheduleBlock& block, int pp);

  static constexpr double kUnit = 32.0;       // width of one full-stage forward pass (default scale)
  static constexpr double kRowHeight = 30.0;
  static constexpr double kRowGap = 6.0;
  static constexpr double kLabelWidth = 64.0;
  static constexpr double kAxisHeight = 22.0;

 private:
  void updateBounds();

  ScheduleTimeline m_timeline;
  QRectF m_bounds;
  double m_scale = kUnit;
  double m_span = 0;
  QString m_unit;
};
