// SshLab: real sshd "nodes" for the integration suites, and everything a client needs to reach
// them (a key pair, known_hosts, an ssh config with one alias per node).
//
// Nodes are either sshds on 127.0.0.1 at free ports (add_loopback_node) or sshds inside network
// namespaces the lab makes (add_netns_nodes): a bridge in the root namespace at 10.213.S.1/24
// and one namespace per node with a veth at 10.213.S.(10+i), sshd on port 22 there. S is the
// suite's own subnet byte, so suites can run side by side. Everything is removed when the lab
// is destroyed, whatever happened: sshds and every process left in a namespace are killed,
// namespaces, veths and the bridge deleted, the temp dir removed.
//
// Needs root (sshd, ip netns); can_run() says why not, for QSKIP.
#pragma once

#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

#include <memory>
#include <string>
#include <vector>

class SshLab {
 public:
  struct Node {
    QString alias;     // name in the ssh config ("loop0", "node1")
    QString address;   // 127.0.0.1 or 10.213.S.x
    int port = 22;
    QString netns;     // empty for loopback nodes
    QString path_first;  // a folder the node's sessions find programs in first (empty: none)
    QString veth;      // the root-namespace end of its link
    QString host_key;  // private host key file
    QString host_pub;  // "ssh-ed25519 AAAA..."
    std::unique_ptr<QProcess> sshd;
  };

  explicit SshLab(int subnet);
  ~SshLab();

  // Empty when this machine can run the lab, else why not (for QSKIP).
  static QString can_run(bool need_netns);

  bool ok() const { return error_.isEmpty(); }
  const QString& error() const { return error_; }

  // `path_first`: a folder put first in the PATH of the node's sessions (sshd's SetEnv), so that
  // a test can give one node programs the others lack (a stand-in nvidia-smi).
  bool add_loopback_node(const QString& path_first = {});
  // `count` namespaces on the bridge, each with sshd unless `sshd` is false (other suites run
  // their own daemons there, slurm_lab.h).
  bool add_netns_nodes(int count, bool sshd = true);
  // The bridge's address in the root namespace (10.213.S.1), once add_netns_nodes made it.
  QString bridge_address() const { return QString("10.213.%1.1").arg(subnet_); }

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  QString dir() const { return tmp_.path(); }
  QString ssh_config() const { return tmp_.path() + "/ssh_config"; }
  QString known_hosts() const { return tmp_.path() + "/known_hosts"; }
  QString client_key() const { return tmp_.path() + "/client_key"; }
  QString other_key() const { return tmp_.path() + "/other_key"; }  // never authorized

  // The known_hosts line for a node ("[127.0.0.1]:PORT ssh-ed25519 ..." or "10.213.S.x ...").
  QString known_hosts_line(const Node& n, const QString& pub) const;
  // Writes a known_hosts file with the given lines.
  bool write_file(const QString& path, const QString& text);
  // A folder (for add_loopback_node's path_first) holding a stand-in for NVIDIA's nvidia-smi that
  // lists `gpus` H100s, as the real one prints them for preflight's queries; with gpus < 0 it fails
  // as on a host whose driver is not loaded. Empty on failure (error() says why).
  QString stand_in_nvidia_smi(int gpus);
  // A fresh ed25519 public key line, unrelated to any node (for "changed key" cases).
  QString fresh_public_key();

  // Cuts a node's link (its veth down) or brings it back. Back up, every namespace forgets the
  // neighbours it failed to reach meanwhile (else connects fail with "No route to host" until
  // the kernel retries), and the call waits (bounded) for the link to carry traffic.
  bool cut_link(const Node& n);
  bool restore_link(const Node& n);

  // Runs a command line (our own fixed words) and returns its exit status; output to `out`.
  int sh(const QString& command, QString* out = nullptr);
  // Process ids whose environment holds STAGECRAFT_RUN_ID=run_id (any namespace).
  static QList<int> processes_of_run(const QString& run_id);

 private:
  bool fail(const QString& why);
  bool start_sshd(Node& n);
  bool write_client_files();

  int subnet_;
  QTemporaryDir tmp_;
  QString error_;
  QString bridge_;
  std::vector<std::unique_ptr<Node>> nodes_;
};
