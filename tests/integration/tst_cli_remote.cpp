// stagecraft-cli preflight and run --hosts against two sshds on 127.0.0.1 (ssh_lab.h): exit
// statuses, per-host lines, and a remote training run recorded like a local one.
#include <QtTest>

#include <QRegularExpression>
#include <QStandardPaths>

#include "ssh_lab.h"

class TestCliRemote : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<SshLab> lab_;
  QString hostfile_;
  bool smiHere_ = false;

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

 private Q_SLOTS:
  void initTestCase() {
    if (const QString why = SshLab::can_run(false); !why.isEmpty()) QSKIP(qPrintable(why));
    lab_ = std::make_unique<SshLab>(3);
    QVERIFY2(lab_->ok(), qPrintable(lab_->error()));
    QVERIFY2(lab_->add_loopback_node() && lab_->add_loopback_node(), qPrintable(lab_->error()));
    // loop2 has two GPUs, loop3 a driver that is not loaded (stand-ins for nvidia-smi).
    const QString two = lab_->stand_in_nvidia_smi(2), failing = lab_->stand_in_nvidia_smi(-1);
    QVERIFY2(!two.isEmpty() && !failing.isEmpty(), qPrintable(lab_->error()));
    QVERIFY2(lab_->add_loopback_node(two) && lab_->add_loopback_node(failing), qPrintable(lab_->error()));
    hostfile_ = lab_->dir() + "/hosts";
    QVERIFY(lab_->write_file(hostfile_, "# two sshds on this machine\nloop0 slots=2\nloop1 slots=2\n"));
    // Whether the real nvidia-smi is where sshd's sessions look (then loop0 and loop1 have one too).
    smiHere_ = !QStandardPaths::findExecutable("nvidia-smi", {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"})
                    .isEmpty();
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

  // backend cuda: each host's GPUs as nvidia-smi lists them, a GPU for every selected slot's number.
  void cuda_preflight_data() {
    QTest::addColumn<QString>("hosts");
    QTest::addColumn<QStringList>("extra");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("says");  // on stdout where status is 0, else on stderr
    QTest::newRow("a GPU a slot") << "loop2 slots=2\n" << QStringList{} << 0
                                  << "2 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 580.159.04, CUDA 13.0, stagecraft-worker ";
    QTest::newRow("the first GPUs selected") << "loop2 slots=4\n" << QStringList{"--include", "loop2:0,1"} << 0 << "loop2: ok (";
    QTest::newRow("more slots than GPUs")
        << "loop2 slots=4\n" << QStringList{} << 1
        << "stagecraft-cli: error: loop2: 4 slots selected but nvidia-smi lists 2 GPUs; give the host at most 2 slots";
    QTest::newRow("a selected slot without its GPU")
        << "loop2 slots=4\n" << QStringList{"--include", "loop2:1,3"} << 1
        << "stagecraft-cli: error: loop2: slot 3 is selected but nvidia-smi lists 2 GPUs (0-1); select slots below 2 (--include / --exclude)";
    QTest::newRow("nvidia-smi failing") << "loop3 slots=1\n" << QStringList{} << 1
                                        << "stagecraft-cli: error: loop3: nvidia-smi failed there (NVIDIA-SMI has failed because it "
                                           "couldn't communicate with the NVIDIA driver.";
    QTest::newRow("no nvidia-smi") << "loop0 slots=1\n" << QStringList{} << 1
                                   << "stagecraft-cli: error: loop0: no nvidia-smi in PATH there, so no NVIDIA driver to train on";
  }
  void cuda_preflight() {
    QFETCH(QString, hosts);
    QFETCH(QStringList, extra);
    QFETCH(int, status);
    QFETCH(QString, says);
    if (smiHere_ && hosts.startsWith("loop0")) QSKIP("this machine has nvidia-smi, so every node does");
    const QString file = lab_->dir() + "/gpu_hosts";
    QVERIFY(lab_->write_file(file, hosts));
    QStringList args = {"preflight", "configs/tiny-gpt.yaml", "backend=cuda"};
    args += common(lab_->known_hosts());
    args[4] = file;  // --hosts FILE
    QString out, err;
    QCOMPARE(cli(args + extra, &out, &err), status);
    QVERIFY2((status == 0 ? out : err).contains(says), qPrintable(out + err));
  }

  // `run` checks the GPUs as preflight does, before anything is recorded or started.
  // A CUDA build checks every node's GPUs before it records anything; a CPU-only build refuses
  // backend cuda itself (exit 2), also before it records anything or reaches a node.
  void cuda_run_checks_the_gpus_first() {
    const QString db = lab_->dir() + "/cuda_runs.sqlite";
    QString out, err;
    const int rc = cli(QStringList{"run", "configs/tiny-gpt.yaml", "backend=cuda", "--db", db} + common(lab_->known_hosts()), &out, &err);
#if defined(STAGECRAFT_WITH_CUDA)
    if (smiHere_) QSKIP("this machine has nvidia-smi, so every node does");
    QCOMPARE(rc, 1);
    QVERIFY2(err.contains("stagecraft-cli: error: loop0: no nvidia-smi in PATH there") &&
                 err.contains("stagecraft-cli: error: loop1: no nvidia-smi in PATH there"),
             qPrintable(out + err));
#else
    QCOMPARE(rc, 2);
    QVERIFY2(err.contains("backend=cuda: this build trains on the CPU only (built without CUDA)") &&
                 !err.contains("loop0") && !out.contains("loop0"),
             qPrintable(out + err));
#endif
    QVERIFY2(!out.contains(QRegularExpression("^run \\d+", QRegularExpression::MultilineOption)), qPrintable(out));
    QVERIFY2(!QFile::exists(db), "a refused run must leave no history behind");
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
