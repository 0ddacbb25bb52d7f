// PlanDocument: edits, undo commands, validation and re-planning, file operations.
// The undo command (ConfigCommand) holds whole configs before and after: a RunConfig is a small
// value, and restoring it exactly is what makes undo trustworthy.
#include "document/PlanDocument.h"

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QUndoCommand>

#include "common/Text.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/store/run_store.h"

namespace cfg = stagecraft::config;
namespace pl = stagecraft::plan;

namespace {


// The key a message line is about: "key=value: ..." or "key: ..." (after an optional
// "origin: " or "origin:line: " prefix that the loader adds).
QString keyOfMessage(const QString& line) {
  static const QStringList kSections = {"name", "cluster.", "model.", "parallel.", "pipeline.", "train.", "backend", "comm="};
  for (const QString& part : line.split(QStringLiteral(": "))) {
    for (const QString& s : kSections) {
      if (part.startsWith(s)) {
        const qsizetype eq = part.indexOf(QLatin1Char('='));
        return (eq < 0 ? part : part.left(eq)).trimmed();
      }
    }
  }
  return {};
}

QList<ConfigProblem> problemsOf(const std::vector<cfg::ConfigIssue>& issues) {
  QList<ConfigProblem> out;
  for (const auto& i : issues) out.append({qs(i.key), qs(i.message)});
  return out;
}

QList<ConfigProblem> problemsOfStatus(const stagecraft::Status& st, const QString& fallbackKey) {
  // apply_overrides() reads the config back from its own YAML text, so its messages start with
  // "configuration:LINE: " or "command line: ": places the person never saw. Drop them.
  static const QRegularExpression kOrigin(QStringLiteral("^(configuration|command line)(:\\d+)?: "));
  QList<ConfigProblem> out;
  for (QString line : qs(st.message()).split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
    line.remove(kOrigin);
    const QString key = keyOfMessage(line);
    out.append({key.isEmpty() ? fallbackKey : key, line});
  }
  return out;
}

constexpr int kConfigCommandId = 0x5c01;

}  // namespace

// One edit: the whole config before and after.
class ConfigCommand : public QUndoCommand {
 public:
  ConfigCommand(PlanDocument* doc, cfg::RunConfig before, cfg::RunConfig after, const QString& text, QString key)
      : QUndoCommand(text), m_doc(doc), m_before(std::move(before)), m_after(std::move(after)), m_key(std::move(key)) {}

  void undo() override { m_doc->assign(m_before); }
  void redo() override { m_doc->assign(m_after); }
  int id() const override { return kConfigCommandId; }
  bool mergeWith(const QUndoCommand* other) override {
    const auto* o = static_cast<const ConfigCommand*>(other);
    if (m_key.isEmpty() || o->m_key != m_key) return false;
    m_after = o->m_after;
    // Back where the merged run of edits started (a spin box 2 -> 3 -> 2): the step changes
    // nothing, and QUndoStack drops an obsolete merged command, so the document is clean again.
    setObsolete(m_after == m_before);
    return true;
  }

 private:
  PlanDocument* m_doc;
  cfg::RunConfig m_before;
  cfg::RunConfig m_after;
  QString m_key;
};

PlanDocument::PlanDocument(QObject* parent) : QObject(parent) {
  connect(&m_undo, &QUndoStack::cleanChanged, this, &PlanDocument::updateModified);
  assign(defaultConfig());
}

PlanDocument::~PlanDocument() {
  // QUndoStack::clear() (ours, or the one the stack's own destructor runs) emits cleanChanged,
  // which would reach updateModified() and modifiedChanged's receivers while this document, and
  // perhaps the window that owns it, is being destroyed. Cut the stack's signals off first.
  disconnect(&m_undo, nullptr, this, nullptr);
  m_undo.blockSignals(true);
  m_undo.clear();
}

cfg::RunConfig PlanDocument::defaultConfig() {
  cfg::RunConfig c;
  c.name = "untitled";
  c.cluster.nodes = 1;
  c.cluster.gpus_per_node = 8;
  c.cluster.device = "A100-80GB";
  c.model.layers = 24;
  c.model.hidden = 1024;
  c.model.heads = 16;
  c.model.ffn_hidden = 4096;
  c.model.seq_len = 512;
  c.model.vocab = 30522;
  c.parallel.dp = 2;
  c.parallel.tp = 2;
  c.parallel.pp = 2;
  c.train.global_batch = 16;
  c.train.micro_batch = 2;
  return c;
}

QString PlanDocument::problemText(const QString& key) const {
  QStringList lines;
  for (const auto& p : m_problems) {
    if (p.key == key) lines << p.message;
  }
  return lines.join(QLatin1Char('\n'));
}

QString PlanDocument::displayName() const {
  return m_filePath.isEmpty() ? QStringLiteral("untitled") : QFileInfo(m_filePath).fileName();
}

QString PlanDocument::baseDir() const { return m_filePath.isEmpty() ? QString() : QFileInfo(m_filePath).absolutePath(); }

std::optional<stagecraft::plan::Plan> PlanDocument::planForHosts(const std::vector<stagecraft::launch::SelectedHost>& hosts,
                                                                 QString* error) const {
  if (!isValid()) {
    *error = tr("the configuration is invalid; fix it first: %1").arg(m_problems.first().message);
    return std::nullopt;
  }
  auto config = stagecraft::launch::with_hosts(m_config, hosts);
  if (!config.ok()) {
    *error = qs(config.status().message());
    return std::nullopt;
  }
  auto plan = planOf(config.value());
  if (!plan.ok()) {
    *error = tr("on these hosts: %1").arg(qs(plan.status().message()));
    return std::nullopt;
  }
  plan->config = stagecraft::launch::with_measured_split(std::move(config).value(), plan.value());
  return std::move(plan).value();
}

cfg::RunConfig PlanDocument::configForWorkers() const {
  return m_plan ? stagecraft::launch::with_measured_split(m_config, *m_plan) : m_config;
}

stagecraft::Result<pl::Plan> PlanDocument::planOf(const cfg::RunConfig& config) const {
  const int64_t run = cfg::pipeline_costs_run(config.pipeline);
  if (run <= 0 || config.pipeline.partition != cfg::PartitionKind::kBalanced) return pl::make_plan(config);
  const auto& m = config.model;
  const std::string key = std::to_string(run) + ":" + std::to_string(m.layers) + ":" + std::to_string(m.hidden) + ":" +
                          std::to_string(m.heads) + ":" + std::to_string(m.seq_len) + ":" + std::to_string(m.vocab);
  auto it = m_measuredCosts.find(key);
  if (it == m_measuredCosts.end()) {
    stagecraft::store::StoreOptions o;
    o.create = false;
    auto st = stagecraft::store::RunStore::open(stagecraft::store::RunStore::default_path(), o);
    if (!st.ok()) return st.status().with_context("pipeline.costs=" + config.pipeline.costs);
    auto costs = stagecraft::launch::measured_layer_costs(*st.value(), run, config);
    if (!costs.ok()) return costs.status();
    it = m_measuredCosts.emplace(key, std::move(costs).value()).first;
  }
  return pl::make_plan(config, &it->second);
}

bool PlanDocument::isModified() const { return m_forcedModified || !m_undo.isClean(); }

void PlanDocument::assign(const cfg::RunConfig& config) {
  m_config = config;
  QList<ConfigProblem> problems = problemsOf(cfg::validate(config));
  bool planned = false;
  if (problems.isEmpty()) {
    auto plan = planOf(config);
    if (plan.ok()) {
      m_plan = std::move(plan).value();
      planned = true;
    } else {
      // Rules beyond validate() (an unknown device, a partition the cost model refuses).
      problems = problemsOfStatus(plan.status(), QString());
    }
  }
  const bool problemsDiffer = problems != m_problems;
  m_problems = problems;
  Q_EMIT configChanged();
  if (problemsDiffer) Q_EMIT problemsChanged(m_problems);
  if (planned) Q_EMIT planChanged(*m_plan);
  if (!m_problems.isEmpty()) Q_EMIT validationFailed(m_problems);
}

void PlanDocument::setConfig(const cfg::RunConfig& config, const QString& what, const QString& key) {
  if (config == m_config) return;
  m_undo.push(new ConfigCommand(this, m_config, config, what, key));
}

bool PlanDocument::applyEdit(const QString& key, const QString& value, QString* error) {
  const std::string override = (key + QLatin1Char('=') + value).toStdString();
  auto next = cfg::apply_overrides(m_config, {override});
  if (!next.ok()) {
    const auto problems = problemsOfStatus(next.status(), key);
    if (error) *error = problems.isEmpty() ? qs(next.status().message()) : problems.first().message;
    Q_EMIT validationFailed(problems);
    return false;
  }
  setConfig(next.value(), tr("Change %1").arg(key), key);
  return true;
}

void PlanDocument::setPartition(const std::vector<int>& stageIds) {
  cfg::RunConfig c = m_config;
  c.pipeline.partition = cfg::PartitionKind::kExplicit;
  c.pipeline.stage_ids = stageIds;
  setConfig(c, tr("Move stage boundary"));
}

void PlanDocument::setPartitionKind(cfg::PartitionKind kind) {
  if (kind == cfg::PartitionKind::kExplicit) return;  // an explicit list comes with its ids
  cfg::RunConfig c = m_config;
  c.pipeline.partition = kind;
  c.pipeline.stage_ids.clear();
  setConfig(c, kind == cfg::PartitionKind::kBalanced ? tr("Balance stages") : tr("Uniform stages"));
}

void PlanDocument::setFilePath(const QString& path) {
  if (path == m_filePath) return;
  m_filePath = path;
  Q_EMIT filePathChanged(path);
}

void PlanDocument::updateModified() {
  const bool modified = isModified();
  if (modified == m_lastModified) return;
  m_lastModified = modified;
  Q_EMIT modifiedChanged(modified);
}

void PlanDocument::reset(const cfg::RunConfig& config, const QString& path, bool modified) {
  m_undo.clear();
  m_forcedModified = modified;
  setFilePath(path);
  assign(config);
  updateModified();
}

void PlanDocument::newDocument() { reset(defaultConfig(), QString(), false); }

bool PlanDocument::open(const QString& path, QString* error) {
  auto loaded = cfg::load_config_file(path.toStdString());
  if (!loaded.ok()) {
    if (error) *error = qs(loaded.status().message());
    return false;
  }
  reset(loaded.value(), QFileInfo(path).absoluteFilePath(), false);
  return true;
}

bool PlanDocument::save(QString* error) {
  if (m_filePath.isEmpty()) {
    if (error) *error = tr("the document has no file yet; use Save As and choose one");
    return false;
  }
  return saveAs(m_filePath, error);
}

bool PlanDocument::saveAs(const QString& path, QString* error) {
  if (!isValid()) {
    if (error) *error = tr("cannot save an invalid configuration; fix it first: %1").arg(m_problems.first().message);
    return false;
  }
  if (path.isEmpty()) {
    if (error) *error = tr("no file name given; choose a .yaml file to save to");
    return false;
  }
  if (stagecraft::Status st = cfg::save_config_file(path.toStdString(), m_config); !st) {
    if (error) *error = qs(st.message());
    return false;
  }
  setFilePath(QFileInfo(path).absoluteFilePath());
  m_forcedModified = false;
  m_undo.setClean();
  updateModified();
  return true;
}

bool PlanDocument::importFrom(stagecraft::interop::Framework from, const QString& path, QString* error) {
  auto text = cfg::read_text_file(path.toStdString());
  if (!text.ok()) {
    if (error) *error = qs(text.status().message());
    return false;
  }
  const cfg::RunConfig base = m_config;
  auto imported = stagecraft::interop::import_config(text.value(), from, &base, path.toStdString());
  if (!imported.ok()) {
    if (error) *error = qs(imported.status().message());
    return false;
  }
  reset(imported.value(), QString(), true);
  return true;
}

bool PlanDocument::exportTo(stagecraft::interop::Framework to, const QString& path, QString* error, QStringList* notes, QStringList* written) {
  if (!isValid()) {
    if (error) *error = tr("cannot export an invalid configuration; fix it first: %1").arg(m_problems.first().message);
    return false;
  }
  if (path.isEmpty()) {
    if (error) *error = tr("no file name given; choose where to write the export");
    return false;
  }
  stagecraft::interop::ExportOptions options;
  options.config_path = QFileInfo(path).fileName().toStdString();
  auto exported = stagecraft::interop::export_files(m_config, to, options);
  if (!exported.ok()) {
    if (error) *error = qs(exported.status().message());
    return false;
  }
  const QDir dir = QFileInfo(path).absoluteDir();
  const auto& files = exported.value().files;
  for (size_t i = 0; i < files.size(); ++i) {
    const QString target = i == 0 ? path : dir.filePath(qs(files[i].name));
    if (stagecraft::Status st = cfg::write_text_file_atomic(target.toStdString(), files[i].text); !st) {
      if (error) *error = qs(st.message());
      return false;
    }
    if (written) *written << target;
  }
  if (notes) {
    notes->clear();
    for (const auto& n : exported.value().notes) *notes << qs(n);
  }
  return true;
}
