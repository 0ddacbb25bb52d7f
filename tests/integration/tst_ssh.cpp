// SSH against a real sshd on 127.0.0.1: host keys (unknown, changed, trusted on request), client
// keys, commands (timeouts, cut output, writes beyond the remote window), and remote ranks whose paths, environment and arguments try to inject shell.
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

 private Q_SLOTS:
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

  // A command that never stops writing still times out.
  void run_times_out_while_output_streams() {
    auto s = SshSession::connect("loop0", opts_);
    QVERIFY2(s.ok(), s.status().message().c_str());
    QElapsedTimer t;
    t.start();
    auto r = s.value()->run("yes", 1.0);
    QVERIFY2(!r.ok(), "an endless command finished");
    QCOMPARE(r.status().code(), Status::Code::kTimeout);
    QVERIFY2(t.elapsed() < 5000, qPrintable(QString("took %1 ms").arg(t.elapsed())));
  }

  // Output past run()'s 1 MiB cap is cut and says so.
  void run_marks_cut_output() {
    auto s = SshSession::connect("loop0", opts_);
    QVERIFY2(s.ok(), s.status().message().c_str());
    auto r = s.value()->run("head -c 1500000 /dev/zero | tr '\\0' x; echo tail >&2", 20);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(r->exit_status, 0);
    const QString marker = "[stagecraft: output cut here: more than 1 MiB]\n";
    QVERIFY2(QString::fromStdString(r->out).endsWith("x\n" + marker), r->out.substr(r->out.size() - 80).c_str());
    QCOMPARE(r->out.size(), (size_t{1} << 20) + 1 + static_cast<size_t>(marker.size()));  // 1 MiB, the line's end, the marker
    QCOMPARE(QString::fromStdString(r->err), QString("tail\n"));
  }

  // A write larger than the remote window (OpenSSH's is 2 MiB) on a non-blocking session keeps
  // what did not fit and sends it, in order, before anything later (here the EOF).
  void partial_write_keeps_the_rest() {
    auto s = SshSession::connect("loop0", opts_);
    QVERIFY2(s.ok(), s.status().message().c_str());
    auto ch = s.value()->exec("sleep 1; awk '$1 != NR { bad++ } END { print NR, bad + 0 }'");
    QVERIFY2(ch.ok(), ch.status().message().c_str());
    s.value()->set_nonblocking();
    const int lines = 800000;  // about 5.4 MB
    std::string data;
    for (int i = 1; i <= lines; ++i) data += std::to_string(i) + "\n";
    QVERIFY(ch.value()->write(data).ok());
    QVERIFY2(ch.value()->unwritten() > 0, "the whole write fit the window: the case is not exercised");
    QVERIFY(ch.value()->send_eof().ok());
    std::string out, err;
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 20000) {
      QVERIFY(ch.value()->flush().ok());
      auto open = ch.value()->read_available(out, err);
      QVERIFY2(open.ok(), open.status().message().c_str());
      if (!open.value()) break;
      QThread::msleep(5);
    }
    QCOMPARE(ch.value()->unwritten(), size_t{0});
    QCOMPARE(QString::fromStdString(out).trimmed(), QString("%1 0").arg(lines));
    ch.value().reset();  // the channel before its session
  }

  // The program a rank runs holds /dev/null as stdin and not the channel's stdin as fd 3.
  void rank_program_does_not_hold_the_channel() {
    auto s = SshSession::connect("loop0", opts_);
    QVERIFY2(s.ok(), s.status().message().c_str());
    auto cmd = remote_rank_command("/tmp", 1, 5, {},
                                   {"/bin/sh", "-c", "for f in 0 1 2 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$f ] && printf '%s ' $f; done; "
                                                     "readlink /proc/$$/fd/0"});
    QVERIFY2(cmd.ok(), cmd.status().message().c_str());
    auto r = s.value()->run(cmd.value(), 20);
    QVERIFY2(r.ok(), r.status().message().c_str());
    QCOMPARE(r->exit_status, 0);
    QCOMPARE(QString::fromStdString(r->out), QString("0 1 2 /dev/null\n"));
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
