// stagecraft-cli preflight and run --hosts against two sshds on 127.0.0.1 (ssh_lab.h): exit
// statuses, per-host lines, and a remote training run recorded like a local one.
#include <QtTest>

#include "ssh_lab.h"

class TestCliRemote : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<SshLab> lab_;
  QString hostfile_;

  int cli(const QStringList& args, QString* out, QString* err) {
    QProcess p;
    p.setWorkingDirectory(STAGECRAFT_SOURCE_DIR);
    p.start(QString(STAGECRAFT_BIN_DIR) + "/stagecraft-cli", args);
    if (!p.waitForFinished(90000)) {
      p.kill();
      p.waitForFinished();
      return -1;
    }
    *out = QString::fromUtf8(p.readAllStandardOutput());
    *err = QString::fromUtf8(p.readAllStandardError());
    return p.exitCode();
  }
  QStringList common(const QString& known_hosts) {
    return {"--hosts", hostfile_, "--ssh-config", lab_->ssh_config(), "--known-hosts", known_hosts};
  }

 private slots:
  void initTestCase() {
    if (const QString why = SshLab::can_run(false); !why.isEmpty()) QSKIP(qPrintable(why));
    lab_ = std::make_unique<SshLab>(3);
    QVERIFY2(lab_->ok(), qPrintable(lab_->error()));
    QVERIFY2(lab_->add_loopback_node() && lab_->add_loopback_node(), qPrintable(lab_->error()));
    hostfile_ = lab_->dir() + "/hosts";
    QVERIFY(lab_->write_file(hostfile_, "# two sshds on this machine\nloop0 slots=2\nloop1 slots=2\n"));
  }

  void preflight_all_good() {
    QString out, err;
    QCOMPARE(cli(QStringList{"preflight", "configs/tiny-gpt.yaml"} + common(lab_->known_hosts()), &out, &err), 0);
    QVERIFY2(out.contains(QRegularExpression("^loop0: ok \\(127\\.0\\.0\\.1:\\d+, \\d+ cores, stagecraft-worker ", QRegularExpression::MultilineOption)), qPrintable(out));
    QVERIFY2(out.contains("loop1: ok"), qPrintable(out));
  }

  void preflight_failures_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown host key") << "unknown" << 1 << "stagecraft-cli: error: loop1: host key unknown (SHA256:";
    QTest::newRow("missing worker") << "worker" << 1 << "no worker at /nonexistent/stagecraft-worker";
    QTest::newRow("bad hostfile") << "hostfile" << 2 << ":1: expected `HOST slots=N`";
    QTest::newRow("unknown include host") << "include" << 2 << "--include=nope: host `nope` is not in the hostfile";
  }
  void preflight_failures() {
    QFETCH(QString, kind);
    QFETCH(int, status);
    QFETCH(QString, message);
    QStringList args = {"preflight", "configs/tiny-gpt.yaml"};
    if (kind == "unknown") {
      const QString kh = lab_->dir() + "/kh_one";
      QVERIFY(lab_->write_file(kh, lab_->known_hosts_line(*lab_->nodes()[0], lab_->nodes()[0]->host_pub) + "\n"));
      args += common(kh);
    } else {
      args += common(lab_->known_hosts());
    }
    if (kind == "worker") args += {"--worker", "/nonexistent/stagecraft-worker"};
    if (kind == "hostfile") {
      const QString bad = lab_->dir() + "/bad_hosts";
      QVERIFY(lab_->write_file(bad, "loop0 2\n"));
      args[3] = bad;
    }
    if (kind == "include") args += {"--include", "nope"};
    QString out, err;
    QCOMPARE(cli(args, &out, &err), status);
    QVERIFY2(err.contains(message), qPrintable(err));
    if (kind == "unknown") QVERIFY2(out.contains("loop0: ok"), qPrintable(out));  // the other host still checked
  }

  void run_over_ssh() {
    QString out, err;
    const int rc = cli(QStringList{"run", "configs/tiny-gpt.yaml", "train.steps=3", "train.warmup_steps=0",
                                   "train.checkpoint_dir=" + lab_->dir() + "/ckpt", "--db", lab_->dir() + "/runs.sqlite"} +
                           common(lab_->known_hosts()),
                       &out, &err);
    QVERIFY2(rc == 0, qPrintable(out + err));
    QVERIFY2(out.contains("loop0: ok") && out.contains("loop1: ok"), qPrintable(out));
    QVERIFY2(out.contains("done: 3 steps"), qPrintable(out));
  }
};

QTEST_APPLESS_MAIN(TestCliRemote)
#include "tst_cli_remote.moc"
