// RunLocallyDialog: the worker thread around a launch::RunSession, the live loss chart.
#include "runs/RunLocallyDialog.h"

#include <QChart>
#include <QChartView>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QLineSeries>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QValueAxis>
#include <QVBoxLayout>

#include <cmath>
#include <memory>

#include "common/Text.h"
#include "stagecraft/launch/program.h"
#include "stagecraft/launch/run_session.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/run_store.h"

namespace cfg = stagecraft::config;
namespace launch = stagecraft::launch;

namespace {

constexpr int kMaxLogLines = 2000;  // the log pane keeps the latest lines only


// The directory a relative `path` is found under: the working directory when it exists from
// there (returned as ""), else the first directory from `baseDir` upwards that holds it, else "".
QString rootOf(const QString& path, const QString& baseDir) {
  if (path.isEmpty() || QFileInfo(path).isAbsolute() || QFileInfo::exists(path) || baseDir.isEmpty()) return {};
  QDir dir(baseDir);
  do {
    if (QFileInfo::exists(dir.filePath(path))) return dir.absolutePath();
  } while (dir.cdUp());
  return {};
}

}  // namespace

RunLocallyDialog::RunLocallyDialog(QWidget* parent)
    : QDialog(parent), m_db(QString::fromStdString(stagecraft::store::RunStore::default_path())) {
  setWindowTitle(tr("Run locally"));
  resize(720, 520);
  auto* layout = new QVBoxLayout(this);
  m_status = new QLabel(tr("Not started"), this);
  m_status->setObjectName(QStringLiteral("runStatus"));
  m_status->setWordWrap(true);
  layout->addWidget(m_status);

  m_loss = new QLineSeries;
  m_loss->setName(tr("loss (rank 0)"));
  auto* chart = new QChart;
  chart->addSeries(m_loss);
  m_xAxis = new QValueAxis;
  m_xAxis->setTitleText(tr("step"));
  m_xAxis->setLabelFormat(QStringLiteral("%d"));
  m_yAxis = new QValueAxis;
  m_yAxis->setTitleText(tr("loss"));
  chart->addAxis(m_xAxis, Qt::AlignBottom);
  chart->addAxis(m_yAxis, Qt::AlignLeft);
  m_loss->attachAxis(m_xAxis);
  m_loss->attachAxis(m_yAxis);
  chart->legend()->setVisible(false);
  auto* view = new QChartView(chart, this);
  view->setRenderHint(QPainter::Antialiasing);
  layout->addWidget(view, 3);

  m_log = new QPlainTextEdit(this);
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(kMaxLogLines);
  layout->addWidget(m_log, 1);

  auto* buttons = new QDialogButtonBox(this);
  m_cancel = buttons->addButton(tr("Cancel run"), QDialogButtonBox::ActionRole);
  m_close = buttons->addButton(QDialogButtonBox::Close);
  m_cancel->setEnabled(false);
  layout->addWidget(buttons);
  connect(m_cancel, &QPushButton::clicked, this, &RunLocallyDialog::cancel);
  connect(m_close, &QPushButton::clicked, this, &RunLocallyDialog::reject);
}

RunLocallyDialog::~RunLocallyDialog() {
  cancel();
  joinWorker();
}

cfg::RunConfig RunLocallyDialog::resolvePaths(cfg::RunConfig config, const QString& baseDir) {
  // The examples name their data relative to the repository (configs/data/...): the root it is
  // found under also holds the run's relative checkpoint directory.
  const QString root = rootOf(qs(config.train.data), baseDir);
  if (root.isEmpty()) return config;
  config.train.data = QDir(root).filePath(qs(config.train.data)).toStdString();
  if (QFileInfo(qs(config.train.checkpoint_dir)).isRelative()) {
    config.train.checkpoint_dir = QDir(root).filePath(qs(config.train.checkpoint_dir)).toStdString();
  }
  return config;
}

QString RunLocallyDialog::refusal(const cfg::RunConfig& config, const stagecraft::plan::Plan& plan) {
  stagecraft::Status s = launch::check_runnable(config, plan, {});
  if (s.ok()) s = launch::check_program_here(config);  // another program (launch.program) must start here
  return s.ok() ? QString() : qs(s.message());
}

bool RunLocallyDialog::refuse(const QString& why, QString* error) {
  m_outcome.clear();
  m_message = why;
  m_status->setText(tr("Cannot run: %1").arg(why));
  if (error) *error = why;
  return false;
}

bool RunLocallyDialog::start(const cfg::RunConfig& original, const stagecraft::plan::Plan& documentPlan, const QString& baseDir,
                             QString* error) {
  if (m_running) {
    if (error) *error = tr("a run is already going in this window; cancel it or wait for it to end");
    return false;
  }
  joinWorker();
  // Resolving paths changes only where the data and checkpoints are, never the plan.
  launch::RunRequest request;
  request.config = resolvePaths(original, baseDir);
  request.plan = documentPlan;
  request.plan.config = request.config;
  // Checked and recorded before it starts, as the CLI records its runs; another program
  // (launch.program) must be there to start.
  if (const stagecraft::Status s = launch::check_runnable(request.config, request.plan, {}); !s) return refuse(qs(s.message()), error);
  if (const stagecraft::Status s = launch::check_program_here(request.config); !s) return refuse(qs(s.message()), error);
  auto session = launch::RunSession::record(m_db.toStdString(), std::move(request));
  if (!session.ok()) return refuse(qs(session.status().message()), error);
  if (stagecraft::Status opened = session.value()->open(); !opened) return refuse(qs(opened.message()), error);
  m_session = std::move(session).value();
  m_historyRunId = m_session->id();
  const cfg::RunConfig& config = m_session->request().config;

  m_loss->clear();
  m_log->clear();
  m_totalSteps = config.train.steps;
  m_minLoss = m_maxLoss = 0;
  m_xAxis->setRange(0, std::max(1, m_totalSteps));
  m_yAxis->setRange(0, 1);
  m_outcome.clear();
  m_message.clear();
  m_running = true;
  m_cancel->setEnabled(true);
  m_status->setText(tr("Running %1: %2 ranks, %3 steps").arg(qs(config.name)).arg(config.world_size()).arg(config.train.steps));

  launch::RunCallbacks callbacks;
  // The rank whose losses are drawn: rank 0 for Stagecraft's workers; for another program the
  // first rank that reports a step (Megatron-LM prints them on the last rank).
  auto chartRank = std::make_shared<int>(config.launch.foreign() ? -1 : 0);
  callbacks.on_event = [this, chartRank](int rank, const launch::WorkerEvent& e) {
    const auto* step = std::get_if<launch::StepEvent>(&e);
    if (step && *chartRank < 0) *chartRank = rank;  // the callbacks run on one thread, the session's
    if (step && rank == *chartRank) {
      // A diverged loss arrives as NaN (null on the wire): shown as such, never as 0.
      const int s = static_cast<int>(step->step);
      const double l = step->loss;
      QMetaObject::invokeMethod(this, [this, s, l] { addLoss(s, l); }, Qt::QueuedConnection);
    } else if (const auto* failure = std::get_if<launch::ErrorEvent>(&e)) {
      const QString text = tr("rank %1: %2").arg(rank).arg(qs(failure->message));
      QMetaObject::invokeMethod(this, [this, text] { appendLog(text); }, Qt::QueuedConnection);
    }
  };
  callbacks.on_log = [this](int rank, bool isStderr, const std::string& line) {
    if (line.empty()) return;
    const QString text = QStringLiteral("[rank %1%2] %3").arg(rank).arg(isStderr ? QStringLiteral(" stderr") : QString(), qs(line));
    QMetaObject::invokeMethod(this, [this, text] { appendLog(text); }, Qt::QueuedConnection);
  };

  // Cancel (here, or `runs cancel` / the Runs view through the history) sets the session's flag.
  auto body = [this, callbacks] {
    const stagecraft::Result<launch::RunOutcome> outcome = m_session->run(callbacks);
    const stagecraft::Status& kept = m_session->history_status();
    QString state, reason;
    if (!outcome.ok()) {
      state = QStringLiteral("failed");
      reason = qs(outcome.status().message());
    } else {
      state = qs(std::string(launch::to_string(outcome->state)));
      reason = qs(outcome->reason);
    }
    if (!kept) reason += (reason.isEmpty() ? QString() : QStringLiteral("; ")) + tr("not all of it reached the run history: ") + qs(kept.message());
    QMetaObject::invokeMethod(this, [this, state, reason] { finish(state, reason); }, Qt::QueuedConnection);
  };
  try {
    m_worker = std::thread(std::move(body));
  } catch (const std::system_error& e) {
    const QString why = tr("cannot start the run's thread: %1").arg(QString::fromLocal8Bit(e.what()));
    (void)m_session->abandon(stagecraft::Status::unavailable(why.toStdString()));
    m_running = false;
    m_cancel->setEnabled(false);
    return refuse(why, error);
  }
  return true;
}

void RunLocallyDialog::cancel() {
  if (m_running && m_session) m_session->cancel();
}

void RunLocallyDialog::addLoss(int step, double loss) {
  if (!std::isfinite(loss)) {
    appendLog(tr("step %1: the loss is not a finite number (the run diverged)").arg(step));
    m_status->setText(tr("Step %1: the loss is not a finite number").arg(step));
    return;
  }
  if (m_loss->count() == 0) {
    m_minLoss = m_maxLoss = loss;
  } else {
    m_minLoss = std::min(m_minLoss, loss);
    m_maxLoss = std::max(m_maxLoss, loss);
  }
  m_loss->append(step, loss);
  const double pad = std::max(0.05, (m_maxLoss - m_minLoss) * 0.05);
  m_yAxis->setRange(std::max(0.0, m_minLoss - pad), m_maxLoss + pad);
  m_status->setText(tr("Step %1 of %2, loss %3").arg(step).arg(m_totalSteps).arg(loss, 0, 'f', 4));
  Q_EMIT lossRecorded(step, loss);
}

void RunLocallyDialog::finish(const QString& outcome, const QString& reason) {
  joinWorker();
  m_running = false;
  m_outcome = outcome;
  m_message = reason;
  m_cancel->setEnabled(false);
  QString text = tr("Run %1 (history run %2)").arg(outcome).arg(m_historyRunId);
  if (m_loss->count() > 0) text += tr(" after %1 steps, last loss %2").arg(m_loss->at(m_loss->count() - 1).x()).arg(m_loss->at(m_loss->count() - 1).y(), 0, 'f', 4);
  if (!reason.isEmpty()) text += QStringLiteral(": ") + reason;
  m_status->setText(text);
  Q_EMIT runFinished(outcome);
}

void RunLocallyDialog::appendLog(const QString& line) { m_log->appendPlainText(line); }

QString RunLocallyDialog::logText() const { return m_log->toPlainText(); }

void RunLocallyDialog::joinWorker() {
  if (m_worker.joinable()) m_worker.join();
}

void RunLocallyDialog::reject() {
  // Closing stops the run: a window that no longer shows a run should not leave one going.
  if (m_running) cancel();
  QDialog::reject();
}
