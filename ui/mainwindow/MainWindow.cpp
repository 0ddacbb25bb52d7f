// MainWindow: views in docks around the topology, menus, status bar, settings, file actions.
#include "mainwindow/MainWindow.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDesktopServices>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollArea>
#include <QMetaObject>
#include <QSettings>
#include <QStatusBar>
#include <QUndoStack>
#include <QUrl>

#include "common/Text.h"
#include "document/PlanDocument.h"
#include "estimates/EstimatesView.h"
#include "layouts/LayoutsView.h"
#include "scaling/ScalingView.h"
#include "runs/CalibrateDialog.h"
#include "runs/RunLocallyDialog.h"
#include "runs/RunManager.h"
#include "runs/RunsView.h"
#include "schedule/ScheduleView.h"
#include "setup/SetupPanel.h"
#include "stages/StageEditor.h"
#include "topology/TopologyScene.h"
#include "topology/TopologyView.h"

namespace cfg = stagecraft::config;

namespace {

constexpr int kMaxRecentFiles = 8;
constexpr int kStatusMessageMs = 8000;
constexpr int kBottomDockHeight = 240;    // pixels, first start
constexpr int kSetupDockWidth = 440;      // pixels, first start
constexpr int kEstimatesDockWidth = 420;  // pixels, first start
constexpr int kLayoutsDockWidth = 680;    // pixels, when a search shows the Layouts dock
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;


struct FrameworkEntry {
  stagecraft::interop::Framework framework;
  const char* label;
  const char* filter;
};

// Menu order and file-dialog filters of the frameworks.
const FrameworkEntry kFrameworks[] = {
    {stagecraft::interop::Framework::kLibai, "LiBai", "LiBai config (*.py);;All files (*)"},
    {stagecraft::interop::Framework::kPaddle, "PaddlePaddle", "PaddleFleetX config (*.yaml *.yml);;All files (*)"},
    {stagecraft::interop::Framework::kColossalai, "Colossal-AI", "Colossal-AI config (*.py);;All files (*)"},
    {stagecraft::interop::Framework::kMegatron, "Megatron-LM", "Megatron-LM launch script (*.sh);;All files (*)"},
    {stagecraft::interop::Framework::kDeepspeed, "DeepSpeed", "DeepSpeed config (*.json);;All files (*)"},
    {stagecraft::interop::Framework::kHf, "Hugging Face model", "Hugging Face config.json (config.json *.json);;All files (*)"},
    {stagecraft::interop::Framework::kTorchtitan, "torchtitan", "torchtitan launch script (*.sh);;All files (*)"},
};

}  // namespace

// The library's resources (resources/stagecraft.qrc) live in a static library: register them once.
static void initResources() { Q_INIT_RESOURCE(stagecraft); }

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), m_document(new PlanDocument(this)) {
  initResources();
  setWindowIcon(QIcon(QStringLiteral(":/stagecraft/icon.svg")));
  createViews();
  createMenus();
  createRunViews();
  wireDocument();
  readSettings();
  if (m_document->hasPlan()) showPlan(m_document->plan());
  updateTitle();
}

MainWindow::~MainWindow() = default;

void MainWindow::createViews() {
  m_topology = new TopologyView(this);
  setCentralWidget(m_topology);
  m_setup = new SetupPanel(m_document, this);
  m_stages = new StageEditor(this);
  m_estimates = new EstimatesView(this);
  m_schedule = new ScheduleView(this);
  m_viewMenu = new QMenu(tr("&View"), this);

  auto dock = [this](QWidget* w, const QString& title, const QString& name, Qt::DockWidgetArea area) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(name);  // saveState() keys docks by object name
    d->setWidget(w);
    addViewDock(d, area);
    return d;
  };
  QDockWidget* setup = dock(m_setup, tr("Setup"), QStringLiteral("setupDock"), Qt::LeftDockWidgetArea);
  m_layouts = new LayoutsView(m_document, this);
  // In a scroll area: the view's fields, chart and table scroll in a short window instead of
  // holding the whole window taller than the screen.
  auto* layoutsScroll = new QScrollArea(this);
  layoutsScroll->setWidget(m_layouts);
  layoutsScroll->setWidgetResizable(true);
  layoutsScroll->setFrameShape(QFrame::NoFrame);
  m_layoutsDock = dock(layoutsScroll, tr("Layouts"), QStringLiteral("layoutsDock"), Qt::LeftDockWidgetArea);
  tabifyDockWidget(setup, m_layoutsDock);
  setup->raise();
  // The Setup and Estimates columns start at widths that read (resizeDocks below).
  QDockWidget* estimates = dock(m_estimates, tr("Estimates"), QStringLiteral("estimatesDock"), Qt::RightDockWidgetArea);
  QDockWidget* stages = dock(m_stages, tr("Stages"), QStringLiteral("stagesDock"), Qt::BottomDockWidgetArea);
  m_stagesDock = stages;
  QDockWidget* schedule = dock(m_schedule, tr("Schedule"), QStringLiteral("scheduleDock"), Qt::BottomDockWidgetArea);
  tabifyDockWidget(stages, schedule);
  m_scaling = new ScalingView(m_document, this);
  m_scalingDock = dock(m_scaling, tr("Scaling"), QStringLiteral("scalingDock"), Qt::BottomDockWidgetArea);
  tabifyDockWidget(schedule, m_scalingDock);
  stages->raise();
  // The topology keeps most of the height; a saved layout (readSettings) replaces this.
  resizeDocks({stages}, {kBottomDockHeight}, Qt::Vertical);
  resizeDocks({setup, estimates}, {kSetupDockWidth, kEstimatesDockWidth}, Qt::Horizontal);

  m_summary = new QLabel(this);
  m_summary->setObjectName(QStringLiteral("planSummary"));
  m_invalid = new QLabel(this);
  m_invalid->setObjectName(QStringLiteral("invalidConfig"));
  m_invalid->setStyleSheet(QStringLiteral("color: #d62728;"));
  m_warnings = new QLabel(this);
  m_warnings->setObjectName(QStringLiteral("planWarnings"));
  m_warnings->setStyleSheet(QStringLiteral("color: #b8860b;"));
  statusBar()->addWidget(m_summary, 1);
  statusBar()->addPermanentWidget(m_invalid);
  statusBar()->addPermanentWidget(m_warnings);

  m_runDialog = new RunLocallyDialog(this);
}

void MainWindow::createRunViews() {
  m_runs = new RunManager(m_document, this);
  m_runsDock = new QDockWidget(tr("Runs"), this);
  m_runsDock->setObjectName(QStringLiteral("runsDock"));  // saveState() keys docks by object name
  m_runsDock->setWidget(m_runs->runsView());
  addViewDock(m_runsDock, Qt::BottomDockWidgetArea);
  // A tab beside Stages and Schedule: the topology keeps the height of the window.
  tabifyDockWidget(m_stagesDock, m_runsDock);
  m_stagesDock->raise();
  m_runMenu->addSeparator();
  m_runs->addRunActions(m_runMenu);
  connect(m_runs, &RunManager::runStarted, this, [this] {
    m_runsDock->show();
    m_runsDock->raise();
  });
  // A profile calibrated from runs becomes the plan's device: one undoable edit of the cluster.
  connect(m_runs->runsView()->calibrateDialog(), &CalibrateDialog::useProfileRequested, this, [this](const QString& path, const QString& base) {
    cfg::RunConfig config = m_document->config();
    if (QString::compare(qs(config.cluster.device), base, Qt::CaseInsensitive) != 0) config.cluster.device_fields = {};
    config.cluster.device = base.toStdString();
    config.cluster.device_fields.profile = path.toStdString();
    m_document->setConfig(config, tr("Use device profile %1").arg(QFileInfo(path).fileName()));
  });
}

void MainWindow::addViewDock(QDockWidget* dock, Qt::DockWidgetArea area) {
  addDockWidget(area, dock);
  m_viewMenu->addAction(dock->toggleViewAction());
}

void MainWindow::createMenus() {
  createFileMenu();

  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  QAction* undo = m_document->undoStack()->createUndoAction(this, tr("&Undo"));
  undo->setShortcuts(QKeySequence::Undo);
  QAction* redo = m_document->undoStack()->createRedoAction(this, tr("&Redo"));
  redo->setShortcuts(QKeySequence::Redo);
  edit->addAction(undo);
  edit->addAction(redo);
  edit->addSeparator();
  QAction* find = edit->addAction(tr("Find &Layouts"), this, &MainWindow::findLayouts);
  find->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_F));

  menuBar()->addMenu(m_viewMenu);
  m_viewMenu->addSeparator();
  m_viewMenu->addAction(tr("How It &Scales"), this, &MainWindow::showScaling);
  m_viewMenu->addSeparator();
  QAction* fit = m_viewMenu->addAction(tr("Zoom to &Fit"), m_topology, &TopologyView::zoomToFit);
  fit->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
  m_viewMenu->addAction(tr("Zoom &In"), QKeySequence::ZoomIn, m_topology, &TopologyView::zoomIn);
  m_viewMenu->addAction(tr("Zoom &Out"), QKeySequence::ZoomOut, m_topology, &TopologyView::zoomOut);

  m_runMenu = menuBar()->addMenu(tr("&Run"));
  QAction* run = m_runMenu->addAction(tr("Run &Locally..."), this, &MainWindow::runLocally);
  run->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* guide = help->addAction(tr("&User Guide"), this, &MainWindow::openUserGuide);
  guide->setShortcut(QKeySequence::HelpContents);
  help->addAction(tr("&About Stagecraft"), this, [this] {
    QMessageBox::about(this, tr("About Stagecraft"),
                       tr("<b>Stagecraft %1</b><p>Plans hybrid-parallel (data, tensor, pipeline) training: which GPU ranks "
                          "form every group and stage, memory and step time, exports for LiBai, PaddlePaddle, Colossal-AI, "
                          "Megatron-LM and DeepSpeed, and training runs with its own engine.</p>")
                           .arg(QCoreApplication::applicationVersion()));
  });
  help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
}

// The guide's folder: the installed copy beside the program (bin/../share/doc/stagecraft/docs)
// when there is one, else the source tree's docs/.
void MainWindow::openUserGuide() {
  const QString installed =
      QDir::cleanPath(QCoreApplication::applicationDirPath() + QStringLiteral("/../share/doc/stagecraft/docs"));
  const QString source = QStringLiteral(STAGECRAFT_SOURCE_GUIDE_DIR);
  QString dir;
  for (const QString& candidate : {installed, source}) {
    if (QFileInfo(candidate + QStringLiteral("/cli.md")).isFile()) {
      dir = candidate;
      break;
    }
  }
  if (dir.isEmpty()) {
    showInfo(tr("User Guide"), tr("The user guide is not installed: neither %1 nor %2 holds it.").arg(installed, source));
    return;
  }
  if (!QDesktopServices::openUrl(QUrl::fromLocalFile(dir))) {
    showInfo(tr("User Guide"), tr("No program here opens %1; the guide is the Markdown files in that folder.").arg(dir));
  }
}

void MainWindow::createFileMenu() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&New"), QKeySequence::New, this, [this] {
    if (maybeSave()) m_document->newDocument();
  });
  file->addAction(tr("&Open..."), QKeySequence::Open, this, [this] {
    if (!maybeSave()) return;
    const QString path = QFileDialog::getOpenFileName(this, tr("Open configuration"), startDir(),
                                                      tr("Stagecraft configuration (*.yaml *.yml);;All files (*)"));
    if (!path.isEmpty()) openFile(path);
  });
  m_recentMenu = file->addMenu(tr("Open &Recent"));
  file->addAction(tr("&Save"), QKeySequence::Save, this, &MainWindow::saveFile);
  file->addAction(tr("Save &As..."), QKeySequence::SaveAs, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save configuration"), startDir(),
                                                      tr("Stagecraft configuration (*.yaml *.yml)"));
    if (!path.isEmpty()) saveFileAs(path);
  });
  file->addSeparator();
  QMenu* import = file->addMenu(tr("&Import from"));
  QMenu* exportMenu = file->addMenu(tr("&Export to"));
  for (const FrameworkEntry& f : kFrameworks) {
    const QString label = QString::fromLatin1(f.label);
    const QString filter = QString::fromLatin1(f.filter);
    const stagecraft::interop::Framework fw = f.framework;
    if (stagecraft::interop::can_import(fw)) {
      import->addAction(label + QStringLiteral("..."), this, [this, fw, label, filter] {
        if (!maybeSave()) return;
        const QString path = QFileDialog::getOpenFileName(this, tr("Import from %1").arg(label), startDir(), filter);
        if (!path.isEmpty()) importFrom(fw, path);
      });
    }
    exportMenu->addAction(label + QStringLiteral("..."), this, [this, fw, label, filter] {
      const QString path = QFileDialog::getSaveFileName(this, tr("Export to %1").arg(label), startDir(), filter);
      if (!path.isEmpty()) exportTo(fw, path);
    });
  }
  QMenu* diagram = file->addMenu(tr("Export &Topology Diagram"));
  QMenu* schedule = file->addMenu(tr("Export &Schedule"));
  for (const char* suffix : {"png", "svg"}) {
    const QString s = QString::fromLatin1(suffix);
    const QString filter = tr("%1 image (*.%2)").arg(s.toUpper(), s);
    diagram->addAction(s.toUpper() + QStringLiteral("..."), this, [this, filter] {
      const QString path = QFileDialog::getSaveFileName(this, tr("Export topology diagram"), startDir(), filter);
      if (!path.isEmpty()) exportTopologyImage(path);
    });
    schedule->addAction(s.toUpper() + QStringLiteral("..."), this, [this, filter] {
      const QString path = QFileDialog::getSaveFileName(this, tr("Export schedule"), startDir(), filter);
      if (!path.isEmpty()) exportScheduleImage(path);
    });
  }
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::wireDocument() {
  connect(m_document, &PlanDocument::planChanged, this, &MainWindow::showPlan);
  connect(m_layouts, &LayoutsView::previewRequested, this, &MainWindow::showPreview);
  // Pinned: the topology marks the ranks whose groups differ from the pinned plan's.
  connect(m_estimates, &EstimatesView::planPinned, this,
          [this](const stagecraft::plan::Plan& plan) { m_topology->topologyScene()->setPinnedPlan(&plan); });
  connect(m_estimates, &EstimatesView::planUnpinned, this, [this] { m_topology->topologyScene()->setPinnedPlan(nullptr); });
  connect(m_layouts, &LayoutsView::previewEnded, this, [this] {
    if (m_document->hasPlan()) showPlan(m_document->plan());
  });
  connect(m_document, &PlanDocument::problemsChanged, this, &MainWindow::showProblems);
  connect(m_document, &PlanDocument::filePathChanged, this, &MainWindow::updateTitle);
  connect(m_document, &PlanDocument::modifiedChanged, this, &MainWindow::updateTitle);
  connect(m_stages, &StageEditor::partitionEdited, m_document, &PlanDocument::setPartition);
  connect(m_stages, &StageEditor::balanceRequested, this, [this] { m_document->setPartitionKind(cfg::PartitionKind::kBalanced); });
  connect(m_stages, &StageEditor::uniformRequested, this, [this] { m_document->setPartitionKind(cfg::PartitionKind::kUniform); });
}

void MainWindow::showPlan(const stagecraft::plan::Plan& plan) {
  m_topology->setPlan(plan);
  m_stages->setPlan(plan);
  m_estimates->setPlan(plan);
  m_schedule->setPlan(plan);
  const auto& e = plan.estimate;
  QString text = tr("%1 GPUs (%2 x %3)  ·  dp %4 · tp %5 · pp %6")
                     .arg(plan.topology.world_size())
                     .arg(plan.config.cluster.nodes)
                     .arg(plan.config.cluster.gpus_per_node)
                     .arg(plan.dp)
                     .arg(plan.tp)
                     .arg(plan.pp);
  if (plan.virtual_stages > 1) text += tr(" x v %1").arg(plan.virtual_stages);
  if (plan.cp > 1) text += tr(" · cp %1").arg(plan.cp);
  if (plan.config.parallel.zero > 0) text += tr(" · ZeRO %1").arg(plan.config.parallel.zero);
  text += tr("  ·  m %1 · %2 · bubble %3%").arg(plan.micro_batches).arg(qs(cfg::to_string(plan.config.pipeline.schedule)))
              .arg(plan.bubble_fraction() * 100.0, 0, 'f', 1);
  text += tr("  ·  peak %1 of %2 GiB").arg(e.peak_memory_bytes / kGiB, 0, 'f', 1).arg(e.device_memory_bytes / kGiB, 0, 'f', 0);
  if (e.step_time_s > 0) text += tr("  ·  %1 s/step · MFU %2%").arg(e.step_time_s, 0, 'g', 3).arg(e.mfu * 100.0, 0, 'f', 1);
  m_summary->setText(text);
  QStringList warnings;
  for (const auto& w : plan.warnings) warnings << qs(w);
  m_warnings->setText(warnings.isEmpty() ? QString() : tr("%n warning(s)", nullptr, static_cast<int>(warnings.size())));
  m_warnings->setToolTip(warnings.join(QLatin1Char('\n')));
}

void MainWindow::showPreview(const stagecraft::plan::Plan& plan) {
  m_topology->setPlan(plan);
  m_stages->setPlan(plan);
  m_estimates->setPlan(plan);
  m_schedule->setPlan(plan);
  m_summary->setText(tr("Preview (not applied): dp %1 · tp %2 · pp %3%8  ·  peak %4 of %5 GiB  ·  %6 s/step · MFU %7%")
                         .arg(plan.dp)
                         .arg(plan.tp)
                         .arg(plan.pp)
                         .arg(plan.estimate.peak_memory_bytes / kGiB, 0, 'f', 1)
                         .arg(plan.estimate.device_memory_bytes / kGiB, 0, 'f', 0)
                         .arg(plan.estimate.step_time_s, 0, 'g', 3)
                         .arg(plan.estimate.mfu * 100.0, 0, 'f', 1)
                         .arg(plan.cp > 1 ? tr(" · cp %1").arg(plan.cp) : QString()));
}

void MainWindow::showScaling() {
  m_scalingDock->show();
  m_scalingDock->raise();
  m_scaling->compute();
}

void MainWindow::findLayouts() {
  m_layoutsDock->show();
  m_layoutsDock->raise();
  // The chart and the table of layouts want more room than the Setup form: widen the column to
  // kLayoutsDockWidth when it is narrower and the window leaves the topology enough.
  if (!m_layoutsDock->isFloating() && m_layoutsDock->width() < kLayoutsDockWidth && width() >= 2 * kLayoutsDockWidth) {
    resizeDocks({m_layoutsDock}, {kLayoutsDockWidth}, Qt::Horizontal);
  }
  m_layouts->findLayouts();
}

void MainWindow::showProblems(const QList<ConfigProblem>& problems) {
  if (problems.isEmpty()) {
    m_invalid->clear();
    m_invalid->setToolTip(QString());
    return;
  }
  m_invalid->setText(tr("Invalid: %1 (showing the last valid plan)").arg(problems.first().message));
  QStringList all;
  for (const auto& p : problems) all << p.message;
  m_invalid->setToolTip(all.join(QLatin1Char('\n')));
}

QString MainWindow::summaryText() const { return m_summary->text(); }

QString MainWindow::warningsText() const { return m_warnings->toolTip(); }

void MainWindow::updateTitle() {
  setWindowTitle(tr("%1[*] — Stagecraft").arg(m_document->displayName()));
  setWindowModified(m_document->isModified());
}

void MainWindow::showError(const QString& title, const QString& message) {
  m_lastError = message;
  statusBar()->showMessage(message, kStatusMessageMs);
  // Non-blocking: the window stays usable (and scripted tests never wait on a dialog).
  auto* box = new QMessageBox(QMessageBox::Warning, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

void MainWindow::showInfo(const QString& title, const QString& message) {
  statusBar()->showMessage(title, kStatusMessageMs);
  auto* box = new QMessageBox(QMessageBox::Information, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

bool MainWindow::openFile(const QString& path) {
  QString error;
  if (!m_document->open(path, &error)) {
    showError(tr("Cannot open %1").arg(QFileInfo(path).fileName()), error);
    return false;
  }
  addRecent(m_document->filePath());
  m_topology->zoomToFit();
  statusBar()->showMessage(tr("Opened %1").arg(m_document->filePath()), kStatusMessageMs);
  return true;
}

bool MainWindow::saveFile() {
  if (m_document->filePath().isEmpty()) {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save configuration"), startDir(),
                                                      tr("Stagecraft configuration (*.yaml *.yml)"));
    return !path.isEmpty() && saveFileAs(path);
  }
  QString error;
  if (!m_document->save(&error)) {
    showError(tr("Cannot save"), error);
    return false;
  }
  statusBar()->showMessage(tr("Saved %1").arg(m_document->filePath()), kStatusMessageMs);
  return true;
}

bool MainWindow::saveFileAs(const QString& path) {
  QString error;
  if (!m_document->saveAs(path, &error)) {
    showError(tr("Cannot save"), error);
    return false;
  }
  addRecent(m_document->filePath());
  statusBar()->showMessage(tr("Saved %1").arg(m_document->filePath()), kStatusMessageMs);
  return true;
}

bool MainWindow::importFrom(stagecraft::interop::Framework from, const QString& path) {
  QString error;
  if (!m_document->importFrom(from, path, &error)) {
    showError(tr("Cannot import %1").arg(QFileInfo(path).fileName()), error);
    return false;
  }
  m_topology->zoomToFit();
  statusBar()->showMessage(tr("Imported %1").arg(path), kStatusMessageMs);
  return true;
}

bool MainWindow::exportTo(stagecraft::interop::Framework to, const QString& path) {
  QString error;
  QStringList notes, written;
  if (!m_document->exportTo(to, path, &error, &notes, &written)) {
    showError(tr("Cannot export to %1").arg(qs(stagecraft::interop::to_string(to))), error);
    return false;
  }
  if (notes.isEmpty()) {
    statusBar()->showMessage(tr("Wrote %1").arg(written.join(QStringLiteral(", "))), kStatusMessageMs);
  } else {
    showInfo(tr("Exported to %1").arg(qs(stagecraft::interop::to_string(to))),
             tr("Wrote %1.\n\nWhat the framework runs differently:\n%2").arg(written.join(QStringLiteral(", ")), notes.join(QLatin1Char('\n'))));
  }
  return true;
}

bool MainWindow::exportTopologyImage(const QString& path) {
  QString error;
  if (!m_topology->exportImage(path, &error)) {
    showError(tr("Cannot export the topology diagram"), error);
    return false;
  }
  statusBar()->showMessage(tr("Wrote %1").arg(path), kStatusMessageMs);
  return true;
}

bool MainWindow::exportScheduleImage(const QString& path) {
  QString error;
  if (!m_schedule->exportImage(path, &error)) {
    showError(tr("Cannot export the schedule"), error);
    return false;
  }
  statusBar()->showMessage(tr("Wrote %1").arg(path), kStatusMessageMs);
  return true;
}

bool MainWindow::runLocally() {
  if (!m_document->isValid()) {
    showError(tr("Cannot run"), tr("the configuration is invalid; fix it first: %1").arg(m_document->problems().first().message));
    return false;
  }
  m_runDialog->show();
  m_runDialog->raise();
  QString error;
  if (!m_runDialog->start(m_document->configForWorkers(), m_document->plan(), m_document->baseDir(), &error)) {
    showError(tr("Cannot run"), error);
    return false;
  }
  return true;
}

void MainWindow::addRecent(const QString& path) {
  m_recent.removeAll(path);
  m_recent.prepend(path);
  while (m_recent.size() > kMaxRecentFiles) m_recent.removeLast();
  rebuildRecentMenu();
  QSettings().setValue(QStringLiteral("recentFiles"), m_recent);
}

void MainWindow::rebuildRecentMenu() {
  m_recentMenu->clear();
  for (const QString& path : std::as_const(m_recent)) {
    m_recentMenu->addAction(QFileInfo(path).fileName() + QStringLiteral("  (") + QFileInfo(path).absolutePath() + QLatin1Char(')'),
                            this, [this, path] {
                              if (maybeSave()) openFile(path);
                            });
  }
  m_recentMenu->setEnabled(!m_recent.isEmpty());
}

QString MainWindow::startDir() const {
  return m_document->filePath().isEmpty() ? QString() : QFileInfo(m_document->filePath()).absolutePath();
}

bool MainWindow::maybeSave() {
  if (!m_document->isModified()) return true;
  const auto answer = QMessageBox::question(this, tr("Unsaved changes"),
                                            tr("%1 has unsaved changes. Save them?").arg(m_document->displayName()),
                                            QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
  if (answer == QMessageBox::Save) return saveFile();
  return answer == QMessageBox::Discard;
}

void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  // The window's first layout measures the Estimates charts' legends in the dock's narrowest
  // column, before resizeDocks gives it its width, and can leave a first start a few pixels taller
  // than asked; once the docks have their widths the asked size fits, so it is set again, once.
  if (m_firstStartSize.isEmpty() || !isVisible()) return;
  const QSize asked = m_firstStartSize;
  if (width() != asked.width()) {
    m_firstStartSize = QSize();  // resized by someone else: theirs stands
    return;
  }
  if (height() <= asked.height() || minimumSizeHint().height() > asked.height()) return;
  m_firstStartSize = QSize();
  QMetaObject::invokeMethod(this, [this, asked] { resize(asked); }, Qt::QueuedConnection);
}

void MainWindow::readSettings() {
  QSettings s;
  const QByteArray geometry = s.value(QStringLiteral("window/geometry")).toByteArray();
  if (geometry.isEmpty()) {
    m_firstStartSize = QSize(1400, 900);
    resize(m_firstStartSize);
  } else {
    restoreGeometry(geometry);
  }
  restoreState(s.value(QStringLiteral("window/state")).toByteArray());
  m_recent = s.value(QStringLiteral("recentFiles")).toStringList();
  rebuildRecentMenu();
}

void MainWindow::writeSettings() const {
  QSettings s;
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/state"), saveState());
  s.setValue(QStringLiteral("recentFiles"), m_recent);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!maybeSave()) {
    event->ignore();
    return;
  }
  if (m_runDialog->isRunning()) m_runDialog->cancel();
  writeSettings();
  event->accept();
}
