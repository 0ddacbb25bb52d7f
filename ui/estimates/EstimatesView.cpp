// EstimatesView: the estimate's charts and figures (see the header).
#include "estimates/EstimatesView.h"

#include <QLabel>
#include <QVBoxLayout>

#include <cmath>

#include "common/Text.h"
#include "stagecraft/core/units.h"
#include "estimates/EstimateCharts.h"

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
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_peak);
  layout->addWidget(m_memory, 1);
  layout->addWidget(m_step);
  layout->addWidget(m_figures);
  layout->addWidget(m_warnings);
  m_peak->setText(tr("No plan"));
}

void EstimatesView::setPlan(const stagecraft::plan::Plan& plan) {
  const auto& e = plan.estimate;
  m_memory->setEstimate(e);
  m_step->setEstimate(e);
  m_peak->setText(tr("Peak memory %1 on pp rank %2 of %3 %4 (%5)")
                      .arg(bytes(e.peak_memory_bytes))
                      .arg(e.peak_pp_rank)
                      .arg(bytes(e.device_memory_bytes), QString::fromStdString(e.device))
                      .arg(e.fits ? tr("fits") : tr("does not fit")));
  m_peak->setStyleSheet(e.fits ? QString() : QStringLiteral("color: #d02020;"));
  m_figures->setText(tr("%1 per GPU (model %2) · MFU %3 · %4 tokens/s · %5 parameters · step %6 · "
                        "bubble %7 of the step (schedule formula %8) · m = %9 micro-batches")
                         .arg(flopRate(e.tflops_per_gpu * 1e12), flopRate(e.model_tflops_per_gpu * 1e12))
                         .arg(percentText(e.mfu), siNumber(e.tokens_per_s), siNumber(e.params_total),
                              QString::fromStdString(stagecraft::plan::format_seconds(e.step_time_s)), percentText(e.bubble_fraction),
                              percentText(plan.bubble_fraction()))
                         .arg(plan.micro_batches));
  QStringList warnings;
  for (const auto& w : plan.warnings) warnings << QStringLiteral("⚠ ") + QString::fromStdString(w);
  m_warnings->setText(warnings.join(QLatin1Char('\n')));
  m_warnings->setVisible(!warnings.isEmpty());
}

QString EstimatesView::peakMemoryText() const { return m_peak->text(); }
QString EstimatesView::figuresText() const { return m_figures->text(); }
QString EstimatesView::warningsText() const { return m_warnings->text(); }
