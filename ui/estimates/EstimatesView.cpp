// EstimatesView: the estimate's charts and figures (see the header).
#include "estimates/EstimatesView.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QVBoxLayout>

#include <cmath>

#include "common/Text.h"
#include "stagecraft/core/units.h"
#include "stagecraft/model/model.h"
#include "estimates/EstimateCharts.h"
#include "stagecraft/plan/search.h"

namespace {

QString bytes(double b) { return QString::fromStdString(stagecraft::plan::format_bytes(b)); }
QString flopRate(double r) { return QString::fromStdString(stagecraft::format_flop_rate(r)); }

// 1234567 -> "1.23 M"; keeps four significant figures.
QString siNumber(double v) {
  const char* units[] = {"", " k", " M", " B", " T"};
  int u = 0;
  while (std::abs(v) >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  return QString::number(v, 'g', 4) + QString::fromLatin1(units[u]);
}

QString figuresOf(const stagecraft::plan::Plan& plan) {
  const auto& e = plan.estimate;
  // A mixture of experts: every parameter, and those one token passes (top_k of the experts).
  const QString params = e.params_active < e.params_total
                             ? QObject::tr("%1 parameters, %2 active per token").arg(siNumber(e.params_total), siNumber(e.params_active))
                             : QObject::tr("%1 parameters").arg(siNumber(e.params_total));
  return QString::fromStdString(stagecraft::model::ModelDesc::from(plan.config.model).summary()) + QStringLiteral(" · ") +
         QObject::tr("%1 per GPU (model %2) · MFU %3 · %4 tokens/s · %5 · step %6 · "
                     "bubble %7 of the step (schedule formula %8) · m = %9 micro-batches")
      .arg(flopRate(e.tflops_per_gpu * 1e12), flopRate(e.model_tflops_per_gpu * 1e12))
      .arg(percentText(e.mfu), siNumber(e.tokens_per_s), params,
           QString::fromStdString(stagecraft::plan::format_seconds(e.step_time_s)), percentText(e.bubble_fraction),
           percentText(plan.bubble_fraction()))
      .arg(plan.micro_batches);
}

// "+9.8%" for now over then.
QString change(double now, double then) {
  if (then == 0) return QStringLiteral("-");
  const double c = (now / then - 1.0) * 100.0;
  return (c >= 0 ? QStringLiteral("+") : QString()) + QString::number(c, 'f', 1) + QLatin1Char('%');
}

QString seconds(double s) { return QString::fromStdString(stagecraft::plan::format_seconds(s)); }

}  // namespace

EstimatesView::EstimatesView(QWidget* parent)
    : QWidget(parent),
      m_memory(new MemoryChart(this)),
      m_step(new StepTimeChart(this)),
      m_peak(new QLabel(this)),
      m_figures(new QLabel(this)),
      m_warnings(new QLabel(this)) {
  m_peak->setObjectName(QStringLiteral("peakMemory"));
  m_figures->setObjectName(QStringLiteral("figures"));
  m_warnings->setObjectName(QStringLiteral("warnings"));
  QFont bold = m_peak->font();
  bold.setBold(true);
  m_peak->setFont(bold);
  for (QLabel* l : {m_peak, m_figures, m_warnings}) {
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    l->setWordWrap(true);
  }
  m_warnings->setStyleSheet(QStringLiteral("color: #b03000;"));
  m_pin = new QPushButton(tr("Pin"), this);
  m_pin->setObjectName(QStringLiteral("pinPlan"));
  m_pin->setCheckable(true);
  m_pin->setToolTip(tr("Keep this plan beside the next ones to compare them"));
  connect(m_pin, &QPushButton::toggled, this, [this](bool on) {
    if (on == isPinned()) return;
    if (on) {
      if (!pin()) m_pin->setChecked(false);
    } else {
      unpin();
    }
  });

  // The pinned plan: the same charts and figures, in a panel shown only while pinned.
  m_pinnedPanel = new QWidget(this);
  m_pinnedTitle = new QLabel(m_pinnedPanel);
  m_pinnedTitle->setObjectName(QStringLiteral("pinnedTitle"));
  m_pinnedTitle->setFont(bold);
  m_pinnedTitle->setWordWrap(true);
  m_pinnedMemory = new MemoryChart(m_pinnedPanel);
  m_pinnedStep = new StepTimeChart(m_pinnedPanel);
  m_pinnedFigures = new QLabel(m_pinnedPanel);
  m_pinnedFigures->setObjectName(QStringLiteral("pinnedFigures"));
  m_compare = new QLabel(this);
  m_compare->setObjectName(QStringLiteral("comparison"));
  for (QLabel* l : {m_pinnedFigures, m_compare}) {
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    l->setWordWrap(true);
  }
  auto* pinned = new QVBoxLayout(m_pinnedPanel);
  pinned->setContentsMargins(0, 0, 0, 0);
  pinned->addWidget(m_pinnedTitle);
  pinned->addWidget(m_pinnedMemory, 1);
  pinned->addWidget(m_pinnedStep);
  pinned->addWidget(m_pinnedFigures);
  m_pinnedPanel->hide();
  m_compare->hide();

  // The figures and warnings scroll under the charts, so that long text never squeezes the
  // memory chart below its least plot height (MemoryChart::kMinPlotHeight).
  auto* text = new QWidget;
  auto* textLayout = new QVBoxLayout(text);
  textLayout->setContentsMargins(0, 0, 0, 0);
  textLayout->addWidget(m_figures);
  textLayout->addWidget(m_warnings);
  textLayout->addStretch(1);
  m_text = new QScrollArea(this);
  m_text->setObjectName(QStringLiteral("figuresScroll"));
  m_text->setWidget(text);
  m_text->setWidgetResizable(true);
  m_text->setFrameShape(QFrame::NoFrame);
  m_text->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_text->setMinimumHeight(2 * fontMetrics().lineSpacing());

  auto* current = new QVBoxLayout;
  auto* head = new QHBoxLayout;
  head->addWidget(m_peak, 1);
  head->addWidget(m_pin);
  current->addLayout(head);
  current->addWidget(m_memory, 3);
  current->addWidget(m_step);
  current->addWidget(m_text, 2);
  auto* columns = new QHBoxLayout;
  columns->addLayout(current, 1);
  columns->addWidget(m_pinnedPanel, 1);
  auto* layout = new QVBoxLayout(this);
  // Narrower, the step chart's legend runs to one column and the memory bars to slivers.
  setMinimumWidth(300);
  layout->setContentsMargins(6, 4, 6, 4);
  current->setSpacing(4);
  layout->addLayout(columns, 1);
  layout->addWidget(m_compare);
  m_peak->setText(tr("No plan"));
}

bool EstimatesView::pin() {
  if (!m_current) return false;
  m_pinned = m_current;
  m_pinnedMemory->setEstimate(m_pinned->estimate);
  m_pinnedStep->setEstimate(m_pinned->estimate);
  auto layout = m_pinned->config;
  layout.parallel.dp = m_pinned->dp;  // the config may say auto
  m_pinnedTitle->setText(tr("Pinned: %1").arg(QString::fromStdString(stagecraft::plan::layout_string(layout))));
  m_pinnedFigures->setText(figuresOf(*m_pinned));
  m_pinnedPanel->show();
  m_compare->show();
  m_pin->setChecked(true);
  m_pin->setText(tr("Unpin"));
  showComparison();
  Q_EMIT planPinned(*m_pinned);
  return true;
}

void EstimatesView::unpin() {
  const bool was = m_pinned.has_value();
  m_pinned.reset();
  m_pinnedPanel->hide();
  m_compare->hide();
  m_compare->clear();
  m_pin->setChecked(false);
  m_pin->setText(tr("Pin"));
  if (was) Q_EMIT planUnpinned();
}

QString EstimatesView::pinnedFiguresText() const { return m_pinned ? m_pinnedFigures->text() : QString(); }

QString EstimatesView::comparisonText() const { return m_pinned ? m_compare->text() : QString(); }

void EstimatesView::showComparison() {
  if (!m_pinned || !m_current) return;
  const auto& now = m_current->estimate;
  const auto& then = m_pinned->estimate;
  QString text = tr("Current vs pinned: step %1 vs %2 (%3) · tokens/s %4 vs %5 (%6) · per GPU %7 vs %8 · MFU %9 vs %10")
                     .arg(seconds(now.step_time_s), seconds(then.step_time_s), change(now.step_time_s, then.step_time_s),
                          siNumber(now.tokens_per_s), siNumber(then.tokens_per_s), change(now.tokens_per_s, then.tokens_per_s),
                          flopRate(now.tflops_per_gpu * 1e12), flopRate(then.tflops_per_gpu * 1e12))
                     .arg(percentText(now.mfu), percentText(then.mfu));
  text += tr(" · bubble %1 vs %2 · peak %3 vs %4 (%5)")
              .arg(percentText(now.bubble_fraction), percentText(then.bubble_fraction), bytes(now.peak_memory_bytes),
                   bytes(then.peak_memory_bytes), change(now.peak_memory_bytes, then.peak_memory_bytes));
  // The step's parts that differ, in the order of the chart.
  StepTimeChart parts;
  parts.setEstimate(now);
  const auto nowParts = parts.seconds();
  parts.setEstimate(then);
  const auto thenParts = parts.seconds();
  QStringList differ;
  for (int i = 0; i < StepTimeChart::kParts; ++i) {
    if (std::abs(nowParts[static_cast<size_t>(i)] - thenParts[static_cast<size_t>(i)]) > 1e-3 * then.step_time_s) {
      differ << tr("%1 %2 vs %3").arg(StepTimeChart::partName(i), seconds(nowParts[static_cast<size_t>(i)]), seconds(thenParts[static_cast<size_t>(i)]));
    }
  }
  if (!differ.isEmpty()) text += tr("\nStep parts that differ: %1").arg(differ.join(QStringLiteral(", ")));
  m_compare->setText(text);
}

void EstimatesView::setPlan(const stagecraft::plan::Plan& plan) {
  m_current = plan;
  const auto& e = plan.estimate;
  m_memory->setEstimate(e);
  m_step->setEstimate(e);
  m_peak->setText(tr("Peak memory %1 on pp rank %2 of %3 %4 (%5)")
                      .arg(bytes(e.peak_memory_bytes))
                      .arg(e.peak_pp_rank)
                      .arg(bytes(e.device_memory_bytes), QString::fromStdString(e.device))
                      .arg(e.fits ? tr("fits") : tr("does not fit")));
  m_peak->setStyleSheet(e.fits ? QString() : QStringLiteral("color: #d02020;"));
  m_figures->setText(figuresOf(plan));
  QStringList warnings;
  for (const auto& w : plan.warnings) warnings << QStringLiteral("⚠ ") + QString::fromStdString(w);
  m_warnings->setText(warnings.join(QLatin1Char('\n')));
  m_warnings->setVisible(!warnings.isEmpty());
  showComparison();
}

QString EstimatesView::peakMemoryText() const { return m_peak->text(); }
QString EstimatesView::figuresText() const { return m_figures->text(); }
QString EstimatesView::warningsText() const { return m_warnings->text(); }
