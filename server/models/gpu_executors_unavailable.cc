// The GPU paths in a build without CUDA: every request for one fails at load
// time with a message saying why.

#include "server/models/gpu_executors.h"

namespace fuseserve {
namespace {

absl::Status Unavailable() {
  return absl::FailedPreconditionError("this fuseserve build has no CUDA backend");
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateConvGpuExecutor(const ConvGpuSpec&) {
  return Unavailable();
}
absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGemmGpuExecutor(const GemmGpuSpec&) {
  return Unavailable();
}
absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGroupNormGpuExecutor(const GroupNormGpuSpec&) {
  return Unavailable();
}

}  // namespace fuseserve
