// StageStrip: layer cells, embedding and head cells, draggable stage boundaries (see the header).
#include "stages/StageStrip.h"

#include <QMouseEvent>
#include <QPainter>

#include <algorithm>
#include <cmath>

#include "common/StageColors.h"
#include "stagecraft/plan/partition.h"

namespace {

constexpr int kMargin = 8;             // left and right of the strip
constexpr int kEndCellWidth = 44;      // embedding and head cells
constexpr int kLabelHeight = 18;       // stage labels above the cells
constexpr int kCellTop = kLabelHeight + 4;
constexpr int kCellHeight = 40;
constexpr int kHandleOverhang = 5;     // boundary handles reach past the cells
constexpr int kGrabDistance = 6;       // pixels either side of a boundary that start a drag
constexpr double kMinLabelledCell = 18.0;  // narrower cells show no layer number
constexpr double kHandlePen = 3.0;
constexpr int kFontPx = 11;
const QColor kHandle(0x20, 0x20, 0x20);
const QColor kCellLine(Qt::white);

}  // namespace

StageStrip::StageStrip(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

QSize StageStrip::sizeHint() const { return {640, kCellTop + kCellHeight + kHandleOverhang + 20}; }
QSize StageStrip::minimumSizeHint() const { return {2 * kMargin + 2 * kEndCellWidth + 40, sizeHint().height()}; }

void StageStrip::setPlan(const stagecraft::plan::Plan& plan) {
  m_layers = static_cast<int>(plan.layer_stage.size());
  m_pp = std::max(1, plan.pp);
  m_planCounts = stagecraft::plan::stage_ids_to_counts(plan.layer_stage, plan.num_stages());
  m_counts = m_planCounts;
  m_drag = -1;
  unsetCursor();
  update();
}

std::vector<int> StageStrip::stageIds() const { return stagecraft::plan::counts_to_stage_ids(m_counts); }

int StageStrip::prefix(int chunk) const {
  int s = 0;
  for (int c = 0; c < chunk && c < static_cast<int>(m_counts.size()); ++c) s += m_counts[static_cast<size_t>(c)];
  return s;
}

int StageStrip::ppOfChunk(int chunk) const { return chunk % m_pp; }

double StageStrip::layerWidth() const {
  if (m_layers <= 0) return 0.0;
  return std::max(0.0, static_cast<double>(width() - 2 * kMargin - 2 * kEndCellWidth)) / m_layers;
}

double StageStrip::layerX(int layer) const { return kMargin + kEndCellWidth + layer * layerWidth(); }

double StageStrip::boundaryX(int b) const { return layerX(prefix(b + 1)); }

int StageStrip::stripCenterY() const { return kCellTop + kCellHeight / 2; }

int StageStrip::boundaryNear(double x) const {
  int best = -1;
  double bestDistance = kGrabDistance + 1;
  for (int b = 0; b < boundaryCount(); ++b) {
    const double d = std::abs(boundaryX(b) - x);
    if (d <= kGrabDistance && d < bestDistance) {
      best = b;
      bestDistance = d;
    }
  }
  return best;
}

void StageStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().window());
  if (m_layers <= 0 || m_counts.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("No plan"));
    return;
  }
  QFont f = font();
  f.setPixelSize(kFontPx);
  p.setFont(f);
  const double w = layerWidth();
  const int chunks = static_cast<int>(m_counts.size());

  // Embedding (stage 0) and head + loss (last stage) cells, hatched over their stage colour.
  const QRectF emb(kMargin, kCellTop, kEndCellWidth, kCellHeight);
  const QRectF head(layerX(m_layers), kCellTop, kEndCellWidth, kCellHeight);
  for (const auto& [cell, chunk, text] : {std::tuple{emb, 0, tr("emb")}, std::tuple{head, chunks - 1, tr("head")}}) {
    const QColor c = stageColor(ppOfChunk(chunk));
    p.fillRect(cell, c.lighter(140));
    p.fillRect(cell, QBrush(c, Qt::BDiagPattern));
    p.setPen(Qt::black);
    p.drawText(cell, Qt::AlignCenter, text);
  }

  // Layer cells by chunk.
  int layer = 0;
  for (int c = 0; c < chunks; ++c) {
    const QColor col = stageColor(ppOfChunk(c));
    const int n = m_counts[static_cast<size_t>(c)];
    const QRectF span(layerX(layer), kCellTop, n * w, kCellHeight);
    p.fillRect(span, col);
    if (w >= kMinLabelledCell) {
      p.setPen(kCellLine);
      for (int i = 1; i < n; ++i) p.drawLine(QPointF(span.left() + i * w, kCellTop), QPointF(span.left() + i * w, kCellTop + kCellHeight));
      p.setPen(textColorOn(col));
      for (int i = 0; i < n; ++i) p.drawText(QRectF(span.left() + i * w, kCellTop, w, kCellHeight), Qt::AlignCenter, QString::number(layer + i));
    }
    // Stage label above its span: the chunk, and its pp rank when interleaved.
    const QString label = chunks > m_pp ? tr("chunk %1 (pp %2)").arg(c).arg(ppOfChunk(c)) : tr("stage %1").arg(c);
    const QString shown = p.fontMetrics().horizontalAdvance(label) <= span.width() ? label : QString::number(c);
    p.setPen(palette().windowText().color());
    p.drawText(QRectF(span.left(), 0, span.width(), kLabelHeight), Qt::AlignCenter, shown);
    layer += n;
  }
  p.setPen(palette().windowText().color());
  p.drawText(QRectF(kMargin, kCellTop + kCellHeight + kHandleOverhang, width() - 2 * kMargin, 16), Qt::AlignLeft | Qt::AlignVCenter,
             tr("%1 layers · drag a black boundary to move layers between neighbouring stages").arg(m_layers));

  // Boundary handles.
  for (int b = 0; b < boundaryCount(); ++b) {
    const double x = boundaryX(b);
    p.setPen(QPen(b == m_drag ? QColor(Qt::red) : kHandle, kHandlePen));
    p.drawLine(QPointF(x, kCellTop - kHandleOverhang), QPointF(x, kCellTop + kCellHeight + kHandleOverhang));
  }
}

void StageStrip::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  m_drag = boundaryNear(event->position().x());
  if (m_drag >= 0) {
    setCursor(Qt::SplitHCursor);
    update();
  }
}

void StageStrip::mouseMoveEvent(QMouseEvent* event) {
  const double x = event->position().x();
  if (m_drag < 0) {
    if (boundaryNear(x) >= 0) setCursor(Qt::SplitHCursor);
    else unsetCursor();
    return;
  }
  const double w = layerWidth();
  if (w <= 0) return;
  // The boundary snaps to the nearest layer edge, leaving both neighbours at least one layer.
  const int lo = prefix(m_drag) + 1;
  const int hi = prefix(m_drag + 2) - 1;
  const int k = std::clamp(static_cast<int>(std::lround((x - layerX(0)) / w)), lo, hi);
  const int total = m_counts[static_cast<size_t>(m_drag)] + m_counts[static_cast<size_t>(m_drag + 1)];
  m_counts[static_cast<size_t>(m_drag)] = k - prefix(m_drag);
  m_counts[static_cast<size_t>(m_drag + 1)] = total - m_counts[static_cast<size_t>(m_drag)];
  update();
}

void StageStrip::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || m_drag < 0) return;
  mouseMoveEvent(event);
  m_drag = -1;
  unsetCursor();
  update();
  if (m_counts != m_planCounts) Q_EMIT partitionEdited(stageIds());
}
