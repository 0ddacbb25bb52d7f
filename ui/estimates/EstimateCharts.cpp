// MemoryChart and StepTimeChart painting (see EstimateCharts.h).
#include "estimates/EstimateCharts.h"

#include <QPainter>
#include <QResizeEvent>

#include <algorithm>
#include <cmath>
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
constexpr int kLegendGap = 12;  // between legend columns
const QColor kOver(0xD0, 0x20, 0x20);
const QColor kLine(0x20, 0x20, 0x20);
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// Paul Tol's "bright" scheme for the parts (distinct from the stage palette's order).
const std::array<QColor, MemoryChart::kParts> kMemoryColors = {
    QColor(0x44, 0x77, 0xAA), QColor(0x66, 0xCC, 0xEE), QColor(0x22, 0x88, 0x33), QColor(0xCC, 0xBB, 0x44), QColor(0xBB, 0xBB, 0xBB)};
const std::array<QColor, StepTimeChart::kParts> kStepColors = {
    QColor(0x44, 0x77, 0xAA), QColor(0x66, 0xCC, 0xEE), QColor(0xAA, 0x33, 0x77), QColor(0x99, 0x44, 0x55), QColor(0x33, 0x22, 0x88),
    QColor(0xCC, 0xBB, 0x44), QColor(0x22, 0x88, 0x33), QColor(0xBB, 0xBB, 0xBB), QColor(0xEE, 0x66, 0x77), QColor(0x77, 0x77, 0x77)};
constexpr int kCpPart = 3;
constexpr int kEpPart = 4;

QFont smallFont(const QFont& base) {
  QFont f = base;
  f.setPixelSize(kFontPx);
  return f;
}

QString formatSeconds(double s) { return QString::fromStdString(stagecraft::plan::format_seconds(s)); }

// Draws text in box and records it with the rectangle its glyphs take.
void drawLabel(QPainter& p, std::vector<PaintedLabel>& out, const QRectF& box, int flags, const QString& text) {
  p.drawText(box, flags, text);
  out.push_back({text, box, QFontMetricsF(p.font()).boundingRect(box, flags, text)});
}

// The first of texts that fits in width (the last one otherwise).
QString firstThatFits(const QFontMetrics& fm, const QStringList& texts, int width) {
  for (const QString& t : texts) {
    if (fm.horizontalAdvance(t) <= width) return t;
  }
  return texts.back();
}

// The device's band above the memory plot, and the row above the plot for the tallest bar's value.
constexpr int kDeviceBand = kValueHeight + 6;

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QWidget(parent) { setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding); }

QSize MemoryChart::sizeHint() const { return {480, plotTop(480) + 2 * kMinPlotHeight + kAxisLabelHeight}; }

QSize MemoryChart::minimumSizeHint() const {
  const int w = std::max(width(), 200);
  return {200, plotTop(w) + kMinPlotHeight + kAxisLabelHeight};
}

void MemoryChart::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  // The legend's rows follow the width, and the least height follows them.
  if (legendRows(event->size().width()) != legendRows(event->oldSize().width())) updateGeometry();
}

int MemoryChart::legendRows(int w) const {
  const QFontMetrics fm(smallFont(font()));
  int rows = 1;
  int x = kMargin;
  for (int i = 0; i < kParts; ++i) {
    const int item = kSwatch + 3 + fm.horizontalAdvance(partName(i));
    if (x > kMargin && x + item > w - kMargin) {
      ++rows;
      x = kMargin;
    }
    x += item + 12;
  }
  return rows;
}

int MemoryChart::plotTop(int w) const { return kTitleHeight + legendRows(w) * kLegendRow + (m_device > 0 ? kDeviceBand : 0) + kValueHeight; }

QRect MemoryChart::plotRect() const {
  const QFontMetrics fm(smallFont(font()));
  const double unit = axisUnit() == QLatin1String("GiB") ? kGiB : kMiB;
  const int decimals = m_axisTick > 0 && m_axisTick / unit < 1.0 ? 1 : 0;
  const int gutter = fm.horizontalAdvance(QString::number(m_axisMax / unit, 'f', decimals)) + 6;
  const int top = plotTop(width());
  return QRect(QPoint(kMargin + gutter, top), QPoint(width() - kMargin, height() - kAxisLabelHeight));
}

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
  fitAxis();
  updateGeometry();
  update();
}

bool MemoryChart::isOver(int ppRank) const {
  if (ppRank < 0 || ppRank >= static_cast<int>(m_bars.size()) || m_device <= 0) return false;
  const auto& b = m_bars[static_cast<size_t>(ppRank)];
  return std::accumulate(b.begin(), b.end(), 0.0) > m_device;
}

QString MemoryChart::axisUnit() const { return m_axisMax >= kGiB ? QStringLiteral("GiB") : QStringLiteral("MiB"); }

void MemoryChart::fitAxis() {
  double dataMax = 0;
  for (const auto& b : m_bars) dataMax = std::max(dataMax, std::accumulate(b.begin(), b.end(), 0.0));
  m_deviceOnAxis = m_device > 0 && dataMax >= kNearDevice * m_device;
  const double top = m_deviceOnAxis ? std::max(dataMax, m_device) : dataMax;
  if (top <= 0) {
    m_axisMax = m_axisTick = 0;
    return;
  }
  // About four ticks of 1, 2 or 5 x 10^k bytes in the axis unit, the top rounded up to a tick.
  const double unit = top >= kGiB ? kGiB : kMiB;
  const double raw = top / unit / 4.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag <= 1.0 ? mag : raw / mag <= 2.0 ? 2 * mag : raw / mag <= 5.0 ? 5 * mag : 10 * mag;
  m_axisTick = step * unit;
  m_axisMax = std::ceil(top / m_axisTick - 1e-9) * m_axisTick;
}

void MemoryChart::paintEvent(QPaintEvent*) {
  m_labels.clear();
  QPainter p(this);
  p.setFont(smallFont(font()));
  const QFontMetrics fm = p.fontMetrics();
  const QColor text = palette().windowText().color();
  p.setPen(text);
  const int inner = width() - 2 * kMargin;
  const QString unitSuffix = m_bars.empty() ? QString() : QStringLiteral(", ") + axisUnit();
  drawLabel(p, m_labels, QRectF(kMargin, 0, inner, kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
            firstThatFits(fm, {tr("Memory per GPU by pp rank") + unitSuffix, tr("Memory by pp rank") + unitSuffix, tr("Memory") + unitSuffix},
                          inner));
  // Legend under the title, wrapped into rows.
  int x = kMargin;
  int y = kTitleHeight;
  for (int i = 0; i < kParts; ++i) {
    const QString name = partName(i);
    const int item = kSwatch + 3 + fm.horizontalAdvance(name);
    if (x > kMargin && x + item > width() - kMargin) {
      x = kMargin;
      y += kLegendRow;
    }
    p.fillRect(QRect(x, y + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch), partColor(i));
    drawLabel(p, m_labels, QRectF(x + kSwatch + 3, y, fm.horizontalAdvance(name) + 2, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter, name);
    x += item + 12;
  }
  if (m_bars.empty() || m_axisMax <= 0) return;

  const double unit = axisUnit() == QLatin1String("GiB") ? kGiB : kMiB;
  const int decimals = m_axisTick / unit < 1.0 ? 1 : 0;
  auto label = [&](double bytes, int d) { return QString::number(bytes / unit, 'f', d); };
  const QRect plot = plotRect();
  const int top = plot.top();
  const int bottom = height() - kAxisLabelHeight;
  const double plotHeight = std::max(1, bottom - top);
  const int gutter = plot.left() - kMargin;
  const int plotLeft = plot.left();
  const int plotRight = width() - kMargin;
  auto yOf = [&](double bytes) { return bottom - bytes / m_axisMax * plotHeight; };

  // Ticks and faint grid lines; a label on every tick that leaves room for the text.
  const QColor grid = QColor(text.red(), text.green(), text.blue(), 40);
  const double tickPx = m_axisTick / m_axisMax * plotHeight;
  const int labelEvery = std::max(1, static_cast<int>(std::ceil((kValueHeight + 2) / std::max(1.0, tickPx))));
  int tick = 0;
  for (double v = 0; v <= m_axisMax * (1 + 1e-9); v += m_axisTick, ++tick) {
    const double ty = yOf(v);
    p.setPen(grid);
    p.drawLine(QPointF(plotLeft, ty), QPointF(plotRight, ty));
    if (tick % labelEvery != 0) continue;
    p.setPen(text);
    drawLabel(p, m_labels, QRectF(kMargin, ty - kValueHeight / 2.0, gutter - 4, kValueHeight), Qt::AlignRight | Qt::AlignVCenter,
              label(v, decimals));
  }
  p.setPen(text);
  p.drawLine(QPointF(plotLeft, top), QPointF(plotLeft, bottom));

  const double slot = static_cast<double>(plotRight - plotLeft) / m_bars.size();
  const int valueDecimals = m_axisMax / unit < 10 ? 2 : 1;
  // Rank numbers under the bars: every one when they fit, else every k-th.
  const int rankWidth = fm.horizontalAdvance(QString::number(m_bars.size() - 1)) + 4;
  const size_t rankEvery = static_cast<size_t>(std::max(1.0, std::ceil(rankWidth / slot)));
  for (size_t i = 0; i < m_bars.size(); ++i) {
    const double left = plotLeft + i * slot + slot * (1 - kBarFill) / 2;
    double by = bottom;
    double total = 0;
    for (int part = 0; part < kParts; ++part) {
      const double h = std::min(m_bars[i][static_cast<size_t>(part)] / m_axisMax * plotHeight, by - top);
      p.fillRect(QRectF(left, by - h, slot * kBarFill, h), partColor(part));
      by -= h;
      total += m_bars[i][static_cast<size_t>(part)];
    }
    const bool over = isOver(static_cast<int>(i));
    if (over) {
      p.setPen(QPen(kOver, 2));
      p.setBrush(Qt::NoBrush);
      p.drawRect(QRectF(left, by, slot * kBarFill, bottom - by));
    }
    p.setPen(over ? kOver : text);
    const QString value = QString::number(total / unit, 'f', valueDecimals);
    if (fm.horizontalAdvance(value) + 4 <= slot) {
      drawLabel(p, m_labels, QRectF(plotLeft + i * slot, by - kValueHeight, slot, kValueHeight), Qt::AlignCenter, value);
    }
    p.setPen(text);
    if (i % rankEvery == 0) {
      const double cx = plotLeft + (i + 0.5) * slot;
      drawLabel(p, m_labels, QRectF(cx - rankWidth / 2.0, bottom, rankWidth, kAxisLabelHeight), Qt::AlignCenter, QString::number(i));
    }
  }
  if (m_device <= 0) return;
  // The device's label in its band above the plot, right-aligned; a dashed swatch before it when
  // the line itself is lower, on the axis.
  const QString size = QString::fromStdString(stagecraft::plan::format_bytes(m_device));
  const QRectF band(plotLeft, top - kValueHeight - kDeviceBand, plotRight - plotLeft, kValueHeight);
  const int swatch = m_deviceOnAxis ? 18 : 0;
  const QString deviceText =
      firstThatFits(fm,
                    m_deviceOnAxis ? QStringList{tr("device %1").arg(size), size}
                                   : QStringList{tr("device %1 (off scale)").arg(size), tr("device %1").arg(size), size},
                    static_cast<int>(band.width()) - swatch);
  p.setPen(text);
  drawLabel(p, m_labels, band, Qt::AlignRight | Qt::AlignVCenter, deviceText);
  double ly = 0;
  if (m_deviceOnAxis) {
    ly = yOf(m_device);
    const double sx = band.right() - fm.horizontalAdvance(deviceText) - swatch;
    p.setPen(QPen(kLine, 1.5, Qt::DashLine));
    p.drawLine(QPointF(sx, band.center().y()), QPointF(sx + swatch - 4, band.center().y()));
  } else {
    // The axis stops at its top tick; two slanted strokes mark the break, the device line above.
    ly = band.bottom() + 3;
    const double by = top - kValueHeight + 2;
    p.setPen(QPen(text, 1));
    p.fillRect(QRectF(plotLeft - 5, by - 3, 10, 6), palette().window());
    p.drawLine(QPointF(plotLeft - 5, by + 1), QPointF(plotLeft + 5, by - 3));
    p.drawLine(QPointF(plotLeft - 5, by + 4), QPointF(plotLeft + 5, by));
  }
  p.setPen(QPen(kLine, 1.5, Qt::DashLine));
  p.drawLine(QPointF(plotLeft, ly), QPointF(plotRight, ly));
}

StepTimeChart::StepTimeChart(QWidget* parent) : QWidget(parent) {
  QSizePolicy policy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
}

QString StepTimeChart::partName(int part) {
  static const char* names[kParts] = {"compute", "recompute", "TP comm", "CP comm", "EP all-to-all", "PP comm", "DP comm", "bubble", "optimizer", "overhead"};
  return QString::fromLatin1(names[part]);
}

QColor StepTimeChart::partColor(int part) { return kStepColors[static_cast<size_t>(part)]; }

std::vector<int> StepTimeChart::legendIndices() const {
  std::vector<int> out;
  for (int i = 0; i < kParts; ++i) {
    const bool optional = i == kCpPart || i == kEpPart || i == kParts - 1;
    if (!optional || m_seconds[static_cast<size_t>(i)] > 0) out.push_back(i);
  }
  return out;
}

double StepTimeChart::total() const { return std::accumulate(m_seconds.begin(), m_seconds.end(), 0.0); }

void StepTimeChart::setEstimate(const stagecraft::plan::Estimate& e) {
  const auto& b = e.breakdown;
  m_seconds = {b.compute_s, b.recompute_s, b.tp_comm_s, b.cp_comm_s, b.moe_a2a_s, b.pp_comm_s, b.dp_comm_s, b.bubble_s, b.optimizer_s, b.overhead_s};
  updateGeometry();
  setMinimumHeight(heightForWidth(width()));
  update();
}

QString StepTimeChart::legendText(int part) const {
  const double sum = total();
  const double s = m_seconds[static_cast<size_t>(part)];
  return tr("%1 %2 (%3%)").arg(partName(part), formatSeconds(s)).arg(sum > 0 ? 100.0 * s / sum : 0.0, 0, 'f', 1);
}

// The widest legend entry (swatch, gap, text) plus the space between columns.
int StepTimeChart::legendColumnWidth() const {
  const QFontMetrics fm(smallFont(font()));
  int widest = 0;
  for (int i : legendIndices()) widest = std::max(widest, fm.horizontalAdvance(legendText(i)));
  return kSwatch + 4 + widest + kLegendGap;
}

int StepTimeChart::legendColumns(int w) const {
  return std::clamp((w - 2 * kMargin + kLegendGap) / std::max(1, legendColumnWidth()), 1, legendParts());
}

int StepTimeChart::heightForWidth(int w) const {
  const int columns = legendColumns(w);
  const int rows = (legendParts() + columns - 1) / columns;
  return kTitleHeight + kStepBarHeight + 4 + rows * kLegendRow + kMargin;
}

QSize StepTimeChart::sizeHint() const { return {480, heightForWidth(480)}; }

QSize StepTimeChart::minimumSizeHint() const { return {160, heightForWidth(160)}; }

void StepTimeChart::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  // Layouts that ask only for the minimum still leave room for every legend row.
  setMinimumHeight(heightForWidth(width()));
}

void StepTimeChart::paintEvent(QPaintEvent*) {
  m_labels.clear();
  QPainter p(this);
  p.setFont(smallFont(font()));
  const QColor text = palette().windowText().color();
  const double sum = total();
  p.setPen(text);
  drawLabel(p, m_labels, QRectF(kMargin, 0, width() - 2 * kMargin, kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
            sum > 0 ? tr("Step time %1").arg(formatSeconds(sum)) : tr("Step time"));
  if (sum <= 0) return;
  const double barWidth = width() - 2 * kMargin;
  double x = kMargin;
  for (int i = 0; i < kParts; ++i) {
    const double w = m_seconds[static_cast<size_t>(i)] / sum * barWidth;
    p.fillRect(QRectF(x, kTitleHeight, w, kStepBarHeight), partColor(i));
    x += w;
  }
  // Legend: name, seconds, share; in as many columns of the widest entry as fit.
  const int columns = legendColumns(width());
  const int columnWidth = legendColumnWidth();
  const int top = kTitleHeight + kStepBarHeight + 4;
  const std::vector<int> shown = legendIndices();
  for (size_t k = 0; k < shown.size(); ++k) {
    const int i = shown[k];
    const int lx = kMargin + static_cast<int>(k % static_cast<size_t>(columns)) * columnWidth;
    const int ly = top + static_cast<int>(k / static_cast<size_t>(columns)) * kLegendRow;
    p.fillRect(QRect(lx, ly + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch), partColor(i));
    p.setPen(text);
    const QRectF box(lx + kSwatch + 4, ly, std::min(columnWidth - kSwatch - 4, width() - kMargin - lx - kSwatch - 4), kLegendRow);
    drawLabel(p, m_labels, box, Qt::AlignLeft | Qt::AlignVCenter, p.fontMetrics().elidedText(legendText(i), Qt::ElideRight, static_cast<int>(box.width())));
  }
}
