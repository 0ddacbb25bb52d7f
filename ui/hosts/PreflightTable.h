// PreflightTable: preflight results (launch::HostCheck), one row per host — reachable, host
// key, authenticated, worker version, slots (cores or GPUs found against the slots asked for)
// and the host's problems, each one line. Rows that failed are tinted; the problems column holds
// the engine's messages, which name the host and the fix.
#pragma once

#include <QTableWidget>

#include <vector>

#include "stagecraft/launch/preflight.h"

class PreflightTable : public QTableWidget {
  Q_OBJECT

 public:
  enum Column { HostColumn, ReachableColumn, HostKeyColumn, AuthColumn, WorkerColumn, SlotsColumn, ProblemsColumn, ColumnCount };

  explicit PreflightTable(QWidget* parent = nullptr);

  // `slotCounts[i]` is how many slots host i was asked for (for the slots column); may be empty.
  void setChecks(const std::vector<stagecraft::launch::HostCheck>& checks, const std::vector<int>& slotCounts = {});
  // One row per host, "checking..." in every column.
  void setPending(const QStringList& hosts);
  const std::vector<stagecraft::launch::HostCheck>& checks() const { return m_checks; }
  // The text of a cell, for tests and for copying.
  QString cellText(int row, Column column) const;

 private:
  std::vector<stagecraft::launch::HostCheck> m_checks;
};
