// Hostfiles and host selection: which machines a remote run uses and how many ranks each takes.
//
// The format is DeepSpeed's: one host per line as `NAME slots=N`, `#` starts a comment, blank
// lines are skipped. A name is a host name, an address or an alias of ~/.ssh/config (set the
// user and port there); it is never given to a shell (ssh.h quotes everything), but names are
// limited to [A-Za-z0-9._-] ('@' and ':' separate hosts and slots in the filters), so a typo or
// an attack is refused at the line it is on.
//
// Selection follows DeepSpeed's --include / --exclude syntax: `host1@host2:0,2` names every
// slot of host1 and slots 0 and 2 of host2; --include keeps only what it names, --exclude
// removes it. The selected hosts define the cluster: nodes = hosts (hostfile order), ranks per
// node = selected slots, which must be equal on every host. Slot ids are kept, so a cuda run
// puts local rank i on the device of its i-th selected slot.
//
// Pure functions over values; no I/O except parse_hostfile_file().
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"

namespace stagecraft::launch {

struct HostEntry {
  std::string host;
  int slot_count = 0;
  int line = 0;  // where it was read (0 when it came from elsewhere, e.g. cluster.hosts)
};

// One selected host: its name and the slot ids (0-based, ascending) it runs ranks on.
struct SelectedHost {
  std::string host;
  std::vector<int> slot_ids;
  bool operator==(const SelectedHost&) const = default;
};

// `origin` names the text in messages ("hosts.txt"). Errors name origin:line and the fix:
//   "hosts.txt:3: expected `HOST slots=N`, got `node-a slots`"
//   "hosts.txt:5: host node-a is listed twice (first on line 2); remove one"
Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, std::string_view origin);
Result<std::vector<HostEntry>> parse_hostfile_file(const std::string& path);

// Hosts of a config's cluster.hosts, checked by the same check as a hostfile's lines (name,
// slots from 1 to 4096, no host twice), with the same messages after "cluster.hosts[i]: ":
//   "cluster.hosts[1]: slots=2000000000: expected a whole number from 1 to 4096"
//   "cluster.hosts[2]: host a is listed twice (first on cluster.hosts[0]); remove one"
Result<std::vector<HostEntry>> hosts_from_config(const std::vector<config::HostSlots>& hosts);

// Fails with one line naming the host when it holds a character outside [A-Za-z0-9._-], is
// empty, or starts with '-' or '.'.
Status check_host_name(std::string_view host);

// Applies --include / --exclude (either may be empty; both at once is refused, as DeepSpeed
// does). Errors name the filter and the fix: an unknown host, a slot id out of range, a filter
// that leaves no host.
Result<std::vector<SelectedHost>> select_hosts(const std::vector<HostEntry>& hosts, std::string_view include,
                                               std::string_view exclude);

// Ranks per node of the selection; fails naming two hosts whose slot counts differ.
Result<int> slots_per_node(const std::vector<SelectedHost>& hosts);

// The config with the selection as its cluster: nodes, gpus_per_node and hosts replaced.
Result<config::RunConfig> with_hosts(const config::RunConfig& config, const std::vector<SelectedHost>& hosts);

}  // namespace stagecraft::launch
