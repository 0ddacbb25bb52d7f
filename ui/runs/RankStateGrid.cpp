// RankStateGrid: per-rank state from a run's events, painted as node panels of rank tiles.
#include "runs/RankStateGrid.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "common/StageColors.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/overloaded.h"
#include "stagecraft/launch/worker_events.h"

namespace store = stagecraft::store;
namespace launch = stagecraft::launch;
using stagecraft::Json;
using stagecraft::Overloaded;

namespace {

constexpr int kTile = 46;         // tile edge, pixels
constexpr int kGap = 4;           // between tiles
constexpr int kPanelPad = 6;      // inside a node panel
constexpr int kPanelTitle = 18;   // the host name above the tiles
constexpr int kPanelSpacing = 8;  // between node panels
constexpr int kStripe = 6;        // stage colour stripe on top of a tile
constexpr int kMaxColumns = 8;    // tiles per line inside a panel

}  // namespace

RankStateGrid::RankStateGrid(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

QColor RankStateGrid::stateColor(RankState state) {
  switch (state) {
    case RankState::Waiting: return QColor(0xd0, 0xd0, 0xd0);
    case RankState::Started: return QColor(0xa6, 0xc8, 0xef);
    case RankState::Training: return QColor(0x7c, 0xc5, 0x7f);
    case RankState::Done: return QColor(0x3a, 0x7d, 0xc9);
    case RankState::Failed: return QColor(0xd9, 0x4a, 0x4a);
    case RankState::Stopped: return QColor(0x8c, 0x8c, 0x8c);
  }
  return {};
}

QString RankStateGrid::stateName(RankState state) {
  switch (state) {
    case RankState::Waiting: return tr("waiting");
    case RankState::Started: return tr("started");
    case RankState::Training: return tr("training");
    case RankState::Done: return tr("done");
    case RankState::Failed: return tr("failed");
    case RankState::Stopped: return tr("stopped");
  }
  return {};
}

void RankStateGrid::clear() {
  m_ranks.clear();
  m_runEnded = false;
  m_hosts.clear();
  m_nodes = m_perNode = 0;
  updateGeometry();
  update();
}

void RankStateGrid::setRun(const store::RunRecord& run) {
  const int world = std::max(0, run.world_size);
  m_ranks = QVector<RankInfo>(world);
  // Layout and stages from the plan the run was started with.
  int nodes = 0;
  if (auto plan = Json::parse(run.plan_json); plan.ok() && plan->is_object()) {
    if (const Json* n = plan->find("nodes"); n && n->is_number()) nodes = static_cast<int>(n->as_int());
    if (const Json* ranks = plan->find("ranks"); ranks && ranks->is_array()) {
      for (const Json& r : ranks->as_array()) {
        const Json* id = r.find("rank");
        const Json* pp = r.find("pp");
        if (id && pp && id->is_number() && pp->is_number() && id->as_int() >= 0 && id->as_int() < world) {
          m_ranks[static_cast<int>(id->as_int())].stage = static_cast<int>(pp->as_int());
        }
      }
    }
  }
  if (nodes <= 0 || nodes > world) nodes = run.hosts.empty() ? 1 : static_cast<int>(run.hosts.size());
  nodes = std::clamp(nodes, world > 0 ? 1 : 0, std::max(world, 1));
  m_nodes = world > 0 ? nodes : 0;
  m_perNode = m_nodes > 0 ? (world + m_nodes - 1) / m_nodes : 0;
  m_hosts.clear();
  for (int n = 0; n < m_nodes; ++n) {
    m_hosts << (static_cast<int>(run.hosts.size()) == m_nodes ? QString::fromStdString(run.hosts[static_cast<size_t>(n)])
                                                              : tr("node %1").arg(n));
  }

  m_runEnded = store::is_terminal(run.state);
  updateGeometry();
  update();
}

void RankStateGrid::applyEvents(const std::vector<store::EventRow>& rows) {
  if (rows.empty()) return;
  const int world = static_cast<int>(m_ranks.size());
  for (const auto& e : rows) {
    if (e.rank < 0 || e.rank >= world) continue;
    RankInfo& info = m_ranks[e.rank];
    // A row that does not decode (written by a newer worker) leaves the rank as it was.
    auto event = launch::decode_event(e.json);
    if (!event.ok()) continue;
    const auto advance = [&info](int64_t step) { info.step = std::max<qint64>(info.step, step); };
    const auto training = [&info] {
      if (info.state != RankState::Failed && info.state != RankState::Done) info.state = RankState::Training;
    };
    std::visit(Overloaded{
                   [&](const launch::StartEvent& x) {
                     advance(x.step);
                     if (info.state == RankState::Waiting) info.state = RankState::Started;
                   },
                   [&](const launch::StepEvent& x) {
                     advance(x.step);
                     training();
                   },
                   [&](const launch::TimingEvent&) {},  // the step event says as much
                   [&](const launch::CheckpointEvent& x) {
                     advance(x.step);
                     training();
                   },
                   [&](const launch::DoneEvent& x) {
                     advance(x.step);
                     if (info.state != RankState::Failed) info.state = RankState::Done;
                   },
                   [&](const launch::ErrorEvent& x) {
                     info.state = RankState::Failed;
                     info.detail = QString::fromStdString(x.message);
                   },
               },
               event.value());
  }
  update();
}

void RankStateGrid::setRunState(store::RunState state) {
  const bool ended = store::is_terminal(state);
  if (ended == m_runEnded) return;
  m_runEnded = ended;
  update();
}

RankStateGrid::RankInfo RankStateGrid::rank(int r) const {
  RankInfo info = m_ranks.value(r);
  if (m_runEnded && r >= 0 && r < m_ranks.size() && info.state != RankState::Done && info.state != RankState::Failed) {
    info.state = RankState::Stopped;
  }
  return info;
}

int RankStateGrid::columnsPerPanel() const { return std::clamp(m_perNode, 1, kMaxColumns); }

int RankStateGrid::panelHeight() const {
  const int lines = m_perNode > 0 ? (m_perNode + kMaxColumns - 1) / kMaxColumns : 1;
  return kPanelTitle + 2 * kPanelPad + lines * kTile + (lines - 1) * kGap;
}

QRect RankStateGrid::panelRect(int node) const {
  const int panelWidth = 2 * kPanelPad + columnsPerPanel() * (kTile + kGap) - kGap;
  const int perRow = std::max(1, (width() + kPanelSpacing) / (panelWidth + kPanelSpacing));
  const int row = node / perRow, col = node % perRow;
  return QRect(col * (panelWidth + kPanelSpacing), row * (panelHeight() + kPanelSpacing), panelWidth, panelHeight());
}

QRect RankStateGrid::tileRect(int rank) const {
  if (m_perNode <= 0) return {};
  const QRect panel = panelRect(rank / m_perNode);
  const int local = rank % m_perNode;
  const int line = local / kMaxColumns, col = local % kMaxColumns;
  return QRect(panel.left() + kPanelPad + col * (kTile + kGap), panel.top() + kPanelTitle + kPanelPad + line * (kTile + kGap),
               kTile, kTile);
}

int RankStateGrid::rankAt(const QPoint& pos) const {
  for (int r = 0; r < m_ranks.size(); ++r) {
    if (tileRect(r).contains(pos)) return r;
  }
  return -1;
}

QSize RankStateGrid::sizeHint() const {
  if (m_nodes == 0) return QSize(200, 80);
  const QRect last = panelRect(m_nodes - 1);
  return QSize(std::max(last.right() + 1, panelRect(0).right() + 1), last.bottom() + 1);
}

QSize RankStateGrid::minimumSizeHint() const {
  if (m_nodes == 0) return QSize(100, 40);
  return QSize(panelRect(0).width(), sizeHint().height());
}

void RankStateGrid::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  updateGeometry();
}

void RankStateGrid::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  if (m_ranks.isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("Select a run to see its ranks"));
    return;
  }
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1.5));
  for (int n = 0; n < m_nodes; ++n) {
    const QRect panel = panelRect(n);
    p.setPen(palette().color(QPalette::Mid));
    p.setBrush(palette().color(QPalette::AlternateBase));
    p.drawRoundedRect(panel, 4, 4);
    p.setPen(palette().color(QPalette::Text));
    p.setFont(font());
    p.drawText(panel.adjusted(kPanelPad, 2, -kPanelPad, 0).topLeft() + QPoint(0, kPanelTitle - 5), m_hosts.value(n));
  }
  p.setFont(small);
  for (int r = 0; r < m_ranks.size(); ++r) {
    const RankInfo info = rank(r);
    const QRect tile = tileRect(r);
    const QColor fill = stateColor(info.state);
    p.setPen(Qt::NoPen);
    p.setBrush(fill);
    p.drawRect(tile);
    if (info.stage >= 0) {
      p.setBrush(stageColor(info.stage));
      p.drawRect(QRect(tile.left(), tile.top(), tile.width(), kStripe));
    }
    p.setPen(textColorOn(fill));
    const QRect text = tile.adjusted(1, kStripe, -1, -1);
    const QString label = info.step > 0 ? QStringLiteral("%1\n%2").arg(r).arg(info.step) : QString::number(r);
    p.drawText(text, Qt::AlignCenter, label);
  }
}

bool RankStateGrid::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int r = rankAt(help->pos());
    if (r < 0) {
      QToolTip::hideText();
      event->ignore();
      return true;
    }
    const RankInfo info = rank(r);
    QString tip = tr("rank %1: %2").arg(r).arg(stateName(info.state));
    if (info.stage >= 0) tip += tr(", stage %1").arg(info.stage);
    if (info.step > 0) tip += tr(", step %1").arg(info.step);
    if (!info.detail.isEmpty()) tip += QStringLiteral("\n") + info.detail;
    QToolTip::showText(help->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(event);
}
