// ScheduleTimelineItem: paints a ScheduleTimeline — one row per pp rank, each row's span hatched
// grey (idle) under its forward (light) and backward (dark) blocks, micro-batch numbers (and the
// chunk when interleaved) in blocks wide enough, a time axis in forward-pass units. Culls to the
// exposed rectangle, so thousands of blocks pan smoothly.
#pragma once

#include <QGraphicsItem>

#include "schedule/ScheduleTimeline.h"

class ScheduleTimelineItem : public QGraphicsItem {
 public:
  enum { Type = UserType + 10 };

  ScheduleTimelineItem();
  int type() const override { return Type; }
  void setTimeline(const ScheduleTimeline& timeline);

  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

  // Scene rectangle of one block (item coordinates).
  QRectF blockRect(const ScheduleBlock& block) const;
  // Fill of a block: forward light, backward dark, shaded by the block's local chunk.
  static QColor blockColor(const ScheduleBlock& block, int pp);

  static constexpr double kUnit = 32.0;       // width of one full-stage forward pass
  static constexpr double kRowHeight = 30.0;
  static constexpr double kRowGap = 6.0;
  static constexpr double kLabelWidth = 64.0;
  static constexpr double kAxisHeight = 22.0;

 private:
  ScheduleTimeline m_timeline;
  QRectF m_bounds;
};
