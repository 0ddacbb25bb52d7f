// The configuration schema (config_schema.h) against everything that must agree with it: the
// key reference in docs/configuration.md (every key with its default, no key the schema lacks), RunConfig's defaults,
// the YAML reader (each default reads back as itself, each range is the one enforced), the fuzz
// dictionary, the foreign-name hints, and the EnumName tables (core/enum_names.h).
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/config_schema.h"
#include "stagecraft/core/enum_names.h"

#include <QtTest>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

using namespace stagecraft::config;

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

QString read_source_file(const char* path) {
  QFile f(QStringLiteral(STAGECRAFT_SOURCE_DIR "/") + QLatin1String(path));
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// The key reference: the yaml block under "## Every key, with its default" in
// docs/configuration.md, as key path -> the value written beside it (comments dropped). A section
// line ("cluster:") opens the keys below it.
std::map<QString, QString> reference_keys() {
  const QString page = read_source_file("docs/configuration.md");
  const qsizetype heading = page.indexOf(QLatin1String("\n## Every key, with its default"));
  const qsizetype open = page.indexOf(QLatin1String("```yaml\n"), heading);
  const qsizetype close = page.indexOf(QLatin1String("```"), open + 7);
  std::map<QString, QString> keys;
  if (heading < 0 || open < 0 || close < 0) return keys;
  QStringList sections;  // the open sections, one per two spaces of indentation
  for (const QString& line : page.mid(open + 8, close - open - 8).split(QLatin1Char('\n'))) {
    const QString trimmed = line.trimmed();
    if (trimmed.isEmpty() || trimmed.startsWith(QLatin1Char('#'))) continue;  // a comment's next line
    const qsizetype colon = line.indexOf(QLatin1Char(':'));
    if (colon < 0) continue;
    qsizetype depth = 0;
    while (depth < line.size() && line[depth] == QLatin1Char(' ')) ++depth;
    depth /= 2;
    const QString key = line.left(colon).trimmed();
    QString value = line.mid(colon + 1);
    const qsizetype comment = value.indexOf(QLatin1String(" #"));
    if (comment >= 0) value.truncate(comment);
    value = value.trimmed();
    if (depth > sections.size()) continue;  // deeper than any open section: not a key line
    sections = sections.mid(0, depth);
    if (value.isEmpty()) {
      sections.append(key);  // a section line ("model:", "  moe:")
      continue;
    }
    keys[(sections + QStringList{key}).join(QLatin1Char('.'))] = value;
  }
  return keys;
}

// A default as the schema writes it, as the value the schema's accessor moves.
KeyValue default_value(const KeySpec& k) {
  const std::string text(k.default_text);
  switch (k.type) {
    case KeyType::kInt:
      if (k.zero_label_is_yaml && text == k.zero_label) return 0LL;
      return std::stoll(text);
    case KeyType::kUint64: return static_cast<uint64_t>(std::stoull(text));
    case KeyType::kDouble: return std::strtod(text.c_str(), nullptr);
    case KeyType::kBool: return text == "true";
    default: return text == "\"\"" ? std::string() : text;
  }
}

std::string show(const KeyValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) return "'" + x + "'";
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else return std::to_string(x);
      },
      v);
}

const char* kMinimal = "model: {layers: 4, hidden: 64, heads: 4}\n";

enum class Fruit { kApple, kPear, kPlum };
constexpr stagecraft::EnumName<Fruit> kFruitNames[] = {{Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kPlum, "plum"}};
static_assert(stagecraft::enum_to_string(kFruitNames, Fruit::kPear) == "pear");
static_assert(*stagecraft::enum_parse(kFruitNames, "plum") == Fruit::kPlum);
static_assert(!stagecraft::enum_parse(kFruitNames, "Plum"));

}  // namespace

class TestConfigSchema : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // ---- the key reference, docs/configuration.md ----

  void referenceGivesEveryKeyItsDefault_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("expected");
    for (const KeySpec& k : config_schema()) QTest::newRow(std::string(k.path).c_str()) << qs(k.path) << qs(k.default_text);
  }
  void referenceGivesEveryKeyItsDefault() {
    QFETCH(QString, key);
    QFETCH(QString, expected);
    const auto keys = reference_keys();
    const auto it = keys.find(key);
    QVERIFY2(it != keys.end(), qPrintable(key + " is in the schema but not in docs/configuration.md's key reference"));
    QCOMPARE(it->second, expected);
  }

  void referenceHasNoKeyTheSchemaLacks() {
    const auto keys = reference_keys();
    QVERIFY(keys.size() >= 40);  // the table was found and read
    for (const auto& [key, value] : keys) {
      QVERIFY2(find_key(key.toStdString()), qPrintable(key + " is in docs/configuration.md's key reference but not in the schema"));
    }
    QCOMPARE(keys.size(), config_schema().size());
  }

  // ---- the schema against RunConfig and the reader ----

  void defaultIsRunConfigDefault_data() {
    QTest::addColumn<QString>("key");
    for (const KeySpec& k : config_schema()) {
      if (k.access.get) QTest::newRow(std::string(k.path).c_str()) << qs(k.path);
    }
  }
  void defaultIsRunConfigDefault() {
    QFETCH(QString, key);
    const KeySpec* k = find_key(key.toStdString());
    QVERIFY(k);
    const RunConfig defaults;
    if (k->path == "model.layers" || k->path == "model.hidden" || k->path == "model.heads") {
      // Required keys: the reference shows GPT-2 medium's shape; RunConfig holds 0 until a file gives one.
      QCOMPARE(std::get<long long>(k->access.get(defaults)), 0LL);
      return;
    }
    QCOMPARE(show(k->access.get(defaults)), show(default_value(*k)));
  }

  // Writing a key's default as an override gives the same config as leaving the key out.
  void defaultReadsBackAsItself_data() {
    QTest::addColumn<QString>("key");
    for (const KeySpec& k : config_schema()) {
      // 0 standing for "derived" is a default no file can write (ffn_hidden: 0 is refused).
      if (!k.zero_label.empty() && !k.zero_label_is_yaml) continue;
      if (k.path == "model.layers" || k.path == "model.hidden" || k.path == "model.heads") continue;
      QTest::newRow(std::string(k.path).c_str()) << qs(k.path);
    }
  }
  void defaultReadsBackAsItself() {
    QFETCH(QString, key);
    const KeySpec* k = find_key(key.toStdString());
    auto plain = parse_config(kMinimal, "minimal.yaml");
    auto given = parse_config(kMinimal, "minimal.yaml", {std::string(k->path) + "=" + std::string(k->default_text)});
    QVERIFY2(plain.ok(), plain.status().message().c_str());
    QVERIFY2(given.ok(), given.status().message().c_str());
    QVERIFY(given.value() == plain.value());
  }

  // The reader enforces the schema's range, and says so in the usual shape.
  void rangeIsTheOneEnforced_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("message");
    for (const KeySpec& k : config_schema()) {
      if (k.type != KeyType::kInt) continue;
      const auto lo = static_cast<long long>(k.min), hi = static_cast<long long>(k.max);
      const QString range = QStringLiteral("must be between %1 and %2").arg(lo).arg(hi);
      const QString path = qs(k.path);
      QTest::newRow(qPrintable(path + " below")) << path << QString::number(lo - 1) << range;
      QTest::newRow(qPrintable(path + " above")) << path << QString::number(hi + 1) << range;
    }
  }
  void rangeIsTheOneEnforced() {
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, message);
    auto c = parse_config(kMinimal, "minimal.yaml", {(key + "=" + value).toStdString()});
    QVERIFY(!c.ok());
    const QString expected = "command line: " + key + "=" + value + ": " + message;
    QVERIFY2(qs(c.status().message()).split('\n').contains(expected), c.status().message().c_str());
  }

  void accessorsRoundTripAndRefuseWrongTypes() {
    const RunConfig defaults;
    for (const KeySpec& k : config_schema()) {
      if (!k.access.get) continue;
      RunConfig c = defaults;
      QVERIFY2(k.access.set(c, k.access.get(defaults)), std::string(k.path).c_str());
      QVERIFY2(c == defaults, std::string(k.path).c_str());
      // A double is no key's value type except the double keys'; a bool only the bool keys'.
      const KeyValue wrong = k.type == KeyType::kDouble ? KeyValue(true) : KeyValue(0.5);
      QVERIFY2(!k.access.set(c, wrong), std::string(k.path).c_str());
      QVERIFY2(c == defaults, std::string(k.path).c_str());
      for (std::string_view choice : k.choices) {
        QVERIFY2(k.access.set(c, std::string(choice)), std::string(choice).c_str());
        QCOMPARE(std::get<std::string>(k.access.get(c)), std::string(choice));
      }
      if (!k.choices.empty()) QVERIFY(!k.access.set(c, std::string("no-such-choice")));
    }
  }

  void keysAreUniqueAndInDocumentOrder() {
    std::set<std::string_view> seen;
    for (const KeySpec& k : config_schema()) QVERIFY2(seen.insert(k.path).second, std::string(k.path).c_str());
    QCOMPARE(root_names(), (std::vector<std::string>{"name", "cluster", "model", "parallel", "pipeline", "train", "backend", "comm", "launch"}));
    QCOMPARE(config_keys().size(), config_schema().size());
    QCOMPARE(section_keys("pipeline"), (std::vector<std::string>{"schedule", "virtual_stages", "partition", "costs"}));
  }

  // ---- foreign names ----

  void foreignNameGivesItsKey_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("key");
    QTest::newRow("Megatron tensor_model_parallel_size") << "tensor_model_parallel_size" << "parallel.tp";
    QTest::newRow("Paddle mp_degree") << "mp_degree" << "parallel.tp";
    QTest::newRow("LiBai pipeline_num_layers") << "pipeline_num_layers" << "model.layers";
    QTest::newRow("LiBai custom_pipeline_stage_id") << "custom_pipeline_stage_id" << "pipeline.partition";
    QTest::newRow("nanoGPT n_embd") << "n_embd" << "model.hidden";
    QTest::newRow("torchrun nproc_per_node") << "nproc_per_node" << "cluster.gpus_per_node";
    QTest::newRow("DeepSpeed zero_stage") << "zero_stage" << "parallel.zero";
    QTest::newRow("our own name") << "tp" << "";
    QTest::newRow("nobody's name") << "tpx" << "";
  }
  void foreignNameGivesItsKey() {
    QFETCH(QString, name);
    QFETCH(QString, key);
    QCOMPARE(qs(foreign_key(name.toStdString())), key);
  }

  void foreignNamesAreUniqueAndNotOurs() {
    std::set<std::string_view> seen;
    for (const KeySpec& k : config_schema()) {
      for (std::string_view f : k.foreign) {
        QVERIFY2(seen.insert(f).second, std::string(f).c_str());
        for (const KeySpec& other : config_schema()) QVERIFY2(other.leaf() != f, std::string(f).c_str());
      }
    }
  }

  void foreignNameInAFileIsAnswered() {
    auto c = parse_config("model: {layers: 4, hidden: 64, heads: 4}\nparallel:\n  tensor_parallel_size: 2\n", "x.yaml");
    QVERIFY(!c.ok());
    QCOMPARE(c.status().message(), std::string("x.yaml:3: parallel.tensor_parallel_size: unknown key; Stagecraft calls it parallel.tp"));
  }

  // ---- the fuzz dictionary ----

  void fuzzDictionaryHoldsEveryKeyAndChoice() {
    const QString dict = read_source_file("tests/fuzz/config.dict");
    QVERIFY(!dict.isEmpty());
    for (const KeySpec& k : config_schema()) {
      QVERIFY2(dict.contains("\"" + qs(k.leaf()) + ":\""), std::string(k.path).c_str());
      if (k.type == KeyType::kEnum) {
        for (std::string_view c : k.choices) QVERIFY2(dict.contains("\"" + qs(c) + "\""), std::string(c).c_str());
      }
    }
  }

  // ---- EnumName tables ----

  void enumChoicesReadAsAList() {
    QCOMPARE(stagecraft::enum_choices(kFruitNames), std::string("apple, pear or plum"));
    QCOMPARE(stagecraft::enum_choices(std::span<const stagecraft::EnumName<Fruit>>(kFruitNames, 2)), std::string("apple or pear"));
    QCOMPARE(stagecraft::enum_choices(std::span<const stagecraft::EnumName<Fruit>>(kFruitNames, 1)), std::string("apple"));
    QCOMPARE(stagecraft::enum_to_string(kFruitNames, static_cast<Fruit>(7)), std::string_view());
  }

  void configEnumsRoundTrip() {
    for (const auto& e : kTpModeNames) QCOMPARE(to_string(*parse_tp_mode(e.name)), e.name);
    for (const auto& e : kScheduleNames) QCOMPARE(to_string(*parse_schedule(e.name)), e.name);
    for (const auto& e : kRecomputeNames) QCOMPARE(to_string(*parse_recompute(e.name)), e.name);
    for (const auto& e : kPrecisionNames) QCOMPARE(to_string(*parse_precision(e.name)), e.name);
    for (const auto& e : kAttentionNames) QCOMPARE(to_string(*parse_attention(e.name)), e.name);
    for (const auto& e : kBackendNames) QCOMPARE(to_string(*parse_backend(e.name)), e.name);
    for (const auto& e : kPartitionKindNames) QCOMPARE(to_string(e.value), e.name);
    for (const auto& e : kAxisNames) QCOMPARE(to_string(e.value), e.name);
    for (const auto& e : kMetricsFormatNames) QCOMPARE(to_string(e.value), e.name);
    for (const auto& e : kLaunchFrameworkNames) QCOMPARE(to_string(e.value), e.name);
    QCOMPARE(to_string(TpMode::k2p5d), std::string_view("2.5d"));
    QCOMPARE(to_string(Schedule::k1f1b), std::string_view("1f1b"));
    QVERIFY(!parse_tp_mode("2.5D"));
    QVERIFY(!parse_backend(""));
  }
};

QTEST_GUILESS_MAIN(TestConfigSchema)
#include "tst_config_schema.moc"
