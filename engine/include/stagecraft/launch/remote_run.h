// Remote runs: every rank of a plan as a process on the hosts of a hostfile, started over SSH,
// supervised here with the same Supervisor as local runs (supervisor.h).
//
// run_remote() connects to every node in parallel (ssh.h: host key checked, key-only auth),
// serves the rendezvous store on the local address that reaches the nodes (or
// RemoteRunOptions::master_addr) with a fresh random token, publishes the configuration under
// "config", and starts one SSH exec channel per rank. Channel per rank, not per node: the SSH
// protocol then carries each rank's stdout, stderr and exit status apart, with no framing of
// our own to parse. On the node each rank runs under a small POSIX sh wrapper that
//   - enters the working directory (by default this process's, as DeepSpeed's launcher does:
//     nodes are expected to share the file system layout),
//   - starts the program with `setsid` (a process group and session of its own, so every
//     process it forks is reached by one signal),
//   - reads the channel's stdin: "TERM" / "KILL" lines signal the group, and end of input (the
//     channel closed, the connection dropped, sshd gone) kills it, so no process outlives the
//     run's connection,
//   - exits with the program's status (128 + N when killed by signal N).
// Every word of that command line is single-quoted (ssh.h): paths, environment values and
// arguments cannot inject shell. The environment is worker_env.h's, with GROUP_RANK = node
// index and LOCAL_RANK = position on the node; OMP_NUM_THREADS is the node's cores / ranks per
// node, computed on the node.
//
// With launch.program (another program, program.h) no store is served: `command` holds the
// program's prepared command line (RunSession sets it), MASTER_ADDR is master_addr or else node
// 0's address as this machine reaches it, MASTER_PORT master_port or else a port free on node 0
// (read from its /proc/net/tcp), CUDA_VISIBLE_DEVICES on backend cuda lists the node's selected
// slots (the program picks its GPU among them by LOCAL_RANK, as under torchrun), and the
// supervisor runs in foreign mode (supervisor.h). Stagecraft's worker gets its slot's GPU alone.
//
// A lost SSH connection fails the run naming the node ("lost the SSH connection to node 1
// (node-b)"); the node's sshd then closes the channels and the wrappers kill their groups.
#pragma once

#include <functional>
#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/ssh.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::launch {

struct RemoteRunOptions {
  std::vector<SelectedHost> hosts;   // the nodes, in rank order; each with gpus_per_node slots
  SshOptions ssh;
  // The program and its arguments, run once per rank with the torchrun-style environment; empty
  // runs stagecraft-worker at the same absolute path as here (default_worker_path()).
  std::vector<std::string> command;
  std::string remote_cwd;    // empty: this process's working directory
  std::string master_addr;   // empty: the local address the SSH connections leave from (another
                             // program: node 0's address)
  int master_port = 0;       // 0: the system picks one (another program: a free port on node 0)
  std::string run_id;        // empty: a random one (STAGECRAFT_RUN_ID)
  double grace_s = 5.0;      // TERM to KILL
  const std::atomic<bool>* cancel = nullptr;  // set to true (any thread, a signal handler): cancel
  // How long a node may take to confirm a KILL before its ranks are given up as lost.
  double kill_wait_s = 10.0;
  // The launcher sends every rank a heartbeat; a rank that hears none for this long kills its
  // process group. This ends the ranks of a node whose link was cut or whose launcher died, even
  // where the node's sshd never notices the silent client (OpenSSH's default).
  double silence_kill_s = 30.0;
};

// The run's outcome, as run_local(). Fails (no outcome) when the run could not start: a node
// unreachable, a host key unknown or changed, authentication refused (one line naming every
// node that failed), the store, a channel.
Result<RunOutcome> run_remote(const config::RunConfig& config, const plan::Plan& plan, const RemoteRunOptions& options,
                              RunCallbacks callbacks, const std::function<void(Supervisor&)>& supervisor_ready = nullptr);

// The address for the store: `configured` when given, else the one local address every node is
// reached from (`local_per_node[i]` for node `hosts[i]`). Different addresses are refused,
// naming two nodes, with the fix (--master-addr).
Result<std::string> choose_master_addr(const std::string& configured, const std::vector<std::string>& hosts,
                                       const std::vector<std::string>& local_per_node);

// The command line (one string for the remote shell) that starts one rank under the wrapper.
Result<std::string> remote_rank_command(const std::string& cwd, int local_world_size, double silence_kill_s,
                                        const std::map<std::string, std::string>& env,
                                        const std::vector<std::string>& argv);

}  // namespace stagecraft::launch
