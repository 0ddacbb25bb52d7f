// TopologyView: zoom, pan, click and export around a TopologyScene (see the header).
#include "topology/TopologyView.h"

#include <QApplication>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QScrollBar>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

#include "common/ImageExport.h"
#include "topology/TopologyScene.h"

namespace {

constexpr double kZoomStep = 1.25;        // one wheel notch or one Ctrl +/-
constexpr double kMinZoom = 0.005;        // 1024 x 8 GPUs fit in a window at about 0.1
constexpr double kMaxZoom = 8.0;
constexpr double kWheelNotch = 120.0;     // angleDelta units per notch

}  // namespace

TopologyView::TopologyView(QWidget* parent) : QGraphicsView(parent), m_scene(new TopologyScene(this)) {
  setScene(m_scene);
  setRenderHint(QPainter::Antialiasing, true);
  setRenderHint(QPainter::TextAntialiasing, true);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setResizeAnchor(QGraphicsView::AnchorViewCenter);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setOptimizationFlag(QGraphicsView::DontSavePainterState, true);
  setDragMode(QGraphicsView::NoDrag);
  setMouseTracking(true);
  viewport()->setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setBackgroundBrush(Qt::white);
}

void TopologyView::setPlan(const stagecraft::plan::Plan& plan) {
  m_scene->setPlan(plan);
  const int world = plan.topology.world_size();
  if (world != m_lastWorldSize) {
    m_lastWorldSize = world;
    zoomToFit();
  }
}

void TopologyView::zoomToFit() {
  const QRectF r = m_scene->sceneRect();
  if (r.isEmpty()) return;
  fitInView(r, Qt::KeepAspectRatio);
}

double TopologyView::zoom() const { return transform().m11(); }

bool TopologyView::exportImage(const QString& path, QString* error) { return exportSceneImage(m_scene, path, error); }

void TopologyView::zoomIn() { scaleBy(kZoomStep); }
void TopologyView::zoomOut() { scaleBy(1.0 / kZoomStep); }

void TopologyView::scaleBy(double factor) {
  const double target = std::clamp(zoom() * factor, kMinZoom, kMaxZoom);
  const double applied = target / zoom();
  if (std::abs(applied - 1.0) > 1e-9) scale(applied, applied);
}

void TopologyView::wheelEvent(QWheelEvent* event) {
  const double notches = event->angleDelta().y() / kWheelNotch;
  if (notches == 0) {
    QGraphicsView::wheelEvent(event);
    return;
  }
  scaleBy(std::pow(kZoomStep, notches));
  event->accept();
}

void TopologyView::keyPressEvent(QKeyEvent* event) {
  if (event->modifiers() & Qt::ControlModifier) {
    switch (event->key()) {
      case Qt::Key_Plus:
      case Qt::Key_Equal:
        zoomIn();
        return;
      case Qt::Key_Minus:
        zoomOut();
        return;
      case Qt::Key_0:
        zoomToFit();
        return;
      default:
        break;
    }
  }
  if (event->key() == Qt::Key_Escape) {
    m_scene->selectRank(-1);
    return;
  }
  QGraphicsView::keyPressEvent(event);
}

void TopologyView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) {
    QGraphicsView::mousePressEvent(event);
    return;
  }
  m_pressed = true;
  m_panning = false;
  m_pressPos = m_lastPos = event->position().toPoint();
  event->accept();
}

void TopologyView::mouseMoveEvent(QMouseEvent* event) {
  const QPoint pos = event->position().toPoint();
  if (m_pressed) {
    if (!m_panning && (pos - m_pressPos).manhattanLength() >= QApplication::startDragDistance()) {
      m_panning = true;
      viewport()->setCursor(Qt::ClosedHandCursor);
    }
    if (m_panning) {
      const QPoint delta = pos - m_lastPos;
      horizontalScrollBar()->setValue(horizontalScrollBar()->value() - delta.x());
      verticalScrollBar()->setValue(verticalScrollBar()->value() - delta.y());
    }
    m_lastPos = pos;
    event->accept();
    return;
  }
  m_scene->hoverAt(mapToScene(pos));
  QGraphicsView::mouseMoveEvent(event);
}

void TopologyView::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !m_pressed) {
    QGraphicsView::mouseReleaseEvent(event);
    return;
  }
  if (!m_panning) m_scene->clickAt(mapToScene(event->position().toPoint()));
  m_pressed = false;
  m_panning = false;
  viewport()->unsetCursor();
  event->accept();
}

void TopologyView::leaveEvent(QEvent* event) {
  m_scene->hoverAt(QPointF(-1, -1));
  QGraphicsView::leaveEvent(event);
}
