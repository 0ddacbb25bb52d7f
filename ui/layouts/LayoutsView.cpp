// The Find layouts dock: constraint fields, search controls, scatter, table, why, Apply.
// See LayoutsView.h.
#include "layouts/LayoutsView.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>

#include "common/Text.h"
#include "document/PlanDocument.h"
#include "layouts/LayoutSearch.h"
#include "layouts/LayoutsChart.h"
#include "layouts/LayoutsModel.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/validate.h"

namespace plan = stagecraft::plan;
namespace cfg = stagecraft::config;

namespace {

constexpr int kProgressSteps = 1000;  // the progress bar's resolution
constexpr int kMaxSize = 1 << 20;     // largest tp, pp or micro-batch a field takes

QSpinBox* anySpin(const QString& name) {
  auto* s = new QSpinBox;
  s->setObjectName(name);
  s->setRange(0, kMaxSize);
  s->setSpecialValueText(QObject::tr("any"));
  return s;
}

QCheckBox* check(const QString& text, const QString& name, bool on) {
  auto* c = new QCheckBox(text);
  c->setObjectName(name);
  c->setChecked(on);
  return c;
}

}  // namespace

LayoutsView::LayoutsView(PlanDocument* document, QWidget* parent)
    : QWidget(parent), m_document(document), m_search(new LayoutSearch(this)), m_model(new LayoutsModel(this)) {
  auto* layout = new QVBoxLayout(this);

  auto* controls = new QHBoxLayout;
  m_find = new QPushButton(tr("Find layouts"));
  m_find->setObjectName(QStringLiteral("findLayouts"));
  m_cancel = new QPushButton(tr("Cancel"));
  m_cancel->setObjectName(QStringLiteral("cancelSearch"));
  m_cancel->setEnabled(false);
  m_progress = new QProgressBar;
  m_progress->setRange(0, kProgressSteps);
  m_progress->setValue(0);
  m_apply = new QPushButton(tr("Apply"));
  m_apply->setObjectName(QStringLiteral("applyLayout"));
  m_apply->setEnabled(false);
  m_apply->setToolTip(tr("Make the selected layout the plan (one undoable edit)"));
  controls->addWidget(m_find);
  controls->addWidget(m_cancel);
  controls->addWidget(m_progress, 1);
  controls->addWidget(m_apply);
  layout->addLayout(controls);

  auto* form = new QFormLayout;
  buildFields(form);
  layout->addLayout(form);

  m_status = new QLabel;
  m_status->setObjectName(QStringLiteral("layoutsStatus"));
  m_status->setWordWrap(true);
  layout->addWidget(m_status);

  m_chart = new LayoutsChart(m_model, this);
  m_proxy = new QSortFilterProxyModel(this);
  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(LayoutsModel::kSortRole);
  m_table = new QTableView;
  m_table->setModel(m_proxy);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(LayoutsModel::kRank, Qt::AscendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_table->verticalHeader()->hide();
  m_table->setWordWrap(false);
  m_table->setTextElideMode(Qt::ElideMiddle);
  m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
  // Numeric columns as wide as their widest text, the layout gets the rest (measuring 5,000 rows
  // with ResizeToContents would cost more than the search).
  const QFontMetrics fm = m_table->fontMetrics();
  const int pad = 2 * fm.horizontalAdvance(QLatin1Char('0'));
  const std::pair<int, const char*> widths[] = {{LayoutsModel::kRank, "00000"},     {LayoutsModel::kPeakMemory, "000.0 GiB"},
                                                {LayoutsModel::kStep, "00.00 ms"},  {LayoutsModel::kTflops, "000.0 TFLOP/s"},
                                                {LayoutsModel::kMfu, "00.0%"},      {LayoutsModel::kTokens, "0.000e+06"}};
  for (auto [column, sample] : widths) m_table->horizontalHeader()->resizeSection(column, fm.horizontalAdvance(QLatin1String(sample)) + pad);
  m_table->horizontalHeader()->setSectionResizeMode(LayoutsModel::kLayout, QHeaderView::Stretch);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_chart);
  split->addWidget(m_table);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  layout->addWidget(split, 1);

  m_why = new QLabel;
  m_why->setObjectName(QStringLiteral("layoutsWhy"));
  m_why->setWordWrap(true);
  m_why->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_why);

  connect(m_find, &QPushButton::clicked, this, &LayoutsView::findLayouts);
  connect(m_cancel, &QPushButton::clicked, m_search, &LayoutSearch::cancel);
  connect(m_apply, &QPushButton::clicked, this, &LayoutsView::applySelected);
  connect(m_search, &LayoutSearch::progressed, this, [this](double f) { m_progress->setValue(static_cast<int>(f * kProgressSteps)); });
  connect(m_search, &LayoutSearch::finished, this, &LayoutsView::searchFinished);
  connect(m_search, &LayoutSearch::failed, this, [this](const QString& message) {
    m_cancel->setEnabled(false);
    setStatus(message);
  });
  connect(m_search, &LayoutSearch::cancelled, this, [this] {
    m_cancel->setEnabled(false);
    m_progress->setValue(0);
    setStatus(tr("Search cancelled."));
  });
  connect(m_model, &LayoutsModel::filtered, m_chart, &LayoutsChart::scheduleRebuild);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &LayoutsView::tableSelectionChanged);
  connect(m_chart, &LayoutsChart::rowClicked, this, [this](int row) {
    QList<int> rows;
    if (QApplication::keyboardModifiers() & Qt::ControlModifier) rows = selectedRows();
    rows.removeAll(row);
    rows.append(row);
    selectRows(rows);
  });
  connect(m_chart, &LayoutsChart::rowDoubleClicked, this, [this](int row) {
    selectRows({row});
    applySelected();
  });
  connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    selectRows({m_proxy->mapToSource(index).row()});
    applySelected();
  });
  connect(m_document, &PlanDocument::configChanged, this, &LayoutsView::documentChanged);
  showExpertFields();
  setStatus(tr("Find layouts searches every layout of this cluster and model (Ctrl+F)."));
}

namespace {

// The config without the keys search chooses (and the stage split that follows them).
cfg::RunConfig withoutLayout(cfg::RunConfig c) {
  c.parallel.dp = c.parallel.tp = c.parallel.pp = c.parallel.cp = c.parallel.ep = 0;
  c.parallel.sequence_parallel = false;
  c.parallel.zero = 0;
  c.pipeline.schedule = cfg::Schedule::k1f1b;
  c.pipeline.virtual_stages = 0;
  c.pipeline.partition = cfg::PartitionKind::kUniform;
  c.pipeline.stage_ids.clear();
  c.train.micro_batch = 0;
  c.train.recompute = cfg::Recompute::kNone;
  return c;
}

}  // namespace

void LayoutsView::documentChanged() {
  showExpertFields();
  if (!m_searched || withoutLayout(*m_searched) == withoutLayout(m_document->config())) return;
  m_searched.reset();
  selectRows({});
  m_model->setLayouts(nullptr);
  setStatus(tr("The configuration changed since the search: find layouts again (Ctrl+F)."));
}

LayoutsView::~LayoutsView() = default;

void LayoutsView::showExpertFields() {
  const bool moe = m_document->config().model.moe.enabled();
  m_ep->setVisible(moe);
  m_epLabel->setVisible(moe);
}

void LayoutsView::buildFields(QFormLayout* form) {
  m_fitsOnly = check(tr("fits only"), QStringLiteral("fitsOnly"), true);
  m_tpWithinNode = check(tr("TP within a node"), QStringLiteral("tpWithinNode"), false);
  // Rank as search --plausible does: each MFU capped at the device's best published one.
  m_plausible = check(tr("cap at published MFU"), QStringLiteral("plausible"), false);
  m_plausible->setToolTip(tr("Rank with each layout's MFU capped at the best published for the device, so the "
                             "model's optimism does not pick the winner; the estimates are unchanged"));
  auto* flags = new QHBoxLayout;
  flags->addWidget(m_fitsOnly);
  flags->addWidget(m_tpWithinNode);
  flags->addWidget(m_plausible);
  flags->addStretch(1);
  form->addRow(tr("Keep"), flags);

  m_tp = anySpin(QStringLiteral("tp"));
  m_pp = anySpin(QStringLiteral("pp"));
  m_cp = anySpin(QStringLiteral("cp"));
  m_ep = anySpin(QStringLiteral("ep"));
  m_ep->setToolTip(tr("expert parallel size: the experts of each mixture-of-experts layer split over ep ranks"));
  m_maxMicroBatch = anySpin(QStringLiteral("maxMicroBatch"));
  auto* sizes = new QHBoxLayout;
  sizes->addWidget(new QLabel(tr("tp")));
  sizes->addWidget(m_tp);
  sizes->addWidget(new QLabel(tr("pp")));
  sizes->addWidget(m_pp);
  sizes->addWidget(new QLabel(tr("cp")));
  sizes->addWidget(m_cp);
  // ep only means something for a mixture of experts (searchFinished shows it then).
  m_epLabel = new QLabel(tr("ep"));
  sizes->addWidget(m_epLabel);
  sizes->addWidget(m_ep);
  sizes->addStretch(1);
  form->addRow(tr("Fixed"), sizes);
  // ZeRO stages up to this one: 0 none, 1 optimizer state, 2 and gradients, 3 and weights.
  m_maxZero = new QSpinBox;
  m_maxZero->setObjectName(QStringLiteral("maxZero"));
  m_maxZero->setRange(0, 3);
  m_maxZero->setValue(3);
  m_maxZero->setToolTip(tr("the highest ZeRO stage tried: 1 shards optimizer state, 2 also gradients, 3 also weights"));
  auto* microBatch = new QHBoxLayout;
  microBatch->addWidget(m_maxMicroBatch);
  microBatch->addWidget(new QLabel(tr("ZeRO at most")));
  microBatch->addWidget(m_maxZero);
  microBatch->addStretch(1);
  form->addRow(tr("Micro-batch at most"), microBatch);

  auto* schedules = new QHBoxLayout;
  for (auto s : {cfg::Schedule::kGpipe, cfg::Schedule::k1f1b, cfg::Schedule::kInterleaved}) {
    const QString name = qs(cfg::to_string(s));
    m_schedules.append(check(name, name, true));
    schedules->addWidget(m_schedules.back());
  }
  schedules->addStretch(1);
  form->addRow(tr("Schedules"), schedules);
  // Recompute on a row of its own: the view stays narrow enough to share the window's left column.
  auto* recomputes = new QHBoxLayout;
  for (auto r : {cfg::Recompute::kNone, cfg::Recompute::kSelective, cfg::Recompute::kFull}) {
    const QString name = qs(cfg::to_string(r));
    m_recomputes.append(check(name, name, true));
    recomputes->addWidget(m_recomputes.back());
  }
  recomputes->addStretch(1);
  form->addRow(tr("Recompute"), recomputes);

  m_colourBy = new QComboBox;
  m_colourBy->setObjectName(QStringLiteral("colourBy"));
  m_colourBy->addItem(tr("pp"), static_cast<int>(LayoutsChart::ColourBy::kPp));
  m_colourBy->addItem(tr("tp"), static_cast<int>(LayoutsChart::ColourBy::kTp));
  m_colourBy->addItem(tr("schedule"), static_cast<int>(LayoutsChart::ColourBy::kSchedule));
  m_colourBy->addItem(tr("recompute"), static_cast<int>(LayoutsChart::ColourBy::kRecompute));
  auto* yAxis = new QComboBox;
  yAxis->setObjectName(QStringLiteral("yAxis"));
  yAxis->addItem(tr("tokens/s"), static_cast<int>(LayoutsChart::YAxis::kTokensPerS));
  yAxis->addItem(tr("step time"), static_cast<int>(LayoutsChart::YAxis::kStepTime));
  connect(yAxis, &QComboBox::currentIndexChanged, this,
          [this, yAxis] { m_chart->setYAxis(static_cast<LayoutsChart::YAxis>(yAxis->currentData().toInt())); });
  auto* plot = new QHBoxLayout;
  plot->addWidget(new QLabel(tr("y")));
  plot->addWidget(yAxis);
  plot->addWidget(new QLabel(tr("colour by")));
  plot->addWidget(m_colourBy, 1);
  form->addRow(tr("Chart"), plot);
  connect(m_colourBy, &QComboBox::currentIndexChanged, this, [this] {
    m_chart->setColourBy(static_cast<LayoutsChart::ColourBy>(m_colourBy->currentData().toInt()));
    m_chart->setSelectedRows(selectedRows());
  });

  for (QCheckBox* c : {m_fitsOnly, m_tpWithinNode}) connect(c, &QCheckBox::toggled, this, &LayoutsView::constraintsEdited);
  connect(m_plausible, &QCheckBox::toggled, this, [this](bool on) {
    selectRows({});
    m_model->setCapped(on);
    m_table->sortByColumn(LayoutsModel::kRank, Qt::AscendingOrder);
    setStatus(statusText());
  });
  // A group with every box cleared would allow nothing (the engine reads an empty list as
  // "any"): the last box of a group cannot be cleared.
  for (const QList<QCheckBox*>* group : {&m_schedules, &m_recomputes}) {
    for (QCheckBox* c : *group) {
      connect(c, &QCheckBox::toggled, this, [this, c, group](bool on) {
        if (!on && std::none_of(group->begin(), group->end(), [](QCheckBox* b) { return b->isChecked(); })) {
          c->setChecked(true);  // toggles again, which re-filters
          return;
        }
        constraintsEdited();
      });
    }
  }
  for (QSpinBox* s : {m_tp, m_pp, m_cp, m_ep, m_maxMicroBatch, m_maxZero}) connect(s, &QSpinBox::valueChanged, this, &LayoutsView::constraintsEdited);
}

QWidget* LayoutsView::field(const QString& name) const { return findChild<QWidget*>(name); }

plan::LayoutConstraints LayoutsView::constraints() const {
  plan::LayoutConstraints k;
  k.fits_only = m_fitsOnly->isChecked();
  k.tp_within_node = m_tpWithinNode->isChecked();
  k.max_zero = m_maxZero->value();
  k.tp = m_tp->value();
  k.pp = m_pp->value();
  k.cp = m_cp->value();
  k.ep = m_document->config().model.moe.enabled() ? m_ep->value() : 0;  // a dense model's layouts have no ep
  k.max_micro_batch = m_maxMicroBatch->value();
  const cfg::Schedule schedules[] = {cfg::Schedule::kGpipe, cfg::Schedule::k1f1b, cfg::Schedule::kInterleaved};
  const cfg::Recompute recomputes[] = {cfg::Recompute::kNone, cfg::Recompute::kSelective, cfg::Recompute::kFull};
  // All checked means "any"; at least one box of each group stays checked (buildFields).
  bool allSchedules = true, allRecomputes = true;
  for (int i = 0; i < 3; ++i) {
    if (m_schedules[i]->isChecked()) k.schedules.push_back(schedules[i]);
    else allSchedules = false;
    if (m_recomputes[i]->isChecked()) k.recomputes.push_back(recomputes[i]);
    else allRecomputes = false;
  }
  if (allSchedules) k.schedules.clear();
  if (allRecomputes) k.recomputes.clear();
  return k;
}

void LayoutsView::findLayouts() {
  selectRows({});
  m_progress->setValue(0);
  m_cancel->setEnabled(true);
  setStatus(tr("Searching the layouts of %1 GPUs...").arg(m_document->config().world_size()));
  m_searched = m_document->config();
  m_search->start(*m_searched);
}

void LayoutsView::searchFinished() {
  m_cancel->setEnabled(false);
  m_progress->setValue(kProgressSteps);
  m_model->setConstraints(constraints());
  m_model->setLayouts(m_search->layouts());
  m_table->sortByColumn(LayoutsModel::kRank, Qt::AscendingOrder);
  setStatus(statusText());
}

void LayoutsView::constraintsEdited() {
  selectRows({});
  m_model->setConstraints(constraints());
  setStatus(statusText());
}

QString LayoutsView::statusText() const {
  if (m_model->allLayouts().empty() || !m_searched) return m_status->text();
  return tr("%1 layouts estimated, %2 fit, %3 shown, in %4%5")
      .arg(m_search->evaluated())
      .arg(m_search->fitting())
      .arg(m_model->rowCount())
      .arg(qs(plan::format_seconds(m_search->seconds())))
      .arg(m_model->capped() ? tr("; ranked with MFU capped at the device's best published") : QString());
}

void LayoutsView::setStatus(const QString& text) { m_status->setText(text); }

void LayoutsView::selectRows(const QList<int>& rows) {
  m_selecting = true;
  QItemSelection selection;
  for (int r : rows) {
    if (r < 0 || r >= m_model->rowCount()) continue;
    const QModelIndex a = m_proxy->mapFromSource(m_model->index(r, 0));
    const QModelIndex b = m_proxy->mapFromSource(m_model->index(r, LayoutsModel::kColumnCount - 1));
    selection.select(a, b);
  }
  m_table->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect);
  m_selecting = false;
  // Selection order: the rows as given (the last is previewed).
  m_selectedLayouts.clear();
  const auto& all = m_model->allLayouts();
  for (int r : rows) {
    if (r < 0 || r >= m_model->rowCount()) continue;
    m_selectedLayouts.push_back(static_cast<int>(&m_model->candidate(r) - all.data()));
  }
  if (!rows.isEmpty() && rows.back() >= 0 && rows.back() < m_model->rowCount()) {
    m_table->scrollTo(m_proxy->mapFromSource(m_model->index(rows.back(), 0)));
  }
  tableSelectionChanged();
}

QList<int> LayoutsView::selectedRows() const {
  QList<int> rows;
  for (int index : m_selectedLayouts) {
    const int r = m_model->rowOfLayout(index);
    if (r >= 0) rows.append(r);
  }
  return rows;
}

void LayoutsView::tableSelectionChanged() {
  if (m_selecting) return;
  // Keep the selection order: rows still selected stay in place, new ones go last.
  QList<int> inTable;
  for (const QModelIndex& i : m_table->selectionModel()->selectedRows()) inTable.append(m_proxy->mapToSource(i).row());
  QList<int> ordered;
  for (int r : selectedRows()) {
    if (inTable.contains(r)) ordered.append(r);
  }
  for (int r : inTable) {
    if (!ordered.contains(r)) ordered.append(r);
  }
  m_selectedLayouts.clear();
  const auto& all = m_model->allLayouts();
  for (int r : ordered) m_selectedLayouts.push_back(static_cast<int>(&m_model->candidate(r) - all.data()));

  m_chart->setSelectedRows(ordered);
  m_apply->setEnabled(!ordered.isEmpty());
  if (ordered.size() >= 2) {
    const auto& a = m_model->candidate(ordered[ordered.size() - 2]);
    const auto& b = m_model->candidate(ordered.back());
    const bool aFaster = a.estimate.step_time_s <= b.estimate.step_time_s;
    m_why->setText(qs(aFaster ? plan::why_faster(a, b) : plan::why_faster(b, a)));
  } else {
    m_why->setText(ordered.isEmpty() ? QString() : tr("Select a second layout (Ctrl+click) to see why one beats the other."));
  }
  if (ordered.isEmpty()) {
    Q_EMIT previewEnded();
    return;
  }
  QString error;
  auto p = planOfRow(ordered.back(), &error);
  if (!p) {
    setStatus(error);
    return;
  }
  Q_EMIT previewRequested(*p);
}

QString LayoutsView::whyText() const { return m_why->text(); }

std::optional<cfg::RunConfig> LayoutsView::configWithLayout(const plan::Candidate& candidate, QString* error) const {
  cfg::RunConfig base = m_document->config();
  // An explicit split names stages of the old pp; the new layout starts from a uniform one.
  if (base.pipeline.partition == cfg::PartitionKind::kExplicit) {
    base.pipeline.partition = cfg::PartitionKind::kUniform;
    base.pipeline.stage_ids.clear();
  }
  auto c = cfg::apply_overrides(base, plan::layout_overrides(candidate.config));
  if (c.ok() && cfg::validate(c.value()).empty()) return c.value();
  if (error) {
    *error = tr("The layout %1 does not suit the current configuration (it changed since the search): find layouts again.")
                 .arg(qs(plan::layout_string(candidate.config)));
  }
  return std::nullopt;
}

std::optional<plan::Plan> LayoutsView::planOfRow(int row, QString* error) const {
  if (row < 0 || row >= m_model->rowCount()) {
    if (error) *error = tr("No layout in row %1.").arg(row + 1);
    return std::nullopt;
  }
  auto c = configWithLayout(m_model->candidate(row), error);
  if (!c) return std::nullopt;
  auto p = plan::make_plan(*c);
  if (!p.ok()) {
    if (error) *error = qs(p.status().message());
    return std::nullopt;
  }
  return std::move(p.value());
}

bool LayoutsView::applySelected() {
  const QList<int> rows = selectedRows();
  if (rows.isEmpty()) {
    setStatus(tr("Select a layout to apply."));
    return false;
  }
  const auto& candidate = m_model->candidate(rows.back());
  QString error;
  auto c = configWithLayout(candidate, &error);
  if (!c) {
    setStatus(error);
    return false;
  }
  m_document->setConfig(*c, tr("Apply layout %1").arg(qs(plan::layout_string(candidate.config))));
  setStatus(tr("Applied %1 (Ctrl+Z undoes it).").arg(qs(plan::layout_string(candidate.config))));
  return true;
}
