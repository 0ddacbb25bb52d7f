// Graphics items of the topology scene: one TopologyNodeItem per node (its panel and every GPU
// tile on it, painted by level of detail) and the TopologyLegendItem (stage colours, what an
// outline, a label and dimming mean). Items read the per-rank state from their TopologyScene;
// they hold none of their own beyond their node index.
#pragma once

#include <QColor>
#include <QGraphicsItem>
#include <QStringList>

class TopologyScene;

class TopologyNodeItem : public QGraphicsItem {
 public:
  enum { Type = UserType + 1 };

  TopologyNodeItem(const TopologyScene* scene, int node);
  int type() const override { return Type; }
  int node() const { return m_node; }

  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

  // The frame colour of the selected rank's tensor sub-groups of family `family` (bit order of
  // TopologyScene::subgroupMask), from the Okabe-Ito palette, apart from the stage colours' hues.
  static QColor subgroupColor(int family);
  static constexpr double kSubgroupPen = 2.0;  // frames nest inward by one pen width per family

  // Level-of-detail thresholds (view pixels per scene unit).
  static constexpr double kLodOutlines = 0.25;  // below: plain tiles, no outlines
  static constexpr double kLodLabels = 0.55;    // at and above: rank and DP replica text
  static constexpr double kLodDetail = 1.2;     // at and above: tp and pp coordinates too

 private:
  const TopologyScene* m_scene;
  int m_node;
};

class TopologyLegendItem : public QGraphicsItem {
 public:
  enum { Type = UserType + 2 };

  // `tensorGrid`: the plan uses a Colossal-AI 2d / 2.5d / 3d mode; explain the sub-group marks.
  // `tensorFamilies`: the Colossal-AI 2d / 2.5d / 3d sub-group families of the plan ("row",
  // "column", ...), empty for 1d; each gets its frame colour explained.
  // `cp`: the plan splits sequences, so the CP group has its mark too; `ep`: the plan splits its
  // expert layers over ranks, so the EP group has its mark.
  TopologyLegendItem(int stages, const QStringList& tensorFamilies, bool cp, bool ep = false);
  int type() const override { return Type; }
  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

  // Stage swatches drawn before "..." for very deep pipelines.
  static constexpr int kMaxSwatches = 16;

 private:
  int m_stages;
  QStringList m_families;
  int m_swatches;
  bool m_cp = false;
  bool m_ep = false;
};
