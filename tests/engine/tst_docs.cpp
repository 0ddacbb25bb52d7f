// The user guide against the tree it describes: every relative link in README.md and docs/*.md
// names a file that exists (and an #anchor into a .md file names one of its headings), every
// command `stagecraft-cli help` lists has its own section in docs/cli.md, and README.md stays a
// front door of at most 250 lines. The key reference in docs/configuration.md is checked against
// the config schema by tst_config_schema.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>

namespace {

const QString kSourceDir = QStringLiteral(STAGECRAFT_SOURCE_DIR);
constexpr int kReadmeMaxLines = 250;

QString read_text(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// The pages checked, relative to the source tree: README.md and every docs/*.md.
QStringList guide_pages() {
  QStringList pages{QStringLiteral("README.md")};
  const QDir docs(kSourceDir + QStringLiteral("/docs"));
  for (const QString& name : docs.entryList({QStringLiteral("*.md")}, QDir::Files, QDir::Name)) {
    pages << QStringLiteral("docs/") + name;
  }
  return pages;
}

// A page's lines outside fenced code blocks (``` ... ```), where links and headings are text.
QStringList prose_lines(const QString& text) {
  QStringList out;
  bool fenced = false;
  for (const QString& line : text.split(QLatin1Char('\n'))) {
    if (line.trimmed().startsWith(QLatin1String("```"))) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) out << line;
  }
  return out;
}

// A heading's anchor as GitHub writes it: lower case, every character but letters, digits,
// '-', '_' and spaces dropped, spaces as '-'. "## GPT-2 on one H100 (2026-11-25)" ->
// "gpt-2-on-one-h100-2026-11-25".
QString anchor_of(const QString& heading) {
  QString a;
  for (const QChar c : heading.trimmed().toLower()) {
    if (c.isLetterOrNumber() || c == QLatin1Char('-') || c == QLatin1Char('_')) a += c;
    else if (c == QLatin1Char(' ')) a += QLatin1Char('-');
  }
  return a;
}

QSet<QString> anchors_of(const QString& path) {
  QSet<QString> anchors;
  static const QRegularExpression heading(QStringLiteral("^#{1,6}\\s+(.*)$"));
  for (const QString& line : prose_lines(read_text(path))) {
    const auto m = heading.match(line);
    if (m.hasMatch()) anchors.insert(anchor_of(m.captured(1)));
  }
  return anchors;
}

// The command names `stagecraft-cli help` lists: its lines "  NAME usage..." under "Commands:".
QStringList cli_commands(QString* error) {
  QProcess p;
  p.start(QStringLiteral(STAGECRAFT_BIN_DIR "/stagecraft-cli"), {QStringLiteral("help")});
  if (!p.waitForFinished(30000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    *error = QStringLiteral("stagecraft-cli help did not run: ") + p.errorString();
    return {};
  }
  const QString out = QString::fromUtf8(p.readAllStandardOutput());
  static const QRegularExpression command_line(QStringLiteral("^  ([a-z][a-z-]*)\\b"));
  QStringList names;
  bool listing = false;
  for (const QString& line : out.split(QLatin1Char('\n'))) {
    if (line.startsWith(QLatin1String("Commands:"))) {
      listing = true;
      continue;
    }
    if (!listing) continue;
    if (!line.isEmpty() && !line.startsWith(QLatin1Char(' '))) break;  // the text after the list
    const auto m = command_line.match(line);
    if (m.hasMatch() && !names.contains(m.captured(1))) names << m.captured(1);
  }
  return names;
}

}  // namespace

class TestDocs : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void everyRelativeLinkResolves_data() {
    QTest::addColumn<QString>("page");
    QTest::addColumn<QString>("target");
    static const QRegularExpression link(QStringLiteral("\\]\\(([^)\\s]+)\\)"));
    int links = 0;
    for (const QString& page : guide_pages()) {
      for (const QString& line : prose_lines(read_text(kSourceDir + QLatin1Char('/') + page))) {
        for (auto it = link.globalMatch(line); it.hasNext();) {
          const QString target = it.next().captured(1);
          if (target.contains(QLatin1String("://")) || target.startsWith(QLatin1String("mailto:"))) continue;
          QTest::newRow(qPrintable(page + QLatin1String(" -> ") + target)) << page << target;
          ++links;
        }
      }
    }
    QVERIFY2(links >= 30, "the pages were found and their links read");
  }
  void everyRelativeLinkResolves() {
    QFETCH(QString, page);
    QFETCH(QString, target);
    const qsizetype hash = target.indexOf(QLatin1Char('#'));
    const QString path = hash < 0 ? target : target.left(hash);
    const QString fragment = hash < 0 ? QString() : target.mid(hash + 1);
    const QString pageDir = QFileInfo(kSourceDir + QLatin1Char('/') + page).absolutePath();
    const QString file = path.isEmpty() ? kSourceDir + QLatin1Char('/') + page : QDir::cleanPath(pageDir + QLatin1Char('/') + path);
    QVERIFY2(QFileInfo::exists(file), qPrintable(page + QLatin1String(": ") + target + QLatin1String(" names no file")));
    if (!fragment.isEmpty() && file.endsWith(QLatin1String(".md"))) {
      QVERIFY2(anchors_of(file).contains(fragment),
               qPrintable(page + QLatin1String(": ") + target + QLatin1String(" names no heading of ") + QDir(kSourceDir).relativeFilePath(file)));
    }
  }

  void everyCliCommandHasItsSection_data() {
    QTest::addColumn<QString>("command");
    QString error;
    const QStringList commands = cli_commands(&error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY2(commands.size() >= 10, qPrintable(QLatin1String("stagecraft-cli help listed only: ") + commands.join(QLatin1Char(' '))));
    for (const QString& c : commands) QTest::newRow(qPrintable(c)) << c;
    QTest::newRow("help") << QStringLiteral("help");
  }
  void everyCliCommandHasItsSection() {
    QFETCH(QString, command);
    const QSet<QString> sections = anchors_of(kSourceDir + QStringLiteral("/docs/cli.md"));
    QVERIFY2(sections.contains(command), qPrintable(command + QLatin1String(" has no section (## ") + command + QLatin1String(") in docs/cli.md")));
  }

  void readmeIsShort() {
    const QString readme = read_text(kSourceDir + QStringLiteral("/README.md"));
    QVERIFY2(!readme.isEmpty(), "README.md was read");
    const qsizetype lines = readme.count(QLatin1Char('\n'));
    QVERIFY2(lines <= kReadmeMaxLines, qPrintable(QStringLiteral("README.md has %1 lines; at most %2, the rest belongs in docs/").arg(lines).arg(kReadmeMaxLines)));
  }

  // The checker itself: headings become GitHub's anchors.
  void anchorsAreGitHubs_data() {
    QTest::addColumn<QString>("heading");
    QTest::addColumn<QString>("anchor");
    QTest::newRow("plain") << QStringLiteral("The cost model") << QStringLiteral("the-cost-model");
    QTest::newRow("punctuation dropped") << QStringLiteral("Arguments, errors and exit status") << QStringLiteral("arguments-errors-and-exit-status");
    QTest::newRow("date in brackets") << QStringLiteral("GPT-2 on one H100 (2026-11-25)") << QStringLiteral("gpt-2-on-one-h100-2026-11-25");
    QTest::newRow("apostrophe") << QStringLiteral("Where a step's time goes") << QStringLiteral("where-a-steps-time-goes");
    QTest::newRow("code") << QStringLiteral("`run` over SSH") << QStringLiteral("run-over-ssh");
  }
  void anchorsAreGitHubs() {
    QFETCH(QString, heading);
    QFETCH(QString, anchor);
    QCOMPARE(anchor_of(heading), anchor);
  }
};

QTEST_APPLESS_MAIN(TestDocs)
#include "tst_docs.moc"
