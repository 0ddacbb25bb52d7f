// ScalingView: how the document's model trains as the cluster grows — plan::scale (the best
// layout of the same model and global batch at 1, 2, 4, ... nodes, up to the cluster's nodes or
// a size the person types; optionally ranked with the MFU capped at the device's best published,
// an MFU above it marked "!" with the model's reason) computed on a worker thread, plotted against GPUs (tokens/s, MFU or
// days to train, with ideal linear scaling as a dashed reference) and listed in a table with
// `stagecraft-cli scale`'s columns. Export as PNG or SVG (the chart) and CSV (the table, as
// `scale --csv` writes it).
//
// Contract: compute() starts from the document's current config; a compute() while one runs
// supersedes it (its result is dropped). computed() or failed() follows each compute() that is not
// superseded. Destroying the view waits for a running worker.
#pragma once

#include <QWidget>

#include <memory>
#include <optional>

#include "stagecraft/plan/scale.h"

class PlanDocument;
class QChartView;
class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QThread;

class ScalingView : public QWidget {
  Q_OBJECT

 public:
  enum class Metric { kTokensPerS, kMfu, kDays };

  explicit ScalingView(PlanDocument* document, QWidget* parent = nullptr);
  ~ScalingView() override;

  // Scales the document's config up to `maxNodes` (0: its cluster's nodes) for `tokens` tokens
  // (0: the configured run's), the values of the fields.
  void compute();
  bool isComputing() const { return m_thread != nullptr; }

  QSpinBox* maxNodesField() const { return m_maxNodes; }
  QLineEdit* tokensField() const { return m_tokens; }
  // Rank each size with the MFU capped at the device's best published one (scale --plausible).
  QCheckBox* plausibleField() const { return m_plausible; }
  QTableWidget* table() const { return m_table; }
  QChartView* chartView() const { return m_chartView; }
  void setMetric(Metric metric);
  // The last result; nullopt before the first one.
  const std::optional<stagecraft::plan::ScaleResult>& result() const { return m_result; }
  QString statusText() const;

  // PNG or SVG by suffix; false with one line in *error.
  bool exportImage(const QString& path, QString* error);
  // `scale --csv`'s text; false with one line in *error.
  bool exportCsv(const QString& path, QString* error);

 Q_SIGNALS:
  void computed();
  void failed(const QString& message);

 private:
  struct Job;
  void showResult();
  void plot();
  void stopWorker();

  PlanDocument* m_document;
  QSpinBox* m_maxNodes = nullptr;
  QLineEdit* m_tokens = nullptr;
  QComboBox* m_metric = nullptr;
  QCheckBox* m_plausible = nullptr;
  QPushButton* m_compute = nullptr;
  QLabel* m_status = nullptr;
  QChartView* m_chartView = nullptr;
  QTableWidget* m_table = nullptr;
  QThread* m_thread = nullptr;
  std::shared_ptr<Job> m_job;
  std::optional<stagecraft::plan::ScaleResult> m_result;
};
