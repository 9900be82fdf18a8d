#pragma once

// PyTorch's ConvTranspose2d (dilation 1, groups 1) on NCHW float32 tensors.

#include <cstdint>

#include "absl/status/status.h"
#include "common/thread_pool.h"

namespace fuseserve {
namespace cpu {

struct ConvTranspose2dParams {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t in_height = 0;
  int64_t in_width = 0;
  int64_t kernel_size = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
};

// (in_size - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1,
// PyTorch's output size along one spatial dimension. May be <= 0 for
// parameters that ConvTranspose2d rejects.
int64_t ConvTranspose2dOutputSize(int64_t in_size, int64_t kernel_size, int64_t stride,
                                  int64_t padding, int64_t output_padding);

// InvalidArgument unless: every size >= 1, stride >= 1, padding >= 0,
// 0 <= output_padding < stride (PyTorch's rule for dilation 1), both output
// sizes >= 1, and the matrix sizes fit OpenBLAS's 32-bit integers.
absl::Status ValidateConvTranspose2dParams(const ConvTranspose2dParams& params);

// output[n, co, oh, ow] = bias[co] + sum over ci, kh, kw with
//   oh = ih * stride - padding + kh, ow = iw * stride - padding + kw
// of input[n, ci, ih, iw] * weight[ci, co, kh, kw].
//
// input: [batch, in_channels, in_height, in_width]
// weight: [in_channels, out_channels, kernel_size, kernel_size] (PyTorch's layout)
// bias: [out_channels], or null for no bias
// output: [batch, out_channels, out_height, out_width]; must not alias input.
// Computes in float32 (sgemm, then a float32 scatter-add of the k*k taps).
absl::Status ConvTranspose2d(const ConvTranspose2dParams& params, const float* input,
                             const float* weight, const float* bias, float* output,
                             ThreadPool& pool);

}  // namespace cpu
}  // namespace fuseserve
