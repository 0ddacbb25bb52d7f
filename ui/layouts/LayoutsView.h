// LayoutsView: the "Find layouts" dock — the auto-planner in the window. A search of the
// document's config runs on a worker thread (LayoutSearch) with a progress bar and Cancel; the
// constraint fields (fits only, TP within a node, fixed tp or pp, schedules, recompute, ZeRO,
// largest micro-batch) filter its layouts as they change; the scatter (LayoutsChart) and the
// sortable table (LayoutsModel, the CLI's columns) show the same layouts and the same selection.
//
// Selecting a layout (a click on a point or a row) previews it: previewRequested() carries the
// plan the document would have with that layout, and the document does not change. With two
// layouts selected, the line under the table says why the faster beats the other (the CLI's
// explanation, plan::why_faster). Apply (or a double-click) makes the selected layout the
// document's plan as one undoable edit: the document's config with the layout's keys set as
// `plan` would take them from `search --json`'s overrides (an explicit stage split becomes uniform).
// When the document changes in anything but the layout keys (another model, cluster, batch,
// precision...), the layouts are dropped: they were estimated for the old config.
#pragma once

#include <QWidget>

#include <memory>
#include <optional>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/plan/search.h"

class LayoutSearch;
class LayoutsChart;
class LayoutsModel;
class PlanDocument;
class QCheckBox;
class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;

class LayoutsView : public QWidget {
  Q_OBJECT

 public:
  explicit LayoutsView(PlanDocument* document, QWidget* parent = nullptr);
  ~LayoutsView() override;

  // Starts a search of the document's current config (cancelling one still running).
  void findLayouts();

  LayoutSearch* search() const { return m_search; }
  LayoutsModel* model() const { return m_model; }
  LayoutsChart* chart() const { return m_chart; }
  QTableView* table() const { return m_table; }
  // A constraint field by name: "fitsOnly", "tpWithinNode", "plausible" (rank capped at the published MFU) (QCheckBox); "tp", "pp", "cp", "ep",
  // "maxMicroBatch" (QSpinBox, 0 = any); "maxZero" (QSpinBox, 0-3); "gpipe", "1f1b", "interleaved", "none", "selective",
  // "full" (QCheckBox, allowed when checked); "colourBy", "yAxis" (QComboBox).
  QWidget* field(const QString& name) const;
  // The constraints the fields say.
  stagecraft::plan::LayoutConstraints constraints() const;

  // Selects model rows (ranks - 1 among the layouts shown); the table and chart follow and the
  // last one is previewed. An empty list ends the preview.
  void selectRows(const QList<int>& rows);
  QList<int> selectedRows() const;
  // The plan the document would have with row `row`'s layout; nullopt with the reason in *error.
  std::optional<stagecraft::plan::Plan> planOfRow(int row, QString* error) const;
  // Makes the last selected layout the document's plan (one undoable edit). False, with the
  // reason in the status line, when nothing is selected or the layout no longer fits the config.
  bool applySelected();

  QString whyText() const;
  QString statusText() const;

 Q_SIGNALS:
  // Show this plan in the views, without changing the document.
  void previewRequested(const stagecraft::plan::Plan& plan);
  // Show the document's plan again.
  void previewEnded();

 private:
  void buildFields(class QFormLayout* form);
  void constraintsEdited();
  void searchFinished();
  void tableSelectionChanged();
  void setStatus(const QString& text);
  // The document's config changed: layouts of another model, cluster or batch are dropped.
  void documentChanged();
  void showExpertFields();  // the ep filter, for a mixture of experts
  // The document's config with the layout of `candidate` applied; nullopt with the reason.
  std::optional<stagecraft::config::RunConfig> configWithLayout(const stagecraft::plan::Candidate& candidate, QString* error) const;

  PlanDocument* m_document;
  LayoutSearch* m_search = nullptr;
  LayoutsModel* m_model = nullptr;
  QSortFilterProxyModel* m_proxy = nullptr;
  LayoutsChart* m_chart = nullptr;
  QTableView* m_table = nullptr;
  QProgressBar* m_progress = nullptr;
  QPushButton* m_find = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_apply = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_why = nullptr;
  QComboBox* m_colourBy = nullptr;
  QCheckBox* m_fitsOnly = nullptr;
  QCheckBox* m_tpWithinNode = nullptr;
  QCheckBox* m_plausible = nullptr;
  QSpinBox* m_maxZero = nullptr;
  QSpinBox* m_tp = nullptr;
  QSpinBox* m_pp = nullptr;
  QSpinBox* m_cp = nullptr;
  QSpinBox* m_ep = nullptr;     // shown for a mixture of experts only
  QLabel* m_epLabel = nullptr;
  QSpinBox* m_maxMicroBatch = nullptr;
  QList<QCheckBox*> m_schedules;   // gpipe, 1f1b, interleaved
  QList<QCheckBox*> m_recomputes;  // none, selective, full
  std::optional<stagecraft::config::RunConfig> m_searched;  // the config the layouts are of
  std::vector<int> m_selectedLayouts;  // full-list indices of the selection, in selection order
  bool m_selecting = false;            // selectRows() is updating the table
};
