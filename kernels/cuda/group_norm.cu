#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/group_norm.h"
#include "kernels/cuda/group_norm_common.cuh"
#include "kernels/cuda/group_norm_lagged.h"
#include "kernels/cuda/group_norm_resident.h"

// Schedule. A (sample, group) slab is contiguous in memory ([C/G channels x
// spatial]), so it is cut into chunks of kChunkElements and every kernel
// below runs one CTA per (group, chunk): a batch of one still fills the GPU
// (the reference groupnorm, 64x512x512 with G=8, is 8 x 128 chunks per
// sample).
//  1. GroupPartialsKernel: per chunk, the sum and sum of squares of the
//     values shifted by the group's first value, into the workspace.
//  2. GroupStatsKernel: per group, the chunks' partials combined in double
//     into (mean, rstd).
//  3. NormalizeKernel: y = (v - mean) * (rstd * weight[c]) + bias[c].
// GroupNormApply runs only step 3, with the statistics from a producer's
// double sums. The input is read twice (steps 1 and 3). GroupNorm runs the
// lagged schedule instead (group_norm_lagged.cu: one kernel, the second read
// from L2) wherever it can; the two give bitwise the same output.
//
// Numerics: each thread adds at most 4 shifted values in float before
// accumulating in double, so the partial sums carry ~1e-7 relative error
// even for groups of millions of elements; the shift by the group's first
// value keeps E[x^2] - E[x]^2 from cancelling when the mean is large
// relative to the spread. The normalisation subtracts the mean, carried as
// an unevaluated float sum hi + lo, before scaling (two FSUB + one FFMA per
// element) instead of folding it into the additive term: a float mean (or
// the fold) loses |mean| * rstd * 2^-24 absolute accuracy, which a group
// whose mean is large relative to its spread turns into visible error; the
// kernel is memory-bound, so the two extra subtractions cost nothing.

namespace fuseserve::cuda {
namespace {

using group_norm_detail::AddShifted4;
using group_norm_detail::Aligned16;
using group_norm_detail::ClampVariance;
using group_norm_detail::Geometry;
using group_norm_detail::GroupGeometry;
using group_norm_detail::kChunkElements;
using group_norm_detail::kThreads;
using group_norm_detail::kVectorsPerThread;
using group_norm_detail::LoadOr;
using group_norm_detail::NormalizeChunk;
using group_norm_detail::PackStats;
using group_norm_detail::Prologue;
using group_norm_detail::StatsFromSums;

// GroupStatsKernel: one warp per group.
constexpr int kStatsThreads = 256;

// partials[chunk] = (sum, sum of squares) of prologue(x) - shift over the
// chunk, shift = prologue(x[group's first element]).
// Vectorised when `vectorized`: the input is 16-byte aligned and group_size
// is a multiple of 4 (so every chunk starts and ends on a float4).
template <bool kGelu>
__global__ void __launch_bounds__(kThreads)
    GroupPartialsKernel(const float* __restrict__ input, int64_t group_size,
                        int64_t chunks_per_group, bool vectorized, double2* __restrict__ partials) {
  const int64_t block = blockIdx.x;
  const int64_t group = block / chunks_per_group;
  const int64_t chunk = block - group * chunks_per_group;
  const float* x = input + group * group_size;
  const float shift = Prologue<kGelu>(__ldg(x));
  const int64_t begin = chunk * kChunkElements;
  const int64_t end = min(begin + kChunkElements, group_size);

  double sum = 0.0;
  double sum_squares = 0.0;
  if (vectorized) {
    const float4* vectors = reinterpret_cast<const float4*>(x + begin);
    const int count = static_cast<int>((end - begin) / 4);
    float4 loaded[kVectorsPerThread];
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < count) loaded[i] = __ldg(vectors + index);
    }
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < count) AddShifted4<kGelu>(loaded[i], shift, sum, sum_squares);
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      const float a = Prologue<kGelu>(__ldg(x + i)) - shift;
      sum += static_cast<double>(a);
      sum_squares += static_cast<double>(a * a);
    }
  }
  const double2 total = BlockSum2(sum, sum_squares);
  if (threadIdx.x == 0) partials[block] = total;
}

// stats[group] = PackStats of the group's chunk partials; one warp per
// group, partials combined in double.
template <bool kGelu>
__global__ void __launch_bounds__(kStatsThreads)
    GroupStatsKernel(const float* __restrict__ input, const double2* __restrict__ partials,
                     int64_t group_size, int64_t chunks_per_group, int64_t total_groups, float eps,
                     float4* __restrict__ stats) {
  const int64_t group = (int64_t{blockIdx.x} * kStatsThreads + threadIdx.x) / 32;
  if (group >= total_groups) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x & 31);
  double sum = 0.0;
  double sum_squares = 0.0;
  for (int64_t chunk = lane; chunk < chunks_per_group; chunk += 32) {
    const double2 partial = partials[group * chunks_per_group + chunk];
    sum += partial.x;
    sum_squares += partial.y;
  }
  sum = WarpSum(sum);
  sum_squares = WarpSum(sum_squares);
  if (lane == 0) {
    const double count = static_cast<double>(group_size);
    const double shifted_mean = sum / count;
    const double variance = ClampVariance(sum_squares / count - shifted_mean * shifted_mean);
    const double shift = static_cast<double>(Prologue<kGelu>(__ldg(input + group * group_size)));
    stats[group] = PackStats(shift + shifted_mean, variance, eps);
  }
}

// Where NormalizeKernel takes a group's (mean, rstd) from.
struct StatsSource {
  const float4* stats = nullptr;  // GroupNorm: GroupStatsKernel's output
  const double* sums = nullptr;   // GroupNormApply: (sum, sum of squares) pairs
};

// One block per chunk: NormalizeChunk with the group's (mean, rstd) from
// `source`.
template <bool kGelu>
__global__ void __launch_bounds__(kThreads)
    NormalizeKernel(const float* input, const float* __restrict__ weight,
                    const float* __restrict__ bias, StatsSource source, int64_t num_groups,
                    int64_t channels_per_group, int64_t spatial_size, int64_t chunks_per_group,
                    float eps, bool vectorized, float* output) {
  const int64_t block = blockIdx.x;
  const int64_t group = block / chunks_per_group;
  const int64_t chunk = block - group * chunks_per_group;

  __shared__ float4 group_stats;
  if (threadIdx.x == 0) {
    group_stats = source.stats != nullptr
                      ? source.stats[group]
                      : StatsFromSums(source.sums, group, channels_per_group * spatial_size, eps);
  }
  __syncthreads();
  NormalizeChunk<kGelu>(input, weight, bias, group_stats, group, chunk, num_groups,
                        channels_per_group, spatial_size, vectorized, output);
}

template <typename Kernel, typename... Args>
absl::Status Launch(Kernel kernel, int64_t blocks, int threads, cudaStream_t stream, Args... args) {
  kernel<<<static_cast<unsigned int>(blocks), threads, 0, stream>>>(args...);
  return CudaStatus(cudaGetLastError(), "GroupNorm kernel launch");
}

// stats follow the partials, 16-byte aligned (the partials are double2).
size_t PartialsBytes(const GroupGeometry& geometry) {
  return static_cast<size_t>(geometry.total_chunks) * sizeof(double2);
}

absl::Status LaunchNormalize(const GroupNormParams& params, const GroupGeometry& geometry,
                             const float* input, const float* weight, const float* bias,
                             StatsSource source, float* output, cudaStream_t stream) {
  const bool vectorized = Aligned16(input) && Aligned16(output) && params.spatial_size % 4 == 0;
  const int64_t channels_per_group = params.channels / params.num_groups;
  if (params.prologue == GroupNormPrologue::kGeluErf) {
    return Launch(NormalizeKernel<true>, geometry.total_chunks, kThreads, stream, input, weight,
                  bias, source, params.num_groups, channels_per_group, params.spatial_size,
                  geometry.chunks_per_group, params.eps, vectorized, output);
  }
  return Launch(NormalizeKernel<false>, geometry.total_chunks, kThreads, stream, input, weight,
                bias, source, params.num_groups, channels_per_group, params.spatial_size,
                geometry.chunks_per_group, params.eps, vectorized, output);
}

// The resident schedule where `options` pins it, or where kAuto prefers it
// on this device and it can run: true once launched; false where another
// schedule should run (kAuto, and the driver refused the cooperative grid,
// or the schedule cannot run or is not preferred here); an error where the
// pinned schedule cannot run these arguments or a CUDA call failed.
absl::StatusOr<bool> LaunchResidentIfChosen(const GroupNormParams& params, const float* input,
                                            const float* weight, const float* bias,
                                            float* output, void* workspace,
                                            const GroupNormOptions& options,
                                            cudaStream_t stream) {
  const bool pinned = options.schedule == GroupNormSchedule::kResident;
  if (!pinned && options.schedule != GroupNormSchedule::kAuto) return false;
  const auto cannot_run = [&]() -> absl::StatusOr<bool> {
    if (!pinned) return false;
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupNorm: the resident schedule needs 16-byte aligned input and output, "
        "spatial_size % 4 == 0 (got ",
        params.spatial_size,
        "), a device with cooperative launch and 192 KiB of shared memory per block, and at "
        "most as many chunks per group (",
        Geometry(params).chunks_per_group, ") as the device has SMs, and 256"));
  };
  if (!group_norm_detail::ResidentShapeEligible(params, input, output)) return cannot_run();
  // kAuto asks the (cached) bandwidth first: where the schedule is not
  // preferred, the device's limits are never queried.
  if (!pinned) {
    ASSIGN_OR_RETURN(const double bandwidth, group_norm_detail::PeakDramBandwidth());
    if (!group_norm_detail::ResidentPreferredAt(bandwidth)) return false;
  }
  ASSIGN_OR_RETURN(const int ctas, group_norm_detail::ResidentCtas(params, options.resident_ctas));
  if (ctas == 0) return cannot_run();
  const absl::Status status = group_norm_detail::LaunchResidentGroupNorm(
      params, input, weight, bias, output, workspace, ctas, stream);
  // Unpinned, a grid the driver cannot hold at once takes the lagged
  // schedule instead.
  if (!pinned && absl::IsResourceExhausted(status)) return false;
  RETURN_IF_ERROR(status);
  return true;
}

}  // namespace

absl::Status ValidateGroupNormParams(const GroupNormParams& p) {
  if (p.batch < 1 || p.channels < 1 || p.spatial_size < 1 || p.num_groups < 1) {
    return absl::InvalidArgumentError(absl::StrCat("GroupNorm sizes must be >= 1: batch ", p.batch,
                                                   ", channels ", p.channels, ", spatial_size ",
                                                   p.spatial_size, ", num_groups ", p.num_groups));
  }
  if (p.channels % p.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GroupNorm num_groups ", p.num_groups,
                                                   " does not divide channels ", p.channels));
  }
  if (!std::isfinite(p.eps) || p.eps <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupNorm eps must be finite and > 0, got ", p.eps));
  }
  if (p.prologue != GroupNormPrologue::kNone && p.prologue != GroupNormPrologue::kGeluErf) {
    return absl::InvalidArgumentError("GroupNorm prologue is not a GroupNormPrologue value");
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (p.channels > kMax / p.batch || p.spatial_size > kMax / (p.batch * p.channels)) {
    return absl::InvalidArgumentError("GroupNorm element count overflows int64");
  }
  const GroupGeometry geometry = Geometry(p);
  if (geometry.total_chunks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupNorm tensor too large: ", geometry.total_chunks, " chunks of ",
                     kChunkElements, " elements exceed the grid"));
  }
  return absl::OkStatus();
}

size_t GroupNormWorkspaceBytes(const GroupNormParams& params) {
  if (!ValidateGroupNormParams(params).ok()) return 0;
  const GroupGeometry geometry = Geometry(params);
  const size_t two_read =
      PartialsBytes(geometry) + static_cast<size_t>(geometry.total_groups) * sizeof(float4);
  return std::max({two_read, group_norm_detail::LaggedWorkspaceBytes(params),
                   group_norm_detail::ResidentWorkspaceBytes(params)});
}

absl::Status GroupNorm(const GroupNormParams& params, const float* input, const float* weight,
                       const float* bias, float* output, void* workspace, cudaStream_t stream,
                       const GroupNormOptions& options) {
  RETURN_IF_ERROR(ValidateGroupNormParams(params));
  if (input == nullptr || output == nullptr || workspace == nullptr) {
    return absl::InvalidArgumentError("GroupNorm: input, output and workspace must be non-null");
  }
  if (!Aligned16(workspace)) {
    return absl::InvalidArgumentError("GroupNorm: workspace must be 16-byte aligned");
  }
  if (options.lag_chunks < 0 || options.lagged_ctas_per_sm < 0 || options.resident_ctas < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupNorm: lag_chunks, lagged_ctas_per_sm and resident_ctas must be >= 0, got ",
        options.lag_chunks, ", ", options.lagged_ctas_per_sm, " and ", options.resident_ctas));
  }
  const GroupGeometry geometry = Geometry(params);
  ASSIGN_OR_RETURN(const bool resident, LaunchResidentIfChosen(params, input, weight, bias, output,
                                                              workspace, options, stream));
  if (resident) return absl::OkStatus();
  const int64_t lag =
      options.lag_chunks > 0 ? options.lag_chunks : group_norm_detail::DefaultLagChunks(params);
  const bool lagged_eligible = group_norm_detail::LaggedEligible(params, input, output, lag);
  if (options.schedule == GroupNormSchedule::kLagged && !lagged_eligible) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupNorm: the lagged schedule needs 16-byte aligned input and output, spatial_size % 4 "
        "== 0 (got ",
        params.spatial_size, ") and a lag of at least one group's chunks (",
        geometry.chunks_per_group, ") and at most the tensor's (", geometry.total_chunks,
        "); got a lag of ", lag));
  }
  if (options.schedule != GroupNormSchedule::kTwoRead && lagged_eligible) {
    return group_norm_detail::LaunchLaggedGroupNorm(params, input, weight, bias, output, workspace,
                                                    lag, options.lagged_ctas_per_sm, stream);
  }
  auto* partials = static_cast<double2*>(workspace);
  auto* stats = reinterpret_cast<float4*>(static_cast<char*>(workspace) + PartialsBytes(geometry));
  const bool gelu = params.prologue == GroupNormPrologue::kGeluErf;
  const bool vectorized = Aligned16(input) && geometry.group_size % 4 == 0;

  if (gelu) {
    RETURN_IF_ERROR(Launch(GroupPartialsKernel<true>, geometry.total_chunks, kThreads, stream,
                           input, geometry.group_size, geometry.chunks_per_group, vectorized,
                           partials));
  } else {
    RETURN_IF_ERROR(Launch(GroupPartialsKernel<false>, geometry.total_chunks, kThreads, stream,
                           input, geometry.group_size, geometry.chunks_per_group, vectorized,
                           partials));
  }
  const int64_t stats_blocks = (geometry.total_groups * 32 + kStatsThreads - 1) / kStatsThreads;
  if (gelu) {
    RETURN_IF_ERROR(Launch(GroupStatsKernel<true>, stats_blocks, kStatsThreads, stream, input,
                           static_cast<const double2*>(partials), geometry.group_size,
                           geometry.chunks_per_group, geometry.total_groups, params.eps, stats));
  } else {
    RETURN_IF_ERROR(Launch(GroupStatsKernel<false>, stats_blocks, kStatsThreads, stream, input,
                           static_cast<const double2*>(partials), geometry.group_size,
                           geometry.chunks_per_group, geometry.total_groups, params.eps, stats));
  }
  StatsSource source;
  source.stats = stats;
  return LaunchNormalize(params, geometry, input, weight, bias, source, output, stream);
}

absl::Status GroupNormApply(const GroupNormParams& params, const double* group_sums,
                            const float* weight, const float* bias, float* data,
                            cudaStream_t stream) {
  RETURN_IF_ERROR(ValidateGroupNormParams(params));
  if (params.prologue != GroupNormPrologue::kNone) {
    return absl::InvalidArgumentError("GroupNormApply: the prologue must be kNone");
  }
  if (group_sums == nullptr || data == nullptr) {
    return absl::InvalidArgumentError("GroupNormApply: group_sums and data must be non-null");
  }
  StatsSource source;
  source.sums = group_sums;
  return LaunchNormalize(params, Geometry(params), data, weight, bias, source, data, stream);
}

}  // namespace fuseserve::cuda
