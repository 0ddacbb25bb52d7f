// Preflight checks of the hosts of a remote run. See preflight.h.
#include "stagecraft/launch/preflight.h"

#include <algorithm>
#include <thread>

#include "stagecraft/launch/local_run.h"
#include "stagecraft/launch/program.h"

namespace stagecraft::launch {

namespace {

// Prints key=value lines: nproc, worker (version, or MISSING / NOT-EXECUTABLE); with cuda one
// gpu=NAME, MEMORY_MIB, DRIVER per GPU and cuda (the driver's CUDA version), or smi=MISSING (no
// nvidia-smi in PATH) or smi=FAILED and the first line nvidia-smi printed (no driver loaded, ...);
// program and python (OK, MISSING, NOT-EXECUTABLE, NOT-READABLE, NO-DIRECTORY).
// Arguments: WORKER_PATH CHECK_WORKER(0/1) CUDA(0/1) PROGRAM PYTHON CWD (the last three may be
// empty: PROGRAM empty is not checked; PYTHON set means PROGRAM is read, not run, by it).
constexpr const char* kProbe = R"SH(printf 'nproc=%s\n' "$(nproc 2>/dev/null || echo -1)"
if [ "$2" = 1 ]; then
  if [ ! -e "$1" ]; then echo 'worker=MISSING'
  elif [ ! -x "$1" ]; then echo 'worker=NOT-EXECUTABLE'
  else printf 'worker=%s\n' "$("$1" --version 2>&1 | head -n 1)"; fi
fi
if [ "$3" = 1 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then echo 'smi=MISSING'
  elif gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits 2>/dev/null); then
    printf '%s\n' "$gpus" | sed 's/^/gpu=/'
    printf 'cuda=%s\n' "$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)"
  else printf 'smi=FAILED %s\n' "$(nvidia-smi 2>&1 | grep -v '^ *$' | head -n 1 | cut -c 1-200)"; fi
fi
if [ -n "$4" ]; then
  if [ -n "$6" ] && ! cd -- "$6" 2>/dev/null; then echo 'program=NO-DIRECTORY'
  else
    case "$4" in
      */*) if [ ! -e "$4" ]; then echo 'program=MISSING'
           elif [ -n "$5" ] && [ ! -r "$4" ]; then echo 'program=NOT-READABLE'
           elif [ -z "$5" ] && [ ! -x "$4" ]; then echo 'program=NOT-EXECUTABLE'
           else echo 'program=OK'; fi;;
      *) if [ -n "$5" ]; then if [ -r "$4" ]; then echo 'program=OK'; else echo 'program=MISSING'; fi
         elif command -v -- "$4" >/dev/null 2>&1; then echo 'program=OK'; else echo 'program=MISSING'; fi;;
    esac
    if [ -n "$5" ]; then if command -v -- "$5" >/dev/null 2>&1; then echo 'python=OK'; else echo 'python=MISSING'; fi; fi
  fi
fi)SH";

std::string field(const std::string& out, const std::string& key) {
  const std::string k = key + "=";
  size_t at = 0;
  while (at < out.size()) {
    const size_t nl = out.find('\n', at);
    const std::string line = out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (line.rfind(k, 0) == 0) return line.substr(k.size());
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return "";
}

int to_int(const std::string& s) {
  try {
    return s.empty() ? -1 : std::stoi(s);
  } catch (...) {
    return -1;
  }
}

HostCheck check_host(const SelectedHost& h, const PreflightOptions& o, const std::string& worker) {
  HostCheck c;
  c.host = h.host;
  const int slots = static_cast<int>(h.slot_ids.size());
  auto session = SshSession::connect(h.host, o.ssh, &c.connect);
  if (!session.ok()) {
    c.errors.push_back(session.status().message());
    return c;
  }
  auto cmd = shell_command({"sh", "-c", kProbe, "stagecraft-preflight", worker, o.check_worker ? "1" : "0", o.cuda ? "1" : "0",
                            o.program, o.program.empty() ? "" : o.python, o.program.empty() ? "" : o.cwd});
  if (!cmd.ok()) {
    c.errors.push_back(h.host + ": " + cmd.status().message());
    return c;
  }
  auto r = session.value()->run(cmd.value(), o.command_timeout_s);
  if (!r.ok()) {
    c.errors.push_back(r.status().message());
    return c;
  }
  c.cpus = to_int(field(r->out, "nproc"));
  if (o.check_worker) {
    c.worker_version = field(r->out, "worker");
    const std::string want = expected_worker_version();
    if (c.worker_version == "MISSING") {
      c.errors.push_back(h.host + ": no worker at " + worker + "; install Stagecraft there at the same path or give --worker");
    } else if (c.worker_version == "NOT-EXECUTABLE") {
      c.errors.push_back(h.host + ": " + worker + " is not executable; chmod +x it");
    } else if (c.worker_version != want) {
      c.errors.push_back(h.host + ": " + worker + " --version says `" + c.worker_version.substr(0, 100) + "`, expected `" + want +
                         "`; install the same Stagecraft version on every host");
    }
  }
  if (!o.program.empty()) {
    for (auto& e : program_probe_errors(r->out, o, h.host)) c.errors.push_back(std::move(e));
  }
  if (o.cuda) {
    c.gpu_list = parse_gpu_lines(r->out);
    c.gpus = static_cast<int>(c.gpu_list.size());
    c.cuda_version = field(r->out, "cuda");
    const std::string smi = field(r->out, "smi");
    const int top = h.slot_ids.empty() ? -1 : *std::max_element(h.slot_ids.begin(), h.slot_ids.end());
    if (smi == "MISSING") {
      c.errors.push_back(h.host + ": no nvidia-smi in PATH there, so no NVIDIA driver to train on; install the driver on that host, "
                         "or set backend: cpu");
    } else if (smi.rfind("FAILED", 0) == 0) {
      const std::string said = smi.size() > 7 ? smi.substr(7) : "no output";
      c.errors.push_back(h.host + ": nvidia-smi failed there (" + said + "); fix that host's NVIDIA driver, or set backend: cpu");
    } else if (c.gpus == 0) {
      c.errors.push_back(h.host + ": nvidia-smi lists no GPU there; run on hosts with GPUs, or set backend: cpu");
    } else if (c.gpus < slots) {
      c.errors.push_back(h.host + ": " + std::to_string(slots) + " slots selected but nvidia-smi lists " + std::to_string(c.gpus) +
                         " GPUs; give the host at most " + std::to_string(c.gpus) + " slots (hostfile or cluster.hosts)");
    } else if (top >= c.gpus) {
      // A rank runs on the GPU of its slot's number (CUDA_VISIBLE_DEVICES=slot, remote_run.cpp).
      c.errors.push_back(h.host + ": slot " + std::to_string(top) + " is selected but nvidia-smi lists " + std::to_string(c.gpus) +
                         " GPUs (0-" + std::to_string(c.gpus - 1) + "); select slots below " + std::to_string(c.gpus) +
                         " (--include / --exclude)");
    }
  } else if (c.cpus >= 0 && c.cpus < slots) {
    c.warnings.push_back(h.host + ": " + std::to_string(slots) + " ranks on " + std::to_string(c.cpus) +
                         " cores; ranks will share cores and run slower");
  }
  return c;
}

}  // namespace

PreflightOptions preflight_options(const config::RunConfig& config, PreflightOptions base, const std::string& cwd) {
  base.cuda = config.backend == config::Backend::kCuda;
  if (config.launch.foreign()) {
    base.check_worker = false;
    base.program = config.launch.program;
    base.python = is_python_program(config.launch.program) ? config.launch.python : "";
    base.cwd = cwd;
  }
  return base;
}

std::vector<std::string> program_probe_argv(const PreflightOptions& o) {
  return {"sh", "-c", kProbe, "stagecraft-preflight", "", "0", "0", o.program, o.program.empty() ? "" : o.python, o.program.empty() ? "" : o.cwd};
}

std::vector<std::string> program_probe_errors(const std::string& out, const PreflightOptions& o, const std::string& where_run) {
  std::vector<std::string> errors;
  const std::string where = o.cwd.empty() ? "" : " in " + o.cwd;
  const std::string program = field(out, "program");
  if (program == "NO-DIRECTORY") {
    errors.push_back(where_run + ": no directory " + o.cwd + " to run " + o.program + " in; nodes need this machine's directories");
  } else if (program == "MISSING") {
    errors.push_back(where_run + ": no program " + o.program + where + (o.program.find('/') == std::string::npos && o.python.empty() ? " or in PATH" : "") +
                     "; copy it there or fix --worker / launch.program");
  } else if (program == "NOT-EXECUTABLE") {
    errors.push_back(where_run + ": " + o.program + where + " is not executable; chmod +x it");
  } else if (program == "NOT-READABLE") {
    errors.push_back(where_run + ": " + o.program + where + " cannot be read; fix its permissions");
  } else if (program != "OK") {
    errors.push_back(where_run + ": could not check " + o.program + " there");
  }
  if (!o.python.empty() && program != "NO-DIRECTORY" && field(out, "python") != "OK") {
    errors.push_back(where_run + ": no " + o.python + " in PATH to run " + o.program + "; install it or set launch.python");
  }
  return errors;
}

std::vector<GpuInfo> parse_gpu_lines(const std::string& out) {
  std::vector<GpuInfo> gpus;
  size_t at = 0;
  while (at < out.size()) {
    const size_t nl = out.find('\n', at);
    const std::string line = out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? out.size() : nl + 1;
    if (line.rfind("gpu=", 0) != 0) continue;
    // "gpu=NAME, MEMORY_MIB, DRIVER": the name may hold commas, the last two fields do not.
    const std::string rest = line.substr(4);
    const size_t c2 = rest.rfind(',');
    const size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : rest.rfind(',', c2 - 1);
    if (c1 == std::string::npos) continue;
    auto trim = [](std::string v) {
      const size_t b = v.find_first_not_of(" \t\r"), e = v.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
    };
    GpuInfo g;
    g.name = trim(rest.substr(0, c1));
    g.memory_mib = to_int(trim(rest.substr(c1 + 1, c2 - c1 - 1)));
    g.driver = trim(rest.substr(c2 + 1));
    if (!g.name.empty()) gpus.push_back(std::move(g));
  }
  return gpus;
}

std::string describe_gpus(const HostCheck& c) {
  if (c.gpu_list.empty()) return "";
  // "8 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 580.159.04, CUDA 13.0"; mixed models listed.
  std::vector<std::pair<std::string, int>> kinds;  // name (memory), count
  for (const auto& g : c.gpu_list) {
    const std::string k = g.name + " (" + std::to_string(g.memory_mib) + " MiB)";
    if (!kinds.empty() && kinds.back().first == k) {
      ++kinds.back().second;
    } else {
      kinds.emplace_back(k, 1);
    }
  }
  std::string s;
  for (const auto& [k, n] : kinds) s += (s.empty() ? "" : ", ") + std::to_string(n) + " x " + k;
  s += ", driver " + c.gpu_list.front().driver;
  if (!c.cuda_version.empty()) s += ", CUDA " + c.cuda_version;
  return s;
}

std::string expected_worker_version() { return std::string("stagecraft-worker ") + STAGECRAFT_VERSION; }

std::vector<HostCheck> preflight(const std::vector<SelectedHost>& hosts, const PreflightOptions& options) {
  const std::string worker = options.worker_path.empty() ? default_worker_path() : options.worker_path;
  std::vector<HostCheck> out(hosts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < hosts.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = check_host(hosts[i], options, worker); });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace stagecraft::launch
