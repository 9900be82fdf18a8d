#pragma once

// Device helpers shared by the GroupNorm schedules (group_norm.cu's two-read
// kernels, group_norm_lagged.cu's one-HBM-read kernel). Internal to the
// CUDA backend.

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/group_norm.h"

namespace fuseserve::cuda::group_norm_detail {

// 512 threads x 8 float4 loads in flight each: 64 KiB per CTA, enough bytes
// in flight per SM at a few resident CTAs to cover HBM latency. A chunk is
// what one CTA reads. 512 rather than 256 halves the per-chunk work (ticket,
// block sum, partial, arrival) per byte: the lagged schedule ran 1.1-1.6%
// faster on an H200 and 1.4% on an H100 (bench/kernel_notes.md v28).
constexpr int kThreads = 512;
constexpr int kVectorsPerThread = 8;
// The elements one block of `block_threads` reads.
constexpr int64_t ChunkElementsFor(int block_threads) {
  return int64_t{block_threads} * 4 * kVectorsPerThread;
}
constexpr int64_t kChunkElements = ChunkElementsFor(kThreads);

// How a GroupNorm tensor is cut: a (sample, group) slab is contiguous
// ([C/G channels x spatial]) and split into chunks of kChunkElements (or of
// a normaliser's own size: the chunks only have to match where partial sums
// are taken, not where a group's statistics are applied).
struct GroupGeometry {
  int64_t group_size = 0;  // (C / G) * spatial, elements per (sample, group)
  int64_t chunks_per_group = 0;
  int64_t total_groups = 0;  // batch * num_groups
  int64_t total_chunks = 0;
};

inline GroupGeometry Geometry(const GroupNormParams& p, int64_t chunk_elements = kChunkElements) {
  GroupGeometry geometry;
  geometry.group_size = p.channels / p.num_groups * p.spatial_size;
  geometry.chunks_per_group = (geometry.group_size + chunk_elements - 1) / chunk_elements;
  geometry.total_groups = p.batch * p.num_groups;
  geometry.total_chunks = geometry.total_groups * geometry.chunks_per_group;
  return geometry;
}

using ::fuseserve::cuda::Aligned16;

template <bool kGelu>
__device__ __forceinline__ float Prologue(float x) {
  if constexpr (kGelu) {
    return GeluErf(x);
  } else {
    return x;
  }
}

// E[x^2] - E[x]^2 can round slightly below 0: clamp it, but let a NaN (from
// an Inf or NaN input) through to the group's output, as PyTorch does
// (fmax would turn it into 0 and the Infs into Infs).
__device__ __forceinline__ double ClampVariance(double variance) {
  return variance < 0.0 ? 0.0 : variance;
}

__device__ __forceinline__ float LoadOr(const float* values, int64_t index, float fallback) {
  return values == nullptr ? fallback : __ldg(values + index);
}

// A group's statistics as the normalisation uses them: mean = x + y (the
// double mean split into a float and the float of its remainder), rstd = z.
__device__ __forceinline__ float4 PackStats(double mean, double variance, float eps) {
  const float mean_hi = static_cast<float>(mean);
  return make_float4(mean_hi, static_cast<float>(mean - static_cast<double>(mean_hi)),
                     static_cast<float>(1.0 / sqrt(variance + static_cast<double>(eps))), 0.0f);
}

// The sum and sum of squares of 4 shifted values: added in float (at most 4
// terms), returned for accumulation in double.
template <bool kGelu>
__device__ __forceinline__ void AddShifted4(float4 v, float shift, double& sum,
                                            double& sum_squares) {
  const float a = Prologue<kGelu>(v.x) - shift;
  const float b = Prologue<kGelu>(v.y) - shift;
  const float c = Prologue<kGelu>(v.z) - shift;
  const float d = Prologue<kGelu>(v.w) - shift;
  sum += static_cast<double>((a + b) + (c + d));
  sum_squares += static_cast<double>(fmaf(a, a, b * b) + fmaf(c, c, d * d));
}

// ((prologue(v) - mean_hi) - mean_lo) * scale + shift for 4 values.
template <bool kGelu>
__device__ __forceinline__ float4 Normalize4(float4 v, float mean_hi, float mean_lo, float scale,
                                             float shift) {
  v.x = fmaf((Prologue<kGelu>(v.x) - mean_hi) - mean_lo, scale, shift);
  v.y = fmaf((Prologue<kGelu>(v.y) - mean_hi) - mean_lo, scale, shift);
  v.z = fmaf((Prologue<kGelu>(v.z) - mean_hi) - mean_lo, scale, shift);
  v.w = fmaf((Prologue<kGelu>(v.w) - mean_hi) - mean_lo, scale, shift);
  return v;
}

// A group's statistics from a producer's (sum, sum of squares) in double
// (group_norm.h GroupNormApply): group_sums[2 group], [2 group + 1] over
// `count` values.
__device__ __forceinline__ float4 StatsFromSums(const double* group_sums, int64_t group,
                                                int64_t count, float eps) {
  const double n = static_cast<double>(count);
  const double mean = group_sums[2 * group] / n;
  const double variance = ClampVariance(group_sums[2 * group + 1] / n - mean * mean);
  return PackStats(mean, variance, eps);
}

// output = ((prologue(input) - mean_hi) - mean_lo) * (rstd * weight[c]) +
// bias[c] over chunk `chunk` of (sample, group) slab `group` (n * num_groups
// + g), by the kBlockThreads threads of a block (chunks of
// ChunkElementsFor(kBlockThreads)), with the group's `stats`
// (PackStats). output may equal input (each element is read and then
// written by the same thread), so the input is read with ordinary loads,
// not through the read-only cache. Vectorised when `vectorized`: input and
// output are 16-byte aligned and spatial_size is a multiple of 4 (a float4
// then lies in one channel and every chunk boundary is float4-aligned).
template <bool kGelu, int kBlockThreads = kThreads>
__device__ __forceinline__ void NormalizeChunk(const float* input, const float* __restrict__ weight,
                                               const float* __restrict__ bias, float4 stats,
                                               int64_t group, int64_t chunk, int64_t num_groups,
                                               int64_t channels_per_group, int64_t spatial_size,
                                               bool vectorized, float* output) {
  const int64_t group_size = channels_per_group * spatial_size;
  const int64_t first_channel = (group % num_groups) * channels_per_group;
  const float mean_hi = stats.x;
  const float mean_lo = stats.y;
  const float rstd = stats.z;

  // Channel of an element at `offset` within the group; 32-bit division
  // whenever the group allows it (a 64-bit division is several times longer).
  const bool narrow = group_size <= int64_t{std::numeric_limits<uint32_t>::max()};
  auto channel_of = [&](int64_t offset) -> int64_t {
    if (narrow) {
      return first_channel + static_cast<uint32_t>(offset) / static_cast<uint32_t>(spatial_size);
    }
    return first_channel + offset / spatial_size;
  };

  constexpr int64_t kElements = ChunkElementsFor(kBlockThreads);
  const int64_t begin = chunk * kElements;
  const int64_t end = min(begin + kElements, group_size);
  const int64_t base = group * group_size;
  if (vectorized) {
    const float4* in = reinterpret_cast<const float4*>(input + base + begin);
    float4* out = reinterpret_cast<float4*>(output + base + begin);
    const int count = static_cast<int>((end - begin) / 4);
    float4 loaded[kVectorsPerThread];
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kBlockThreads;
      if (index < count) loaded[i] = in[index];
    }
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kBlockThreads;
      if (index < count) {
        const int64_t channel = channel_of(begin + int64_t{index} * 4);
        const float scale = rstd * LoadOr(weight, channel, 1.0f);
        const float shift = LoadOr(bias, channel, 0.0f);
        __stcs(out + index, Normalize4<kGelu>(loaded[i], mean_hi, mean_lo, scale, shift));
      }
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kBlockThreads) {
      const int64_t channel = channel_of(i);
      const float scale = rstd * LoadOr(weight, channel, 1.0f);
      const float v = Prologue<kGelu>(input[base + i]);
      output[base + i] = fmaf((v - mean_hi) - mean_lo, scale, LoadOr(bias, channel, 0.0f));
    }
  }
}

}  // namespace fuseserve::cuda::group_norm_detail
