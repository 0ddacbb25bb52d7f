// CommGroupAdapter: a comm::Communicator seen as the trainer's runtime::CommGroup — the one
// place where the runtime's seam meets the communication backends (Gloo, NCCL, an in-process
// test communicator). It owns the communicator and adds nothing: every call goes
// straight through, errors (which name the group) included.
//
// It is not a group builder: comm/process_groups.h makes the adapters of a rank.
#pragma once

#include <memory>

#include "stagecraft/comm/communicator.h"
#include "stagecraft/runtime/comm_group.h"

namespace stagecraft::comm {

class CommGroupAdapter final : public runtime::CommGroup {
 public:
  // `communicator` must not be null.
  explicit CommGroupAdapter(std::unique_ptr<Communicator> communicator);

  Communicator& communicator() { return *c_; }
  const Communicator& communicator() const { return *c_; }

  int size() const override { return c_->size(); }
  int rank() const override { return c_->rank(); }
  bool device_memory() const override { return c_->device_memory(); }
  Status all_reduce_sum(float* data, size_t count) override;
  Status all_reduce_sum(double* data, size_t count) override;
  // in (size x count) -> out (count)
  Status reduce_scatter_sum(const float* in, float* out, size_t count) override;
  // in (count) -> out (size x count)
  Status all_gather(const float* in, float* out, size_t count) override;
  // in (size x count) -> out (size x count)
  Status all_to_all(const float* in, float* out, size_t count) override;
  Status all_to_all_v(const float* in, const size_t* send_counts, float* out, const size_t* recv_counts) override;
  // `data` stays untouched until wait_sends() (Communicator::isend).
  Status send(const float* data, size_t count, int peer, uint32_t tag) override;
  Status recv(float* data, size_t count, int peer, uint32_t tag) override;
  Status wait_sends() override { return c_->wait_sends(); }
  Status recv_start(float* data, size_t count, int peer, uint32_t tag) override;
  Status wait_recvs() override { return c_->wait_recvs(); }
  Status all_reduce_sum_start(float* data, size_t count) override;
  Status reduce_scatter_sum_start(const float* in, float* out, size_t count) override;
  Status all_gather_start(const float* in, float* out, size_t count) override;
  Status wait_all_reduces() override { return c_->wait_async(); }

 private:
  std::unique_ptr<Communicator> c_;
};

}  // namespace stagecraft::comm
