// RunTimelineView: a recorded step's pipeline timeline beside the predicted one, and the parts
// compared (see the header).
#include "runs/RunTimelineView.h"

#include <QComboBox>
#include <QEvent>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsView>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/Text.h"
#include "runs/RecordedRunPlan.h"
#include "schedule/ScheduleTimelineItem.h"
#include "stagecraft/store/run_store.h"

namespace launch = stagecraft::launch;
namespace plan = stagecraft::plan;
using stagecraft::config::Schedule;
using stagecraft::runtime::PipeOp;

namespace {

constexpr double kMs = 1000.0;
constexpr double kMinDrawnWidth = 360.0;  // scene units the longer timeline gets at least
constexpr double kTitleGap = 4.0;         // between a title and its timeline
constexpr double kTimelineGap = 14.0;     // between the predicted timeline and the measured title
constexpr int kTitleFontPx = 12;
constexpr int kRowPadding = 4;            // pixels above and below a comparison row's text
constexpr int kTimelineShare = 500;       // first split of the width: timelines, comparison table
constexpr int kTableShare = 200;
// The estimate's one figure for a micro-batch's forward + backward is split as their FLOPs:
// a backward computes two products (the input's and the weights' gradients) per forward one.
constexpr double kForwardShare = 1.0 / 3.0;

enum Column { PartColumn, PredictedColumn, MeasuredColumn, ErrorColumn, ColumnCount };

QString valueText(const plan::ComparisonRow& row, double v) {
  if (std::isnan(v)) return QStringLiteral("–");
  if (row.seconds) return qs(plan::format_seconds(v));
  if (row.part.rfind("memory", 0) == 0) return qs(plan::format_bytes(v));
  return QString::number(v, 'f', 0);
}

QString errorText(double error) {
  if (!std::isfinite(error)) return QStringLiteral("–");
  return (error >= 0 ? QStringLiteral("+") : QString()) + QString::number(100.0 * error, 'f', 1) + QLatin1Char('%');
}

QGraphicsSimpleTextItem* addTitle(QGraphicsScene* scene) {
  auto* t = new QGraphicsSimpleTextItem;
  QFont f = t->font();
  f.setPixelSize(kTitleFontPx);
  t->setFont(f);
  scene->addItem(t);
  return t;
}

}  // namespace

RunTimelineView::RunTimelineView(QWidget* parent) : QWidget(parent), m_measuredIdle(std::numeric_limits<double>::quiet_NaN()) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  m_steps = new QComboBox(this);
  m_steps->setObjectName(QStringLiteral("timelineStep"));
  m_steps->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_replicaLabel = new QLabel(tr("Replica (dp rank):"), this);
  m_replicaBox = new QSpinBox(this);
  m_replicaBox->setObjectName(QStringLiteral("timelineReplica"));
  bar->addWidget(new QLabel(tr("Step:"), this));
  bar->addWidget(m_steps);
  bar->addWidget(m_replicaLabel);
  bar->addWidget(m_replicaBox);
  bar->addStretch(1);
  layout->addLayout(bar);
  m_message = new QLabel(this);
  m_message->setObjectName(QStringLiteral("timelineMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_message->hide();
  layout->addWidget(m_message);

  auto* split = new QSplitter(Qt::Horizontal, this);
  m_scene = new QGraphicsScene(this);
  m_view = new QGraphicsView(m_scene, split);
  m_view->setObjectName(QStringLiteral("timelineView"));
  m_view->setRenderHint(QPainter::Antialiasing, false);
  m_view->setDragMode(QGraphicsView::ScrollHandDrag);
  m_view->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  m_view->setBackgroundBrush(Qt::white);
  m_predictedText = addTitle(m_scene);
  m_measuredText = addTitle(m_scene);
  m_predicted = new ScheduleTimelineItem;
  m_measured = new ScheduleTimelineItem;
  for (ScheduleTimelineItem* item : {m_predicted, m_measured}) {
    item->setAxisUnit(QStringLiteral("ms"));
    m_scene->addItem(item);
  }

  auto* side = new QWidget(split);
  auto* sl = new QVBoxLayout(side);
  sl->setContentsMargins(0, 0, 0, 0);
  m_tableCaption = new QLabel(side);
  m_tableCaption->setWordWrap(true);
  m_table = new QTableWidget(0, ColumnCount, side);
  m_table->setObjectName(QStringLiteral("comparisonTable"));
  m_table->setHorizontalHeaderLabels({tr("part"), tr("predicted"), tr("measured"), tr("error")});
  m_table->verticalHeader()->hide();
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + kRowPadding);
  sl->addWidget(m_tableCaption);
  sl->addWidget(m_table, 1);
  split->addWidget(m_view);
  split->addWidget(side);
  split->setStretchFactor(0, 5);
  split->setStretchFactor(1, 2);
  split->setSizes({kTimelineShare, kTableShare});
  layout->addWidget(split, 1);

  m_view->viewport()->installEventFilter(this);  // the timelines fit the viewport's width

  m_reloadLater = new QTimer(this);
  m_reloadLater->setSingleShot(true);
  connect(m_reloadLater, &QTimer::timeout, this, [this] {
    if (m_stale && isVisible()) reload();
  });
  connect(m_steps, &QComboBox::activated, this, [this] { setStep(m_steps->currentData().toLongLong()); });
  connect(m_replicaBox, &QSpinBox::valueChanged, this, [this](int dp) { setReplica(dp); });
  clear();
}

RunTimelineView::~RunTimelineView() = default;

void RunTimelineView::setRun(stagecraft::store::RunStore* store, qint64 id) {
  clear();
  m_store = id != 0 ? store : nullptr;
  m_runId = m_store ? id : 0;
  m_stale = m_runId != 0;
  if (m_stale && isVisible()) reload();
}

void RunTimelineView::clear() {
  m_reloadLater->stop();
  m_store = nullptr;
  m_runId = 0;
  m_step = 0;
  m_replica = 0;
  m_stale = false;
  m_measurement.reset();
  m_plan.reset();
  m_rows.clear();
  m_runMessage.clear();
  m_stepMessage.clear();
  {
    const QSignalBlocker block(m_steps);
    m_steps->clear();
  }
  m_steps->setEnabled(false);
  {
    const QSignalBlocker block(m_replicaBox);
    m_replicaBox->setRange(0, 0);
  }
  m_replicaLabel->hide();
  m_replicaBox->hide();
  drawPredicted();
  drawMeasured();
  fillComparison();
  showMessages();
}

void RunTimelineView::runUpdated() {
  if (m_runId == 0) return;
  m_stale = true;
  if (!isVisible()) return;  // read when shown
  const qint64 since = m_lastLoad.isValid() ? m_lastLoad.elapsed() : m_reloadMs;
  if (since >= m_reloadMs) {
    reload();
  } else if (!m_reloadLater->isActive()) {
    m_reloadLater->start(static_cast<int>(m_reloadMs - since));
  }
}

void RunTimelineView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (m_stale) reload();
}

bool RunTimelineView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_view->viewport() && event->type() == QEvent::Resize) layoutScene();
  return QWidget::eventFilter(watched, event);
}

void RunTimelineView::reload() {
  m_reloadLater->stop();
  m_stale = false;
  m_lastLoad.start();
  const qint64 keepStep = m_step;
  const int keepReplica = m_replica;
  m_measurement.reset();
  m_plan.reset();
  m_runMessage.clear();
  if (m_store && m_runId != 0) {
    auto measured = launch::measure_run(*m_store, m_runId);
    if (measured.ok()) {
      m_plan = measured->plan;
      m_measurement = std::move(measured).value();
    } else {
      m_runMessage = qs(measured.status().message());
      // Without a measurement the prediction is still the recorded config's plan.
      auto record = m_store->get_run(m_runId);
      auto planned = record.ok() ? recordedRunPlan(record.value()) : stagecraft::Result<plan::Plan>(record.status());
      if (planned.ok()) {
        m_plan = std::move(planned).value();
      } else {
        m_runMessage += QStringLiteral("\n") + tr("No prediction: %1").arg(qs(planned.status().message()));
      }
    }
  }

  // Steps: keep the one shown when it is still there, else the last (a steady step).
  const QList<qint64> steps = [this] {
    QList<qint64> s;
    if (m_measurement) {
      for (int64_t step : m_measurement->timeline_steps) s << step;
    }
    return s;
  }();
  {
    const QSignalBlocker block(m_steps);
    m_steps->clear();
    for (qint64 s : steps) m_steps->addItem(tr("step %1").arg(s), QVariant::fromValue<qint64>(s));
  }
  m_steps->setEnabled(!steps.isEmpty());
  m_step = steps.contains(keepStep) ? keepStep : (steps.isEmpty() ? 0 : steps.last());
  m_steps->setCurrentIndex(m_steps->findData(QVariant::fromValue<qint64>(m_step)));
  const int dp = m_plan ? std::max(1, m_plan->dp) : 1;
  {
    const QSignalBlocker block(m_replicaBox);
    m_replicaBox->setRange(0, dp - 1);
    m_replica = std::clamp(keepReplica, 0, dp - 1);
    m_replicaBox->setValue(m_replica);
  }
  m_replicaLabel->setVisible(dp > 1);
  m_replicaBox->setVisible(dp > 1);

  drawPredicted();
  drawMeasured();
  fillComparison();
  showMessages();
}

bool RunTimelineView::setStep(qint64 step) {
  const int at = m_steps->findData(QVariant::fromValue<qint64>(step));
  if (at < 0) return false;
  {
    const QSignalBlocker block(m_steps);
    m_steps->setCurrentIndex(at);
  }
  m_step = step;
  drawMeasured();
  showMessages();
  return true;
}

bool RunTimelineView::setReplica(int dpRank) {
  if (dpRank < m_replicaBox->minimum() || dpRank > m_replicaBox->maximum()) return false;
  {
    const QSignalBlocker block(m_replicaBox);
    m_replicaBox->setValue(dpRank);
  }
  m_replica = dpRank;
  drawMeasured();
  showMessages();
  return true;
}

QList<qint64> RunTimelineView::stepChoices() const {
  QList<qint64> steps;
  for (int i = 0; i < m_steps->count(); ++i) steps << m_steps->itemData(i).toLongLong();
  return steps;
}

const ScheduleTimeline& RunTimelineView::measuredTimeline() const { return m_measured->timeline(); }
const ScheduleTimeline& RunTimelineView::predictedTimeline() const { return m_predicted->timeline(); }
QString RunTimelineView::messageText() const { return m_message->text(); }
QString RunTimelineView::measuredTitle() const { return m_measuredText->text(); }
QString RunTimelineView::predictedTitle() const { return m_predictedText->text(); }

ScheduleTimeline RunTimelineView::toScheduleTimeline(const launch::MeasuredTimeline& measured, int pp, int virtualStages) {
  ScheduleTimeline t;
  t.pp = std::max(1, pp);
  t.virtualStages = std::max(1, virtualStages);
  int microBatches = 0;
  t.blocks.reserve(measured.ops.size());
  for (const launch::TimelineOp& op : measured.ops) {
    ScheduleBlock b;
    b.ppRank = std::clamp(op.pp_rank, 0, t.pp - 1);
    b.op.kind = op.backward ? PipeOp::Kind::kBackward : PipeOp::Kind::kForward;
    b.op.chunk = op.chunk;
    b.op.micro_batch = op.micro_batch;
    b.start = op.start_s * kMs;
    b.end = op.end_s * kMs;
    t.busyTime += b.end - b.start;
    t.makespan = std::max(t.makespan, b.end);
    microBatches = std::max(microBatches, op.micro_batch + 1);
    t.blocks.push_back(b);
  }
  t.makespan = std::max(t.makespan, measured.makespan_s * kMs);
  t.microBatches = microBatches;
  return t;
}

std::pair<double, double> RunTimelineView::predictedMicroBatchTimes(const plan::Plan& p) {
  const plan::StepBreakdown& b = p.estimate.breakdown;
  const double m = std::max(1, p.micro_batches);
  const double compute = b.compute_s / m, recompute = b.recompute_s / m, tp = (b.tp_comm_s + b.cp_comm_s) / m;
  const double forward = kForwardShare * compute + tp / 2;
  const double backward = (1.0 - kForwardShare) * compute + recompute + tp / 2;
  return {forward, backward};
}

ScheduleTimeline RunTimelineView::predictedSchedule(const plan::Plan& p) {
  const Schedule schedule = p.config.pipeline.schedule;
  const int v = schedule == Schedule::kInterleaved ? std::max(1, p.virtual_stages) : 1;
  const auto [forward, backward] = predictedMicroBatchTimes(p);
  return simulateSchedule(schedule, std::max(1, p.pp), v, std::max(1, p.micro_batches), forward * kMs, backward * kMs);
}

void RunTimelineView::drawPredicted() {
  if (!m_plan) {
    m_predicted->setTimeline(ScheduleTimeline{});
    m_predicted->setVisible(false);
    m_predictedText->setText(QString());
    layoutScene();
    return;
  }
  const ScheduleTimeline t = predictedSchedule(*m_plan);
  m_predicted->setTimeline(t);
  m_predicted->setVisible(true);
  const auto [forward, backward] = predictedMicroBatchTimes(*m_plan);
  m_predictedText->setText(tr("Predicted: forward %1, backward %2; %3 ms, idle %4")
                               .arg(qs(plan::format_seconds(forward)), qs(plan::format_seconds(backward)))
                               .arg(t.makespan, 0, 'f', 1)
                               .arg(percentText(t.idleFraction())));
  m_predictedText->setToolTip(tr("The %1 schedule simulated with the cost model's forward and backward of a micro-batch on the "
                                 "bottleneck stage (pipeline transfers not drawn); idle: the share of the ranks' time outside "
                                 "forwards and backwards")
                                  .arg(qs(stagecraft::config::to_string(m_plan->config.pipeline.schedule))));
  layoutScene();
}

void RunTimelineView::drawMeasured() {
  m_stepMessage.clear();
  m_measuredIdle = std::numeric_limits<double>::quiet_NaN();
  ScheduleTimeline t;
  if (m_store && m_runId != 0 && m_measurement && m_step != 0) {
    auto measured = launch::measured_timeline(*m_store, m_runId, m_step, m_replica);
    if (measured.ok()) {
      const int v = m_plan && m_plan->config.pipeline.schedule == Schedule::kInterleaved ? m_plan->virtual_stages : 1;
      t = toScheduleTimeline(measured.value(), m_plan ? m_plan->pp : measured->ranks, v);
      m_measuredIdle = measured->idle_fraction();
      m_measuredText->setText(tr("Measured: step %1, dp %2; %3 ms, idle %4 (bubble and waits)")
                                  .arg(m_step)
                                  .arg(m_replica)
                                  .arg(measured->makespan_s * kMs, 0, 'f', 1)
                                  .arg(percentText(m_measuredIdle)));
      m_measuredText->setToolTip(tr("The forwards and backwards of step %1 on the ranks of replica dp %2 (tp rank 0), from their "
                                    "recorded start and end; idle: the share of the ranks' time outside them")
                                     .arg(m_step)
                                     .arg(m_replica));
    } else {
      m_stepMessage = qs(measured.status().message());
    }
  }
  if (t.blocks.empty()) m_measuredText->setText(QString());
  m_measured->setTimeline(t);
  m_measured->setVisible(!t.blocks.empty());
  layoutScene();
}

// One scale for both (the longer fits the view's width), one span, predicted above measured.
void RunTimelineView::layoutScene() {
  const double longest = std::max(m_predicted->timeline().makespan, m_measured->timeline().makespan);
  const double room = m_view->viewport()->width() - ScheduleTimelineItem::kLabelWidth - 2 * ScheduleTimelineItem::kUnit;
  const double width = std::max(kMinDrawnWidth, room);
  const double scale = longest > 0 ? width / longest : ScheduleTimelineItem::kUnit;
  double y = 0;
  for (auto [title, item] : {std::pair{m_predictedText, m_predicted}, std::pair{m_measuredText, m_measured}}) {
    item->setTimeScale(scale);
    item->setSpan(longest);
    if (!item->isVisible()) continue;
    title->setPos(0, y);
    y += title->boundingRect().height() + kTitleGap;
    item->setPos(0, y);
    y += item->boundingRect().height() + kTimelineGap;
  }
  m_scene->setSceneRect(m_scene->itemsBoundingRect());
}

void RunTimelineView::fillComparison() {
  m_rows.clear();
  if (m_measurement && m_plan) m_rows = plan::compare(m_plan->estimate, m_measurement->step);
  m_table->setRowCount(static_cast<int>(m_rows.size()));
  for (int r = 0; r < static_cast<int>(m_rows.size()); ++r) {
    const plan::ComparisonRow& row = m_rows[static_cast<size_t>(r)];
    const QString cells[ColumnCount] = {qs(row.part), valueText(row, row.predicted), valueText(row, row.measured), errorText(row.error)};
    for (int c = 0; c < ColumnCount; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c != PartColumn) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      m_table->setItem(r, c, item);
    }
  }
  // The table as wide as its columns: the timelines take the rest.
  m_table->resizeColumnsToContents();
  m_table->setMinimumWidth(m_table->horizontalHeader()->length() + 2 * m_table->frameWidth() + m_table->verticalScrollBar()->sizeHint().width());
  if (m_measurement) {
    const auto& m = *m_measurement;
    const auto rank = std::find_if(m.ranks.begin(), m.ranks.end(), [&](const launch::MeasuredRank& x) { return x.rank == m.bottleneck_rank; });
    m_tableCaption->setText(tr("Predicted vs measured: medians of steps %1–%2 (%3) of rank %4 (pp %5), the bottleneck")
                                .arg(m.first_step)
                                .arg(m.last_step)
                                .arg(m.steps_used)
                                .arg(m.bottleneck_rank)
                                .arg(rank != m.ranks.end() ? rank->pp_rank : 0));
  } else {
    m_tableCaption->setText(tr("Predicted vs measured: nothing measured yet"));
  }
}

void RunTimelineView::showMessages() {
  QStringList lines;
  if (!m_runMessage.isEmpty()) lines << m_runMessage;
  if (!m_stepMessage.isEmpty()) lines << m_stepMessage;
  if (m_runId == 0) lines.clear();
  m_message->setText(lines.join(QLatin1Char('\n')));
  m_message->setVisible(!lines.isEmpty());
}
