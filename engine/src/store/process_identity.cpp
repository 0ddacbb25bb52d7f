// Process identity from /proc. See process_identity.h.
#include "stagecraft/store/process_identity.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace stagecraft::store {

namespace {

struct ProcStat {
  char state = '?';
  int64_t start_ticks = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ...". comm may hold spaces and ')',
// so fields are counted after the last ')'.
bool read_stat(int64_t pid, ProcStat& out) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return false;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  // Field 3 is the state; starttime is field 22, the 20th after the comm.
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3) out.state = field.empty() ? '?' : field[0];
    if (i == 22) {
      // Not a number (never seen from a real kernel): the start time is unknown (0).
      int64_t ticks = 0;
      const auto r = std::from_chars(field.data(), field.data() + field.size(), ticks);
      out.start_ticks = (r.ec == std::errc() && r.ptr == field.data() + field.size()) ? ticks : 0;
    }
  }
  return true;
}

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

}  // namespace

ProcessIdentity this_process_identity() {
  auto id = process_identity(::getpid());
  if (id.ok()) return id.value();
  ProcessIdentity p;
  p.pid = ::getpid();
  p.boot_id = boot_id();
  p.host = host_name();
  return p;
}

Result<ProcessIdentity> process_identity(int64_t pid) {
  ProcStat st;
  if (pid <= 0 || !read_stat(pid, st)) return Status::not_found("process " + std::to_string(pid) + " does not exist");
  ProcessIdentity p;
  p.pid = pid;
  p.start_ticks = st.start_ticks;
  p.boot_id = boot_id();
  p.host = host_name();
  return p;
}

Liveness check_liveness(const ProcessIdentity& recorded, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return Liveness::kGone;
  };
  if (!recorded.host.empty() && recorded.host != host_name()) return Liveness::kElsewhere;
  if (recorded.pid <= 0) return say("no supervisor process was recorded");
  if (!recorded.boot_id.empty() && recorded.boot_id != boot_id()) {
    return say("the machine restarted since supervisor pid " + std::to_string(recorded.pid) + " began");
  }
  ProcStat st;
  if (!read_stat(recorded.pid, st)) return say("supervisor pid " + std::to_string(recorded.pid) + " is gone");
  // A zombie has ended; only its exit status waits to be collected.
  if (st.state == 'Z' || st.state == 'X') return say("supervisor pid " + std::to_string(recorded.pid) + " has ended");
  if (recorded.start_ticks != 0 && st.start_ticks != 0 && st.start_ticks != recorded.start_ticks) {
    return say("supervisor pid " + std::to_string(recorded.pid) + " is gone (the pid now belongs to another process)");
  }
  return Liveness::kAlive;
}

}  // namespace stagecraft::store
