// TopologyScene: layout, per-rank state and selection of the topology drawing (see the header).
#include "topology/TopologyScene.h"

#include <QGraphicsSceneHelpEvent>
#include <QGraphicsSceneMouseEvent>
#include <QFontMetricsF>
#include <QGraphicsSimpleTextItem>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "common/StageColors.h"
#include "common/Text.h"
#include "topology/TopologyItems.h"

using stagecraft::config::Axis;
using stagecraft::config::TpMode;
using stagecraft::plan::ExpertAxis;

namespace {

constexpr double kLegendGap = 24.0;     // between the legend and the node grid, before scaling
constexpr double kInfoGap = 16.0;       // between the node grid and the info line, before scaling
constexpr double kLegendShare = 0.9;    // the legend (its text is about half its width) spans this share of the node grid's width
constexpr double kSceneMargin = 20.0;
constexpr int kMaxListedRanks = 12;     // a longer group is shortened with "..."
constexpr double kInfoFontPx = 14.0;

QString rankList(const std::vector<int>& ranks) {
  QStringList parts;
  const int n = static_cast<int>(ranks.size());
  const int shown = std::min(n, kMaxListedRanks);
  for (int i = 0; i < shown; ++i) parts << QString::number(ranks[static_cast<size_t>(i)]);
  QString s = QLatin1Char('[') + parts.join(QLatin1Char(',')) ;
  if (shown < n) s += QStringLiteral(",... %1 ranks").arg(n);
  return s + QLatin1Char(']');
}

QList<int> toQList(const std::vector<int>& v) { return QList<int>(v.begin(), v.end()); }

// The plan splits its expert layers over ranks: EP groups worth lighting.
bool hasExpertParallelism(const stagecraft::plan::Plan& plan) {
  return plan.config.model.moe.enabled() && plan.topology.expert_size(ExpertAxis::kEp) > 1;
}

QString layerRange(const stagecraft::plan::StagePlan& s) {
  if (s.num_layers <= 0) return QStringLiteral("no layers");
  if (s.num_layers == 1) return QStringLiteral("layer %1").arg(s.first_layer);
  return QStringLiteral("layers %1-%2").arg(s.first_layer).arg(s.first_layer + s.num_layers - 1);
}

}  // namespace

TopologyScene::TopologyScene(QObject* parent) : QGraphicsScene(parent) {
  // Hit-testing is arithmetic (rankAt) and there are at most a few thousand node items:
  // a linear scan beats maintaining a BSP tree on every rebuild.
  setItemIndexMethod(QGraphicsScene::NoIndex);
  m_info = new QGraphicsSimpleTextItem();
  QFont f = m_info->font();
  f.setPixelSize(static_cast<int>(kInfoFontPx));
  m_info->setFont(f);
  addItem(m_info);
}

TopologyScene::~TopologyScene() = default;

int TopologyScene::tilesPerRow() const { return std::max(1, std::min(kTilesPerRow, m_gpusPerNode)); }

void TopologyScene::setPlan(const stagecraft::plan::Plan& plan) {
  m_plan = plan;
  const auto& topo = m_plan.topology;
  const auto& spec = topo.spec();
  const int oldNodes = m_nodes;
  const int oldGpus = m_gpusPerNode;
  m_worldSize = topo.world_size();
  m_gpusPerNode = std::max(1, spec.gpus_per_node);
  m_nodes = m_worldSize > 0 ? (m_worldSize + m_gpusPerNode - 1) / m_gpusPerNode : 0;

  const size_t w = static_cast<size_t>(m_worldSize);
  m_pp.assign(w, 0);
  m_dp.assign(w, 0);
  m_tp.assign(w, 0);
  m_tpGroup.assign(w, 0);
  m_highlight.assign(w, 0);
  const int tpStride = m_worldSize > 0 ? topo.stride(Axis::kTp) : 1;
  for (int r = 0; r < m_worldSize; ++r) {
    const auto c = topo.coord(r);
    const size_t i = static_cast<size_t>(r);
    m_pp[i] = c.pp;
    m_dp[i] = c.dp;
    m_tp[i] = c.tp;
    m_tpGroup[i] = r - c.tp * tpStride;  // the group's member with tp coordinate 0
  }

  if (m_nodes != oldNodes || m_gpusPerNode != oldGpus || m_nodeItems.empty() != (m_nodes == 0) || !m_legend) {
    rebuildItems();
  } else {
    delete m_legend;
    m_legend = new TopologyLegendItem(m_plan.pp, tensorFamilies(), m_plan.cp > 1, hasExpertParallelism(m_plan));
    addItem(m_legend);
    placeAnnotations();
    for (auto* item : m_nodeItems) item->update();
  }

  if (m_selectedRank >= m_worldSize) {
    m_selectedRank = -1;
    Q_EMIT rankSelected(-1);
  }
  if (m_hoveredRank >= m_worldSize) m_hoveredRank = -1;
  updateChanged();
  updateHighlight();
}

void TopologyScene::setPinnedPlan(const stagecraft::plan::Plan* pinned) {
  if (pinned) {
    m_pinned = *pinned;
  } else {
    m_pinned.reset();
  }
  updateChanged();
  for (auto* item : m_nodeItems) item->update();
}

void TopologyScene::updateChanged() {
  m_changed.assign(static_cast<size_t>(m_worldSize), 0);
  if (!m_pinned || m_worldSize == 0) return;
  const auto& now = m_plan.topology;
  const auto& then = m_pinned->topology;
  if (then.world_size() != m_worldSize) {
    std::fill(m_changed.begin(), m_changed.end(), uint8_t{kInTp | kInDp | kInPp});
    return;
  }
  for (const AxisMark& mark : allAxisMarks()) {
    if (mark.expert) continue;  // the comparison is of the dense layers' groups
    // The group of every rank under the pinned plan, as its index in groups(); a rank changed
    // when its group now is not exactly one of those (the same members).
    std::vector<int> groupOf(static_cast<size_t>(m_worldSize), -1);
    const auto old = then.groups(mark.axis);
    for (size_t g = 0; g < old.size(); ++g) {
      for (int r : old[g]) groupOf[static_cast<size_t>(r)] = static_cast<int>(g);
    }
    for (const auto& group : now.groups(mark.axis)) {
      const int g = groupOf[static_cast<size_t>(group.front())];
      const bool same = g >= 0 && old[static_cast<size_t>(g)].size() == group.size() &&
                        std::all_of(group.begin(), group.end(), [&](int r) { return groupOf[static_cast<size_t>(r)] == g; });
      if (same) continue;
      for (int r : group) m_changed[static_cast<size_t>(r)] |= mark.bit;
    }
  }
}

std::vector<TopologyScene::AxisMark> TopologyScene::allAxisMarks() {
  // Okabe-Ito colours, apart from the Colossal-AI sub-group frames' (TopologyNodeItem::subgroupColor).
  return {{Axis::kTp, kInTp, "TP", QColor(0xD5, 0x5E, 0x00)},
          {Axis::kDp, kInDp, "DP", QColor(0x56, 0xB4, 0xE9)},
          {Axis::kPp, kInPp, "PP", QColor(0x7A, 0x3E, 0x9D)},
          {Axis::kCp, kInCp, "CP", QColor(0x00, 0x9E, 0x73)},
          {Axis::kTp, kInEp, "EP", QColor(0xCC, 0x79, 0xA7), true}};
}

std::vector<TopologyScene::AxisMark> TopologyScene::axisMarks() const {
  auto marks = allAxisMarks();
  const bool ep = hasExpertParallelism(m_plan);
  std::erase_if(marks, [&](const AxisMark& m) { return (m.bit == kInCp && m_plan.cp <= 1) || (m.bit == kInEp && !ep); });
  return marks;
}

uint8_t TopologyScene::changedGroups(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < m_changed.size() ? m_changed[static_cast<size_t>(rank)] : 0;
}

int TopologyScene::changedRankCount() const {
  return static_cast<int>(std::count_if(m_changed.begin(), m_changed.end(), [](uint8_t c) { return c != 0; }));
}

void TopologyScene::rebuildItems() {
  for (auto* item : m_nodeItems) delete item;
  m_nodeItems.clear();
  delete m_legend;
  m_legend = nullptr;

  const int cols = tilesPerRow();
  const int rows = (m_gpusPerNode + cols - 1) / cols;
  m_nodeSize = QSizeF(2 * kNodePadding + cols * kTileSize + (cols - 1) * kTileGap,
                      kNodeHeader + 2 * kNodePadding + rows * kTileSize + (rows - 1) * kTileGap);
  // Near-square grid of panels: nodesPerRow x nodesPerColumn with about equal sides.
  m_nodesPerRow = m_nodes > 0
                      ? std::clamp(static_cast<int>(std::ceil(std::sqrt(m_nodes * m_nodeSize.height() / m_nodeSize.width()))), 1, m_nodes)
                      : 1;
  m_nodeItems.reserve(static_cast<size_t>(m_nodes));
  for (int n = 0; n < m_nodes; ++n) {
    auto* item = new TopologyNodeItem(this, n);
    item->setPos(nodeRect(n).topLeft());
    addItem(item);
    m_nodeItems.push_back(item);
  }
  const int gridRows = m_nodes > 0 ? (m_nodes + m_nodesPerRow - 1) / m_nodesPerRow : 0;
  m_gridRect = QRectF(0, 0, m_nodesPerRow * (m_nodeSize.width() + kNodeGap) - kNodeGap,
                      gridRows * (m_nodeSize.height() + kNodeGap) - kNodeGap);

  m_legend = new TopologyLegendItem(m_plan.pp, tensorFamilies(), m_plan.cp > 1, hasExpertParallelism(m_plan));
  addItem(m_legend);
  placeAnnotations();
}

// The legend above the node grid and the info line below it are scaled with the grid (the legend
// spans kLegendShare of its width), so that a view fitted to the drawing shows them at the same
// readable size for one node of 8 GPUs and for 1,024 of them.
void TopologyScene::placeAnnotations() {
  if (!m_legend) return;
  const double legendWidth = std::max(1.0, m_legend->boundingRect().width());
  m_annotationScale = m_gridRect.width() > 0 ? kLegendShare * m_gridRect.width() / legendWidth : 1.0;
  m_legend->setScale(m_annotationScale);
  m_legend->setPos(0, -(m_legend->boundingRect().height() + kLegendGap) * m_annotationScale);
  m_info->setScale(m_annotationScale);
  m_info->setPos(0, m_gridRect.bottom() + kInfoGap * m_annotationScale);
  // The scene keeps room for the longest info text (a selected rank: its rank, a line per group,
  // the sub-groups or its experts), so that selecting a rank never moves the drawing under the mouse.
  const double infoLines = 2.0 + static_cast<double>(axisMarks().size()) + (m_plan.config.model.moe.enabled() ? 1.0 : 0.0);
  const QRectF drawing = m_gridRect.united(m_legend->sceneBoundingRect());
  const double bottom = m_info->pos().y() + infoLines * QFontMetricsF(m_info->font()).lineSpacing() * m_annotationScale;
  setSceneRect(QRectF(drawing.topLeft(), QPointF(drawing.right(), bottom))
                   .adjusted(-kSceneMargin, -kSceneMargin, kSceneMargin, kSceneMargin));
}

QRectF TopologyScene::nodeRect(int node) const {
  if (node < 0 || node >= m_nodes) return {};
  const int col = node % m_nodesPerRow;
  const int row = node / m_nodesPerRow;
  return QRectF(QPointF(col * (m_nodeSize.width() + kNodeGap), row * (m_nodeSize.height() + kNodeGap)), m_nodeSize);
}

QRectF TopologyScene::tileRect(int rank) const {
  if (rank < 0 || rank >= m_worldSize) return {};
  const QRectF node = nodeRect(rank / m_gpusPerNode);
  const int local = rank % m_gpusPerNode;
  const int cols = tilesPerRow();
  const double x = node.left() + kNodePadding + (local % cols) * (kTileSize + kTileGap);
  const double y = node.top() + kNodeHeader + kNodePadding + (local / cols) * (kTileSize + kTileGap);
  return QRectF(x, y, kTileSize, kTileSize);
}

int TopologyScene::rankAt(const QPointF& p) const {
  if (m_nodes == 0 || p.x() < 0 || p.y() < 0) return -1;
  const double pitchX = m_nodeSize.width() + kNodeGap;
  const double pitchY = m_nodeSize.height() + kNodeGap;
  const int col = static_cast<int>(p.x() / pitchX);
  const int row = static_cast<int>(p.y() / pitchY);
  if (col >= m_nodesPerRow) return -1;
  const int node = row * m_nodesPerRow + col;
  if (node >= m_nodes) return -1;
  const double x = p.x() - col * pitchX - kNodePadding;
  const double y = p.y() - row * pitchY - kNodeHeader - kNodePadding;
  if (x < 0 || y < 0) return -1;
  const double pitchTile = kTileSize + kTileGap;
  const int tc = static_cast<int>(x / pitchTile);
  const int tr = static_cast<int>(y / pitchTile);
  if (tc >= tilesPerRow() || x - tc * pitchTile > kTileSize || y - tr * pitchTile > kTileSize) return -1;
  const int local = tr * tilesPerRow() + tc;
  if (local >= m_gpusPerNode) return -1;
  const int rank = node * m_gpusPerNode + local;
  return rank < m_worldSize ? rank : -1;
}

QColor TopologyScene::tileColor(int rank) const {
  if (rank < 0 || rank >= m_worldSize) return {};
  return stageColor(m_pp[static_cast<size_t>(rank)]);
}

QColor TopologyScene::tileFill(int rank) const {
  const QColor c = tileColor(rank);
  if (m_selectedRank < 0 || rank < 0 || rank >= m_worldSize) return c;
  return m_highlight[static_cast<size_t>(rank)] ? c : dimmedColor(c);
}

int TopologyScene::tpGroupId(int rank) const {
  return rank >= 0 && rank < m_worldSize ? m_tpGroup[static_cast<size_t>(rank)] : -1;
}

uint8_t TopologyScene::highlight(int rank) const {
  return rank >= 0 && rank < m_worldSize ? m_highlight[static_cast<size_t>(rank)] : 0;
}

QList<QList<int>> TopologyScene::outlinedTpGroups() const {
  QList<QList<int>> groups;
  if (m_plan.tp <= 1) return groups;
  // Group the tiles by the outline id they are drawn with; ids are each group's lowest rank, so
  // visiting ranks in order lists groups by their lowest rank with members increasing.
  std::vector<int> slot(static_cast<size_t>(m_worldSize), -1);
  for (int r = 0; r < m_worldSize; ++r) {
    const int id = m_tpGroup[static_cast<size_t>(r)];
    int& s = slot[static_cast<size_t>(id)];
    if (s < 0) {
      s = static_cast<int>(groups.size());
      groups.append(QList<int>());
    }
    groups[s].append(r);
  }
  return groups;
}

void TopologyScene::selectRank(int rank) {
  if (rank < 0 || rank >= m_worldSize) rank = -1;
  if (rank == m_selectedRank) return;
  m_selectedRank = rank;
  updateHighlight();
  Q_EMIT rankSelected(rank);
}

QList<QList<int>> TopologyScene::highlightedGroups() const { return m_selectedGroups; }

void TopologyScene::updateHighlight() {
  std::fill(m_highlight.begin(), m_highlight.end(), uint8_t{0});
  m_selectedGroups.clear();
  if (m_selectedRank >= 0) {
    const auto& topo = m_plan.topology;
    for (const AxisMark& mark : axisMarks()) {
      const auto group = mark.expert ? topo.expert_group_of(m_selectedRank, ExpertAxis::kEp) : topo.group_of(m_selectedRank, mark.axis);
      for (int r : group) m_highlight[static_cast<size_t>(r)] |= mark.bit;
      m_selectedGroups.append(toQList(group));
    }
    m_highlight[static_cast<size_t>(m_selectedRank)] |= kIsSelected;
  }
  updateSubgroups();
  updateInfoText();
  for (auto* item : m_nodeItems) item->update();
}

QStringList TopologyScene::selectedSubgroups() const { return m_subgroupLines; }

QString TopologyScene::subgroupMarks(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(m_subgroupMask.size())) return {};
  QString marks;
  const uint8_t mask = m_subgroupMask[static_cast<size_t>(rank)];
  for (int f = 0; f < m_subgroupInitials.size(); ++f)
    if (mask & (1u << f)) marks += m_subgroupInitials[f];
  return marks;
}

uint8_t TopologyScene::subgroupMask(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(m_subgroupMask.size())) return 0;
  return m_subgroupMask[static_cast<size_t>(rank)];
}

QStringList TopologyScene::tensorFamilies() const {
  QStringList names;
  if (m_plan.topology.spec().tp_mode == TpMode::k1d) return names;
  for (const auto& family : m_plan.topology.tensor_subgroups()) names << QString::fromStdString(family.name);
  return names;
}

void TopologyScene::updateSubgroups() {
  m_subgroupLines.clear();
  m_subgroupInitials.clear();
  m_subgroupMask.assign(static_cast<size_t>(m_worldSize), 0);
  if (m_selectedRank < 0 || m_plan.topology.spec().tp_mode == TpMode::k1d) return;
  // Families are few (at most four: row, column, depth, xz); the mask has room for eight.
  int bit = 0;
  for (const auto& family : m_plan.topology.tensor_subgroups()) {
    if (bit >= 8) break;
    for (const auto& g : family.groups) {
      if (std::find(g.begin(), g.end(), m_selectedRank) == g.end()) continue;
      m_subgroupLines << QStringLiteral("%1 %2").arg(QString::fromStdString(family.name), rankList(g));
      for (int r : g) m_subgroupMask[static_cast<size_t>(r)] |= static_cast<uint8_t>(1u << bit);
      break;
    }
    m_subgroupInitials += family.name.empty() ? QLatin1Char('?') : QLatin1Char(family.name[0]);
    ++bit;
  }
}

void TopologyScene::updateInfoText() {
  if (!m_info) return;
  QString text;
  if (m_worldSize == 0) {
    text = QStringLiteral("No plan");
  } else if (m_selectedRank < 0) {
    text = QStringLiteral("%1 GPUs on %2 nodes: dp %3 x tp %4 x pp %5%7 (%6). Click a GPU to see its groups.")
               .arg(m_worldSize)
               .arg(m_nodes)
               .arg(m_plan.dp)
               .arg(m_plan.tp)
               .arg(m_plan.pp)
               .arg(qs(stagecraft::config::to_string(m_plan.topology.spec().tp_mode)))
               .arg(m_plan.cp > 1 ? QStringLiteral(" x cp %1").arg(m_plan.cp) : QString());
  } else {
    const auto& g = m_selectedGroups;
    auto vec = [](const QList<int>& l) { return std::vector<int>(l.begin(), l.end()); };
    // One group a line, so that long groups of big clusters keep the line as narrow as the grid.
    text = QStringLiteral("Rank %1").arg(m_selectedRank);
    const auto marks = axisMarks();
    for (size_t a = 0; a < marks.size() && a < static_cast<size_t>(g.size()); ++a) {
      text += QStringLiteral("\n%1 %2").arg(QLatin1String(marks[a].name), rankList(vec(g[static_cast<qsizetype>(a)])));
    }
    if (const QString experts = selectedExpertsText(); !experts.isEmpty()) text += QLatin1Char('\n') + experts;
    const QStringList sub = selectedSubgroups();
    if (!sub.isEmpty()) {
      text += QStringLiteral("\n%1 sub-groups (side %2):   ")
                  .arg(qs(stagecraft::config::to_string(m_plan.topology.spec().tp_mode)))
                  .arg(m_plan.topology.tensor_grid_side()) +
              sub.join(QStringLiteral("   "));
    }
  }
  m_info->setText(text);
}

QString TopologyScene::infoText() const { return m_info ? m_info->text() : QString(); }

QString TopologyScene::expertsText(int rank) const {
  const int experts = m_plan.config.model.moe.experts;
  if (experts <= 0 || rank < 0 || rank >= m_worldSize) return {};
  const auto range = m_plan.topology.experts_of(rank, experts);
  const int ep = m_plan.topology.expert_size(ExpertAxis::kEp);
  const QString which = range.count == 1 ? QStringLiteral("expert %1").arg(range.first)
                                         : QStringLiteral("experts %1-%2").arg(range.first).arg(range.first + range.count - 1);
  return ep > 1 ? QStringLiteral("%1 of %2 (ep rank %3)").arg(which).arg(experts).arg(m_plan.topology.coord(rank).ep)
                : QStringLiteral("%1 of %2 (no expert parallelism)").arg(which).arg(experts);
}

QString TopologyScene::selectedExpertsText() const {
  if (m_selectedRank < 0 || !m_plan.config.model.moe.enabled()) return {};
  const auto& topo = m_plan.topology;
  QString s = expertsText(m_selectedRank) + QStringLiteral(", expert-DP group ") + rankList(topo.expert_group_of(m_selectedRank, ExpertAxis::kDp));
  if (topo.expert_size(ExpertAxis::kTp) > 1) s += QStringLiteral(", expert TP group ") + rankList(topo.expert_group_of(m_selectedRank, ExpertAxis::kTp));
  return s;
}

QString TopologyScene::rankToolTip(int rank) const {
  if (rank < 0 || rank >= m_worldSize) return {};
  const auto c = m_plan.topology.coord(rank);
  QString s = QStringLiteral("Rank %1\nnode %2, local rank %3\ndp %4 · tp %5 · pp %6")
                  .arg(rank)
                  .arg(c.node)
                  .arg(c.local_rank)
                  .arg(c.dp)
                  .arg(c.tp)
                  .arg(c.pp);
  if (m_plan.cp > 1) s += QStringLiteral(" · cp %1").arg(c.cp);
  if (m_plan.config.model.moe.enabled()) s += QLatin1Char('\n') + expertsText(rank);
  const int side = m_plan.topology.tensor_grid_side();
  if (side > 0) {
    const int i = c.tp % side;
    const int j = (c.tp / side) % side;
    const int k = c.tp / (side * side);
    s += QStringLiteral("\ntensor grid i %1 · j %2 · k %3").arg(i).arg(j).arg(k);
  }
  for (const auto& st : m_plan.stages) {
    if (st.pp_rank != c.pp) continue;
    s += QStringLiteral("\nstage %1: %2").arg(st.stage).arg(layerRange(st));
    if (st.has_embedding) s += QStringLiteral(" + embedding");
    if (st.has_head) s += QStringLiteral(" + head, loss");
  }
  return s;
}

void TopologyScene::clickAt(const QPointF& scenePos) { selectRank(rankAt(scenePos)); }

void TopologyScene::hoverAt(const QPointF& scenePos) {
  const int rank = rankAt(scenePos);
  if (rank == m_hoveredRank) return;
  const int old = m_hoveredRank;
  m_hoveredRank = rank;
  for (int r : {old, rank}) {
    if (r >= 0) m_nodeItems[static_cast<size_t>(r / m_gpusPerNode)]->update();
  }
  Q_EMIT rankHovered(rank);
}

void TopologyScene::mouseMoveEvent(QGraphicsSceneMouseEvent* event) {
  hoverAt(event->scenePos());
  QGraphicsScene::mouseMoveEvent(event);
}

void TopologyScene::mousePressEvent(QGraphicsSceneMouseEvent* event) {
  // Clicks arrive through TopologyView (press + release without a drag); a scene shown in another
  // view selects on press.
  if (event->button() == Qt::LeftButton) {
    clickAt(event->scenePos());
    event->accept();
    return;
  }
  QGraphicsScene::mousePressEvent(event);
}

void TopologyScene::helpEvent(QGraphicsSceneHelpEvent* event) {
  const int rank = rankAt(event->scenePos());
  if (rank < 0) {
    QToolTip::hideText();
    event->ignore();
    return;
  }
  QToolTip::showText(event->screenPos(), rankToolTip(rank), event->widget());
  event->accept();
}
