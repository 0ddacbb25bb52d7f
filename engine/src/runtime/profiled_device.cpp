// ProfiledDevice: see profiled_device.h.
#include "stagecraft/runtime/profiled_device.h"

#include <algorithm>
#include <cstdio>

namespace stagecraft::runtime {

namespace {
constexpr size_t kReadEvery = 4096;  // kInStep: calls whose marks are read back at once
}  // namespace

KernelTime& ProfiledDevice::group(const KernelCall& call) {
  KernelTime& k = groups_[{call.name, call.shape}];
  if (k.calls == 0) {
    k.name = call.name;
    k.shape = call.shape;
  }
  ++k.calls;
  k.flops += call.flops;
  return k;
}

void ProfiledDevice::Timer::enter(const KernelCall& /*call*/) const {
  d_.mu_.lock();
  if (d_.timing_ == Timing::kAlone) {
    const auto before = Clock::now();
    (void)d_.inner_.synchronize();  // a failure stays recorded by the device and surfaces at the caller's next synchronize
    // What the device still had to do when the kernel was called: copies and transfers issued
    // since the last kernel ended.
    if (d_.any_) d_.between_s_ += std::chrono::duration<double>(Clock::now() - before).count();
  }
  d_.started_ = Clock::now();
  d_.begin_mark_ = d_.clock_ ? d_.clock_->mark() : -1;
}

void ProfiledDevice::Timer::leave(const KernelCall& call) const {
  const int end_mark = d_.begin_mark_ >= 0 ? d_.clock_->mark() : -1;
  std::vector<double> at;
  if (d_.timing_ == Timing::kAlone) {
    if (end_mark >= 0) at = d_.clock_->read();
    (void)d_.inner_.synchronize();
  }
  const double on_host = std::chrono::duration<double>(Clock::now() - d_.started_).count();
  KernelTime& k = d_.group(call);
  k.host_seconds += on_host;
  d_.any_ = true;
  if (d_.timing_ == Timing::kInStep && end_mark >= 0) {
    d_.pending_.push_back({&k, d_.begin_mark_, end_mark, on_host});
    if (d_.pending_.size() >= kReadEvery) d_.read_marks();
  } else {
    const bool on_device = at.size() > size_t(end_mark) && end_mark > d_.begin_mark_;
    k.seconds += on_device ? at[size_t(end_mark)] - at[size_t(d_.begin_mark_)] : on_host;
    if (on_device) d_.clock_used_ = true;
  }
  d_.mu_.unlock();
}

void ProfiledDevice::read_marks() const {
  if (pending_.empty()) return;
  const std::vector<double> at = clock_->read();
  int last_end = -1;  // the call before's end mark, in this read's numbering
  for (const Pending& p : pending_) {
    if (at.size() <= size_t(p.end)) {  // the clock failed: the host's time of the call, for what it is worth
      p.group->seconds += p.host_seconds;
      continue;
    }
    p.group->seconds += at[size_t(p.end)] - at[size_t(p.begin)];
    if (last_end >= 0) between_s_ += at[size_t(p.begin)] - at[size_t(last_end)];
    last_end = p.end;
    clock_used_ = true;
  }
  pending_.clear();
}

std::vector<KernelTime> ProfiledDevice::kernels() const {
  std::lock_guard<std::mutex> lock(mu_);
  read_marks();
  std::vector<KernelTime> out;
  for (const auto& [key, k] : groups_) out.push_back(k);
  std::stable_sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return out;
}

double ProfiledDevice::between_kernels_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  read_marks();
  return between_s_;
}

bool ProfiledDevice::device_clock() const {
  std::lock_guard<std::mutex> lock(mu_);
  read_marks();
  return clock_used_;
}

void ProfiledDevice::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) (void)clock_->read();  // forgets the marks
  pending_.clear();
  groups_.clear();
  between_s_ = 0;
  any_ = false;
  clock_used_ = false;
}

std::string ProfiledDevice::format(int steps) const {
  const double per = steps > 1 ? 1.0 / steps : 1.0;
  const std::vector<KernelTime> ks = kernels();
  double total = 0, host_total = 0;
  std::map<std::string, std::pair<double, double>> by_name;  // seconds, flops
  for (const auto& k : ks) {
    total += k.seconds;
    host_total += k.host_seconds;
    by_name[k.name].first += k.seconds;
    by_name[k.name].second += k.flops;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-26s %-34s %7s %10s %9s %6s %8s\n", "kernel", "shape", "calls", steps > 1 ? "ms/step" : "ms", "ms/call",
                "share", "TFLOP/s");
  out += line;
  auto tflops = [](double flops, double s) { return flops > 0 && s > 0 ? flops / s / 1e12 : 0.0; };
  for (const auto& k : ks) {
    char tf[16] = "";
    if (const double t = tflops(k.flops, k.seconds); t > 0) std::snprintf(tf, sizeof tf, "%.1f", t);
    std::snprintf(line, sizeof line, "%-26s %-34s %7.0f %10.3f %9.4f %5.1f%% %8s\n", k.name.c_str(), k.shape.c_str(),
                  static_cast<double>(k.calls) * per, 1e3 * k.seconds * per, 1e3 * k.seconds / static_cast<double>(std::max<long long>(1, k.calls)),
                  total > 0 ? 100 * k.seconds / total : 0.0, tf);
    out += line;
  }
  out += "\nper kernel:\n";
  std::vector<std::pair<std::string, std::pair<double, double>>> names(by_name.begin(), by_name.end());
  std::stable_sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  for (const auto& [name, sf] : names) {
    const double t = tflops(sf.second, sf.first);
    std::snprintf(line, sizeof line, "  %-26s %10.3f ms %5.1f%%", name.c_str(), 1e3 * sf.first * per, total > 0 ? 100 * sf.first / total : 0.0);
    out += line;
    if (t > 0) {
      std::snprintf(line, sizeof line, "  %.1f TFLOP/s", t);
      out += line;
    }
    out += "\n";
  }
  std::snprintf(line, sizeof line, "  %-26s %10.3f ms\n  %-26s %10.3f ms\n", "all kernels", 1e3 * total * per, "between kernels",
                1e3 * between_kernels_seconds() * per);
  out += line;
  if (timing_ == Timing::kAlone && device_clock()) {
    std::snprintf(line, sizeof line, "  %-26s %10.3f ms (the host's time of the calls, %.3f ms, less the device's)\n", "launches and waits",
                  1e3 * (host_total - total) * per, 1e3 * host_total * per);
    out += line;
  }
  return out;
}

}  // namespace stagecraft::runtime
