// LayoutsChart: every layout that passes the constraints as a point — x the peak memory per GPU
// (GiB), y the predicted tokens/s or step time (seconds) — coloured by one axis of the layout (pp, tp, schedule or
// recompute), the device's memory as a vertical line, and the Pareto front (no other layout
// both needs less memory and runs faster) as a staircase. Hover names the layout in a tooltip;
// a click or double-click reports the table row of the point.
//
// It draws LayoutsModel's rows and holds nothing else: the model's filtered() schedules a rebuild
// in the next turn of the event loop (several changes in one turn rebuild once, and the table
// and the chart update in separate turns, so neither holds the loop for both); rebuilt() follows.
// Each colour group is one QLineSeries with its points shown and its line not drawn: Qt Charts
// paints those points in one item, where a QScatterSeries makes a graphics item per point (about
// 30 us each, so thousands of layouts would hold the event loop for hundreds of milliseconds).
#pragma once

#include <QChartView>
#include <QList>

#include <vector>

#include "stagecraft/plan/search.h"

class LayoutsModel;
class QLineSeries;
class QScatterSeries;
class QValueAxis;

class LayoutsChart : public QChartView {
  Q_OBJECT

 public:
  enum class ColourBy { kPp, kTp, kSchedule, kRecompute };
  enum class YAxis { kTokensPerS, kStepTime };

  explicit LayoutsChart(LayoutsModel* model, QWidget* parent = nullptr);

  void setColourBy(ColourBy by);
  ColourBy colourBy() const { return m_colourBy; }
  void setYAxis(YAxis y);
  YAxis yAxis() const { return m_yAxis; }
  // Marks these model rows as selected (drawn on top, outlined).
  void setSelectedRows(const QList<int>& rows);

  // Points drawn for layouts (all colour series together): one per model row.
  int pointCount() const;
  // The colour series' names ("pp 8", "interleaved", ...), in legend order.
  QStringList seriesNames() const;
  // Model rows on the Pareto front, by increasing memory.
  QList<int> paretoRows() const { return m_pareto; }
  // Where row `row`'s point sits, in the chart's value coordinates (GiB, tokens/s or seconds).
  QPointF pointOfRow(int row) const;
  // The x of the device-memory line, GiB (0 before any layouts).
  double deviceMemoryGiB() const { return m_deviceGiB; }

  // Draws the model's rows now.
  void rebuild();
  // Rebuilds in the next turn of the event loop.
  void scheduleRebuild();
  bool isRebuildPending() const { return m_pending; }

 Q_SIGNALS:
  void rebuilt();
  void rowClicked(int row);
  void rowDoubleClicked(int row);

 protected:
  void mousePressEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  // The model row of the point nearest to `viewPos` (viewport pixels) within a few pixels, over
  // every colour group; -1 when none is that close. The series' own mouse signals are not used:
  // a line series reports the whole (undrawn) line, so the topmost one would hide the others.
  int rowAt(const QPoint& viewPos) const;
  QPointF pointOf(const stagecraft::plan::Candidate& c) const;

  LayoutsModel* m_model;
  ColourBy m_colourBy = ColourBy::kPp;
  YAxis m_yAxis = YAxis::kTokensPerS;
  QValueAxis* m_x = nullptr;
  QValueAxis* m_y = nullptr;
  QList<QLineSeries*> m_series;
  std::vector<std::vector<int>> m_seriesRows;  // model row of each point of each series
  QScatterSeries* m_selected = nullptr;
  QLineSeries* m_device = nullptr;
  QLineSeries* m_front = nullptr;
  QList<int> m_pareto;
  QList<int> m_selectedRows;
  QPoint m_pressedAt;
  bool m_pressed = false;
  bool m_pending = false;
  double m_deviceGiB = 0;
};
