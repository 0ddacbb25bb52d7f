// SSH against a real sshd on 127.0.0.1: host keys (unknown, changed, trusted on request), client
// keys, commands, and remote ranks whose paths, environment and arguments try to inject shell.
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/remote_run.h"
#include "stagecraft/launch/ssh.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>  // after the engine's headers: Qt defines `slots`, a member name there

#include "ssh_lab.h"

using namespace stagecraft;
using namespace stagecraft::launch;

class TestSsh : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<SshLab> lab_;
  SshOptions opts_;

  // "SHA256:..." of a node's host key as ssh-keygen prints it.
  QString fingerprint_of(const SshLab::Node& n) {
    QString out;
    lab_->sh("ssh-keygen -lf " + n.host_key + ".pub", &out);
    return out.section(' ', 1, 1);
  }

 private slots:
  void initTestCase() {
    if (const QString why = SshLab::can_run(false); !why.isEmpty()) QSKIP(qPrintable(why));
    lab_ = std::make_unique<SshLab>(1);
    QVERIFY2(lab_->ok(), qPrintable(lab_->error()));
    QVERIFY2(lab_->add_loopback_node(), qPrintable(lab_->error()));
    opts_.config_file = lab_->ssh_config().toStdString();
    opts_.known_hosts_file = lab_->known_hosts().toStdString();
    QDir::setCurrent(STAGECRAFT_SOURCE_DIR);
  }

  void connect_and_run() {
    auto s = SshSession::connect("loop0", opts_);
    QVERIFY2(s.ok(), s.status().message().c_str());
    QCOMPARE(QString::fromStdString(s.value()->local_address()), QString("127.0.0.1"));
    auto r = s.value()->run("echo hello; echo oops >&2; exit 3", 10);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(QString::fromStdString(r->out), QString("hello\n"));
    QCOMPARE(QString::fromStdString(r->err), QString("oops\n"));
    QCOMPARE(r->exit_status, 3);
  }

  void host_key_refused_data() {
    QTest::addColumn<QString>("kind");
    QTest::newRow("unknown key") << "unknown";
    QTest::newRow("changed key") << "changed";
    QTest::newRow("no known_hosts file") << "missing";
  }
  void host_key_refused() {
    QFETCH(QString, kind);
    const auto& node = *lab_->nodes().front();
    SshOptions o = opts_;
    o.known_hosts_file = (lab_->dir() + "/kh_" + kind).toStdString();
    if (kind == "unknown") QVERIFY(lab_->write_file(QString::fromStdString(o.known_hosts_file), "10.1.2.3 " + lab_->fresh_public_key() + "\n"));
    if (kind == "changed") {
      QVERIFY(lab_->write_file(QString::fromStdString(o.known_hosts_file), lab_->known_hosts_line(node, lab_->fresh_public_key()) + "\n"));
    }
    ConnectReport report;
    auto s = SshSession::connect("loop0", o, &report);
    QVERIFY2(!s.ok(), "connected despite a bad host key");
    const QString msg = QString::fromStdString(s.status().message());
    const QString fp = fingerprint_of(node);
    QVERIFY(fp.startsWith("SHA256:"));
    QVERIFY2(msg.contains(fp), qPrintable(msg + " / expected " + fp));
    QVERIFY2(msg.startsWith("loop0: host key " + QString(kind == "changed" ? "CHANGED" : "unknown")), qPrintable(msg));
    QVERIFY(!msg.contains('\n'));
    QVERIFY(report.reachable);
    QVERIFY(!report.host_key_known);
    QVERIFY(!report.authenticated);
  }

  void trust_unknown_key_only_with_its_fingerprint() {
    const auto& node = *lab_->nodes().front();
    SshOptions o = opts_;
    o.known_hosts_file = (lab_->dir() + "/kh_trust").toStdString();
    QVERIFY(lab_->write_file(QString::fromStdString(o.known_hosts_file), ""));
    auto probe = probe_host_key("loop0", o);
    QVERIFY2(probe.ok(), probe.status().message().c_str());
    QCOMPARE(QString::fromStdString(probe->state), QString("unknown"));
    QCOMPARE(QString::fromStdString(probe->fingerprint), fingerprint_of(node));
    QVERIFY(!trust_host_key("loop0", o, "SHA256:not-the-key"));
    QVERIFY(!SshSession::connect("loop0", o).ok());
    Status st = trust_host_key("loop0", o, probe->fingerprint);
    QVERIFY2(st, st.message().c_str());
    auto s = SshSession::connect("loop0", o);
    QVERIFY2(s.ok(), s.status().message().c_str());
    // A changed key is never trusted, even with its own fingerprint.
    o.known_hosts_file = (lab_->dir() + "/kh_changed_trust").toStdString();
    QVERIFY(lab_->write_file(QString::fromStdString(o.known_hosts_file), lab_->known_hosts_line(node, lab_->fresh_public_key()) + "\n"));
    Status changed = trust_host_key("loop0", o, probe->fingerprint);
    QVERIFY(!changed);
    QVERIFY2(QString::fromStdString(changed.message()).contains("never trusted"), changed.message().c_str());
    auto probe2 = probe_host_key("loop0", o);
    QVERIFY(probe2.ok());
    QCOMPARE(QString::fromStdString(probe2->state), QString("changed"));
  }

  void wrong_client_key_refused() {
    ConnectReport report;
    auto s = SshSession::connect("wrongkey", opts_, &report);
    QVERIFY(!s.ok());
    QVERIFY2(QString::fromStdString(s.status().message()).contains("no key was accepted"), s.status().message().c_str());
    QVERIFY(report.host_key_known);
    QVERIFY(!report.authenticated);
  }

  void unreachable_host() {
    SshOptions o = opts_;
    o.connect_timeout_s = 3;
    ConnectReport report;
    auto s = SshSession::connect("127.0.0.1", o, &report);  // port 22: nothing listens there in the lab
    if (s.ok()) QSKIP("an sshd listens on 127.0.0.1:22 on this machine");
    QVERIFY(!report.reachable);
    QCOMPARE(s.status().code(), Status::Code::kUnavailable);
  }

  // Remote ranks running /bin/sh instead of the worker: what each word and variable becomes.
  void injection_data() {
    QTest::addColumn<QString>("what");
    QTest::newRow("program path") << "program";
    QTest::newRow("argument") << "argument";
    QTest::newRow("working directory") << "cwd";
    QTest::newRow("run id in the environment") << "env";
    QTest::newRow("host name") << "host";
  }
  void injection() {
    QFETCH(QString, what);
    const QString pwned = lab_->dir() + "/pwned";
    const std::string attack = ("x'; touch " + pwned + "; echo '").toStdString();
    const std::string subst = ("$(touch " + pwned + ")`touch " + pwned + "`").toStdString();
    auto cfg = config::load_config_file("configs/tiny-gpt.yaml", {"train.steps=1", "train.warmup_steps=0"});
    QVERIFY2(cfg.ok(), cfg.status().message().c_str());
    RemoteRunOptions o;
    o.ssh = opts_;
    o.hosts = {{"loop0", {0, 1, 2, 3}}};
    o.command = {"/bin/sh", "-c", "printf '%s|%s\\n' \"$1\" \"$STAGECRAFT_RUN_ID\"", "sh", "plain"};
    o.run_id = "run1";
    o.grace_s = 1;
    if (what == "program") o.command = {"/nonexistent/" + attack};
    if (what == "argument") o.command[4] = attack + subst;
    if (what == "cwd") o.remote_cwd = "/tmp/" + attack;
    if (what == "env") o.run_id = attack + subst;
    if (what == "host") o.hosts[0].host = attack;
    auto c = with_hosts(cfg.value(), o.hosts);
    QVERIFY(c.ok() || what == "host");
    config::RunConfig run_cfg = c.ok() ? c.value() : cfg.value();
    auto plan = plan::make_plan(run_cfg);
    QVERIFY2(plan.ok(), plan.status().message().c_str());
    std::vector<std::string> lines;
    RunCallbacks cb;
    cb.on_log = [&](int, bool is_err, const std::string& line) {
      if (!is_err) lines.push_back(line);
    };
    auto outcome = run_remote(run_cfg, plan.value(), o, cb);
    QVERIFY2(!QFile::exists(pwned), "an injected command ran");
    if (what == "host") {
      QVERIFY(!outcome.ok());
      QVERIFY2(QString::fromStdString(outcome.status().message()).contains("is not allowed"), outcome.status().message().c_str());
      return;
    }
    QVERIFY2(outcome.ok(), outcome.status().message().c_str());
    if (what == "program" || what == "cwd") {
      QCOMPARE(outcome->state, RunOutcome::State::kFailed);
      if (what == "cwd") QVERIFY2(QString::fromStdString(outcome->reason).contains("cannot enter the working directory"), outcome->reason.c_str());
      return;
    }
    QVERIFY2(outcome->ok(), outcome->reason.c_str());
    QCOMPARE(lines.size(), size_t{4});
    const std::string expected = what == "argument" ? attack + subst + "|run1" : "plain|" + attack + subst;
    for (const auto& l : lines) QCOMPARE(QString::fromStdString(l), QString::fromStdString(expected));
  }
};

QTEST_APPLESS_MAIN(TestSsh)
#include "tst_ssh.moc"
