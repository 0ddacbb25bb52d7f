// RankStateGrid: every rank of a run as a tile, laid out as the topology view lays out GPUs —
// one panel per node (named after its host), the node's ranks left to right — each tile filled
// with the colour of that rank's state, with its pipeline stage's colour (ui/common/StageColors)
// as a stripe on top and its last step written on it.
//
// A rank's state comes from the events it wrote (store::EventRow, in order): none yet ->
// waiting; `start` -> started; `step`, `checkpoint`, `eval` -> training (at its last step);
// `done` -> done; `error` -> failed (its message in the tooltip). Once the run itself ended,
// a rank that neither finished nor failed is shown as stopped (cancelled, killed with the run,
// or lost with its supervisor).
//
// Fed incrementally, as the history only ever appends: setRun() reads the layout (the plan's
// JSON, parsed once) and starts every rank waiting; applyEvents() folds in events written since;
// setRunState() follows the run's own state. Folding events in batches gives the same states as
// folding them all at once.
#pragma once

#include <QColor>
#include <QString>
#include <QVector>
#include <QWidget>

#include <vector>

#include "stagecraft/store/run_store.h"

class RankStateGrid : public QWidget {
  Q_OBJECT

 public:
  enum class RankState { Waiting, Started, Training, Done, Failed, Stopped };
  struct RankInfo {
    RankState state = RankState::Waiting;
    qint64 step = 0;   // last step it reported; 0 before the first
    int stage = -1;    // pp rank from the run's plan; -1 when unknown
    QString detail;    // an error's message
  };

  explicit RankStateGrid(QWidget* parent = nullptr);

  // A new run: layout and stages from run.plan_json and run.hosts, every rank waiting, the run's
  // state from run.state.
  void setRun(const stagecraft::store::RunRecord& run);
  // Events of this run written since the last call, in order.
  void applyEvents(const std::vector<stagecraft::store::EventRow>& rows);
  // The run's own state changed (an ended run shows its unfinished ranks stopped).
  void setRunState(stagecraft::store::RunState state);
  void clear();

  int rankCount() const { return m_ranks.size(); }
  int nodeCount() const { return m_nodes; }
  int ranksPerNode() const { return m_perNode; }
  // Rank r as shown (an unfinished rank of an ended run is Stopped).
  RankInfo rank(int r) const;
  // The rank whose tile is under `pos` (widget coordinates), or -1.
  int rankAt(const QPoint& pos) const;

  static QColor stateColor(RankState state);
  static QString stateName(RankState state);

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  QRect tileRect(int rank) const;
  QRect panelRect(int node) const;
  int columnsPerPanel() const;
  int panelHeight() const;

  QVector<RankInfo> m_ranks;  // as the events say; rank() adds what the run's end means
  bool m_runEnded = false;
  QStringList m_hosts;  // one per node
  int m_nodes = 0;
  int m_perNode = 0;
};
