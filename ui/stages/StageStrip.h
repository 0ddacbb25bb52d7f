// StageStrip: the model's layers as a row of cells coloured by the pp rank that runs them, with
// the embedding cell before the first layer and the head + loss cell after the last, and a
// draggable boundary between every pair of neighbouring stages (chunks, when interleaved).
//
// Dragging boundary b moves layers between chunk b and chunk b + 1 only, and never past the
// neighbouring boundaries: every chunk keeps at least one layer. Releasing the drag emits the new
// stage id of every layer when it changed. The widget holds the plan's split and, during a drag,
// its own edited copy; setPlan() replaces both.
#pragma once

#include <QWidget>

#include <vector>

#include "stagecraft/plan/plan.h"

class StageStrip : public QWidget {
  Q_OBJECT

 public:
  explicit StageStrip(QWidget* parent = nullptr);

  void setPlan(const stagecraft::plan::Plan& plan);

  // The split drawn now (the plan's, or the drag's preview): one chunk id per layer.
  std::vector<int> stageIds() const;
  const std::vector<int>& counts() const { return m_counts; }
  int boundaryCount() const { return std::max(0, static_cast<int>(m_counts.size()) - 1); }
  // Widget x of boundary b (between chunk b and b + 1) and of the left edge of layer i.
  double boundaryX(int b) const;
  double layerX(int layer) const;
  double layerWidth() const;
  // Vertical middle of the layer cells, for pointing at them.
  int stripCenterY() const;
  bool dragging() const { return m_drag >= 0; }

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 Q_SIGNALS:
  void partitionEdited(const std::vector<int>& stageIds);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;

 private:
  int boundaryNear(double x) const;
  int prefix(int chunk) const;  // layers in chunks [0, chunk)
  int ppOfChunk(int chunk) const;

  int m_layers = 0;
  int m_pp = 1;
  std::vector<int> m_counts;       // layers per chunk, drawn
  std::vector<int> m_planCounts;   // layers per chunk in the plan
  int m_drag = -1;                 // boundary being dragged
};
