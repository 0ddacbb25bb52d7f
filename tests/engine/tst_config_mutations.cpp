// Config mutations: thousands of deterministic damages to every configs/*.yaml (byte flips, deleted,
// duplicated and swapped lines, numbers replaced by extreme values, words by other keywords,
// truncation, and pairs of these) must each end in a plan or in errors a person can act on: one
// line per problem, each saying where (file:line) or naming the key. Nothing crashes, hangs or
// allocates without bound (the sanitizer build of tests/fuzz covers the same ground at random).
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>

#include <random>
#include <string>
#include <vector>

namespace {

constexpr const char* kOrigin = "mut.yaml";

// What replaces a number: the extremes of every range the loader checks, and values of the
// wrong type.
const std::vector<std::string> kNumbers = {
    "0", "-1", "1", "3", "7", "2147483647", "2147483648", "4294967296", "99999999999999999999", "1e308", "-1e308", "0.5",
    "131072", "131073", "1048576", "1048577", "1000000", "999999999", ".nan", ".inf", "''", "[]", "{}", "auto", "~", "0x10",
};
// What replaces a word: every keyword, and near misses.
const std::vector<std::string> kWords = {
    "auto", "uniform", "balanced", "gpipe", "1f1b", "interleaved", "1d", "2d", "2.5d", "3d", "tp-pp-dp", "pp-dp-tp", "tp-tp-pp",
    "fp16", "bf16", "fp32", "none", "selective", "full", "flash", "cpu", "cuda", "V100", "H100-SXM", "A100-80G", "true", "no", "",
    "[0, 0, 1]", "{base: A100-80GB, memory_gib: 1}", "*x", "&x 1", "\"two\\nlines\"", "'folded\n\n  twice'", "\"tab\\there\"",
};
const std::string kSpecial = ":{}[],-#&*!|>'\"%@` \n\t\\";

struct Token {
  size_t pos, len;
  bool number;
};

// Numbers and words in value position (after ": " or inside a flow collection).
std::vector<Token> value_tokens(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '#') {  // a comment runs to the end of the line
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    const bool starts = std::isalnum(static_cast<unsigned char>(s[i])) && i >= 2 && (s[i - 1] == ' ' || s[i - 1] == '[') &&
                        (s[i - 2] == ':' || s[i - 2] == ',' || s[i - 1] == '[');
    if (!starts) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '-' || s[j] == '_')) ++j;
    bool number = true;
    for (size_t k = i; k < j; ++k) number = number && (std::isdigit(static_cast<unsigned char>(s[k])) || s[k] == '.' || s[k] == '-' || s[k] == 'e');
    if (j < s.size() && s[j] == ':') {  // a key, not a value
      i = j;
      continue;
    }
    out.push_back({i, j - i, number});
    i = j;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t nl = s.find('\n', start);
    if (nl == std::string::npos) {
      if (start < s.size()) lines.push_back(s.substr(start));
      break;
    }
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// One random damage (for the combined mutations and the byte flips).
std::string damage(const std::string& s, std::mt19937& rng) {
  if (s.empty()) return s;
  std::string out = s;
  const size_t pos = rng() % out.size();
  switch (rng() % 5) {
    case 0: out[pos] = static_cast<char>(out[pos] ^ (1 << (rng() % 8))); break;
    case 1: out[pos] = kSpecial[rng() % kSpecial.size()]; break;
    case 2: out.insert(pos, 1, kSpecial[rng() % kSpecial.size()]); break;
    case 3: out.erase(pos, 1 + rng() % 8); break;
    default: {
      const auto tokens = value_tokens(out);
      if (tokens.empty()) break;
      const Token t = tokens[rng() % tokens.size()];
      const auto& pool = t.number ? kNumbers : kWords;
      out.replace(t.pos, t.len, pool[rng() % pool.size()]);
    }
  }
  return out;
}

// Every mutation of one document, deterministically.
std::vector<std::string> mutations(const std::string& text, unsigned seed) {
  std::vector<std::string> out;
  std::mt19937 rng(seed);
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    auto del = lines;
    del.erase(del.begin() + static_cast<long>(i));
    out.push_back(join_lines(del));
    auto dup = lines;
    dup.insert(dup.begin() + static_cast<long>(i), lines[i]);
    out.push_back(join_lines(dup));
    if (i + 1 < lines.size()) {
      auto swapped = lines;
      std::swap(swapped[i], swapped[i + 1]);
      out.push_back(join_lines(swapped));
    }
    auto indented = lines;  // a section moved under the previous one
    indented[i] = "  " + indented[i];
    out.push_back(join_lines(indented));
  }
  // Every value replaced by several extremes (rotating through the pools).
  const auto tokens = value_tokens(text);
  size_t turn = 0;
  for (const Token& t : tokens) {
    const auto& pool = t.number ? kNumbers : kWords;
    for (int k = 0; k < 6; ++k, ++turn) {
      std::string m = text;
      m.replace(t.pos, t.len, pool[turn % pool.size()]);
      out.push_back(m);
    }
  }
  for (int k = 0; k < 150; ++k) out.push_back(damage(text, rng));
  for (int k = 0; k < 150; ++k) out.push_back(damage(damage(damage(text, rng), rng), rng));
  for (int k = 1; k <= 20; ++k) out.push_back(text.substr(0, text.size() * static_cast<size_t>(k) / 21));
  return out;
}

// file:line, the YAML parser's "file: line N, column M", or the file and a key.
bool says_where(const QString& line) {
  static const QRegularExpression re(QStringLiteral(R"(^mut\.yaml(:\d+: |: line \d+, column \d+: |: [a-z_]+(\.[a-z_0-9]+|\[\d+\])*[=:]))"));
  return re.match(line).hasMatch();
}

}  // namespace

class TestConfigMutations : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void everyMutationPlansOrSaysWhatToFix_data() {
    QTest::addColumn<QString>("path");
    QDir dir(QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs"));
    const QStringList files = dir.entryList({"*.yaml"}, QDir::Files, QDir::Name);
    QVERIFY(files.size() >= 17);
    for (const QString& f : files) QTest::newRow(qPrintable(f)) << dir.filePath(f);
  }
  void everyMutationPlansOrSaysWhatToFix() {
    QFETCH(QString, path);
    auto text = stagecraft::config::read_text_file(path.toStdString());
    QVERIFY(text.ok());
    const auto all = mutations(text.value(), static_cast<unsigned>(qHash(QFileInfo(path).fileName())));
    QVERIFY(all.size() >= 200);
    int planned = 0, refused = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string& doc = all[i];
      auto c = stagecraft::config::parse_config(doc, kOrigin);
      if (!c.ok()) {
        ++refused;
        QCOMPARE(c.status().code(), stagecraft::Status::Code::kInvalidInput);
        const QStringList lines = QString::fromStdString(c.status().message()).split('\n');
        for (const QString& l : lines) {
          QVERIFY2(says_where(l), qPrintable(QString("mutation %1: error line does not say where:\n%2\n--- document:\n%3").arg(i).arg(l, QString::fromStdString(doc))));
          QVERIFY2(l.size() < 400, qPrintable(l));
        }
        continue;
      }
      // Accepted: it plans, and saves and loads back the same.
      auto p = stagecraft::plan::make_plan(c.value());
      QVERIFY2(p.ok(), qPrintable(QString("mutation %1 was accepted but does not plan: %2").arg(i).arg(QString::fromStdString(p.status().message()))));
      ++planned;
      if (p->topology.world_size() <= 512) {  // JSON of 8,192 ranks takes tens of ms; the bench measures it
        const std::string json = stagecraft::plan::plan_to_json(p.value()).dump();
        QVERIFY(stagecraft::Json::parse(json).ok());
      }
      auto again = stagecraft::config::parse_config(stagecraft::config::to_yaml(c.value()), "saved.yaml");
      QVERIFY2(again.ok() && again.value() == c.value(), qPrintable(QString("mutation %1 does not round-trip").arg(i)));
    }
    // Both outcomes are exercised, so the checks above ran on real cases.
    QVERIFY2(planned >= 20, qPrintable(QString("%1 planned").arg(planned)));
    QVERIFY2(refused >= 50, qPrintable(QString("%1 refused").arg(refused)));
    qDebug("%s: %d mutations, %d planned, %d refused", qPrintable(QFileInfo(path).fileName()), static_cast<int>(all.size()), planned, refused);
  }
};

QTEST_APPLESS_MAIN(TestConfigMutations)
#include "tst_config_mutations.moc"
