// Remote runs: RemoteRank (one SSH exec channel per rank), parallel connect, the store's
// address, and run_remote(). See remote_run.h.
#include "stagecraft/launch/remote_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <memory>
#include <thread>

#include "run_common.h"
#include "stagecraft/core/clock.h"
#include "stagecraft/launch/local_run.h"
#include "stagecraft/launch/worker_env.h"

namespace stagecraft::launch {

namespace {

// The wrapper every rank runs under; arguments: CWD LOCAL_WORLD_SIZE SILENCE_S PROGRAM ARGS...
// Commands on stdin: TERM, KILL, PING (the launcher's heartbeat); end of stdin kills the group,
// and so does no PING for SILENCE_S seconds (a watchdog reads the age of a file each PING
// touches). Exits with the program's status. The program gets /dev/null as stdin and not the
// channel (fd 3 is closed for it), so only the command reader sees the launcher's commands.
//
// Requirement on the nodes: the remote user's login shell must be a POSIX shell (sh, bash, dash,
// zsh, ksh). sshd hands the command line to that shell, and this script and its arguments travel
// as single-quoted words spanning several lines, which csh/tcsh and fish do not accept.
constexpr const char* kWrapper = R"SH(cd -- "$1" || { echo "stagecraft: cannot enter the working directory $1 on $(hostname)" >&2; exit 126; }
n=$2; quiet=$3; shift 3
command -v setsid >/dev/null 2>&1 || { echo "stagecraft: setsid (util-linux) is missing on $(hostname)" >&2; exit 126; }
hb=$(mktemp) || { echo "stagecraft: cannot create a temporary file on $(hostname)" >&2; exit 126; }
t=$(nproc 2>/dev/null || echo 1); t=$((t / n)); [ "$t" -ge 1 ] || t=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$t}"
exec 3<&0
setsid "$@" </dev/null 3<&- &
pid=$!
{ while read -r c; do case "$c" in TERM) kill -TERM "-$pid";; KILL) kill -KILL "-$pid";; PING) : >"$hb";; esac; done; kill -KILL "-$pid"; } <&3 >/dev/null 2>&1 &
w=$!
{ while sleep 1; do last=$(stat -c %Y "$hb") || break; [ $(($(date +%s) - last)) -le "$quiet" ] || { kill -KILL "-$pid"; break; }; done; } >/dev/null 2>&1 &
g=$!
exec 3<&-
wait "$pid"; st=$?
kill "$w" "$g" 2>/dev/null
rm -f "$hb"
exit "$st")SH";

// OpenSSH may send a rank's last output after its exit status: the exit is reported once both
// streams ended or the channel closed, or this long after the status came (a child of the
// program that keeps the streams open must not hold the run).
constexpr double kOutputAfterExitWait_s = 2.0;

// The reason in a message from ssh.h, without the "HOST: " it starts with and the "connection
// lost: " the line that shows it already says.
std::string reason_only(std::string message, const std::string& host) {
  if (message.rfind(host + ": ", 0) == 0) message.erase(0, host.size() + 2);
  if (message.rfind("connection lost: ", 0) == 0) message.erase(0, 17);
  return message;
}

// Between heartbeats: a fifth of the silence a rank tolerates, at most 2 s.
double heartbeat_interval_s(double silence_kill_s) { return std::min(2.0, silence_kill_s / 5.0); }

bool valid_env_name(const std::string& k) {
  if (k.empty() || (k[0] >= '0' && k[0] <= '9')) return false;
  for (char c : k) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// What the ranks of one node share: the session, and whether it was lost.
struct Node {
  int index = 0;
  std::string host;
  std::unique_ptr<SshSession> session;
  std::string lost;  // set once the connection is lost: the reason
};

class RemoteRank final : public RankProcess {
 public:
  RemoteRank(std::shared_ptr<Node> node, int rank, std::unique_ptr<SshChannel> channel, double kill_wait_s,
             double heartbeat_s)
      : node_(std::move(node)), rank_(rank), channel_(std::move(channel)), kill_wait_s_(kill_wait_s), heartbeat_s_(heartbeat_s) {}

  int rank() const override { return rank_; }
  std::vector<int> wait_fds() const override {
    if (!node_->lost.empty() || streams_ended_) return {};
    return {node_->session->fd()};
  }
  bool read_available(std::string& out, std::string& err) override {
    const size_t err_before = err.size();
    out += held_out_;
    err += held_err_;
    held_out_.clear();
    held_err_.clear();
    const bool open = !streams_ended_ && node_->lost.empty() && pull(out, err);
    if (err.size() > err_before) err_line_open_ = err.back() != '\n';
    if (!streams_ended_ && !node_->lost.empty()) return lose(err);
    return open;
  }
  // The supervisor polls every rank many times a second: the heartbeat rides on it.
  std::optional<ExitInfo> poll_exit() override {
    if (exit_) return exit_;
    if (!node_->lost.empty()) {
      exit_ = ExitInfo{255, 0};
      return exit_;
    }
    // A failed write shows as a lost connection on the next read.
    if (channel_->unwritten() > 0) (void)channel_->flush();  // what a full remote window held back
    if (killed_at_ == 0 && monotonic_seconds() - last_ping_ >= heartbeat_s_) {
      last_ping_ = monotonic_seconds();
      (void)channel_->write("PING\n");
    }
    if (!status_) {
      status_ = channel_->exit_status();
      if (status_) status_at_ = monotonic_seconds();
    }
    // Output after the status: read it here too (held for read_available), so the end of the
    // streams is seen even while only exits are polled (stopping the run).
    if (status_ && !streams_ended_ && node_->lost.empty()) (void)pull(held_out_, held_err_);
    if (status_ && (streams_ended_ || channel_->closed() || monotonic_seconds() - status_at_ >= kOutputAfterExitWait_s)) {
      ExitInfo e;
      if (*status_ < 0) {
        e.code = 255;
      } else if (*status_ > 128 && *status_ < 128 + 65) {
        e.signal = *status_ - 128;
      } else {
        e.code = *status_;
      }
      exit_ = e;
      return exit_;
    }
    // A KILL the node never confirmed (the link is gone but TCP has not yet given up).
    if (killed_at_ > 0 && monotonic_seconds() - killed_at_ > kill_wait_s_) {
      node_->lost = "no answer to KILL within " + std::to_string(static_cast<int>(kill_wait_s_)) + " s";
      exit_ = ExitInfo{255, 0};
    }
    return exit_;
  }
  void terminate() override {
    if (!exit_ && node_->lost.empty()) (void)channel_->write("TERM\n");
  }
  void kill() override {
    if (exit_ || !node_->lost.empty()) return;
    (void)channel_->write("KILL\n");
    (void)channel_->send_eof();
    if (killed_at_ == 0) killed_at_ = monotonic_seconds();
  }

 private:
  // Reads what the channel has; false once both streams ended or the connection is lost (then
  // node_->lost holds the reason).
  bool pull(std::string& out, std::string& err) {
    auto r = channel_->read_available(out, err);
    if (!r.ok()) {
      if (node_->lost.empty()) node_->lost = reason_only(r.status().message(), node_->host);
      return false;
    }
    if (!r.value()) streams_ended_ = true;
    return r.value();
  }

  bool lose(std::string& err) {
    if (!lost_reported_) {
      lost_reported_ = true;
      // One line of its own: end a line the rank left unfinished, then the loss.
      if (err_line_open_ && (err.empty() || err.back() != '\n')) err += '\n';
      err += "lost the SSH connection to node " + std::to_string(node_->index) + " (" + node_->host + "): " + node_->lost + "\n";
      err_line_open_ = false;
    }
    streams_ended_ = true;
    return false;
  }

  std::shared_ptr<Node> node_;
  int rank_;
  std::unique_ptr<SshChannel> channel_;
  double kill_wait_s_;
  double heartbeat_s_;
  double last_ping_ = 0;
  double killed_at_ = 0;
  bool streams_ended_ = false;
  bool lost_reported_ = false;
  bool err_line_open_ = false;  // the last stderr byte passed up was not a newline
  std::optional<int> status_;   // the exit status as the channel gave it, once it came
  double status_at_ = 0;        // when it came
  std::string held_out_, held_err_;  // output poll_exit() read, for the next read_available()
  std::optional<ExitInfo> exit_;
};

// A TCP port no socket on node 0 uses now, for another program's MASTER_PORT (kFreePortProbe),
// or, when the node cannot tell, a random one in 20000-59999.
int free_remote_port(SshSession& node0) {
  auto cmd = shell_command({"sh", "-c", kFreePortProbe});
  if (cmd.ok()) {
    auto r = node0.run(cmd.value(), 10);
    if (r.ok() && r->exit_status == 0 && r->out.rfind("port=", 0) == 0) {
      const int port = std::atoi(r->out.c_str() + 5);
      if (port >= 20000 && port < 60000) return port;
    }
  }
  return 20000 + static_cast<int>(std::strtoul(random_token(2).c_str(), nullptr, 16) % 40000);
}

}  // namespace

Result<std::string> remote_rank_command(const std::string& cwd, int local_world_size, double silence_kill_s,
                                        const std::map<std::string, std::string>& env, const std::vector<std::string>& argv) {
  if (argv.empty()) return Status::invalid_input("remote run: empty command line");
  if (!(silence_kill_s >= 1.0)) return Status::invalid_input("remote run: the heartbeat silence must be at least 1 s");
  const std::string quiet = std::to_string(static_cast<long>(std::ceil(silence_kill_s)));
  std::vector<std::string> words = {"sh", "-c", kWrapper, "stagecraft-rank", cwd, std::to_string(local_world_size), quiet, "env"};
  for (const auto& [k, v] : env) {
    if (!valid_env_name(k)) return Status::invalid_input("remote run: environment variable name `" + k + "` is not [A-Za-z_][A-Za-z0-9_]*");
    words.push_back(k + "=" + v);
  }
  // env would read a first word holding '=' as one more variable: such a program goes as ./path.
  const std::string& program = argv.front();
  words.push_back(program.find('=') != std::string::npos && program.find('/') == std::string::npos ? "./" + program : program);
  words.insert(words.end(), argv.begin() + 1, argv.end());
  return shell_command(words);
}

Result<std::string> choose_master_addr(const std::string& configured, const std::vector<std::string>& hosts,
                                       const std::vector<std::string>& local_per_node) {
  if (!configured.empty()) return configured;
  if (local_per_node.empty()) return Status::invalid_input("remote run: no nodes");
  for (size_t i = 0; i < local_per_node.size(); ++i) {
    if (local_per_node[i].empty()) {
      return Status::unavailable("remote run: cannot tell which local address reaches " + hosts[i] + "; give --master-addr");
    }
    if (local_per_node[i] != local_per_node.front()) {
      return Status::invalid_input("remote run: nodes are reached from different local addresses (" + hosts.front() + " from " +
                                   local_per_node.front() + ", " + hosts[i] + " from " + local_per_node[i] +
                                   "); give --master-addr with an address every node can reach");
    }
  }
  return local_per_node.front();
}

Result<RunOutcome> run_remote(const config::RunConfig& config, const plan::Plan& plan, const RemoteRunOptions& options,
                              RunCallbacks callbacks, const std::function<void(Supervisor&)>& supervisor_ready) {
  const int world = plan.topology.world_size();
  const int nodes = static_cast<int>(options.hosts.size());
  if (nodes == 0) return Status::invalid_input("remote run: no hosts");
  auto per_node = slots_per_node(options.hosts);
  if (!per_node.ok()) return per_node.status();
  if (per_node.value() * nodes != world) {
    return Status::invalid_input("remote run: " + std::to_string(nodes) + " hosts x " + std::to_string(per_node.value()) +
                                 " slots = " + std::to_string(per_node.value() * nodes) + " ranks, but the plan has " +
                                 std::to_string(world) + "; set cluster.nodes and gpus_per_node from the hosts");
  }
  for (const auto& h : options.hosts) {
    if (Status s = check_host_name(h.host); !s) return s;
  }

  // Every node at once: the slowest handshake, not the sum, is the start-up cost.
  std::vector<std::shared_ptr<Node>> node_list(static_cast<size_t>(nodes));
  std::vector<Status> failures(static_cast<size_t>(nodes));
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < nodes; ++i) {
      threads.emplace_back([&, i] {
        auto s = SshSession::connect(options.hosts[static_cast<size_t>(i)].host, options.ssh);
        if (!s.ok()) {
          failures[static_cast<size_t>(i)] = s.status();
          return;
        }
        auto n = std::make_shared<Node>();
        n->index = i;
        n->host = options.hosts[static_cast<size_t>(i)].host;
        n->session = std::move(s).value();
        node_list[static_cast<size_t>(i)] = std::move(n);
      });
    }
    for (auto& t : threads) t.join();
  }
  std::string failed;
  Status::Code code = Status::Code::kUnavailable;
  for (int i = 0; i < nodes; ++i) {
    const Status& s = failures[static_cast<size_t>(i)];
    if (s) continue;
    if (!failed.empty()) failed += "; ";
    failed += "node " + std::to_string(i) + " " + s.message();
    if (s.code() == Status::Code::kInvalidInput) code = s.code();
  }
  if (!failed.empty()) {
    const std::string msg = "remote run: " + failed;
    return code == Status::Code::kInvalidInput ? Status::invalid_input(msg) : Status::unavailable(msg);
  }

  std::vector<std::string> hosts, locals;
  for (const auto& n : node_list) {
    hosts.push_back(n->host);
    locals.push_back(n->session->local_address());
  }
  // Stagecraft's workers meet at the run's store, served here; another program meets at its own
  // MASTER_ADDR:MASTER_PORT on node 0 (its rank 0 serves it, as under torchrun).
  const bool foreign = config.launch.foreign();
  std::optional<Rendezvous> rendezvous;
  std::string master_addr;
  int master_port = 0;
  if (foreign) {
    if (options.command.empty()) return Status::internal("run_remote: launch.program is set but no command was prepared (program.h)");
    master_addr = options.master_addr.empty() ? node_list.front()->session->peer_address() : options.master_addr;
    if (master_addr.empty()) return Status::unavailable("remote run: cannot tell node 0's address for MASTER_ADDR; give --master-addr");
    master_port = options.master_port > 0 ? options.master_port : free_remote_port(*node_list.front()->session);
  } else {
    auto master = choose_master_addr(options.master_addr, hosts, locals);
    if (!master.ok()) return master.status();
    auto served = serve_rendezvous(master.value(), options.master_port, config, "remote run");
    if (!served.ok()) return served.status();
    rendezvous = std::move(served).value();
    master_addr = master.value();
    master_port = rendezvous->port();
  }

  std::vector<std::string> argv = options.command;
  if (argv.empty()) argv.push_back(default_worker_path());
  std::string cwd = options.remote_cwd;
  if (cwd.empty()) {
    std::error_code ec;
    cwd = std::filesystem::current_path(ec).string();
    if (ec) return Status::io_error("remote run: cannot tell the working directory: " + ec.message());
  }
  const std::string run_id = options.run_id.empty() ? random_token(8) : options.run_id;
  const bool cuda = config.backend == config::Backend::kCuda;
  std::vector<std::unique_ptr<RankProcess>> ranks;
  for (int n = 0; n < nodes; ++n) {
    const auto& node = node_list[static_cast<size_t>(n)];
    for (int l = 0; l < per_node.value(); ++l) {
      WorkerEnv e;
      e.rank = n * per_node.value() + l;
      e.world_size = world;
      e.local_rank = l;
      e.local_world_size = per_node.value();
      e.group_rank = n;
      e.master_addr = master_addr;
      e.master_port = master_port;
      e.run_id = run_id;
      if (rendezvous) e.token = rendezvous->token;
      // The GPUs of the node's selected slots (preflight checked that they exist): Stagecraft's
      // worker sees its slot's alone; another program sees them all and picks its own by
      // LOCAL_RANK, as under torchrun (or DeepSpeed's launcher with --include).
      if (cuda) {
        const auto& ids = options.hosts[static_cast<size_t>(n)].slot_ids;
        if (foreign) {
          for (int id : ids) e.cuda_visible_devices += (e.cuda_visible_devices.empty() ? "" : ",") + std::to_string(id);
        } else {
          e.cuda_visible_devices = std::to_string(ids[static_cast<size_t>(l)]);
        }
      }
      auto env = to_environment(e);
      env.erase("OMP_NUM_THREADS");  // the node's cores decide (the wrapper)
      if (foreign) env["PYTHONUNBUFFERED"] = "1";  // lines as they are printed, for metrics and the hang timer
      auto cmd = remote_rank_command(cwd, per_node.value(), options.silence_kill_s, env, argv);
      if (!cmd.ok()) return cmd.status();
      auto ch = node->session->exec(cmd.value());
      if (!ch.ok()) return ch.status().with_context("remote run: starting rank " + std::to_string(e.rank) + " on node " + std::to_string(n));
      ranks.push_back(std::make_unique<RemoteRank>(node, e.rank, std::move(ch).value(), options.kill_wait_s,
                                                     heartbeat_interval_s(options.silence_kill_s)));
    }
  }
  for (const auto& n : node_list) n->session->set_nonblocking();

  return supervise_run(std::move(ranks), config, options.grace_s, options.cancel, std::move(callbacks), supervisor_ready,
                       rendezvous ? &*rendezvous : nullptr);
}

}  // namespace stagecraft::launch
