// The search on a QThread: the worker fills a Job; the GUI thread takes the result when the
// thread finishes. See LayoutSearch.h.
#include "layouts/LayoutSearch.h"

#include <QMetaObject>
#include <QPointer>
#include <QThread>

#include <limits>
#include <optional>

#include "common/Text.h"

namespace plan = stagecraft::plan;

// What one search shares between the worker and the GUI thread. The worker writes `result`
// before the thread finishes; the GUI thread reads it only after QThread::finished.
struct LayoutSearch::Job {
  std::atomic<bool> cancel{false};
  std::optional<stagecraft::Result<plan::SearchResult>> result;
  std::shared_ptr<const std::vector<plan::Candidate>> layouts;  // moved out of result on the worker
};

LayoutSearch::LayoutSearch(QObject* parent) : QObject(parent) {}

LayoutSearch::~LayoutSearch() { stopWorker(); }

void LayoutSearch::stopWorker() {
  if (!m_thread) return;
  m_job->cancel = true;
  m_thread->disconnect(this);
  m_thread->wait();
  delete m_thread;  // its queued finished() goes to a slot that finds m_job replaced
  m_thread = nullptr;
  m_job.reset();
}

void LayoutSearch::cancel() {
  if (!m_thread) return;
  stopWorker();
  Q_EMIT cancelled();
}

void LayoutSearch::start(const stagecraft::config::RunConfig& base) {
  stopWorker();
  auto job = std::make_shared<Job>();
  m_job = job;
  QPointer<LayoutSearch> self(this);
  m_thread = QThread::create([job, base, self] {
    plan::SearchOptions options;
    options.top = std::numeric_limits<int>::max();
    options.constraints.fits_only = false;
    options.expert_tp = base.parallel.expert_tp;  // the experts' own split is the document's, not searched
    options.progress = [job, self](double fraction) {
      if (job->cancel) return false;
      // Queued to the GUI thread; dropped there if the job was replaced meanwhile.
      QMetaObject::invokeMethod(
          self.data(),
          [job, self, fraction] {
            if (self && self->m_job == job) Q_EMIT self->progressed(fraction);
          },
          Qt::QueuedConnection);
      return true;
    };
    job->result = plan::search(base, options);
    if (job->result->ok()) job->layouts = std::make_shared<const std::vector<plan::Candidate>>(std::move((*job->result)->ranked));
  });
  QThread* thread = m_thread;
  connect(thread, &QThread::finished, this, [this, job] {
    if (m_job != job) return;  // superseded or cancelled: stopWorker() already ended that thread
    m_thread->wait();
    m_thread->deleteLater();
    m_thread = nullptr;
    m_job.reset();
    if (job->cancel) return;
    auto& r = *job->result;
    if (!r.ok()) {
      Q_EMIT failed(qs(r.status().message()));
      return;
    }
    m_layouts = job->layouts;
    m_evaluated = r->evaluated;
    m_fitting = r->fitting;
    m_seconds = r->seconds;
    Q_EMIT finished();
  });
  Q_EMIT started();
  thread->start();
}
