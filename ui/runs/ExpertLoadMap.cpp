// ExpertLoadMap: the step events' expert counts folded per (layer, expert), and their heat map.
#include "runs/ExpertLoadMap.h"

#include <QHelpEvent>
#include <QLocale>
#include <QPainter>
#include <QToolTip>

#include <algorithm>

#include "stagecraft/core/json.h"

namespace store = stagecraft::store;
using stagecraft::Json;

namespace {

// Layout, widget pixels.
constexpr int kLabelWidth = 64;    // "layer 47" left of each row
constexpr int kHeaderHeight = 16;  // expert numbers above the columns
constexpr int kCaptionHeight = 36;
constexpr int kMargin = 8;
constexpr int kMinCell = 3, kMaxCellWidth = 28, kMaxCellHeight = 22;

// White for no tokens to a dark red for the largest share on the map (ColorBrewer's Reds end).
const QColor kEmpty(0xFF, 0xFF, 0xFF);
const QColor kHot(0x99, 0x00, 0x0D);

QColor mix(const QColor& a, const QColor& b, double t) {
  t = std::clamp(t, 0.0, 1.0);
  return QColor::fromRgbF(static_cast<float>(a.redF() + (b.redF() - a.redF()) * t), static_cast<float>(a.greenF() + (b.greenF() - a.greenF()) * t),
                          static_cast<float>(a.blueF() + (b.blueF() - a.blueF()) * t));
}

QString count(int64_t n) { return QLocale().toString(static_cast<qlonglong>(n)); }

}  // namespace

ExpertLoadMap::ExpertLoadMap(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("expertLoadMap"));
  setMouseTracking(true);
}

void ExpertLoadMap::clear() {
  m_load.clear();
  m_experts = 0;
  m_dropped = 0;
  m_stepEvents = 0;
  updateGeometry();
  update();
}

void ExpertLoadMap::applyEvents(const std::vector<store::EventRow>& rows) {
  bool changed = false;
  for (const auto& e : rows) {
    if (e.kind != "step") continue;
    auto parsed = Json::parse(e.json);
    if (!parsed.ok() || !parsed->is_object()) continue;
    const Json* load = parsed->find("moe_load");
    if (!load || !load->is_array() || load->size() == 0) continue;
    const Json* ids = parsed->find("moe_layers");
    if (ids && (!ids->is_array() || ids->size() != load->size())) ids = nullptr;  // unusable: rows in model order
    ++m_stepEvents;
    changed = true;
    for (size_t k = 0; k < load->size(); ++k) {
      const Json& row = (*load)[k];
      if (!row.is_array() || row.size() == 0) continue;
      const int layer = ids && (*ids)[k].is_int() ? static_cast<int>((*ids)[k].as_int()) : static_cast<int>(k);
      std::vector<int64_t> counts;
      counts.reserve(row.size());
      bool valid = true;
      for (size_t x = 0; x < row.size() && valid; ++x) {
        valid = row[x].is_int() && row[x].as_int() >= 0;
        if (valid) counts.push_back(row[x].as_int());
      }
      if (!valid) continue;
      auto [it, fresh] = m_load.try_emplace(layer, counts.size(), 0);
      if (it->second.size() != counts.size()) continue;
      for (size_t x = 0; x < counts.size(); ++x) it->second[x] += counts[x];
      m_experts = std::max(m_experts, static_cast<int>(counts.size()));
    }
    if (const Json* d = parsed->find("moe_dropped"); d && d->is_int() && d->as_int() > 0) m_dropped += d->as_int();
  }
  if (changed) {
    updateGeometry();
    update();
  }
}

QList<int> ExpertLoadMap::layers() const {
  QList<int> out;
  for (const auto& [layer, counts] : m_load) out << layer;
  return out;
}

int64_t ExpertLoadMap::tokens(int layer, int expert) const {
  auto it = m_load.find(layer);
  if (it == m_load.end() || expert < 0 || expert >= static_cast<int>(it->second.size())) return 0;
  return it->second[static_cast<size_t>(expert)];
}

double ExpertLoadMap::share(int layer, int expert) const {
  auto it = m_load.find(layer);
  if (it == m_load.end()) return 0;
  int64_t total = 0;
  for (int64_t c : it->second) total += c;
  return total > 0 ? static_cast<double>(tokens(layer, expert)) / static_cast<double>(total) : 0.0;
}

double ExpertLoadMap::maxShare() const {
  double best = 0;
  for (const auto& [layer, counts] : m_load) {
    for (int x = 0; x < static_cast<int>(counts.size()); ++x) best = std::max(best, share(layer, x));
  }
  return best;
}

QRect ExpertLoadMap::cellRect(int row, int expert) const {
  const int rows = static_cast<int>(m_load.size());
  if (row < 0 || row >= rows || expert < 0 || expert >= m_experts) return {};
  const int w = std::clamp((width() - kLabelWidth - 2 * kMargin) / std::max(1, m_experts), kMinCell, kMaxCellWidth);
  const int h = std::clamp((height() - kHeaderHeight - kCaptionHeight - 2 * kMargin) / std::max(1, rows), kMinCell, kMaxCellHeight);
  return QRect(kMargin + kLabelWidth + expert * w, kMargin + kHeaderHeight + row * h, w, h);
}

std::pair<int, int> ExpertLoadMap::cellAt(const QPoint& pos) const {
  const int rows = static_cast<int>(m_load.size());
  const QRect first = cellRect(0, 0);
  if (first.isEmpty()) return {-1, -1};
  const int col = (pos.x() - first.left()) / first.width();
  const int row = (pos.y() - first.top()) / first.height();
  if (pos.x() < first.left() || pos.y() < first.top() || col >= m_experts || row >= rows) return {-1, -1};
  return {row, col};
}

QColor ExpertLoadMap::cellColor(int row, int expert) const {
  if (row < 0 || row >= static_cast<int>(m_load.size())) return {};
  const int layer = layers().at(row);
  const double top = maxShare();
  return mix(kEmpty, kHot, top > 0 ? share(layer, expert) / top : 0.0);
}

QString ExpertLoadMap::cellToolTip(int row, int expert) const {
  if (row < 0 || row >= static_cast<int>(m_load.size()) || expert < 0 || expert >= m_experts) return {};
  const int layer = layers().at(row);
  const auto& counts = m_load.at(layer);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const double s = share(layer, expert);
  return tr("Layer %1, expert %2: %3 tokens of the layer's %4 over the run\n%5% of them, %6 x an even share (1 / %7)")
      .arg(layer)
      .arg(expert)
      .arg(count(tokens(layer, expert)), count(total))
      .arg(s * 100.0, 0, 'f', 1)
      .arg(s * static_cast<double>(counts.size()), 0, 'f', 2)
      .arg(counts.size());
}

QString ExpertLoadMap::caption() const {
  if (m_load.empty()) {
    return tr("No expert load recorded: the run's step events carry no moe_load (a dense model, or a worker that does not count "
              "its experts' tokens).");
  }
  QString s = tr("Share of each MoE layer's routed tokens per expert, summed over %n step event(s) of every rank; "
                 "darkest: %1% (even: %2%).",
                 nullptr, m_stepEvents)
                  .arg(maxShare() * 100.0, 0, 'f', 1)
                  .arg(m_experts > 0 ? 100.0 / m_experts : 0.0, 0, 'f', 1);
  s += m_dropped > 0 ? tr(" %1 tokens dropped over capacity.").arg(count(m_dropped)) : tr(" No token dropped.");
  return s;
}

QSize ExpertLoadMap::sizeHint() const {
  const int rows = std::max(1, static_cast<int>(m_load.size()));
  return QSize(kLabelWidth + 2 * kMargin + std::max(8, m_experts) * 14, kHeaderHeight + kCaptionHeight + 2 * kMargin + rows * 14);
}

QSize ExpertLoadMap::minimumSizeHint() const { return QSize(kLabelWidth + 2 * kMargin + 80, kHeaderHeight + kCaptionHeight + 2 * kMargin + 20); }

void ExpertLoadMap::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  p.setPen(palette().text().color());
  const QRect captionRect(kMargin, height() - kCaptionHeight - kMargin / 2, width() - 2 * kMargin, kCaptionHeight);
  p.drawText(captionRect, Qt::AlignLeft | Qt::AlignVCenter | Qt::TextWordWrap, caption());
  if (m_load.empty()) return;
  const QList<int> rows = layers();
  const QRect first = cellRect(0, 0);
  // Expert numbers over the columns, as many as fit without overlapping.
  QFont small = p.font();
  small.setPixelSize(10);
  p.setFont(small);
  const int every = std::max(1, (p.fontMetrics().horizontalAdvance(QString::number(m_experts)) + 4) / std::max(1, first.width()) + 1);
  for (int x = 0; x < m_experts; x += every) {
    const QRect c = cellRect(0, x);
    p.drawText(QRect(c.left() - 10, kMargin, c.width() + 20, kHeaderHeight), Qt::AlignHCenter | Qt::AlignBottom, QString::number(x));
  }
  const int labelEvery = std::max(1, 12 / std::max(1, first.height()));
  for (int r = 0; r < rows.size(); ++r) {
    if (r % labelEvery == 0) {
      const QRect c = cellRect(r, 0);
      p.drawText(QRect(kMargin, c.top() - 6, kLabelWidth - 4, c.height() + 12), Qt::AlignRight | Qt::AlignVCenter,
                 tr("layer %1").arg(rows[r]));
    }
    for (int x = 0; x < m_experts; ++x) p.fillRect(cellRect(r, x), cellColor(r, x));
  }
  // A frame around the map, so white (idle) experts still read as cells.
  const QRect last = cellRect(static_cast<int>(rows.size()) - 1, m_experts - 1);
  p.setPen(QPen(palette().mid().color(), 1));
  p.setBrush(Qt::NoBrush);
  p.drawRect(QRect(first.topLeft(), last.bottomRight()).adjusted(-1, -1, 0, 0));
}

bool ExpertLoadMap::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const auto [row, expert] = cellAt(help->pos());
    if (row >= 0) {
      QToolTip::showText(help->globalPos(), cellToolTip(row, expert), this);
    } else {
      QToolTip::hideText();
      event->ignore();
    }
    return true;
  }
  return QWidget::event(event);
}
