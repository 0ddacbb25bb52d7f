// StageColors: the one palette every view colours pipeline stages (pp ranks) with, so that stage
// 2 is the same colour in the topology, the stage editor, the estimates and the schedule.
//
// Paul Tol's "muted" qualitative scheme (colour-blind safe, distinct in greyscale by lightness
// too), ordered so that neighbouring stages contrast. Stages past the palette's nine colours
// repeat it, alternately lighter and darker, so any stage count gets a colour.
#pragma once

#include <QColor>

// Fill colour of pipeline stage `stage` (>= 0; negative stages get neutral grey).
QColor stageColor(int stage);
// Black or white, whichever reads better on `background`.
QColor textColorOn(const QColor& background);
// `color` faded towards light grey: how items outside a selection are drawn.
QColor dimmedColor(const QColor& color);
