#include "kernels/cuda/add_partials.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this

__global__ void __launch_bounds__(kThreads)
    AddPartialsKernel(const float* first, const float* __restrict__ partials,
                      int64_t num_partials, int64_t count, float* out) {
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    float sum = first[i];
    for (int64_t s = 0; s < num_partials; ++s) sum += __ldcs(partials + s * count + i);
    out[i] = sum;
  }
}

}  // namespace

absl::Status AddPartials(const float* first, const float* partials, int64_t num_partials,
                         int64_t count, float* out, cudaStream_t stream) {
  if (first == nullptr || out == nullptr || (num_partials > 0 && partials == nullptr) ||
      num_partials < 0 || count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddPartials: non-null arrays, num_partials >= 0 and count >= 1 needed; got ",
                     num_partials, " partials of ", count));
  }
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, kMaxBlocks);
  AddPartialsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      first, partials, num_partials, count, out);
  return CudaStatus(cudaGetLastError(), "AddPartials kernel launch");
}

}  // namespace fuseserve::cuda
