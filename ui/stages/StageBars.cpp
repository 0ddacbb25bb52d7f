// StageBars: per-stage relative cost bars (see the header).
#include "stages/StageBars.h"

#include <QPainter>

#include <algorithm>

#include "common/StageColors.h"

namespace {

constexpr int kMargin = 8;
constexpr int kTitleHeight = 18;
constexpr int kValueHeight = 14;      // value text above each bar
constexpr int kAxisLabelHeight = 14;  // stage number under each bar
constexpr double kBarFill = 0.7;      // of a bar's slot
constexpr int kMaxSlot = 200;         // a bar's slot at most, so two stages do not fill a wide dock
constexpr int kFontPx = 11;
const QColor kBalancedLine(0x20, 0x20, 0x20);

}  // namespace

StageBars::StageBars(QWidget* parent) : QWidget(parent) { setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred); }

QSize StageBars::sizeHint() const { return {640, 160}; }

void StageBars::setPlan(const stagecraft::plan::Plan& plan) {
  m_cost.clear();
  for (const auto& s : plan.stages) m_cost.push_back(s.relative_cost);
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
  const QRect area(kMargin, 0, width() - 2 * kMargin, height());

  // Relative cost per stage: bars scaled to the largest, the 1.0 line marks a balanced stage.
  p.setPen(text);
  p.drawText(QRect(area.left(), 0, area.width(), kTitleHeight), Qt::AlignLeft | Qt::AlignVCenter,
             tr("Relative cost per stage (1.0 = average)"));
  if (m_cost.empty()) return;
  const int top = kTitleHeight + kValueHeight;
  const int bottom = height() - kAxisLabelHeight;
  const int plotHeight = std::max(1, bottom - top);
  const double maxCost = std::max(1.0, *std::max_element(m_cost.begin(), m_cost.end()));
  const double slot = std::min<double>(kMaxSlot, static_cast<double>(area.width()) / m_cost.size());
  for (size_t i = 0; i < m_cost.size(); ++i) {
    const double h = m_cost[i] / maxCost * plotHeight;
    const QRectF bar(area.left() + i * slot + slot * (1 - kBarFill) / 2, bottom - h, slot * kBarFill, h);
    p.fillRect(bar, stageColor(static_cast<int>(i) % m_pp));
    p.setPen(text);
    if (slot >= 28) {
      p.drawText(QRectF(bar.left() - slot, bar.top() - kValueHeight, bar.width() + 2 * slot, kValueHeight), Qt::AlignCenter,
                 QString::number(m_cost[i], 'f', 2));
    }
    if (slot >= 12) p.drawText(QRectF(area.left() + i * slot, bottom, slot, kAxisLabelHeight), Qt::AlignCenter, QString::number(i));
  }
  const double y1 = bottom - 1.0 / maxCost * plotHeight;
  p.setPen(QPen(kBalancedLine, 1, Qt::DashLine));
  p.drawLine(QPointF(area.left(), y1), QPointF(area.left() + slot * m_cost.size(), y1));
}
