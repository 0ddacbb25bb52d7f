// SetupPanel: the form a person sets a run up with — cluster, model, parallel layout, pipeline
// and training — over a PlanDocument.
//
// Every field is bound to one config key ("parallel.tp") and built from its schema entry
// (config_schema.h): the keys with a form label, in schema order, grouped by section. A change is sent to the document at
// once (as you type) as an undoable edit; consecutive changes of one field merge into one undo
// step. The document validates; a problem shows AT ITS FIELD (red frame, the engine's one-line
// message below the field and as its tooltip) while the last valid plan stays drawn. Problems
// about keys the form has no field for are listed at the bottom. The form follows the document
// (undo, redo, open, import) without sending edits back.
#pragma once

#include <QHash>
#include <QStringList>
#include <QWidget>

#include <functional>

#include "stagecraft/config/config_schema.h"
#include "stagecraft/config/run_config.h"

class PlanDocument;
class QFormLayout;
class QLabel;
struct ConfigProblem;

class SetupPanel : public QWidget {
  Q_OBJECT

 public:
  explicit SetupPanel(PlanDocument* document, QWidget* parent = nullptr);

  // The editor widget of a key (QSpinBox, QComboBox, QCheckBox or QLineEdit), or nullptr.
  QWidget* field(const QString& key) const;
  // The keys the form has fields for, in form order.
  QStringList keys() const { return m_order; }
  // Whether a key's row is shown: the expert layout's only for a model with experts.
  bool isFieldShown(const QString& key) const;
  // The error shown at a key's field; empty when the field is fine.
  QString fieldError(const QString& key) const;
  // Problems about keys without a field, one per line.
  QString otherErrors() const;

 private:
  struct Field {
    QWidget* editor = nullptr;
    QLabel* error = nullptr;
    std::function<void()> refresh;  // shows the document's value without emitting an edit
    QFormLayout* form = nullptr;    // the section and the row's widget, to show or hide the row
    QWidget* row = nullptr;
  };
  using Setter = std::function<void(stagecraft::config::RunConfig&)>;

  void buildForm();
  void addField(QFormLayout* form, const stagecraft::config::KeySpec& key);
  QFormLayout* addSection(const QString& title);
  void addSpin(QFormLayout* form, const QString& key, const QString& label, int min, int max,
               std::function<int(const stagecraft::config::RunConfig&)> get,
               std::function<void(stagecraft::config::RunConfig&, int)> set, const QString& specialValueText = {});
  // items: (shown text, value) pairs; the current value is matched by value.
  void addCombo(QFormLayout* form, const QString& key, const QString& label, const QList<QPair<QString, QString>>& items,
                std::function<QString(const stagecraft::config::RunConfig&)> get,
                std::function<void(stagecraft::config::RunConfig&, const QString&)> set);
  void addCheck(QFormLayout* form, const QString& key, const QString& label,
                std::function<bool(const stagecraft::config::RunConfig&)> get,
                std::function<void(stagecraft::config::RunConfig&, bool)> set);
  void addLine(QFormLayout* form, const QString& key, const QString& label,
               std::function<QString(const stagecraft::config::RunConfig&)> get,
               std::function<void(stagecraft::config::RunConfig&, const QString&)> set);
  void addRow(QFormLayout* form, const QString& key, const QString& label, QWidget* editor, std::function<void()> refresh);

  void edit(const QString& key, const Setter& change);
  void refreshValues();
  // Rows that only matter for some models (the expert layout for a mixture of experts) are shown
  // when they apply, or when their value is not the default (so a problem with it stays in view).
  void showApplicableRows();
  void showProblems(const QList<ConfigProblem>& problems);

  PlanDocument* m_document;
  QWidget* m_content = nullptr;
  QHash<QString, Field> m_fields;
  QStringList m_order;
  QLabel* m_other = nullptr;
  bool m_refreshing = false;
};
