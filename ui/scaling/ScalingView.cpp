// How it scales: plan::scale on a worker thread, a chart against GPUs, a table, exports.
// See ScalingView.h.
#include "scaling/ScalingView.h"

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLegend>
#include <QLineEdit>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPushButton>
#include <QSaveFile>
#include <QScatterSeries>
#include <QSpinBox>
#include <QTableWidget>
#include <QThread>
#include <QValueAxis>
#include <QVBoxLayout>

#include <cmath>

#include "common/ImageExport.h"
#include "common/Text.h"
#include "document/PlanDocument.h"

namespace plan = stagecraft::plan;

namespace {

constexpr int kMaxNodes = 1 << 20;
constexpr double kAxisMargin = 1.1;  // room above the largest value
constexpr QSizeF kExportSize(800, 500);  // a chart exported from a hidden view, scene units

enum Column { kNodes, kGpus, kLayout, kTokens, kMfu, kDays, kIdeal, kEfficiency, kColumnCount };

}  // namespace

// One computation, shared between the worker and the GUI thread; `result` is written before the
// thread finishes and read after.
struct ScalingView::Job {
  std::optional<stagecraft::Result<plan::ScaleResult>> result;
};

ScalingView::ScalingView(PlanDocument* document, QWidget* parent) : QWidget(parent), m_document(document) {
  auto* layout = new QVBoxLayout(this);
  auto* fields = new QHBoxLayout;
  m_maxNodes = new QSpinBox;
  m_maxNodes->setObjectName(QStringLiteral("maxNodes"));
  m_maxNodes->setRange(0, kMaxNodes);
  m_maxNodes->setSpecialValueText(tr("the cluster's"));
  m_maxNodes->setToolTip(tr("Largest cluster tried, in nodes (beyond the configured cluster too)"));
  m_tokens = new QLineEdit;
  m_tokens->setObjectName(QStringLiteral("tokens"));
  m_tokens->setPlaceholderText(tr("the run's tokens, or e.g. 300e9"));
  m_metric = new QComboBox;
  m_metric->setObjectName(QStringLiteral("metric"));
  m_metric->addItem(tr("tokens/s"), static_cast<int>(Metric::kTokensPerS));
  m_metric->addItem(tr("MFU"), static_cast<int>(Metric::kMfu));
  m_metric->addItem(tr("days to train"), static_cast<int>(Metric::kDays));
  m_plausible = new QCheckBox(tr("cap at published MFU"));
  m_plausible->setObjectName(QStringLiteral("plausible"));
  m_plausible->setToolTip(tr("Rank each size's layouts with their MFU capped at the best published for the device "
                             "(scale --plausible), so the model's optimism does not pick the winner"));
  m_compute = new QPushButton(tr("Scale"));
  m_compute->setObjectName(QStringLiteral("computeScaling"));
  auto* png = new QPushButton(tr("PNG/SVG..."));
  auto* csv = new QPushButton(tr("CSV..."));
  fields->addWidget(new QLabel(tr("up to nodes")));
  fields->addWidget(m_maxNodes);
  fields->addWidget(new QLabel(tr("tokens")));
  fields->addWidget(m_tokens, 1);
  fields->addWidget(new QLabel(tr("plot")));
  fields->addWidget(m_metric);
  fields->addWidget(m_plausible);
  fields->addWidget(m_compute);
  fields->addWidget(png);
  fields->addWidget(csv);
  layout->addLayout(fields);
  m_status = new QLabel;
  m_status->setObjectName(QStringLiteral("scalingStatus"));
  m_status->setWordWrap(true);
  layout->addWidget(m_status);

  auto* body = new QHBoxLayout;
  m_chartView = new QChartView(new QChart);
  m_chartView->setRenderHint(QPainter::Antialiasing);
  m_chartView->setMinimumSize(320, 200);
  m_table = new QTableWidget(0, kColumnCount);
  m_table->setHorizontalHeaderLabels({tr("nodes"), tr("GPUs"), tr("layout"), tr("tokens/s"), tr("MFU"), tr("days"), tr("ideal"), tr("eff.")});
  m_table->verticalHeader()->hide();
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setWordWrap(false);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  body->addWidget(m_chartView, 1);
  body->addWidget(m_table, 1);
  layout->addLayout(body, 1);

  connect(m_compute, &QPushButton::clicked, this, &ScalingView::compute);
  connect(m_metric, &QComboBox::currentIndexChanged, this, &ScalingView::plot);
  connect(png, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Export the scaling chart"), QString(), tr("PNG image (*.png);;SVG image (*.svg)"));
    QString error;
    if (!path.isEmpty() && !exportImage(path, &error)) m_status->setText(error);
  });
  connect(csv, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Export the scaling table"), QString(), tr("CSV (*.csv)"));
    QString error;
    if (!path.isEmpty() && !exportCsv(path, &error)) m_status->setText(error);
  });
  m_status->setText(tr("Scale finds the best layout of this model and global batch at 1, 2, 4, ... nodes."));
}

ScalingView::~ScalingView() { stopWorker(); }

void ScalingView::stopWorker() {
  if (!m_thread) return;
  m_thread->disconnect(this);
  m_thread->wait();  // scale() has no cancel; a superseded one runs to its end, unseen
  delete m_thread;
  m_thread = nullptr;
  m_job.reset();
}

void ScalingView::compute() {
  plan::ScaleOptions options;
  options.max_nodes = m_maxNodes->value();
  options.search.cap_at_published_mfu = m_plausible->isChecked();
  const QString tokens = m_tokens->text().trimmed();
  if (!tokens.isEmpty()) {
    bool ok = false;
    options.tokens = tokens.toDouble(&ok);
    if (!ok || !(options.tokens > 0)) {
      const QString message = tr("tokens %1: expected a positive number of tokens, e.g. 300e9").arg(tokens);
      m_status->setText(message);
      Q_EMIT failed(message);
      return;
    }
  }
  stopWorker();
  auto job = std::make_shared<Job>();
  m_job = job;
  const auto base = m_document->config();
  m_thread = QThread::create([job, base, options] { job->result = plan::scale(base, options); });
  connect(m_thread, &QThread::finished, this, [this, job] {
    if (m_job != job) return;
    m_thread->wait();
    m_thread->deleteLater();
    m_thread = nullptr;
    m_job.reset();
    auto& r = *job->result;
    if (!r.ok()) {
      m_status->setText(qs(r.status().message()));
      Q_EMIT failed(qs(r.status().message()));
      return;
    }
    m_result = std::move(r.value());
    showResult();
    Q_EMIT computed();
  });
  m_status->setText(tr("Scaling..."));
  m_thread->start();
}

QString ScalingView::statusText() const { return m_status->text(); }

void ScalingView::setMetric(Metric metric) { m_metric->setCurrentIndex(m_metric->findData(static_cast<int>(metric))); }

void ScalingView::showResult() {
  const auto& r = *m_result;
  m_table->setRowCount(static_cast<int>(r.points.size()));
  auto cell = [this](int row, int column, const QString& text) {
    auto* item = new QTableWidgetItem(text);
    if (column != kLayout) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    m_table->setItem(row, column, item);
  };
  for (int i = 0; i < static_cast<int>(r.points.size()); ++i) {
    const auto& p = r.points[static_cast<size_t>(i)];
    cell(i, kNodes, QString::number(p.nodes));
    cell(i, kGpus, QString::number(p.gpus));
    cell(i, kIdeal, QString::number(p.ideal_tokens_per_s, 'g', 4));
    if (!p.found) {
      for (int c : {kTokens, kMfu, kDays, kEfficiency}) cell(i, c, QStringLiteral("-"));
      cell(i, kLayout, tr("nothing fits"));
      m_table->item(i, kLayout)->setToolTip(qs(p.reason));
      continue;
    }
    const auto& e = p.best.estimate;
    cell(i, kLayout, qs(plan::layout_string(p.best.config)));
    cell(i, kTokens, QString::number(e.tokens_per_s, 'g', 4));
    // Predicted above the device's best published MFU: marked, the model's reason as the tooltip.
    cell(i, kMfu, percentText(e.mfu) + (e.plausible ? QString() : QStringLiteral(" !")));
    if (!e.plausible) {
      m_table->item(i, kMfu)->setToolTip(tr("Implausibly fast: %1").arg(qs(e.implausible_because)));
      m_table->item(i, kMfu)->setForeground(QColor(0xb3, 0x59, 0x00));
    }
    cell(i, kDays, QString::number(p.days, 'g', 3));
    cell(i, kEfficiency, QString::number(p.efficiency * 100.0, 'f', 0) + QLatin1Char('%'));
  }
  m_status->setText(tr("%1 sizes up to %2 GPUs, %3 tokens, in %4%5")
                        .arg(r.points.size())
                        .arg(r.points.back().gpus)
                        .arg(r.tokens, 0, 'g', 3)
                        .arg(qs(plan::format_seconds(r.seconds)))
                        .arg(r.capped ? tr("; ranked with MFU capped at the device's best published") : QString()));
  plot();
}

void ScalingView::plot() {
  QChart* chart = m_chartView->chart();
  chart->removeAllSeries();
  for (auto* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
  if (!m_result) return;
  const auto metric = static_cast<Metric>(m_metric->currentData().toInt());
  double firstMfu = 0;
  for (const auto& p : m_result->points) {
    if (p.found) {
      firstMfu = p.best.estimate.mfu;
      break;
    }
  }
  // The value of a point, and of ideal linear scaling at its size.
  auto value = [&](const plan::ScalePoint& p) {
    switch (metric) {
      case Metric::kTokensPerS: return p.best.estimate.tokens_per_s;
      case Metric::kMfu: return p.best.estimate.mfu * 100.0;
      case Metric::kDays: return p.days;
    }
    return 0.0;
  };
  auto ideal = [&](const plan::ScalePoint& p) {
    switch (metric) {
      case Metric::kTokensPerS: return p.ideal_tokens_per_s;
      case Metric::kMfu: return firstMfu * 100.0;
      case Metric::kDays: return p.ideal_tokens_per_s > 0 ? m_result->tokens / p.ideal_tokens_per_s / 86400.0 : 0.0;
    }
    return 0.0;
  };
  auto* predicted = new QLineSeries;
  predicted->setName(m_metric->currentText());
  predicted->setPointsVisible(true);
  auto* reference = new QLineSeries;
  reference->setName(tr("ideal linear scaling"));
  reference->setPen(QPen(QColor(0x555555), 1.5, Qt::DashLine));
  double lo = 0, hi = 0;
  bool first = true;
  for (const auto& p : m_result->points) {
    const double ref = ideal(p);
    if (ref > 0) {
      reference->append(p.gpus, ref);
      lo = first ? ref : std::min(lo, ref);
      hi = first ? ref : std::max(hi, ref);
      first = false;
    }
    if (!p.found) continue;
    const double v = value(p);
    predicted->append(p.gpus, v);
    lo = first ? v : std::min(lo, v);
    hi = first ? v : std::max(hi, v);
    first = false;
  }
  chart->addSeries(reference);
  chart->addSeries(predicted);
  auto* x = new QLogValueAxis;
  x->setBase(2);
  x->setLabelFormat(QStringLiteral("%g"));
  x->setTitleText(tr("GPUs"));
  x->setRange(m_result->points.front().gpus / 1.5, m_result->points.back().gpus * 1.5);
  QAbstractAxis* y = nullptr;
  if (metric == Metric::kMfu) {
    auto* v = new QValueAxis;
    v->setRange(0, std::max(hi, 1.0) * kAxisMargin);
    v->setTitleText(tr("MFU (%)"));
    y = v;
  } else {
    auto* v = new QLogValueAxis;
    v->setBase(10);
    v->setLabelFormat(QStringLiteral("%.3g"));
    v->setRange(std::max(lo, 1e-9) / 2, std::max(hi, 1e-9) * 2);
    v->setTitleText(metric == Metric::kDays ? tr("days to train") : tr("tokens/s"));
    y = v;
  }
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (auto* s : {reference, predicted}) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
  chart->legend()->setAlignment(Qt::AlignBottom);
}

bool ScalingView::exportImage(const QString& path, QString* error) {
  if (!m_result) {
    if (error) *error = tr("nothing to export yet: press Scale first");
    return false;
  }
  // A view never shown has not laid the chart out: give it the size of a figure.
  QChart* chart = m_chartView->chart();
  if (!m_chartView->isVisible() && chart->size().width() < kExportSize.width()) chart->resize(kExportSize);
  return exportSceneImage(m_chartView->scene(), path, error);
}

bool ScalingView::exportCsv(const QString& path, QString* error) {
  if (!m_result) {
    if (error) *error = tr("nothing to export yet: press Scale first");
    return false;
  }
  QSaveFile f(path);
  const std::string text = plan::scale_to_csv(*m_result);
  if (!f.open(QIODevice::WriteOnly) || f.write(text.data(), static_cast<qint64>(text.size())) != static_cast<qint64>(text.size()) ||
      !f.commit()) {
    if (error) *error = tr("%1: cannot write the file: %2").arg(path, f.errorString());
    return false;
  }
  return true;
}
