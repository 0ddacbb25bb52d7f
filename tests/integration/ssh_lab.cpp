// SshLab: sshds on 127.0.0.1 and in network namespaces. See ssh_lab.h.
#include "ssh_lab.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QThread>

#include <cerrno>
#include <csignal>

#include <fcntl.h>
#include <poll.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// True when a TCP connection to address:port succeeds within timeout_ms.
bool can_connect(const QString& address, int port, int timeout_ms) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.toLatin1().constData(), &a.sin_addr);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) == 1) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      ok = err == 0;
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

SshLab::SshLab(int subnet) : subnet_(subnet) {
  qunsetenv("SSH_AUTH_SOCK");  // only the lab's keys
  bridge_ = QString("scb%1").arg(subnet_);
  if (!tmp_.isValid()) {
    fail("cannot make a temporary directory");
    return;
  }
  QDir().mkpath("/run/sshd");
  if (sh("ssh-keygen -q -t ed25519 -N '' -C stagecraft-lab -f " + client_key()) != 0 ||
      sh("ssh-keygen -q -t ed25519 -N '' -C stagecraft-other -f " + other_key()) != 0) {
    fail("ssh-keygen failed");
    return;
  }
  QFile::copy(client_key() + ".pub", tmp_.path() + "/authorized_keys");
  write_client_files();
}

SshLab::~SshLab() {
  for (auto& n : nodes_) {
    if (n->sshd) {
      n->sshd->kill();
      n->sshd->waitForFinished(3000);
    }
    if (!n->netns.isEmpty()) {
      sh("ip netns pids " + n->netns + " | xargs -r kill -9");
      sh("ip netns del " + n->netns);
      sh("ip link del " + n->veth);
    }
  }
  if (!bridge_.isEmpty()) sh("ip link del " + bridge_ + " 2>/dev/null");
}

QString SshLab::can_run(bool need_netns) {
  if (geteuid() != 0) return "needs root (sshd, network namespaces); run the integration suites as root";
  if (!QFile::exists("/usr/sbin/sshd")) return "needs /usr/sbin/sshd (openssh-server)";
  if (!need_netns) return {};
  QProcess p;
  p.start("ip", {"netns", "list"});
  if (!p.waitForFinished(5000) || p.exitCode() != 0) return "`ip netns` is unavailable here";
  return {};
}

bool SshLab::fail(const QString& why) {
  if (error_.isEmpty()) error_ = why;
  return false;
}

int SshLab::sh(const QString& command, QString* out) {
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start("/bin/sh", {"-c", command});
  if (!p.waitForFinished(20000)) {
    p.kill();
    p.waitForFinished();
    return -1;
  }
  if (out) *out = QString::fromUtf8(p.readAll());
  return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

bool SshLab::cut_link(const Node& n) { return sh("ip link set " + n.veth + " down") == 0; }

bool SshLab::restore_link(const Node& n) {
  if (sh("ip link set " + n.veth + " up") != 0) return false;
  QString flush = "ip neigh flush dev " + bridge_;
  for (const auto& other : nodes_) {
    if (!other->netns.isEmpty()) flush += "; ip -n " + other->netns + " neigh flush all";
  }
  if (sh(flush) != 0) return false;
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < 10000) {
    QString state;
    if (sh("cat /sys/class/net/" + n.veth + "/operstate", &state) == 0 && state.trimmed() == "up") return true;
    QThread::msleep(50);
  }
  return false;
}

QString SshLab::known_hosts_line(const Node& n, const QString& pub) const {
  const QString host = n.port == 22 ? n.address : "[" + n.address + "]:" + QString::number(n.port);
  return host + " " + pub;
}

bool SshLab::write_file(const QString& path, const QString& text) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return fail("cannot write " + path);
  f.write(text.toUtf8());
  return true;
}

QString SshLab::fresh_public_key() {
  static int counter = 0;
  const QString path = tmp_.path() + "/fresh" + QString::number(++counter);
  if (sh("ssh-keygen -q -t ed25519 -N '' -f " + path) != 0) return {};
  QFile f(path + ".pub");
  f.open(QIODevice::ReadOnly);
  return QString::fromUtf8(f.readAll()).section(' ', 0, 1);
}

bool SshLab::write_client_files() {
  QString config, known;
  for (const auto& n : nodes_) {
    config += "Host " + n->alias + "\n  HostName " + n->address + "\n  Port " + QString::number(n->port) +
              "\n  User root\n  IdentityFile " + client_key() + "\n\n";
    known += known_hosts_line(*n, n->host_pub) + "\n";
  }
  // The alias that presents a key the nodes never authorized.
  if (!nodes_.empty()) {
    const auto& n = *nodes_.front();
    config += "Host wrongkey\n  HostName " + n.address + "\n  Port " + QString::number(n.port) + "\n  User root\n  IdentityFile " +
              other_key() + "\n\n";
  }
  return write_file(ssh_config(), config) && write_file(known_hosts(), known);
}

bool SshLab::start_sshd(Node& n) {
  n.host_key = tmp_.path() + "/host_" + n.alias;
  if (sh("ssh-keygen -q -t ed25519 -N '' -f " + n.host_key) != 0) return fail("ssh-keygen (host key) failed");
  QFile pub(n.host_key + ".pub");
  pub.open(QIODevice::ReadOnly);
  n.host_pub = QString::fromUtf8(pub.readAll()).section(' ', 0, 1);
  const QString conf = tmp_.path() + "/sshd_" + n.alias + ".conf";
  const QString text = QString(
                           "Port %1\nListenAddress %2\nHostKey %3\nAuthorizedKeysFile %4/authorized_keys\nPidFile %4/sshd_%5.pid\n"
                           "UsePAM no\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                           "PermitRootLogin prohibit-password\n"
                           "MaxSessions 64\nMaxStartups 64\nLogLevel ERROR\n")
                           .arg(n.port)
                           .arg(n.address, n.host_key, tmp_.path(), n.alias) +
                       (n.path_first.isEmpty() ? QString() : "SetEnv PATH=" + n.path_first + ":/usr/local/bin:/usr/bin:/bin\n");
  if (!write_file(conf, text)) return false;
  n.sshd = std::make_unique<QProcess>();
  n.sshd->setProcessChannelMode(QProcess::ForwardedErrorChannel);
  if (n.netns.isEmpty()) {
    n.sshd->start("/usr/sbin/sshd", {"-D", "-e", "-f", conf});
  } else {
    n.sshd->start("ip", {"netns", "exec", n.netns, "/usr/sbin/sshd", "-D", "-e", "-f", conf});
  }
  if (!n.sshd->waitForStarted(5000)) return fail("sshd did not start for " + n.alias);
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < 10000) {
    if (can_connect(n.address, n.port, 500)) return write_client_files();
    if (n.sshd->state() == QProcess::NotRunning) return fail("sshd for " + n.alias + " exited at once (see its stderr)");
    QThread::msleep(50);
  }
  return fail("sshd for " + n.alias + " did not listen on " + n.address + ":" + QString::number(n.port));
}

QString SshLab::stand_in_nvidia_smi(int gpus) {
  const QString dir = tmp_.path() + (gpus < 0 ? QString("/smi_failing") : QString("/smi_%1").arg(gpus));
  QString script = "#!/bin/sh\n";
  if (gpus < 0) {
    script += "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
              "NVIDIA driver is installed and running.\"\nexit 9\n";
  } else {
    script += QString("case \"$*\" in\n"
                      "  *--query-gpu=*) i=0; while [ $i -lt %1 ]; do echo 'NVIDIA H100 80GB HBM3, 81559, 580.159.04'; i=$((i + 1)); done;;\n"
                      "  *) echo '| NVIDIA-SMI 580.159.04    Driver Version: 580.159.04    CUDA Version: 13.0     |';;\n"
                      "esac\n")
                  .arg(gpus);
  }
  if (!QDir().mkpath(dir) || !write_file(dir + "/nvidia-smi", script) ||
      !QFile::setPermissions(dir + "/nvidia-smi", QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner | QFile::ReadOther | QFile::ExeOther)) {
    fail("cannot write a stand-in nvidia-smi in " + dir);
    return {};
  }
  return dir;
}

bool SshLab::add_loopback_node(const QString& path_first) {
  auto n = std::make_unique<Node>();
  n->alias = "loop" + QString::number(nodes_.size());
  n->address = "127.0.0.1";
  n->path_first = path_first;
  n->port = free_port();
  nodes_.push_back(std::move(n));
  return start_sshd(*nodes_.back());
}

bool SshLab::add_netns_nodes(int count, bool sshd) {
  const QString net = QString("10.213.%1.").arg(subnet_);
  // Leftovers of an earlier run of this suite that was killed before it could clean up.
  for (int i = 0; i < 16; ++i) {
    const QString ns = QString("sc%1n%2").arg(subnet_).arg(i);
    sh("ip netns pids " + ns + " 2>/dev/null | xargs -r kill -9; ip netns del " + ns + " 2>/dev/null; ip link del " +
       QString("scv%1n%2").arg(subnet_).arg(i) + " 2>/dev/null");
  }
  sh("ip link del " + bridge_ + " 2>/dev/null");
  if (sh("ip link add " + bridge_ + " type bridge && ip addr add " + net + "1/24 dev " + bridge_ + " && ip link set " + bridge_ + " up") != 0) {
    return fail("cannot make the bridge " + bridge_);
  }
  for (int i = 0; i < count; ++i) {
    auto n = std::make_unique<Node>();
    n->alias = "node" + QString::number(i);
    n->address = net + QString::number(10 + i);
    n->netns = QString("sc%1n%2").arg(subnet_).arg(i);
    n->veth = QString("scv%1n%2").arg(subnet_).arg(i);
    QString out;
    const QString cmd = "ip netns add " + n->netns + " && ip link add " + n->veth + " type veth peer name eth0 netns " + n->netns +
                        " && ip link set " + n->veth + " master " + bridge_ + " up && ip -n " + n->netns + " addr add " +
                        n->address + "/24 dev eth0 && ip -n " + n->netns + " link set eth0 up && ip -n " + n->netns +
                        " link set lo up";
    nodes_.push_back(std::move(n));
    if (sh(cmd, &out) != 0) return fail("network namespace setup failed: " + out.trimmed());
    if (sshd && !start_sshd(*nodes_.back())) return false;
  }
  return true;
}

QList<int> SshLab::processes_of_run(const QString& run_id) {
  QList<int> pids;
  const QByteArray needle = "STAGECRAFT_RUN_ID=" + run_id.toUtf8();
  for (const QString& e : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool ok = false;
    const int pid = e.toInt(&ok);
    if (!ok) continue;
    QFile f("/proc/" + e + "/environ");
    if (!f.open(QIODevice::ReadOnly)) continue;
    for (const QByteArray& var : f.readAll().split('\0')) {
      if (var == needle) {
        pids << pid;
        break;
      }
    }
  }
  return pids;
}
