// The estimates view's two painted charts. MemoryChart: one stacked bar per pp rank (weights,
// grads, optimizer, activations, workspace) against a dashed line at the device's memory; a bar
// over it is framed and labelled in red. StepTimeChart: one horizontal bar of the step time split
// into its parts, with a legend of seconds and shares. Both keep copied numbers only.
#pragma once

#include <QColor>
#include <QString>
#include <QWidget>

#include <array>
#include <vector>

#include "stagecraft/plan/estimate.h"

class MemoryChart : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  void setEstimate(const stagecraft::plan::Estimate& estimate);

  static constexpr int kParts = 5;  // weights, grads, optimizer, activations, workspace
  static QString partName(int part);
  static QColor partColor(int part);

  // Per pp rank, bytes of each part.
  const std::vector<std::array<double, kParts>>& bars() const { return m_bars; }
  double deviceBytes() const { return m_device; }
  // Whether the bar of pp rank r is drawn as over the device's memory.
  bool isOver(int ppRank) const;

  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<std::array<double, kParts>> m_bars;
  double m_device = 0;
};

class StepTimeChart : public QWidget {
  Q_OBJECT

 public:
  explicit StepTimeChart(QWidget* parent = nullptr);
  void setEstimate(const stagecraft::plan::Estimate& estimate);

  static constexpr int kParts = 7;  // compute, recompute, TP, PP, DP comm, bubble, optimizer
  static QString partName(int part);
  static QColor partColor(int part);
  const std::array<double, kParts>& seconds() const { return m_seconds; }
  double total() const;

  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::array<double, kParts> m_seconds{};
};
