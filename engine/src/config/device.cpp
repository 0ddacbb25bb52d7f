// The device catalog and the resolution of a config's device. See device.h.
//
// Sources: NVIDIA datasheets (V100 SXM2, A100 SXM4, H100 SXM5 / PCIe, H200 SXM, L40S, GeForce
// RTX 4090 / Ada whitepaper), DGX-1 / DGX A100 / DGX H100 system guides for the networks.
// Dense peaks only: the sparse figures of the datasheets are twice these.
#include "stagecraft/config/device.h"

#include "stagecraft/config/device_profile.h"
#include "stagecraft/core/text.h"
#include "stagecraft/core/units.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace stagecraft::config {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}


// This machine, for the CPU engine: physical memory, and a nominal fp32 peak of 2.5 GHz x 32
// FLOPs per cycle (two AVX2 FMA units of 8 floats) per core. Loopback TCP (Gloo) between
// processes and a 10 Gb/s Ethernet between machines.
DeviceSpec cpu_device() {
  DeviceSpec d;
  d.name = "cpu";
  d.is_cpu = true;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  d.memory_gib = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) / (1024.0 * 1024.0 * 1024.0) : 16.0;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  d.cores = static_cast<int>(cores);
  d.fp32_tflops = cores * 2.5e9 * 32 / 1e12;
  d.tf32_tflops = d.fp32_tflops;
  d.memory_gbps = 50;
  d.intra_link = "loopback TCP";
  d.intra_node_gbps = 40;
  d.network = "10 Gb/s Ethernet";
  d.inter_node_gbps = 10;
  // The cost model's constants for the CPU engine, fitted (plan/calibrate.h, from the previous
  // values, TP's held) to the tiny GPT's dp 2 x pp 2 and tp 2 runs on a 2-core machine, five runs
  // of each recorded 2026-11-29 (tests/engine/data/cpu_calibration_runs.json;
  // tests/engine/tst_calibrate.cpp holds every recorded layout within 15% with them):
  // efficiencies against the nominal peak above, Gloo's loopback collectives taking half a
  // millisecond per ring step. Another machine gets its own with `stagecraft-cli calibrate`.
  d.calibration.gemm_efficiency = 1.795;
  d.calibration.gemm_half_dim = 8.928;
  d.calibration.memory_efficiency = 1.485;
  d.calibration.link_efficiency = 0.1123;
  d.calibration.collective_step_s = 0.0004967;
  d.calibration.kernel_s = 1.492e-06;
  d.calibration.step_overhead_s = 0.002811;
  // Tensor parallelism's all-reduces, measured rather than fitted: tests/bench/bench_tp_allreduce
  // (2026-11-29, 2 cores, AMD EPYC, 2 processes of one thread) timed Gloo's all-reduce of 64 KiB to
  // 2 MiB between two ranks, each call after a millisecond of work as in a training step:
  // about 2.1 ms per call whatever the size (the line through the sizes: 2.07 ms + bytes at
  // 1 GB/s), two ring steps of 1.03 ms each, at a fifth of the 5 GB/s loopback figure above.
  d.calibration.tp_step_s = 1.03e-3;
  d.calibration.tp_link_efficiency = 0.2;
  char buf[96];
  std::snprintf(buf, sizeof buf, "this machine: %u cores, CPU engine (fp32, OpenBLAS + Gloo)", cores);
  d.description = buf;
  return d;
}

DeviceSpec gpu(const char* name, const char* description, double mem_gib, double fp32, double tf32, double fp16, double bf16,
               double mem_gbps, const char* link, double link_gbps, const char* network, double net_gbps) {
  DeviceSpec d;
  d.name = name;
  d.description = description;
  d.memory_gib = mem_gib;
  d.fp32_tflops = fp32;
  d.tf32_tflops = tf32;
  d.fp16_tflops = fp16;
  d.bf16_tflops = bf16;
  d.memory_gbps = mem_gbps;
  d.intra_link = link;
  d.intra_node_gbps = link_gbps;
  d.network = network;
  d.inter_node_gbps = net_gbps;
  return d;
}

// The best published MFU (model FLOPs utilisation, dense training of large transformers) of a
// device, with where it comes from.
DeviceSpec with_published_mfu(DeviceSpec d, double mfu, const char* source) {
  d.published_mfu = mfu;
  d.published_mfu_source = source;
  return d;
}

// The H200 as Stagecraft's own CUDA engine trains on it: the H200's figures, the cost model's
// constants fitted (plan/calibrate.h, from the H200's) to the engine's measured steps rather than
// to published runs of other frameworks' kernels: the four step times bench_gpu_train measured
// on one H200 on 2026-11-26 (tests/engine/data/h200_engine_steps.json, docs/benchmarks.md: GPT-2
// 124M and 350M in eight micro-batches of 8, 774M in eight of 4 and in two of 16; bf16, flash
// attention). tst_calibrate checks that these are what calibrate() fits to them, that they
// predict each within 10%, and each held out from the fit within 10% (15% for the power-capped
// micro-batches of 16). The slow element-wise kernels of that state (the layernorms' 46 ms of a
// 774M step) show as the memory efficiency. Refitted from a GPU session's recorded benchmark runs
// (tests/gpu/gpu_host.sh) as the kernels change.
DeviceSpec h200_engine(DeviceSpec d) {
  d.name = "H200-stagecraft";
  d.description = "NVIDIA H200 SXM 141GB, as Stagecraft's own CUDA engine runs on it (constants fitted to its measured steps)";
  d.calibration.gemm_efficiency = 0.5441;
  d.calibration.gemm_half_dim = 33.79;
  d.calibration.memory_efficiency = 0.394;
  d.calibration.kernel_s = 7.854e-07;
  d.calibration.attention_efficiency = 0.6315;
  return d;
}

}  // namespace

double DeviceSpec::peak_tflops(config::Precision p, bool tf32) const {
  switch (p) {
    case config::Precision::kFp32: return tf32 && tf32_tflops > 0 ? tf32_tflops : fp32_tflops;
    case config::Precision::kFp16: return fp16_tflops;
    case config::Precision::kBf16: return bf16_tflops;
  }
  return 0;
}

const std::vector<DeviceSpec>& device_catalog() {
  // NVLink per direction: V100 6 links x 25 GB/s = 150 GB/s; A100 12 x 25 = 300 GB/s; H100 and
  // H200 18 x 25 = 450 GB/s. PCIe x16 per direction: 4.0 = 32 GB/s, 5.0 = 64 GB/s.
  // The best MFU published for dense training of large transformers, per device:
  //  - V100: about 30%: ZeRO trained a 100B-parameter GPT at 38 TFLOP/s per GPU on 400 V100s, of
  //    125 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  //    Parameter Models", SC20).
  //  - A100: 56.3% for the 1T-parameter GPT with selective recompute and sequence parallelism
  //    (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  //    Table 5; 175B reached 51.4%, 530B 56.0%).
  //  - H100 SXM: 47%, Megatron-Core's GPT weak scaling from 2B to 462B parameters on up to 6,144
  //    H100s (NVIDIA, Megatron-LM README, 2024); Llama 3 405B reached 38-43% in BF16 on 8,192 to
  //    16,384 H100s (Meta, "The Llama 3 Herd of Models", 2024, Table 4).
  //  - H100 PCIe and H200: none published for large dense runs; the H100 SXM's (the same Hopper
  //    tensor cores; slower links only lower what they reach).
  //  - L40S and RTX 4090: none published; the A100's, the highest of any device here, as the bound.
  //  - cpu: none; not checked.
  constexpr const char* kV100 = "ZeRO-100B on 400 V100s, Rajbhandari et al. 2020";
  constexpr const char* kA100 = "1T GPT, Korthikanti et al. 2022";
  constexpr const char* kH100 = "Megatron-Core GPT up to 462B on H100s, NVIDIA 2024";
  static const DeviceSpec kH200 =
      with_published_mfu(gpu("H200", "NVIDIA H200 SXM 141GB (Hopper)", 140, 67, 494.7, 989.4, 989.4, 4800, "NVLink 4 (18 links)", 3600,
                             "8 x 400 Gb/s NDR InfiniBand (DGX H200)", 3200),
                         0.47, "none published; H100 SXM's: Megatron-Core on H100s, NVIDIA 2024");
  static const std::vector<DeviceSpec> kCatalog = {
      with_published_mfu(gpu("V100", "NVIDIA V100 SXM2 32GB (Volta)", 32, 15.7, 0, 125, 0, 900, "NVLink 2 (6 links)", 1200,
                              "4 x 100 Gb/s EDR InfiniBand (DGX-1)", 400),
                          0.30, kV100),
      with_published_mfu(gpu("A100-40GB", "NVIDIA A100 SXM4 40GB (Ampere)", 40, 19.5, 156, 312, 312, 1555, "NVLink 3 (12 links)", 2400,
                              "8 x 200 Gb/s HDR InfiniBand (DGX A100)", 1600),
                          0.563, kA100),
      with_published_mfu(gpu("A100-80GB", "NVIDIA A100 SXM4 80GB (Ampere)", 80, 19.5, 156, 312, 312, 2039, "NVLink 3 (12 links)", 2400,
                              "8 x 200 Gb/s HDR InfiniBand (DGX A100)", 1600),
                          0.563, kA100),
      with_published_mfu(gpu("H100-SXM", "NVIDIA H100 SXM5 80GB (Hopper)", 80, 67, 494.7, 989.4, 989.4, 3350, "NVLink 4 (18 links)", 3600,
                              "8 x 400 Gb/s NDR InfiniBand (DGX H100)", 3200),
                          0.47, kH100),
      with_published_mfu(gpu("H100-PCIe", "NVIDIA H100 PCIe 80GB (Hopper)", 80, 51, 378, 756, 756, 2000, "PCIe 5.0 x16", 512,
                              "2 x 200 Gb/s InfiniBand", 400),
                          0.47, "none published; H100 SXM's: Megatron-Core on H100s, NVIDIA 2024"),
      kH200,
      h200_engine(kH200),
      with_published_mfu(gpu("L40S", "NVIDIA L40S 48GB (Ada)", 48, 91.6, 183, 362, 362, 864, "PCIe 4.0 x16", 256, "2 x 200 Gb/s Ethernet", 400),
                          0.563, "none published; A100's: 1T GPT, Korthikanti et al. 2022"),
      with_published_mfu(gpu("RTX-4090", "NVIDIA GeForce RTX 4090 24GB (Ada)", 24, 82.6, 82.6, 165.2, 165.2, 1008, "PCIe 4.0 x16", 256,
                              "100 Gb/s Ethernet", 100),
                          0.563, "none published; A100's: 1T GPT, Korthikanti et al. 2022"),
      cpu_device(),
  };
  return kCatalog;
}

const DeviceSpec* find_builtin_device(std::string_view name) {
  const std::string key = lower(name);
  for (const auto& d : device_catalog()) {
    if (lower(d.name) == key) return &d;
  }
  return nullptr;
}

std::string user_devices_dir() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/stagecraft/devices";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config/stagecraft/devices";
}

namespace {

struct UserCatalog {
  std::vector<DeviceSpec> devices;
  std::vector<std::string> problems;
};

// Every *.yaml of the user's folder, by file name; a built-in or earlier name is not replaced.
const UserCatalog& user_catalog() {
  static const UserCatalog kCatalog = [] {
    UserCatalog c;
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(user_devices_dir(), ec)) {
      if (entry.path().extension() == ".yaml" || entry.path().extension() == ".yml") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      auto profile = read_device_profile(f.string());
      if (!profile.ok()) {
        c.problems.push_back(profile.status().message());
        continue;
      }
      auto d = profile_device(profile.value(), f.string());
      if (!d.ok()) {
        c.problems.push_back(d.status().message());
        continue;
      }
      bool taken = find_builtin_device(d->name) != nullptr;
      for (const auto& other : c.devices) taken = taken || lower(other.name) == lower(d->name);
      if (taken) {
        c.problems.push_back(f.string() + ": name=" + d->name + ": another device has that name; rename it");
        continue;
      }
      c.devices.push_back(std::move(d).value());
    }
    return c;
  }();
  return kCatalog;
}

}  // namespace

const std::vector<DeviceSpec>& user_devices() { return user_catalog().devices; }
const std::vector<std::string>& user_device_problems() { return user_catalog().problems; }

const DeviceSpec* find_device(std::string_view name) {
  if (const DeviceSpec* d = find_builtin_device(name)) return d;
  const std::string key = lower(name);
  for (const auto& d : user_devices()) {
    if (lower(d.name) == key) return &d;
  }
  return nullptr;
}

std::string suggest_device(std::string_view name) {
  const std::string key = lower(name);
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& d : device_catalog()) {
    const std::string n = lower(d.name);
    // A prefix ("a100", "h100") is the likeliest intent.
    size_t dist = n.rfind(key, 0) == 0 && !key.empty() ? 0 : edit_distance(key, n);
    if (dist < best_d) {
      best_d = dist;
      best = d.name;
    }
  }
  return best_d <= std::max<size_t>(2, key.size() / 3) ? best : std::string();
}

Result<DeviceSpec> resolve_device(const config::ClusterConfig& cluster) {
  const config::DeviceFields& f = cluster.device_fields;
  DeviceSpec d;
  if (!cluster.device.empty()) {
    const DeviceSpec* base = find_device(cluster.device);
    if (!base) {
      const std::string hint = suggest_device(cluster.device);
      return Status::invalid_input("cluster.device=" + cluster.device + ": unknown device" +
                                   (hint.empty() ? "" : "; did you mean " + hint + "?") +
                                   " (stagecraft-cli devices lists them; a mapping with name and figures defines a new one)");
    }
    d = *base;
    if (!f.profile.empty()) {
      auto profile = read_device_profile(f.profile);
      if (!profile.ok()) return Status::invalid_input("cluster.device.profile: " + profile.status().message());
      if (!base->profile.empty() || lower(profile->base) != lower(base->name)) {
        return Status::invalid_input("cluster.device.profile: " + f.profile + " calibrates " + profile->base + ", not " + cluster.device +
                                     "; set cluster.device.base: " + profile->base);
      }
      auto pd = profile_device(profile.value(), f.profile);
      if (!pd.ok()) return Status::invalid_input("cluster.device.profile: " + pd.status().message());
      d = std::move(pd).value();
    }
    if (!f.name.empty()) d.name = f.name;
  } else {
    if (!f.profile.empty()) return Status::invalid_input("cluster.device.profile: a profile calibrates a catalog device; give cluster.device.base");
    std::string missing;
    if (f.name.empty()) missing += " name";
    if (!f.memory_gib) missing += " memory_gib";
    if (!f.fp32_tflops) missing += " fp32_tflops";
    if (!f.fp16_tflops && !f.bf16_tflops) missing += " bf16_tflops (or fp16_tflops)";
    if (!f.memory_gbps) missing += " memory_gbps";
    if (!missing.empty()) {
      return Status::invalid_input("cluster.device: a new device (no base) needs" + missing +
                                   "; or give base: a catalog device to start from");
    }
    d.name = f.name;
    d.description = "defined in the configuration";
    // Links of a plain PCIe server unless the cluster says otherwise.
    d.intra_link = "PCIe 4.0 x16";
    d.intra_node_gbps = 256;
    d.network = "100 Gb/s Ethernet";
    d.inter_node_gbps = 100;
  }
  if (f.memory_gib) d.memory_gib = *f.memory_gib;
  if (f.fp32_tflops) d.fp32_tflops = *f.fp32_tflops;
  if (f.tf32_tflops) d.tf32_tflops = *f.tf32_tflops;
  if (f.fp16_tflops) d.fp16_tflops = *f.fp16_tflops;
  if (f.bf16_tflops) d.bf16_tflops = *f.bf16_tflops;
  if (f.memory_gbps) d.memory_gbps = *f.memory_gbps;
  if (cluster.device.empty() && !f.tf32_tflops) d.tf32_tflops = 0;  // fp32 math then runs at fp32_tflops
  if (cluster.intra_node_gbps > 0) {
    d.intra_node_gbps = cluster.intra_node_gbps;
    d.intra_link = "as configured";
  }
  if (cluster.inter_node_gbps > 0) {
    d.inter_node_gbps = cluster.inter_node_gbps;
    d.network = "as configured";
  }
  return d;
}

Json device_to_json(const DeviceSpec& d) {
  Json j = Json::object();
  j.set("name", d.name);
  j.set("description", d.description);
  j.set("memory_gib", d.memory_gib);
  j.set("memory_bytes", d.memory_bytes());
  Json peak = Json::object();
  peak.set("fp32", d.fp32_tflops);
  peak.set("tf32", d.tf32_tflops);
  peak.set("fp16", d.fp16_tflops);
  peak.set("bf16", d.bf16_tflops);
  j.set("peak_tflops", std::move(peak));
  j.set("memory_gbps", d.memory_gbps);
  j.set("intra_link", d.intra_link);
  j.set("intra_node_gbps", d.intra_node_gbps);
  j.set("network", d.network);
  j.set("inter_node_gbps", d.inter_node_gbps);
  if (d.published_mfu > 0) {
    j.set("published_mfu", d.published_mfu);
    j.set("published_mfu_source", d.published_mfu_source);
  }
  if (!d.profile.empty()) j.set("profile", d.profile);
  Json c = Json::object();  // the cost model's constants: the catalog's, or the profile's
  for (const auto& f : calibration_fields()) c.set(f.key, d.calibration.*(f.field));
  j.set("calibration", std::move(c));
  return j;
}

std::string devices_to_text(const std::vector<DeviceSpec>& devices) {
  std::ostringstream o;
  char line[400];
  // The name column as wide as the longest name (a profile's "H200-stagecraft", "cpu-calibrated").
  int w = 10;
  for (const auto& d : devices) w = std::max(w, static_cast<int>(std::min<size_t>(d.name.size(), 40)));
  // Peaks with their unit by magnitude (core/units.h): the cpu device's 160 GFLOP/s next to a
  // GPU's 156 TFLOP/s.
  std::snprintf(line, sizeof line, "%-*s %8s %13s %13s %13s %13s %9s  %-22s %-7s  %s\n", w, "device", "memory", "fp32", "tf32", "fp16",
                "bf16", "mem bw", "intra-node link", "Gb/s", "network (per node)");
  o << line;
  std::snprintf(line, sizeof line, "%-*s %8s %13s %13s %13s %13s %9s  %-22s %-7s  %s\n", w, "", "GiB", "peak", "peak", "peak", "peak",
                "GB/s", "", "", "");
  o << line;
  auto num = [](double v) {
    char b[32];
    if (v <= 0) return std::string("-");
    std::snprintf(b, sizeof b, v < 100 ? "%.1f" : "%.0f", v);
    return std::string(b);
  };
  auto peak = [](double tflops) { return tflops > 0 ? format_flop_rate(tflops * 1e12) : std::string("-"); };
  for (const auto& d : devices) {
    std::snprintf(line, sizeof line, "%-*s %8s %13s %13s %13s %13s %9s  %-22s %-7s  %s (%s Gb/s)\n", w, d.name.c_str(),
                  num(d.memory_gib).c_str(), peak(d.fp32_tflops).c_str(), peak(d.tf32_tflops).c_str(), peak(d.fp16_tflops).c_str(),
                  peak(d.bf16_tflops).c_str(), num(d.memory_gbps).c_str(), d.intra_link.c_str(), num(d.intra_node_gbps).c_str(),
                  d.network.c_str(), num(d.inter_node_gbps).c_str());
    o << line;
  }
  o << "Dense peaks (no sparsity). Links: one GPU to its node peers, one direction; network: all NICs of a node.\n";
  return o.str();
}

}  // namespace stagecraft::config
