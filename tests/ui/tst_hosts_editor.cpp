// tst_hosts_editor: the hosts editor marks each bad hostfile line at its line number with the
// engine's message (also as it is typed), reads ~/.ssh/config aliases, opens and saves
// hostfiles, and its connection test (the engine's preflight on a background thread) reports a
// host whose port is closed as unreachable, per host.
#include <QPlainTextEdit>
#include <QTemporaryDir>
#include <QtTest>

#include "hosts/HostsEditor.h"
#include "hosts/PreflightRunner.h"
#include "hosts/PreflightTable.h"
#include "hosts/SshConfigHosts.h"
#include "runs_test_support.h"

using runs_test::closedPort;
using runs_test::writeFile;

class TestHostsEditor : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_dir;

 private Q_SLOTS:
  void badLineAtItsNumber_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QList<int>>("lines");
    QTest::addColumn<QStringList>("says");  // one fragment per bad line
    QTest::newRow("good file with comments") << QStringLiteral("# cluster\nnode-a slots=2\n\nnode-b slots=2  # rack 2\n") << QList<int>{}
                                             << QStringList{};
    QTest::newRow("slots missing") << QStringLiteral("node-a slots=2\nnode-b\nnode-c slots=2") << QList<int>{2}
                                   << QStringList{QStringLiteral("hostfile:2: expected `HOST slots=N`")};
    QTest::newRow("host listed twice") << QStringLiteral("node-a slots=2\nnode-b slots=2\nnode-a slots=2") << QList<int>{3}
                                       << QStringList{QStringLiteral("hostfile:3: host node-a is listed twice (first on line 1)")};
    QTest::newRow("shell in a name") << QStringLiteral("node-a;reboot slots=1") << QList<int>{1}
                                     << QStringList{QStringLiteral("hostfile:1: host `node-a;reboot`")};
    QTest::newRow("zero slots") << QStringLiteral("# a\nnode-a slots=0") << QList<int>{2} << QStringList{QStringLiteral("hostfile:2: slots=0")};
    QTest::newRow("two bad lines") << QStringLiteral("node-a slots=1\nnode-b slots=x\nnode-c slots=1\n-bad slots=1") << QList<int>{2, 4}
                                   << QStringList{QStringLiteral("hostfile:2: slots=x"), QStringLiteral("hostfile:4: host `-bad`")};
  }
  void badLineAtItsNumber() {
    QFETCH(QString, text);
    QFETCH(QList<int>, lines);
    QFETCH(QStringList, says);
    HostsEditor e;
    e.setText(text);
    QCOMPARE(e.badLines(), lines);
    const auto problems = e.problems();
    QCOMPARE(problems.size(), says.size());
    for (int i = 0; i < says.size(); ++i) {
      QVERIFY2(problems[i].message.startsWith(says[i]), qPrintable(problems[i].message));
    }
    // The good lines' hosts are kept.
    int hostLines = 0;
    for (const QString& l : text.split(QLatin1Char('\n'))) hostLines += l.trimmed().isEmpty() || l.startsWith(QLatin1Char('#')) ? 0 : 1;
    QCOMPARE(int(e.hosts().size()), hostLines - int(lines.size()));
  }

  void typingAFaultFlagsItsLine() {
    HostsEditor e;
    e.setText(QStringLiteral("node-a slots=4\n"));
    QVERIFY(e.problems().isEmpty());
    QCOMPARE(int(e.hosts().size()), 1);
    auto* editor = e.findChild<QPlainTextEdit*>(QStringLiteral("hostfileText"));
    QVERIFY(editor);
    editor->moveCursor(QTextCursor::End);
    QTest::keyClicks(editor, QStringLiteral("node-b slots=four"));
    QCOMPARE(e.badLines(), QList<int>{2});
    QTest::keyClick(editor, Qt::Key_Backspace);
    QTest::keyClick(editor, Qt::Key_Backspace);
    QTest::keyClick(editor, Qt::Key_Backspace);
    QTest::keyClick(editor, Qt::Key_Backspace);
    QTest::keyClicks(editor, QStringLiteral("4"));
    QVERIFY(e.problems().isEmpty());
    QCOMPARE(int(e.hosts().size()), 2);
    QCOMPARE(e.hosts()[1].host, std::string("node-b"));
    QCOMPARE(e.hosts()[1].slot_count, 4);
  }

  void emptyFileSaysSo() {
    const auto problems = HostsEditor::checkHostfile(QStringLiteral("# nothing yet\n"), QStringLiteral("hosts.txt"));
    QCOMPARE(problems.size(), 1);
    QCOMPARE(problems[0].line, 0);
    QVERIFY2(problems[0].message.startsWith(QStringLiteral("hosts.txt: no hosts")), qPrintable(problems[0].message));
  }

  void sshConfigAliases_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("aliases");
    QTest::newRow("plain") << QStringLiteral("Host node-a\n  HostName 10.0.0.1\nHost node-b node-c\n  User me\n")
                           << QStringList{QStringLiteral("node-a"), QStringLiteral("node-b"), QStringLiteral("node-c")};
    QTest::newRow("patterns skipped") << QStringLiteral("Host *\n  ForwardAgent no\nHost gpu-? !bad real\n")
                                      << QStringList{QStringLiteral("real")};
    QTest::newRow("case, equals, comments") << QStringLiteral("HOST a # first\nhost=b\n# Host c\n  Hostname d\nMatch host e\n")
                                            << QStringList{QStringLiteral("a"), QStringLiteral("b")};
    QTest::newRow("each once") << QStringLiteral("Host a\nHost a b\n") << QStringList{QStringLiteral("a"), QStringLiteral("b")};
  }
  void sshConfigAliases() {
    QFETCH(QString, config);
    QFETCH(QStringList, aliases);
    QCOMPARE(::sshConfigAliases(config), aliases);
  }

  void addFromSshConfig() {
    const QString config = m_dir.filePath(QStringLiteral("ssh_config_aliases"));
    QVERIFY(writeFile(config, "Host trainer-1\n  HostName 10.1.0.1\nHost trainer-2\n"));
    HostsEditor e;
    e.setSshConfigPath(config);
    QCOMPARE(e.sshAliases(), (QStringList{QStringLiteral("trainer-1"), QStringLiteral("trainer-2")}));
    e.setText(QStringLiteral("node-a slots=2"));
    e.addHost(QStringLiteral("trainer-2"), 2);
    QCOMPARE(e.text(), QStringLiteral("node-a slots=2\ntrainer-2 slots=2\n"));
    QVERIFY(e.problems().isEmpty());
  }

  void openAndSave() {
    const QString path = m_dir.filePath(QStringLiteral("cluster.hosts"));
    QVERIFY(writeFile(path, "node-a slots=2\nnode-a slots=2\n"));
    HostsEditor e;
    QVERIFY(e.openFile(path));
    QCOMPARE(e.filePath(), path);
    QCOMPARE(e.badLines(), QList<int>{2});
    // Messages name the file.
    QVERIFY2(e.problems()[0].message.startsWith(QStringLiteral("cluster.hosts:2:")), qPrintable(e.problems()[0].message));
    e.setText(QStringLiteral("node-a slots=2\nnode-b slots=2"));
    const QString out = m_dir.filePath(QStringLiteral("saved.hosts"));
    QVERIFY(e.saveFile(out));
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("node-a slots=2\nnode-b slots=2\n"));
    QString error;
    QVERIFY(!e.openFile(m_dir.filePath(QStringLiteral("missing.hosts")), &error));
    QVERIFY2(error.contains(QStringLiteral("missing.hosts: cannot read the hostfile")), qPrintable(error));
  }

  void unreachableHostsReportedPerHost() {
    const int p1 = closedPort(), p2 = closedPort();
    const QString config = m_dir.filePath(QStringLiteral("ssh_config_closed"));
    const QString known = m_dir.filePath(QStringLiteral("known_hosts_empty"));
    QVERIFY(writeFile(config, QStringLiteral("Host closed-a\n  HostName 127.0.0.1\n  Port %1\n"
                                             "Host closed-b\n  HostName 127.0.0.1\n  Port %2\n")
                                  .arg(p1)
                                  .arg(p2)
                                  .toUtf8()));
    QVERIFY(writeFile(known, ""));
    HostsEditor e;
    e.setSshConfigPath(config);
    e.setKnownHostsPath(known);
    e.setText(QStringLiteral("closed-a slots=1\nclosed-b slots=2\n"));
    QSignalSpy done(&e, &HostsEditor::testFinished);
    QVERIFY(e.testConnection());
    QVERIFY(e.isTesting());
    QVERIFY(!e.testConnection());  // one pass at a time
    QTRY_VERIFY_WITH_TIMEOUT(!e.isTesting(), 60000);
    QCOMPARE(done.count(), 1);
    PreflightTable* t = e.preflightTable();
    QCOMPARE(t->rowCount(), 2);
    const char* hosts[] = {"closed-a", "closed-b"};
    for (int r = 0; r < 2; ++r) {
      const auto& c = t->checks()[static_cast<size_t>(r)];
      QCOMPARE(c.host, std::string(hosts[r]));
      QVERIFY(!c.connect.reachable);
      QVERIFY(!c.connect.authenticated);
      QVERIFY(!c.ok());
      QCOMPARE(t->cellText(r, PreflightTable::HostColumn), QString::fromLatin1(hosts[r]));
      QCOMPARE(t->cellText(r, PreflightTable::ReachableColumn), QStringLiteral("no"));
      const QString problems = t->cellText(r, PreflightTable::ProblemsColumn);
      QVERIFY2(problems.contains(QString::fromLatin1(hosts[r])), qPrintable(problems));
    }
    QVERIFY2(e.statusText().contains(QStringLiteral("2 host(s) failed")), qPrintable(e.statusText()));
    // One host only.
    QVERIFY(e.testConnection({QStringLiteral("closed-b")}));
    QTRY_VERIFY_WITH_TIMEOUT(!e.isTesting(), 60000);
    QCOMPARE(t->rowCount(), 1);
    QCOMPARE(t->cellText(0, PreflightTable::HostColumn), QStringLiteral("closed-b"));
    // Its key was never seen: nothing to trust.
    QString error;
    QVERIFY(!e.trustHostKey(0, false, &error));
    QVERIFY2(error.contains(QStringLiteral("closed-b: its key was not seen")), qPrintable(error));
  }

  void nothingToTest() {
    HostsEditor e;
    e.setText(QStringLiteral("bad line here"));
    QVERIFY(!e.testConnection());
    QVERIFY2(e.statusText().contains(QStringLiteral("No valid host to test")), qPrintable(e.statusText()));
    e.setText(QStringLiteral("node-a slots=1"));
    QVERIFY(!e.testConnection({QStringLiteral("node-z")}));
    QVERIFY2(e.statusText().contains(QStringLiteral("node-z")), qPrintable(e.statusText()));
  }

  // What a pass reports when the preflight itself threw on the worker thread: every host failed,
  // with the reason, shown as failed rows.
  void aPassThatCouldNotRunFailsEveryHost() {
    const std::vector<stagecraft::launch::SelectedHost> hosts{{"node-a", {0, 1}}, {"node-b", {0, 1}}};
    const auto checks = PreflightRunner::failedChecks(hosts, "Resource temporarily unavailable");
    QCOMPARE(checks.size(), size_t(2));
    for (size_t i = 0; i < checks.size(); ++i) {
      QCOMPARE(checks[i].host, hosts[i].host);
      QVERIFY(!checks[i].ok());
      QCOMPARE(checks[i].errors.size(), size_t(1));
      QCOMPARE(QString::fromStdString(checks[i].errors[0]),
               QString::fromStdString(hosts[i].host) + QStringLiteral(": preflight could not run: Resource temporarily unavailable"));
    }
    PreflightTable table;
    table.setChecks(checks, {2, 2});
    QCOMPARE(table.rowCount(), 2);
    QCOMPARE(table.cellText(1, PreflightTable::ReachableColumn), QStringLiteral("no"));
    QVERIFY(table.cellText(1, PreflightTable::ProblemsColumn).contains(QStringLiteral("node-b: preflight could not run")));
  }
};

QTEST_MAIN(TestHostsEditor)
#include "tst_hosts_editor.moc"
