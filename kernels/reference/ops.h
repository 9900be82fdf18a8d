#pragma once

// Float64 reference implementations of the ops, written as the definitions
// read (plain loops, no blocking, no reassociation tricks) so that they are
// obviously right. Test-only: no argument checking beyond the stated
// preconditions, no threads. T is float or double; results are double.

#include <cstdint>
#include <vector>

namespace fuseserve {
namespace reference {

struct ConvTranspose2dShape {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t in_height = 0;
  int64_t in_width = 0;
  int64_t kernel_size = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;

  // (in - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1
  int64_t out_height() const;
  int64_t out_width() const;
};

// PyTorch ConvTranspose2d (dilation 1, groups 1), NCHW:
//   out[n, co, ih*stride - padding + kh, iw*stride - padding + kw]
//       += x[n, ci, ih, iw] * w[ci, co, kh, kw],   out starts at bias[co].
// weight: [in_channels, out_channels, k, k]; bias: [out_channels] or null.
template <typename T>
std::vector<double> ConvTranspose2d(const ConvTranspose2dShape& shape, const T* input,
                                    const T* weight, const T* bias);

// 0.5 * x * (1 + erf(x / sqrt(2))), elementwise.
template <typename T>
std::vector<double> Gelu(const T* input, int64_t count);

// min(max(x, min_value), max_value).
double Hardtanh(double x, double min_value, double max_value);

// x * tanh(softplus(x)), softplus(x) = log1p(exp(x)) (x itself above 20, as
// PyTorch's softplus threshold).
double Mish(double x);

struct GroupNormShape {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t spatial_size = 1;  // product of the dimensions after C
  int64_t num_groups = 0;
  double eps = 1e-5;
};

// GroupNorm on [batch, channels, spatial_size]: per (sample, group) mean and
// biased variance (two passes), (x - mean) / sqrt(var + eps) * w[c] + b[c].
// weight, bias: [channels] or null (1 and 0).
template <typename T>
std::vector<double> GroupNorm(const GroupNormShape& shape, const T* input, const T* weight,
                              const T* bias);

struct LinearShape {
  int64_t batch = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
};

// y[n, o] = sum_i x[n, i] * w[o, i] + b[o]; weight [out_features,
// in_features]; bias [out_features] or null.
template <typename T>
std::vector<double> Linear(const LinearShape& shape, const T* input, const T* weight,
                           const T* bias);

struct BiasHardtanhMishGroupNormShape {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t num_groups = 0;
  double hardtanh_min = -1.0;
  double hardtanh_max = 1.0;
  double eps = 1e-5;
};

// GroupNorm(Mish(Hardtanh(x + bias))) on [batch, channels] (groups of
// channels/num_groups consecutive channels). Any pointer but input may be
// null (bias 0, weight 1, gn bias 0).
template <typename T>
std::vector<double> BiasHardtanhMishGroupNorm(const BiasHardtanhMishGroupNormShape& shape,
                                              const T* input, const T* bias, const T* gn_weight,
                                              const T* gn_bias);

}  // namespace reference
}  // namespace fuseserve
