// Local processes and the supervisor: output, events, exits, fail-fast, hang, cancel, kill;
// the descriptors a child inherits and the PATH search.
// Real child processes (/bin/sh) stand in for workers.
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/supervisor.h"

#include <QtTest>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>

#include <fcntl.h>
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
    c.on_event = [this](int rank, const WorkerEvent& e) { events.emplace_back(rank, std::string(event_name(e))); };
    c.on_log = [this](int rank, bool, const std::string& line) { logs.emplace_back(rank, line); };
    c.on_exit = [this](int rank, const ExitInfo& e) { exits.emplace_back(rank, e); };
    return c;
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads a process's stdout to the end and waits for it (at most 10 s).
std::string drain_all(LocalProcess& p) {
  std::string out, err;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 10) {
    const bool open = p.read_available(out, err);
    if (!open && p.poll_exit()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
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

  // A line kept whole while it was short, then finished past the limit in one read (its newline
  // arriving in the same write as the bytes that push it over) is cut as well.
  void lineFinishedPastTheLimitIsCut() {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    ranks.push_back(sh(0, "head -c 900 /dev/zero | tr '\\0' x; sleep 0.3; printf '%s\\n' \"$(head -c 200 /dev/zero | tr '\\0' y)\"; echo done"));
    Recorder rec;
    SuperviseOptions opt;
    opt.max_line_bytes = 1000;
    Supervisor s(std::move(ranks), opt, rec.callbacks());
    QVERIFY(s.run().ok());
    QCOMPARE(int(rec.logs.size()), 2);
    const std::string& cut = rec.logs.front().second;
    QCOMPARE(cut.size(), size_t(1000 + std::string(" [line cut]").size()));
    QVERIFY(cut.size() >= 11 && cut.compare(cut.size() - 11, 11, " [line cut]") == 0);
    QCOMPARE(QString::fromStdString(rec.logs.back().second), QString("done"));
  }

  // The child holds its three standard descriptors and nothing the launcher opened for it (the
  // /dev/null it opens for stdin, the pipes): only what this test process itself lets every
  // child inherit (descriptors without close-on-exec) may be there too.
  void childInheritsNoLauncherDescriptor() {
    std::set<int> expected = {0, 1, 2};
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      const int fd = std::stoi(e.path().filename().string());
      const int flags = fcntl(fd, F_GETFD);
      if (fd > 2 && flags >= 0 && !(flags & FD_CLOEXEC)) expected.insert(fd);
    }
    ProcessSpec spec;
    spec.argv = {"sleep", "30"};  // start() returns once exec succeeded: its descriptors are final
    auto p = LocalProcess::start(spec);
    QVERIFY2(p.ok(), p.ok() ? "" : p.status().message().c_str());
    std::set<int> got;
    const std::string dir = "/proc/" + std::to_string(p.value()->pid()) + "/fd";
    for (const auto& e : std::filesystem::directory_iterator(dir)) got.insert(std::stoi(e.path().filename().string()));
    p.value()->kill();
    const auto render = [](const std::set<int>& fds) {
      QStringList l;
      for (int fd : fds) l << QString::number(fd);
      return l.join(' ');
    };
    QCOMPARE(render(got), render(expected));
  }

  // PATH is searched as execvp does, in the child's environment.
  void pathSearch_data() {
    QTest::addColumn<QString>("path");      // "@" stands for the scratch dir holding the runnable program, "#" for the one
                                            // holding a program without execute permission
    QTest::addColumn<QString>("expected");  // the program's output, or the expected error after "!"
    QTest::newRow("empty element first is the working directory") << ":/nonexistent-dir" << "here";
    QTest::newRow("empty element between") << "/nonexistent-dir::/usr/bin" << "here";
    QTest::newRow("empty element last") << "/nonexistent-dir:" << "here";
    QTest::newRow("found in a listed directory") << "/nonexistent-dir:@" << "there";
    QTest::newRow("not runnable, later missing: permission denied") << "#:/nonexistent-dir" << "!Permission denied";
    QTest::newRow("not runnable, later runnable: runs the later") << "#:@" << "there";
    QTest::newRow("missing everywhere") << "/nonexistent-dir:/nonexistent-too" << "!No such file or directory";
  }
  void pathSearch() {
    QFETCH(QString, path);
    QFETCH(QString, expected);
    QTemporaryDir cwd, runnable, denied;
    QVERIFY(cwd.isValid() && runnable.isValid() && denied.isValid());
    const auto write_program = [](const QString& file, const char* text, QFileDevice::Permissions perms) {
      QFile f(file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(text);
      f.close();
      QVERIFY(f.setPermissions(perms));
    };
    const auto rwx = QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner;
    write_program(cwd.filePath("sc-path-prog"), "#!/bin/sh\necho here\n", rwx);
    write_program(runnable.filePath("sc-path-prog"), "#!/bin/sh\necho there\n", rwx);
    write_program(denied.filePath("sc-path-prog"), "#!/bin/sh\necho denied\n", QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    path.replace('@', runnable.path()).replace('#', denied.path());
    ProcessSpec spec;
    spec.argv = {"sc-path-prog"};
    spec.cwd = cwd.path().toStdString();
    spec.env["PATH"] = path.toStdString();
    auto p = LocalProcess::start(spec);
    if (expected.startsWith('!')) {
      QVERIFY2(!p.ok(), "started a program it should not have");
      QVERIFY2(QString::fromStdString(p.status().message()).endsWith(expected.mid(1)), p.status().message().c_str());
      return;
    }
    QVERIFY2(p.ok(), p.ok() ? "" : p.status().message().c_str());
    QCOMPARE(QString::fromStdString(drain_all(*p.value())).trimmed(), expected);
  }
};

QTEST_APPLESS_MAIN(TestLaunch)
#include "tst_launch.moc"
