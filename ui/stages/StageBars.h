// StageBars: two small bar charts under the stage strip — each stage's (chunk's) relative cost,
// forward + backward work over the average stage's (1.0 = balanced), and each pp rank's
// estimated memory against the device's (bars past it in red). Painted from copied numbers.
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
  const std::vector<double>& memoryBytes() const { return m_memory; }
  double deviceBytes() const { return m_device; }

  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<double> m_cost;    // per chunk
  std::vector<double> m_memory;  // per pp rank, total bytes
  double m_device = 0;
  int m_pp = 1;
};
