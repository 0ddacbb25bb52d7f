// ImageExport: writes a whole QGraphicsScene to a PNG (raster, QImage) or SVG (vector,
// QSvgGenerator) file, picked by the path's suffix. Used by the topology and schedule views.
#pragma once

#include <QString>

class QGraphicsScene;

// Renders scene->itemsBoundingRect() (plus a small margin) on a white background. PNGs are drawn
// at 2x the scene's units unless that makes the longer side exceed kMaxExportPixels, then
// scaled down to fit. Returns false and sets *error (when non-null) to one line naming what to
// fix: an unknown suffix, an empty scene, a file that cannot be written.
bool exportSceneImage(QGraphicsScene* scene, const QString& path, QString* error);

// The longest side of an exported PNG, pixels.
inline constexpr int kMaxExportPixels = 8192;
