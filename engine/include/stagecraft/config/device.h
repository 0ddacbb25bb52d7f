// Device catalog: the accelerators Stagecraft plans for, with the figures the cost model needs.
//
// Every figure is the vendor's datasheet value for dense math (no 2:4 sparsity):
//   memory_gib       device memory, GiB (2^30 bytes) as the driver reports it
//   *_tflops         peak TFLOP/s per precision; 0 where the device has no such mode
//                    (V100 has no bf16 and no tf32 tensor cores; the CPU engine has no 16-bit)
//   memory_gbps      memory bandwidth, GB/s (10^9 bytes)
//   intra_node_gbps  one GPU's link to its node peers, one direction, Gb/s (10^9 bits):
//                    NVLink 4 on H100 SXM is 450 GB/s per direction = 3600 Gb/s
//   inter_node_gbps  one node's network, all NICs together, Gb/s: DGX A100 has 8 x 200 Gb/s
//                    HDR InfiniBand = 1600 Gb/s
// A config names a device (`cluster.device: H100-SXM`), overrides fields of one
// (`cluster.device: {base: A100-80GB, memory_gib: 40}`), or defines one
// (`cluster.device: {name: MI-X, memory_gib: 64, fp32_tflops: 40, bf16_tflops: 400, memory_gbps: 3000}`);
// `cluster.intra_node_gbps` / `cluster.inter_node_gbps` replace the link figures.
// resolve_device() applies all of that.
//
// Calibrated devices: a device profile (`stagecraft-cli calibrate` writes one; format in
// config/device_profile.h) names a base device and the cost model's constants fitted to the
// user's own runs. A config uses one as `cluster.device: {base: cpu, profile: PROFILE.yaml}`, or
// by name when the profile lies in the user catalog ($XDG_CONFIG_HOME/stagecraft/devices/*.yaml,
// listed by `stagecraft-cli devices` after the built-in devices).
// The built-in catalog is immutable; the user catalog is read once per process. Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/status.h"

namespace stagecraft::config {

// The cost model's few physical constants (plan/estimate.h uses them; every device starts from
// these defaults, fitted once against published Megatron-LM runs; a profile replaces them).
struct CostCalibration {
  double gemm_efficiency = 0.76;      // fraction of the dense peak a large GEMM sustains
  double gemm_half_dim = 48.0;        // a GEMM dimension of this size halves the efficiency (tiles)
  double memory_efficiency = 0.80;    // fraction of datasheet bandwidth a streaming kernel gets
  double link_efficiency = 0.80;      // collective bus bandwidth over the node-local link's
  double network_efficiency = 0.85;   // collective bus bandwidth over the NICs' line rate
  double collective_step_s = 8e-6;    // latency of one ring step of a collective (launch + handshake)
  // Tensor parallelism's collectives apart: many small all-reduces per layer, which on some
  // devices behave unlike DP's and PP's few large transfers (the CPU engine's Gloo on one host).
  // On a GPU they default to the figures above.
  double tp_link_efficiency = 0.80;   // TP collective bus bandwidth over the link's
  double tp_step_s = 8e-6;            // latency of one ring step of a TP collective
  double kernel_s = 4e-6;             // fixed cost of one kernel launch
  double attention_efficiency = 0.6;  // fraction of peak a fused (flash) attention sustains
  double gpu_workspace_gib = 1.0;     // CUDA context, cuBLAS workspace, NCCL buffers
  double step_overhead_s = 0.0;       // per step outside the parts: data, zeroing, host gaps
  // Mixture of experts: the busiest expert-parallel rank's tokens over the mean, which its
  // experts' GEMMs and its all-to-all receive wait for (1: perfectly balanced routing). A
  // property of the router and the data more than of the device; 1 until runs with experts
  // calibrate it (plan/calibrate.h keeps it without them).
  double moe_imbalance = 1.0;
  bool operator==(const CostCalibration&) const = default;
};

struct DeviceSpec {
  std::string name;
  std::string description;
  double memory_gib = 0;
  double fp32_tflops = 0, tf32_tflops = 0, fp16_tflops = 0, bf16_tflops = 0;
  double memory_gbps = 0;
  std::string intra_link;       // e.g. "NVLink 3 (12 links)"
  double intra_node_gbps = 0;
  std::string network;          // e.g. "8 x 200 Gb/s HDR InfiniBand"
  double inter_node_gbps = 0;
  bool is_cpu = false;          // the CPU engine's processes, not an accelerator
  int cores = 0;                // is_cpu: the machine's cores, shared by the ranks of a node;
                                // the peak and bandwidth above are the whole machine's
  CostCalibration calibration;  // the cost model's constants for this device
  // The highest MFU published for dense training of large transformers on this device, and whose
  // run it was (config/device.cpp has the sources); a prediction above it is marked implausible
  // (plan/estimate.h). 0: none published for it or a comparable device; not checked.
  double published_mfu = 0;
  std::string published_mfu_source;
  std::string profile;          // the profile file they came from; empty: the defaults

  double memory_bytes() const { return memory_gib * 1024.0 * 1024.0 * 1024.0; }
  // Peak for the math the engine does in that precision: 16-bit on its tensor cores; fp32 on
  // the TF32 tensor cores where train.tf32 asks for them and the device has them, else in fp32.
  // 0 when the device cannot train in that precision.
  double peak_tflops(config::Precision p, bool tf32) const;
};

// The catalog in display order: V100, A100-40GB, A100-80GB, H100-SXM, H100-PCIe, H200,
// H200-stagecraft (the H200 with constants fitted to Stagecraft's own engine), L40S, RTX-4090,
// cpu. The cpu entry describes this machine (memory and cores read at first use).
const std::vector<DeviceSpec>& device_catalog();

// The user catalog: one device per readable profile in user_devices_dir(), by file name, read at
// first use. A profile that cannot be read is left out and named in user_device_problems().
const std::vector<DeviceSpec>& user_devices();
const std::vector<std::string>& user_device_problems();
// $XDG_CONFIG_HOME/stagecraft/devices (~/.config/stagecraft/devices when unset).
std::string user_devices_dir();

// nullptr when no built-in device has that name (case-insensitive).
const DeviceSpec* find_builtin_device(std::string_view name);
// nullptr when no device of the built-in or the user catalog has that name (names compare
// case-insensitively; a built-in name wins).
const DeviceSpec* find_device(std::string_view name);

// The closest catalog name to a misspelt one ("A100" -> "A100-80GB"), or empty.
std::string suggest_device(std::string_view name);

// The device of a cluster with every override applied, a profile's constants included. Fails
// (invalid input, naming the key) on an unknown name, an incomplete definition, or a profile that
// cannot be read or whose base is another device.
Result<DeviceSpec> resolve_device(const config::ClusterConfig& cluster);

Json device_to_json(const DeviceSpec& d);
// The `stagecraft-cli devices` table.
std::string devices_to_text(const std::vector<DeviceSpec>& devices);

}  // namespace stagecraft::config
