// StageEditor: the plan's layers as a strip coloured by stage, with per-stage cost bars and the
// Balance / Uniform buttons. Dragging a boundary in the strip moves layers between neighbouring
// stages (chunks, when interleaved); releasing emits the new stage id of every
// layer, which the document turns into an explicit partition.
#pragma once

#include <QWidget>

#include <vector>

#include "stagecraft/plan/plan.h"

class QLabel;
class QPushButton;
class StageBars;
class StageStrip;

class StageEditor : public QWidget {
  Q_OBJECT

 public:
  explicit StageEditor(QWidget* parent = nullptr);

  void setPlan(const stagecraft::plan::Plan& plan);

  StageStrip* strip() const { return m_strip; }
  StageBars* bars() const { return m_bars; }
  QPushButton* balanceButton() const { return m_balance; }
  QPushButton* uniformButton() const { return m_uniform; }

 Q_SIGNALS:
  // One chunk id per layer, every chunk non-empty, after a boundary drag.
  void partitionEdited(const std::vector<int>& stageIds);
  void balanceRequested();
  void uniformRequested();

 private:
  StageStrip* m_strip = nullptr;
  StageBars* m_bars = nullptr;
  QLabel* m_summary = nullptr;
  QPushButton* m_balance = nullptr;
  QPushButton* m_uniform = nullptr;
};
