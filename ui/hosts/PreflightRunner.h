// PreflightRunner: runs the engine's preflight (launch/preflight.h) over a list of hosts on a
// background thread, so the GUI stays responsive while SSH connections time out, and hands the
// per-host results back on the GUI thread (finished()).
//
// One pass at a time: start() while a pass runs is refused. Destroying the runner waits for a
// pass that is still running (at most the SSH connect timeout plus the command timeout).
#pragma once

#include <QObject>

#include <thread>
#include <vector>

#include "stagecraft/launch/preflight.h"

class PreflightRunner : public QObject {
  Q_OBJECT

 public:
  explicit PreflightRunner(QObject* parent = nullptr);
  ~PreflightRunner() override;

  // Starts a pass; false when one is running or `hosts` is empty.
  bool start(const std::vector<stagecraft::launch::SelectedHost>& hosts, const stagecraft::launch::PreflightOptions& options);
  bool isRunning() const { return m_running; }
  // The last pass's results, in the order of its hosts.
  const std::vector<stagecraft::launch::HostCheck>& results() const { return m_results; }

 Q_SIGNALS:
  void finished();

 private:
  void join();

  std::thread m_thread;
  bool m_running = false;
  std::vector<stagecraft::launch::HostCheck> m_results;
};
