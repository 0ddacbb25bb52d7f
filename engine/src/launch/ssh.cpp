// SshSession and SshChannel over libssh, and shell quoting. See ssh.h.
//
// Every libssh call that can fail goes through one of the helpers below, which turn it into a
// Status carrying the host, libssh's message and the line here.
#include "stagecraft/launch/ssh.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libssh/libssh.h>

namespace stagecraft::launch {

namespace {

std::string site(const char* file, int line) {
  return std::string(" [") + std::filesystem::path(file).filename().string() + ":" + std::to_string(line) + "]";
}
#define SC_SSH_SITE site(__FILE__, __LINE__)

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] { ssh_init(); });
}

std::string sockaddr_ip(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  }
  return buf;
}

int sockaddr_port(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

// SshSession::run keeps at most this much of each stream, then says so with the marker.
constexpr size_t kCommandOutputCap = size_t{1} << 20;
constexpr const char* kCommandOutputCutMarker = "[stagecraft: output cut here: more than 1 MiB]\n";

std::string home_file(const char* rel) {
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/") + "/" + rel;
}

}  // namespace

std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

Result<std::string> shell_command(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (w.find('\0') != std::string::npos) return Status::invalid_input("remote command: a word holds a NUL byte");
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

struct SshSession::Impl {
  ssh_session s = nullptr;
  std::string host;
  std::string err(const std::string& what, const std::string& where) const {
    return host + ": " + what + ": " + (s ? ssh_get_error(s) : "no session") + where;
  }
  ~Impl() {
    if (s) {
      if (ssh_is_connected(s)) ssh_disconnect(s);
      ssh_free(s);
    }
  }
};

struct SshChannel::Impl {
  ssh_channel c = nullptr;
  ssh_session s = nullptr;
  std::string host;
  bool out_eof = false, err_eof = false;
  std::string pending;     // written by write() but not yet taken by the remote window
  bool eof_wanted = false;  // send_eof() was asked while `pending` held data
  ~Impl() {
    if (c) {
      if (ssh_is_connected(s) && !ssh_channel_is_closed(c)) ssh_channel_close(c);
      ssh_channel_free(c);
    }
  }
};

SshSession::SshSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SshSession::~SshSession() = default;
SshChannel::SshChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SshChannel::~SshChannel() = default;

namespace {

// The server's key fingerprint "SHA256:...", or "" when libssh cannot give it.
std::string server_fingerprint(ssh_session s) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK) return "";
  unsigned char* hash = nullptr;
  size_t len = 0;
  std::string fp;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) == 0) {
    char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    if (text) {
      fp = text;
      ssh_string_free_char(text);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return fp;
}

// A session configured and connected (TCP + key exchange), host key not yet checked.
Result<std::unique_ptr<SshSession::Impl>> open_session(const std::string& host, const SshOptions& o, ConnectReport* report) {
  init_once();
  auto impl = std::make_unique<SshSession::Impl>();
  impl->host = host;
  impl->s = ssh_new();
  if (!impl->s) return Status::internal(host + ": ssh_new failed" + SC_SSH_SITE);
  ssh_session s = impl->s;
  if (ssh_options_set(s, SSH_OPTIONS_HOST, host.c_str()) != 0) {
    return Status::invalid_input(impl->err("host name refused", SC_SSH_SITE));
  }
  const std::string config = o.config_file.empty() ? home_file(".ssh/config") : o.config_file;
  if (!o.config_file.empty() && access(config.c_str(), R_OK) != 0) {
    return Status::invalid_input("--ssh-config " + config + ": cannot read the file");
  }
  if (access(config.c_str(), R_OK) == 0 && ssh_options_parse_config(s, config.c_str()) != 0) {
    return Status::invalid_input(impl->err("reading " + config, SC_SSH_SITE));
  }
  bool no = false;
  ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no);
  if (!o.known_hosts_file.empty()) {
    if (ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, o.known_hosts_file.c_str()) != 0 ||
        ssh_options_set(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, o.known_hosts_file.c_str()) != 0) {
      return Status::invalid_input(impl->err("--known-hosts " + o.known_hosts_file, SC_SSH_SITE));
    }
  }
  long timeout = o.connect_timeout_s;
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &timeout);
  if (ssh_connect(s) != SSH_OK) return Status::unavailable(impl->err("cannot connect", SC_SSH_SITE));
  const int fd = ssh_get_fd(s);
  if (fd >= 0) {
    const int on = 1, idle = std::max(1, o.keepalive_s), intvl = std::max(1, o.keepalive_s / 2), cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    // Unacknowledged data (a KILL sent into a cut link) gives up as soon as keepalive would.
    const unsigned user_timeout = static_cast<unsigned>((idle + intvl * cnt) * 1000);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  }
  if (report) {
    report->reachable = true;
    report->fingerprint = server_fingerprint(s);
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (fd >= 0 && getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0) {
      report->address = sockaddr_ip(peer) + ":" + std::to_string(sockaddr_port(peer));
    }
  }
  return impl;
}

const char* known_hosts_name(const SshOptions& o) {
  return o.known_hosts_file.empty() ? "~/.ssh/known_hosts" : o.known_hosts_file.c_str();
}

// "ok", "unknown" or "changed"; an error when known_hosts cannot be read.
Result<std::string> key_state(SshSession::Impl& impl) {
  switch (ssh_session_is_known_server(impl.s)) {
    case SSH_KNOWN_HOSTS_OK: return std::string("ok");
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER: return std::string("changed");
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND: return std::string("unknown");
    case SSH_KNOWN_HOSTS_ERROR: break;
  }
  return Status::io_error(impl.err("checking the host key", SC_SSH_SITE));
}

}  // namespace

Result<std::unique_ptr<SshSession>> SshSession::connect(const std::string& host, const SshOptions& options, ConnectReport* report) {
  auto opened = open_session(host, options, report);
  if (!opened.ok()) return opened.status();
  auto impl = std::move(opened).value();
  auto state = key_state(*impl);
  if (!state.ok()) return state.status();
  const std::string fp = server_fingerprint(impl->s);
  if (state.value() == "unknown") {
    return Status::invalid_input(host + ": host key unknown (" + fp + "), not in " + known_hosts_name(options) +
                                 "; compare the fingerprint with the host's and add it (ssh-keyscan, or trust it in the GUI)");
  }
  if (state.value() == "changed") {
    return Status::invalid_input(host + ": host key CHANGED (now " + fp + "), it does not match " + known_hosts_name(options) +
                                 "; refusing: the host may be impersonated; if the change is expected, remove the old entry "
                                 "(ssh-keygen -R) and add the new key");
  }
  if (report) report->host_key_known = true;
  // Public key only: the agent, then the config's and the default identity files.
  int rc = ssh_userauth_none(impl->s, nullptr);
  if (rc != SSH_AUTH_SUCCESS) rc = ssh_userauth_publickey_auto(impl->s, nullptr, nullptr);
  if (rc == SSH_AUTH_ERROR) return Status::unavailable(impl->err("authentication failed", SC_SSH_SITE));
  if (rc != SSH_AUTH_SUCCESS) {
    return Status::invalid_input(host + ": no key was accepted (tried ssh-agent and the identity files); add IdentityFile to the "
                                 "ssh config or the key to the host's authorized_keys (passwords are never used)" + SC_SSH_SITE);
  }
  if (report) report->authenticated = true;
  std::unique_ptr<SshSession> session(new SshSession(std::move(impl)));
  session->host_ = host;
  const int fd = ssh_get_fd(session->impl_->s);
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (fd >= 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) session->local_address_ = sockaddr_ip(a);
  len = sizeof a;
  if (fd >= 0 && getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) session->peer_address_ = sockaddr_ip(a);
  return session;
}

int SshSession::fd() const { return ssh_get_fd(impl_->s); }
bool SshSession::connected() const { return ssh_is_connected(impl_->s) != 0; }
std::string SshSession::last_error() const { return ssh_get_error(impl_->s); }
void SshSession::set_nonblocking() { ssh_set_blocking(impl_->s, 0); }

Result<std::unique_ptr<SshChannel>> SshSession::exec(const std::string& command) {
  auto ch = std::make_unique<SshChannel::Impl>();
  ch->s = impl_->s;
  ch->host = host_;
  ch->c = ssh_channel_new(impl_->s);
  if (!ch->c) return Status::unavailable(impl_->err("opening a channel", SC_SSH_SITE));
  if (ssh_channel_open_session(ch->c) != SSH_OK) return Status::unavailable(impl_->err("opening a session channel", SC_SSH_SITE));
  if (ssh_channel_request_exec(ch->c, command.c_str()) != SSH_OK) {
    return Status::unavailable(impl_->err("starting a command", SC_SSH_SITE));
  }
  return std::unique_ptr<SshChannel>(new SshChannel(std::move(ch)));
}

Result<CommandResult> SshSession::run(const std::string& command, double timeout_s) {
  auto ch = exec(command);
  if (!ch.ok()) return ch.status();
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  ssh_channel c = ch.value()->impl_->c;
  char buf[4096];
  bool cut[2] = {false, false};
  // Both streams in turn: libssh reports EOF only once stdout and stderr are both drained.
  while (true) {
    bool progress = false;
    for (int is_err = 0; is_err < 2; ++is_err) {
      const int n = ssh_channel_read_nonblocking(c, buf, sizeof buf, is_err);
      if (n == SSH_ERROR) return Status::unavailable(impl_->err("reading a command's output", SC_SSH_SITE));
      if (n > 0) {
        std::string& sink = is_err ? r.err : r.out;
        const size_t room = sink.size() < kCommandOutputCap ? kCommandOutputCap - sink.size() : 0;
        sink.append(buf, std::min(room, static_cast<size_t>(n)));
        if (static_cast<size_t>(n) > room) cut[is_err] = true;
        progress = true;
      }
    }
    if (!progress && (ssh_channel_is_eof(c) || ssh_channel_is_closed(c))) break;
    // Every turn, output or not: a command that streams without end still times out.
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::timeout(host_ + ": `" + command.substr(0, 120) + "` did not finish in " +
                             std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    if (!progress) ssh_channel_poll_timeout(c, 50, 0);
  }
  for (int is_err = 0; is_err < 2; ++is_err) {
    if (!cut[is_err]) continue;
    std::string& sink = is_err ? r.err : r.out;
    if (!sink.empty() && sink.back() != '\n') sink += '\n';
    sink += kCommandOutputCutMarker;
  }
  r.exit_status = ssh_channel_get_exit_status(c);
  return r;
}

Status SshChannel::write(std::string_view data) {
  impl_->pending.append(data);
  return flush();
}

Status SshChannel::flush() {
  if (impl_->pending.empty() && !impl_->eof_wanted) return Status::OK();
  if (ssh_channel_is_closed(impl_->c)) return Status::unavailable(impl_->host + ": channel closed" + SC_SSH_SITE);
  if (!impl_->pending.empty()) {
    // A non-blocking session writes what the remote window takes and keeps the rest for the next
    // call, so a command line is never cut short and never merged with the next one.
    const int n = ssh_channel_write(impl_->c, impl_->pending.data(), static_cast<uint32_t>(impl_->pending.size()));
    if (n == SSH_ERROR) return Status::unavailable(impl_->host + ": writing to a channel: " + ssh_get_error(impl_->s) + SC_SSH_SITE);
    if (n > 0) impl_->pending.erase(0, static_cast<size_t>(n));
  }
  if (impl_->pending.empty() && impl_->eof_wanted) {
    impl_->eof_wanted = false;
    if (ssh_channel_send_eof(impl_->c) == SSH_ERROR) {
      return Status::unavailable(impl_->host + ": closing a channel's input: " + ssh_get_error(impl_->s) + SC_SSH_SITE);
    }
  }
  return Status::OK();
}

size_t SshChannel::unwritten() const { return impl_->pending.size(); }

Status SshChannel::send_eof() {
  if (ssh_channel_is_closed(impl_->c)) return Status::OK();
  impl_->eof_wanted = true;  // after what write() still holds
  return flush();
}

bool SshChannel::closed() const { return ssh_channel_is_closed(impl_->c) != 0; }

Result<bool> SshChannel::read_available(std::string& out, std::string& err) {
  char buf[65536];
  for (int is_err = 0; is_err < 2; ++is_err) {
    bool& eof = is_err ? impl_->err_eof : impl_->out_eof;
    while (!eof) {
      const int n = ssh_channel_read_nonblocking(impl_->c, buf, sizeof buf, is_err);
      if (n > 0) {
        (is_err ? err : out).append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == SSH_EOF) {
        eof = true;
        break;
      }
      if (n == SSH_ERROR) {
        if (ssh_channel_is_closed(impl_->c) && ssh_is_connected(impl_->s)) {
          eof = true;
          break;
        }
        return Status::unavailable(impl_->host + ": connection lost: " + ssh_get_error(impl_->s) + SC_SSH_SITE);
      }
      break;  // nothing ready
    }
  }
  if (!ssh_is_connected(impl_->s)) {
    return Status::unavailable(impl_->host + ": connection lost: " + ssh_get_error(impl_->s) + SC_SSH_SITE);
  }
  return !(impl_->out_eof && impl_->err_eof);
}

std::optional<int> SshChannel::exit_status() {
  // Non-blocking session: takes in what arrived and answers at once. OpenSSH may send output
  // after the status (the program's children still write): the caller waits for the streams.
  const int st = ssh_channel_get_exit_status(impl_->c);
  if (st >= 0) return st;
  if (ssh_channel_is_closed(impl_->c)) return -1;
  return std::nullopt;
}

Result<HostKeyInfo> probe_host_key(const std::string& host, const SshOptions& options) {
  auto opened = open_session(host, options, nullptr);
  if (!opened.ok()) return opened.status();
  auto state = key_state(*opened.value());
  if (!state.ok()) return state.status();
  return HostKeyInfo{state.value(), server_fingerprint(opened.value()->s)};
}

Status trust_host_key(const std::string& host, const SshOptions& options, const std::string& expected_fingerprint) {
  auto opened = open_session(host, options, nullptr);
  if (!opened.ok()) return opened.status();
  auto& impl = *opened.value();
  auto state = key_state(impl);
  if (!state.ok()) return state.status();
  const std::string fp = server_fingerprint(impl.s);
  if (state.value() == "changed") {
    return Status::invalid_input(host + ": host key CHANGED (now " + fp + "); a changed key is never trusted: remove the old entry "
                                 "from " + known_hosts_name(options) + " by hand if the change is expected");
  }
  if (state.value() == "ok") return Status::OK();
  if (fp.empty() || fp != expected_fingerprint) {
    return Status::invalid_input(host + ": the host now presents " + fp + ", not the " + expected_fingerprint +
                                 " that was shown; not trusted");
  }
  if (ssh_session_update_known_hosts(impl.s) != SSH_OK) {
    return Status::io_error(impl.err(std::string("writing ") + known_hosts_name(options), SC_SSH_SITE));
  }
  return Status::OK();
}

}  // namespace stagecraft::launch
