// stagecraft: the desktop application.
//
//   stagecraft [CONFIG]
//
// Opens CONFIG (a Stagecraft YAML file) in the main window; with no argument, the default example
// configs/bert-large-3d.yaml, found beside the executable (../../configs from build/bin, ../configs,
// ../share/stagecraft/configs) or in the source tree it was built from. A missing or invalid CONFIG
// shows the engine's message and opens the default instead.
//
//   stagecraft --screenshot FILE.png [--select RANK] [--show DOCK] [--size WxH] [CONFIG]
//
// shows the window as usual, writes a picture of it once it has painted, and exits: the README's
// screenshots are taken this way from the real application under Xvfb. --select clicks a rank in
// the topology (its groups light up); --show raises a dock (stages, schedule, runs, ...); --size
// sizes the window (as 1920x1080; otherwise the saved size, or 1400 x 900 at first start).
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QIcon>
#include <QPixmap>
#include <QTabWidget>
#include <QTimer>

#include <cstdio>
#include <functional>

#include "layouts/LayoutSearch.h"
#include "layouts/LayoutsView.h"
#include "scaling/ScalingView.h"
#include "mainwindow/MainWindow.h"
#include "runs/RunsView.h"
#include "topology/TopologyScene.h"
#include "topology/TopologyView.h"

namespace {

constexpr auto kDefaultExample = "bert-large-3d.yaml";

QString defaultExample() {
  const QDir bin(QCoreApplication::applicationDirPath());
  const QStringList candidates = {
      bin.filePath(QStringLiteral("../../configs")),
      bin.filePath(QStringLiteral("../configs")),
      bin.filePath(QStringLiteral("../share/stagecraft/configs")),
      QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs"),
  };
  for (const QString& dir : candidates) {
    const QString path = QDir(dir).filePath(QLatin1String(kDefaultExample));
    if (QFileInfo::exists(path)) return QDir::cleanPath(path);
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("Stagecraft"));
  QCoreApplication::setApplicationName(QStringLiteral("Stagecraft"));
  QCoreApplication::setApplicationVersion(QStringLiteral(STAGECRAFT_VERSION));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/stagecraft/icon.svg")));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Plans hybrid-parallel training and runs it."));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("write a PNG of the window to FILE and exit"),
                                      QStringLiteral("FILE"));
  parser.addOption(screenshot);
  const QCommandLineOption select(QStringLiteral("select"), QStringLiteral("select RANK in the topology"), QStringLiteral("RANK"));
  parser.addOption(select);
  const QCommandLineOption show(QStringLiteral("show"), QStringLiteral("raise the dock named DOCK (setup, estimates, stages, schedule, runs, timeline: the runs' Timeline tab; layouts and scaling compute first)"),
                                QStringLiteral("DOCK"));
  parser.addOption(show);
  const QCommandLineOption size(QStringLiteral("size"), QStringLiteral("the window's size, WIDTHxHEIGHT (as 1920x1080)"), QStringLiteral("WxH"));
  parser.addOption(size);
  parser.addPositionalArgument(QStringLiteral("CONFIG"), QStringLiteral("a Stagecraft YAML configuration to open"), QStringLiteral("[CONFIG]"));
  parser.process(app);
  const QStringList args = parser.positionalArguments();
  if (args.size() > 1) {
    std::fprintf(stderr, "stagecraft: expected at most one CONFIG file, got %d (usage: stagecraft [CONFIG])\n",
                 static_cast<int>(args.size()));
    return 2;
  }

  QSize windowSize;
  if (parser.isSet(size)) {
    const QStringList wh = parser.value(size).toLower().split(QLatin1Char('x'));
    bool okW = false, okH = false;
    if (wh.size() == 2) windowSize = QSize(wh[0].toInt(&okW), wh[1].toInt(&okH));
    if (!okW || !okH || windowSize.width() < 640 || windowSize.height() < 480 || windowSize.width() > 8192 || windowSize.height() > 8192) {
      std::fprintf(stderr, "stagecraft: --size %s: expected WIDTHxHEIGHT from 640x480 to 8192x8192, as 1920x1080\n",
                   qPrintable(parser.value(size)));
      return 2;
    }
  }

  MainWindow window;
  if (windowSize.isValid()) window.resize(windowSize);
  window.show();
  bool opened = false;
  if (!args.isEmpty()) opened = window.openFile(args.first());  // on failure the message stays on screen
  if (!opened) {
    const QString example = defaultExample();
    if (!example.isEmpty()) window.openFile(example);
  }
  // Fit the drawing once the window has its final size.
  QTimer::singleShot(0, window.topologyView(), &TopologyView::zoomToFit);
  if (parser.isSet(select)) {
    bool ok = false;
    const int rank = parser.value(select).toInt(&ok);
    const int world = window.topologyView()->topologyScene()->plan().topology.world_size();
    if (!ok || rank < 0 || rank >= world) {
      std::fprintf(stderr, "stagecraft: --select %s: expected a rank from 0 to %d of the plan\n", qPrintable(parser.value(select)),
                   world - 1);
      return 2;
    }
    window.topologyView()->topologyScene()->selectRank(rank);
  }
  QWidget* grabbed = &window;  // what the screenshot shows
  if (parser.isSet(show)) {
    const bool timeline = parser.value(show).toLower() == QStringLiteral("timeline");
    auto* dock = window.findChild<QDockWidget*>(timeline ? QStringLiteral("runsDock") : parser.value(show).toLower() + QStringLiteral("Dock"));
    if (!dock) {
      std::fprintf(stderr, "stagecraft: --show %s: no such view; use setup, estimates, stages, schedule, runs, timeline, layouts or scaling\n",
                   qPrintable(parser.value(show)));
      return 2;
    }
    dock->show();
    dock->raise();
    if (timeline) {
      QTabWidget* tabs = dock->findChild<RunsView*>()->tabs();
      for (int i = 0; i < tabs->count(); ++i) {
        if (tabs->tabText(i).remove(QLatin1Char('&')) == QStringLiteral("Timeline")) tabs->setCurrentIndex(i);
      }
      if (parser.isSet(screenshot)) {  // the Runs view alone, tall enough for both timelines
        dock->setFloating(true);
        dock->resize(1400, 600);
        grabbed = dock;
      }
    }
    if (dock == window.findChild<QDockWidget*>(QStringLiteral("layoutsDock"))) window.findLayouts();
    if (dock == window.findChild<QDockWidget*>(QStringLiteral("scalingDock"))) window.showScaling();
  }
  std::function<void()> grab;  // lives until exec() returns: it reschedules itself
  if (parser.isSet(screenshot)) {
    const QString path = parser.value(screenshot);
    // After the event loop has laid out and painted the window once, and a layouts search ended.
    grab = [&window, grabbed, path, &grab] {
      if (window.layoutsView()->search()->isRunning() || window.scalingView()->isComputing()) {
        QTimer::singleShot(100, &window, grab);
        return;
      }
      const bool ok = grabbed->grab().save(path);
      if (!ok) std::fprintf(stderr, "stagecraft: cannot write the screenshot %s\n", qPrintable(path));
      QCoreApplication::exit(ok ? 0 : 1);
    };
    QTimer::singleShot(500, &window, grab);
  }
  return QApplication::exec();
}
