// StageEditor: the strip, the bars, a summary line and the Balance / Uniform buttons (see the
// header). It only forwards: the document decides what an edit means.
#include "stages/StageEditor.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>

#include "common/Text.h"
#include "stagecraft/config/run_config.h"
#include "stages/StageBars.h"
#include "stages/StageStrip.h"

StageEditor::StageEditor(QWidget* parent)
    : QWidget(parent),
      m_strip(new StageStrip(this)),
      m_bars(new StageBars(this)),
      m_summary(new QLabel(this)),
      m_balance(new QPushButton(tr("&Balance"), this)),
      m_uniform(new QPushButton(tr("&Uniform"), this)) {
  m_balance->setToolTip(tr("Split the layers so that the slowest stage is as fast as it can be"));
  m_uniform->setToolTip(tr("The same number of layers on every stage, extras in the middle"));
  m_summary->setObjectName(QStringLiteral("stageSummary"));
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* buttons = new QHBoxLayout();
  buttons->addWidget(m_summary, 1);
  buttons->addWidget(m_balance);
  buttons->addWidget(m_uniform);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_strip);
  layout->addLayout(buttons);
  layout->addWidget(m_bars, 1);

  connect(m_strip, &StageStrip::partitionEdited, this, &StageEditor::partitionEdited);
  connect(m_balance, &QPushButton::clicked, this, &StageEditor::balanceRequested);
  connect(m_uniform, &QPushButton::clicked, this, &StageEditor::uniformRequested);
}

void StageEditor::setPlan(const stagecraft::plan::Plan& plan) {
  m_strip->setPlan(plan);
  m_bars->setPlan(plan);
  QStringList counts;
  double worst = 0;
  for (const auto& s : plan.stages) {
    counts << QString::number(s.num_layers);
    worst = std::max(worst, s.relative_cost);
  }
  const auto kind = plan.config.pipeline.partition;
  const QString how = qs(stagecraft::config::to_string(kind));
  m_summary->setText(tr("%1 layers on %2 %3 (%4): %5 · slowest stage %6x the average")
                         .arg(plan.layer_stage.size())
                         .arg(plan.num_stages())
                         .arg(plan.virtual_stages > 1 ? tr("chunks") : tr("stages"))
                         .arg(how, counts.join(QLatin1Char(',')))
                         .arg(worst, 0, 'f', 2));
}
