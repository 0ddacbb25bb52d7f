// Preflight: one pass over every host of a remote run, in parallel, before anything starts.
//
// For each host: reachable (TCP + SSH handshake), host key known, authenticated, the worker at
// the expected path with this build's version (`stagecraft-worker --version`) or another
// program (launch.program) and its Python interpreter present, and enough
// slots: cuda needs `nvidia-smi` to list at least `slots` GPUs (an error otherwise); cpu
// compares `nproc` with the slots (fewer cores than ranks is a warning: ranks share cores).
// Each host's problems read as one line each, naming the host and what to fix.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/ssh.h"

namespace stagecraft::launch {

struct PreflightOptions {
  SshOptions ssh;
  std::string worker_path;   // empty: default_worker_path(); not checked when check_worker is false
  bool check_worker = true;  // false when the run launches another program
  bool cuda = false;         // count GPUs (nvidia-smi) rather than cores
  // Another program (launch.program): checked present in `cwd` (empty: the SSH login's
  // directory) or, without a '/', in PATH; runnable, or readable when it runs under `python`
  // (a .py program), which is then checked in PATH. Empty: not checked.
  std::string program;
  std::string python;
  std::string cwd;
  double command_timeout_s = 20;
};

struct GpuInfo {
  std::string name;     // "NVIDIA H100 80GB HBM3"
  int memory_mib = -1;
  std::string driver;   // "580.159.04"
};

struct HostCheck {
  std::string host;
  ConnectReport connect;
  int cpus = -1;                 // nproc; -1 when not known
  int gpus = -1;                 // gpu_list's size (cuda only)
  std::vector<GpuInfo> gpu_list;  // nvidia-smi --query-gpu, one per GPU (cuda only)
  std::string cuda_version;       // the driver's CUDA version, as nvidia-smi prints it
  std::string worker_version;    // what --version printed
  std::vector<std::string> errors;    // one line each, starting with the host
  std::vector<std::string> warnings;  // likewise
  bool ok() const { return errors.empty(); }
};

// Every host at once; the result is in the order of `hosts`. Never fails as a whole.
std::vector<HostCheck> preflight(const std::vector<SelectedHost>& hosts, const PreflightOptions& options);

// The GPUs of the probe's `gpu=NAME, MEMORY_MIB, DRIVER` lines (nvidia-smi --query-gpu=name,
// memory.total,driver_version --format=csv,noheader,nounits); lines that do not parse are skipped.
std::vector<GpuInfo> parse_gpu_lines(const std::string& probe_output);
// "2 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 580.159.04, CUDA 13.0", or "" without GPUs.
std::string describe_gpus(const HostCheck& check);

// "stagecraft-worker 0.1.0": what a worker of this build prints for --version.
std::string expected_worker_version();

}  // namespace stagecraft::launch
