// Hostfiles (DeepSpeed's format), --include / --exclude selection and the cluster they define;
// shell quoting of remote command lines.
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/ssh.h"

#include <QtTest>

#include <cstdlib>

using namespace stagecraft;
using namespace stagecraft::launch;

namespace {

// "a:0,1 b:0" from a selection, to compare in one string.
QString render(const std::vector<SelectedHost>& hosts) {
  QStringList parts;
  for (const auto& h : hosts) {
    QStringList ids;
    for (int s : h.slot_ids) ids << QString::number(s);
    parts << QString::fromStdString(h.host) + ":" + ids.join(',');
  }
  return parts.join(' ');
}

}  // namespace

class TestHostfile : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void parse_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("hosts");  // "name=slots ..." or the expected error's fragment after "!"
    QTest::newRow("two hosts") << "node-a slots=4\nnode-b slots=4\n" << "node-a=4 node-b=4";
    QTest::newRow("comments and blank lines") << "# cluster\n\nnode-a slots=2   # first\n  \n\tnode-b\tslots=2\n" << "node-a=2 node-b=2";
    QTest::newRow("crlf line ends") << "node-a slots=1\r\nnode-b slots=1\r\n" << "node-a=1 node-b=1";
    QTest::newRow("address") << "10.0.0.7 slots=8" << "10.0.0.7=8";
    QTest::newRow("missing slots") << "node-a slots=1\nnode-b\n" << "!hosts:2: expected `HOST slots=N`, got `node-b`";
    QTest::newRow("slots without value") << "node-a slots=" << "!hosts:1: slots=: expected a whole number from 1 to 4096";
    QTest::newRow("zero slots") << "node-a slots=0" << "!hosts:1: slots=0: expected a whole number";
    QTest::newRow("negative slots") << "node-a slots=-2" << "!hosts:1: slots=-2";
    QTest::newRow("slots above the bound") << "node-a slots=4097" << "!hosts:1: slots=4097: expected a whole number from 1 to 4096";
    QTest::newRow("slots beyond int") << "node-a slots=99999999999" << "!hosts:1: slots=99999999999: expected a whole number";
    QTest::newRow("not a number") << "node-a slots=four" << "!hosts:1: slots=four";
    QTest::newRow("extra field") << "node-a slots=2 gpus=2" << "!hosts:1: expected `HOST slots=N`";
    QTest::newRow("duplicate host") << "a slots=1\nb slots=1\na slots=2\n" << "!hosts:3: host a is listed twice (first on line 1); remove one";
    QTest::newRow("empty file") << "# nothing\n\n" << "!hosts: no hosts";
    QTest::newRow("quote in name") << "x';touch slots=1" << "!hosts:1: host `x';touch`: character ''' is not allowed";
    QTest::newRow("dollar in name") << "$(reboot) slots=1" << "!character '$' is not allowed";
    QTest::newRow("option-like name") << "-oProxyCommand=x slots=1" << "!cannot start with '-'";
    QTest::newRow("user@host refused") << "root@node slots=1" << "!character '@' is not allowed";
  }
  void parse() {
    QFETCH(QString, text);
    QFETCH(QString, hosts);
    auto r = parse_hostfile(text.toStdString(), "hosts");
    if (hosts.startsWith('!')) {
      QVERIFY2(!r.ok(), "accepted a bad hostfile");
      QCOMPARE(r.status().code(), Status::Code::kInvalidInput);
      QVERIFY2(QString::fromStdString(r.status().message()).contains(hosts.mid(1)), r.status().message().c_str());
      QVERIFY(r.status().message().find('\n') == std::string::npos);
      return;
    }
    QVERIFY2(r.ok(), r.status().message().c_str());
    QStringList got;
    for (const auto& h : r.value()) got << QString::fromStdString(h.host) + "=" + QString::number(h.slot_count);
    QCOMPARE(got.join(' '), hosts);
  }

  void select_data() {
    QTest::addColumn<QString>("include");
    QTest::addColumn<QString>("exclude");
    QTest::addColumn<QString>("expected");  // render() or "!" + error fragment
    QTest::newRow("everything") << "" << "" << "a:0,1,2,3 b:0,1,2,3 c:0,1,2,3";
    QTest::newRow("include one host") << "b" << "" << "b:0,1,2,3";
    QTest::newRow("include host and slots") << "a@b:0,2" << "" << "a:0,1,2,3 b:0,2";
    QTest::newRow("include keeps hostfile order") << "c:1@a:3" << "" << "a:3 c:1";
    QTest::newRow("exclude host") << "" << "b" << "a:0,1,2,3 c:0,1,2,3";
    QTest::newRow("exclude slots") << "" << "a:0,3@c:1" << "a:1,2 b:0,1,2,3 c:0,2,3";
    QTest::newRow("exclude every slot drops the host") << "" << "a:0,1,2,3" << "b:0,1,2,3 c:0,1,2,3";
    QTest::newRow("both refused") << "a" << "b" << "!give one of them, not both";
    QTest::newRow("unknown host") << "d" << "" << "!--include=d: host `d` is not in the hostfile";
    QTest::newRow("slot out of range") << "a:4" << "" << "!slot `4` of a: expected a number from 0 to 3";
    QTest::newRow("bad slot") << "a:x" << "" << "!slot `x` of a";
    QTest::newRow("empty part") << "a@@b" << "" << "!empty host between '@'";
    QTest::newRow("host named twice") << "a:0@a:1" << "" << "!host a is named twice";
    QTest::newRow("exclude everything") << "" << "a@b@c" << "!no host is left";
  }
  void select() {
    QFETCH(QString, include);
    QFETCH(QString, exclude);
    QFETCH(QString, expected);
    auto hosts = parse_hostfile("a slots=4\nb slots=4\nc slots=4\n", "hosts");
    QVERIFY(hosts.ok());
    auto r = select_hosts(hosts.value(), include.toStdString(), exclude.toStdString());
    if (expected.startsWith('!')) {
      QVERIFY2(!r.ok(), "accepted a bad filter");
      QVERIFY2(QString::fromStdString(r.status().message()).contains(expected.mid(1)), r.status().message().c_str());
      return;
    }
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(render(r.value()), expected);
  }

  void cluster_data() {
    QTest::addColumn<QString>("include");
    QTest::addColumn<int>("nodes");       // -1: refused
    QTest::addColumn<int>("per_node");
    QTest::newRow("equal slots") << "a@b" << 2 << 4;
    QTest::newRow("equal after selecting slots") << "a:0,1@b:2,3@c:0,3" << 3 << 2;
    QTest::newRow("unequal slots") << "a:0@b" << -1 << 0;
  }
  void cluster() {
    QFETCH(QString, include);
    QFETCH(int, nodes);
    QFETCH(int, per_node);
    auto hosts = parse_hostfile("a slots=4\nb slots=4\nc slots=4\n", "hosts");
    auto sel = select_hosts(hosts.value(), include.toStdString(), "");
    QVERIFY2(sel.ok(), sel.status().message().c_str());
    config::RunConfig base;
    auto c = with_hosts(base, sel.value());
    if (nodes < 0) {
      QVERIFY(!c.ok());
      const QString m = QString::fromStdString(c.status().message());
      QVERIFY2(m.contains("unequal slots (a 1, b 4)"), qPrintable(m));
      return;
    }
    QVERIFY2(c.ok(), c.status().message().c_str());
    QCOMPARE(c->cluster.nodes, nodes);
    QCOMPARE(c->cluster.gpus_per_node, per_node);
    QCOMPARE(static_cast<int>(c->cluster.hosts.size()), nodes);
    QCOMPARE(c->cluster.hosts.front().slots, per_node);
  }

  // cluster.hosts goes through the hostfile's check: the same bounds and the same messages.
  void config_hosts_data() {
    QTest::addColumn<QStringList>("hosts");  // "name=slots" each
    QTest::addColumn<QString>("expected");   // "name=slots ..." or the expected error's start after "!"
    QTest::newRow("two hosts") << QStringList{"a=2", "b=2"} << "a=2 b=2";
    QTest::newRow("largest slots") << QStringList{"a=4096"} << "a=4096";
    QTest::newRow("injection in name") << QStringList{"a=2", "b'; touch /tmp/x; '=2"}
                                       << "!cluster.hosts[1]: host `b'; touch /tmp/x; '`: character ''' is not allowed";
    QTest::newRow("option-like name") << QStringList{"-oProxyCommand=1"}
                                      << "!cluster.hosts[0]: host `-oProxyCommand`: a host name cannot start with '-'";
    QTest::newRow("empty name") << QStringList{"=1"} << "!cluster.hosts[0]: host name is empty";
    QTest::newRow("zero slots") << QStringList{"a=0"} << "!cluster.hosts[0]: slots=0: expected a whole number from 1 to 4096";
    QTest::newRow("negative slots") << QStringList{"a=-3"} << "!cluster.hosts[0]: slots=-3: expected a whole number from 1 to 4096";
    QTest::newRow("slots above the bound") << QStringList{"a=4097"} << "!cluster.hosts[0]: slots=4097: expected a whole number from 1 to 4096";
    QTest::newRow("two billion slots") << QStringList{"a=2", "b=2000000000"}
                                       << "!cluster.hosts[1]: slots=2000000000: expected a whole number from 1 to 4096";
    QTest::newRow("duplicate host") << QStringList{"a=2", "b=2", "a=2"}
                                    << "!cluster.hosts[2]: host a is listed twice (first on cluster.hosts[0]); remove one";
    QTest::newRow("no hosts") << QStringList{} << "!cluster.hosts: no hosts";
  }
  void config_hosts() {
    QFETCH(QStringList, hosts);
    QFETCH(QString, expected);
    std::vector<config::HostSlots> in;
    for (const QString& h : hosts) {
      const qsizetype eq = h.lastIndexOf('=');
      in.push_back({h.left(eq).toStdString(), h.mid(eq + 1).toInt()});
    }
    auto r = hosts_from_config(in);
    if (expected.startsWith('!')) {
      QVERIFY2(!r.ok(), "accepted bad cluster.hosts");
      QCOMPARE(r.status().code(), Status::Code::kInvalidInput);
      const QString msg = QString::fromStdString(r.status().message());
      QVERIFY2(msg.startsWith(expected.mid(1)), r.status().message().c_str());
      QVERIFY2(!msg.contains('\n'), "the message is not one line");
      return;
    }
    QVERIFY2(r.ok(), r.status().message().c_str());
    QStringList got;
    for (const auto& e : r.value()) {
      got << QString::fromStdString(e.host) + "=" + QString::number(e.slot_count);
      QCOMPARE(e.line, 0);
    }
    QCOMPARE(got.join(' '), expected);
  }

  // Every quoted word reaches sh as exactly the word: run sh on the quoted command and compare.
  void shell_quote_data() {
    QTest::addColumn<QString>("word");
    QTest::newRow("plain") << "stagecraft-worker";
    QTest::newRow("spaces") << "a b  c";
    QTest::newRow("single quote") << "it's";
    QTest::newRow("injection") << "x'; touch /tmp/stagecraft-pwned; '";
    QTest::newRow("dollar and backticks") << "$(id) `id` $HOME";
    QTest::newRow("newline") << "a\nb";
    QTest::newRow("backslashes") << "\\'\\\\";
    QTest::newRow("empty") << "";
  }
  void shell_quote() {
    QFETCH(QString, word);
    auto cmd = shell_command({"printf", "%s", word.toStdString()});
    QVERIFY(cmd.ok());
    QProcess sh;
    sh.start("/bin/sh", {"-c", QString::fromStdString(cmd.value())});
    QVERIFY(sh.waitForFinished(5000));
    QCOMPARE(QString::fromUtf8(sh.readAllStandardOutput()), word);
    QVERIFY(!QFile::exists("/tmp/stagecraft-pwned"));
  }

  void shell_command_refuses_nul() {
    auto r = shell_command({"echo", std::string("a\0b", 3)});
    QVERIFY(!r.ok());
    QCOMPARE(r.status().code(), Status::Code::kInvalidInput);
  }
};

QTEST_APPLESS_MAIN(TestHostfile)
#include "tst_hostfile.moc"
