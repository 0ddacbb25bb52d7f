// Layer-to-stage partitions: uniform, balanced (optimal bottleneck). See partition.h.
#include "stagecraft/plan/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace stagecraft::plan {

std::vector<int> uniform_counts(int layers, int stages) {
  std::vector<int> counts(static_cast<size_t>(std::max(stages, 0)), 0);
  if (stages <= 0) return counts;
  const int q = layers / stages;
  const int r = layers % stages;
  const int lo = (stages - r) / 2;
  for (int s = 0; s < stages; ++s) counts[static_cast<size_t>(s)] = q + (s >= lo && s < lo + r ? 1 : 0);
  return counts;
}

std::vector<int> counts_to_stage_ids(const std::vector<int>& counts) {
  std::vector<int> ids;
  for (size_t s = 0; s < counts.size(); ++s) ids.insert(ids.end(), static_cast<size_t>(counts[s]), static_cast<int>(s));
  return ids;
}

std::vector<int> stage_ids_to_counts(const std::vector<int>& stage_ids, int stages) {
  std::vector<int> counts(static_cast<size_t>(std::max(stages, 0)), 0);
  for (int id : stage_ids) {
    if (id >= 0 && id < stages) ++counts[static_cast<size_t>(id)];
  }
  return counts;
}

std::vector<double> stage_costs(const StageCostModel& cost, const std::vector<int>& counts) {
  std::vector<double> out(counts.size(), 0.0);
  size_t layer = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    for (int i = 0; i < counts[s] && layer < cost.layer.size(); ++i) out[s] += cost.layer[layer++];
  }
  if (!out.empty()) {
    out.front() += cost.first;
    out.back() += cost.last;
  }
  return out;
}

std::vector<double> stage_memory(const StageMemoryModel& memory, const std::vector<int>& counts) {
  std::vector<double> out(counts.size(), 0.0);
  size_t layer = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    const double inflight = s < memory.inflight.size() ? memory.inflight[s] : 1.0;
    for (int i = 0; i < counts[s] && layer < memory.layer_static.size(); ++i, ++layer) {
      out[s] += memory.layer_static[layer] + inflight * memory.layer_activation[layer];
    }
  }
  if (!out.empty()) {
    out.front() += memory.first;
    out.back() += memory.last;
  }
  return out;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The greedy sweep behind the bisection. For a bottleneck budget B (and memory budget M), each
// stage but the last takes the longest run of layers that fits both budgets while leaving at
// least one layer for every later stage; the last stage takes the rest. Taking the longest
// feasible run is never worse for the stages that follow (their segments only shrink), so the
// sweep succeeds exactly when some split meets the budgets.
class Sweeper {
 public:
  Sweeper(const StageCostModel& cost, const StageMemoryModel* memory, int stages)
      : cost_(cost), memory_(memory), stages_(stages), layers_(static_cast<int>(cost.layer.size())) {
    cost_prefix_.assign(static_cast<size_t>(layers_) + 1, 0.0);
    for (int i = 0; i < layers_; ++i) cost_prefix_[static_cast<size_t>(i) + 1] = cost_prefix_[static_cast<size_t>(i)] + cost.layer[static_cast<size_t>(i)];
    if (memory_) {
      static_prefix_.assign(static_cast<size_t>(layers_) + 1, 0.0);
      act_prefix_.assign(static_cast<size_t>(layers_) + 1, 0.0);
      for (int i = 0; i < layers_; ++i) {
        static_prefix_[static_cast<size_t>(i) + 1] = static_prefix_[static_cast<size_t>(i)] + memory->layer_static[static_cast<size_t>(i)];
        act_prefix_[static_cast<size_t>(i) + 1] = act_prefix_[static_cast<size_t>(i)] + memory->layer_activation[static_cast<size_t>(i)];
      }
    }
  }

  struct Probe {
    bool feasible = false;
    double max_cost = 0.0;        // feasible: the bottleneck of the split found
    double max_memory = 0.0;      // feasible: its memory peak
    double next_cost = kInf;      // infeasible: the smallest budget that changes the sweep
    std::vector<int> counts;      // feasible: the split
  };

  double segment_cost(int k, int a, int b) const {
    double c = cost_prefix_[static_cast<size_t>(b)] - cost_prefix_[static_cast<size_t>(a)];
    if (k == 0) c += cost_.first;
    if (k == stages_ - 1) c += cost_.last;
    return c;
  }
  double segment_memory(int k, int a, int b) const {
    if (!memory_) return 0.0;
    const double inflight = static_cast<size_t>(k) < memory_->inflight.size() ? memory_->inflight[static_cast<size_t>(k)] : 1.0;
    double m = static_prefix_[static_cast<size_t>(b)] - static_prefix_[static_cast<size_t>(a)] +
               inflight * (act_prefix_[static_cast<size_t>(b)] - act_prefix_[static_cast<size_t>(a)]);
    if (k == 0) m += memory_->first;
    if (k == stages_ - 1) m += memory_->last;
    return m;
  }

  Probe run(double budget, double memory_budget) const {
    Probe p;
    p.counts.reserve(static_cast<size_t>(stages_));
    int pos = 0;
    for (int k = 0; k < stages_ - 1; ++k) {
      const int max_end = layers_ - (stages_ - 1 - k);  // leave one layer per later stage
      // Largest end in [pos+1, max_end] with cost and memory within budget (both rise with end).
      int lo = pos, hi = max_end;
      while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (segment_cost(k, pos, mid) <= budget && segment_memory(k, pos, mid) <= memory_budget) lo = mid;
        else hi = mid - 1;
      }
      if (lo == pos) {  // not even one layer fits
        p.next_cost = std::min(p.next_cost, segment_cost(k, pos, pos + 1));
        return p;
      }
      if (lo < max_end) p.next_cost = std::min(p.next_cost, segment_cost(k, pos, lo + 1));
      p.max_cost = std::max(p.max_cost, segment_cost(k, pos, lo));
      p.max_memory = std::max(p.max_memory, segment_memory(k, pos, lo));
      p.counts.push_back(lo - pos);
      pos = lo;
    }
    const double last_cost = segment_cost(stages_ - 1, pos, layers_);
    const double last_memory = segment_memory(stages_ - 1, pos, layers_);
    if (last_cost > budget || last_memory > memory_budget) {
      if (last_cost > budget) p.next_cost = std::min(p.next_cost, last_cost);
      return p;
    }
    p.max_cost = std::max(p.max_cost, last_cost);
    p.max_memory = std::max(p.max_memory, last_memory);
    p.counts.push_back(layers_ - pos);
    p.feasible = true;
    return p;
  }

  double total_cost() const { return cost_prefix_.back() + cost_.first + cost_.last; }

 private:
  const StageCostModel& cost_;
  const StageMemoryModel* memory_;
  int stages_;
  int layers_;
  std::vector<double> cost_prefix_, static_prefix_, act_prefix_;
};

}  // namespace

Result<std::vector<int>> balanced_counts(const StageCostModel& cost, int stages, const StageMemoryModel* memory) {
  const int layers = static_cast<int>(cost.layer.size());
  if (stages < 1) return Status::invalid_input("a pipeline needs at least one stage");
  if (layers < stages) {
    return Status::invalid_input("cannot place " + std::to_string(layers) + " layers on " + std::to_string(stages) +
                                 " stages; every stage needs at least one layer");
  }
  for (double c : cost.layer) {
    if (!(c >= 0.0) || !std::isfinite(c)) return Status::invalid_input("layer costs must be finite and non-negative");
  }
  if (!(cost.first >= 0.0) || !(cost.last >= 0.0)) return Status::invalid_input("stage costs must be non-negative");
  if (memory && (memory->layer_static.size() != cost.layer.size() || memory->layer_activation.size() != cost.layer.size())) {
    return Status::internal("memory model has " + std::to_string(memory->layer_static.size()) + " layers, cost model " +
                            std::to_string(layers));
  }

  const Sweeper sweeper(cost, memory, stages);
  // Lower bound: the average, and every stage holds at least its heaviest single piece.
  double lo = sweeper.total_cost() / stages;
  for (double c : cost.layer) lo = std::max(lo, c);
  lo = std::max({lo, cost.first + cost.layer.front(), cost.last + cost.layer.back()});
  // Upper bound: any split's bottleneck, e.g. the uniform one's.
  Sweeper::Probe best = sweeper.run(kInf, kInf);  // feasible: pure greedy with unlimited budget
  {
    const auto uni = uniform_counts(layers, stages);
    const auto costs = stage_costs(cost, uni);
    const double uni_max = *std::max_element(costs.begin(), costs.end());
    Sweeper::Probe p = sweeper.run(uni_max, kInf);
    if (p.feasible) best = std::move(p);
  }
  double hi = best.max_cost;

  // Bisection whose infeasible probes raise lo to the next attainable bottleneck, so it lands on
  // the optimum exactly (up to rounding), typically in a few dozen probes.
  for (int iter = 0; iter < 200 && lo < hi; ++iter) {
    const double tol = 1e-12 * std::max(1.0, std::abs(hi));
    if (hi - lo <= tol) break;
    // Probe lo itself first when it is a value the sweep reported attainable.
    const double mid = iter % 2 == 0 ? lo : lo + (hi - lo) / 2;
    Sweeper::Probe p = sweeper.run(mid, kInf);
    if (p.feasible) {
      hi = p.max_cost;
      best = std::move(p);
    } else {
      lo = std::max(p.next_cost, std::nextafter(mid, kInf));
    }
  }
  const double bottleneck = hi;

  if (memory) {
    // Tie-break: the smallest memory peak among splits whose bottleneck stays optimal.
    const double budget = bottleneck * (1.0 + 1e-9);
    double mhi = best.max_memory;
    double mlo = 0.0;
    for (int iter = 0; iter < 40 && mhi - mlo > 1e-6 * mhi; ++iter) {
      const double mid = mlo + (mhi - mlo) / 2;
      Sweeper::Probe p = sweeper.run(budget, mid);
      if (p.feasible) {
        mhi = p.max_memory;
        best = std::move(p);
      } else {
        mlo = mid;
      }
    }
  }
  return best.counts;
}

}  // namespace stagecraft::plan
