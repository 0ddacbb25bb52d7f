// The CommGroup helpers that move a buffer to the memory a group takes. See comm_group.h.
#include "stagecraft/runtime/comm_group.h"

#include <vector>

namespace stagecraft::runtime {

namespace {

// Whether a group can work on `device`'s memory where it lies.
bool reaches_device(const CommGroup& group, const Device& device) { return group.device_memory() || device.host_accessible(); }

template <typename T>
Status to_device(Device& device, Buffer<T>& buf, const T* host, size_t count) {
  if (Status s = allocate_buffer(buf, device, count); !s) return s;
  return device.copy_from_host(buf.data(), host, count * sizeof(T));
}

}  // namespace

Status reduce_scatter_on_device(CommGroup& group, Device& device, const float* in, float* out, size_t count) {
  if (reaches_device(group, device)) return group.reduce_scatter_sum(in, out, count);
  const size_t n = count * static_cast<size_t>(group.size());
  std::vector<float> in_host(n), out_host(count);  // (size x count), (count)
  if (Status s = device.copy_to_host(in_host.data(), in, n * sizeof(float)); !s) return s;
  if (Status s = group.reduce_scatter_sum(in_host.data(), out_host.data(), count); !s) return s;
  return device.copy_from_host(out, out_host.data(), count * sizeof(float));
}

Status all_gather_on_device(CommGroup& group, Device& device, const float* in, float* out, size_t count) {
  if (reaches_device(group, device)) return group.all_gather(in, out, count);
  const size_t n = count * static_cast<size_t>(group.size());
  std::vector<float> in_host(count), out_host(n);  // (count), (size x count)
  if (Status s = device.copy_to_host(in_host.data(), in, count * sizeof(float)); !s) return s;
  if (Status s = group.all_gather(in_host.data(), out_host.data(), count); !s) return s;
  return device.copy_from_host(out, out_host.data(), n * sizeof(float));
}

Status all_to_all_on_device(CommGroup& group, Device& device, const float* in, float* out, size_t count) {
  if (reaches_device(group, device)) return group.all_to_all(in, out, count);
  const size_t n = count * static_cast<size_t>(group.size());
  std::vector<float> in_host(n), out_host(n);  // (size x count) each
  if (Status s = device.copy_to_host(in_host.data(), in, n * sizeof(float)); !s) return s;
  if (Status s = group.all_to_all(in_host.data(), out_host.data(), count); !s) return s;
  return device.copy_from_host(out, out_host.data(), n * sizeof(float));
}

Status all_to_all_v_on_device(CommGroup& group, Device& device, const float* in, const size_t* send_counts, float* out,
                              const size_t* recv_counts) {
  if (reaches_device(group, device)) return group.all_to_all_v(in, send_counts, out, recv_counts);
  size_t n_in = 0, n_out = 0;
  for (int r = 0; r < group.size(); ++r) {
    n_in += send_counts[r];
    n_out += recv_counts[r];
  }
  std::vector<float> in_host(n_in), out_host(n_out);
  if (Status s = device.copy_to_host(in_host.data(), in, n_in * sizeof(float)); !s) return s;
  if (Status s = group.all_to_all_v(in_host.data(), send_counts, out_host.data(), recv_counts); !s) return s;
  return device.copy_from_host(out, out_host.data(), n_out * sizeof(float));
}

Status all_reduce_host(CommGroup& group, Device& device, double* data, size_t count) {
  if (!group.device_memory()) return group.all_reduce_sum(data, count);
  Buffer<double> buf;  // (count)
  if (Status s = to_device(device, buf, data, count); !s) return s;
  if (Status s = group.all_reduce_sum(buf.data(), count); !s) return s;
  return device.copy_to_host(data, buf.data(), count * sizeof(double));
}

Status all_gather_host(CommGroup& group, Device& device, const float* in, float* out, size_t count) {
  if (!group.device_memory()) return group.all_gather(in, out, count);
  const size_t n = count * static_cast<size_t>(group.size());
  Buffer<float> in_dev, out_dev;  // (count), (size x count)
  if (Status s = to_device(device, in_dev, in, count); !s) return s;
  if (Status s = allocate_buffer(out_dev, device, n); !s) return s;
  if (Status s = group.all_gather(in_dev.data(), out_dev.data(), count); !s) return s;
  return device.copy_to_host(out, out_dev.data(), n * sizeof(float));
}

Status send_host(CommGroup& group, Device& device, const float* data, size_t count, int peer, uint32_t tag) {
  if (!group.device_memory()) {
    if (Status s = group.send(data, count, peer, tag); !s) return s;
    return group.wait_sends();
  }
  Buffer<float> buf;  // (count), released after the send completed
  if (Status s = to_device(device, buf, data, count); !s) return s;
  if (Status s = group.send(buf.data(), count, peer, tag); !s) return s;
  return group.wait_sends();
}

Status recv_host(CommGroup& group, Device& device, float* data, size_t count, int peer, uint32_t tag) {
  if (!group.device_memory()) return group.recv(data, count, peer, tag);
  Buffer<float> buf;  // (count)
  if (Status s = allocate_buffer(buf, device, count); !s) return s;
  if (Status s = group.recv(buf.data(), count, peer, tag); !s) return s;
  return device.copy_to_host(data, buf.data(), count * sizeof(float));
}

}  // namespace stagecraft::runtime
