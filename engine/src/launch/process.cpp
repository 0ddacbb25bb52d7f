// LocalProcess: fork/exec with pipes, non-blocking reads, reaping, process-group signals.
#include "stagecraft/launch/process.h"

#include <cerrno>
#include <csignal>
#include <cstring>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace stagecraft::launch {

std::string ExitInfo::describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return "killed by signal " + std::to_string(signal) + (name ? std::string(" (SIG") + name + ")" : std::string());
  }
  return "exited with status " + std::to_string(code);
}

Result<std::unique_ptr<LocalProcess>> LocalProcess::start(const ProcessSpec& spec) {
  if (spec.argv.empty()) return Status::invalid_input("launch: empty command line");
  int out[2], err[2], ready[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::io_error(std::string("launch: pipe: ") + std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::io_error(std::string("launch: pipe: ") + std::strerror(errno));
  }
  // The child reports an exec failure through a close-on-exec pipe: EOF means exec succeeded.
  if (pipe2(ready, O_CLOEXEC) != 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    return Status::io_error(std::string("launch: pipe: ") + std::strerror(errno));
  }
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (!spec.env.count(key)) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string path_env;
  for (const auto& s : env_strings) {
    if (s.rfind("PATH=", 0) == 0) path_env = s.substr(5);
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1], ready[0], ready[1]}) ::close(fd);
    return Status::io_error(std::string("launch: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    // A rank never outlives its supervisor: when the process that started it dies (even by
    // SIGKILL, where it cannot stop its ranks), the kernel kills the rank. The check after it
    // closes the window in which the supervisor died before the request was made.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    // Close-on-exec: dup2 gives fd 0 without the flag, the original must not reach the program.
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) {
      const int e = errno;
      (void)!write(ready[1], &e, sizeof e);
      _exit(127);
    }
    // execvpe searches the PATH of this process; the child's may differ, so search it by hand
    // when the program has no slash, as execvp does: an empty element is the current directory,
    // and a candidate that exists but cannot be run (EACCES) is the error reported when no
    // later candidate runs, rather than the last candidate's ENOENT.
    int search_errno = ENOENT;
    if (std::strchr(argv[0], '/') == nullptr && !path_env.empty()) {
      char candidate[4096];
      const size_t name_len = std::strlen(argv[0]);
      bool denied = false;
      const char* p = path_env.c_str();
      while (true) {
        const char* colon = std::strchr(p, ':');
        size_t len = colon ? static_cast<size_t>(colon - p) : std::strlen(p);
        const char* dir = p;
        if (len == 0) {
          dir = ".";
          len = 1;
        }
        if (len + 1 + name_len + 1 < sizeof candidate) {
          std::memcpy(candidate, dir, len);
          candidate[len] = '/';
          std::memcpy(candidate + len + 1, argv[0], name_len + 1);
          execve(candidate, argv.data(), envp.data());
          if (errno == EACCES) {
            denied = true;
          } else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT) {
            search_errno = errno;  // the file is there but cannot run (ENOEXEC, E2BIG, ...): stop, as execvp does
            break;
          }
        }
        if (!colon) break;
        p = colon + 1;
      }
      errno = denied && search_errno == ENOENT ? EACCES : search_errno;
    } else {
      execve(argv[0], argv.data(), envp.data());
    }
    const int e = errno;
    (void)!write(ready[1], &e, sizeof e);
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::close(ready[1]);
  setpgid(pid, pid);  // also from the parent, so signals reach the group even before the child runs
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(ready[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(ready[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    ::close(out[0]);
    ::close(err[0]);
    int st;
    waitpid(pid, &st, 0);
    return Status::invalid_input("launch: cannot start " + spec.argv[0] + ": " + std::strerror(child_errno));
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  std::unique_ptr<LocalProcess> p(new LocalProcess());
  p->rank_ = spec.rank;
  p->pid_ = pid;
  p->out_fd_ = out[0];
  p->err_fd_ = err[0];
  return p;
}

LocalProcess::~LocalProcess() {
  if (!exit_ && pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

std::vector<int> LocalProcess::wait_fds() const {
  std::vector<int> fds;
  if (out_fd_ >= 0) fds.push_back(out_fd_);
  if (err_fd_ >= 0) fds.push_back(err_fd_);
  return fds;
}

namespace {

// Drains a non-blocking descriptor; closes it (sets -1) at EOF or on error.
void drain(int& fd, std::string& sink) {
  if (fd < 0) return;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      sink.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(fd);
    fd = -1;
    return;
  }
}

}  // namespace

bool LocalProcess::read_available(std::string& out, std::string& err) {
  drain(out_fd_, out);
  drain(err_fd_, err);
  return out_fd_ >= 0 || err_fd_ >= 0;
}

std::optional<ExitInfo> LocalProcess::poll_exit() {
  if (exit_ || pid_ <= 0) return exit_;
  int st = 0;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    ExitInfo e;
    if (WIFEXITED(st)) e.code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) e.signal = WTERMSIG(st);
    exit_ = e;
  }
  return exit_;
}

void LocalProcess::terminate() {
  if (!exit_ && pid_ > 0) ::kill(-pid_, SIGTERM);
}

void LocalProcess::kill() {
  if (!exit_ && pid_ > 0) ::kill(-pid_, SIGKILL);
}

}  // namespace stagecraft::launch
