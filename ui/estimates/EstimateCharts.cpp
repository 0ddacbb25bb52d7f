// MemoryChart and StepTimeChart painting (see EstimateCharts.h).
#include "estimates/EstimateCharts.h"

#include <QPainter>

#include <algorithm>
#include <numeric>

namespace {

constexpr int kMargin = 8;
constexpr int kTitleHeight = 18;
constexpr int kLegendRow = 16;
constexpr int kSwatch = 10;
constexpr int kFontPx = 11;
constexpr int kValueHeight = 14;
constexpr int kAxisLabelHeight = 14;
constexpr double kBarFill = 0.7;
constexpr int kStepBarHeight = 26;
constexpr int kLegendColumnWidth = 210;
const QColor kOver(0xD0, 0x20, 0x20);
const QColor kLine(0x20, 0x20, 0x20);
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Paul Tol's "bright" scheme for the parts (distinct from the stage palette's order).
const std::array<QColor, MemoryChart::kParts> kMemoryColors = {
    QColor(0x44, 0x77, 0xAA), QColor(0x66, 0xCC, 0xEE), QColor(0x22, 0x88, 0x33), QColor(0xCC, 0xBB, 0x44), QColor(0xBB, 0xBB, 0xBB)};
const std::array<QColor, StepTimeChart::kParts> kStepColors = {
    QColor(0x44, 0x77, 0xAA), QColor(0x66, 0xCC, 0xEE), QColor(0xAA, 0x33, 0x77), QColor(0xCC, 0xBB, 0x44),
    QColor(0x22, 0x88, 0x33), QColor(0xBB, 0xBB, 0xBB), QColor(0xEE, 0x66, 0x77)};

QFont smallFont(const QFont& base) {
  QFont f = base;
  f.setPixelSize(kFontPx);
  return f;
}

QString formatSeconds(double s) { return QString::fromStdString(stagecraft::plan::format_seconds(s)); }

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QWidget(parent) { setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding); }

QSize MemoryChart::sizeHint() const { return {480, 240}; }

QString MemoryChart::partName(int part) {
  static const char* names[kParts] = {"weights", "grads", "optimizer", "activations", "workspace"};
  return QString::fromLatin1(names[part]);
}

QColor MemoryChart::partColor(int part) { return kMemoryColors[static_cast<size_t>(part)]; }

void MemoryChart::setEstimate(const stagecraft::plan::Estimate& e) {
  m_bars.clear();
  m_bars.reserve(e.memory.size());
  for (const auto& r : e.memory) m_bars.push_back({r.weights, r.grads, r.optimizer, r.activations, r.workspace});
  m_device = e.device_memory_bytes;
  update();
}

bool MemoryChart::isOver(int ppRank) const {
  if (ppRank < 0 || ppRank >= static_cast<int>(m_bars.size()) || m_device <= 0) return false;
  const auto& b = m_bars[static_cast<size_t>(ppRank)];
  return std::accumulate(b.begin(), b.end(), 0.0) > m_device;
}

void MemoryChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setFont(smallFont(font()));
  const QColor text = palette().windowText().color();
  p.setPen(text);
  p.drawText(QRect(kMargin, 0, width() - 2 * kMargin, kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
             m_device > 0 ? tr("Memory per GPU by pp rank, GiB (dashed: device %1 GiB)").arg(m_device / kGiB, 0, 'f', 1)
                          : tr("Memory per GPU by pp rank, GiB"));
  // Legend on one line under the title.
  int x = kMargin;
  for (int i = 0; i < kParts; ++i) {
    p.fillRect(QRect(x, kTitleHeight + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch), partColor(i));
    const QString name = partName(i);
    p.drawText(QRect(x + kSwatch + 3, kTitleHeight, 100, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter, name);
    x += kSwatch + 3 + p.fontMetrics().horizontalAdvance(name) + 12;
  }
  if (m_bars.empty()) return;

  const int top = kTitleHeight + kLegendRow + kValueHeight;
  const int bottom = height() - kAxisLabelHeight;
  const double plotHeight = std::max(1, bottom - top);
  double maxTotal = m_device;
  for (const auto& b : m_bars) maxTotal = std::max(maxTotal, std::accumulate(b.begin(), b.end(), 0.0));
  if (maxTotal <= 0) return;
  const double slot = static_cast<double>(width() - 2 * kMargin) / m_bars.size();
  for (size_t i = 0; i < m_bars.size(); ++i) {
    const double left = kMargin + i * slot + slot * (1 - kBarFill) / 2;
    double y = bottom;
    double total = 0;
    for (int part = 0; part < kParts; ++part) {
      const double h = m_bars[i][static_cast<size_t>(part)] / maxTotal * plotHeight;
      p.fillRect(QRectF(left, y - h, slot * kBarFill, h), partColor(part));
      y -= h;
      total += m_bars[i][static_cast<size_t>(part)];
    }
    const bool over = isOver(static_cast<int>(i));
    if (over) {
      p.setPen(QPen(kOver, 2));
      p.setBrush(Qt::NoBrush);
      p.drawRect(QRectF(left, y, slot * kBarFill, bottom - y));
    }
    p.setPen(over ? kOver : text);
    if (slot >= 30) {
      p.drawText(QRectF(left - slot, y - kValueHeight, slot * kBarFill + 2 * slot, kValueHeight), Qt::AlignCenter,
                 QString::number(total / kGiB, 'f', 1));
    }
    p.setPen(text);
    if (slot >= 12) p.drawText(QRectF(kMargin + i * slot, bottom, slot, kAxisLabelHeight), Qt::AlignCenter, QString::number(i));
  }
  if (m_device > 0) {
    const double y = bottom - m_device / maxTotal * plotHeight;
    p.setPen(QPen(kLine, 1.5, Qt::DashLine));
    p.drawLine(QPointF(kMargin, y), QPointF(width() - kMargin, y));
  }
}

StepTimeChart::StepTimeChart(QWidget* parent) : QWidget(parent) { setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed); }

QSize StepTimeChart::sizeHint() const { return {480, kTitleHeight + kStepBarHeight + 4 + 4 * kLegendRow + kMargin}; }

QString StepTimeChart::partName(int part) {
  static const char* names[kParts] = {"compute", "recompute", "TP comm", "PP comm", "DP comm", "bubble", "optimizer"};
  return QString::fromLatin1(names[part]);
}

QColor StepTimeChart::partColor(int part) { return kStepColors[static_cast<size_t>(part)]; }

double StepTimeChart::total() const { return std::accumulate(m_seconds.begin(), m_seconds.end(), 0.0); }

void StepTimeChart::setEstimate(const stagecraft::plan::Estimate& e) {
  const auto& b = e.breakdown;
  m_seconds = {b.compute_s, b.recompute_s, b.tp_comm_s, b.pp_comm_s, b.dp_comm_s, b.bubble_s, b.optimizer_s};
  update();
}

void StepTimeChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setFont(smallFont(font()));
  const QColor text = palette().windowText().color();
  const double sum = total();
  p.setPen(text);
  p.drawText(QRect(kMargin, 0, width() - 2 * kMargin, kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
             sum > 0 ? tr("Step time %1").arg(formatSeconds(sum)) : tr("Step time"));
  if (sum <= 0) return;
  const double barWidth = width() - 2 * kMargin;
  double x = kMargin;
  for (int i = 0; i < kParts; ++i) {
    const double w = m_seconds[static_cast<size_t>(i)] / sum * barWidth;
    p.fillRect(QRectF(x, kTitleHeight, w, kStepBarHeight), partColor(i));
    x += w;
  }
  // Legend: name, seconds, share; in as many columns as fit.
  const int columns = std::max(1, static_cast<int>(barWidth) / kLegendColumnWidth);
  const int top = kTitleHeight + kStepBarHeight + 4;
  for (int i = 0; i < kParts; ++i) {
    const int col = i % columns;
    const int row = i / columns;
    const int lx = kMargin + col * kLegendColumnWidth;
    const int ly = top + row * kLegendRow;
    p.fillRect(QRect(lx, ly + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch), partColor(i));
    const double s = m_seconds[static_cast<size_t>(i)];
    p.setPen(text);
    p.drawText(QRect(lx + kSwatch + 4, ly, kLegendColumnWidth - kSwatch - 4, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
               tr("%1 %2 (%3%)").arg(partName(i), formatSeconds(s)).arg(100.0 * s / sum, 0, 'f', 1));
  }
}
