// RunsModel: the run history (engine store/RunStore, one SQLite file) as a table — id, name,
// state, created, hosts, Slurm job (id, Slurm's state and reason), steps, last loss — for the
// runs view. RunsFilterModel sorts it and
// filters it by state and by name.
//
// The model reads the file; it never writes a run (marking lost runs, which RunStore::list_runs
// does on its own, aside). refresh() re-reads the history and updates the rows in place: new runs
// are inserted, changed rows emit dataChanged, so a selection survives a refresh. The runs view
// calls refresh() from a timer: runs started by other processes (`stagecraft-cli run --detach`)
// appear the same way as the GUI's own. A file that does not exist yet is not created: the model
// stays empty until it appears. A file that cannot be read leaves the rows as they were and keeps
// the one-line reason in lastError().
//
// Not thread-safe: use it from the GUI thread.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <QString>

#include <memory>
#include <optional>
#include <vector>

#include "stagecraft/store/run_store.h"

class RunsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { IdColumn, NameColumn, StateColumn, CreatedColumn, HostsColumn, JobColumn, StepsColumn, LossColumn, ColumnCount };
  enum Role {
    SortRole = Qt::UserRole + 1,  // the raw value a column sorts by (numbers as numbers)
    IdRole,                       // the run's id (qint64), on every column
    StateRole,                    // the run's state as text ("running"), on every column
  };

  explicit RunsModel(QObject* parent = nullptr);
  ~RunsModel() override;

  // The history file to show; refreshes at once. An empty path shows nothing.
  void setDatabasePath(const QString& path);
  QString databasePath() const { return m_path; }

  // Re-reads the history. False (rows unchanged, reason in lastError()) when it cannot be read;
  // true, with no rows, while the file does not exist.
  bool refresh();
  QString lastError() const { return m_lastError; }

  // The open history (null while the file does not exist), for the view's per-run queries.
  stagecraft::store::RunStore* store() const { return m_store.get(); }

  // The record of run `id` as last read, or null.
  const stagecraft::store::RunRecord* run(qint64 id) const;
  const stagecraft::store::RunRecord* runAt(int row) const;
  int rowOf(qint64 id) const;  // -1 when absent

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  static QString stateText(stagecraft::store::RunState state);
  static QString createdText(double unixSeconds);
  // "12 PENDING (Priority)", "12 COMPLETED"; empty for a run not submitted to Slurm.
  static QString jobText(const stagecraft::store::RunRecord& run);

 Q_SIGNALS:
  // After every successful refresh; `changedIds` are the runs added or changed by it.
  void refreshed(const QList<qint64>& changedIds);
  void errorOccurred(const QString& message);

 private:
  bool openStore();
  void setError(const QString& message);

  QString m_path;
  QString m_lastError;
  std::unique_ptr<stagecraft::store::RunStore> m_store;
  std::vector<stagecraft::store::RunRecord> m_runs;  // id descending (newest first)
};

// Sorting (by each column's SortRole) and filtering of RunsModel: by state (exact) and by a name
// substring (case-insensitive). Either filter empty lets every row through.
class RunsFilterModel : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit RunsFilterModel(QObject* parent = nullptr);

  // "" for every state, else one of queued, running, succeeded, failed, cancelled, lost.
  void setStateFilter(const QString& state);
  QString stateFilter() const { return m_state; }
  void setNameFilter(const QString& text);
  QString nameFilter() const { return m_name; }

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  QString m_state;
  QString m_name;
};
