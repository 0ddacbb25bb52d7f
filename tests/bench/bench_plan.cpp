// bench_plan: how fast planning is. The balanced partition (1,000 layers on 64 stages, 10,000 on
// 512; targets under 1 ms each) and a full plan of 1,024 nodes x 8 GPUs with its JSON (target
// under 10 ms together), the sizes plan.h promises for re-planning on every
// edit. Prints the median and minimum wall time over repeated runs, and the median CPU time of
// the thread (which a busy machine inflates less, since time spent descheduled does not count);
// asserts nothing.
//
//   build/bin/bench_plan [repeats]     (default 200)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/partition.h"
#include "stagecraft/plan/plan.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  std::string what;
  double median_ms = 0, min_ms = 0, cpu_median_ms = 0;
  std::string note;
};

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Runs `f` `repeats` times after one warm-up run; times in milliseconds.
Row measure(const std::string& what, int repeats, const std::function<std::string()>& f) {
  Row row{what, 0, 0, 0, f()};
  std::vector<double> ms, cpu;
  ms.reserve(static_cast<size_t>(repeats));
  cpu.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    const double c0 = thread_cpu_ms();
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    cpu.push_back(thread_cpu_ms() - c0);
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  row.median_ms = ms[ms.size() / 2];
  row.min_ms = ms.front();
  row.cpu_median_ms = cpu[cpu.size() / 2];
  return row;
}

// Layer costs like a real model's: equal layers with a little noise, the head heavier.
stagecraft::plan::StageCostModel costs(int layers, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  stagecraft::plan::StageCostModel m;
  for (int i = 0; i < layers; ++i) m.layer.push_back(noise(rng));
  m.first = 0.1;
  m.last = 2.5;
  return m;
}

stagecraft::plan::StageMemoryModel memory(int layers, int stages) {
  stagecraft::plan::StageMemoryModel m;
  m.layer_static.assign(static_cast<size_t>(layers), 1.0);
  m.layer_activation.assign(static_cast<size_t>(layers), 0.5);
  for (int k = 0; k < stages; ++k) m.inflight.push_back(stages - k);  // 1F1B
  m.first = 3.0;
  m.last = 3.0;
  return m;
}

std::string counts_note(const std::vector<int>& c) {
  const auto [lo, hi] = std::minmax_element(c.begin(), c.end());
  return std::to_string(*lo) + ".." + std::to_string(*hi) + " layers per stage";
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  std::vector<Row> rows;

  for (const auto& [layers, stages] : {std::pair{1000, 64}, std::pair{10000, 512}}) {
    const auto cost = costs(layers, 42);
    const auto mem = memory(layers, stages);
    const std::string size = std::to_string(layers) + " layers / " + std::to_string(stages) + " stages";
    rows.push_back(measure("balanced, " + size, repeats, [&] {
      auto c = stagecraft::plan::balanced_counts(cost, stages);
      return counts_note(c.value());
    }));
    rows.push_back(measure("balanced + memory tie-break, " + size, repeats, [&] {
      auto c = stagecraft::plan::balanced_counts(cost, stages, &mem);
      return counts_note(c.value());
    }));
  }

  rows.front().note += "; target < 1 ms";
  rows[2].note += "; target < 1 ms";

  const std::string path = STAGECRAFT_SOURCE_DIR "/configs/gpt3-175b-1024x8.yaml";
  auto config = stagecraft::config::load_config_file(path);
  if (!config.ok()) {
    std::fprintf(stderr, "bench_plan: %s\n", config.status().message().c_str());
    return 1;
  }
  auto plan = stagecraft::plan::make_plan(config.value());
  if (!plan.ok()) {
    std::fprintf(stderr, "bench_plan: %s\n", plan.status().message().c_str());
    return 1;
  }
  rows.push_back(measure("make_plan, gpt3-175b 1024 x 8 GPUs", repeats, [&] {
    auto p = stagecraft::plan::make_plan(config.value());
    return std::to_string(p->topology.world_size()) + " ranks, " + std::to_string(p->num_stages()) + " chunks";
  }));
  rows.push_back(measure("plan_to_json, the same plan", repeats, [&] {
    const auto j = stagecraft::plan::plan_to_json(plan.value());
    return std::to_string(j.find("ranks")->size()) + " ranks in the document";
  }));
  rows.push_back(measure("plan_to_json + dump (the CLI's --json)", repeats, [&] {
    const std::string text = stagecraft::plan::plan_to_json(plan.value()).dump();
    return std::to_string(text.size() / 1024) + " KiB";
  }));
  rows.push_back(measure("make_plan + plan_to_json", repeats, [&] {
    auto p = stagecraft::plan::make_plan(config.value());
    const auto j = stagecraft::plan::plan_to_json(p.value());
    return std::string(j.find("world_size") ? "target < 10 ms" : "?");
  }));

  std::printf("bench_plan: %d runs each after one warm-up\n\n", repeats);
  std::printf("%-54s %10s %10s %10s   %s\n", "what", "median ms", "min ms", "cpu ms", "result");
  for (const auto& r : rows) {
    std::printf("%-54s %10.3f %10.3f %10.3f   %s\n", r.what.c_str(), r.median_ms, r.min_ms, r.cpu_median_ms, r.note.c_str());
  }
  return 0;
}
