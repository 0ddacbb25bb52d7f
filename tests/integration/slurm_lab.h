// SlurmLab: a real Slurm cluster for the integration suites, made from Debian's packages and
// removed again when the lab is destroyed.
//
//   - munged with a key of its own, on a socket in the lab's directory;
//   - MariaDB (a data directory of its own, on 127.0.0.1 at a port of its own) and slurmdbd, so
//     that sacct answers as on a production cluster;
//   - slurmctld on the bridge address of an SshLab (ssh_lab.h: network namespaces on a bridge);
//   - two slurmd "nodes", one per namespace (Debian's slurmd is built without multiple-slurmd
//     support), each in a private mount namespace whose /etc/hosts names the nodes, so that a
//     node's name resolves to its namespace's address as on a real cluster;
//   - one partition `lab` of both nodes, 2 CPUs each (CR_CPU: 2 tasks per node);
//   - associations enforced: root may submit with account `lab` (its default) only.
// Scheduling: sched/backfill with sched_interval=1 and bf_interval=1 (seconds), KillWait=2,
// MinJobAge=600, proctrack/linuxproc and task/none (no cgroup set-up needed).
// SLURM_CONF is set in this process's environment, so every Slurm command this process and its
// children run (stagecraft-cli's sbatch, squeue, sacct, scancel) talks to the lab.
//
// Needs root, ip netns, unshare/nsenter and the Slurm, munge and MariaDB binaries; can_run()
// says which is missing.
#pragma once

#include <QProcess>
#include <QString>
#include <QTemporaryDir>

#include <functional>
#include <memory>
#include <vector>

#include "ssh_lab.h"

class SlurmLab {
 public:
  explicit SlurmLab(int subnet);
  ~SlurmLab();

  // Empty when this machine can run the lab, else why not.
  static QString can_run();

  // Starts every daemon and waits until both nodes are idle; false with error() otherwise.
  bool start();
  const QString& error() const { return error_; }

  QString dir() const { return tmp_.path(); }
  QString conf() const { return tmp_.path() + "/slurm.conf"; }
  QStringList node_names() const;
  // The controller's log, for a failing test's message.
  QString log_tail(const QString& file, int lines = 20);

  // Runs a Slurm command (sacct, squeue, sbatch) against the lab; its stdout (and stderr).
  int slurm(const QStringList& argv, QString* out = nullptr, QString* err = nullptr);
  // sacct's State of a job once it has ended ("COMPLETED", "CANCELLED by 0", ...); waits up to
  // timeout_ms for the accounting to have it.
  QString final_state(const QString& job_id, int timeout_ms = 30000);

 private:
  bool fail(const QString& why);
  bool write(const QString& name, const QString& text);
  bool daemon(std::unique_ptr<QProcess>& p, const QString& program, const QStringList& args, const QString& what);
  bool wait_for(const std::function<bool()>& ready, int timeout_ms, const QString& what);

  int subnet_;
  QTemporaryDir tmp_;
  QString error_;
  std::unique_ptr<SshLab> net_;
  std::unique_ptr<QProcess> munged_, mariadb_, slurmdbd_, slurmctld_;
  std::vector<std::unique_ptr<QProcess>> slurmds_;
};
