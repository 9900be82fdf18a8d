#pragma once

// Float64 references of the three whole model families (SPEC.md §1),
// composed from the reference ops (the `groupnorm` family is
// reference::GroupNorm itself). T is float or double; results are double.

#include <cstdint>
#include <vector>

#include "kernels/reference/ops.h"

namespace fuseserve {
namespace reference {

struct ConvTransposeGeluGroupNormShape {
  ConvTranspose2dShape conv;
  int64_t num_groups = 0;
  double eps = 1e-5;
};

// GroupNorm(G, C_out)(GELU(ConvTranspose2d(x))); output [N, C_out, H_out, W_out].
template <typename T>
std::vector<double> ConvTransposeGeluGroupNorm(const ConvTransposeGeluGroupNormShape& shape,
                                               const T* input, const T* conv_weight,
                                               const T* conv_bias, const T* gn_weight,
                                               const T* gn_bias);

struct GemmBiasHardtanhMishGroupNormShape {
  int64_t batch = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t num_groups = 0;
  double hardtanh_min = -1.0;
  double hardtanh_max = 1.0;
  double eps = 1e-5;
};

// GroupNorm(Mish(Hardtanh(Linear(x) + bias))); output [N, out_features].
template <typename T>
std::vector<double> GemmBiasHardtanhMishGroupNorm(const GemmBiasHardtanhMishGroupNormShape& shape,
                                                  const T* input, const T* gemm_weight,
                                                  const T* gemm_bias, const T* bias,
                                                  const T* gn_weight, const T* gn_bias);

}  // namespace reference
}  // namespace fuseserve
