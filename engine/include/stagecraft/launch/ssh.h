// SSH sessions (libssh) for remote runs and preflight: connect, check the host key, authenticate
// by key or agent, run commands, and shell quoting for everything put on a remote command line.
//
// Contract:
// - A host resolves through ~/.ssh/config or SshOptions::config_file (HostName, User, Port,
//   IdentityFile are honoured).
// - The host key is checked against ~/.ssh/known_hosts or SshOptions::known_hosts_file. An
//   unknown key refuses with the host and the key's SHA256 fingerprint; trust_host_key() records
//   an unknown key after a person compared the fingerprint; a changed key is never accepted.
// - Authentication is by public key only (ssh-agent, the config's IdentityFile, the default
//   identities). No password is asked for, sent or stored.
// - Every libssh call is wrapped once; failures come back as Status with the host, libssh's
//   reason and the source line ("[ssh.cpp:123]"). No exception leaves this API.
// - A session (and its channels) may be used by one thread at a time; different sessions are
//   independent, so nodes connect in parallel from threads of their own.
// - Lifetime: every SshChannel must be destroyed before the SshSession it came from (a channel
//   uses its session's connection and closes itself through it).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::launch {

struct SshOptions {
  std::string config_file;       // empty: ~/.ssh/config
  std::string known_hosts_file;  // empty: ~/.ssh/known_hosts (and the system's file); set: only this file
  int connect_timeout_s = 10;    // TCP connect and every blocking exchange of the handshake
  // TCP keepalive: a peer that stops answering (a cut link) is declared lost after about
  // keepalive_s + 3 * keepalive_s / 2 seconds without traffic.
  int keepalive_s = 2;
};

// POSIX single quotes: 'it'\''s'. The result is one word for any sh, whatever `s` holds.
std::string shell_quote(std::string_view s);
// Every word quoted and joined by spaces. Fails on a NUL byte (it cannot pass through exec).
Result<std::string> shell_command(const std::vector<std::string>& words);

// How far connect() got, for preflight's per-host lines.
struct ConnectReport {
  bool reachable = false;      // TCP and the SSH handshake
  bool host_key_known = false;
  bool authenticated = false;
  std::string fingerprint;     // "SHA256:..." of the server's host key, once seen
  std::string address;         // "host:port" actually reached
};

// A command's result, for short commands (preflight).
struct CommandResult {
  int exit_status = -1;  // -1 when the server sent none (killed by a signal)
  // At most 1 MiB of each stream is kept; a stream that said more ends with the line
  // "[stagecraft: output cut here: more than 1 MiB]".
  std::string out, err;
};

class SshChannel;

class SshSession {
 public:
  // Connects to `host` (a name, an address or a config alias), checks its key, authenticates.
  // `report`, when given, records how far it got.
  static Result<std::unique_ptr<SshSession>> connect(const std::string& host, const SshOptions& options,
                                                     ConnectReport* report = nullptr);
  ~SshSession();
  SshSession(const SshSession&) = delete;
  SshSession& operator=(const SshSession&) = delete;

  const std::string& host() const { return host_; }
  // The IP address this machine reached the host from, and the host's address (no port).
  const std::string& local_address() const { return local_address_; }
  const std::string& peer_address() const { return peer_address_; }
  int fd() const;  // the socket, for poll()

  // Opens a channel running `command` (already quoted) through the remote user's shell.
  Result<std::unique_ptr<SshChannel>> exec(const std::string& command);
  // Runs `command` to the end, or fails with kTimeout after timeout_s naming the command (also
  // when it keeps writing output).
  Result<CommandResult> run(const std::string& command, double timeout_s);
  // After exec(): from now on channel reads never wait on the network.
  void set_nonblocking();
  bool connected() const;
  std::string last_error() const;

  struct Impl;

 private:
  explicit SshSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string host_, local_address_, peer_address_;
};

// One exec channel: the remote command's stdin, stdout, stderr and exit status.
class SshChannel {
 public:
  ~SshChannel();  // closes the channel (the remote side sees EOF on stdin)
  SshChannel(const SshChannel&) = delete;
  SshChannel& operator=(const SshChannel&) = delete;

  // Sends `data` after anything an earlier write() left: a non-blocking session writes what the
  // remote window takes now and keeps the rest, in order, for the next write(), flush() or
  // send_eof(). Fails when the channel is closed or the connection broke.
  Status write(std::string_view data);
  // Writes what earlier writes left (and the EOF send_eof() deferred behind it). Call it now
  // and then while unwritten() > 0.
  Status flush();
  size_t unwritten() const;  // bytes write() holds back for a full remote window
  // Ends the remote command's stdin, after whatever write() still holds.
  Status send_eof();
  bool closed() const;  // the channel is closed (both sides): no more output will come
  // Appends what is ready on stdout/stderr. Returns false once both ended (EOF or closed);
  // fails when the connection is lost.
  Result<bool> read_available(std::string& out, std::string& err);
  // The remote command's exit status once it arrived; nullopt before. -1 when the channel closed
  // without one (killed by a signal, or the connection closed). Never waits once the session is
  // non-blocking (SshSession::set_nonblocking).
  std::optional<int> exit_status();

 private:
  friend class SshSession;
  struct Impl;
  explicit SshChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The host's key as the server presents it, and whether known_hosts knows it: "ok", "unknown",
// "changed". Fails when the host cannot be reached.
struct HostKeyInfo {
  std::string state;
  std::string fingerprint;  // "SHA256:..."
};
Result<HostKeyInfo> probe_host_key(const std::string& host, const SshOptions& options);

// Appends the host's current key to the known-hosts file after the caller showed its
// fingerprint to a person: refuses unless the key is unknown and its fingerprint equals
// `expected_fingerprint` (so a key that changed between showing and trusting is not taken).
// A changed key is never accepted: the old entry must be removed by hand.
Status trust_host_key(const std::string& host, const SshOptions& options, const std::string& expected_fingerprint);

}  // namespace stagecraft::launch
