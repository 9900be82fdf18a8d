#include "kernels/cuda/bias_hardtanh_mish_group_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_status.h"

// Schedule. A group is F/G consecutive channels of one row, so group i of
// the whole [N, F] tensor is the contiguous range [i * F/G, (i + 1) * F/G).
// Groups of up to kMaxRegisterChannels channels are held in registers by
// kWidth consecutive lanes of a warp (kWidth = the smallest power of two
// >= the group up to 32, so small groups pack several per warp); the mean
// is reduced first and the variance is then the centred sum of squares of
// the register values — exact two-pass statistics with one read and one
// write of y. Larger groups take one warp each and recompute the
// elementwise part in three passes over memory (statistics in double).
//
// Elementwise part in float32 as PyTorch evaluates it: (y + gemm_bias) +
// bias, hardtanh, then Mish(x) = x * tanh(softplus(x)) in the exact
// rewriting x * n / (n + 2), n = e^x (e^x + 2), and x itself above
// PyTorch's softplus threshold of 20 (where tanh rounds to 1 and n would
// overflow for x > 44).

namespace fuseserve::cuda {
namespace {

constexpr int kThreads = 256;
// 16 floats per lane: a 512-channel group in registers without spilling.
constexpr int kMaxValuesPerLane = 16;
constexpr int64_t kMaxRegisterChannels = 32 * kMaxValuesPerLane;

struct EpilogueArgs {
  const float* input;  // may equal output
  const float* gemm_bias;
  const float* bias;
  const float* gn_weight;
  const float* gn_bias;
  float* output;
  int64_t channels_per_group;
  int64_t num_groups;
  int64_t total_groups;  // batch * num_groups
  float hardtanh_min;
  float hardtanh_max;
  float eps;
};

__device__ __forceinline__ float LoadOr(const float* values, int64_t index, float fallback) {
  return values == nullptr ? fallback : __ldg(values + index);
}

__device__ __forceinline__ float Mish(float x) {
  if (x > 20.0f) return x;
  const float e = expf(x);
  const float n = e * (e + 2.0f);
  return x * n / (n + 2.0f);
}

// Mish(Hardtanh((input[index] + gemm_bias[c]) + bias[c])). Hardtanh by
// comparisons, not fminf/fmaxf, which return the other operand for a NaN:
// PyTorch's hardtanh passes a NaN through (and Mish and GroupNorm then make
// the group NaN).
__device__ __forceinline__ float Activate(const EpilogueArgs& a, int64_t index, int64_t channel) {
  const float v =
      (a.input[index] + LoadOr(a.gemm_bias, channel, 0.0f)) + LoadOr(a.bias, channel, 0.0f);
  const float clamped =
      v < a.hardtanh_min ? a.hardtanh_min : (v > a.hardtanh_max ? a.hardtanh_max : v);
  return Mish(clamped);
}

// Sum over the kWidth aligned lanes that share a group (xor offsets below
// kWidth never leave the segment). Every lane of the warp must call it.
template <int kWidth>
__device__ __forceinline__ float GroupSum(float value) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Groups of at most kWidth * kPerLane channels; lane l of a group holds
// channels l, l + kWidth, ... (consecutive lanes read consecutive floats).
// Lanes past the last group still take part in the shuffles.
template <int kWidth, int kPerLane>
__global__ void __launch_bounds__(kThreads) RegisterGroupsKernel(EpilogueArgs a) {
  const int64_t thread = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  const int64_t group = thread / kWidth;
  const int lane = static_cast<int>(threadIdx.x % kWidth);
  const int channels = static_cast<int>(a.channels_per_group);
  const bool active = group < a.total_groups;
  const int64_t base = group * a.channels_per_group;
  const int64_t first_channel = (group % a.num_groups) * a.channels_per_group;

  float values[kPerLane];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = i * kWidth + lane;
    values[i] = (active && j < channels) ? Activate(a, base + j, first_channel + j) : 0.0f;
    sum += values[i];
  }
  const float mean = GroupSum<kWidth>(sum) / static_cast<float>(channels);
  float sum_squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = i * kWidth + lane;
    const float centred = (j < channels) ? values[i] - mean : 0.0f;
    sum_squares = fmaf(centred, centred, sum_squares);
  }
  const float variance = GroupSum<kWidth>(sum_squares) / static_cast<float>(channels);
  const float rstd = rsqrtf(variance + a.eps);
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = i * kWidth + lane;
    if (j < channels) {
      const int64_t channel = first_channel + j;
      a.output[base + j] = fmaf(values[i] - mean, rstd * LoadOr(a.gn_weight, channel, 1.0f),
                                LoadOr(a.gn_bias, channel, 0.0f));
    }
  }
}

// One warp per group of any size; lane l touches only channels l + 32 k in
// every pass, so output may equal input.
__global__ void __launch_bounds__(kThreads) LargeGroupsKernel(EpilogueArgs a) {
  const int64_t group = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  if (group >= a.total_groups) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t base = group * a.channels_per_group;
  const int64_t first_channel = (group % a.num_groups) * a.channels_per_group;
  const double count = static_cast<double>(a.channels_per_group);

  double sum = 0.0;
  for (int64_t j = lane; j < a.channels_per_group; j += 32) {
    sum += static_cast<double>(Activate(a, base + j, first_channel + j));
  }
  const double mean = WarpSum(sum) / count;
  double sum_squares = 0.0;
  for (int64_t j = lane; j < a.channels_per_group; j += 32) {
    const double centred = static_cast<double>(Activate(a, base + j, first_channel + j)) - mean;
    sum_squares += centred * centred;
  }
  const double variance = WarpSum(sum_squares) / count;
  const float rstd = static_cast<float>(1.0 / sqrt(variance + static_cast<double>(a.eps)));
  const float mean_f = static_cast<float>(mean);
  for (int64_t j = lane; j < a.channels_per_group; j += 32) {
    const int64_t channel = first_channel + j;
    const float v = Activate(a, base + j, channel);
    a.output[base + j] = fmaf(v - mean_f, rstd * LoadOr(a.gn_weight, channel, 1.0f),
                              LoadOr(a.gn_bias, channel, 0.0f));
  }
}

template <int kWidth, int kPerLane>
absl::Status LaunchRegisterGroups(const EpilogueArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.total_groups * kWidth + kThreads - 1) / kThreads;
  RegisterGroupsKernel<kWidth, kPerLane>
      <<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(a);
  return CudaStatus(cudaGetLastError(), "BiasHardtanhMishGroupNorm kernel launch");
}

}  // namespace

absl::Status ValidateBiasHardtanhMishGroupNormParams(const BiasHardtanhMishGroupNormParams& p) {
  if (p.batch < 1 || p.channels < 1 || p.num_groups < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("BiasHardtanhMishGroupNorm sizes must be >= 1: batch ", p.batch, ", channels ",
                     p.channels, ", num_groups ", p.num_groups));
  }
  if (p.channels % p.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("BiasHardtanhMishGroupNorm num_groups ",
                                                   p.num_groups, " does not divide channels ",
                                                   p.channels));
  }
  if (!std::isfinite(p.hardtanh_min) || !std::isfinite(p.hardtanh_max) ||
      p.hardtanh_min > p.hardtanh_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BiasHardtanhMishGroupNorm hardtanh bounds must be finite with min <= max, got [",
        p.hardtanh_min, ", ", p.hardtanh_max, "]"));
  }
  if (!std::isfinite(p.eps) || p.eps <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("BiasHardtanhMishGroupNorm eps must be finite and > 0, got ", p.eps));
  }
  // Every group takes at most 32 threads; the grid's x dimension is 31-bit.
  constexpr int64_t kMaxGroups = int64_t{std::numeric_limits<int32_t>::max()} / 32 * kThreads;
  if (p.channels > std::numeric_limits<int64_t>::max() / p.batch ||
      p.batch * p.num_groups > kMaxGroups) {
    return absl::InvalidArgumentError("BiasHardtanhMishGroupNorm tensor too large");
  }
  return absl::OkStatus();
}

absl::Status BiasHardtanhMishGroupNorm(const BiasHardtanhMishGroupNormParams& params,
                                       const float* input, const float* gemm_bias,
                                       const float* bias, const float* gn_weight,
                                       const float* gn_bias, float* output, cudaStream_t stream) {
  RETURN_IF_ERROR(ValidateBiasHardtanhMishGroupNormParams(params));
  if (input == nullptr || output == nullptr) {
    return absl::InvalidArgumentError(
        "BiasHardtanhMishGroupNorm: input and output must be non-null");
  }
  EpilogueArgs a;
  a.input = input;
  a.gemm_bias = gemm_bias;
  a.bias = bias;
  a.gn_weight = gn_weight;
  a.gn_bias = gn_bias;
  a.output = output;
  a.channels_per_group = params.channels / params.num_groups;
  a.num_groups = params.num_groups;
  a.total_groups = params.batch * params.num_groups;
  a.hardtanh_min = params.hardtanh_min;
  a.hardtanh_max = params.hardtanh_max;
  a.eps = params.eps;

  const int64_t c = a.channels_per_group;
  if (c <= 1) return LaunchRegisterGroups<1, 1>(a, stream);
  if (c <= 2) return LaunchRegisterGroups<2, 1>(a, stream);
  if (c <= 4) return LaunchRegisterGroups<4, 1>(a, stream);
  if (c <= 8) return LaunchRegisterGroups<8, 1>(a, stream);
  if (c <= 16) return LaunchRegisterGroups<16, 1>(a, stream);
  if (c <= 32) return LaunchRegisterGroups<32, 1>(a, stream);
  if (c <= 64) return LaunchRegisterGroups<32, 2>(a, stream);
  if (c <= 128) return LaunchRegisterGroups<32, 4>(a, stream);
  if (c <= 256) return LaunchRegisterGroups<32, 8>(a, stream);
  if (c <= kMaxRegisterChannels) return LaunchRegisterGroups<32, kMaxValuesPerLane>(a, stream);
  const int64_t blocks = (a.total_groups * 32 + kThreads - 1) / kThreads;
  LargeGroupsKernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(a);
  return CudaStatus(cudaGetLastError(), "BiasHardtanhMishGroupNorm kernel launch");
}

}  // namespace fuseserve::cuda
