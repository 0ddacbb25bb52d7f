// The rendezvous store: its operations, many clients at once, the timeouts and their messages,
// the run token, and hostile peers (garbage, oversize lengths, stalls, early disconnects) that
// must neither crash nor wedge the server. Real sockets on 127.0.0.1, ports picked with port 0.
#include "stagecraft/comm/rendezvous.h"

#include <QtTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

using namespace stagecraft;
using namespace stagecraft::comm;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

const std::string kToken = "0123456789abcdef-test-token";

std::unique_ptr<RendezvousServer> serve(RendezvousServerOptions o = {}) {
  o.host = "127.0.0.1";
  if (o.token.empty()) o.token = kToken;
  auto s = RendezvousServer::start(o);
  if (!s.ok()) qFatal("%s", s.status().message().c_str());
  return std::move(s).value();
}

RendezvousClientOptions client_options(int port, milliseconds timeout = milliseconds(30000)) {
  RendezvousClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = kToken;
  o.connect_timeout = milliseconds(30000);
  o.timeout = timeout;
  return o;
}

std::unique_ptr<RendezvousClient> dial(int port) {
  auto c = RendezvousClient::connect(client_options(port));
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return std::move(c).value();
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Upper bounds on how long a call took only tell "returned for the expected reason" from "hung"
// or "waited for a much later deadline"; a machine busy with a parallel build can delay a thread
// by seconds, so they allow this much beyond the expected time. Where the status code already
// tells the reasons apart (a wake-up is ok, a timeout kTimeout), no time is asserted at all.
constexpr double kSlackMs = 10000;

// A plain socket to the server, for speaking the protocol wrongly on purpose.
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) qFatal("raw connect failed");
  return fd;
}

void raw_send(int fd, const QByteArray& bytes) {
  if (bytes.isEmpty()) return;
  QCOMPARE(::send(fd, bytes.constData(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
}

// True when the server closes the connection within `ms` (whatever it sent before closing).
bool closed_by_server(int fd, int ms) {
  const auto deadline = Clock::now() + milliseconds(ms);
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

// Polls `pred` until it holds or `ms` pass; true when it held.
template <typename F>
bool eventually(F pred, int ms = 10000) {  // returns as soon as pred holds; see kSlackMs
  const auto deadline = Clock::now() + milliseconds(ms);
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

QByteArray be32(uint32_t v) {
  QByteArray b(4, '\0');
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * (3 - i))) & 0xff);
  return b;
}
QByteArray frame(const QByteArray& body) { return be32(static_cast<uint32_t>(body.size())) + body; }
QByteArray hello_frame(const std::string& token, const char* magic = "SCST") {
  QByteArray body;
  body += char(1);
  body += QByteArray(magic, 4);
  body += char(0);
  body += char(1);
  body += be32(static_cast<uint32_t>(token.size()));
  body += QByteArray::fromStdString(token);
  return frame(body);
}

}  // namespace

class TestRendezvous : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void setGetRoundTrip_data() {
    QTest::addColumn<QByteArray>("key");
    QTest::addColumn<QByteArray>("value");
    QTest::newRow("text") << QByteArray("rank/0") << QByteArray("10.0.0.1:4242");
    QTest::newRow("empty value") << QByteArray("empty") << QByteArray();
    QTest::newRow("binary with NULs") << QByteArray("bin") << QByteArray("\0\1\2\xff\0x", 6);
    QTest::newRow("longest key") << QByteArray(int(kMaxKeyBytes), 'k') << QByteArray("v");
    QTest::newRow("1 MiB value") << QByteArray("big") << QByteArray(1 << 20, 'x');
    QTest::newRow("largest value") << QByteArray("largest") << QByteArray(int(kMaxValueBytes), 'y');
  }
  void setGetRoundTrip() {
    QFETCH(QByteArray, key);
    QFETCH(QByteArray, value);
    auto server = serve();
    auto c = dial(server->port());
    QVERIFY(c->set(key.toStdString(), value.toStdString()).ok());
    auto got = c->get(key.toStdString());
    QVERIFY2(got.ok(), got.status().message().c_str());
    QCOMPARE(QByteArray::fromStdString(got.value()), value);
    // Overwrite, then read from a second client.
    QVERIFY(c->set(key.toStdString(), "again").ok());
    auto other = dial(server->port());
    QCOMPARE(other->get(key.toStdString(), milliseconds(0)).value(), std::string("again"));
  }

  void absentKeys_data() {
    QTest::addColumn<int>("wait_ms");
    QTest::addColumn<int>("code");
    QTest::newRow("get without waiting: not found") << 0 << int(Status::Code::kNotFound);
    QTest::newRow("get with a wait: timeout") << 150 << int(Status::Code::kTimeout);
  }
  void absentKeys() {
    QFETCH(int, wait_ms);
    QFETCH(int, code);
    auto server = serve();
    auto c = dial(server->port());
    const auto t0 = Clock::now();
    auto got = c->get("nobody/set/this", milliseconds(wait_ms));
    QVERIFY(!got.ok());
    QCOMPARE(int(got.status().code()), code);
    QVERIFY2(got.status().message().find("'nobody/set/this'") != std::string::npos, got.status().message().c_str());
    QVERIFY(ms_since(t0) >= wait_ms);
    QVERIFY(ms_since(t0) < wait_ms + kSlackMs);
    QCOMPARE(c->check({"nobody/set/this"}).value(), false);
  }

  void waitTimeoutNamesKeyAndAddress() {
    auto server = serve();
    auto c = dial(server->port());
    QVERIFY(c->set("present", "1").ok());
    const auto t0 = Clock::now();
    Status s = c->wait({"present", "absent"}, milliseconds(200));
    const double took = ms_since(t0);
    QCOMPARE(s.code(), Status::Code::kTimeout);
    const std::string& m = s.message();
    QVERIFY2(m.find("127.0.0.1:" + std::to_string(server->port())) != std::string::npos, m.c_str());
    QVERIFY2(m.find("missing: 'absent'") != std::string::npos, m.c_str());
    QVERIFY2(m.find("200 ms") != std::string::npos, m.c_str());
    QVERIFY(took >= 200 && took < 200 + kSlackMs);
    // The connection is still good after a server-side timeout.
    QVERIFY(c->wait({"present"}, milliseconds(100)).ok());
  }

  void waitWakesWhenAnotherClientSets_data() {
    QTest::addColumn<int>("keys");
    QTest::newRow("one key") << 1;
    QTest::newRow("five keys, set out of order") << 5;
  }
  void waitWakesWhenAnotherClientSets() {
    QFETCH(int, keys);
    auto server = serve();
    auto waiter = dial(server->port());
    auto setter = dial(server->port());
    std::vector<std::string> names;
    for (int i = 0; i < keys; ++i) names.push_back("k" + std::to_string(i));
    std::thread t([&] {
      std::this_thread::sleep_for(milliseconds(100));
      for (int i = keys - 1; i >= 0; --i) (void)setter->set(names[i], "v");
    });
    // Woken by the sets, not by the deadline: a deadline would end in kTimeout, not ok.
    Status s = waiter->wait(names, milliseconds(60000));
    t.join();
    QVERIFY2(s.ok(), s.message().c_str());
  }

  // A waiter whose key was set, then deleted, must still wake when it is set again.
  void waitSurvivesDeleteAndReset() {
    auto server = serve();
    auto waiter = dial(server->port());
    auto setter = dial(server->port());
    std::thread t([&] {
      std::this_thread::sleep_for(milliseconds(50));
      (void)setter->set("a", "1");
      (void)setter->remove("a");
      (void)setter->set("b", "1");
      std::this_thread::sleep_for(milliseconds(50));
      (void)setter->set("a", "2");
    });
    Status s = waiter->wait({"a", "b"}, milliseconds(3000));
    t.join();
    QVERIFY2(s.ok(), s.message().c_str());
  }

  void manyConcurrentClients_data() {
    QTest::addColumn<int>("clients");
    QTest::addColumn<int>("adds");
    QTest::addColumn<bool>("shared");  // all threads share one RendezvousClient (calls serialize)
    QTest::newRow("8 clients x 50 adds") << 8 << 50 << false;
    QTest::newRow("64 clients x 10 adds") << 64 << 10 << false;
    QTest::newRow("16 threads on one shared client") << 16 << 20 << true;
  }
  void manyConcurrentClients() {
    QFETCH(int, clients);
    QFETCH(int, adds);
    QFETCH(bool, shared);
    auto server = serve();
    auto shared_client = dial(server->port());
    std::vector<std::vector<int64_t>> seen(clients);
    std::vector<std::string> errors(clients);
    std::vector<std::thread> threads;
    for (int i = 0; i < clients; ++i) {
      threads.emplace_back([&, i] {
        auto c = RendezvousClient::connect(client_options(server->port()));
        if (!c.ok()) {
          errors[i] = c.status().message();
          return;
        }
        RendezvousClient& store = shared ? *shared_client : *c.value();
        for (int k = 0; k < adds; ++k) {
          auto v = store.add("counter", 1);
          if (!v.ok()) {
            errors[i] = v.status().message();
            return;
          }
          seen[i].push_back(v.value());
        }
        if (Status s = store.set("rank/" + std::to_string(i), "value of " + std::to_string(i)); !s) errors[i] = s.message();
        // A thread blocked in wait() holds a shared client (store.h), so only own clients wait
        // for each other here.
        if (shared) return;
        std::vector<std::string> all;
        for (int j = 0; j < clients; ++j) all.push_back("rank/" + std::to_string(j));
        if (Status s = store.wait(all, milliseconds(60000)); !s) {
          errors[i] = s.message();
          return;
        }
        for (int j = 0; j < clients; ++j) {
          auto v = store.get("rank/" + std::to_string(j), milliseconds(0));
          if (!v.ok() || v.value() != "value of " + std::to_string(j)) errors[i] = "wrong value for rank/" + std::to_string(j);
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) QVERIFY2(e.empty(), e.c_str());
    // ADD is atomic: every value from 1 to the total was handed out exactly once.
    std::set<int64_t> all;
    for (const auto& v : seen) all.insert(v.begin(), v.end());
    QCOMPARE(all.size(), size_t(clients * adds));
    QCOMPARE(*all.begin(), int64_t(1));
    QCOMPARE(*all.rbegin(), int64_t(clients * adds));
    auto c = dial(server->port());
    QCOMPARE(c->get("counter").value(), std::to_string(clients * adds));
    for (int j = 0; j < clients; ++j) QCOMPARE(c->get("rank/" + std::to_string(j)).value(), "value of " + std::to_string(j));
    QCOMPARE(server->stats().authenticated, size_t(clients + 2));
  }

  void addCounter_data() {
    QTest::addColumn<QByteArray>("initial");  // "-" = absent
    QTest::addColumn<qint64>("delta");
    QTest::addColumn<qint64>("expected");
    QTest::addColumn<int>("code");
    QTest::newRow("absent counts as 0") << QByteArray("-") << qint64(5) << qint64(5) << int(Status::Code::kOk);
    QTest::newRow("negative delta") << QByteArray("10") << qint64(-12) << qint64(-2) << int(Status::Code::kOk);
    QTest::newRow("not a counter") << QByteArray("ten") << qint64(1) << qint64(0) << int(Status::Code::kInvalidInput);
    QTest::newRow("overflow") << QByteArray("9223372036854775807") << qint64(1) << qint64(0) << int(Status::Code::kInvalidInput);
  }
  void addCounter() {
    QFETCH(QByteArray, initial);
    QFETCH(qint64, delta);
    QFETCH(qint64, expected);
    QFETCH(int, code);
    auto server = serve();
    auto c = dial(server->port());
    if (initial != "-") QVERIFY(c->set("n", initial.toStdString()).ok());
    auto v = c->add("n", delta);
    QCOMPARE(int(v.status().code()), code);
    if (v.ok()) {
      QCOMPARE(v.value(), int64_t(expected));
      QCOMPARE(c->get("n").value(), std::to_string(expected));
    }
    QVERIFY(c->set("still", "usable").ok());  // a refused request keeps the connection
  }

  void removeAndCheck() {
    auto server = serve();
    auto c = dial(server->port());
    QVERIFY(c->set("a", "1").ok());
    QVERIFY(c->set("b", "2").ok());
    QCOMPARE(c->check({"a", "b"}).value(), true);
    QCOMPARE(c->remove("a").value(), true);
    QCOMPARE(c->remove("a").value(), false);
    QCOMPARE(c->check({"a", "b"}).value(), false);
    QCOMPARE(c->check({"b"}).value(), true);
    QCOMPARE(server->stats().keys, size_t(1));
  }

  void clientRefusesWhatTheServerWould_data() {
    QTest::addColumn<int>("key_bytes");
    QTest::addColumn<int>("value_bytes");
    QTest::newRow("key over the limit") << int(kMaxKeyBytes + 1) << 1;
    QTest::newRow("value over the limit") << 3 << int(kMaxValueBytes + 1);
  }
  void clientRefusesWhatTheServerWould() {
    QFETCH(int, key_bytes);
    QFETCH(int, value_bytes);
    auto server = serve();
    auto c = dial(server->port());
    Status s = c->set(std::string(key_bytes, 'k'), std::string(value_bytes, 'v'));
    QCOMPARE(s.code(), Status::Code::kInvalidInput);
    QVERIFY2(s.message().find("limit") != std::string::npos, s.message().c_str());
    QVERIFY(c->set("k", "v").ok());
  }

  void storeFullRefusesButKeepsServing() {
    RendezvousServerOptions o;
    o.max_stored_bytes = 1000;
    auto server = serve(o);
    auto c = dial(server->port());
    Status s = c->set("big", std::string(2000, 'x'));
    QCOMPARE(s.code(), Status::Code::kInvalidInput);
    QVERIFY2(s.message().find("full") != std::string::npos, s.message().c_str());
    QVERIFY(c->set("small", "ok").ok());
    QCOMPARE(server->stats().stored_bytes, size_t(strlen("small") + 2));
  }

  void wrongTokenRefused_data() {
    QTest::addColumn<QByteArray>("token");
    QTest::newRow("another run's token") << QByteArray("fedcba9876543210-other-token");
    QTest::newRow("empty token") << QByteArray();
    QTest::newRow("prefix of the token") << QByteArray::fromStdString(kToken.substr(0, 8));
  }
  void wrongTokenRefused() {
    QFETCH(QByteArray, token);
    auto server = serve();
    auto o = client_options(server->port());
    o.token = token.toStdString();
    const auto t0 = Clock::now();
    auto c = RendezvousClient::connect(o);
    QVERIFY(!c.ok());
    QCOMPARE(c.status().code(), Status::Code::kInvalidInput);
    QVERIFY2(c.status().message().find("wrong run token") != std::string::npos, c.status().message().c_str());
    // Refused at once, not retried until the connect timeout (60 s): one refusal on the server.
    QVERIFY(ms_since(t0) < kSlackMs);
    QCOMPARE(server->stats().refused_token, size_t(1));
    QCOMPARE(server->stats().authenticated, size_t(0));
  }

  // Each row speaks the protocol wrongly on a raw connection, while a good client is connected.
  // The server must close the bad connection (at once, or at its hello/frame timeout), count it,
  // and go on serving the good client.
  void hostilePeers_data() {
    QTest::addColumn<bool>("authenticate");
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<bool>("hang_up");  // the peer closes right after sending
    QTest::addColumn<QString>("counted");
    QTest::newRow("http request") << false << QByteArray("GET / HTTP/1.1\r\nHost: x\r\n\r\n") << false << "protocol_errors";
    QTest::newRow("oversize length before hello") << false << be32(1u << 20) << false << "protocol_errors";
    QTest::newRow("oversize length after hello") << true << be32(0xffffffffu) + QByteArray("xx") << false << "protocol_errors";
    QTest::newRow("zero-length frame") << true << be32(0) << false << "protocol_errors";
    QTest::newRow("unknown opcode") << true << frame(QByteArray("\x63zz", 3)) << false << "protocol_errors";
    QTest::newRow("string longer than its frame") << true << frame(QByteArray("\x02", 1) + be32(1000) + "abc") << false
                                                  << "protocol_errors";
    QTest::newRow("request before hello") << false << frame(QByteArray("\x02", 1) + be32(1) + "k" + be32(1) + "v") << false
                                          << "protocol_errors";
    QTest::newRow("second hello") << true << hello_frame(kToken) << false << "protocol_errors";
    QTest::newRow("wrong magic") << false << hello_frame(kToken, "HTTP") << false << "protocol_errors";
    QTest::newRow("silent after connecting") << false << QByteArray() << false << "timed_out";
    QTest::newRow("stalls mid-frame") << true << be32(1000) + QByteArray(10, 'x') << false << "timed_out";
    QTest::newRow("hangs up mid-frame") << true << be32(1000) + QByteArray(10, 'x') << true << "";
    QTest::newRow("hangs up mid-hello") << false << hello_frame(kToken).left(7) << true << "";
    QTest::newRow("random bytes") << false << QByteArray::fromHex("8f00000c1d2e3f40aa55ff0001") << false << "protocol_errors";
  }
  void hostilePeers() {
    QFETCH(bool, authenticate);
    QFETCH(QByteArray, bytes);
    QFETCH(bool, hang_up);
    QFETCH(QString, counted);
    RendezvousServerOptions o;
    o.hello_timeout = milliseconds(300);
    o.frame_timeout = milliseconds(300);
    auto server = serve(o);
    auto good = dial(server->port());
    QVERIFY(good->set("before", "1").ok());

    const int fd = raw_connect(server->port());
    if (authenticate) {
      raw_send(fd, hello_frame(kToken));
      char reply[5];
      QCOMPARE(::recv(fd, reply, 5, MSG_WAITALL), ssize_t(5));
      QCOMPARE(int(reply[4]), 0);  // OK
    }
    raw_send(fd, bytes);
    if (hang_up) {
      ::close(fd);
    } else {
      QVERIFY2(closed_by_server(fd, static_cast<int>(kSlackMs)), "the server kept a bad connection open");
      ::close(fd);
    }
    // The good client is served throughout, and the server forgets the bad connection.
    QVERIFY(good->set("after", "2").ok());
    QCOMPARE(good->get("before").value(), std::string("1"));
    QVERIFY(eventually([&] { return server->stats().open_connections == 1; }));
    const RendezvousServerStats st = server->stats();
    if (counted == "protocol_errors") QCOMPARE(st.protocol_errors, size_t(1));
    if (counted == "timed_out") QCOMPARE(st.timed_out, size_t(1));
    if (counted.isEmpty()) QCOMPARE(st.protocol_errors + st.timed_out, size_t(0));
    QCOMPARE(st.keys, size_t(2));
  }

  // More connections than the limit: the extra one is told the server is busy; a client retries
  // until a slot frees up (here when an idle raw connection hits the hello timeout).
  void connectionLimit() {
    RendezvousServerOptions o;
    o.max_connections = 3;
    o.hello_timeout = milliseconds(400);
    auto server = serve(o);
    auto a = dial(server->port());
    auto b = dial(server->port());
    const int idle = raw_connect(server->port());
    QVERIFY(eventually([&] { return server->stats().open_connections == 3; }));

    auto quick = client_options(server->port());
    quick.connect_timeout = milliseconds(150);
    auto refused = RendezvousClient::connect(quick);
    QVERIFY(!refused.ok());
    QCOMPARE(refused.status().code(), Status::Code::kUnavailable);
    QVERIFY2(refused.status().message().find("maximum of 3 connections") != std::string::npos,
             refused.status().message().c_str());

    auto patient = RendezvousClient::connect(client_options(server->port()));
    QVERIFY2(patient.ok(), patient.status().message().c_str());
    QVERIFY(patient.value()->set("in", "1").ok());
    QVERIFY(server->stats().over_capacity >= 1);
    ::close(idle);
  }

  void portZeroPicksFreePorts() {
    auto s1 = serve();
    auto s2 = serve();
    QVERIFY(s1->port() > 0);
    QVERIFY(s2->port() > 0);
    QVERIFY(s1->port() != s2->port());
  }

  void clientRetriesUntilServerStarts() {
    int port = 0;
    {
      auto probe = serve();
      port = probe->port();
    }
    std::unique_ptr<RendezvousServer> late;
    std::thread t([&] {
      std::this_thread::sleep_for(milliseconds(300));
      RendezvousServerOptions o;
      o.port = port;
      late = serve(o);
    });
    const auto t0 = Clock::now();
    auto c = RendezvousClient::connect(client_options(port));
    t.join();
    QVERIFY2(c.ok(), c.status().message().c_str());
    QVERIFY(ms_since(t0) >= 250);
    QVERIFY(c.value()->set("k", "v").ok());
  }

  void unreachableOrSilentServerTimesOut_data() {
    QTest::addColumn<bool>("listening");
    QTest::newRow("nothing listens") << false;
    QTest::newRow("listens but never answers") << true;
  }
  void unreachableOrSilentServerTimesOut() {
    QFETCH(bool, listening);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    QCOMPARE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const int port = ntohs(a.sin_port);
    if (listening) QCOMPARE(::listen(fd, 16), 0);  // the kernel accepts; nobody reads
    auto o = client_options(port);
    o.connect_timeout = milliseconds(300);
    const auto t0 = Clock::now();
    auto c = RendezvousClient::connect(o);
    const double took = ms_since(t0);
    ::close(fd);
    QVERIFY(!c.ok());
    QCOMPARE(c.status().code(), Status::Code::kUnavailable);
    QVERIFY2(c.status().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos,
             c.status().message().c_str());
    QVERIFY(took >= 250 && took < 300 + kSlackMs);
  }

  // A client blocked in wait() when the server goes away returns at once with an error.
  void serverStopEndsAWait() {
    auto server = serve();
    auto c = dial(server->port());
    std::thread t([&] {
      std::this_thread::sleep_for(milliseconds(100));
      server->stop();
    });
    // Ended by the server going away (kUnavailable), not by the deadline (kTimeout).
    Status s = c->wait({"never"}, milliseconds(60000));
    t.join();
    QCOMPARE(s.code(), Status::Code::kUnavailable);
    QVERIFY2(s.message().find("'never'") != std::string::npos, s.message().c_str());
  }

  // After the server restarts (same port, same token) the client reconnects on a later call.
  void clientReconnectsAfterServerRestart() {
    auto server = serve();
    const int port = server->port();
    auto c = dial(port);
    QVERIFY(c->set("k", "1").ok());
    server.reset();
    RendezvousServerOptions o;
    o.port = port;
    server = serve(o);
    Status first = c->set("k", "2");  // may fail on the stale connection...
    if (!first) QCOMPARE(first.code(), Status::Code::kUnavailable);
    QVERIFY(c->set("k", "3").ok());  // ...but the next call reconnects
    QCOMPARE(c->get("k").value(), std::string("3"));
  }

  void serverRefusesBadOptions_data() {
    QTest::addColumn<QByteArray>("token");
    QTest::addColumn<QString>("host");
    QTest::addColumn<int>("code");
    QTest::newRow("empty token") << QByteArray() << "127.0.0.1" << int(Status::Code::kInvalidInput);
    QTest::newRow("oversize token") << QByteArray(int(kMaxTokenBytes) + 1, 't') << "127.0.0.1" << int(Status::Code::kInvalidInput);
    QTest::newRow("address not of this machine") << QByteArray("t") << "192.0.2.1" << int(Status::Code::kIoError);
  }
  void serverRefusesBadOptions() {
    QFETCH(QByteArray, token);
    QFETCH(QString, host);
    QFETCH(int, code);
    RendezvousServerOptions o;
    o.host = host.toStdString();
    o.token = token.toStdString();
    auto s = RendezvousServer::start(o);
    QVERIFY(!s.ok());
    QCOMPARE(int(s.status().code()), code);
  }
};

QTEST_APPLESS_MAIN(TestRendezvous)
#include "tst_rendezvous.moc"
