// StageColors: the shared stage palette (see StageColors.h).
#include "common/StageColors.h"

#include <array>

namespace {

// Paul Tol, "muted" (https://personal.sron.nl/~pault/), reordered for neighbour contrast.
constexpr std::array<QRgb, 9> kPalette = {
    0x332288,  // indigo
    0xDDCC77,  // sand
    0x117733,  // green
    0xCC6677,  // rose
    0x88CCEE,  // cyan
    0x882255,  // wine
    0x44AA99,  // teal
    0x999933,  // olive
    0xAA4499,  // purple
};
constexpr int kCycleShade = 135;   // lighter()/darker() factor for each repeat of the palette
constexpr int kDimAlpha = 70;      // how much of the original colour a dimmed item keeps (of 255)
const QColor kDimBase(0xEE, 0xEE, 0xEE);
const QColor kNeutral(0xBB, 0xBB, 0xBB);

}  // namespace

QColor stageColor(int stage) {
  if (stage < 0) return kNeutral;
  const int n = static_cast<int>(kPalette.size());
  const QColor base = QColor::fromRgb(kPalette[static_cast<size_t>(stage % n)]);
  const int cycle = stage / n;
  if (cycle == 0) return base;
  return cycle % 2 == 1 ? base.lighter(kCycleShade) : base.darker(kCycleShade);
}

QColor textColorOn(const QColor& background) {
  // Relative luminance (ITU-R BT.709 weights) of the background decides.
  const double y = 0.2126 * background.redF() + 0.7152 * background.greenF() + 0.0722 * background.blueF();
  return y > 0.5 ? QColor(Qt::black) : QColor(Qt::white);
}

QColor dimmedColor(const QColor& color) {
  // Integer channels, so the colour compares equal to a pixel drawn with it.
  auto mix = [](int base, int c) { return (base * (255 - kDimAlpha) + c * kDimAlpha + 127) / 255; };
  return QColor(mix(kDimBase.red(), color.red()), mix(kDimBase.green(), color.green()), mix(kDimBase.blue(), color.blue()));
}
