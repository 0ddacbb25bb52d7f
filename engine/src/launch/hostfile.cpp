// Hostfiles (DeepSpeed's format) and --include / --exclude selection. See hostfile.h.
#include "stagecraft/core/text.h"
#include "stagecraft/launch/hostfile.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "stagecraft/config/config_io.h"

namespace stagecraft::launch {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}


constexpr int kMinSlots = 1;
constexpr int kMaxSlots = 4096;

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A printable rendering of untrusted text for a message (control characters as '?', cut).
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (s.size() > 80) out += "...";
  return out;
}

// The one check of a host entry, whether it came from a hostfile line or from cluster.hosts:
// the name, slots within 1..4096, and no host twice (`seen`: host -> where it first came,
// "line 2" or "cluster.hosts[0]"). `slots_text` is the slots as written, for the message.
Status check_entry(std::string_view host, int slots, std::string_view slots_text, const std::string& here,
                   std::map<std::string, std::string>& seen) {
  if (Status s = check_host_name(host); !s) return s;
  if (slots < kMinSlots || slots > kMaxSlots) {
    return Status::invalid_input("slots=" + shown(slots_text) + ": expected a whole number from " + std::to_string(kMinSlots) +
                                 " to " + std::to_string(kMaxSlots));
  }
  const std::string name(host);
  if (auto it = seen.find(name); it != seen.end()) {
    return Status::invalid_input("host " + name + " is listed twice (first on " + it->second + "); remove one");
  }
  seen.emplace(name, here);
  return Status::OK();
}

}  // namespace

Status check_host_name(std::string_view host) {
  if (host.empty()) return Status::invalid_input("host name is empty");
  if (host.size() > 253) return Status::invalid_input("host `" + shown(host) + "`: longer than 253 characters");
  if (host.front() == '-' || host.front() == '.') {
    return Status::invalid_input("host `" + shown(host) + "`: a host name cannot start with '" + host.front() + "'");
  }
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!ok) {
      return Status::invalid_input("host `" + shown(host) + "`: character '" + shown(std::string_view(&c, 1)) +
                                   "' is not allowed; use a host name, an address or an ~/.ssh/config alias ([A-Za-z0-9._-])");
    }
  }
  return Status::OK();
}

Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, std::string_view origin) {
  std::vector<HostEntry> hosts;
  std::map<std::string, std::string> seen;
  int line_no = 0;
  for (std::string_view raw : split_fields(text, '\n')) {
    ++line_no;
    const std::string where = std::string(origin) + ":" + std::to_string(line_no) + ": ";
    std::string_view line = raw;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    std::vector<std::string_view> fields;
    for (std::string_view f : split_fields(line, ' ')) {
      for (std::string_view g : split_fields(f, '\t')) {
        if (!g.empty()) fields.push_back(g);
      }
    }
    if (fields.size() != 2 || fields[1].substr(0, 6) != "slots=") {
      return Status::invalid_input(where + "expected `HOST slots=N`, got `" + shown(line) + "`");
    }
    int slots = 0;
    const std::string_view slots_text = fields[1].substr(6);
    if (!parse_int(slots_text, slots)) slots = 0;  // out of range: refused below with the text as written
    if (Status s = check_entry(fields[0], slots, slots_text, "line " + std::to_string(line_no), seen); !s) {
      return Status::invalid_input(where + s.message());
    }
    const std::string name(fields[0]);
    hosts.push_back({name, slots, line_no});
  }
  if (hosts.empty()) {
    return Status::invalid_input(std::string(origin) + ": no hosts; add a line `HOST slots=N` for each machine");
  }
  return hosts;
}

Result<std::vector<HostEntry>> parse_hostfile_file(const std::string& path) {
  auto text = config::read_text_file(path);
  if (!text.ok()) return text.status();
  return parse_hostfile(text.value(), path);
}

Result<std::vector<HostEntry>> hosts_from_config(const std::vector<config::HostSlots>& hosts) {
  std::vector<HostEntry> out;
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string key = "cluster.hosts[" + std::to_string(i) + "]";
    const std::string slots_text = std::to_string(hosts[i].slots);
    if (Status s = check_entry(hosts[i].host, hosts[i].slots, slots_text, key, seen); !s) {
      return Status::invalid_input(key + ": " + s.message());
    }
    out.push_back({hosts[i].host, hosts[i].slots, 0});
  }
  if (out.empty()) return Status::invalid_input("cluster.hosts: no hosts; add {host: NAME, slots: N} for each machine");
  return out;
}

namespace {

// host -> slot ids named by a filter; an empty set means every slot.
using Filter = std::map<std::string, std::set<int>>;

Result<Filter> parse_filter(std::string_view text, const char* flag, const std::vector<HostEntry>& hosts) {
  Filter f;
  const std::string what = std::string(flag) + "=" + shown(text) + ": ";
  for (std::string_view part : split_fields(text, '@')) {
    part = trim(part);
    if (part.empty()) return Status::invalid_input(what + "empty host between '@'; write HOST or HOST:SLOT,SLOT joined by '@'");
    const size_t colon = part.find(':');
    const std::string host(part.substr(0, colon));
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const HostEntry& h) { return h.host == host; });
    if (it == hosts.end()) return Status::invalid_input(what + "host `" + shown(host) + "` is not in the hostfile");
    if (f.count(host)) return Status::invalid_input(what + "host " + host + " is named twice");
    std::set<int>& ids = f[host];
    if (colon == std::string_view::npos) continue;
    for (std::string_view id : split_fields(part.substr(colon + 1), ',')) {
      int slot = -1;
      if (!parse_int(trim(id), slot) || slot < 0 || slot >= it->slot_count) {
        return Status::invalid_input(what + "slot `" + shown(id) + "` of " + host + ": expected a number from 0 to " +
                                     std::to_string(it->slot_count - 1));
      }
      ids.insert(slot);
    }
  }
  return f;
}

}  // namespace

Result<std::vector<SelectedHost>> select_hosts(const std::vector<HostEntry>& hosts, std::string_view include,
                                               std::string_view exclude) {
  if (!include.empty() && !exclude.empty()) {
    return Status::invalid_input("--include and --exclude: give one of them, not both");
  }
  std::vector<SelectedHost> out;
  if (!include.empty()) {
    auto f = parse_filter(include, "--include", hosts);
    if (!f.ok()) return f.status();
    for (const auto& h : hosts) {
      auto it = f->find(h.host);
      if (it == f->end()) continue;
      SelectedHost s{h.host, {}};
      if (it->second.empty()) {
        for (int i = 0; i < h.slot_count; ++i) s.slot_ids.push_back(i);
      } else {
        s.slot_ids.assign(it->second.begin(), it->second.end());
      }
      out.push_back(std::move(s));
    }
  } else {
    Filter f;
    if (!exclude.empty()) {
      auto parsed = parse_filter(exclude, "--exclude", hosts);
      if (!parsed.ok()) return parsed.status();
      f = std::move(parsed).value();
    }
    for (const auto& h : hosts) {
      auto it = f.find(h.host);
      if (it != f.end() && it->second.empty()) continue;
      SelectedHost s{h.host, {}};
      for (int i = 0; i < h.slot_count; ++i) {
        if (it == f.end() || !it->second.count(i)) s.slot_ids.push_back(i);
      }
      if (!s.slot_ids.empty()) out.push_back(std::move(s));
    }
  }
  if (out.empty()) {
    return Status::invalid_input(std::string(include.empty() ? "--exclude=" + shown(exclude) : "--include=" + shown(include)) +
                                 ": no host is left; keep at least one");
  }
  return out;
}

Result<int> slots_per_node(const std::vector<SelectedHost>& hosts) {
  if (hosts.empty()) return Status::invalid_input("hosts: none selected");
  const auto& first = hosts.front();
  for (const auto& h : hosts) {
    if (h.slot_ids.size() != first.slot_ids.size()) {
      return Status::invalid_input("hosts: unequal slots (" + first.host + " " + std::to_string(first.slot_ids.size()) + ", " + h.host +
                                   " " + std::to_string(h.slot_ids.size()) +
                                   "); every node runs the same number of ranks: fix slots= or select equal slots with --include");
    }
  }
  return static_cast<int>(first.slot_ids.size());
}

Result<config::RunConfig> with_hosts(const config::RunConfig& config, const std::vector<SelectedHost>& hosts) {
  auto per_node = slots_per_node(hosts);
  if (!per_node.ok()) return per_node.status();
  config::RunConfig c = config;
  c.cluster.nodes = static_cast<int>(hosts.size());
  c.cluster.gpus_per_node = per_node.value();
  c.cluster.hosts.clear();
  for (const auto& h : hosts) c.cluster.hosts.push_back({h.host, per_node.value()});
  return c;
}

}  // namespace stagecraft::launch
