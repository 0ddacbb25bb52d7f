// RunCharts: a run's curves from its metric rows (store::MetricRow) — loss, throughput
// (tokens/s) and memory per rank — in three Qt Charts, and a second run's loss overlaid for
// comparison.
//
// What each curve is:
//   loss        one point per step: the loss of the lowest rank that reported one at that step
//               (with pipeline parallelism only the last stage computes it), as the store's
//               `last loss` column does;
//   throughput  one point per step: tokens/s of the lowest rank that reported it (every rank
//               reports the global batch's tokens over its own step time);
//   memory      one series per rank (MiB), up to kMaxMemoryRanks ranks; a larger run shows the
//               largest rank's value per step instead.
// What the run's plan predicts (setPrediction) is drawn dashed across the steps shown, named
// "predicted": the estimate's tokens/s on the throughput chart, and on the memory chart the
// estimate's peak of each pp rank (one line per pp rank, in the colour of its lowest rank; the
// largest of them beside the largest rank's curve), with one "predicted" entry in each legend.
// The widget draws values it is given; it reads no file.
#pragma once

#include <QList>
#include <QPointF>
#include <QWidget>

#include <vector>

#include "stagecraft/store/run_store.h"

namespace stagecraft::plan {
struct Plan;
}
class QChart;
class QLabel;
class QChartView;
class QLineSeries;
class QValueAxis;

class RunCharts : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kMaxMemoryRanks = 16;

  // What a plan predicts for its run; empty (tokensPerS 0, no memory) draws nothing.
  struct Prediction {
    double tokensPerS = 0;
    std::vector<double> memoryBytes;  // the estimate's peak of each pp rank
    std::vector<int> rankPpRank;      // the pp rank of every rank of the run
    bool empty() const { return tokensPerS <= 0 && memoryBytes.empty(); }
  };
  static Prediction predictionOf(const stagecraft::plan::Plan& plan);

  explicit RunCharts(QWidget* parent = nullptr);

  // Draws run `id`'s curves from its rows (ordered by step, then rank, as RunStore::metrics()).
  void setRun(qint64 id, const std::vector<stagecraft::store::MetricRow>& metrics);
  // Overlays run `id`'s loss on the loss chart; id 0 removes the overlay.
  void setComparison(qint64 id, const std::vector<stagecraft::store::MetricRow>& metrics);
  void clear();
  // Draws the prediction dashed (see above) until another run is set; `note`, when not empty, is
  // shown above the charts (why there is no prediction).
  void setPrediction(const Prediction& prediction, const QString& note = {});
  QString predictionNote() const;

  qint64 runId() const { return m_runId; }
  qint64 comparisonId() const { return m_compareId; }
  QLineSeries* lossSeries() const { return m_loss; }
  QLineSeries* comparisonSeries() const { return m_compare; }
  QLineSeries* throughputSeries() const { return m_throughput; }
  QList<QLineSeries*> memorySeries() const { return m_memory; }
  // nullptr / empty while there is no prediction.
  QLineSeries* predictedThroughputSeries() const { return m_predictedThroughput; }
  QList<QLineSeries*> predictedMemorySeries() const { return m_predictedMemory; }
  QChart* lossChart() const;

  // The curves' points, as described above.
  static QList<QPointF> lossPoints(const std::vector<stagecraft::store::MetricRow>& metrics);
  static QList<QPointF> throughputPoints(const std::vector<stagecraft::store::MetricRow>& metrics);

 private:
  void fitLossAxes();
  void setMemory(const std::vector<stagecraft::store::MetricRow>& metrics);
  void drawPrediction();
  void updateMemoryLegend();
  void placeThroughputLegend();

  Prediction m_prediction;
  QLabel* m_note = nullptr;
  QLineSeries* m_predictedThroughput = nullptr;
  QList<QLineSeries*> m_predictedMemory;
  qint64 m_runId = 0;
  qint64 m_compareId = 0;
  QChartView* m_lossView = nullptr;
  QChartView* m_throughputView = nullptr;
  QChartView* m_memoryView = nullptr;
  QLineSeries* m_loss = nullptr;
  QLineSeries* m_compare = nullptr;
  QLineSeries* m_throughput = nullptr;
  QList<QLineSeries*> m_memory;
  QValueAxis* m_lossX = nullptr;
  QValueAxis* m_lossY = nullptr;
  QValueAxis* m_throughputX = nullptr;
  QValueAxis* m_throughputY = nullptr;
  QValueAxis* m_memoryX = nullptr;
  QValueAxis* m_memoryY = nullptr;
};
