// CommGroupAdapter: runtime::CommGroup over a Communicator. See comm_group_adapter.h.
#include "stagecraft/comm/comm_group_adapter.h"

#include <cassert>
#include <span>

namespace stagecraft::comm {

CommGroupAdapter::CommGroupAdapter(std::unique_ptr<Communicator> communicator) : c_(std::move(communicator)) {
  assert(c_ && "CommGroupAdapter needs a communicator");
}

Status CommGroupAdapter::all_reduce_sum(float* data, size_t count) { return c_->all_reduce(std::span<float>(data, count)); }

Status CommGroupAdapter::all_reduce_sum_start(float* data, size_t count) {
  return c_->all_reduce_async(std::span<float>(data, count));
}

Status CommGroupAdapter::all_reduce_sum(double* data, size_t count) { return c_->all_reduce(std::span<double>(data, count)); }

Status CommGroupAdapter::reduce_scatter_sum(const float* in, float* out, size_t count) {
  return c_->reduce_scatter(std::span<const float>(in, count * static_cast<size_t>(size())), std::span<float>(out, count));
}

Status CommGroupAdapter::all_gather(const float* in, float* out, size_t count) {
  return c_->all_gather(std::span<const float>(in, count), std::span<float>(out, count * static_cast<size_t>(size())));
}

Status CommGroupAdapter::reduce_scatter_sum_start(const float* in, float* out, size_t count) {
  return c_->reduce_scatter_async(std::span<const float>(in, count * static_cast<size_t>(size())), std::span<float>(out, count));
}

Status CommGroupAdapter::all_gather_start(const float* in, float* out, size_t count) {
  return c_->all_gather_async(std::span<const float>(in, count), std::span<float>(out, count * static_cast<size_t>(size())));
}

Status CommGroupAdapter::all_to_all(const float* in, float* out, size_t count) {
  const size_t n = count * static_cast<size_t>(size());
  return c_->all_to_all(std::span<const float>(in, n), std::span<float>(out, n));
}

Status CommGroupAdapter::send(const float* data, size_t count, int peer, uint32_t tag) {
  return c_->isend(std::span<const float>(data, count), peer, tag);
}

Status CommGroupAdapter::recv_start(float* data, size_t count, int peer, uint32_t tag) {
  return c_->irecv(std::span<float>(data, count), peer, tag);
}

Status CommGroupAdapter::recv(float* data, size_t count, int peer, uint32_t tag) {
  return c_->recv(std::span<float>(data, count), peer, tag);
}

Status CommGroupAdapter::all_to_all_v(const float* in, const size_t* send_counts, float* out, const size_t* recv_counts) {
  const size_t n = static_cast<size_t>(size());
  size_t sent = 0, received = 0;
  for (size_t r = 0; r < n; ++r) {
    sent += send_counts[r];
    received += recv_counts[r];
  }
  return c_->all_to_all_v(std::span<const float>(in, sent), std::span<const size_t>(send_counts, n), std::span<float>(out, received),
                          std::span<const size_t>(recv_counts, n));
}

}  // namespace stagecraft::comm
