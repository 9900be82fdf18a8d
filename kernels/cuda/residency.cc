#include "kernels/cuda/residency.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {
namespace {

// Dynamic shared memory a launch may ask for without opting in.
constexpr size_t kDefaultDynamicSharedLimit = 48 * 1024;

// Each CTA also holds its static shared memory and the 1 KiB the system
// reserves per CTA; the rest of its share is padding.
constexpr size_t kPerCtaOverhead = 2048;

}  // namespace

absl::StatusOr<size_t> ResidencyPadding(const void* kernel, int ctas_per_sm,
                                        size_t used_bytes) {
  size_t dynamic_bytes = used_bytes;
  if (ctas_per_sm > 0) {
    int device = 0;
    RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
    int per_sm = 0;
    RETURN_IF_ERROR(CudaStatus(
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
        "shared memory per SM"));
    const size_t share = static_cast<size_t>(per_sm) / static_cast<size_t>(ctas_per_sm);
    dynamic_bytes = std::max(dynamic_bytes, share > kPerCtaOverhead ? share - kPerCtaOverhead : 0);
  }
  if (dynamic_bytes > kDefaultDynamicSharedLimit) {
    // As the convolution launchers do for their stages: set on every launch
    // (a host-side attribute write, cheap beside the launch).
    RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(dynamic_bytes)),
                               "dynamic shared memory limit for a residency cap"));
  }
  return dynamic_bytes;
}

}  // namespace fuseserve::cuda
