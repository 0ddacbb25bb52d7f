// Worker environment. See worker_env.h.
#include "stagecraft/launch/worker_env.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

namespace stagecraft::launch {

std::map<std::string, std::string> to_environment(const WorkerEnv& e) {
  std::map<std::string, std::string> m = {
      {"RANK", std::to_string(e.rank)},
      {"LOCAL_RANK", std::to_string(e.local_rank)},
      {"WORLD_SIZE", std::to_string(e.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(e.local_world_size)},
      {"GROUP_RANK", std::to_string(e.group_rank)},
      {"MASTER_ADDR", e.master_addr},
      {"MASTER_PORT", std::to_string(e.master_port)},
      {"STAGECRAFT_RUN_ID", e.run_id},
      {"STAGECRAFT_RUN_TOKEN", e.token},
      {"OMP_NUM_THREADS", std::to_string(e.threads)},
      {"OPENBLAS_NUM_THREADS", std::to_string(e.threads)},
  };
  if (e.token.empty()) m.erase("STAGECRAFT_RUN_TOKEN");  // another program's run has no store
  if (!e.cuda_visible_devices.empty()) m["CUDA_VISIBLE_DEVICES"] = e.cuda_visible_devices;
  return m;
}

namespace {

Status read_int(const std::function<const char*(const char*)>& get, const char* name, int& out, int lo, int hi, bool required) {
  const char* v = get(name);
  if (!v || !*v) {
    return required ? Status::invalid_input(std::string(name) + " is not set; stagecraft-worker is started by `stagecraft-cli run` "
                                                                "(or any torchrun-style launcher)")
                    : Status::OK();
  }
  int x = 0;
  const char* end = v + std::char_traits<char>::length(v);
  auto [p, ec] = std::from_chars(v, end, x);
  if (ec != std::errc() || p != end || x < lo || x > hi) {
    return Status::invalid_input(std::string(name) + "=" + v + ": expected a whole number from " + std::to_string(lo) + " to " +
                                 std::to_string(hi));
  }
  out = x;
  return Status::OK();
}

}  // namespace

namespace {

// The entries of a Slurm host list, split at the commas outside brackets ("n[1,3],g1" -> "n[1,3]",
// "g1"; "" -> ""); `balanced` says whether every bracket closed.
std::vector<std::string> nodelist_entries(const std::string& nodelist, bool* balanced = nullptr) {
  std::vector<std::string> entries;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= nodelist.size(); ++i) {
    const char c = i < nodelist.size() ? nodelist[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      entries.push_back(nodelist.substr(start, i - start));
      start = i + 1;
    }
  }
  if (balanced) *balanced = depth == 0;
  if (depth != 0) entries.push_back(nodelist.substr(start));  // the rest, inside an unclosed bracket
  return entries;
}

}  // namespace

std::string first_host_of_nodelist(const std::string& nodelist) {
  const std::string entry = nodelist_entries(nodelist).front();
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  const size_t close = entry.find(']', open);
  if (close == std::string::npos) return entry;
  // The first range's first number, zero padding kept: "node[03-05,9]" -> "node03".
  std::string range = entry.substr(open + 1, close - open - 1);
  range = range.substr(0, range.find_first_of(",-"));
  return entry.substr(0, open) + range + entry.substr(close + 1);
}

namespace {

// Appends the hosts of one entry ("n[1-3]-ib[0,2]") to `out`; false when it does not read or
// `out` would pass `limit`.
bool expand_entry(const std::string& entry, std::vector<std::string>& out, size_t limit) {
  const size_t open = entry.find('[');
  if (open == std::string::npos) {
    if (entry.empty() || entry.find(']') != std::string::npos || out.size() >= limit) return false;
    out.push_back(entry);
    return true;
  }
  const size_t close = entry.find(']', open);
  if (close == std::string::npos) return false;
  const std::string head = entry.substr(0, open), tail = entry.substr(close + 1);
  size_t at = open + 1;
  while (at < close) {
    size_t comma = entry.find(',', at);
    if (comma == std::string::npos || comma > close) comma = close;
    const std::string part = entry.substr(at, comma - at);
    const size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    unsigned long a = 0, b = 0;
    auto ra = std::from_chars(lo.data(), lo.data() + lo.size(), a);
    auto rb = std::from_chars(hi.data(), hi.data() + hi.size(), b);
    if (lo.empty() || hi.empty() || ra.ec != std::errc() || ra.ptr != lo.data() + lo.size() || rb.ec != std::errc() ||
        rb.ptr != hi.data() + hi.size() || b < a || b - a > limit) {
      return false;
    }
    for (unsigned long n = a; n <= b; ++n) {
      std::string num = std::to_string(n);
      if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // node[03-05]: the padding of the first
      if (!expand_entry(head + num + tail, out, limit)) return false;
    }
    at = comma + 1;
  }
  return true;
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& nodelist, size_t limit) {
  bool balanced = false;
  const auto entries = nodelist_entries(nodelist, &balanced);
  if (!balanced) return {};
  std::vector<std::string> out;
  for (const auto& entry : entries) {
    if (!expand_entry(entry, out, limit)) return {};
  }
  return out;
}

std::map<std::string, std::string> torchrun_from_slurm(const std::function<const char*(const char*)>& get) {
  std::map<std::string, std::string> m;
  const auto value = [&](const char* name) -> std::string {
    const char* v = get(name);
    return v ? v : "";
  };
  if (value("SLURM_PROCID").empty()) return m;
  const auto put = [&](const char* key, const std::string& v) {
    if (!v.empty()) m[key] = v;
  };
  put("RANK", value("SLURM_PROCID"));
  put("WORLD_SIZE", value("SLURM_NTASKS").empty() ? value("SLURM_NPROCS") : value("SLURM_NTASKS"));
  put("LOCAL_RANK", value("SLURM_LOCALID"));
  put("GROUP_RANK", value("SLURM_NODEID"));
  // SLURM_NTASKS_PER_NODE is a plain number when the job asked for --ntasks-per-node.
  std::string per_node = value("SLURM_NTASKS_PER_NODE");
  int n = 0;
  const auto number = [](const std::string& s, int& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && out > 0;
  };
  if (!number(per_node, n)) {
    int world = 0, nodes = 0;
    const std::string node_count = value("SLURM_JOB_NUM_NODES").empty() ? value("SLURM_NNODES") : value("SLURM_JOB_NUM_NODES");
    per_node = number(m.count("WORLD_SIZE") ? m["WORLD_SIZE"] : "", world) && number(node_count, nodes) && world % nodes == 0
                   ? std::to_string(world / nodes)
                   : "";
  }
  put("LOCAL_WORLD_SIZE", per_node);
  const std::string nodelist = value("SLURM_JOB_NODELIST").empty() ? value("SLURM_NODELIST") : value("SLURM_JOB_NODELIST");
  put("MASTER_ADDR", first_host_of_nodelist(nodelist));
  put("OMP_NUM_THREADS", value("SLURM_CPUS_PER_TASK").empty() ? "1" : value("SLURM_CPUS_PER_TASK"));
  return m;
}

Result<WorkerEnv> read_worker_env(const std::function<const char*(const char*)>& get_in) {
  const std::function<const char*(const char*)> base = get_in ? get_in : [](const char* n) { return std::getenv(n); };
  // Under srun without a launcher's RANK: Slurm's variables, each explicit one still winning.
  std::map<std::string, std::string> slurm;
  if (!base("RANK")) slurm = torchrun_from_slurm(base);
  const std::function<const char*(const char*)> get = [&](const char* name) -> const char* {
    if (const char* v = base(name); v && *v) return v;
    auto it = slurm.find(name);
    return it == slurm.end() ? nullptr : it->second.c_str();
  };
  WorkerEnv e;
  constexpr int kMax = 1 << 20;
  if (Status s = read_int(get, "WORLD_SIZE", e.world_size, 1, kMax, true); !s) return s;
  if (Status s = read_int(get, "RANK", e.rank, 0, e.world_size - 1, true); !s) return s;
  e.local_world_size = e.world_size;
  if (Status s = read_int(get, "LOCAL_WORLD_SIZE", e.local_world_size, 1, e.world_size, false); !s) return s;
  e.local_rank = e.rank % e.local_world_size;
  if (Status s = read_int(get, "LOCAL_RANK", e.local_rank, 0, e.local_world_size - 1, false); !s) return s;
  e.group_rank = e.rank / e.local_world_size;
  if (Status s = read_int(get, "GROUP_RANK", e.group_rank, 0, kMax, false); !s) return s;
  if (Status s = read_int(get, "MASTER_PORT", e.master_port, 1, 65535, true); !s) return s;
  if (const char* a = get("MASTER_ADDR"); a && *a) e.master_addr = a;
  if (const char* id = get("STAGECRAFT_RUN_ID")) e.run_id = id;
  if (const char* t = get("STAGECRAFT_RUN_TOKEN")) e.token = t;
  e.threads = 1;
  if (Status s = read_int(get, "OMP_NUM_THREADS", e.threads, 1, 4096, false); !s) return s;
  if (const char* c = get("CUDA_VISIBLE_DEVICES")) e.cuda_visible_devices = c;  // the CUDA runtime reads it
  return e;
}

Result<int> gpu_of_rank(const WorkerEnv& e, int visible, bool nccl) {
  const std::string shown = e.cuda_visible_devices.empty() ? "" : " (CUDA_VISIBLE_DEVICES=" + e.cuda_visible_devices + ")";
  if (visible <= 0) {
    return Status::unavailable("backend=cuda: rank " + std::to_string(e.rank) + " sees no GPU" + shown +
                               "; check nvidia-smi and CUDA_VISIBLE_DEVICES on its host");
  }
  if (nccl && visible > 1 && e.local_world_size > visible) {
    return Status::invalid_input("comm=nccl: LOCAL_WORLD_SIZE=" + std::to_string(e.local_world_size) + " ranks on this node, but rank " +
                                 std::to_string(e.rank) + " sees " + std::to_string(visible) + " GPUs" + shown +
                                 ", and NCCL needs a GPU per rank; start at most " + std::to_string(visible) +
                                 " ranks per node, or set comm: gloo to share GPUs (for testing)");
  }
  return e.local_rank % visible;
}

int threads_per_rank(int local_ranks) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / std::max(1, local_ranks));
}

std::string random_token(int bytes) {
  std::string out;
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  static const char* kHex = "0123456789abcdef";
  std::random_device fallback;
  for (int i = 0; i < bytes; ++i) {
    unsigned char b = 0;
    if (!urandom.read(reinterpret_cast<char*>(&b), 1)) b = static_cast<unsigned char>(fallback());
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace stagecraft::launch
