// TopologyScene: the plan's ranks drawn as GPU tiles on node panels, and the selection state.
//
// Nodes are panels laid out in a near-square grid; each panel holds its node's GPUs as tiles in
// rows of kTilesPerRow. A tile is filled with stageColor(pp rank), shows its rank and DP replica
// index (at enough zoom), and every TP group is outlined (the border of the union of its tiles,
// per node when a group spans nodes). One NodeItem per node paints all its tiles, by level of
// detail, so 1024 x 8 GPUs rebuild in a few milliseconds and pan smoothly.
//
// The scene owns the drawing's state: the plan, the selected and hovered rank. Selecting a rank
// highlights its TP, DP and PP groups (CP with context parallelism, EP with expert parallelism:
// the ranks that split its MoE layers' experts; everything else is dimmed), lists the experts it
// holds and its expert-DP group, and its Colossal-AI 2d / 2.5d / 3d tensor sub-groups (row,
// column, depth, ...) in the info panel. Rank geometry is
// pure arithmetic (rankAt, tileRect), so hit-testing needs no item index.
#pragma once

#include <QGraphicsScene>
#include <QList>
#include <QRectF>
#include <QString>

#include <cstdint>
#include <optional>
#include <vector>

#include "stagecraft/plan/plan.h"

class QGraphicsSimpleTextItem;
class TopologyLegendItem;
class TopologyNodeItem;

class TopologyScene : public QGraphicsScene {
  Q_OBJECT

 public:
  explicit TopologyScene(QObject* parent = nullptr);
  ~TopologyScene() override;

  // Rebuilds the items for the new plan. Keeps the selected rank when it still exists.
  void setPlan(const stagecraft::plan::Plan& plan);
  const stagecraft::plan::Plan& plan() const { return m_plan; }
  bool hasPlan() const { return m_worldSize > 0; }

  int selectedRank() const { return m_selectedRank; }  // -1 when none
  // Highlights the rank's TP, DP and PP groups; -1 (or a rank out of range) clears. Emits
  // rankSelected when the selection changes.
  void selectRank(int rank);
  // [TP, DP, PP] groups of the selected rank (then CP and EP when the plan has them, as
  // axisMarks()), empty when none is selected.
  QList<QList<int>> highlightedGroups() const;
  // The TP groups drawn outlined, reconstructed from the tiles' outline ids (each group's ranks
  // in increasing order, groups by their lowest rank). Empty when tp = 1 (nothing is outlined).
  QList<QList<int>> outlinedTpGroups() const;
  // The selected rank's Colossal-AI tensor sub-groups as "name: [ranks]" lines (empty for 1d).
  QStringList selectedSubgroups() const;
  // The initials of the selected rank's tensor sub-groups that `rank` belongs to, as drawn in the
  // tile's corner ("rc": same row and column sub-group; "" for none or 1d).
  QString subgroupMarks(int rank) const;
  // Bit f set: `rank` is in the selected rank's sub-group of family f (tensorFamilies()[f]).
  uint8_t subgroupMask(int rank) const;
  // The plan's Colossal-AI sub-group families in bit order ("row", "column", ...); empty for 1d.
  QStringList tensorFamilies() const;

  int hoveredRank() const { return m_hoveredRank; }
  // The rank whose tile holds `scenePos`, or -1.
  int rankAt(const QPointF& scenePos) const;
  // Scene rectangle of rank's tile (empty for a rank out of range).
  QRectF tileRect(int rank) const;
  // Scene rectangle of a node's panel.
  QRectF nodeRect(int node) const;
  // The tile's stage colour, stageColor(pp of rank), before any dimming.
  QColor tileColor(int rank) const;
  // The colour the tile is drawn with now: dimmed when a selection exists and the rank is in none
  // of the selected rank's groups.
  QColor tileFill(int rank) const;
  // The experts the rank holds of each MoE layer: "experts 2-3 of 8 (ep rank 1)"; empty without
  // experts.
  QString expertsText(int rank) const;
  // The selected rank's expert lines of the info panel: its experts, expert-DP group (and expert
  // TP group when experts are split); empty without a selection or experts.
  QString selectedExpertsText() const;
  // Tooltip text: rank, node, local rank, dp/tp/pp coordinates, stage and its layers, its experts.
  QString rankToolTip(int rank) const;
  // The line under the grid: the layout, or the selected rank's groups one a line.
  QString infoText() const;
  // The TP group id (lowest rank of its TP group) a tile is outlined with.
  int tpGroupId(int rank) const;
  // Compare with a pinned plan: a rank "changed group" on an axis when the ranks it shares its TP,
  // DP or PP group with differ between the pinned plan and this one (a plan of another world size
  // changes every rank). Changed ranks get a corner mark. nullptr clears the comparison.
  void setPinnedPlan(const stagecraft::plan::Plan* pinned);
  bool hasPinnedPlan() const { return m_pinned.has_value(); }
  // Bits kInTp / kInDp / kInPp / kInCp: the axes on which `rank`'s group changed; 0 without a pinned plan.
  uint8_t changedGroups(int rank) const;
  // How many ranks changed a group on any axis.
  int changedRankCount() const;

  // Bit flags of how a rank relates to the selection (kInTp | kInDp | kInPp | kInCp | kInEp | kIsSelected).
  enum Highlight : uint8_t { kInTp = 1, kInDp = 2, kInPp = 4, kIsSelected = 8, kInCp = 16, kInEp = 32 };
  // The axes a selection lights, in the order highlightedGroups() lists them (TP, DP, PP, then CP
  // when the plan has context parallelism, EP when its expert layers are split over ep > 1
  // ranks), each with its bit, name and colour. EP is an axis of the expert layers' mapping
  // (plan/topology.h ExpertAxis::kEp), not a config::Axis: `expert` says so and `axis` is unused.
  struct AxisMark {
    stagecraft::config::Axis axis;
    uint8_t bit;
    const char* name;
    QColor color;
    bool expert = false;
  };
  std::vector<AxisMark> axisMarks() const;
  static std::vector<AxisMark> allAxisMarks();
  uint8_t highlight(int rank) const;
  bool hasSelection() const { return m_selectedRank >= 0; }

  // Selects the rank under scenePos (or clears) — a click. Emits rankSelected when it changes.
  void clickAt(const QPointF& scenePos);
  // Sets the hovered rank (or -1); emits rankHovered when it changes.
  void hoverAt(const QPointF& scenePos);

  // Geometry of the drawing, scene units.
  static constexpr double kTileSize = 44.0;
  static constexpr double kTileGap = 6.0;
  static constexpr double kNodePadding = 10.0;
  static constexpr double kNodeHeader = 18.0;
  static constexpr double kNodeGap = 16.0;
  static constexpr int kTilesPerRow = 4;

 Q_SIGNALS:
  void rankSelected(int rank);
  void rankHovered(int rank);

 protected:
  void mouseMoveEvent(QGraphicsSceneMouseEvent* event) override;
  void mousePressEvent(QGraphicsSceneMouseEvent* event) override;
  void helpEvent(QGraphicsSceneHelpEvent* event) override;

 private:
  void rebuildItems();
  void updateHighlight();
  void updateChanged();
  void updateInfoText();
  void placeAnnotations();
  void updateSubgroups();
  int tilesPerRow() const;

  stagecraft::plan::Plan m_plan;
  int m_worldSize = 0;
  int m_gpusPerNode = 1;
  int m_nodes = 0;
  int m_nodesPerRow = 1;
  QSizeF m_nodeSize;
  // Per rank, from the topology (index = rank).
  std::vector<int> m_pp, m_dp, m_tp, m_tpGroup;
  std::vector<uint8_t> m_highlight;
  std::optional<stagecraft::plan::Plan> m_pinned;
  std::vector<uint8_t> m_changed;  // changedGroups() of every rank
  int m_selectedRank = -1;
  int m_hoveredRank = -1;
  QList<QList<int>> m_selectedGroups;  // [TP, DP, PP] of the selected rank
  QStringList m_subgroupLines;         // "name [ranks]" of the selected rank's sub-groups
  std::vector<uint8_t> m_subgroupMask; // per rank: bit f = in the selected rank's sub-group of family f
  QString m_subgroupInitials;          // initial of each family, by bit
  std::vector<TopologyNodeItem*> m_nodeItems;
  TopologyLegendItem* m_legend = nullptr;
  QGraphicsSimpleTextItem* m_info = nullptr;
  double m_annotationScale = 1.0;  // of the legend and the info line, set by placeAnnotations()
  QRectF m_gridRect;
};
