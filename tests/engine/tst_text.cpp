// core/text.h: shell-like splitting of an argument line (split_words), the way a POSIX shell
// splits a simple command without expanding anything.
#include "stagecraft/core/text.h"

#include <QtTest>

using namespace stagecraft;

namespace {

// The words joined by '|' so that empty words and blanks inside words show.
QString joined(const std::vector<std::string>& words) {
  QStringList parts;
  for (const auto& w : words) parts << QString::fromStdString(w);
  return parts.join('|');
}

}  // namespace

class TestText : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void splitsLikeAShell_data() {
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("words");   // joined by '|'
    QTest::addColumn<int>("count");
    QTest::newRow("empty") << "" << "" << 0;
    QTest::newRow("blanks only") << " \t\n " << "" << 0;
    QTest::newRow("plain words") << "--lr 1e-4  --steps\t10" << "--lr|1e-4|--steps|10" << 4;
    QTest::newRow("single quotes keep blanks") << "--data-path 'my data/x y'" << "--data-path|my data/x y" << 2;
    QTest::newRow("single quotes keep backslash and double quote") << "'a\\b\"c'" << "a\\b\"c" << 1;
    QTest::newRow("double quotes with escapes") << "\"say \\\"hi\\\" \\\\ \\$HOME \\x\"" << "say \"hi\" \\ $HOME \\x" << 1;
    QTest::newRow("quotes join with neighbours") << "a'b c'd\"e f\"g" << "ab cde fg" << 1;
    QTest::newRow("empty quoted word") << "a '' \"\" b" << "a|||b" << 4;
    QTest::newRow("backslash keeps a blank") << "my\\ file --x" << "my file|--x" << 2;
    QTest::newRow("backslash newline joins") << "--a \\\n--b" << "--a|--b" << 2;
    QTest::newRow("no expansion") << "$HOME * ~ `x` ;" << "$HOME|*|~|`x`|;" << 5;
    QTest::newRow("equals inside a word") << "--deepspeed_config=.stagecraft/ds.json" << "--deepspeed_config=.stagecraft/ds.json" << 1;
  }
  void splitsLikeAShell() {
    QFETCH(QString, line);
    QFETCH(QString, words);
    QFETCH(int, count);
    auto r = stagecraft::split_words(line.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.status().message().c_str());
    QCOMPARE(static_cast<int>(r->size()), count);
    QCOMPARE(joined(r.value()), words);
  }

  void refusesWhatDoesNotClose_data() {
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("message");
    QTest::newRow("unclosed single quote") << "--x 'abc" << "unclosed single quote at column 5";
    QTest::newRow("unclosed double quote") << "a \"b\\\"" << "unclosed double quote at column 3";
    QTest::newRow("trailing backslash") << "--x abc\\" << "trailing backslash at column 8";
  }
  void refusesWhatDoesNotClose() {
    QFETCH(QString, line);
    QFETCH(QString, message);
    auto r = stagecraft::split_words(line.toStdString());
    QVERIFY(!r.ok());
    QCOMPARE(r.status().code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(r.status().message()).startsWith(message), r.status().message().c_str());
  }

  // Fields between separators, empty ones kept: what hostfiles and sinfo/sacct lines are cut by.
  void splitsFields() {
    using V = std::vector<std::string_view>;
    QCOMPARE(stagecraft::split_fields("a|b||c", '|'), (V{"a", "b", "", "c"}));
    QCOMPARE(stagecraft::split_fields("", '|'), (V{""}));
    QCOMPARE(stagecraft::split_fields("|", '|'), (V{"", ""}));
    QCOMPARE(stagecraft::split_fields("node-a slots=8", '|'), (V{"node-a slots=8"}));
    QCOMPARE(stagecraft::split_fields("x\ny\n", '\n'), (V{"x", "y", ""}));
  }
};

QTEST_APPLESS_MAIN(TestText)
#include "tst_text.moc"
