// PlanDocument: the domain state of the desktop application — the RunConfig being edited, its
// file, its undo history and the plan that follows from it.
//
// Contract:
//  - The edited config may be invalid for a while (a person changing tp before dp); the plan is
//    always the LAST VALID one. Every change re-validates (config::validate) and re-plans
//    (plan::make_plan, pure and fast). issues() lists what the current config breaks, one entry
//    per rule, each naming its key ("parallel.tp") and carrying the engine's one-line message.
//  - Every edit is one QUndoCommand holding the config before and after, so undo and redo are
//    exact. Consecutive edits of the same key merge into one command (typing "128" in a field is
//    one step, not three).
//  - File operations return false and fill *error with one line that names what to fix; the
//    document is left as it was. Nothing here throws or shows a dialog: widgets decide how to
//    present errors.
//  - Not thread-safe: lives in the GUI thread.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QUndoStack>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stagecraft/interop/frameworks.h"
#include "stagecraft/config/run_config.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/plan/plan.h"

// One broken rule of the edited config: the dotted key it is about and the whole message.
struct ConfigProblem {
  QString key;
  QString message;
  bool operator==(const ConfigProblem&) const = default;
};

class PlanDocument : public QObject {
  Q_OBJECT

 public:
  explicit PlanDocument(QObject* parent = nullptr);
  ~PlanDocument() override;

  // A valid starting config for File > New (the BERT-Large 3D example's shape).
  static stagecraft::config::RunConfig defaultConfig();

  const stagecraft::config::RunConfig& config() const { return m_config; }
  // The last valid plan; hasPlan() is false only before any valid config was set.
  const stagecraft::plan::Plan& plan() const { return *m_plan; }
  bool hasPlan() const { return m_plan.has_value(); }
  bool isValid() const { return m_problems.isEmpty(); }
  // The config as workers get it: with `pipeline.costs: run:ID` the balanced split by that run's
  // measured times written out as an explicit partition, since workers plan without the history.
  stagecraft::config::RunConfig configForWorkers() const;
  const QList<ConfigProblem>& problems() const { return m_problems; }
  // The messages of the problems about `key` ("parallel.tp"), joined by newlines; empty if none.
  QString problemText(const QString& key) const;

  QString filePath() const { return m_filePath; }
  // The folder of filePath(), where the config's relative paths start; "" when untitled.
  QString baseDir() const;
  // "bert-large-3d.yaml" or "untitled".
  QString displayName() const;
  bool isModified() const;
  QUndoStack* undoStack() { return &m_undo; }

  // The plan of the current config run on `hosts` (the cluster replaced by launch::with_hosts:
  // nodes = hosts, gpus_per_node = slots); its `config` member is that config. Nothing changes
  // in the document. nullopt with the reason in *error when the config is invalid, the hosts'
  // slots differ, or the config does not plan on them ("on these hosts: ...").
  std::optional<stagecraft::plan::Plan> planForHosts(const std::vector<stagecraft::launch::SelectedHost>& hosts,
                                                     QString* error) const;

  // ---- edits (each one undoable command; no-op when nothing changes) ----
  // Replaces the whole config; `what` names the command in the Edit menu ("Change parallel.tp").
  // `key` groups consecutive edits of one field into one command; empty never merges.
  void setConfig(const stagecraft::config::RunConfig& config, const QString& what, const QString& key = {});
  // One `key.path=value` edit through config::apply_overrides. Returns false, with the engine's
  // message in *error, when the value cannot be read or makes the config invalid (then nothing
  // changes and validationFailed reports it under that key).
  bool applyEdit(const QString& key, const QString& value, QString* error = nullptr);
  // Explicit partition: one stage (chunk) id per layer, as the stage editor's drag gives it.
  void setPartition(const std::vector<int>& stageIds);
  // Uniform or balanced partition (kExplicit is set by setPartition).
  void setPartitionKind(stagecraft::config::PartitionKind kind);

  // ---- files ----
  // A fresh untitled document (defaultConfig()), history cleared.
  void newDocument();
  bool open(const QString& path, QString* error);
  // Saves to filePath(); false with a message when the document has no path yet or is invalid.
  bool save(QString* error);
  bool saveAs(const QString& path, QString* error);
  // Reads another framework's config, taking what it does not carry from the current config;
  // the result becomes a new untitled, modified document.
  bool importFrom(stagecraft::interop::Framework from, const QString& path, QString* error);
  // Writes the export's main file at `path` and any further files (hostfile, ...) beside it,
  // under their suggested names. *notes (optional) gets what the framework runs differently.
  bool exportTo(stagecraft::interop::Framework to, const QString& path, QString* error,
                QStringList* notes = nullptr, QStringList* written = nullptr);

 Q_SIGNALS:
  // The current plan changed (a valid edit, undo, open). Not emitted for an invalid edit.
  void planChanged(const stagecraft::plan::Plan& plan);
  // The edited config changed in any way (valid or not).
  void configChanged();
  // The edited config breaks rules; the plan stays the last valid one.
  void validationFailed(const QList<ConfigProblem>& problems);
  // The list of problems changed (empty when the config became valid again).
  void problemsChanged(const QList<ConfigProblem>& problems);
  void filePathChanged(const QString& path);
  void modifiedChanged(bool modified);

 private:
  friend class ConfigCommand;
  // Sets the config without touching the undo stack: validates, re-plans, emits.
  void assign(const stagecraft::config::RunConfig& config);
  // Replaces the document (open, new, import): history cleared.
  void reset(const stagecraft::config::RunConfig& config, const QString& path, bool modified);
  void setFilePath(const QString& path);
  // Emits modifiedChanged when isModified() differs from what was last announced.
  void updateModified();
  // make_plan, with the measured layer times `pipeline.costs: run:ID` names read from the run
  // history (launch/run_measurement.h), kept per run and model shape.
  stagecraft::Result<stagecraft::plan::Plan> planOf(const stagecraft::config::RunConfig& config) const;

  stagecraft::config::RunConfig m_config;
  std::optional<stagecraft::plan::Plan> m_plan;
  QList<ConfigProblem> m_problems;
  QString m_filePath;
  bool m_forcedModified = false;  // an import: modified although the history is clean
  bool m_lastModified = false;
  QUndoStack m_undo;
  mutable std::map<std::string, stagecraft::plan::StageCostModel> m_measuredCosts;
};
