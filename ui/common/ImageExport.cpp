// ImageExport: scene to PNG or SVG (see ImageExport.h).
#include "common/ImageExport.h"

#include <QFileInfo>
#include <QGraphicsScene>
#include <QImage>
#include <QImageWriter>
#include <QPainter>
#include <QSvgGenerator>

#include <algorithm>

namespace {

constexpr double kMargin = 8.0;      // scene units around the drawing
constexpr double kPngScale = 2.0;    // device pixels per scene unit for PNGs (sharp on hi-dpi)

void setError(QString* error, const QString& message) {
  if (error) *error = message;
}

}  // namespace

bool exportSceneImage(QGraphicsScene* scene, const QString& path, QString* error) {
  if (!scene) {
    setError(error, QStringLiteral("export: there is no drawing to export"));
    return false;
  }
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix != QLatin1String("png") && suffix != QLatin1String("svg")) {
    setError(error, QStringLiteral("export %1: unknown image type '%2'; name the file .png or .svg")
                        .arg(path, suffix.isEmpty() ? QStringLiteral("(none)") : QLatin1Char('.') + suffix));
    return false;
  }
  const QRectF source = scene->itemsBoundingRect().adjusted(-kMargin, -kMargin, kMargin, kMargin);
  if (scene->items().isEmpty() || source.width() <= 2 * kMargin || source.height() <= 2 * kMargin) {
    setError(error, QStringLiteral("export %1: the drawing is empty; load a plan first").arg(path));
    return false;
  }

  if (suffix == QLatin1String("svg")) {
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(source.size().toSize());
    svg.setViewBox(QRectF(QPointF(0, 0), source.size()));
    svg.setTitle(QStringLiteral("Stagecraft"));
    QPainter painter;
    if (!painter.begin(&svg)) {
      setError(error, QStringLiteral("export %1: cannot write the file; check the folder exists and is writable").arg(path));
      return false;
    }
    painter.fillRect(QRectF(QPointF(0, 0), source.size()), Qt::white);
    scene->render(&painter, QRectF(QPointF(0, 0), source.size()), source);
    painter.end();
    if (QFileInfo(path).size() <= 0) {
      setError(error, QStringLiteral("export %1: nothing was written; check the folder exists and is writable").arg(path));
      return false;
    }
    return true;
  }

  const double longest = std::max(source.width(), source.height());
  const double scale = std::min(kPngScale, kMaxExportPixels / longest);
  const QSize size(std::max(1, static_cast<int>(source.width() * scale)),
                   std::max(1, static_cast<int>(source.height() * scale)));
  QImage image(size, QImage::Format_ARGB32_Premultiplied);
  if (image.isNull()) {
    setError(error, QStringLiteral("export %1: not enough memory for a %2 x %3 image").arg(path).arg(size.width()).arg(size.height()));
    return false;
  }
  image.fill(Qt::white);
  {
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setRenderHint(QPainter::TextAntialiasing);
    scene->render(&painter, QRectF(QPointF(0, 0), QSizeF(size)), source);
  }
  QImageWriter writer(path, "png");
  if (!writer.write(image)) {
    setError(error, QStringLiteral("export %1: %2").arg(path, writer.errorString()));
    return false;
  }
  return true;
}
