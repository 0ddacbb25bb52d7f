// PreflightTable: one row per host of a preflight pass.
#include "hosts/PreflightTable.h"

#include <QHeaderView>

#include "common/Text.h"

namespace launch = stagecraft::launch;

namespace {


QString yesNo(bool v) { return v ? QObject::tr("yes") : QObject::tr("no"); }

}  // namespace

PreflightTable::PreflightTable(QWidget* parent) : QTableWidget(parent) {
  setColumnCount(ColumnCount);
  setHorizontalHeaderLabels({tr("Host"), tr("Reachable"), tr("Host key"), tr("Authenticated"), tr("Worker"), tr("Slots"), tr("Problems")});
  horizontalHeader()->setStretchLastSection(true);
  verticalHeader()->hide();
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  setSelectionBehavior(QAbstractItemView::SelectRows);
  setSelectionMode(QAbstractItemView::SingleSelection);
  setWordWrap(true);
}

QString PreflightTable::cellText(int row, Column column) const {
  const QTableWidgetItem* it = item(row, column);
  return it ? it->text() : QString();
}

void PreflightTable::setPending(const QStringList& hosts) {
  m_checks.clear();
  setRowCount(hosts.size());
  for (int r = 0; r < hosts.size(); ++r) {
    setItem(r, HostColumn, new QTableWidgetItem(hosts[r]));
    for (int c = ReachableColumn; c < ColumnCount; ++c) setItem(r, c, new QTableWidgetItem(c == ProblemsColumn ? tr("checking...") : QString()));
  }
}

void PreflightTable::setChecks(const std::vector<launch::HostCheck>& checks, const std::vector<int>& slotCounts) {
  m_checks = checks;
  setRowCount(static_cast<int>(checks.size()));
  for (int r = 0; r < rowCount(); ++r) {
    const launch::HostCheck& c = checks[static_cast<size_t>(r)];
    QString key;
    if (!c.connect.reachable) {
      key = QStringLiteral("-");
    } else {
      key = c.connect.host_key_known ? tr("known") : tr("not trusted");
      if (!c.connect.fingerprint.empty()) key += QStringLiteral(" ") + qs(c.connect.fingerprint);
    }
    QString slotText;
    const int asked = r < static_cast<int>(slotCounts.size()) ? slotCounts[static_cast<size_t>(r)] : -1;
    if (!c.gpu_list.empty()) {
      slotText = qs(launch::describe_gpus(c));
    } else if (c.gpus >= 0) {
      slotText = tr("%1 GPUs").arg(c.gpus);
    } else if (c.cpus >= 0) {
      slotText = tr("%1 cores").arg(c.cpus);
    }
    if (asked > 0 && !slotText.isEmpty()) slotText += tr(" for %1").arg(asked);
    QStringList problems;
    for (const auto& e : c.errors) problems << qs(e);
    for (const auto& w : c.warnings) problems << tr("warning: %1").arg(qs(w));
    const QString texts[ColumnCount] = {qs(c.host),
                                        yesNo(c.connect.reachable),
                                        key,
                                        c.connect.reachable ? yesNo(c.connect.authenticated) : QStringLiteral("-"),
                                        c.worker_version.empty() ? QStringLiteral("-") : qs(c.worker_version),
                                        slotText.isEmpty() ? QStringLiteral("-") : slotText,
                                        problems.isEmpty() ? tr("ok") : problems.join(QLatin1Char('\n'))};
    for (int col = 0; col < ColumnCount; ++col) {
      auto* it = new QTableWidgetItem(texts[col]);
      it->setToolTip(texts[col]);
      if (!c.ok()) it->setBackground(QColor(0xf8, 0xd7, 0xd7));
      setItem(r, col, it);
    }
  }
  resizeRowsToContents();
}
