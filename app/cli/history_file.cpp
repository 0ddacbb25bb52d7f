// The CLI's side of a run's history. See history_file.h.
#include "history_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

#include "commands.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::cli {

std::string history_path(const std::string* db_option) {
  return db_option ? *db_option : store::RunStore::default_path();
}

Result<std::unique_ptr<store::RunStore>> open_history_to_read(const std::string* db_option) {
  const std::string path = history_path(db_option);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (db_option) return Status::not_found("--db " + path + ": no such file; give the run history `stagecraft-cli run --db` wrote");
    return std::unique_ptr<store::RunStore>();
  }
  store::StoreOptions o;
  o.create = false;
  return store::RunStore::open(path, o);
}

Result<config::RunConfig> load_run_config(const std::string& path, const std::vector<std::string>& overrides, const std::string* db_option) {
  auto cfg = config::load_config_file(path, overrides);
  if (!cfg.ok()) return cfg.status();
  if (config::pipeline_costs_run(cfg->pipeline) <= 0) return cfg;
  auto st = open_history_to_read(db_option);
  if (!st.ok()) return st.status();
  if (Status s = launch::resolve_pipeline_costs(cfg.value(), st.value().get()); !s) return s.with_context(path);
  return cfg;
}

int detach_supervisor(const std::string& db, int64_t id) {
  store::StoreOptions o;
  o.create = false;
  o.detect_lost = false;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = std::string("cannot start the background supervisor: ") + std::strerror(errno);
    if (auto st = store::RunStore::open(db, o); st.ok()) (void)st.value()->transition(id, store::RunState::kFailed, why);
    return report(Status::io_error("run --detach: " + why));
  }
  if (pid > 0) {
    // The child is recorded before this returns, so a `runs` command right after finds it alive.
    auto st = store::RunStore::open(db, o);
    if (!st.ok()) return report(st.status());
    auto who = store::process_identity(pid);
    if (who.ok()) {
      if (Status s = st.value()->set_supervisor(id, who.value()); !s) return report(s);
    }
    return 0;
  }
  ::setsid();
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(null_fd, STDERR_FILENO);
    if (null_fd > STDERR_FILENO) ::close(null_fd);
  }
  return -1;
}

}  // namespace stagecraft::cli
