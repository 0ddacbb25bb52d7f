// Preflight: one pass over every host of a remote run, in parallel, before anything starts.
//
// For each host: reachable (TCP + SSH handshake), host key known, authenticated, the worker at
// the expected path with this build's version (`stagecraft-worker --version`) or another
// program (launch.program) and its Python interpreter present, and enough
// slots: cuda needs `nvidia-smi` there, working, and listing a GPU for every selected slot's
// number (a rank runs on the GPU its slot numbers; an error otherwise); cpu compares `nproc`
// with the slots (fewer cores than ranks is a warning: ranks share cores).
// Each host's problems read as one line each, naming the host and what to fix.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
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

// The options of a run of `config`: `base` (how to reach the hosts, the worker's path) with what
// that run needs checked. GPUs are counted, not cores, where it trains on CUDA; where it launches
// another program (launch.program), that program is checked in `cwd` (with launch.python where it
// is a .py file) instead of the worker. The CLI's preflight and run and the launch dialog all take
// their options from here, so a run checks what its preflight checks.
PreflightOptions preflight_options(const config::RunConfig& config, PreflightOptions base, const std::string& cwd);

// Every host at once; the result is in the order of `hosts`. Never fails as a whole.
std::vector<HostCheck> preflight(const std::vector<SelectedHost>& hosts, const PreflightOptions& options);

// The GPUs of the probe's `gpu=NAME, MEMORY_MIB, DRIVER` lines (nvidia-smi --query-gpu=name,
// memory.total,driver_version --format=csv,noheader,nounits); lines that do not parse are skipped.
std::vector<GpuInfo> parse_gpu_lines(const std::string& probe_output);

// The check of another program (options.program, .python, .cwd) on a machine other than SSH's
// (a Slurm node: srun runs it): the command line that prints the probe's lines there, and the
// errors those lines tell, each starting with `where` ("slurm node sc7n0"); none when it is fine.
std::vector<std::string> program_probe_argv(const PreflightOptions& options);
std::vector<std::string> program_probe_errors(const std::string& probe_output, const PreflightOptions& options, const std::string& where);

// "2 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 580.159.04, CUDA 13.0", or "" without GPUs.
std::string describe_gpus(const HostCheck& check);

// "stagecraft-worker 0.1.0": what a worker of this build prints for --version.
std::string expected_worker_version();

}  // namespace stagecraft::launch
