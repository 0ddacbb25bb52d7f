// PreflightRunner: runs the engine's preflight (launch/preflight.h) over a list of hosts on a
// background thread, so the GUI stays responsive while SSH connections time out, and hands the
// per-host results back on the GUI thread (finished()).
//
// An exception on the worker thread (a thread the system would not start, memory exhausted) does
// not end the application: the pass reports one failed HostCheck per host with its message.
//
// One pass at a time: start() while a pass runs is refused. Destroying the runner waits for a
// pass that is still running (at most the SSH connect timeout plus the command timeout).
#pragma once

#include <QObject>

#include <string>
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
  // One failed check per host, each with the error "HOST: preflight could not run: WHY".
  static std::vector<stagecraft::launch::HostCheck> failedChecks(const std::vector<stagecraft::launch::SelectedHost>& hosts,
                                                                 const std::string& why);

 Q_SIGNALS:
  void finished();

 private:
  void join();
  void startThread(const std::vector<stagecraft::launch::SelectedHost>& hosts, const stagecraft::launch::PreflightOptions& options);

  std::thread m_thread;
  bool m_running = false;
  std::vector<stagecraft::launch::HostCheck> m_results;
};
