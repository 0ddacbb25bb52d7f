// ProcessIdentity: which process supervises a run, precisely enough to tell later whether that
// very process still exists on this machine.
//
// A pid alone is not enough: pids are reused, and a machine that rebooted has new processes
// under old numbers. The identity adds the process's start time (field 22 of /proc/PID/stat,
// clock ticks since boot), the boot id (/proc/sys/kernel/random/boot_id) and the host name.
// A recorded process is alive only when all of them match. Linux only (/proc).
// Every function is thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "stagecraft/core/status.h"

namespace stagecraft::store {

struct ProcessIdentity {
  int64_t pid = 0;          // 0: none recorded
  int64_t start_ticks = 0;  // 0: unknown (then only the pid is compared)
  std::string boot_id;      // empty: unknown
  std::string host;         // gethostname(); empty: unknown
};

// The calling process.
ProcessIdentity this_process_identity();
// Process `pid` on this machine, read from /proc. Fails with not_found when it does not exist.
Result<ProcessIdentity> process_identity(int64_t pid);

enum class Liveness {
  kAlive,      // the recorded process runs on this machine
  kGone,       // it is not running here any more (exited, pid reused, or the machine rebooted)
  kElsewhere,  // it was recorded on another host: this machine cannot tell
};

// Whether the recorded process still runs. `why` (optional) receives one line for kGone, e.g.
// "supervisor pid 4242 is gone" or "pid 4242 now belongs to another process".
Liveness check_liveness(const ProcessIdentity& recorded, std::string* why = nullptr);

}  // namespace stagecraft::store
