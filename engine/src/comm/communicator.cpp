// Communicator's argument checks and the group-of-one cases shared by every backend, and the
// single-rank communicator. See stagecraft/comm/communicator.h.
#include "stagecraft/comm/communicator.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "stagecraft/core/enum_names.h"

namespace stagecraft::comm {

namespace {
constexpr EnumName<ReduceOp> kReduceOpNames[] = {
    {ReduceOp::kSum, "sum"}, {ReduceOp::kAvg, "avg"}, {ReduceOp::kMax, "max"}, {ReduceOp::kMin, "min"}};
constexpr EnumName<DType> kDTypeNames[] = {{DType::kF32, "f32"}, {DType::kF64, "f64"}};
}  // namespace

// The tables' names are literals, so their data() is NUL-terminated.
const char* to_string(ReduceOp op) {
  const std::string_view n = enum_to_string(kReduceOpNames, op);
  return n.empty() ? "?" : n.data();
}

const char* to_string(DType t) {
  const std::string_view n = enum_to_string(kDTypeNames, t);
  return n.empty() ? "?" : n.data();
}

size_t size_of(DType t) { return t == DType::kF32 ? sizeof(float) : sizeof(double); }

std::string group_name(const std::vector<int>& ranks, const std::string& label) {
  std::string s = label + "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 16 && ranks.size() > 17) {
      s += ",...," + std::to_string(ranks.back());
      break;
    }
    if (i) s += ",";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

std::string group_key(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over each rank's 4 bytes, little end first
  for (int r : ranks) {
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint8_t>(static_cast<uint32_t>(r) >> (8 * b));
      h *= 1099511628211ull;
    }
  }
  static const char* digits = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) hex[static_cast<size_t>(i)] = digits[h & 15];
  return std::to_string(ranks.size()) + "-" + hex;
}

Result<int> group_rank_in(const std::vector<int>& ranks, int global_rank, const std::string& label) {
  const std::string name = group_name(ranks, label);
  if (ranks.empty()) return Status::invalid_input(label + ": a communicator needs at least one rank");
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0) return Status::invalid_input(name + ": rank " + std::to_string(r) + " is negative");
    if (!seen.insert(r).second) return Status::invalid_input(name + ": rank " + std::to_string(r) + " appears twice");
  }
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) {
    return Status::invalid_input(name + " does not contain rank " + std::to_string(global_rank) +
                                 ", which tried to join it");
  }
  return static_cast<int>(it - ranks.begin());
}

Communicator::Communicator(std::string name, std::vector<int> ranks, int rank)
    : name_(std::move(name)), ranks_(std::move(ranks)), rank_(rank) {
  if (name_.empty()) name_ = group_name(ranks_);
}

int Communicator::group_rank_of(int global) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), global);
  return it == ranks_.end() ? -1 : static_cast<int>(it - ranks_.begin());
}

std::string Communicator::describe(const char* op, size_t count, DType dtype) const {
  std::string s = op;
  if (count > 0) s += " of " + std::to_string(count) + " " + to_string(dtype);
  return s + " on " + name_ + " (rank " + std::to_string(global_rank()) + ", group rank " + std::to_string(rank_) +
         " of " + std::to_string(size()) + ")";
}

std::string Communicator::describe_peer(int group_rank) const {
  return "rank " + std::to_string(ranks_[group_rank]) + " (group rank " + std::to_string(group_rank) + ")";
}

Status Communicator::check_peer(const char* op, int peer) const {
  if (peer < 0 || peer >= size()) {
    return Status::invalid_input(describe(op, 0, DType::kF32) + ": peer " + std::to_string(peer) +
                                 " is not a group rank (0.." + std::to_string(size() - 1) + ")");
  }
  if (peer == rank_) return Status::invalid_input(describe(op, 0, DType::kF32) + ": peer is this rank itself");
  return Status::OK();
}

Status Communicator::all_reduce(Buffer data, ReduceOp op) {
  if (data.count == 0 || size() == 1) return Status::OK();
  return do_all_reduce(data, op);
}

Status Communicator::reduce_scatter(ConstBuffer in, Buffer out, ReduceOp op) {
  if (in.dtype != out.dtype || in.count != out.count * static_cast<size_t>(size())) {
    return Status::invalid_input(describe("reduce_scatter", out.count, out.dtype) + ": input holds " +
                                 std::to_string(in.count) + " " + to_string(in.dtype) + ", expected " +
                                 std::to_string(size()) + " ranks x " + std::to_string(out.count) + " " +
                                 to_string(out.dtype));
  }
  if (out.count == 0) return Status::OK();
  if (size() == 1) return do_copy(out.data, in.data, out.count * size_of(out.dtype));
  return do_reduce_scatter(in, out, op);
}

Status Communicator::all_gather(ConstBuffer in, Buffer out) {
  if (in.dtype != out.dtype || out.count != in.count * static_cast<size_t>(size())) {
    return Status::invalid_input(describe("all_gather", in.count, in.dtype) + ": output holds " +
                                 std::to_string(out.count) + " " + to_string(out.dtype) + ", expected " +
                                 std::to_string(size()) + " ranks x " + std::to_string(in.count) + " " +
                                 to_string(in.dtype));
  }
  if (in.count == 0) return Status::OK();
  if (size() == 1) return do_copy(out.data, in.data, in.count * size_of(in.dtype));
  return do_all_gather(in, out);
}

Status Communicator::all_to_all(ConstBuffer in, Buffer out) {
  if (in.dtype != out.dtype || in.count != out.count || in.count % static_cast<size_t>(size()) != 0) {
    return Status::invalid_input(describe("all_to_all", in.count, in.dtype) + ": input and output must both hold " +
                                 std::to_string(size()) + " equal blocks of one dtype, got " + std::to_string(in.count) + " " +
                                 to_string(in.dtype) + " and " + std::to_string(out.count) + " " + to_string(out.dtype));
  }
  if (in.count == 0) return Status::OK();
  if (size() == 1) return do_copy(out.data, in.data, in.count * size_of(in.dtype));
  return do_all_to_all(in, out);
}

Status Communicator::all_to_all_v(ConstBuffer in, std::span<const size_t> send_counts, Buffer out, std::span<const size_t> recv_counts) {
  const auto n = static_cast<size_t>(size());
  size_t sent = 0, received = 0;
  for (size_t r = 0; r < send_counts.size(); ++r) sent += send_counts[r];
  for (size_t r = 0; r < recv_counts.size(); ++r) received += recv_counts[r];
  if (in.dtype != out.dtype || send_counts.size() != n || recv_counts.size() != n || sent != in.count || received != out.count) {
    return Status::invalid_input(describe("all_to_all_v", in.count, in.dtype) + ": expected " + std::to_string(n) +
                                 " send and receive counts summing to the input's " + std::to_string(in.count) + " and the output's " +
                                 std::to_string(out.count) + " elements of one dtype");
  }
  if (size() == 1) return in.count ? do_copy(out.data, in.data, in.count * size_of(in.dtype)) : Status::OK();
  return do_all_to_all_v(in, send_counts, out, recv_counts);
}

Status Communicator::broadcast(Buffer data, int root) {
  if (root < 0 || root >= size()) {
    return Status::invalid_input(describe("broadcast", data.count, data.dtype) + ": root " + std::to_string(root) +
                                 " is not a group rank (0.." + std::to_string(size() - 1) + ")");
  }
  if (data.count == 0 || size() == 1) return Status::OK();
  return do_broadcast(data, root);
}

Status Communicator::send(ConstBuffer data, int peer, uint32_t tag) {
  if (Status s = check_peer("send", peer); !s) return s;
  if (data.count == 0) return Status::OK();
  return do_send(data, peer, tag);
}

Status Communicator::isend(ConstBuffer data, int peer, uint32_t tag) {
  if (Status s = check_peer("isend", peer); !s) return s;
  if (data.count == 0) return Status::OK();
  return do_isend(data, peer, tag);
}

Status Communicator::wait_sends() {
  if (size() == 1) return Status::OK();
  return do_wait_sends();
}

Status Communicator::recv(Buffer data, int peer, uint32_t tag) {
  if (Status s = check_peer("recv", peer); !s) return s;
  if (data.count == 0) return Status::OK();
  return do_recv(data, peer, tag);
}

Status Communicator::irecv(Buffer data, int peer, uint32_t tag) {
  if (Status s = check_peer("irecv", peer); !s) return s;
  if (data.count == 0) return Status::OK();
  return do_irecv(data, peer, tag);
}

Status Communicator::wait_recvs() {
  if (size() == 1) return Status::OK();
  return do_wait_recvs();
}

Status Communicator::send_recv(ConstBuffer out, int to, Buffer in, int from, uint32_t tag) {
  if (Status s = check_peer("send_recv", to); !s) return s;
  if (Status s = check_peer("send_recv", from); !s) return s;
  if (out.count == 0) return recv(in, from, tag);
  if (in.count == 0) return send(out, to, tag);
  return do_send_recv(out, to, in, from, tag);
}

Status Communicator::do_copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
  return Status::OK();
}

Status Communicator::all_reduce_async(Buffer data, ReduceOp op) {
  if (data.count == 0 || size() == 1) return Status::OK();
  return do_all_reduce_async(data, op);
}

// Refusals and the trivial cases (nothing to send, a group of one) as the blocking calls have them.
Status Communicator::reduce_scatter_async(ConstBuffer in, Buffer out, ReduceOp op) {
  if (in.dtype != out.dtype || in.count != out.count * static_cast<size_t>(size()) || out.count == 0 || size() == 1) {
    return reduce_scatter(in, out, op);
  }
  return do_reduce_scatter_async(in, out, op);
}

Status Communicator::all_gather_async(ConstBuffer in, Buffer out) {
  if (in.dtype != out.dtype || out.count != in.count * static_cast<size_t>(size()) || in.count == 0 || size() == 1) {
    return all_gather(in, out);
  }
  return do_all_gather_async(in, out);
}

Status Communicator::wait_async() {
  if (size() == 1) return Status::OK();
  return do_wait_async();
}

Status Communicator::barrier() {
  if (size() == 1) return Status::OK();
  return do_barrier();
}

namespace {

// Every transport call is unreachable: the public calls finish groups of one themselves, and
// point-to-point calls fail their peer check (there is no other rank).
class SingleRankCommunicator final : public Communicator {
 public:
  SingleRankCommunicator(std::string name, int global_rank) : Communicator(std::move(name), {global_rank}, 0) {}

 private:
  Status unreachable() const { return Status::internal(name() + ": a group of one has no transport"); }
  Status do_all_reduce(Buffer, ReduceOp) override { return unreachable(); }
  Status do_reduce_scatter(ConstBuffer, Buffer, ReduceOp) override { return unreachable(); }
  Status do_all_gather(ConstBuffer, Buffer) override { return unreachable(); }
  Status do_broadcast(Buffer, int) override { return unreachable(); }
  Status do_all_to_all(ConstBuffer, Buffer) override { return unreachable(); }
  Status do_all_to_all_v(ConstBuffer, std::span<const size_t>, Buffer, std::span<const size_t>) override { return unreachable(); }
  Status do_send(ConstBuffer, int, uint32_t) override { return unreachable(); }
  Status do_isend(ConstBuffer, int, uint32_t) override { return unreachable(); }
  Status do_wait_sends() override { return unreachable(); }
  Status do_recv(Buffer, int, uint32_t) override { return unreachable(); }
  Status do_send_recv(ConstBuffer, int, Buffer, int, uint32_t) override { return unreachable(); }
  Status do_barrier() override { return unreachable(); }
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_single_rank_communicator(int global_rank, std::string name) {
  if (global_rank < 0) return Status::invalid_input("rank " + std::to_string(global_rank) + " is negative");
  return std::unique_ptr<Communicator>(new SingleRankCommunicator(std::move(name), global_rank));
}

}  // namespace stagecraft::comm
