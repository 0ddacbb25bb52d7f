// ExpertLoadMap: how a mixture-of-experts run spread its tokens over the experts — a heat map
// with one row per MoE layer and one column per expert, each cell coloured by that expert's
// share of the layer's routed tokens summed over the run (white none, darkest the largest share
// on the map), its counts in the tooltip, and the tokens dropped over capacity below.
//
// Fed like the rank grid, from the run's events as the history keeps them (store::EventRow, in
// order; applyEvents() folds in those written since the last call). A `step` event of a rank
// that routed tokens carries
//   "moe_load": [[c_0, ..., c_{E-1}], ...]   tokens each expert received this step, a row per
//                                             MoE layer of the rank's stage
//   "moe_layers": [l, ...]                    the model layer of each row (optional; without it
//                                             row k is MoE layer k of the model)
//   "moe_dropped": n                          tokens over capacity this step (optional)
// Every rank's counts are summed: the ranks of a stage route different tokens (data, context,
// sequence parallel) to the same experts. (Stagecraft's workers sum them themselves and report
// the whole model's from rank 0 alone.) A row whose width differs from the layer's first one,
// or a value that is not a count, is skipped (written by another version). It is not a view of
// the plan: a dense run, or a worker that does not count, leaves it empty with a line saying so.
#pragma once

#include <QColor>
#include <QList>
#include <QRect>
#include <QString>
#include <QWidget>

#include <cstdint>
#include <map>
#include <vector>

#include "stagecraft/store/run_store.h"

class ExpertLoadMap : public QWidget {
  Q_OBJECT

 public:
  explicit ExpertLoadMap(QWidget* parent = nullptr);

  // Events of the run written since the last call, in order; only `step` events with moe_load count.
  void applyEvents(const std::vector<stagecraft::store::EventRow>& rows);
  void clear();

  bool isEmpty() const { return m_load.empty(); }
  // The model layers with expert load, in increasing order: the map's rows, top to bottom.
  QList<int> layers() const;
  int experts() const { return m_experts; }  // columns: the widest layer's expert count
  // Tokens routed to `expert` of model layer `layer` over the run (0 when none or unknown).
  int64_t tokens(int layer, int expert) const;
  // Those tokens over all of the layer's (0 for a layer with none).
  double share(int layer, int expert) const;
  int64_t dropped() const { return m_dropped; }
  int stepEvents() const { return m_stepEvents; }  // step events that carried moe_load

  // Geometry and colour as painted (widget coordinates), for hit-testing and tests.
  QRect cellRect(int row, int expert) const;
  // The (row, expert) under `pos`, or (-1, -1).
  std::pair<int, int> cellAt(const QPoint& pos) const;
  QColor cellColor(int row, int expert) const;
  QString cellToolTip(int row, int expert) const;
  // The line under the map: what it shows, the largest share, the dropped tokens; or why it is empty.
  QString caption() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  double maxShare() const;

  std::map<int, std::vector<int64_t>> m_load;  // model layer -> tokens per expert
  int m_experts = 0;
  int64_t m_dropped = 0;
  int m_stepEvents = 0;
};
