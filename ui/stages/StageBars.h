// StageBars: a small bar chart under the stage strip — each stage's (chunk's) relative cost,
// forward + backward work over the average stage's (1.0 = balanced, a dashed line). Memory per pp
// rank is the Estimates dock's chart (estimates/EstimateCharts.h), shown once in the window.
// Painted from copied numbers.
#pragma once

#include <QWidget>

#include <vector>

#include "stagecraft/plan/plan.h"

class StageBars : public QWidget {
  Q_OBJECT

 public:
  explicit StageBars(QWidget* parent = nullptr);

  void setPlan(const stagecraft::plan::Plan& plan);

  const std::vector<double>& relativeCosts() const { return m_cost; }

  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<double> m_cost;  // per chunk
  int m_pp = 1;
};
