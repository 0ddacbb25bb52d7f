// EstimatesView: what the plan costs, as the cost model predicts it — memory per pp rank as
// stacked bars (weights, grads, optimizer, activations, workspace) against the device's memory
// (bars over it in red), the step time split into compute, recompute, TP / PP / DP
// communication, bubble and optimizer, and the figures: TFLOP/s per GPU, MFU, tokens/s,
// parameters, bubble fraction, warnings. Painted directly (no Qt Charts): setPlan only copies
// numbers and formats a few labels, well under a millisecond.
#pragma once

#include <QWidget>

#include "stagecraft/plan/plan.h"

class QLabel;
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

 private:
  MemoryChart* m_memory = nullptr;
  StepTimeChart* m_step = nullptr;
  QLabel* m_peak = nullptr;
  QLabel* m_figures = nullptr;
  QLabel* m_warnings = nullptr;
};
