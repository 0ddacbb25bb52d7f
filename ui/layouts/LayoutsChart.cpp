// The layouts scatter: points by colour group, the device line, the Pareto front. See LayoutsChart.h.
#include "layouts/LayoutsChart.h"

#include <QChart>
#include <QLegend>
#include <QLineSeries>
#include <QMouseEvent>
#include <QScatterSeries>
#include <QTimer>
#include <QToolTip>
#include <QValueAxis>

#include <algorithm>
#include <map>

#include "common/Text.h"
#include "layouts/LayoutsModel.h"

namespace plan = stagecraft::plan;
namespace cfg = stagecraft::config;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr qreal kMarkerRadius = 3.5;        // pixels
constexpr double kPickPixels = 6.0;         // a click this close to a point picks it
constexpr qreal kSelectedMarkerSize = 13.0;  // pixels
constexpr double kAxisMargin = 1.05;        // room above the largest value

// Tableau 10: distinct on screen and in print.
const QColor kPalette[] = {QColor(0x4e79a7), QColor(0xf28e2b), QColor(0xe15759), QColor(0x76b7b2), QColor(0x59a14f),
                           QColor(0xedc948), QColor(0xb07aa1), QColor(0xff9da7), QColor(0x9c755f), QColor(0xbab0ac)};

// The colour group of a layout: a sort key and its legend name.
std::pair<int, QString> group(const cfg::RunConfig& c, LayoutsChart::ColourBy by) {
  switch (by) {
    case LayoutsChart::ColourBy::kPp: return {c.parallel.pp, QStringLiteral("pp %1").arg(c.parallel.pp)};
    case LayoutsChart::ColourBy::kTp: return {c.parallel.tp, QStringLiteral("tp %1").arg(c.parallel.tp)};
    case LayoutsChart::ColourBy::kSchedule:
      if (c.parallel.pp == 1) return {-1, QStringLiteral("no pipeline")};
      return {static_cast<int>(c.pipeline.schedule), qs(cfg::to_string(c.pipeline.schedule))};
    case LayoutsChart::ColourBy::kRecompute:
      return {static_cast<int>(c.train.recompute), QStringLiteral("recompute %1").arg(qs(cfg::to_string(c.train.recompute)))};
  }
  return {0, {}};
}

}  // namespace

QPointF LayoutsChart::pointOf(const plan::Candidate& c) const {
  return {c.estimate.peak_memory_bytes / kGiB, m_yAxis == YAxis::kStepTime ? c.estimate.step_time_s : c.estimate.tokens_per_s};
}

void LayoutsChart::setYAxis(YAxis y) {
  if (y == m_yAxis) return;
  m_yAxis = y;
  m_y->setTitleText(y == YAxis::kStepTime ? tr("step time (s)") : tr("tokens/s"));
  rebuild();
}

LayoutsChart::LayoutsChart(LayoutsModel* model, QWidget* parent) : QChartView(parent), m_model(model) {
  auto* chart = new QChart;
  chart->legend()->setAlignment(Qt::AlignRight);
  chart->setMargins(QMargins(4, 4, 4, 4));
  m_x = new QValueAxis;
  m_x->setTitleText(tr("peak memory per GPU (GiB)"));
  m_y = new QValueAxis;
  m_y->setTitleText(tr("tokens/s"));
  m_y->setLabelFormat(QStringLiteral("%.3g"));
  chart->addAxis(m_x, Qt::AlignBottom);
  chart->addAxis(m_y, Qt::AlignLeft);
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumHeight(220);
  setMouseTracking(true);
  viewport()->setMouseTracking(true);  // hover names the layout under the pointer
}

void LayoutsChart::setColourBy(ColourBy by) {
  if (by == m_colourBy) return;
  m_colourBy = by;
  rebuild();
}

void LayoutsChart::scheduleRebuild() {
  if (m_pending) return;
  m_pending = true;
  QTimer::singleShot(0, this, [this] {
    if (m_pending) rebuild();
  });
}

void LayoutsChart::rebuild() {
  m_pending = false;
  QChart* chart = this->chart();
  chart->removeAllSeries();  // deletes them
  m_series.clear();
  m_seriesRows.clear();
  m_selected = nullptr;
  m_device = nullptr;
  m_front = nullptr;
  m_pareto.clear();
  const int rows = m_model->rowCount();
  double maxX = 0, maxY = 0;
  const auto& all = m_model->allLayouts();
  m_deviceGiB = all.empty() ? 0 : all.front().estimate.device_memory_bytes / kGiB;

  // Colour groups in the order of their keys.
  std::map<int, std::pair<QString, std::vector<int>>> groups;
  for (int r = 0; r < rows; ++r) {
    auto [key, name] = group(m_model->candidate(r).config, m_colourBy);
    auto& g = groups[key];
    g.first = name;
    g.second.push_back(r);
  }
  int colour = 0;
  for (auto& [key, g] : groups) {
    // By memory, so the (undrawn) line through the points is short and cheap to stroke.
    std::stable_sort(g.second.begin(), g.second.end(), [this](int a, int b) {
      return m_model->candidate(a).estimate.peak_memory_bytes < m_model->candidate(b).estimate.peak_memory_bytes;
    });
    auto* s = new QLineSeries;
    s->setName(g.first);
    chart->addSeries(s);
    s->attachAxis(m_x);
    s->attachAxis(m_y);
    QPen pen(kPalette[colour++ % std::size(kPalette)]);  // its colour fills the points
    pen.setStyle(Qt::NoPen);                              // no line between them
    s->setPen(pen);
    s->setPointsVisible(true);
    s->setMarkerSize(kMarkerRadius);  // the radius the line item paints points with
    QList<QPointF> points;
    points.reserve(static_cast<qsizetype>(g.second.size()));
    for (int r : g.second) {
      const QPointF p = pointOf(m_model->candidate(r));
      maxX = std::max(maxX, p.x());
      maxY = std::max(maxY, p.y());
      points.append(p);
    }
    s->replace(points);
    m_series.append(s);
    m_seriesRows.push_back(std::move(g.second));
  }

  // The Pareto front over the fitting points: by memory, each point faster than all before it
  // (more tokens/s, or a shorter step: the same order, as the batch is fixed).
  std::vector<int> byMemory;
  for (int r = 0; r < rows; ++r) {
    if (m_model->candidate(r).estimate.fits) byMemory.push_back(r);
  }
  std::stable_sort(byMemory.begin(), byMemory.end(), [this](int a, int b) {
    return m_model->candidate(a).estimate.peak_memory_bytes < m_model->candidate(b).estimate.peak_memory_bytes;
  });
  double best = -1;
  for (int r : byMemory) {
    const double t = m_model->candidate(r).estimate.tokens_per_s;  // the ranking's speed
    if (t > best) {
      best = t;
      m_pareto.append(r);
    }
  }
  m_front = new QLineSeries;
  m_front->setName(tr("Pareto front"));
  QList<QPointF> front;
  for (int i = 0; i < m_pareto.size(); ++i) {
    const QPointF p = pointOf(m_model->candidate(m_pareto[i]));
    if (i > 0) front.append(QPointF(p.x(), front.back().y()));  // a staircase: memory first, then speed
    front.append(p);
  }
  m_front->replace(front);
  m_front->setPen(QPen(QColor(0x333333), 1.5, Qt::DashLine));
  chart->addSeries(m_front);
  m_front->attachAxis(m_x);
  m_front->attachAxis(m_y);

  maxX = std::max(maxX, m_deviceGiB) * kAxisMargin;
  maxY = std::max(maxY, 1.0) * kAxisMargin;
  m_device = new QLineSeries;
  m_device->setName(tr("device memory"));
  m_device->append(m_deviceGiB, 0);
  m_device->append(m_deviceGiB, maxY);
  m_device->setPen(QPen(QColor(0xd62728), 2));
  chart->addSeries(m_device);
  m_device->attachAxis(m_x);
  m_device->attachAxis(m_y);

  m_selected = new QScatterSeries;
  m_selected->setName(tr("selected"));
  m_selected->setMarkerSize(kSelectedMarkerSize);
  m_selected->setColor(Qt::transparent);
  m_selected->setBorderColor(Qt::black);
  m_selected->setPen(QPen(Qt::black, 2));
  chart->addSeries(m_selected);
  m_selected->attachAxis(m_x);
  m_selected->attachAxis(m_y);

  m_x->setRange(0, maxX);
  m_y->setRange(0, maxY);
  setSelectedRows(m_selectedRows);
  Q_EMIT rebuilt();
}

int LayoutsChart::rowAt(const QPoint& viewPos) const {
  const QPointF at = chart()->mapFromScene(mapToScene(viewPos));
  int best = -1;
  double bestDistance = kPickPixels * kPickPixels;
  for (qsizetype s = 0; s < m_series.size(); ++s) {
    QLineSeries* series = m_series[s];
    const auto& rows = m_seriesRows[static_cast<size_t>(s)];
    for (size_t i = 0; i < rows.size(); ++i) {
      const QPointF p = chart()->mapToPosition(series->at(static_cast<int>(i)), series);
      const double d = (p.x() - at.x()) * (p.x() - at.x()) + (p.y() - at.y()) * (p.y() - at.y());
      if (d <= bestDistance) {
        best = rows[i];
        bestDistance = d;
      }
    }
  }
  return best;
}

void LayoutsChart::mousePressEvent(QMouseEvent* event) {
  m_pressed = event->button() == Qt::LeftButton;
  m_pressedAt = event->position().toPoint();
  QChartView::mousePressEvent(event);
}

void LayoutsChart::mouseReleaseEvent(QMouseEvent* event) {
  const QPoint at = event->position().toPoint();
  if (m_pressed && event->button() == Qt::LeftButton && (at - m_pressedAt).manhattanLength() <= kPickPixels) {
    const int row = rowAt(at);
    if (row >= 0) Q_EMIT rowClicked(row);
  }
  m_pressed = false;
  QChartView::mouseReleaseEvent(event);
}

void LayoutsChart::mouseDoubleClickEvent(QMouseEvent* event) {
  const int row = event->button() == Qt::LeftButton ? rowAt(event->position().toPoint()) : -1;
  if (row >= 0) Q_EMIT rowDoubleClicked(row);
  QChartView::mouseDoubleClickEvent(event);
}

void LayoutsChart::mouseMoveEvent(QMouseEvent* event) {
  const int row = rowAt(event->position().toPoint());
  if (row < 0) {
    QToolTip::hideText();
  } else {
    const auto& c = m_model->candidate(row);
    QToolTip::showText(event->globalPosition().toPoint(),
                       tr("#%1 %2\n%3 peak, %4 tokens/s, step %5")
                           .arg(row + 1)
                           .arg(qs(plan::layout_string(c.config)))
                           .arg(qs(plan::format_bytes(c.estimate.peak_memory_bytes)))
                           .arg(c.estimate.tokens_per_s, 0, 'g', 4)
                           .arg(qs(plan::format_seconds(c.estimate.step_time_s))),
                       this);
  }
  QChartView::mouseMoveEvent(event);
}

void LayoutsChart::setSelectedRows(const QList<int>& rows) {
  m_selectedRows = rows;
  if (!m_selected) return;
  QList<QPointF> points;
  for (int r : rows) {
    if (r >= 0 && r < m_model->rowCount()) points.append(pointOf(m_model->candidate(r)));
  }
  m_selected->replace(points);
}

int LayoutsChart::pointCount() const {
  int n = 0;
  for (const auto* s : m_series) n += static_cast<int>(s->count());
  return n;
}

QStringList LayoutsChart::seriesNames() const {
  QStringList names;
  for (const auto* s : m_series) names << s->name();
  return names;
}

QPointF LayoutsChart::pointOfRow(int row) const { return pointOf(m_model->candidate(row)); }
