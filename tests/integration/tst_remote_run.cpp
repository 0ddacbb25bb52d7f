// Remote runs on "nodes" that are sshds inside network namespaces (ssh_lab.h): 2 nodes x 2 ranks
// of CPU training whose losses equal the local run's, a rank killed mid-run, a node's link cut,
// cancel. After every run no process of it may be left on any node.
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/local_run.h"
#include "stagecraft/launch/remote_run.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>  // after the engine's headers: Qt defines `slots`, a member name there

#include <csignal>
#include <map>

#include "ssh_lab.h"

using namespace stagecraft;
using namespace stagecraft::launch;

class TestRemoteRun : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<SshLab> lab_;

  config::RunConfig tiny(int steps, const QString& ckpt) {
    auto c = config::load_config_file(
        "configs/tiny-gpt.yaml",
        {"train.steps=" + std::to_string(steps), "train.warmup_steps=0", "train.hang_timeout_s=40",
         "train.checkpoint_dir=" + (lab_->dir() + "/" + ckpt).toStdString()});
    if (!c.ok()) qFatal("%s", c.status().message().c_str());
    return c.value();
  }

  RemoteRunOptions options(const std::string& run_id) {
    RemoteRunOptions o;
    o.ssh.config_file = lab_->ssh_config().toStdString();
    o.ssh.known_hosts_file = lab_->known_hosts().toStdString();
    o.hosts = {{"node0", {0, 1}}, {"node1", {0, 1}}};
    o.command = {std::string(STAGECRAFT_BIN_DIR) + "/stagecraft-worker"};
    o.run_id = run_id;
    o.grace_s = 2;
    o.kill_wait_s = 5;
    o.silence_kill_s = 4;  // a cut node's ranks end 4 s after the last heartbeat
    return o;
  }

  // Waits (bounded) until no process of the run is left anywhere.
  bool none_left(const QString& run_id, QList<int>* left) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 15000) {
      *left = SshLab::processes_of_run(run_id);
      if (left->isEmpty()) return true;
      QThread::msleep(100);
    }
    return false;
  }

  // Runs remotely; `on_step` is called with the supervisor on every rank-0 step event.
  Result<RunOutcome> run(const config::RunConfig& base, const RemoteRunOptions& o, std::map<int, double>* losses,
                         std::function<void(Supervisor&, int step)> on_step = nullptr) {
    auto c = with_hosts(base, o.hosts);
    if (!c.ok()) return c.status();
    auto plan = plan::make_plan(c.value());
    if (!plan.ok()) return plan.status();
    Supervisor* sup = nullptr;
    RunCallbacks cb;
    cb.on_event = [&](int rank, const WorkerEvent& e) {
      const auto* ev = std::get_if<StepEvent>(&e);
      if (!ev) return;
      const int step = static_cast<int>(ev->step);
      if (losses && rank == plan->topology.world_size() - 1) (*losses)[step] = ev->loss;
      if (on_step && rank == plan->topology.world_size() - 1) on_step(*sup, step);
    };
    return run_remote(c.value(), plan.value(), o, cb, [&](Supervisor& s) { sup = &s; });
  }

  // The pid of one rank of a run (its worker, not the wrapper).
  static int pid_of_rank(const QString& run_id, int rank) {
    for (int pid : SshLab::processes_of_run(run_id)) {
      QFile f(QString("/proc/%1/environ").arg(pid));
      if (!f.open(QIODevice::ReadOnly)) continue;
      const QList<QByteArray> vars = f.readAll().split('\0');
      QFile exe(QString("/proc/%1/comm").arg(pid));
      exe.open(QIODevice::ReadOnly);
      if (vars.contains("RANK=" + QByteArray::number(rank)) && exe.readAll().trimmed() == "stagecraft-work") return pid;
    }
    return -1;
  }

 private Q_SLOTS:
  void initTestCase() {
    if (const QString why = SshLab::can_run(true); !why.isEmpty()) QSKIP(qPrintable(why));
    QDir::setCurrent(STAGECRAFT_SOURCE_DIR);
    lab_ = std::make_unique<SshLab>(2);
    QVERIFY2(lab_->ok(), qPrintable(lab_->error()));
    QVERIFY2(lab_->add_netns_nodes(2), qPrintable(lab_->error()));
  }

  void cleanupTestCase() { lab_.reset(); }

  void losses_equal_local_run() {
    const int steps = 4;
    auto base = tiny(steps, "remote");
    std::map<int, double> remote;
    auto outcome = run(base, options("equal"), &remote);
    QVERIFY2(outcome.ok(), outcome.status().message().c_str());
    QVERIFY2(outcome->ok(), outcome->reason.c_str());
    QCOMPARE(static_cast<int>(remote.size()), steps);

    auto local_cfg = tiny(steps, "local");
    auto plan = plan::make_plan(local_cfg);
    QVERIFY(plan.ok());
    std::map<int, double> local;
    RunCallbacks cb;
    cb.on_event = [&](int rank, const WorkerEvent& e) {
      if (const auto* ev = std::get_if<StepEvent>(&e); ev && rank == 3) local[static_cast<int>(ev->step)] = ev->loss;
    };
    LocalRunOptions lo;
    lo.worker = {std::string(STAGECRAFT_BIN_DIR) + "/stagecraft-worker"};
    auto lout = run_local(local_cfg, plan.value(), lo, cb);
    QVERIFY2(lout.ok() && lout->ok(), lout.ok() ? lout->reason.c_str() : lout.status().message().c_str());
    QCOMPARE(static_cast<int>(local.size()), steps);
    // The same ranks, groups and data on both sides: the same arithmetic in the same order, so the
    // losses agree to the last bits (1e-6 leaves room only for printing and parsing).
    for (const auto& [step, loss] : local) {
      QVERIFY2(std::abs(remote[step] - loss) <= 1e-6 * std::abs(loss),
               qPrintable(QString("step %1: remote %2, local %3").arg(step).arg(remote[step], 0, 'g', 9).arg(loss, 0, 'g', 9)));
    }
    QList<int> left;
    QVERIFY2(none_left("equal", &left), qPrintable(QString("left: %1").arg(left.size())));
  }

  void killed_rank_fails_the_run() {
    bool killed = false;
    int victim = -1;
    auto outcome = run(tiny(2000, "killed"), options("killed"), nullptr, [&](Supervisor&, int step) {
      if (killed || step < 2) return;
      victim = pid_of_rank("killed", 3);
      if (victim > 0) ::kill(victim, SIGKILL);
      killed = true;
    });
    QVERIFY2(outcome.ok(), outcome.status().message().c_str());
    QVERIFY2(victim > 0, "rank 3's worker was not found");
    QCOMPARE(outcome->state, RunOutcome::State::kFailed);
    QVERIFY2(outcome->reason.find("rank ") == 0, outcome->reason.c_str());
    QCOMPARE(outcome->failed_rank, 3);
    QVERIFY2(outcome->reason.find("signal 9") != std::string::npos, outcome->reason.c_str());
    QList<int> left;
    QVERIFY2(none_left("killed", &left), qPrintable(QString("left: %1 processes").arg(left.size())));
  }

  void cut_link_fails_naming_the_node() {
    bool cut = false;
    const SshLab::Node& node1 = *lab_->nodes()[1];
    auto outcome = run(tiny(2000, "cut"), options("cut"), nullptr, [&](Supervisor&, int step) {
      if (cut || step < 2) return;
      cut = lab_->cut_link(node1);
    });
    // The link stays down while node1 is checked: nothing from the launcher can reach it, and
    // its sshd keeps OpenSSH's default (no ClientAliveInterval), so it never notices the silent
    // client. The wrappers hear no heartbeat and kill their groups.
    QList<int> left;
    const bool none = none_left("cut", &left);
    QVERIFY(lab_->restore_link(node1));
    QVERIFY2(outcome.ok(), outcome.status().message().c_str());
    QVERIFY(cut);
    QCOMPARE(outcome->state, RunOutcome::State::kFailed);
    QVERIFY2(outcome->reason.find("lost the SSH connection to node 1 (node1)") != std::string::npos, outcome->reason.c_str());
    // One clean line: the host named once, the reason after it, no line break inside.
    QVERIFY2(outcome->reason.find("(node1): node1") == std::string::npos, outcome->reason.c_str());
    QVERIFY2(outcome->reason.find('\n') == std::string::npos, outcome->reason.c_str());
    QVERIFY2(none, qPrintable(QString("left: %1 processes").arg(left.size())));
  }

  void cancel_stops_every_rank() {
    auto outcome = run(tiny(2000, "cancel"), options("cancel"), nullptr, [&](Supervisor& s, int step) {
      if (step == 2) s.cancel();
    });
    QVERIFY2(outcome.ok(), outcome.status().message().c_str());
    QVERIFY2(outcome->state == RunOutcome::State::kCancelled, outcome->reason.c_str());
    QList<int> left;
    QVERIFY2(none_left("cancel", &left), qPrintable(QString("left: %1 processes").arg(left.size())));
  }
};

QTEST_APPLESS_MAIN(TestRemoteRun)
#include "tst_remote_run.moc"
