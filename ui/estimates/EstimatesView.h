// EstimatesView: what the plan costs, as the cost model predicts it — memory per pp rank as
// stacked bars (weights, grads, optimizer, activations, workspace) against the device's memory
// (bars over it in red), the step time split into compute, recompute, TP / PP / DP
// communication, bubble and optimizer, and the figures: TFLOP/s per GPU, MFU, tokens/s,
// parameters, bubble fraction, warnings. Painted directly (no Qt Charts): setPlan only copies
// numbers and formats a few labels, well under a millisecond.
//
// Compare: pin() keeps the plan shown now; while pinned, the pinned plan's memory bars, step time
// and figures stand beside the current plan's, and a line lists the differences (step time and
// its parts, tokens/s, TFLOP/s, MFU, bubble, peak memory). unpin() returns to one plan.
#pragma once

#include <QWidget>

#include <optional>

#include "stagecraft/plan/plan.h"

class QLabel;
class QPushButton;
class QScrollArea;
class MemoryChart;
class StepTimeChart;

class EstimatesView : public QWidget {
  Q_OBJECT

 public:
  explicit EstimatesView(QWidget* parent = nullptr);

  void setPlan(const stagecraft::plan::Plan& plan);

  // "Peak memory 35.2 GiB on pp rank 0 of 80 GiB (fits)" — the label's text.
  QString peakMemoryText() const;
  // The figures panel's text (throughput, MFU, parameters, bubble).
  QString figuresText() const;
  // The warnings label's text, one warning a line ("" when none).
  QString warningsText() const;
  MemoryChart* memoryChart() const { return m_memory; }
  StepTimeChart* stepTimeChart() const { return m_step; }

  // Keeps the plan shown now beside the ones that follow; false when there is none yet.
  bool pin();
  void unpin();
  bool isPinned() const { return m_pinned.has_value(); }
  const std::optional<stagecraft::plan::Plan>& pinnedPlan() const { return m_pinned; }
  // The pinned plan's figures (as figuresText()) and the differences line; "" when not pinned.
  QString pinnedFiguresText() const;
  QString comparisonText() const;
  MemoryChart* pinnedMemoryChart() const { return m_pinnedMemory; }
  StepTimeChart* pinnedStepTimeChart() const { return m_pinnedStep; }

 Q_SIGNALS:
  void planPinned(const stagecraft::plan::Plan& plan);
  void planUnpinned();

 private:
  void showComparison();
  MemoryChart* m_memory = nullptr;
  StepTimeChart* m_step = nullptr;
  QLabel* m_peak = nullptr;
  QLabel* m_figures = nullptr;
  QLabel* m_warnings = nullptr;
  QScrollArea* m_text = nullptr;  // the figures and warnings
  QPushButton* m_pin = nullptr;
  QWidget* m_pinnedPanel = nullptr;
  QLabel* m_pinnedTitle = nullptr;
  MemoryChart* m_pinnedMemory = nullptr;
  StepTimeChart* m_pinnedStep = nullptr;
  QLabel* m_pinnedFigures = nullptr;
  QLabel* m_compare = nullptr;
  std::optional<stagecraft::plan::Plan> m_current;  // the plan shown now
  std::optional<stagecraft::plan::Plan> m_pinned;
};
