#include "kernels/cuda/group_norm_concurrent.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gpu_scope.cuh"
#include "kernels/cuda/group_norm_common.cuh"

// Work items are chunks (ChunkElementsFor(kConcurrentThreads) elements of
// one (sample, group) slab) in tensor order, so sample-major: a block's
// thread 0 takes the next one from a global counter, waits until the
// chunk's sample is complete (acquire) and reads the group's sums; then the
// block normalises the chunk with group_norm_detail::NormalizeChunk, as
// GroupNormApply's NormalizeKernel does. Taking items by counter, rather
// than by block index, lets the blocks that only become resident when the
// producer's blocks exit share the last samples' work. (A claimer warp
// taking the next chunk while the block normalises the current one measured
// the same at the reference shape, bench/kernel_notes.md v18: not kept.)

namespace fuseserve::cuda {
namespace {

using group_norm_detail::Aligned16;
using group_norm_detail::ChunkElementsFor;
using group_norm_detail::Geometry;
using group_norm_detail::GroupGeometry;
using group_norm_detail::NormalizeChunk;
using group_norm_detail::StatsFromSums;

// Threads per block, and so the chunk a work item is: 256 (chunks of 8192
// elements, as family A was tuned with), not GroupNorm's 512. With 512
// here, family A on an H200 ran 0.901-0.905 ms against 0.891 at 32 samples
// and 3.52 against 3.48 at 128 (within 128's spread of 3.46-3.52 between
// runs; bench/kernel_notes.md v28). Only the chunks that partial sums are
// taken over fix the numerics, and this kernel takes none.
constexpr int kConcurrentThreads = 256;
constexpr int64_t kConcurrentChunkElements = ChunkElementsFor(kConcurrentThreads);

// Blocks per multiprocessor the grid is sized for (the registers let ~4 of
// them be resident at once; the rest start as others finish).
constexpr int kBlocksPerMultiprocessor = 8;
// Between polls of a sample's progress.
constexpr unsigned kPollNanoseconds = 500;

struct ConcurrentArgs {
  GroupGeometry geometry;
  int64_t num_groups;
  int64_t channels_per_group;
  int64_t spatial_size;
  float eps;
  const double* group_sums;
  SampleProgress progress;
  const float* weight;
  const float* bias;
  float* data;
  unsigned* next_item;
};

__global__ void __launch_bounds__(kConcurrentThreads) ConcurrentNormalizeKernel(ConcurrentArgs a) {
  __shared__ int64_t item_shared;
  __shared__ float4 stats_shared;
  const int64_t items_per_sample = a.num_groups * a.geometry.chunks_per_group;
  for (;;) {
    if (threadIdx.x == 0) {
      const int64_t item = atomicAdd(a.next_item, 1u);
      if (item < a.geometry.total_chunks) {
        const int64_t sample = item / items_per_sample;
        while (gpu_scope::LoadAcquire(a.progress.sample_done + sample) < a.progress.target) {
          __nanosleep(kPollNanoseconds);
        }
        // Ordered after the acquire: the sums are complete.
        stats_shared = StatsFromSums(a.group_sums, item / a.geometry.chunks_per_group,
                                     a.geometry.group_size, a.eps);
      }
      item_shared = item;
    }
    // The other threads' loads of the chunk follow thread 0's acquire.
    __syncthreads();
    const int64_t item = item_shared;
    if (item >= a.geometry.total_chunks) break;
    const int64_t group = item / a.geometry.chunks_per_group;
    NormalizeChunk<false, kConcurrentThreads>(
        a.data, a.weight, a.bias, stats_shared, group, item - group * a.geometry.chunks_per_group,
        a.num_groups, a.channels_per_group, a.spatial_size, /*vectorized=*/true, a.data);
    // item_shared and stats_shared are rewritten next.
    __syncthreads();
  }
  // End after the producer: the stream's next operation follows this
  // kernel, and must follow both.
  if (threadIdx.x == 0) gpu_scope::WaitForPrerequisiteGrids();
}

}  // namespace

bool GroupNormConcurrentSupports(const GroupNormParams& params, const float* data) {
  if (!ValidateGroupNormParams(params).ok()) return false;
  return params.prologue == GroupNormPrologue::kNone && params.spatial_size % 4 == 0 &&
         Aligned16(data) &&
         Geometry(params, kConcurrentChunkElements).total_chunks <
             int64_t{std::numeric_limits<unsigned>::max()};
}

absl::Status GroupNormApplyConcurrent(const GroupNormParams& params, const double* group_sums,
                                      SampleProgress progress, const float* weight,
                                      const float* bias, float* data, void* scratch,
                                      cudaStream_t stream) {
  RETURN_IF_ERROR(ValidateGroupNormParams(params));
  if (group_sums == nullptr || progress.sample_done == nullptr || data == nullptr ||
      scratch == nullptr) {
    return absl::InvalidArgumentError(
        "GroupNormApplyConcurrent: group_sums, sample_done, data and scratch must be non-null");
  }
  if (!GroupNormConcurrentSupports(params, data)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupNormApplyConcurrent: needs the kNone prologue, spatial_size % 4 == 0 (got ",
        params.spatial_size, ") and 16-byte aligned data"));
  }
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int multiprocessors = 0;
  RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  const GroupGeometry geometry = Geometry(params, kConcurrentChunkElements);
  const int64_t blocks =
      std::min<int64_t>(geometry.total_chunks, int64_t{multiprocessors} * kBlocksPerMultiprocessor);

  ConcurrentArgs args{geometry,
                      params.num_groups,
                      params.channels / params.num_groups,
                      params.spatial_size,
                      params.eps,
                      group_sums,
                      progress,
                      weight,
                      bias,
                      data,
                      static_cast<unsigned*>(scratch)};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kConcurrentThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  RETURN_IF_CUDA_ERROR(cudaLaunchKernelEx(&config, ConcurrentNormalizeKernel, args));
  return absl::OkStatus();
}

}  // namespace fuseserve::cuda
