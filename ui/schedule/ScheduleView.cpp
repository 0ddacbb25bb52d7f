// ScheduleView: the header line and the timeline scene (see the header).
#include "schedule/ScheduleView.h"

#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsView>
#include <QLabel>
#include <QVBoxLayout>

#include <algorithm>

#include "common/ImageExport.h"
#include "common/Text.h"
#include "schedule/ScheduleTimelineItem.h"

using stagecraft::config::Schedule;

namespace {

constexpr int kMaxDrawnBlocks = 6000;  // forward + backward blocks over every rank
constexpr double kTitleGap = 8.0;      // scene units between the title and the timeline
constexpr int kTitleFontPx = 13;


}  // namespace

ScheduleView::ScheduleView(QWidget* parent)
    : QWidget(parent), m_header(new QLabel(this)), m_scene(new QGraphicsScene(this)), m_view(new QGraphicsView(this)) {
  m_header->setObjectName(QStringLiteral("scheduleHeader"));
  m_header->setWordWrap(true);
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_view->setScene(m_scene);
  m_view->setRenderHint(QPainter::Antialiasing, false);
  m_view->setDragMode(QGraphicsView::ScrollHandDrag);
  m_view->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  m_view->setBackgroundBrush(Qt::white);
  m_item = new ScheduleTimelineItem();
  m_scene->addItem(m_item);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_header);
  layout->addWidget(m_view, 1);
  m_header->setText(tr("No plan"));
}

int ScheduleView::drawnMicroBatches(int pp, int virtualStages, int microBatches, bool interleaved) {
  const int p = std::max(1, pp);
  const int v = interleaved ? std::max(1, virtualStages) : 1;
  const int cap = std::max(1, kMaxDrawnBlocks / (2 * v * p));
  int m = std::min(std::max(1, microBatches), cap);
  // Interleaving needs m to be a multiple of p.
  if (interleaved && m < microBatches) m = std::max(p, m / p * p);
  return m;
}

void ScheduleView::setPlan(const stagecraft::plan::Plan& plan) {
  const Schedule schedule = plan.config.pipeline.schedule;
  const bool interleaved = schedule == Schedule::kInterleaved;
  const int p = std::max(1, plan.pp);
  const int v = interleaved ? std::max(1, plan.virtual_stages) : 1;
  const int m = std::max(1, plan.micro_batches);
  const int drawn = drawnMicroBatches(p, v, m, interleaved);
  m_timeline = simulateSchedule(schedule, p, v, drawn);
  m_item->setTimeline(m_timeline);

  const QString name = qs(stagecraft::config::to_string(schedule));
  QString text = interleaved ? tr("%1 · p = %2 · v = %3 · m = %4").arg(name).arg(p).arg(v).arg(m)
                             : tr("%1 · p = %2 · m = %3").arg(name).arg(p).arg(m);
  if (!m_timeline.ok) {
    text += tr(" · these op orders do not complete; check pipeline.schedule and the micro-batch count");
  } else {
    text += tr(" · simulated bubble %1 of the ranks' time (forward 1, backward 2 units, no communication)")
                .arg(percentText(m_timeline.idleFraction()));
    text += interleaved ? tr(" · formula (p-1)/(v m) = %1 of the ideal step").arg(percentText(plan.bubble_fraction()))
                        : tr(" · formula (p-1)/m = %1 of the ideal step").arg(percentText(plan.bubble_fraction()));
  }
  if (drawn < m) text += tr(" · showing the first %1 of %2 micro-batches (the simulated bubble is for those)").arg(drawn).arg(m);
  m_header->setText(text);

  m_scene->setSceneRect(m_item->boundingRect());
}

QString ScheduleView::headerText() const { return m_header->text(); }

bool ScheduleView::exportImage(const QString& path, QString* error) {
  if (m_timeline.blocks.empty()) {
    if (error) *error = tr("export %1: there is no schedule to export; load a plan first").arg(path);
    return false;
  }
  // The header line above the timeline, so that the image says what it shows.
  auto* title = new QGraphicsSimpleTextItem(m_header->text());
  QFont f = title->font();
  f.setPixelSize(kTitleFontPx);
  title->setFont(f);
  m_scene->addItem(title);
  title->setPos(0, -title->boundingRect().height() - kTitleGap);
  const bool ok = exportSceneImage(m_scene, path, error);
  delete title;
  return ok;
}
