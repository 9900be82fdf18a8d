#pragma once

// Device helpers shared by the GroupNorm schedules (group_norm.cu's two-read
// kernels, group_norm_lagged.cu's one-HBM-read kernel). Internal to the
// CUDA backend.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/group_norm.h"

namespace fuseserve::cuda::group_norm_detail {

// 256 threads x 8 float4 loads in flight each: 32 KiB per CTA, enough bytes
// in flight per SM at several resident CTAs to cover HBM latency. A chunk
// is what one CTA reads.
constexpr int kThreads = 256;
constexpr int kVectorsPerThread = 8;
constexpr int64_t kChunkElements = int64_t{kThreads} * 4 * kVectorsPerThread;

// How a GroupNorm tensor is cut: a (sample, group) slab is contiguous
// ([C/G channels x spatial]) and split into chunks of kChunkElements.
struct GroupGeometry {
  int64_t group_size = 0;  // (C / G) * spatial, elements per (sample, group)
  int64_t chunks_per_group = 0;
  int64_t total_groups = 0;  // batch * num_groups
  int64_t total_chunks = 0;
};

inline GroupGeometry Geometry(const GroupNormParams& p) {
  GroupGeometry geometry;
  geometry.group_size = p.channels / p.num_groups * p.spatial_size;
  geometry.chunks_per_group = (geometry.group_size + kChunkElements - 1) / kChunkElements;
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

}  // namespace fuseserve::cuda::group_norm_detail
