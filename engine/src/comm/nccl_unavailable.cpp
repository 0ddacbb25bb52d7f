// The NCCL entry points of a build without CUDA (STAGECRAFT_WITH_CUDA off): each answers with one
// line saying that this build has no NCCL and what to do. See stagecraft/comm/nccl_communicator.h.
#include "stagecraft/comm/nccl_communicator.h"

namespace stagecraft::comm {

namespace {
Status no_nccl() {
  return Status::invalid_input("comm=nccl: this build has no NCCL (built without CUDA); set comm: gloo, or rebuild with "
                               "-DSTAGECRAFT_WITH_CUDA=ON (docs/gpus.md: Building with CUDA)");
}
}  // namespace

bool nccl_built() { return false; }

Result<std::unique_ptr<Communicator>> create_nccl_communicator(RendezvousClient&, runtime::Device&, int, const std::vector<int>&,
                                                               const NcclOptions&) {
  return no_nccl();
}

CommunicatorFactory nccl_communicator_factory(RendezvousClient&, runtime::Device&, int, NcclOptions) {
  return [](const std::string&, const std::vector<int>&) -> Result<std::unique_ptr<Communicator>> { return no_nccl(); };
}

}  // namespace stagecraft::comm
