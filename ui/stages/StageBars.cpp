// StageBars: per-stage relative cost and per-pp-rank memory bars (see the header).
#include "stages/StageBars.h"

#include <QPainter>

#include <algorithm>

#include "common/StageColors.h"

namespace {

constexpr int kMargin = 8;
constexpr int kTitleHeight = 18;
constexpr int kValueHeight = 14;      // value text above each bar
constexpr int kAxisLabelHeight = 14;  // stage number under each bar
constexpr int kChartGap = 24;
constexpr double kBarFill = 0.7;      // of a bar's slot
constexpr int kFontPx = 11;
const QColor kOver(0xD0, 0x20, 0x20);
const QColor kDeviceLine(0x20, 0x20, 0x20);

QString gib(double bytes) { return QString::number(bytes / (1024.0 * 1024.0 * 1024.0), 'f', 1); }

}  // namespace

StageBars::StageBars(QWidget* parent) : QWidget(parent) { setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred); }

QSize StageBars::sizeHint() const { return {640, 160}; }

void StageBars::setPlan(const stagecraft::plan::Plan& plan) {
  m_cost.clear();
  for (const auto& s : plan.stages) m_cost.push_back(s.relative_cost);
  m_memory.clear();
  for (const auto& m : plan.estimate.memory) m_memory.push_back(m.total());
  m_device = plan.estimate.device_memory_bytes;
  m_pp = std::max(1, plan.pp);
  update();
}

void StageBars::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  QFont f = font();
  f.setPixelSize(kFontPx);
  p.setFont(f);
  const QColor text = palette().windowText().color();
  const int chartWidth = (width() - 2 * kMargin - kChartGap) / 2;
  const QRect costArea(kMargin, 0, chartWidth, height());
  const QRect memArea(kMargin + chartWidth + kChartGap, 0, chartWidth, height());

  // Relative cost per stage: bars scaled to the largest, the 1.0 line marks a balanced stage.
  p.setPen(text);
  p.drawText(QRect(costArea.left(), 0, costArea.width(), kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
             tr("Relative cost per stage (1.0 = average)"));
  const int top = kTitleHeight + kValueHeight;
  const int bottom = height() - kAxisLabelHeight;
  const int plotHeight = std::max(1, bottom - top);
  if (!m_cost.empty()) {
    const double maxCost = std::max(1.0, *std::max_element(m_cost.begin(), m_cost.end()));
    const double slot = static_cast<double>(costArea.width()) / m_cost.size();
    for (size_t i = 0; i < m_cost.size(); ++i) {
      const double h = m_cost[i] / maxCost * plotHeight;
      const QRectF bar(costArea.left() + i * slot + slot * (1 - kBarFill) / 2, bottom - h, slot * kBarFill, h);
      p.fillRect(bar, stageColor(static_cast<int>(i) % m_pp));
      p.setPen(text);
      if (slot >= 28) {
        p.drawText(QRectF(bar.left() - slot, bar.top() - kValueHeight, bar.width() + 2 * slot, kValueHeight), Qt::AlignCenter,
                   QString::number(m_cost[i], 'f', 2));
      }
      if (slot >= 12) p.drawText(QRectF(costArea.left() + i * slot, bottom, slot, kAxisLabelHeight), Qt::AlignCenter, QString::number(i));
    }
    const double y1 = bottom - 1.0 / maxCost * plotHeight;
    p.setPen(QPen(kDeviceLine, 1, Qt::DashLine));
    p.drawLine(QPointF(costArea.left(), y1), QPointF(costArea.right(), y1));
  }

  // Memory per pp rank against the device's memory.
  p.setPen(text);
  p.drawText(QRect(memArea.left(), 0, memArea.width(), kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
             m_device > 0 ? tr("Memory per pp rank, GiB (line: device %1 GiB)").arg(gib(m_device)) : tr("Memory per pp rank, GiB"));
  if (!m_memory.empty()) {
    const double scale = std::max(m_device, *std::max_element(m_memory.begin(), m_memory.end()));
    const double slot = static_cast<double>(memArea.width()) / m_memory.size();
    for (size_t i = 0; i < m_memory.size(); ++i) {
      const double h = scale > 0 ? m_memory[i] / scale * plotHeight : 0.0;
      const QRectF bar(memArea.left() + i * slot + slot * (1 - kBarFill) / 2, bottom - h, slot * kBarFill, h);
      const bool over = m_device > 0 && m_memory[i] > m_device;
      p.fillRect(bar, over ? kOver : stageColor(static_cast<int>(i)));
      p.setPen(text);
      if (slot >= 28) {
        p.drawText(QRectF(bar.left() - slot, bar.top() - kValueHeight, bar.width() + 2 * slot, kValueHeight), Qt::AlignCenter,
                   gib(m_memory[i]));
      }
      if (slot >= 12) p.drawText(QRectF(memArea.left() + i * slot, bottom, slot, kAxisLabelHeight), Qt::AlignCenter, QString::number(i));
    }
    if (m_device > 0) {
      const double y = bottom - m_device / scale * plotHeight;
      p.setPen(QPen(kDeviceLine, 1.5, Qt::DashLine));
      p.drawLine(QPointF(memArea.left(), y), QPointF(memArea.right(), y));
    }
  }
}
