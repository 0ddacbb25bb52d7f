// bench_store: how fast the run history takes in a live run's metric events (issue 6 asks for
// at least 50,000 events/s). Three measurements on a fresh SQLite file in a temporary folder:
//   1. RunRecorder end to end: step events from R ranks through on_event() until finish() has
//      committed the last batch (each event is two rows: raw JSON and a metrics row);
//   2. the same starting from the JSON text lines the supervisor reads (decode_event + on_event);
//   3. RunStore::append() alone with metrics rows in batches of fixed size.
// Prints events/s, rows/s and batch sizes; asserts nothing.
//
//   build/bin/bench_store [events]     (default 200000)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "stagecraft/core/json.h"
#include "stagecraft/store/run_recorder.h"
#include "stagecraft/store/run_store.h"

using namespace stagecraft;
using namespace stagecraft::store;

namespace {

using Clock = std::chrono::steady_clock;

Json step_event(int rank, int step) {
  Json e = Json::object();
  e.set("event", "step");
  e.set("rank", rank);
  e.set("step", step);
  e.set("loss", 5.0 / (1.0 + step * 1e-3));
  e.set("lr", 3e-4);
  e.set("grad_norm", 0.75);
  e.set("tokens_per_s", 123456.5);
  e.set("step_ms", 41.25);
  e.set("mem_bytes", 1073741824LL);
  return e;
}

std::string g_dir;
int g_files = 0;

std::unique_ptr<RunStore> fresh_store(int64_t* id) {
  const std::string path = g_dir + "/bench" + std::to_string(++g_files) + ".sqlite";
  auto st = RunStore::open(path);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_store: %s\n", st.status().message().c_str());
    std::exit(1);
  }
  NewRun r;
  r.name = "bench";
  r.world_size = 8;
  r.supervisor = this_process_identity();
  *id = st.value()->create_run(r).value();
  return std::move(st).value();
}

void recorder_row(const char* what, int events, int ranks, size_t flush_rows, bool from_text) {
  int64_t id = 0;
  auto st = fresh_store(&id);
  const int steps = events / ranks;
  std::vector<launch::WorkerEvent> evs;
  std::vector<std::string> lines;
  for (int s = 1; s <= steps; ++s) {
    for (int r = 0; r < ranks; ++r) {
      if (from_text) {
        lines.push_back(step_event(r, s).dump());
      } else {
        evs.push_back(launch::decode_event(step_event(r, s).dump()).value());
      }
    }
  }
  RecorderOptions o;
  o.flush_rows = flush_rows;
  const auto t0 = Clock::now();
  RunRecorder rec(*st, id, o);
  const size_t n = from_text ? lines.size() : evs.size();
  for (size_t i = 0; i < n; ++i) {
    const int rank = static_cast<int>(i % static_cast<size_t>(ranks));
    if (from_text) {
      auto e = launch::decode_event(lines[i]);
      rec.on_event(rank, e.value());
    } else {
      rec.on_event(rank, evs[i]);
    }
  }
  const Status s = rec.finish();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const RecorderStats stats = rec.stats();
  const auto rows = stats.events + stats.metrics + stats.logs;
  std::printf("%-34s %9zu %7zu %12.0f %12.0f %8llu %10.0f %9llu  %s\n", what, n, flush_rows, n / secs, rows / secs,
              static_cast<unsigned long long>(stats.batches), stats.batches ? double(rows) / stats.batches : 0.0,
              static_cast<unsigned long long>(stats.max_batch_rows), s ? "" : s.message().c_str());
}

void append_row(int rows, size_t batch) {
  int64_t id = 0;
  auto st = fresh_store(&id);
  Batch b;
  const auto t0 = Clock::now();
  int written = 0, batches = 0;
  while (written < rows) {
    b.clear();
    for (size_t i = 0; i < batch && written < rows; ++i, ++written) {
      MetricRow m;
      m.rank = written % 8;
      m.step = written / 8;
      m.loss = 2.0;
      m.lr = 3e-4;
      m.grad_norm = 1.0;
      m.tokens_per_s = 1e5;
      m.step_ms = 40;
      m.mem_bytes = 1 << 30;
      m.time = 1.7e9;
      b.metrics.push_back(m);
    }
    if (Status s = st->append(id, b); !s) {
      std::fprintf(stderr, "bench_store: %s\n", s.message().c_str());
      std::exit(1);
    }
    ++batches;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%-34s %9d %7zu %12s %12.0f %8d %10zu %9zu\n", "append() metrics rows only", rows, batch, "-", rows / secs, batches, batch, batch);
}

}  // namespace

int main(int argc, char** argv) {
  const int events = argc > 1 ? std::atoi(argv[1]) : 200000;
  if (events <= 0) {
    std::fprintf(stderr, "bench_store: usage: bench_store [events > 0]\n");
    return 2;
  }
  char tmpl[] = "/tmp/bench_store.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("bench_store: mkdtemp");
    return 1;
  }
  g_dir = tmpl;
  std::printf("run history ingestion, %d step events, 8 ranks, WAL + synchronous=NORMAL, file in %s\n\n", events, tmpl);
  std::printf("%-34s %9s %7s %12s %12s %8s %10s %9s\n", "path", "events", "flush", "events/s", "rows/s", "batches", "rows/batch",
              "max batch");
  for (size_t flush : {1024, 4096, 16384}) recorder_row("RunRecorder (typed events)", events, 8, flush, false);
  recorder_row("RunRecorder (JSON text lines)", events, 8, 4096, true);
  for (size_t batch : {100, 1000, 10000}) append_row(events, batch);
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
  return 0;
}
