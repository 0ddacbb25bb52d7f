// RunsModel and RunsFilterModel: the history table, refreshed in place from the SQLite file.
#include "runs/RunsModel.h"

#include <QBrush>
#include <QColor>
#include <QDateTime>
#include <QFileInfo>

#include <algorithm>
#include <cmath>

#include "common/Text.h"

namespace store = stagecraft::store;

namespace {


bool sameLoss(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Whether anything the table shows, or the view reads from the record, differs.
bool differs(const store::RunRecord& a, const store::RunRecord& b) {
  return a.state != b.state || a.last_step != b.last_step || !sameLoss(a.last_loss, b.last_loss) || a.name != b.name ||
         a.hosts != b.hosts || a.started != b.started || a.ended != b.ended || a.reason != b.reason ||
         a.total_steps != b.total_steps || a.world_size != b.world_size || a.supervisor.pid != b.supervisor.pid ||
         a.supervisor.host != b.supervisor.host || a.job_id != b.job_id || a.job_state != b.job_state || a.job_reason != b.job_reason ||
         a.job_nodes != b.job_nodes;
}

QColor stateColor(store::RunState s) {
  switch (s) {
    case store::RunState::kQueued: return QColor(0x77, 0x77, 0x77);
    case store::RunState::kRunning: return QColor(0x1f, 0x5f, 0xbf);
    case store::RunState::kSucceeded: return QColor(0x1e, 0x7b, 0x34);
    case store::RunState::kFailed: return QColor(0xb0, 0x20, 0x20);
    case store::RunState::kCancelled: return QColor(0x8a, 0x6d, 0x00);
    case store::RunState::kLost: return QColor(0x8a, 0x3f, 0x8a);
  }
  return {};
}

}  // namespace

RunsModel::RunsModel(QObject* parent) : QAbstractTableModel(parent) {}

RunsModel::~RunsModel() = default;

void RunsModel::setDatabasePath(const QString& path) {
  if (path == m_path && m_store) {
    refresh();
    return;
  }
  beginResetModel();
  m_runs.clear();
  m_store.reset();
  m_path = path;
  m_lastError.clear();
  endResetModel();
  refresh();
}

void RunsModel::setError(const QString& message) {
  const bool fresh = message != m_lastError;
  m_lastError = message;
  if (fresh) Q_EMIT errorOccurred(message);
}

bool RunsModel::openStore() {
  store::StoreOptions options;
  options.create = false;
  auto opened = store::RunStore::open(m_path.toStdString(), options);
  if (!opened.ok()) {
    setError(tr("run history %1: %2").arg(m_path, qs(opened.status().message())));
    return false;
  }
  m_store = std::move(opened).value();
  return true;
}

bool RunsModel::refresh() {
  std::vector<store::RunRecord> fresh;
  if (!m_path.isEmpty() && !m_store && QFileInfo::exists(m_path) && !openStore()) return false;
  if (m_store) {
    store::RunFilter summaries;
    summaries.documents = false;  // polled every second: the configs and plans stay on disk
    auto listed = m_store->list_runs(summaries);
    if (!listed.ok()) {
      setError(tr("run history %1: %2").arg(m_path, qs(listed.status().message())));
      return false;
    }
    fresh = std::move(listed).value();
  }
  m_lastError.clear();
  std::sort(fresh.begin(), fresh.end(), [](const auto& a, const auto& b) { return a.id > b.id; });

  QList<qint64> changed;
  if (m_runs.empty() && !fresh.empty()) {
    beginResetModel();
    m_runs = std::move(fresh);
    endResetModel();
    for (const auto& r : m_runs) changed << r.id;
    Q_EMIT refreshed(changed);
    return true;
  }
  // Both lists are in id order (descending): one merge pass turns the old rows into the new.
  size_t i = 0, j = 0;
  while (i < m_runs.size() || j < fresh.size()) {
    const int row = static_cast<int>(i);
    if (i < m_runs.size() && (j >= fresh.size() || m_runs[i].id > fresh[j].id)) {
      beginRemoveRows({}, row, row);
      m_runs.erase(m_runs.begin() + static_cast<ptrdiff_t>(i));
      endRemoveRows();
      continue;
    }
    if (i >= m_runs.size() || fresh[j].id > m_runs[i].id) {
      beginInsertRows({}, row, row);
      m_runs.insert(m_runs.begin() + static_cast<ptrdiff_t>(i), std::move(fresh[j]));
      endInsertRows();
      changed << m_runs[i].id;
    } else if (differs(m_runs[i], fresh[j])) {
      m_runs[i] = std::move(fresh[j]);
      Q_EMIT dataChanged(index(row, 0), index(row, ColumnCount - 1));
      changed << m_runs[i].id;
    }
    ++i;
    ++j;
  }
  Q_EMIT refreshed(changed);
  return true;
}

const store::RunRecord* RunsModel::run(qint64 id) const {
  const int row = rowOf(id);
  return row < 0 ? nullptr : &m_runs[static_cast<size_t>(row)];
}

const store::RunRecord* RunsModel::runAt(int row) const {
  return row >= 0 && row < static_cast<int>(m_runs.size()) ? &m_runs[static_cast<size_t>(row)] : nullptr;
}

int RunsModel::rowOf(qint64 id) const {
  // Newest first: a binary search on descending ids.
  auto it = std::lower_bound(m_runs.begin(), m_runs.end(), id, [](const auto& r, qint64 v) { return r.id > v; });
  return it != m_runs.end() && it->id == id ? static_cast<int>(it - m_runs.begin()) : -1;
}

int RunsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(m_runs.size()); }

QString RunsModel::jobText(const store::RunRecord& r) {
  if (r.job_id.empty()) return {};
  QString text = qs(r.job_id) + QLatin1Char(' ') + qs(r.job_state);
  if (!r.job_reason.empty() && r.job_reason != "None" && r.job_reason != "submitted") text += QStringLiteral(" (%1)").arg(qs(r.job_reason));
  if (!r.job_nodes.empty()) text += QObject::tr(" on %1").arg(qs(r.job_nodes));
  return text;
}

int RunsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString RunsModel::stateText(store::RunState state) { return qs(std::string(store::to_string(state))); }

QString RunsModel::createdText(double unixSeconds) {
  if (unixSeconds <= 0) return QStringLiteral("-");
  return QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(unixSeconds * 1000.0)).toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  const store::RunRecord* r = index.isValid() ? runAt(index.row()) : nullptr;
  if (!r) return {};
  if (role == IdRole) return QVariant::fromValue<qint64>(r->id);
  if (role == StateRole) return stateText(r->state);
  const int column = index.column();
  if (role == Qt::DisplayRole) {
    switch (column) {
      case IdColumn: return QVariant::fromValue<qint64>(r->id);
      case NameColumn: return qs(r->name);
      case StateColumn: return stateText(r->state);
      case CreatedColumn: return createdText(r->created);
      case HostsColumn: {
        QStringList hosts;
        for (const auto& h : r->hosts) hosts << qs(h);
        return hosts.join(QLatin1Char(','));
      }
      case JobColumn: return jobText(*r);
      case StepsColumn: return QStringLiteral("%1/%2").arg(r->last_step).arg(r->total_steps);
      case LossColumn: return std::isnan(r->last_loss) ? QStringLiteral("-") : QString::number(r->last_loss, 'f', 4);
      default: return {};
    }
  }
  if (role == SortRole) {
    switch (column) {
      case IdColumn: return QVariant::fromValue<qint64>(r->id);
      case NameColumn: return qs(r->name).toLower();
      case StateColumn: return stateText(r->state);
      case CreatedColumn: return r->created;
      case HostsColumn: return data(index, Qt::DisplayRole);
      case JobColumn: return r->job_id.empty() ? QVariant(-1LL) : QVariant(QString::fromStdString(r->job_id).toLongLong());
      case StepsColumn: return QVariant::fromValue<qint64>(r->last_step);
      // Runs without a loss sort below every loss.
      case LossColumn: return std::isnan(r->last_loss) ? -HUGE_VAL : r->last_loss;
      default: return {};
    }
  }
  if (role == Qt::ForegroundRole && column == StateColumn) return QBrush(stateColor(r->state));
  if (role == Qt::ToolTipRole) {
    QString tip = tr("run %1: %2").arg(r->id).arg(stateText(r->state));
    if (!r->reason.empty()) tip += QStringLiteral(" — ") + qs(r->reason);
    return tip;
  }
  if (role == Qt::TextAlignmentRole && (column == IdColumn || column == StepsColumn || column == LossColumn)) {
    return QVariant::fromValue<int>(Qt::AlignRight | Qt::AlignVCenter);
  }
  return {};
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case IdColumn: return tr("ID");
    case NameColumn: return tr("Name");
    case StateColumn: return tr("State");
    case CreatedColumn: return tr("Created");
    case HostsColumn: return tr("Hosts");
    case JobColumn: return tr("Slurm job");
    case StepsColumn: return tr("Steps");
    case LossColumn: return tr("Last loss");
    default: return {};
  }
}

RunsFilterModel::RunsFilterModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunsModel::SortRole);
  setDynamicSortFilter(true);
}

void RunsFilterModel::setStateFilter(const QString& state) {
  if (state == m_state) return;
  m_state = state;
  invalidateFilter();
}

void RunsFilterModel::setNameFilter(const QString& text) {
  if (text == m_name) return;
  m_name = text;
  invalidateFilter();
}

bool RunsFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  const QModelIndex name = sourceModel()->index(sourceRow, RunsModel::NameColumn, sourceParent);
  if (!m_state.isEmpty() && name.data(RunsModel::StateRole).toString() != m_state) return false;
  if (!m_name.isEmpty() && !name.data(Qt::DisplayRole).toString().contains(m_name, Qt::CaseInsensitive)) return false;
  return true;
}
