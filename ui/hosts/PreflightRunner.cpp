// PreflightRunner: launch::preflight() on a std::thread, results delivered by a queued call.
#include "hosts/PreflightRunner.h"

#include <QMetaObject>

#include <exception>

namespace launch = stagecraft::launch;

PreflightRunner::PreflightRunner(QObject* parent) : QObject(parent) {}

std::vector<launch::HostCheck> PreflightRunner::failedChecks(const std::vector<launch::SelectedHost>& hosts, const std::string& why) {
  std::vector<launch::HostCheck> checks;
  checks.reserve(hosts.size());
  for (const auto& h : hosts) {
    launch::HostCheck c;
    c.host = h.host;
    c.errors.push_back(h.host + ": preflight could not run: " + why);
    checks.push_back(std::move(c));
  }
  return checks;
}

PreflightRunner::~PreflightRunner() { join(); }

void PreflightRunner::join() {
  if (m_thread.joinable()) m_thread.join();
}

bool PreflightRunner::start(const std::vector<launch::SelectedHost>& hosts, const launch::PreflightOptions& options) {
  if (m_running || hosts.empty()) return false;
  join();
  m_running = true;
  try {
    startThread(hosts, options);
  } catch (const std::exception& e) {
    // The thread itself could not be started (std::system_error): the pass ends at once, failed
    // on every host, delivered like any other.
    QMetaObject::invokeMethod(
        this,
        [this, checks = failedChecks(hosts, e.what())]() mutable {
          m_results = std::move(checks);
          m_running = false;
          Q_EMIT finished();
        },
        Qt::QueuedConnection);
  }
  return true;
}

void PreflightRunner::startThread(const std::vector<launch::SelectedHost>& hosts, const launch::PreflightOptions& options) {
  m_thread = std::thread([this, hosts, options] {
    std::vector<launch::HostCheck> checks;
    try {
      checks = launch::preflight(hosts, options);
    } catch (const std::exception& e) {
      // Nothing may escape a thread (std::terminate would end the application): the pass fails
      // on every host with the reason (a thread the system would not start, memory exhausted).
      checks = failedChecks(hosts, e.what());
    }
    // Queued: runs on the GUI thread; dropped if the runner is destroyed first.
    QMetaObject::invokeMethod(
        this,
        [this, checks = std::move(checks)]() mutable {
          join();
          m_results = std::move(checks);
          m_running = false;
          Q_EMIT finished();
        },
        Qt::QueuedConnection);
  });
}
