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
// resolve_device() applies all of that. Pure; the catalog is immutable and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/status.h"

namespace stagecraft::config {

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

  double memory_bytes() const { return memory_gib * 1024.0 * 1024.0 * 1024.0; }
  // Peak for the math the engine does in that precision: fp32 training uses tf32 tensor cores
  // where the device has them (as PyTorch and Megatron allow), 16-bit its tensor cores.
  // 0 when the device cannot train in that precision.
  double peak_tflops(config::Precision p) const;
};

// The catalog in display order: V100, A100-40GB, A100-80GB, H100-SXM, H100-PCIe, H200, L40S,
// RTX-4090, cpu. The cpu entry describes this machine (memory and cores read at first use).
const std::vector<DeviceSpec>& device_catalog();

// nullptr when no device has that name (names compare case-insensitively).
const DeviceSpec* find_device(std::string_view name);

// The closest catalog name to a misspelt one ("A100" -> "A100-80GB"), or empty.
std::string suggest_device(std::string_view name);

// The device of a cluster with every override applied. Fails (invalid input, naming the key)
// on an unknown name or an incomplete definition.
Result<DeviceSpec> resolve_device(const config::ClusterConfig& cluster);

Json device_to_json(const DeviceSpec& d);
// The `stagecraft-cli devices` table.
std::string devices_to_text(const std::vector<DeviceSpec>& devices);

}  // namespace stagecraft::config
