// PreflightRunner: launch::preflight() on a std::thread, results delivered by a queued call.
#include "hosts/PreflightRunner.h"

#include <QMetaObject>

namespace launch = stagecraft::launch;

PreflightRunner::PreflightRunner(QObject* parent) : QObject(parent) {}

PreflightRunner::~PreflightRunner() { join(); }

void PreflightRunner::join() {
  if (m_thread.joinable()) m_thread.join();
}

bool PreflightRunner::start(const std::vector<launch::SelectedHost>& hosts, const launch::PreflightOptions& options) {
  if (m_running || hosts.empty()) return false;
  join();
  m_running = true;
  m_thread = std::thread([this, hosts, options] {
    auto checks = launch::preflight(hosts, options);
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
  return true;
}
