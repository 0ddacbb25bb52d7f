// TopologyView: the view onto a TopologyScene — zoom (wheel, Ctrl +/-, Ctrl 0 to fit), pan by
// dragging with the left button (a press and release without moving is a click that selects the
// rank under it), image export.
#pragma once

#include <QGraphicsView>
#include <QPoint>
#include <QString>

#include "stagecraft/plan/plan.h"

class TopologyScene;

class TopologyView : public QGraphicsView {
  Q_OBJECT

 public:
  explicit TopologyView(QWidget* parent = nullptr);

  TopologyScene* topologyScene() const { return m_scene; }
  // Hands the plan to the scene; fits the drawing to the view when the world size changed.
  void setPlan(const stagecraft::plan::Plan& plan);
  void zoomToFit();
  // The whole scene to .png or .svg by the path's suffix; false with *error set on failure.
  bool exportImage(const QString& path, QString* error);
  // Current scale (view pixels per scene unit).
  double zoom() const;

 public Q_SLOTS:
  void zoomIn();
  void zoomOut();

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void scaleBy(double factor);

  TopologyScene* m_scene = nullptr;
  int m_lastWorldSize = -1;
  bool m_pressed = false;
  bool m_panning = false;
  QPoint m_pressPos;
  QPoint m_lastPos;
};
