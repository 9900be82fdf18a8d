#pragma once

// The per-chunk steps of GroupNorm's one-HBM-read schedules (the lagged one,
// group_norm_lagged.cu, and the resident one, group_norm_resident.cu):
// where a chunk lies, copying it to shared memory, its partial sums, the
// combination of a group's partials into its statistics, and the chunk's
// normalisation from where it was staged. How a partial is published and
// awaited is each schedule's own. Both cut, sum and combine exactly as the
// two-read schedule (group_norm.cu) does, so all three give bitwise the
// same output. Internal to the CUDA backend.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gpu_scope.cuh"
#include "kernels/cuda/group_norm.h"
#include "kernels/cuda/group_norm_common.cuh"

namespace fuseserve::cuda::group_norm_detail {

inline size_t RoundUp16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Whether a one-read schedule's access shape fits: 16-byte aligned input
// and output, and spatial_size a multiple of 4 (every float4 in one
// channel, every chunk boundary float4-aligned).
inline bool OneReadShapeEligible(const GroupNormParams& params, const float* input,
                                 const float* output) {
  return Aligned16(input) && Aligned16(output) && params.spatial_size % 4 == 0;
}

// A one-read schedule's kernel arguments; the shifts, arrivals, lag and
// ticket are the lagged schedule's (the resident one keeps its shifts in
// double, group_norm_resident.cu).
struct OneReadArgs {
  const float* input;
  const float* weight;  // [channels] or null
  const float* bias;    // [channels] or null
  float* output;        // may equal input
  int64_t group_size;
  int64_t chunks_per_group;
  int64_t total_chunks;
  int64_t lag;
  int64_t num_groups;
  int64_t channels_per_group;
  int64_t spatial_size;
  float eps;
  double2* partials;
  float* shifts;
  unsigned int* arrivals;
  unsigned int* ticket;
};

// The arguments of either schedule's kernel but its scratch (partials,
// shifts, counters) and the lagged one's lag.
inline OneReadArgs ArgsFor(const GroupNormParams& params, const GroupGeometry& geometry,
                           const float* input, const float* weight, const float* bias,
                           float* output) {
  OneReadArgs args{};
  args.input = input;
  args.weight = weight;
  args.bias = bias;
  args.output = output;
  args.group_size = geometry.group_size;
  args.chunks_per_group = geometry.chunks_per_group;
  args.total_chunks = geometry.total_chunks;
  args.num_groups = params.num_groups;
  args.channels_per_group = params.channels / params.num_groups;
  args.spatial_size = params.spatial_size;
  args.eps = params.eps;
  return args;
}

// The warp of a CTA that works out the statistics of the group it
// normalises.
constexpr int kStatsWarp = 1;

// A chunk staged in shared memory: 64 KiB.
constexpr size_t kStagedChunkBytes = sizeof(float4) * kThreads * kVectorsPerThread;

// This thread's float4 vectors of a chunk (thread i holds vectors i,
// i + kThreads, ...) where StageChunk copied them, read when used (after
// WaitStaged).
struct StagedVectorsOfThread {
  const float4* staged;
  __device__ __forceinline__ float4 operator[](int i) const {
    return staged[threadIdx.x + i * kThreads];
  }
};

// This thread's vectors of a chunk in global memory (from its first
// element), loaded where they are used: ordinary loads (not __ldg: with
// output == input, other CTAs write this tensor).
struct GlobalVectorsOfThread {
  const float* first;
  __device__ __forceinline__ float4 operator[](int i) const {
    return reinterpret_cast<const float4*>(first)[threadIdx.x + i * kThreads];
  }
};

// Where chunk `chunk` of the tensor lies: its (sample, group) slab, its
// first element within the slab, and its float4 vectors.
struct ChunkSpan {
  int64_t group;
  int64_t begin;
  int count;
};

// 32-bit unsigned quotient and remainder of indices that fit: chunk and
// group indices do (GroupNorm refuses tensors of 2^31 chunks or more), and
// so do offsets within a group of fewer than 2^32 elements. A 64-bit
// division is a long software sequence, several of them a step of a
// persistent kernel.
__device__ __forceinline__ int64_t Quotient32(int64_t x, int64_t d) {
  return static_cast<uint32_t>(x) / static_cast<uint32_t>(d);
}

__device__ __forceinline__ ChunkSpan SpanOf(const OneReadArgs& a, int64_t chunk) {
  const int64_t group = Quotient32(chunk, a.chunks_per_group);
  const int64_t begin = (chunk - group * a.chunks_per_group) * kChunkElements;
  return {group, begin, static_cast<int>((min(begin + kChunkElements, a.group_size) - begin) / 4)};
}

// The channel of the element `offset` into (sample, group) slab `group`.
__device__ __forceinline__ int64_t ChannelOf(const OneReadArgs& a, int64_t group, int64_t offset) {
  const int64_t first_channel =
      (group - Quotient32(group, a.num_groups) * a.num_groups) * a.channels_per_group;
  const bool narrow = a.group_size <= int64_t{std::numeric_limits<uint32_t>::max()};
  return first_channel +
         (narrow ? Quotient32(offset, a.spatial_size) : offset / a.spatial_size);
}

// The chunk's first element in `tensor` (the input or the output).
template <typename T>
__device__ __forceinline__ T* FirstOf(const OneReadArgs& a, const ChunkSpan& span, T* tensor) {
  return tensor + span.group * a.group_size + span.begin;
}

// How StageChunk's copies leave the lines they read in L2: marked first to
// evict (the lagged schedule's copy, the second and last read of a chunk
// that sits in L2), or under L2's default policy (the resident schedule's
// copy, a chunk's only read, straight from HBM: 0.7-0.8% faster there than
// marked in two same-call A/Bs on H200s, and 0.2-0.4% more with L2 asked for
// whole 128-byte lines, bench/kernel_notes.md v41).
enum class StagedLines { kEvictFirst, kDefault };

// The last read of chunk `chunk`: this thread's vectors copied to the same
// places of `staged`, one cp.async group. By default all of them; a part
// (vectors kFirstVector to kFirstVector + kVectors - 1 of this thread's
// kVectorsPerThread) where a schedule spreads a chunk's copy over a step.
template <StagedLines kLines, int kFirstVector = 0, int kVectors = kVectorsPerThread>
__device__ __forceinline__ void StageChunk(const OneReadArgs& a, int64_t chunk, float4* staged) {
  static_assert(kFirstVector >= 0 && kVectors > 0 && kFirstVector + kVectors <= kVectorsPerThread);
  const ChunkSpan span = SpanOf(a, chunk);
  const float* first = FirstOf(a, span, a.input);
#pragma unroll
  for (int i = kFirstVector; i < kFirstVector + kVectors; ++i) {
    const int index = static_cast<int>(threadIdx.x) + i * kThreads;
    if (index < span.count) {
      float* to = reinterpret_cast<float*>(staged + index);
      const float* from = first + int64_t{index} * 4;
      if constexpr (kLines == StagedLines::kEvictFirst) {
        CpAsync16LastUse(to, from);
      } else {
        CpAsync16Line128(to, from);
      }
    }
  }
  CpAsyncCommit();
}

// This thread's vectors of the chunk StageChunk copied last, once its
// copies have landed (no barrier: no thread reads another's vectors).
__device__ __forceinline__ StagedVectorsOfThread WaitStaged(const float4* staged) {
  CpAsyncWait<0>();
  return {staged};
}

// The shifted sum and sum of squares of a chunk (at `span`), this thread's
// vectors of it in `loaded` (GlobalVectorsOfThread or
// StagedVectorsOfThread), shifted by `shift` (the group's first value after
// the prologue). Block-uniform; synchronises the block (BlockSum2); the
// total is valid in thread 0.
template <bool kGelu, typename Vectors>
__device__ __forceinline__ double2 ChunkPartial(const ChunkSpan& span, const Vectors& loaded,
                                                float shift) {
  double sum = 0.0;
  double sum_squares = 0.0;
  if (span.count == kThreads * kVectorsPerThread) {
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      AddShifted4<kGelu>(loaded[i], shift, sum, sum_squares);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < span.count) AddShifted4<kGelu>(loaded[i], shift, sum, sum_squares);
    }
  }
  return BlockSum2(sum, sum_squares);
}

// The group's first value after the prologue, the shift of every chunk's
// sums: the group is not normalised (in place) before every chunk of it
// has been summed, so this still reads the input.
template <bool kGelu>
__device__ __forceinline__ float GroupShift(const OneReadArgs& a, const ChunkSpan& span) {
  return Prologue<kGelu>(a.input[span.group * a.group_size]);
}

// By one warp, from each lane's sums of the group's partials (lane l adds
// chunks l, l + 32, ... in order): the group's statistics (PackStats),
// valid in every lane. The one order every schedule combines partials in.
__device__ __forceinline__ float4 StatsFromLaneSums(double group_sum, double group_squares,
                                                    double shift, int64_t group_size, float eps) {
  group_sum = WarpSum(group_sum);
  group_squares = WarpSum(group_squares);
  const double n = static_cast<double>(group_size);
  const double shifted_mean = group_sum / n;
  const double variance = ClampVariance(group_squares / n - shifted_mean * shifted_mean);
  return PackStats(shift + shifted_mean, variance, eps);
}

// The weight and bias of the channel a chunk starts in (1 and 0 where
// absent): the whole chunk's when it lies in one channel. Loaded apart from
// NormalizeStaged so that a caller can issue the loads early.
struct ChannelAffine {
  float weight;
  float bias;
};

__device__ __forceinline__ ChannelAffine FirstChannelAffine(const OneReadArgs& a,
                                                            const ChunkSpan& span) {
  const int64_t channel = ChannelOf(a, span.group, span.begin);
  return {LoadOr(a.weight, channel, 1.0f), LoadOr(a.bias, channel, 0.0f)};
}

// Phase 2 for the chunk at `span`, as StageChunk copied it (after
// WaitStaged), with its group's `stats` and its first channel's affine
// parameters `first` (FirstChannelAffine).
template <bool kGelu>
__device__ __forceinline__ void NormalizeStaged(const OneReadArgs& a, const ChunkSpan& span,
                                                float4 stats, ChannelAffine first,
                                                const StagedVectorsOfThread& loaded) {
  const int count = span.count;
  const float mean_hi = stats.x;
  const float mean_lo = stats.y;
  const float rstd = stats.z;
  float4* out = reinterpret_cast<float4*>(FirstOf(a, span, a.output));
  // A whole chunk within one channel (the usual case: channels of at least
  // a chunk's elements): one scale and shift for all of it.
  const int64_t first_channel = ChannelOf(a, span.group, span.begin);
  if (count == kThreads * kVectorsPerThread &&
      ChannelOf(a, span.group, span.begin + kChunkElements - 1) == first_channel) {
    const float scale = rstd * first.weight;
    const float shift = first.bias;
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      __stcs(out + threadIdx.x + i * kThreads,
             Normalize4<kGelu>(loaded[i], mean_hi, mean_lo, scale, shift));
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVectorsPerThread; ++i) {
    const int index = static_cast<int>(threadIdx.x) + i * kThreads;
    if (index < count) {
      const int64_t channel = ChannelOf(a, span.group, span.begin + int64_t{index} * 4);
      const float scale = rstd * LoadOr(a.weight, channel, 1.0f);
      __stcs(out + index,
             Normalize4<kGelu>(loaded[i], mean_hi, mean_lo, scale, LoadOr(a.bias, channel, 0.0f)));
    }
  }
}

}  // namespace fuseserve::cuda::group_norm_detail
