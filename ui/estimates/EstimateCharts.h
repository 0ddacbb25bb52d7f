// The estimates view's two painted charts (the window's only memory chart: the Stages dock
// shows stage costs, not memory). MemoryChart: one stacked bar per pp rank (weights, grads,
// optimizer, activations, workspace) on a value axis scaled to the bars, in MiB or GiB by
// magnitude. The device's memory is a dashed line: on the axis when the tallest bar reaches
// kNearDevice of it (the axis then extends to hold it), otherwise above a break in the axis, so
// a 3.7 GiB stack on an 80 GiB GPU fills the plot instead of lying flat; its label has a band of
// its own above the plot. A bar over the device is framed and labelled in red. The legend wraps
// into as many rows as the width needs, and a label that would not fit (a bar's value, a rank
// number, the device's "(off scale)") is shortened or left out, never cut or drawn over another.
// StepTimeChart: one horizontal bar of the step time split into its parts, with a legend of
// seconds and shares in as many columns as the width holds; its height follows its width
// (heightForWidth) so no legend row is cut. Both keep copied numbers only, and both record the
// text they last painted (paintedLabels) so that tests can check that every label is whole and
// none overlaps another.
#pragma once

#include <QColor>
#include <QRectF>
#include <QString>
#include <QWidget>

#include <array>
#include <vector>

#include "stagecraft/plan/estimate.h"

// A text a chart painted: what it says, the box it was given and the rectangle its glyphs take
// (wider than the box, or outside it, when the text would be cut).
struct PaintedLabel {
  QString text;
  QRectF box;
  QRectF rect;
};

class MemoryChart : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  void setEstimate(const stagecraft::plan::Estimate& estimate);

  // Below this the plot (the bars' area) is too short to read; the chart asks for at least it.
  static constexpr int kMinPlotHeight = 120;
  // The bars' area at the chart's current size: between the value axis and the right margin,
  // from the axis top to the rank labels.
  QRect plotRect() const;
  // The texts of the last paint.
  const std::vector<PaintedLabel>& paintedLabels() const { return m_labels; }

  static constexpr int kParts = 5;  // weights, grads, optimizer, activations, workspace
  static QString partName(int part);
  static QColor partColor(int part);

  // Per pp rank, bytes of each part.
  const std::vector<std::array<double, kParts>>& bars() const { return m_bars; }
  double deviceBytes() const { return m_device; }
  // Whether the bar of pp rank r is drawn as over the device's memory.
  bool isOver(int ppRank) const;

  // The device line sits on the axis when the tallest bar is at least this share of it.
  static constexpr double kNearDevice = 0.6;
  // The value axis: 0 .. axisMaxBytes() in ticks of axisTickBytes() (1-2-5 steps); the tallest
  // bar fills at least half of it.
  double axisMaxBytes() const { return m_axisMax; }
  double axisTickBytes() const { return m_axisTick; }
  // True: the device line is drawn at its value on the axis; false: above an axis break.
  bool deviceOnAxis() const { return m_deviceOnAxis; }
  // "MiB" or "GiB": the axis unit, chosen by axisMaxBytes().
  QString axisUnit() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void fitAxis();
  // Legend rows at width w, and the height above the plot (title, legend, device band, value row).
  int legendRows(int w) const;
  int plotTop(int w) const;

  std::vector<std::array<double, kParts>> m_bars;
  double m_device = 0;
  double m_axisMax = 0;
  double m_axisTick = 0;
  bool m_deviceOnAxis = false;
  std::vector<PaintedLabel> m_labels;
};

class StepTimeChart : public QWidget {
  Q_OBJECT

 public:
  explicit StepTimeChart(QWidget* parent = nullptr);
  void setEstimate(const stagecraft::plan::Estimate& estimate);

  static constexpr int kParts = 10;  // compute, recompute, TP, CP, EP all-to-all, PP, DP comm, bubble, optimizer, overhead
  static QString partName(int part);
  static QColor partColor(int part);
  const std::array<double, kParts>& seconds() const { return m_seconds; }
  double total() const;
  // Parts in the legend, in chart order: CP only with context parallelism, the EP all-to-all only
  // with expert parallelism, the overhead only when the device's profile has one.
  std::vector<int> legendIndices() const;
  int legendParts() const { return static_cast<int>(legendIndices().size()); }

  // Legend columns that the width w holds, and the height that shows every legend row.
  int legendColumns(int w) const;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int w) const override;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;
  // The texts of the last paint.
  const std::vector<PaintedLabel>& paintedLabels() const { return m_labels; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  QString legendText(int part) const;
  int legendColumnWidth() const;

  std::array<double, kParts> m_seconds{};
  std::vector<PaintedLabel> m_labels;
};
