// The desktop benchmarks' shared set-up (bench_gui_update, bench_layouts_latency): the window
// offscreen unless QT_QPA_PLATFORM names a platform, opened on the config of argv[2] or the
// GPT-3 175B example on 1,024 x 8 GPUs, and the figures they print.
#pragma once

#include <QApplication>
#include <QElapsedTimer>
#include <QString>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "mainwindow/MainWindow.h"

namespace bench {

// Before main's QApplication is made: the offscreen platform where none is chosen.
inline void offscreen_by_default() {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
}

// The config a benchmark opens: argv[2], else the 1,024 x 8 GPU example.
inline QString config_argument(int argc, char** argv) {
  return argc > 2 ? QString::fromLocal8Bit(argv[2]) : QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/gpt3-175b-1024x8.yaml");
}

// After it, before the window is made: the benchmarks' own settings organisation, so that a run
// neither reads nor changes the user's.
inline void own_settings() { QCoreApplication::setOrganizationName(QStringLiteral("StagecraftBench")); }

// Shows the window at width x height and opens config in it. False, with the window's error
// printed after the benchmark's name, where the config does not open.
inline bool open_window(MainWindow& window, int width, int height, const QString& config, const char* bench) {
  window.resize(width, height);
  window.show();
  if (window.openFile(config)) return true;
  std::fprintf(stderr, "%s: %s\n", bench, qPrintable(window.lastError()));
  return false;
}

inline double ms_since(const QElapsedTimer& t) { return static_cast<double>(t.nsecsElapsed()) / 1e6; }

struct Stats {
  double min = 0, median = 0, p99 = 0, max = 0;
};

// Zeros for no samples; p99 is the sample at 99% of the sorted order.
inline Stats stats(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)], v.back()};
}

}  // namespace bench
