// LayoutsModel: the table adapter over a search's layouts — those that pass the constraints, in
// the search's order (fastest first; or capped at the published MFU, as search --plausible ranks), with the CLI's columns: rank, layout, peak memory, step
// time, FLOP/s per GPU, MFU, tokens/s. Qt::DisplayRole is the text; kSortRole the number a column sorts
// by, so a QSortFilterProxyModel sorts it numerically.
//
// The layouts are shared, not copied: setLayouts() takes the full list and setConstraints()
// re-filters it with plan::allows() (about a microsecond a layout).
#pragma once

#include <QAbstractTableModel>

#include <memory>
#include <vector>

#include "stagecraft/plan/search.h"

class LayoutsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kRank, kLayout, kPeakMemory, kStep, kTflops, kMfu, kTokens, kColumnCount };
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit LayoutsModel(QObject* parent = nullptr);

  void setLayouts(std::shared_ptr<const std::vector<stagecraft::plan::Candidate>> layouts);
  void setConstraints(const stagecraft::plan::LayoutConstraints& constraints);
  const stagecraft::plan::LayoutConstraints& constraints() const { return m_constraints; }
  // Rank with each layout's MFU capped at the device's best published one (search --plausible):
  // the rows re-ordered by plan::ranks_before, the estimates unchanged.
  void setCapped(bool capped);
  bool capped() const { return m_capped; }

  // The layout of a row (rank row + 1 among those passing); row must be valid.
  const stagecraft::plan::Candidate& candidate(int row) const;
  // The row of the layout at `index` in the full list, -1 when the constraints hide it.
  int rowOfLayout(int index) const;
  // Every layout, passing or not.
  const std::vector<stagecraft::plan::Candidate>& allLayouts() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 Q_SIGNALS:
  // The rows changed (new layouts or constraints).
  void filtered();

 private:
  void refilter();

  std::shared_ptr<const std::vector<stagecraft::plan::Candidate>> m_layouts;
  stagecraft::plan::LayoutConstraints m_constraints;
  bool m_capped = false;
  std::vector<int> m_rows;     // full-list index of each row
  std::vector<int> m_rowOf;    // row of each full-list index, -1 when hidden
};
