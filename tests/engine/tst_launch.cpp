// Local processes and the supervisor: output, events, exits, fail-fast, hang, cancel, kill.
// Real child processes (/bin/sh) stand in for workers.
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/supervisor.h"

#include <QtTest>

#include <chrono>
#include <csignal>
#include <thread>

using namespace stagecraft;
using namespace stagecraft::launch;

namespace {

std::unique_ptr<RankProcess> sh(int rank, const std::string& script) {
  ProcessSpec spec;
  spec.rank = rank;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env["STAGECRAFT_TEST_RANK"] = std::to_string(rank);
  auto p = LocalProcess::start(spec);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return std::move(p).value();
}

struct Recorder {
  std::vector<std::pair<int, std::string>> events, logs;
  std::vector<std::pair<int, ExitInfo>> exits;
  RunCallbacks callbacks() {
    RunCallbacks c;
    c.on_event = [this](int rank, const Json& e) { events.emplace_back(rank, e.find("event")->as_string()); };
    c.on_log = [this](int rank, bool, const std::string& line) { logs.emplace_back(rank, line); };
    c.on_exit = [this](int rank, const ExitInfo& e) { exits.emplace_back(rank, e); };
    return c;
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

class TestLaunch : public QObject {
  Q_OBJECT

 private slots:
  void eventsLogsAndSuccess() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.push_back(sh(r, "echo '{\"event\":\"start\"}'; echo hello $STAGECRAFT_TEST_RANK; echo '{\"event\":\"step\",\"step\":1}';"
                            "echo warn >&2; printf 'no newline at the end'"));
    }
    Recorder rec;
    Supervisor s(std::move(ranks), {}, rec.callbacks());
    const RunOutcome o = s.run();
    QVERIFY(o.ok());
    QCOMPARE(o.exits.size(), size_t(3));
    QCOMPARE(rec.events.size(), size_t(6));
    QCOMPARE(rec.exits.size(), size_t(3));
    int hello = 0, tail = 0, warn = 0;
    for (const auto& [rank, line] : rec.logs) {
      hello += line == "hello " + std::to_string(rank);
      tail += line == "no newline at the end";
      warn += line == "warn";
    }
    QCOMPARE(hello, 3);
    QCOMPARE(tail, 3);  // a last line without newline still arrives
    QCOMPARE(warn, 3);
  }

  // Rank 1 fails; the others would sleep for minutes and one ignores SIGTERM: all end quickly.
  void firstFailureStopsEveryRank() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "sleep 300"));
    ranks.push_back(sh(1, "echo '{\"event\":\"start\"}'; sleep 0.2; echo 'cannot reach rank 2' >&2; exit 3"));
    ranks.push_back(sh(2, "trap '' TERM; sleep 300"));
    ranks.push_back(sh(3, "sleep 300 & wait"));  // a grandchild in the same process group
    Recorder rec;
    SuperviseOptions opt;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, rec.callbacks());
    const auto t0 = std::chrono::steady_clock::now();
    const RunOutcome o = s.run();
    QVERIFY(seconds_since(t0) < 5.0);
    QCOMPARE(o.state, RunOutcome::State::kFailed);
    QCOMPARE(o.failed_rank, 1);
    QCOMPARE(QString::fromStdString(o.reason), QString("rank 1 exited with status 3: cannot reach rank 2"));
    QCOMPARE(o.exits[1].code, 3);
    QCOMPARE(o.exits[0].signal, SIGTERM);
    QCOMPARE(o.exits[2].signal, SIGKILL);  // ignored TERM, killed after the grace period
    QCOMPARE(rec.exits.size(), size_t(4));
  }

  void errorEventNamesTheReason() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "echo '{\"event\":\"error\",\"message\":\"train.data=x.bin: cannot open\"}'; exit 2"));
    Supervisor s(std::move(ranks), {}, {});
    const RunOutcome o = s.run();
    QCOMPARE(QString::fromStdString(o.reason), QString("rank 0 exited with status 2: train.data=x.bin: cannot open"));
  }

  void signalDeathIsAFailure() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "kill -SEGV $$"));
    Supervisor s(std::move(ranks), {}, {});
    const RunOutcome o = s.run();
    QCOMPARE(o.state, RunOutcome::State::kFailed);
    QVERIFY2(QString::fromStdString(o.reason).contains("killed by signal 11 (SIGSEGV)"), o.reason.c_str());
  }

  void noProgressIsAHang() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "echo '{\"event\":\"start\"}'; echo still logging; sleep 300"));
    ranks.push_back(sh(1, "sleep 300"));
    SuperviseOptions opt;
    opt.hang_timeout_s = 0.5;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, {});
    const auto t0 = std::chrono::steady_clock::now();
    const RunOutcome o = s.run();
    QVERIFY(seconds_since(t0) < 4.0);
    QCOMPARE(o.state, RunOutcome::State::kHung);
    QVERIFY(QString::fromStdString(o.reason).contains("no progress"));
  }

  void cancelFromAnotherThread() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "sleep 300"));
    SuperviseOptions opt;
    opt.grace_s = 0.5;
    Supervisor s(std::move(ranks), opt, {});
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      s.cancel();
    });
    const RunOutcome o = s.run();
    t.join();
    QCOMPARE(o.state, RunOutcome::State::kCancelled);
  }

  void missingProgramIsAClearError() {
    ProcessSpec spec;
    spec.argv = {"stagecraft-no-such-program"};
    auto p = LocalProcess::start(spec);
    QVERIFY(!p.ok());
    QVERIFY2(QString::fromStdString(p.status().message()).contains("cannot start stagecraft-no-such-program"), p.status().message().c_str());
  }

  void hugeLinesAreCut() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done"));
    Recorder rec;
    SuperviseOptions opt;
    opt.max_line_bytes = 1 << 20;
    Supervisor s(std::move(ranks), opt, rec.callbacks());
    QVERIFY(s.run().ok());
    QVERIFY(rec.logs.size() >= 3);
    for (const auto& [rank, line] : rec.logs) QVERIFY(line.size() <= (1u << 20) + 16);
    QCOMPARE(QString::fromStdString(rec.logs.back().second), QString("done"));
  }
};

QTEST_APPLESS_MAIN(TestLaunch)
#include "tst_launch.moc"
