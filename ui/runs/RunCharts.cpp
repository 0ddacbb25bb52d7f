// RunCharts: loss (with a comparison overlay), throughput and memory charts of one run.
#include "runs/RunCharts.h"

#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QValueAxis>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "stagecraft/plan/plan.h"

namespace store = stagecraft::store;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Axes {
  QValueAxis* x;
  QValueAxis* y;
};

constexpr int kChartFontPt = 8;  // titles, labels and legends of the small charts
constexpr int kYTicks = 5;
constexpr int kWideXTicks = 5;    // the loss chart, half the row
constexpr int kNarrowXTicks = 3;  // throughput and memory, a quarter each: "1 40 80" fits, five labels do not
constexpr int kMaxLegendRanks = 8;  // more ranks' names do not fit beside the memory chart
constexpr double kPredictedPenWidth = 1.5;
constexpr int kFloatingLegendAlpha = 210;  // the curves stay visible through it

// A compact chart for a low dock: small fonts, thin margins, the unit in the title rather than
// on the value axis (an axis title costs the narrow charts a column of their width), the legend
// above the plot.
QChartView* makeChart(const QString& title, const QString& yFormat, int xTicks, QWidget* parent, Axes* axes) {
  auto* chart = new QChart;
  QFont font = chart->titleFont();
  font.setPointSize(kChartFontPt);
  QFont bold = font;
  bold.setBold(true);
  chart->setTitle(title);
  chart->setTitleFont(bold);
  chart->setMargins(QMargins(2, 2, 2, 2));
  chart->setBackgroundRoundness(0);
  chart->legend()->setAlignment(Qt::AlignTop);
  chart->legend()->setFont(font);
  axes->x = new QValueAxis;
  axes->x->setTitleText(QObject::tr("step"));
  axes->x->setLabelFormat(QStringLiteral("%d"));
  axes->x->setTickCount(xTicks);
  axes->y = new QValueAxis;
  axes->y->setLabelFormat(yFormat);
  axes->y->setTickCount(kYTicks);
  for (QValueAxis* a : {axes->x, axes->y}) {
    a->setLabelsFont(font);
    a->setTitleFont(font);
  }
  chart->addAxis(axes->x, Qt::AlignBottom);
  chart->addAxis(axes->y, Qt::AlignLeft);
  auto* view = new QChartView(chart, parent);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(160);
  return view;
}

QLineSeries* addSeries(QChartView* view, const Axes& axes, const QString& name) {
  auto* s = new QLineSeries;
  s->setName(name);
  view->chart()->addSeries(s);
  s->attachAxis(axes.x);
  s->attachAxis(axes.y);
  return s;
}

// Axis ranges that hold every point of `series`, with a little room above and below.
void fitAxes(QValueAxis* x, QValueAxis* y, const QList<QLineSeries*>& series) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const QLineSeries* s : series) {
    if (!s) continue;
    for (const QPointF& p : s->points()) {
      x0 = std::min(x0, p.x());
      x1 = std::max(x1, p.x());
      y0 = std::min(y0, p.y());
      y1 = std::max(y1, p.y());
    }
  }
  if (!std::isfinite(x0)) {
    x->setRange(0, 1);
    y->setRange(0, 1);
    return;
  }
  if (x1 <= x0) x1 = x0 + 1;
  const double pad = y1 > y0 ? 0.05 * (y1 - y0) : std::max(1e-3, 0.05 * std::fabs(y0));
  x->setRange(x0, x1);
  y->setRange(y0 - pad, y1 + pad);
}

// Per step, the value of `field` from the lowest rank that has one (rows: by step, then rank).
template <typename Field>
QList<QPointF> firstPerStep(const std::vector<store::MetricRow>& metrics, Field field) {
  QList<QPointF> points;
  int64_t lastStep = std::numeric_limits<int64_t>::min();
  for (const auto& m : metrics) {
    const double v = field(m);
    if (m.step == lastStep || std::isnan(v)) continue;
    points.append(QPointF(static_cast<double>(m.step), v));
    lastStep = m.step;
  }
  return points;
}

// The lowest and highest x of every point of `series`; [0, 1] when there is none.
QPair<double, double> stepRange(const QList<QLineSeries*>& series) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0;
  for (const QLineSeries* s : series) {
    for (const QPointF& p : s->points()) {
      x0 = std::min(x0, p.x());
      x1 = std::max(x1, p.x());
    }
  }
  if (!std::isfinite(x0)) return {0.0, 1.0};
  return {x0, std::max(x1, x0 + 1)};
}

void makeDashed(QLineSeries* s, const QColor& color) {
  QPen pen(color);
  pen.setStyle(Qt::DashLine);
  pen.setWidthF(kPredictedPenWidth);
  s->setPen(pen);
}

}  // namespace

RunCharts::Prediction RunCharts::predictionOf(const stagecraft::plan::Plan& plan) {
  Prediction p;
  p.tokensPerS = plan.estimate.tokens_per_s;
  for (const auto& m : plan.estimate.memory) p.memoryBytes.push_back(m.total());
  const int world = plan.topology.world_size();
  p.rankPpRank.reserve(static_cast<size_t>(std::max(0, world)));
  for (int r = 0; r < world; ++r) p.rankPpRank.push_back(plan.topology.coord(r).pp);
  return p;
}

RunCharts::RunCharts(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  m_note = new QLabel(this);
  m_note->setObjectName(QStringLiteral("predictionNote"));
  m_note->setWordWrap(true);
  m_note->hide();
  outer->addWidget(m_note);
  auto* layout = new QHBoxLayout;  // side by side: the runs view sits in a wide, low dock
  outer->addLayout(layout, 1);
  Axes loss{}, tput{}, mem{};
  m_lossView = makeChart(tr("Loss"), QStringLiteral("%.2f"), kWideXTicks, this, &loss);
  m_throughputView = makeChart(tr("Throughput, tokens/s"), QStringLiteral("%.0f"), kNarrowXTicks, this, &tput);
  m_memoryView = makeChart(tr("Memory per rank, MiB"), QStringLiteral("%.0f"), kNarrowXTicks, this, &mem);
  // The ranks' names stacked right of the plot: in a row above it four of them need more than
  // the chart's width at the window's default size.
  m_memoryView->chart()->legend()->setAlignment(Qt::AlignRight);
  m_lossX = loss.x;
  m_lossY = loss.y;
  m_throughputX = tput.x;
  m_throughputY = tput.y;
  m_memoryX = mem.x;
  m_memoryY = mem.y;
  m_loss = addSeries(m_lossView, loss, tr("loss"));
  m_throughput = addSeries(m_throughputView, tput, tr("tokens/s"));
  // Its one legend entry ("predicted") floats in the plot's top-right corner: a row of its own
  // would cost the low chart its step labels.
  QLegend* tl = m_throughputView->chart()->legend();
  tl->detachFromChart();
  tl->setBackgroundVisible(true);
  tl->setBrush(QColor(255, 255, 255, kFloatingLegendAlpha));
  tl->setPen(QPen(Qt::NoPen));
  tl->setVisible(false);
  // Legend entries drawn as their lines, so "predicted" shows dashed.
  tl->setMarkerShape(QLegend::MarkerShapeFromSeries);
  m_memoryView->chart()->legend()->setMarkerShape(QLegend::MarkerShapeFromSeries);
  connect(m_throughputView->chart(), &QChart::plotAreaChanged, this, &RunCharts::placeThroughputLegend);
  m_lossView->setObjectName(QStringLiteral("lossChart"));
  m_throughputView->setObjectName(QStringLiteral("throughputChart"));
  m_memoryView->setObjectName(QStringLiteral("memoryChart"));
  // Qt Charts gives a side legend at most 40% of its chart's width: the memory chart is the wider
  // of the two narrow ones so that "predicted" fits beside the plot.
  layout->addWidget(m_lossView, 3);
  layout->addWidget(m_throughputView, 2);
  layout->addWidget(m_memoryView, 3);
  clear();
}

QChart* RunCharts::lossChart() const { return m_lossView->chart(); }

QList<QPointF> RunCharts::lossPoints(const std::vector<store::MetricRow>& metrics) {
  return firstPerStep(metrics, [](const store::MetricRow& m) { return m.loss; });
}

QList<QPointF> RunCharts::throughputPoints(const std::vector<store::MetricRow>& metrics) {
  return firstPerStep(metrics, [](const store::MetricRow& m) { return m.tokens_per_s; });
}

void RunCharts::clear() {
  m_runId = 0;
  m_loss->clear();
  m_loss->setName(tr("loss"));
  m_throughput->clear();
  setComparison(0, {});
  setMemory({});
  setPrediction({});
}

void RunCharts::setRun(qint64 id, const std::vector<store::MetricRow>& metrics) {
  if (id != m_runId) {  // another run's prediction does not stay
    m_prediction = {};
    m_note->clear();
    m_note->hide();
  }
  m_runId = id;
  m_loss->setName(tr("run %1").arg(id));
  m_loss->replace(lossPoints(metrics));
  m_throughput->replace(throughputPoints(metrics));
  fitLossAxes();
  setMemory(metrics);
  drawPrediction();
}

void RunCharts::setPrediction(const Prediction& prediction, const QString& note) {
  m_prediction = prediction;
  m_note->setText(note);
  m_note->setVisible(!note.isEmpty());
  drawPrediction();
}

QString RunCharts::predictionNote() const { return m_note->text(); }

// The dashed lines span the steps the run's curves hold (0 to 1 before its first step), so they
// stay a reference beside the curves rather than stretching the step axis.
void RunCharts::drawPrediction() {
  const Prediction& p = m_prediction;
  const auto [x0, x1] = stepRange(QList<QLineSeries*>{m_throughput} + m_memory);

  if (p.tokensPerS > 0) {
    if (!m_predictedThroughput) {
      m_predictedThroughput = addSeries(m_throughputView, {m_throughputX, m_throughputY}, tr("predicted"));
      makeDashed(m_predictedThroughput, m_throughput->color());
    }
    m_predictedThroughput->replace({QPointF(x0, p.tokensPerS), QPointF(x1, p.tokensPerS)});
  } else if (m_predictedThroughput) {
    m_throughputView->chart()->removeSeries(m_predictedThroughput);
    delete m_predictedThroughput;
    m_predictedThroughput = nullptr;
  }
  QLegend* tl = m_throughputView->chart()->legend();
  for (QLegendMarker* marker : tl->markers(m_throughput)) marker->setVisible(false);  // the solid curve is the run
  tl->setVisible(m_predictedThroughput != nullptr);
  fitAxes(m_throughputX, m_throughputY, {m_throughput, m_predictedThroughput});
  placeThroughputLegend();

  // One line per pp rank beside per-rank curves; the largest beside the largest rank's curve.
  const int ranks = static_cast<int>(p.rankPpRank.size());
  const bool largest = ranks > kMaxMemoryRanks || p.memoryBytes.size() == 1;
  const int wanted = p.memoryBytes.empty() ? 0 : (largest ? 1 : static_cast<int>(p.memoryBytes.size()));
  while (m_predictedMemory.size() > wanted) {
    QLineSeries* s = m_predictedMemory.takeLast();
    m_memoryView->chart()->removeSeries(s);
    delete s;
  }
  while (m_predictedMemory.size() < wanted) m_predictedMemory.append(addSeries(m_memoryView, {m_memoryX, m_memoryY}, QString()));
  for (int i = 0; i < wanted; ++i) {
    QLineSeries* s = m_predictedMemory[i];
    double bytes = 0;
    int lowestRank = -1;
    if (largest) {
      for (double b : p.memoryBytes) bytes = std::max(bytes, b);
      s->setName(p.memoryBytes.size() == 1 ? tr("predicted") : tr("predicted, largest"));
      lowestRank = 0;
    } else {
      bytes = p.memoryBytes[static_cast<size_t>(i)];
      // The legend shows the first only, as "predicted": the colours say which ranks each is for.
      s->setName(i == 0 ? tr("predicted") : tr("predicted pp %1").arg(i));
      for (int r = 0; r < ranks && lowestRank < 0; ++r) {
        if (p.rankPpRank[static_cast<size_t>(r)] == i) lowestRank = r;
      }
    }
    const QColor color = lowestRank >= 0 && lowestRank < m_memory.size() ? m_memory[lowestRank]->color() : QColor(Qt::darkGray);
    makeDashed(s, color);
    s->replace({QPointF(x0, bytes / kMiB), QPointF(x1, bytes / kMiB)});
  }
  updateMemoryLegend();
  fitAxes(m_memoryX, m_memoryY, m_memory + m_predictedMemory);
}

// Ranks' names while they fit (kMaxLegendRanks), and one "predicted" for the dashed lines (their
// colours say which ranks each is for).
void RunCharts::updateMemoryLegend() {
  QLegend* legend = m_memoryView->chart()->legend();
  const bool ranksShown = m_memory.size() > 1 && m_memory.size() <= kMaxLegendRanks;
  legend->setVisible(ranksShown || !m_predictedMemory.isEmpty());
  const bool namesFit = m_memory.size() <= kMaxLegendRanks;
  for (QLineSeries* s : std::as_const(m_memory)) {
    for (QLegendMarker* marker : legend->markers(s)) marker->setVisible(namesFit);
  }
  for (int i = 1; i < m_predictedMemory.size(); ++i) {
    for (QLegendMarker* marker : legend->markers(m_predictedMemory[i])) marker->setVisible(false);
  }
}

void RunCharts::placeThroughputLegend() {
  QChart* chart = m_throughputView->chart();
  QLegend* legend = chart->legend();
  if (!legend->isVisible()) return;
  const QRectF plot = chart->plotArea();
  const QSizeF size = legend->effectiveSizeHint(Qt::PreferredSize);
  legend->setGeometry(QRectF(plot.right() - size.width(), plot.top(), size.width(), size.height()));
  legend->update();
}

void RunCharts::setComparison(qint64 id, const std::vector<store::MetricRow>& metrics) {
  m_compareId = id;
  if (id == 0) {
    if (m_compare) {
      m_lossView->chart()->removeSeries(m_compare);
      delete m_compare;
      m_compare = nullptr;
    }
    fitLossAxes();
    return;
  }
  if (!m_compare) {
    m_compare = addSeries(m_lossView, {m_lossX, m_lossY}, QString());
    QPen pen = m_compare->pen();
    pen.setStyle(Qt::DashLine);
    m_compare->setPen(pen);
  }
  m_compare->setName(tr("run %1").arg(id));
  m_compare->replace(lossPoints(metrics));
  fitLossAxes();
}

void RunCharts::fitLossAxes() {
  m_lossView->chart()->legend()->setVisible(m_compare != nullptr);  // names only needed for two curves
  fitAxes(m_lossX, m_lossY, {m_loss, m_compare});
}

void RunCharts::setMemory(const std::vector<store::MetricRow>& metrics) {
  int ranks = 0;
  for (const auto& m : metrics) ranks = std::max(ranks, m.rank + 1);
  const bool perRank = ranks <= kMaxMemoryRanks;
  const int wanted = ranks == 0 ? 0 : (perRank ? ranks : 1);
  while (m_memory.size() > wanted) {
    QLineSeries* s = m_memory.takeLast();
    m_memoryView->chart()->removeSeries(s);
    delete s;
  }
  if (m_memory.size() != wanted) {
    // The predicted lines are added again after the ranks' curves, so the legend lists the ranks
    // first whatever order they arrived in.
    for (QLineSeries* s : std::as_const(m_predictedMemory)) {
      m_memoryView->chart()->removeSeries(s);
      delete s;
    }
    m_predictedMemory.clear();
  }
  while (m_memory.size() < wanted) m_memory.append(addSeries(m_memoryView, {m_memoryX, m_memoryY}, QString()));
  std::vector<QList<QPointF>> points(static_cast<size_t>(wanted));
  std::map<int64_t, double> largest;  // step -> MiB, when not per rank
  for (const auto& m : metrics) {
    if (m.mem_bytes < 0) continue;
    const double mib = static_cast<double>(m.mem_bytes) / kMiB;
    if (perRank) {
      points[static_cast<size_t>(m.rank)].append(QPointF(static_cast<double>(m.step), mib));
    } else {
      double& v = largest[m.step];
      v = std::max(v, mib);
    }
  }
  if (!perRank && wanted == 1) {
    for (const auto& [step, mib] : largest) points[0].append(QPointF(static_cast<double>(step), mib));
    m_memory[0]->setName(tr("largest of %1 ranks").arg(ranks));
  }
  for (int r = 0; r < wanted; ++r) {
    if (perRank) m_memory[r]->setName(tr("rank %1").arg(r));
    m_memory[r]->replace(points[static_cast<size_t>(r)]);
  }
  updateMemoryLegend();
  fitAxes(m_memoryX, m_memoryY, m_memory + m_predictedMemory);
}
