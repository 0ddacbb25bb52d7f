// RunsView: history table, filters, polling, the selected run's charts, ranks and logs, Cancel.
#include "runs/RunsView.h"

#include <algorithm>
#include <tuple>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include "common/Text.h"
#include "runs/CalibrateDialog.h"
#include "runs/ExpertLoadMap.h"
#include "runs/RankStateGrid.h"
#include "runs/RecordedRunPlan.h"
#include "runs/RunCharts.h"
#include "runs/RunLogView.h"
#include "runs/RunTimelineView.h"
#include "runs/RunsModel.h"
#include "stagecraft/store/process_identity.h"
#include "stagecraft/launch/run_kernels.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/store/run_store.h"

namespace store = stagecraft::store;

namespace {


constexpr const char* kStates[] = {"queued", "running", "succeeded", "failed", "cancelled", "lost"};

}  // namespace

RunsView::RunsView(QWidget* parent) : QWidget(parent) {
  m_model = new RunsModel(this);
  m_filter = new RunsFilterModel(this);
  m_filter->setSourceModel(m_model);
  buildUi();
  m_poll = new QTimer(this);
  m_poll->setInterval(1000);
  connect(m_poll, &QTimer::timeout, this, &RunsView::refresh);
  connect(m_model, &RunsModel::refreshed, this, &RunsView::onRefreshed);
  connect(m_model, &RunsModel::errorOccurred, this, &RunsView::showError);
  setDatabasePath(qs(store::RunStore::default_path()));
  m_poll->start();
}

RunsView::~RunsView() = default;

void RunsView::buildUi() {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  m_stateFilter = new QComboBox(this);
  m_stateFilter->setObjectName(QStringLiteral("stateFilter"));
  m_stateFilter->addItem(tr("all states"), QString());
  for (const char* s : kStates) m_stateFilter->addItem(QString::fromLatin1(s), QString::fromLatin1(s));
  m_nameFilter = new QLineEdit(this);
  m_nameFilter->setObjectName(QStringLiteral("nameFilter"));
  m_nameFilter->setPlaceholderText(tr("Filter by name"));
  m_nameFilter->setClearButtonEnabled(true);
  m_cancel = new QPushButton(tr("Cancel run"), this);
  m_cancel->setObjectName(QStringLiteral("cancelRun"));
  m_cancel->setEnabled(false);
  bar->addWidget(new QLabel(tr("State:"), this));
  bar->addWidget(m_stateFilter);
  bar->addWidget(m_nameFilter, 1);
  m_calibrateButton = new QPushButton(tr("Calibrate..."), this);
  m_calibrateButton->setObjectName(QStringLiteral("calibrateRuns"));
  m_calibrateButton->setToolTip(tr("Fit the device's cost-model constants to the selected runs and save them as a device profile"));
  m_calibrateButton->setEnabled(false);
  m_calibrate = new CalibrateDialog(this);
  bar->addWidget(m_calibrateButton);
  bar->addWidget(m_cancel);
  layout->addLayout(bar);

  // History on the left, the selected run on the right: the view lives in a wide, low dock.
  auto* split = new QSplitter(Qt::Horizontal, this);
  m_table = new QTableView(split);
  m_table->setObjectName(QStringLiteral("runsTable"));
  m_table->setModel(m_filter);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(RunsModel::IdColumn, Qt::DescendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);  // several to calibrate from
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setAlternatingRowColors(true);

  auto* details = new QWidget(split);
  auto* dl = new QVBoxLayout(details);
  dl->setContentsMargins(0, 0, 0, 0);
  m_header = new QLabel(details);
  m_header->setObjectName(QStringLiteral("runHeader"));
  m_header->setWordWrap(true);
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  dl->addWidget(m_header);
  m_tabs = new QTabWidget(details);

  auto* chartsPage = new QWidget(m_tabs);
  auto* cl = new QVBoxLayout(chartsPage);
  auto* compareBar = new QHBoxLayout;
  m_compare = new QComboBox(chartsPage);
  m_compare->setObjectName(QStringLiteral("compareRun"));
  m_compare->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  compareBar->addWidget(new QLabel(tr("Compare with:"), chartsPage));
  compareBar->addWidget(m_compare);
  compareBar->addStretch(1);
  cl->addLayout(compareBar);
  m_charts = new RunCharts(chartsPage);
  cl->addWidget(m_charts, 1);
  m_tabs->addTab(chartsPage, tr("Charts"));

  m_rankGrid = new RankStateGrid;
  auto* scroll = new QScrollArea(m_tabs);
  scroll->setWidget(m_rankGrid);
  scroll->setWidgetResizable(true);
  m_tabs->addTab(scroll, tr("Ranks"));

  m_logs = new RunLogView(m_tabs);
  m_tabs->addTab(m_logs, tr("Logs"));
  m_timeline = new RunTimelineView(m_tabs);
  m_tabs->addTab(m_timeline, tr("Timeline"));
  m_expertLoad = new ExpertLoadMap;
  auto* expertScroll = new QScrollArea(m_tabs);
  expertScroll->setWidget(m_expertLoad);
  expertScroll->setWidgetResizable(true);
  m_tabs->addTab(expertScroll, tr("Experts"));
  dl->addWidget(m_tabs, 1);
  split->addWidget(m_table);
  split->addWidget(details);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  split->setSizes({400, 600});
  layout->addWidget(split, 1);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("runsStatus"));
  m_status->setWordWrap(true);
  layout->addWidget(m_status);
  updateHeader();

  connect(m_stateFilter, &QComboBox::currentIndexChanged, this,
          [this] { m_filter->setStateFilter(m_stateFilter->currentData().toString()); });
  connect(m_nameFilter, &QLineEdit::textChanged, m_filter, &RunsFilterModel::setNameFilter);
  connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    showRun(current.isValid() ? current.data(RunsModel::IdRole).toLongLong() : 0);
  });
  connect(m_compare, &QComboBox::activated, this, [this] { setComparisonRun(m_compare->currentData().toLongLong()); });
  connect(m_cancel, &QPushButton::clicked, this, &RunsView::askCancel);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { m_calibrateButton->setEnabled(!selectedRunIds().isEmpty()); });
  connect(m_calibrateButton, &QPushButton::clicked, this, &RunsView::calibrateSelectedRuns);
}

void RunsView::setDatabasePath(const QString& path) {
  m_lastError.clear();
  m_status->setText(tr("History: %1").arg(path));
  showRun(0);
  m_shownNewest = false;  // another history: its newest run is shown once it is read
  m_model->setDatabasePath(path);
  rebuildCompareChoices();
}

QString RunsView::databasePath() const { return m_model->databasePath(); }

void RunsView::setPollInterval(int ms) {
  if (ms <= 0) {
    m_poll->stop();
    return;
  }
  m_poll->setInterval(ms);
  m_poll->start();
}

int RunsView::pollInterval() const { return m_poll->isActive() ? m_poll->interval() : 0; }

void RunsView::refresh() { m_model->refresh(); }

void RunsView::onRefreshed(const QList<qint64>& changed) {
  if (!m_lastError.isEmpty() && m_model->lastError().isEmpty()) {
    m_lastError.clear();
    m_status->setText(tr("History: %1").arg(m_model->databasePath()));
  }
  if (!changed.isEmpty()) rebuildCompareChoices();
  // The first time the history has runs, the newest is shown: opening the view answers "how is
  // my run doing" without a click.
  if (!m_shownNewest && m_selected == 0 && m_filter->rowCount() > 0) {
    m_shownNewest = true;
    // The model's rows are in id order, newest first (RunsModel keeps them so; rowOf relies on it).
    if (const store::RunRecord* newest = m_model->runAt(0)) selectRun(newest->id);
  }
  if (m_selected != 0) {
    const store::RunRecord* r = m_model->run(m_selected);
    if (!r) {
      showRun(0);
    } else if (m_fullLoadPending) {
      loadRun(true);  // the last full read failed part-way: start over, not from where it stopped
    } else if (changed.contains(m_selected) || !store::is_terminal(r->state)) {
      loadRun(false);  // what was written since the last poll; log lines arrive between steps too
    }
  }
  if (comparisonRunId() != 0 && changed.contains(comparisonRunId())) loadComparison();
}

bool RunsView::selectRun(qint64 id) {
  const int sourceRow = m_model->rowOf(id);
  if (sourceRow < 0) return false;
  const QModelIndex proxy = m_filter->mapFromSource(m_model->index(sourceRow, 0));
  if (!proxy.isValid()) return false;
  m_table->selectionModel()->setCurrentIndex(proxy, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  m_table->scrollTo(proxy);
  return m_selected == id;
}

void RunsView::showRun(qint64 id) {
  if (id == m_selected && id != 0) return;
  m_selected = id;
  if (id == 0) {
    m_fullLoadPending = false;
    m_charts->clear();
    m_rankGrid->clear();
    m_logs->clear();
    m_timeline->clear();
  } else {
    const qint64 compare = comparisonRunId();
    loadRun(true);
    if (compare == id) setComparisonRun(0);
  }
  rebuildCompareChoices();
  updateHeader();
  Q_EMIT runSelected(id);
}

// Reads the selected run: all of it for a new selection (`full`), else only the rows written
// since the last read — the history only ever appends — so polling a long run stays cheap.
// A full read starts from empty charts, grid and logs, so a read that fails part-way shows
// nothing of the run selected before; it stays pending and the next poll reads it all again
// (never incrementally on top of what the failed read left).
void RunsView::loadRun(bool full) {
  store::RunStore* st = m_model->store();
  const store::RunRecord* r = m_model->run(m_selected);
  if (full) {
    m_fullLoadPending = true;
    m_metrics.clear();
    m_lastMetricRow = m_lastEventRow = m_lastLogRow = 0;
    m_charts->setRun(m_selected, {});  // keeps the comparison curve
    m_rankGrid->clear();
    m_expertLoad->clear();
    m_timeline->clear();
    m_logs->setLogs(m_selected, r ? r->world_size : 0, {});
    m_kernels.clear();
  }
  if (!st || !r) return;
  if (full) {
    auto withPlan = st->get_run(m_selected);  // the listing leaves plans out
    if (!withPlan.ok()) return showError(qs(withPlan.status().message()));
    // The plan's prediction beside the curves; a config that no longer plans says why (a run
    // that recorded none, made by hand or by an old history, simply has no prediction).
    auto predicted = recordedRunPlan(withPlan.value());
    const bool why = !predicted.ok() && predicted.status().code() != stagecraft::Status::Code::kNotFound;
    m_charts->setPrediction(predicted.ok() ? RunCharts::predictionOf(predicted.value()) : RunCharts::Prediction{},
                            why ? tr("No prediction: %1").arg(qs(predicted.status().message())) : QString());
    m_timeline->setRun(st, m_selected);
    store::RunRecord record = *r;  // the listing's state, with the plan the run started with
    record.plan_json = std::move(withPlan->plan_json);
    m_rankGrid->setRun(record);
    m_gridState = r->state;
  }
  auto metrics = st->metrics(m_selected, std::nullopt, m_lastMetricRow);
  if (!metrics.ok()) return showError(qs(metrics.status().message()));
  if (full || !metrics->empty()) {
    // Both parts are in (step, rank) order; a slow rank's late rows may belong before the end.
    const auto byStep = [](const store::MetricRow& a, const store::MetricRow& b) {
      return std::tie(a.step, a.rank, a.row) < std::tie(b.step, b.rank, b.row);
    };
    const auto old = static_cast<std::ptrdiff_t>(m_metrics.size());
    for (const auto& m : metrics.value()) m_lastMetricRow = std::max<int64_t>(m_lastMetricRow, m.row);
    m_metrics.insert(m_metrics.end(), metrics->begin(), metrics->end());
    std::inplace_merge(m_metrics.begin(), m_metrics.begin() + old, m_metrics.end(), byStep);
    m_charts->setRun(m_selected, m_metrics);
  }
  auto events = st->events(m_selected, m_lastEventRow);
  if (!events.ok()) return showError(qs(events.status().message()));
  if (!events->empty()) {
    m_lastEventRow = events->back().row;
    if (!full) m_timeline->runUpdated();
  }
  // The kernels its ranks took, from their start events: read again when a rank (re)starts.
  if (full || std::any_of(events->begin(), events->end(), [](const store::EventRow& e) { return e.kind == "start"; })) {
    auto sets = stagecraft::launch::run_kernel_sets(*st, m_selected);
    m_kernels.clear();
    if (sets.ok()) {
      for (const auto& line : stagecraft::launch::kernel_sets_lines(sets.value(), r->world_size)) m_kernels << qs(line);
    }
  }
  m_rankGrid->applyEvents(events.value());
  m_expertLoad->applyEvents(events.value());
  if (r->state != m_gridState) {
    m_rankGrid->setRunState(r->state);
    m_gridState = r->state;
  }
  auto logs = st->logs(m_selected, std::nullopt, m_lastLogRow);
  if (!logs.ok()) return showError(qs(logs.status().message()));
  if (!logs->empty()) m_lastLogRow = logs->back().row;
  if (full) {
    m_logs->setLogs(m_selected, r->world_size, logs.value());
    m_fullLoadPending = false;
  } else if (!logs->empty()) {
    m_logs->appendLogs(logs.value());
  }
  updateHeader();
}

QList<qint64> RunsView::selectedRunIds() const {
  QList<qint64> ids;
  for (const QModelIndex& row : m_table->selectionModel()->selectedRows()) ids << row.data(RunsModel::IdRole).toLongLong();
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool RunsView::calibrateSelectedRuns() {
  QList<qint64> ids = selectedRunIds();
  if (ids.isEmpty() && m_selected != 0) ids << m_selected;
  store::RunStore* st = m_model->store();
  bool ok = false;
  if (!st) {
    showError(tr("Calibrate: the run history is not open"));
  } else {
    ok = m_calibrate->calibrate(*st, ids);
    m_calibrate->show();
    m_calibrate->raise();
  }
  return ok;
}

bool RunsView::setComparisonRun(qint64 id) {
  if (id != 0 && !m_model->run(id)) return false;
  if (id == 0) {
    m_charts->setComparison(0, {});
  } else {
    auto metrics = m_model->store()->metrics(id);
    if (!metrics.ok()) {
      showError(qs(metrics.status().message()));
      return false;
    }
    m_charts->setComparison(id, metrics.value());
  }
  const int at = m_compare->findData(id);
  if (at >= 0) m_compare->setCurrentIndex(at);
  return true;
}

qint64 RunsView::comparisonRunId() const { return m_charts->comparisonId(); }

void RunsView::loadComparison() { setComparisonRun(comparisonRunId()); }

void RunsView::rebuildCompareChoices() {
  // Rebuilt only when the choices differ (a run added or gone, a name, another selection): a live
  // run changes its row every second, and a rebuilt list would close an open popup.
  QList<QPair<qint64, QString>> choices;
  for (int row = 0; row < m_model->rowCount(); ++row) {
    const store::RunRecord* r = m_model->runAt(row);
    if (r->id == m_selected) continue;
    choices.append({r->id, tr("run %1: %2").arg(r->id).arg(qs(r->name))});
  }
  const QSignalBlocker block(m_compare);
  if (choices != m_compareChoices || m_compare->count() == 0) {
    m_compareChoices = choices;
    m_compare->clear();
    m_compare->addItem(tr("none"), QVariant::fromValue<qint64>(0));
    for (const auto& [id, text] : std::as_const(choices)) m_compare->addItem(text, QVariant::fromValue<qint64>(id));
  }
  m_compare->setCurrentIndex(std::max(0, m_compare->findData(QVariant::fromValue<qint64>(comparisonRunId()))));
  m_compare->setEnabled(m_selected != 0);
}

void RunsView::updateHeader() {
  const store::RunRecord* r = m_selected ? m_model->run(m_selected) : nullptr;
  // A lost run's Slurm job may outlive its supervisor: Cancel then cancels the job.
  m_cancel->setEnabled(r && (!store::is_terminal(r->state) || (r->state == store::RunState::kLost && !r->job_id.empty())));
  if (!r) {
    m_header->setText(m_model->rowCount() == 0 ? tr("No runs recorded yet: Run > Launch starts one.")
                                                : tr("Select a run to see its curves, ranks and logs."));
    return;
  }
  QString text = tr("<b>run %1</b> %2 — %3").arg(r->id).arg(qs(r->name).toHtmlEscaped(), RunsModel::stateText(r->state));
  if (!r->reason.empty()) text += QStringLiteral(": ") + qs(r->reason).toHtmlEscaped();
  text += tr("<br>step %1/%2 · %3 ranks · started %4 · ended %5 · supervisor pid %6 on %7")
              .arg(r->last_step)
              .arg(r->total_steps)
              .arg(r->world_size)
              .arg(RunsModel::createdText(r->started), RunsModel::createdText(r->ended))
              .arg(r->supervisor.pid)
              .arg(r->supervisor.host.empty() ? QStringLiteral("?") : qs(r->supervisor.host).toHtmlEscaped());
  if (!r->job_id.empty()) text += tr("<br>Slurm job %1").arg(RunsModel::jobText(*r).toHtmlEscaped());
  for (const QString& k : std::as_const(m_kernels)) text += tr("<br>kernels: %1").arg(k.toHtmlEscaped());
  m_header->setText(text);
}

void RunsView::showError(const QString& message) {
  m_lastError = message;
  m_status->setText(message);
}

void RunsView::setStateFilter(const QString& state) {
  m_stateFilter->setCurrentIndex(std::max(0, m_stateFilter->findData(state)));
}

void RunsView::setNameFilter(const QString& text) { m_nameFilter->setText(text); }

QString RunsView::requestCancel(store::RunStore& st, qint64 id) {
  const stagecraft::Status s = store::cancel_run(st, id);  // the same checks and request as `runs cancel`
  if (s) return {};
  // As `runs cancel` does: a lost run's Slurm job is cancelled directly.
  auto r = st.get_run(id);
  if (r.ok() && r->state == store::RunState::kLost && !r->job_id.empty()) {
    const stagecraft::Status c = stagecraft::launch::slurm_cancel(r->job_id);
    return c ? QString() : qs(c.message());
  }
  return qs(s.message());
}

bool RunsView::cancelSelectedRun(QString* error) {
  QString why = m_selected == 0 ? tr("no run selected") : QString();
  if (why.isEmpty() && !m_model->store()) why = tr("the run history is not open");
  if (why.isEmpty()) why = requestCancel(*m_model->store(), m_selected);
  if (error) *error = why;
  if (!why.isEmpty()) {
    showError(tr("Cancel: %1").arg(why));
    refresh();
    return false;
  }
  m_status->setText(tr("Asked run %1 to stop; its ranks get a grace period before they are killed.").arg(m_selected));
  m_cancel->setEnabled(false);
  return true;
}

void RunsView::askCancel() {
  if (m_selected == 0) return;
  const auto answer = QMessageBox::question(this, tr("Cancel run"),
                                            tr("Stop run %1? Every rank is terminated; the run is recorded as cancelled.").arg(m_selected));
  if (answer == QMessageBox::Yes) cancelSelectedRun();
}
