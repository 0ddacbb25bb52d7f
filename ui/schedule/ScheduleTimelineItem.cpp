// ScheduleTimelineItem painting (see the header).
#include "schedule/ScheduleTimelineItem.h"

#include <QPaintEngine>
#include <QPainter>
#include <QStyleOptionGraphicsItem>

#include <algorithm>
#include <cmath>

namespace {

const QColor kForward(0x88, 0xCC, 0xEE);
const QColor kBackward(0x33, 0x22, 0x88);
const QColor kIdle(0xDD, 0xDD, 0xDD);
const QColor kIdleHatch(0x99, 0x99, 0x99);
const QColor kBlockLine(Qt::white);
constexpr int kChunkShade = 130;          // lighter()/darker() per local chunk
constexpr double kMinLabelWidth = 16.0;   // narrower blocks carry no number
constexpr double kMinTickSpacing = 48.0;  // pixels between time-axis ticks
constexpr double kTickLength = 4.0;
constexpr int kFontPx = 11;
constexpr double kLodText = 0.5;          // below this scale no text is drawn

}  // namespace

ScheduleTimelineItem::ScheduleTimelineItem() { setFlag(ItemUsesExtendedStyleOption, true); }

void ScheduleTimelineItem::setTimeline(const ScheduleTimeline& timeline) {
  m_timeline = timeline;
  updateBounds();
}

void ScheduleTimelineItem::setTimeScale(double sceneUnitsPerTime) {
  if (sceneUnitsPerTime > 0) m_scale = sceneUnitsPerTime;
  updateBounds();
}

void ScheduleTimelineItem::setSpan(double span) {
  m_span = std::max(0.0, span);
  updateBounds();
}

double ScheduleTimelineItem::span() const { return std::max(m_span, m_timeline.makespan); }

void ScheduleTimelineItem::setAxisUnit(const QString& unit) {
  m_unit = unit;
  update();
}

// At least one forward pass wide at the default scale, and room for the axis's last number past
// the span.
void ScheduleTimelineItem::updateBounds() {
  prepareGeometryChange();
  const double width = std::max(kUnit, span() * m_scale);
  m_bounds = QRectF(0, 0, kLabelWidth + width + kUnit, kAxisHeight + m_timeline.pp * (kRowHeight + kRowGap));
  update();
}

QRectF ScheduleTimelineItem::boundingRect() const { return m_bounds; }

QRectF ScheduleTimelineItem::blockRect(const ScheduleBlock& b) const {
  return QRectF(kLabelWidth + b.start * m_scale, kAxisHeight + b.ppRank * (kRowHeight + kRowGap), (b.end - b.start) * m_scale, kRowHeight);
}

QColor ScheduleTimelineItem::blockColor(const ScheduleBlock& b, int pp) {
  const int local = b.op.chunk / std::max(1, pp);
  QColor c = b.op.kind == stagecraft::runtime::PipeOp::Kind::kForward ? kForward : kBackward;
  for (int i = 0; i < local; ++i) c = b.op.kind == stagecraft::runtime::PipeOp::Kind::kForward ? c.darker(kChunkShade) : c.lighter(kChunkShade);
  return c;
}

void ScheduleTimelineItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
  const QRectF exposed = option->exposedRect.isEmpty() ? m_bounds : option->exposedRect;
  QFont f = painter->font();
  f.setPixelSize(kFontPx);
  painter->setFont(f);
  const int p = m_timeline.pp;
  const double end = span();
  const double spanWidth = end * m_scale;
  const bool vector = painter->paintEngine() && painter->paintEngine()->type() == QPaintEngine::SVG;

  // Rows: label and the whole span hatched; blocks cover the busy part, the rest reads as idle.
  for (int r = 0; r < p; ++r) {
    const double y = kAxisHeight + r * (kRowHeight + kRowGap);
    const QRectF row(kLabelWidth, y, spanWidth, kRowHeight);
    painter->fillRect(row, kIdle);
    // SVG files cannot carry Qt's pattern brushes (renderers drop them): plain grey there.
    if (!vector) painter->fillRect(row, QBrush(kIdleHatch, Qt::BDiagPattern));
    if (lod >= kLodText) {
      painter->setPen(Qt::black);
      painter->drawText(QRectF(0, y, kLabelWidth - 6, kRowHeight), Qt::AlignRight | Qt::AlignVCenter, QStringLiteral("pp %1").arg(r));
    }
  }

  const bool interleaved = m_timeline.virtualStages > 1;
  for (const auto& b : m_timeline.blocks) {
    const QRectF rect = blockRect(b);
    if (!rect.intersects(exposed)) continue;
    const QColor fill = blockColor(b, p);
    painter->fillRect(rect, fill);
    painter->setPen(QPen(kBlockLine, 1));
    painter->drawLine(rect.topLeft(), rect.bottomLeft());
    if (lod >= kLodText && rect.width() * lod >= kMinLabelWidth) {
      painter->setPen(fill.lightnessF() > 0.6 ? Qt::black : Qt::white);
      const QString mb = QString::number(b.op.micro_batch);
      const QString text = interleaved && rect.width() * lod >= 2 * kMinLabelWidth ? mb + QStringLiteral("·c%1").arg(b.op.chunk) : mb;
      painter->drawText(rect, Qt::AlignCenter, text);
    }
  }

  // Time axis in the timeline's unit, ticks at 1, 2, 5 x 10^k spacing that stays readable.
  if (lod >= kLodText && end > 0) {
    const double minUnits = kMinTickSpacing / (m_scale * std::max(lod, 1e-6));
    const double pow10 = std::pow(10.0, std::floor(std::log10(std::max(minUnits, 1e-9))));
    double step = pow10;
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
      if (pow10 * m >= minUnits) {
        step = pow10 * m;
        break;
      }
    }
    painter->setPen(Qt::black);
    painter->drawLine(QPointF(kLabelWidth, kAxisHeight - 2), QPointF(kLabelWidth + spanWidth, kAxisHeight - 2));
    for (double t = 0; t <= end + 1e-9 * std::max(1.0, end); t += step) {
      const double x = kLabelWidth + t * m_scale;
      painter->drawLine(QPointF(x, kAxisHeight - 2 - kTickLength), QPointF(x, kAxisHeight - 2));
      painter->drawText(QRectF(x - 30, 0, 60, kAxisHeight - 2 - kTickLength), Qt::AlignCenter, QString::number(t, 'g', 4));
    }
    if (!m_unit.isEmpty()) {
      painter->drawText(QRectF(0, 0, kLabelWidth - 6, kAxisHeight - 2 - kTickLength), Qt::AlignRight | Qt::AlignVCenter, m_unit);
    }
  }
}
