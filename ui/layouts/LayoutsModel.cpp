// The layouts table: filtered rows over the shared search result. See LayoutsModel.h.
#include "layouts/LayoutsModel.h"

#include <QColor>

#include <algorithm>

#include "common/Text.h"
#include "stagecraft/core/units.h"

namespace plan = stagecraft::plan;

namespace {

const std::vector<plan::Candidate> kNone;

}  // namespace

LayoutsModel::LayoutsModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayoutsModel::setLayouts(std::shared_ptr<const std::vector<plan::Candidate>> layouts) {
  m_layouts = std::move(layouts);
  refilter();
}

void LayoutsModel::setConstraints(const plan::LayoutConstraints& constraints) {
  m_constraints = constraints;
  refilter();
}

void LayoutsModel::setCapped(bool capped) {
  m_capped = capped;
  refilter();
}

void LayoutsModel::refilter() {
  beginResetModel();
  m_rows.clear();
  const auto& all = allLayouts();
  m_rowOf.assign(all.size(), -1);
  for (size_t i = 0; i < all.size(); ++i) {
    if (plan::allows(m_constraints, all[i])) m_rows.push_back(static_cast<int>(i));
  }
  // The search ranked uncapped; capped, the rows take search --plausible's order (stable: equals
  // keep the search's).
  if (m_capped) {
    std::stable_sort(m_rows.begin(), m_rows.end(), [&all](int a, int b) {
      return plan::ranks_before(all[static_cast<size_t>(a)], all[static_cast<size_t>(b)], true);
    });
  }
  for (size_t r = 0; r < m_rows.size(); ++r) m_rowOf[static_cast<size_t>(m_rows[r])] = static_cast<int>(r);
  endResetModel();
  Q_EMIT filtered();
}

const std::vector<plan::Candidate>& LayoutsModel::allLayouts() const { return m_layouts ? *m_layouts : kNone; }

const plan::Candidate& LayoutsModel::candidate(int row) const { return allLayouts()[static_cast<size_t>(m_rows[static_cast<size_t>(row)])]; }

int LayoutsModel::rowOfLayout(int index) const {
  return index >= 0 && static_cast<size_t>(index) < m_rowOf.size() ? m_rowOf[static_cast<size_t>(index)] : -1;
}

int LayoutsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(m_rows.size()); }

int LayoutsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant LayoutsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const auto& c = candidate(index.row());
  const auto& e = c.estimate;
  if (role == kSortRole) {
    switch (index.column()) {
      case kRank: return index.row();
      case kLayout: return qs(plan::layout_string(c.config));
      case kPeakMemory: return e.peak_memory_bytes;
      case kStep: return e.step_time_s;
      case kTflops: return e.tflops_per_gpu;
      case kMfu: return e.mfu;
      case kTokens: return e.tokens_per_s;
      default: return {};
    }
  }
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kRank: return index.row() + 1;
      case kLayout: return qs(plan::layout_string(c.config));
      case kPeakMemory: return qs(plan::format_bytes(e.peak_memory_bytes)) + (e.fits ? QString() : tr(" (does not fit)"));
      case kStep: return qs(plan::format_seconds(e.step_time_s));
      case kTflops: return qs(stagecraft::format_flop_rate(e.tflops_per_gpu * 1e12));
      case kMfu: return percentText(e.mfu) + (e.plausible ? QString() : QStringLiteral(" !"));
      case kTokens: return QString::number(e.tokens_per_s, 'g', 4);
      default: return {};
    }
  }
  // A prediction above the device's best published MFU: marked "!", in the warning colour, with
  // the model's reason as the tooltip of its MFU.
  if (!e.plausible && index.column() == kMfu) {
    if (role == Qt::ToolTipRole) return tr("Implausibly fast: %1").arg(qs(e.implausible_because));
    if (role == Qt::ForegroundRole) return QColor(0xb3, 0x59, 0x00);
  }
  if (role == Qt::TextAlignmentRole && index.column() != kLayout) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant LayoutsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kRank: return tr("#");
    case kLayout: return tr("layout");
    case kPeakMemory: return tr("peak mem");
    case kStep: return tr("step");
    case kTflops: return tr("per GPU");
    case kMfu: return tr("MFU");
    case kTokens: return tr("tokens/s");
    default: return {};
  }
}
