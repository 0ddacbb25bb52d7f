// RankProcess: one running rank of a run, wherever it runs, as the supervisor sees it; and
// LocalProcess, a child process on this machine.
//
// The supervisor (supervisor.h) waits on every rank's descriptors, drains their output, reaps
// them and terminates them. A remote rank (an SSH channel) implements the same interface, so the
// supervision policy is written once.
//
// Not thread-safe: one supervisor owns its processes.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::launch {

// How a rank ended.
struct ExitInfo {
  int code = 0;     // exit status when it exited
  int signal = 0;   // the signal that killed it, else 0
  bool ok() const { return code == 0 && signal == 0; }
  std::string describe() const;  // "exited with status 3", "killed by signal 9 (SIGKILL)"
};

class RankProcess {
 public:
  virtual ~RankProcess() = default;

  virtual int rank() const = 0;
  // Descriptors to wait on for output or exit; empty when the process must be polled.
  virtual std::vector<int> wait_fds() const = 0;
  // Appends whatever output is ready without blocking. Returns false once both streams ended.
  virtual bool read_available(std::string& out, std::string& err) = 0;
  // The exit, once the process ended (non-blocking).
  virtual std::optional<ExitInfo> poll_exit() = 0;
  // When it ended (Unix seconds), where the process can tell more precisely than when its exit
  // was seen (a Slurm task's exit file); 0 otherwise. The supervisor orders exits seen in the
  // same poll by it, so the rank that failed first is named.
  virtual double exit_time() const { return 0; }
  // Asks it to stop (SIGTERM), then forces it (SIGKILL). Both are safe after it ended.
  virtual void terminate() = 0;
  virtual void kill() = 0;
};

struct ProcessSpec {
  std::vector<std::string> argv;              // argv[0] is the program (PATH is searched)
  std::map<std::string, std::string> env;     // added to (and overriding) this process's environment
  std::string cwd;                            // empty: the current directory
  int rank = 0;
};

class LocalProcess final : public RankProcess {
 public:
  // Starts the child with stdout and stderr on pipes and stdin on /dev/null, in a process group
  // of its own (so terminate() reaches its children too). Fails with the program and the reason.
  static Result<std::unique_ptr<LocalProcess>> start(const ProcessSpec& spec);
  ~LocalProcess() override;  // kills and reaps a child still running

  int rank() const override { return rank_; }
  int pid() const { return pid_; }
  std::vector<int> wait_fds() const override;
  bool read_available(std::string& out, std::string& err) override;
  std::optional<ExitInfo> poll_exit() override;
  void terminate() override;
  void kill() override;

 private:
  LocalProcess() = default;
  int rank_ = 0;
  int pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::optional<ExitInfo> exit_;
};

}  // namespace stagecraft::launch
