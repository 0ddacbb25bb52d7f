// LayoutSearch: runs the engine's search (plan::search) on a worker thread so the window stays
// responsive, with progress and cancel. It searches without constraints and keeps every layout,
// fitting or not (fits_only off, no limit on the count); views filter that list with
// plan::allows(), which gives the same layouts in the same order as a constrained search.
//
// Contract: start() cancels a search still running (its result is dropped) and begins a new one;
// exactly one of finished() or failed() follows each start() that is not superseded or cancelled;
// cancel() stops the running search, which then reports nothing. Signals arrive in the GUI
// thread. Destroying the object cancels and waits for the worker.
#pragma once

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/plan/search.h"

class QThread;

class LayoutSearch : public QObject {
  Q_OBJECT

 public:
  explicit LayoutSearch(QObject* parent = nullptr);
  ~LayoutSearch() override;

  void start(const stagecraft::config::RunConfig& base);
  void cancel();
  bool isRunning() const { return m_thread != nullptr; }

  // The last finished search: every layout, fastest first (plan::search's order). Shared, never
  // copied on the GUI thread; never null (empty before the first search).
  std::shared_ptr<const std::vector<stagecraft::plan::Candidate>> layouts() const { return m_layouts; }
  // Layouts estimated, fitting, wall seconds of the last finished search.
  long long evaluated() const { return m_evaluated; }
  long long fitting() const { return m_fitting; }
  double seconds() const { return m_seconds; }

 Q_SIGNALS:
  void started();
  // Fraction of the search done, 0 to 1.
  void progressed(double fraction);
  void finished();
  // The engine's one-line message.
  void failed(const QString& message);
  void cancelled();

 private:
  struct Job;
  void stopWorker();

  QThread* m_thread = nullptr;
  std::shared_ptr<Job> m_job;
  std::shared_ptr<const std::vector<stagecraft::plan::Candidate>> m_layouts =
      std::make_shared<const std::vector<stagecraft::plan::Candidate>>();
  long long m_evaluated = 0;
  long long m_fitting = 0;
  double m_seconds = 0;
};
