// SlurmLab: munge, MariaDB, slurmdbd, slurmctld and two slurmd in network namespaces. See
// slurm_lab.h.
#include "slurm_lab.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QThread>

#include <csignal>
#include <functional>

#include <unistd.h>

namespace {

const char* const kBinaries[] = {"/usr/sbin/slurmctld", "/usr/sbin/slurmd",  "/usr/sbin/slurmdbd", "/usr/sbin/munged",
                                 "/usr/bin/sbatch",     "/usr/bin/srun",     "/usr/bin/squeue",    "/usr/bin/sacct",
                                 "/usr/bin/scancel",    "/usr/bin/sinfo",    "/usr/bin/sacctmgr",    "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db",
                                 "/usr/bin/unshare",    "/usr/bin/nsenter"};

}  // namespace

SlurmLab::SlurmLab(int subnet) : subnet_(subnet) {}

SlurmLab::~SlurmLab() {
  // A run a failed check left behind (a detached supervisor of a run in the lab's history) ends
  // with the lab: every process whose command line names the lab's directory.
  if (tmp_.isValid()) {
    const QByteArray needle = tmp_.path().toUtf8();
    for (const QString& e : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
      bool ok = false;
      const int pid = e.toInt(&ok);
      if (!ok || pid == getpid()) continue;
      QFile f("/proc/" + e + "/cmdline");
      if (f.open(QIODevice::ReadOnly) && f.readAll().contains(needle)) ::kill(pid, SIGKILL);
    }
  }
  // Every process of the nodes (slurmd, slurmstepd, batch scripts, workers) dies with the
  // namespaces (SshLab's destructor), then the controller side.
  for (auto& d : slurmds_) {
    if (d) {
      d->kill();
      d->waitForFinished(3000);
    }
  }
  net_.reset();
  for (auto* p : {&slurmctld_, &slurmdbd_, &mariadb_, &munged_}) {
    if (*p) {
      (*p)->kill();
      (*p)->waitForFinished(5000);
    }
  }
}

QString SlurmLab::can_run() {
  if (geteuid() != 0) return "needs root (slurmd, network namespaces); run the Slurm suite as root";
  for (const char* b : kBinaries) {
    if (!QFile::exists(b)) {
      return QString("needs %1 (Debian: slurmctld slurmd slurmdbd slurm-client munge mariadb-server util-linux)").arg(b);
    }
  }
  return SshLab::can_run(true);
}

bool SlurmLab::fail(const QString& why) {
  if (error_.isEmpty()) error_ = why;
  return false;
}

bool SlurmLab::write(const QString& name, const QString& text) {
  QFile f(tmp_.path() + "/" + name);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return fail("cannot write " + f.fileName());
  f.write(text.toUtf8());
  return true;
}

bool SlurmLab::daemon(std::unique_ptr<QProcess>& p, const QString& program, const QStringList& args, const QString& what) {
  p = std::make_unique<QProcess>();
  p->setProcessChannelMode(QProcess::MergedChannels);
  p->setStandardOutputFile(tmp_.path() + "/log/" + what + ".out");
  p->start(program, args);
  if (!p->waitForStarted(5000)) return fail(what + " did not start: " + p->errorString());
  return true;
}

bool SlurmLab::wait_for(const std::function<bool()>& ready, int timeout_ms, const QString& what) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < timeout_ms) {
    if (ready()) return true;
    QThread::msleep(100);
  }
  return fail(what + " within " + QString::number(timeout_ms / 1000) + " s (logs in " + tmp_.path() + "/log)");
}

QStringList SlurmLab::node_names() const {
  return {QString("sc%1n0").arg(subnet_), QString("sc%1n1").arg(subnet_)};
}

QString SlurmLab::log_tail(const QString& file, int lines) {
  QFile f(tmp_.path() + "/log/" + file);
  if (!f.open(QIODevice::ReadOnly)) return {};
  const QStringList all = QString::fromUtf8(f.readAll()).split('\n');
  return all.mid(std::max<qsizetype>(0, all.size() - lines)).join('\n');
}

int SlurmLab::slurm(const QStringList& argv, QString* out, QString* err) {
  QProcess p;
  p.start(argv.front(), argv.mid(1));
  if (!p.waitForFinished(30000)) {
    p.kill();
    p.waitForFinished();
    return -1;
  }
  if (out) *out = QString::fromUtf8(p.readAllStandardOutput());
  if (err) *err = QString::fromUtf8(p.readAllStandardError());
  return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

QString SlurmLab::final_state(const QString& job_id, int timeout_ms) {
  QElapsedTimer t;
  t.start();
  QString state;
  while (t.elapsed() < timeout_ms) {
    QString out;
    if (slurm({"sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State"}, &out) == 0) {
      state = out.trimmed();
      if (!state.isEmpty() && !state.startsWith("PENDING") && !state.startsWith("RUNNING") && !state.startsWith("COMPLETING")) return state;
    }
    QThread::msleep(250);
  }
  return state;
}

bool SlurmLab::start() {
  if (!tmp_.isValid()) return fail("cannot make a temporary directory");
  const QString d = tmp_.path();
  for (const char* sub : {"log", "munge", "state", "spool", "db"}) QDir().mkpath(d + "/" + sub);
  QFile::setPermissions(d + "/munge", QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  // munge: a key of our own, a socket of our own.
  {
    QFile key(d + "/munge/munge.key");
    QFile random("/dev/urandom");
    if (!key.open(QIODevice::WriteOnly) || !random.open(QIODevice::ReadOnly)) return fail("cannot write the munge key");
    key.write(random.read(1024));
    key.close();
    key.setPermissions(QFile::ReadOwner | QFile::WriteOwner);
  }
  const QString socket = d + "/munge/munge.sock";
  if (!daemon(munged_, "/usr/sbin/munged",
              {"-F", "-f", "--socket=" + socket, "--key-file=" + d + "/munge/munge.key", "--log-file=" + d + "/log/munged.log",
               "--pid-file=" + d + "/munge/munged.pid", "--seed-file=" + d + "/munge/seed"},
              "munged") ||
      !wait_for([&] { return QFile::exists(socket); }, 10000, "munged did not make its socket")) {
    return false;
  }

  // The network: namespaces on a bridge; the controller side on the bridge address.
  net_ = std::make_unique<SshLab>(subnet_);
  if (!net_->ok() || !net_->add_netns_nodes(2, false)) return fail("network namespaces: " + net_->error());
  const QString ctl_addr = net_->bridge_address();
  const QStringList names = node_names();
  QString hosts = "127.0.0.1 localhost\n";
  for (int i = 0; i < 2; ++i) hosts += net_->nodes()[static_cast<size_t>(i)]->address + " " + names[i] + "\n";
  if (!write("hosts", hosts)) return false;

  // Accounting: MariaDB and slurmdbd, so that sacct has every job's final state.
  const int db_port = 17100 + subnet_, dbd_port = 17200 + subnet_, ctld_port = 17300 + subnet_;
  QString out;
  if (net_->sh("mariadb-install-db --no-defaults --datadir=" + d + "/db --user=root --auth-root-authentication-method=normal "
               "--skip-test-db > " + d + "/log/mariadb-install.out 2>&1",
               &out) != 0) {
    return fail("mariadb-install-db failed (see " + d + "/log/mariadb-install.out)");
  }
  if (!write("init.sql", "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'lab';\n"
                         "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';\n")) {
    return false;
  }
  if (!daemon(mariadb_, "/usr/sbin/mariadbd",
              {"--no-defaults", "--datadir=" + d + "/db", "--user=root", "--bind-address=127.0.0.1", "--port=" + QString::number(db_port),
               "--socket=" + d + "/mariadb.sock", "--pid-file=" + d + "/mariadb.pid", "--init-file=" + d + "/init.sql",
               "--skip-log-bin", "--innodb-buffer-pool-size=32M"},
              "mariadbd") ||
      !wait_for([&] { return net_->sh("grep -q 'ready for connections' " + d + "/log/mariadbd.out") == 0; }, 60000,
                "MariaDB did not accept connections")) {
    return false;
  }
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  const QString host = QString::fromLocal8Bit(hostname).section('.', 0, 0);  // slurmctld must find itself in SlurmctldHost
  QString dbd = QString("AuthType=auth/munge\nAuthInfo=socket=%1\nDbdHost=localhost\nDbdAddr=%2\nDbdPort=%3\nSlurmUser=root\n"
                        "PidFile=%4/slurmdbd.pid\nLogFile=%4/log/slurmdbd.log\nStorageType=accounting_storage/mysql\n"
                        "StorageHost=127.0.0.1\nStoragePort=%5\nStorageUser=slurm\nStoragePass=lab\nStorageLoc=slurm_acct_db\n")
                    .arg(socket, ctl_addr)
                    .arg(dbd_port)
                    .arg(d)
                    .arg(db_port);
  if (!write("slurmdbd.conf", dbd)) return false;
  QFile::setPermissions(d + "/slurmdbd.conf", QFile::ReadOwner | QFile::WriteOwner);
  QString text = QString("ClusterName=sclab%1\nSlurmctldHost=%2(%3)\nSlurmctldPort=%4\nSlurmdPort=6818\nSlurmUser=root\nSlurmdUser=root\n"
                         "AuthType=auth/munge\nAuthInfo=socket=%5\nCredType=cred/munge\n"
                         "StateSaveLocation=%6/state\nSlurmdSpoolDir=%6/spool/%n\nSlurmctldPidFile=%6/slurmctld.pid\n"
                         "SlurmdPidFile=%6/slurmd.%n.pid\nSlurmctldLogFile=%6/log/slurmctld.log\nSlurmdLogFile=%6/log/slurmd.%n.log\n"
                         "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
                         "SelectTypeParameters=CR_CPU\nSchedulerType=sched/backfill\nSchedulerParameters=sched_interval=1,bf_interval=1\n"
                         "MpiDefault=none\nReturnToService=2\nKillWait=2\nMinJobAge=600\nInactiveLimit=0\nJobCompType=jobcomp/none\n"
                         "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=%3\nAccountingStoragePort=%7\n"
                         "AccountingStoragePass=%5\nAccountingStorageEnforce=associations\nJobAcctGatherType=jobacct_gather/none\n"
                         "MailProg=/bin/true\n")
                     .arg(subnet_)
                     .arg(host, ctl_addr)
                     .arg(ctld_port)
                     .arg(socket, d)
                     .arg(dbd_port);
  for (int i = 0; i < 2; ++i) {
    text += QString("NodeName=%1 NodeAddr=%2 CPUs=2 State=UNKNOWN\n").arg(names[i], net_->nodes()[static_cast<size_t>(i)]->address);
  }
  text += QString("PartitionName=lab Nodes=%1,%2 Default=YES MaxTime=INFINITE State=UP\n").arg(names[0], names[1]);
  if (!write("slurm.conf", text)) return false;
  qputenv("SLURM_CONF", conf().toUtf8());

  if (!daemon(slurmdbd_, "/usr/sbin/slurmdbd", {"-D"}, "slurmdbd") ||
      !wait_for([&] { return net_->sh("grep -q 'slurmdbd version .* started' " + d + "/log/slurmdbd.log") == 0; }, 30000,
                "slurmdbd did not start")) {
    return false;
  }
  // Associations are enforced, as on production clusters: root may submit with account `lab`
  // (its default) and no other.
  for (const QStringList& cmd : {QStringList{"sacctmgr", "-i", "add", "cluster", QString("sclab%1").arg(subnet_)},
                                 QStringList{"sacctmgr", "-i", "add", "account", "lab", "Cluster=" + QString("sclab%1").arg(subnet_)},
                                 QStringList{"sacctmgr", "-i", "add", "user", "root", "Account=lab", "DefaultAccount=lab",
                                             "Cluster=" + QString("sclab%1").arg(subnet_)}}) {
    QString out, err;
    if (slurm(cmd, &out, &err) != 0) return fail(cmd.join(' ') + " failed: " + err.trimmed());
  }
  if (!daemon(slurmctld_, "/usr/sbin/slurmctld", {"-D", "-c", "-f", conf()}, "slurmctld") ||
      !wait_for([&] { return slurm({"sinfo", "-h"}) == 0; }, 30000, "slurmctld did not answer sinfo")) {
    return false;
  }
  for (int i = 0; i < 2; ++i) {
    const QString ns = net_->nodes()[static_cast<size_t>(i)]->netns;
    // A private mount namespace for the node's /etc/hosts; the network namespace's veth.
    const QString cmd = QString("mount --bind %1/hosts /etc/hosts && exec nsenter --net=/run/netns/%2 /usr/sbin/slurmd -D -f %3 -N %4")
                            .arg(d, ns, conf(), names[i]);
    slurmds_.emplace_back();
    if (!daemon(slurmds_.back(), "/usr/bin/unshare", {"--mount", "--propagation", "private", "/bin/sh", "-c", cmd}, "slurmd-" + names[i])) {
      return false;
    }
  }
  return wait_for(
      [&] {
        QString idle;
        return slurm({"sinfo", "-h", "-N", "-t", "idle", "-o", "%N"}, &idle) == 0 && idle.split('\n', Qt::SkipEmptyParts).size() == 2;
      },
      60000, "the two nodes did not become idle");
}
