// TopologyNodeItem and TopologyLegendItem painting (see TopologyItems.h).
#include "topology/TopologyItems.h"

#include <QPainter>
#include <QStyleOptionGraphicsItem>

#include <algorithm>

#include "common/StageColors.h"
#include "topology/TopologyScene.h"

namespace {

// Node panel.
const QColor kPanelFill(0xF4, 0xF4, 0xF2);
const QColor kPanelBorder(0x9A, 0x9A, 0x9A);
constexpr double kPanelRadius = 6.0;
constexpr double kPanelPen = 1.0;
constexpr double kHeaderFontPx = 12.0;
// Tiles and outlines.
constexpr double kTileRadius = 3.0;
const QColor kOutline(0x20, 0x20, 0x20);
constexpr double kOutlinePen = 2.0;
constexpr double kOutlineInset = 0.35;   // of the tile gap: outlines of neighbouring groups stay apart
const QColor kSelectedFrame(0xE0, 0x10, 0x10);
constexpr double kSelectedPen = 4.0;
const QColor kHoverFrame(Qt::white);
const QColor kChangedMark(0xFF, 0x8C, 0x00);   // a rank whose group differs from the pinned plan's
constexpr double kChangedMarkSize = 12.0;     // the corner triangle's side, scene units
constexpr double kHoverPen = 2.0;
constexpr double kRankFontPx = 15.0;
constexpr double kSmallFontPx = 10.0;
constexpr double kRankDetailFontPx = 12.0;  // smaller rank number when three lines share a tile
constexpr double kTinyFontPx = 8.0;
constexpr double kTextMargin = 3.0;

// Legend.
constexpr double kSwatch = 16.0;
constexpr double kLegendRow = 22.0;
constexpr double kLegendColumn = 96.0;
constexpr double kLegendFontPx = 13.0;
constexpr int kLegendRowsPerColumn = 8;
constexpr int kLegendNotes = 4;   // text lines after the swatches

QFont pixelFont(const QFont& base, double px, bool bold = false) {
  QFont f = base;
  f.setPixelSize(static_cast<int>(px));
  f.setBold(bold);
  return f;
}

}  // namespace

TopologyNodeItem::TopologyNodeItem(const TopologyScene* scene, int node) : m_scene(scene), m_node(node) {
  setFlag(ItemUsesExtendedStyleOption, false);
  setCacheMode(NoCache);
}

QRectF TopologyNodeItem::boundingRect() const {
  const QRectF r = m_scene->nodeRect(m_node);
  // Outlines and the selection frame reach a little past the panel.
  return QRectF(QPointF(0, 0), r.size()).adjusted(-kSelectedPen, -kSelectedPen, kSelectedPen, kSelectedPen);
}

void TopologyNodeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
  const QRectF panel(QPointF(0, 0), m_scene->nodeRect(m_node).size());
  const QPointF origin = m_scene->nodeRect(m_node).topLeft();
  const auto& plan = m_scene->plan();
  const int world = plan.topology.world_size();
  const int gpus = std::max(1, plan.topology.spec().gpus_per_node);
  const int first = m_node * gpus;
  const int last = std::min(world, first + gpus);

  // Low detail: a flat panel and flat tiles, nothing else.
  if (lod < kLodOutlines) {
    painter->fillRect(panel, kPanelFill);
    for (int r = first; r < last; ++r) painter->fillRect(m_scene->tileRect(r).translated(-origin), m_scene->tileFill(r));
    return;
  }

  painter->setPen(QPen(kPanelBorder, kPanelPen));
  painter->setBrush(kPanelFill);
  painter->drawRoundedRect(panel, kPanelRadius, kPanelRadius);
  if (lod >= kLodLabels) {
    painter->setPen(Qt::black);
    painter->setFont(pixelFont(painter->font(), kHeaderFontPx, true));
    painter->drawText(QRectF(TopologyScene::kNodePadding, 0, panel.width() - 2 * TopologyScene::kNodePadding,
                             TopologyScene::kNodeHeader + TopologyScene::kNodePadding / 2),
                      Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("node %1").arg(m_node));
  }

  painter->setPen(Qt::NoPen);
  for (int r = first; r < last; ++r) {
    painter->setBrush(m_scene->tileFill(r));
    painter->drawRoundedRect(m_scene->tileRect(r).translated(-origin), kTileRadius, kTileRadius);
  }

  // TP group outlines: the border of the union of each group's tiles, drawn edge by edge where a
  // tile's neighbour belongs to another group (or is absent).
  if (plan.tp > 1) {
    const int cols = std::max(1, std::min(TopologyScene::kTilesPerRow, gpus));
    const double half = TopologyScene::kTileGap / 2;
    const double inset = TopologyScene::kTileGap * kOutlineInset;
    painter->setPen(QPen(kOutline, kOutlinePen, Qt::SolidLine, Qt::SquareCap));
    painter->setBrush(Qt::NoBrush);
    auto same = [&](int r, int local, int dc, int dr) {
      const int c = local % cols + dc;
      const int row = local / cols + dr;
      if (c < 0 || c >= cols || row < 0) return false;
      const int other = row * cols + c;
      if (other >= gpus || first + other >= last) return false;
      return m_scene->tpGroupId(first + other) == m_scene->tpGroupId(r);
    };
    for (int r = first; r < last; ++r) {
      const int local = r - first;
      const QRectF t = m_scene->tileRect(r).translated(-origin);
      const bool left = same(r, local, -1, 0), right = same(r, local, 1, 0);
      const bool up = same(r, local, 0, -1), down = same(r, local, 0, 1);
      const double x0 = t.left() - (left ? half : inset), x1 = t.right() + (right ? half : inset);
      const double y0 = t.top() - (up ? half : inset), y1 = t.bottom() + (down ? half : inset);
      if (!up) painter->drawLine(QPointF(x0, y0), QPointF(x1, y0));
      if (!down) painter->drawLine(QPointF(x0, y1), QPointF(x1, y1));
      if (!left) painter->drawLine(QPointF(x0, y0), QPointF(x0, y1));
      if (!right) painter->drawLine(QPointF(x1, y0), QPointF(x1, y1));
    }
  }

  // Colossal-AI: the selected rank's tensor sub-groups, one coloured frame per family inside the
  // tiles, nested so that a rank in several of them shows each.
  painter->setBrush(Qt::NoBrush);
  for (int r = first; r < last; ++r) {
    const uint8_t mask = m_scene->subgroupMask(r);
    if (mask == 0) continue;
    const QRectF t = m_scene->tileRect(r).translated(-origin);
    for (int f = 0; f < 8; ++f) {
      if (!(mask & (1u << f))) continue;
      const double in = kSubgroupPen * (f + 1);
      painter->setPen(QPen(subgroupColor(f), kSubgroupPen));
      painter->drawRect(t.adjusted(in, in, -in, -in));
    }
  }

  // Compared with a pinned plan: an orange corner on every rank whose TP, DP or PP group changed.
  if (m_scene->hasPinnedPlan()) {
    painter->setPen(Qt::NoPen);
    painter->setBrush(kChangedMark);
    for (int r = first; r < last; ++r) {
      if (!m_scene->changedGroups(r)) continue;
      const QRectF t = m_scene->tileRect(r).translated(-origin);
      const QPointF corner[3] = {t.topRight(), t.topRight() - QPointF(kChangedMarkSize, 0), t.topRight() + QPointF(0, kChangedMarkSize)};
      painter->drawPolygon(corner, 3);
    }
  }

  // The selected rank's groups: a mark per axis along the bottom of every tile in that axis's
  // group, in the axis's colour (the legend names them).
  if (m_scene->hasSelection()) {
    const auto marks = m_scene->axisMarks();
    painter->setPen(Qt::NoPen);
    for (int r = first; r < last; ++r) {
      const uint8_t h = m_scene->highlight(r);
      if (!(h & ~TopologyScene::kIsSelected)) continue;
      const QRectF t = m_scene->tileRect(r).translated(-origin);
      const double w = t.width() / static_cast<double>(marks.size() + 1);
      const double height = std::max(2.0, t.height() * 0.08);
      for (size_t a = 0; a < marks.size(); ++a) {
        if (!(h & marks[a].bit)) continue;
        painter->setBrush(marks[a].color);
        painter->drawRect(QRectF(t.left() + w * (0.5 + static_cast<double>(a)), t.bottom() - 2 * height, w * 0.9, height));
      }
    }
  }

  const int selected = m_scene->selectedRank();
  if (selected >= first && selected < last) {
    painter->setPen(QPen(kSelectedFrame, kSelectedPen));
    painter->setBrush(Qt::NoBrush);
    painter->drawRoundedRect(m_scene->tileRect(selected).translated(-origin), kTileRadius, kTileRadius);
  }
  const int hovered = m_scene->hoveredRank();
  if (hovered >= first && hovered < last && hovered != selected) {
    painter->setPen(QPen(kHoverFrame, kHoverPen));
    painter->setBrush(Qt::NoBrush);
    painter->drawRect(m_scene->tileRect(hovered).translated(-origin).adjusted(kHoverPen, kHoverPen, -kHoverPen, -kHoverPen));
  }

  if (lod < kLodLabels) return;
  const bool detail = lod >= kLodDetail;
  const QFont rankFont = pixelFont(painter->font(), detail ? kRankDetailFontPx : kRankFontPx, true);
  const QFont smallFont = pixelFont(painter->font(), kSmallFontPx);
  const QFont tinyFont = pixelFont(painter->font(), kTinyFontPx);
  for (int r = first; r < last; ++r) {
    const QRectF t = m_scene->tileRect(r).translated(-origin).adjusted(kTextMargin, kTextMargin, -kTextMargin, -kTextMargin);
    const auto c = plan.topology.coord(r);
    painter->setPen(textColorOn(m_scene->tileFill(r)));
    painter->setFont(rankFont);
    painter->drawText(t, Qt::AlignHCenter | Qt::AlignTop, QString::number(r));
    // The DP replica index always; the tp and pp coordinates when there is room to read them.
    painter->setFont(smallFont);
    painter->drawText(t, Qt::AlignHCenter | Qt::AlignBottom, QStringLiteral("d%1").arg(c.dp));
    // Colossal-AI: which of the selected rank's row / column / depth sub-groups hold this rank.
    const QString marks = m_scene->subgroupMarks(r);
    if (!marks.isEmpty()) {
      painter->setFont(tinyFont);
      painter->drawText(t, Qt::AlignLeft | Qt::AlignTop, marks);
    }
    if (detail) {
      painter->setFont(tinyFont);
      painter->drawText(t, Qt::AlignCenter,
                        plan.cp > 1 ? QStringLiteral("t%1 c%2 p%3").arg(c.tp).arg(c.cp).arg(c.pp) : QStringLiteral("t%1 p%2").arg(c.tp).arg(c.pp));
    }
  }
}

QColor TopologyNodeItem::subgroupColor(int family) {
  static const QColor kColors[] = {QColor(0xE6, 0x9F, 0x00), QColor(0x00, 0x72, 0xB2), QColor(0x00, 0x9E, 0x73),
                                   QColor(0xCC, 0x79, 0xA7)};
  constexpr int n = static_cast<int>(sizeof kColors / sizeof kColors[0]);
  return kColors[((family % n) + n) % n];
}

TopologyLegendItem::TopologyLegendItem(int stages, const QStringList& tensorFamilies, bool cp, bool ep)
    : m_stages(std::max(1, stages)), m_families(tensorFamilies), m_swatches(std::min(std::max(1, stages), kMaxSwatches)), m_cp(cp), m_ep(ep) {}

QRectF TopologyLegendItem::boundingRect() const {
  const int entries = m_swatches + (m_swatches < m_stages ? 1 : 0);
  const int columns = (entries + kLegendRowsPerColumn - 1) / kLegendRowsPerColumn;
  const int rows = std::min(entries, kLegendRowsPerColumn);
  const double notesWidth = 4 * kLegendColumn;
  return QRectF(0, 0, std::max(columns * kLegendColumn, notesWidth), (rows + kLegendNotes + static_cast<int>(m_families.size()) + 2) * kLegendRow);
}

void TopologyLegendItem::paint(QPainter* painter, const QStyleOptionGraphicsItem*, QWidget*) {
  painter->setFont(pixelFont(painter->font(), kLegendFontPx, true));
  painter->setPen(Qt::black);
  painter->drawText(QRectF(0, 0, kLegendColumn * 3, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                    QStringLiteral("Pipeline stage (pp rank)"));
  painter->setFont(pixelFont(painter->font(), kLegendFontPx));
  const double top = kLegendRow;
  int i = 0;
  for (; i < m_swatches; ++i) {
    const double x = (i / kLegendRowsPerColumn) * kLegendColumn;
    const double y = top + (i % kLegendRowsPerColumn) * kLegendRow;
    painter->setPen(Qt::NoPen);
    painter->setBrush(stageColor(i));
    painter->drawRect(QRectF(x, y + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch));
    painter->setPen(Qt::black);
    painter->drawText(QRectF(x + kSwatch + kTextMargin, y, kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                      QStringLiteral("stage %1").arg(i));
  }
  if (m_swatches < m_stages) {
    const double x = (i / kLegendRowsPerColumn) * kLegendColumn;
    const double y = top + (i % kLegendRowsPerColumn) * kLegendRow;
    painter->drawText(QRectF(x, y, kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                      QStringLiteral("... %1 stages").arg(m_stages));
  }
  const int rows = std::min(m_swatches + (m_swatches < m_stages ? 1 : 0), kLegendRowsPerColumn);
  double y = top + rows * kLegendRow;
  painter->setPen(QPen(kOutline, kOutlinePen));
  painter->setBrush(Qt::NoBrush);
  painter->drawRect(QRectF(0, y + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch));
  painter->drawText(QRectF(kSwatch + kTextMargin, y, 3 * kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                    QStringLiteral("outline: one tensor-parallel group"));
  y += kLegendRow;
  painter->drawText(QRectF(0, y, 3 * kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                    QStringLiteral("tile: rank; dN = data-parallel replica N"));
  y += kLegendRow;
  painter->setPen(QPen(kSelectedFrame, kSelectedPen / 2));
  painter->drawRect(QRectF(0, y + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch));
  painter->setPen(Qt::black);
  painter->drawText(QRectF(kSwatch + kTextMargin, y, 3 * kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                    QStringLiteral("selected rank; its TP, %1DP, PP%2 groups bright, marked:")
                        .arg(m_cp ? QStringLiteral("CP, ") : QString(), m_ep ? QStringLiteral(", EP (experts)") : QString()));
  // One swatch per axis in its mark's colour.
  y += kLegendRow;
  double x = 0;
  for (const auto& mark : TopologyScene::allAxisMarks()) {
    if ((mark.bit == TopologyScene::kInCp && !m_cp) || (mark.bit == TopologyScene::kInEp && !m_ep)) continue;
    painter->setPen(Qt::NoPen);
    painter->setBrush(mark.color);
    painter->drawRect(QRectF(x, y + (kLegendRow - kSwatch / 2) / 2, kSwatch, kSwatch / 2));
    painter->setPen(Qt::black);
    painter->drawText(QRectF(x + kSwatch + kTextMargin, y, kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                      QLatin1String(mark.name));
    x += kLegendColumn * 0.6;
  }
  y += kLegendRow;
  painter->setPen(Qt::NoPen);
  painter->setBrush(dimmedColor(stageColor(0)));
  painter->drawRect(QRectF(0, y + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch));
  painter->setPen(Qt::black);
  painter->drawText(QRectF(kSwatch + kTextMargin, y, 3 * kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                    QStringLiteral("dimmed: in none of them"));
  for (int f = 0; f < m_families.size(); ++f) {
    y += kLegendRow;
    painter->setPen(QPen(TopologyNodeItem::subgroupColor(f), TopologyNodeItem::kSubgroupPen));
    painter->setBrush(Qt::NoBrush);
    painter->drawRect(QRectF(0, y + (kLegendRow - kSwatch) / 2, kSwatch, kSwatch));
    painter->setPen(Qt::black);
    painter->drawText(QRectF(kSwatch + kTextMargin, y, 4 * kLegendColumn, kLegendRow), Qt::AlignLeft | Qt::AlignVCenter,
                      QStringLiteral("%1 (%2): the selected rank's %1 sub-group").arg(m_families[f], m_families[f].left(1)));
  }
}
