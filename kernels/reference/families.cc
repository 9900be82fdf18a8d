#include "kernels/reference/families.h"

namespace fuseserve {
namespace reference {
namespace {

// values[0, count) as double, or `count` copies of `fallback` when null.
template <typename T>
std::vector<double> ToDouble(const T* values, int64_t count, double fallback) {
  if (values == nullptr) return std::vector<double>(count, fallback);
  return std::vector<double>(values, values + count);
}

}  // namespace

template <typename T>
std::vector<double> ConvTransposeGeluGroupNorm(const ConvTransposeGeluGroupNormShape& s,
                                               const T* input, const T* conv_weight,
                                               const T* conv_bias, const T* gn_weight,
                                               const T* gn_bias) {
  const std::vector<double> conv = ConvTranspose2d(s.conv, input, conv_weight, conv_bias);
  const std::vector<double> activated = Gelu(conv.data(), static_cast<int64_t>(conv.size()));
  const std::vector<double> gn_w = ToDouble(gn_weight, s.conv.out_channels, 1.0);
  const std::vector<double> gn_b = ToDouble(gn_bias, s.conv.out_channels, 0.0);
  const GroupNormShape gn{s.conv.batch, s.conv.out_channels,
                          s.conv.out_height() * s.conv.out_width(), s.num_groups, s.eps};
  return GroupNorm(gn, activated.data(), gn_w.data(), gn_b.data());
}

template <typename T>
std::vector<double> GemmBiasHardtanhMishGroupNorm(const GemmBiasHardtanhMishGroupNormShape& s,
                                                  const T* input, const T* gemm_weight,
                                                  const T* gemm_bias, const T* bias,
                                                  const T* gn_weight, const T* gn_bias) {
  const std::vector<double> linear =
      Linear(LinearShape{s.batch, s.in_features, s.out_features}, input, gemm_weight, gemm_bias);
  const std::vector<double> bias_d = ToDouble(bias, s.out_features, 0.0);
  const std::vector<double> gn_w = ToDouble(gn_weight, s.out_features, 1.0);
  const std::vector<double> gn_b = ToDouble(gn_bias, s.out_features, 0.0);
  return BiasHardtanhMishGroupNorm(
      BiasHardtanhMishGroupNormShape{s.batch, s.out_features, s.num_groups, s.hardtanh_min,
                                     s.hardtanh_max, s.eps},
      linear.data(), bias_d.data(), gn_w.data(), gn_b.data());
}

#define FUSESERVE_INSTANTIATE_REFERENCE_FAMILIES(T)                                                \
  template std::vector<double> ConvTransposeGeluGroupNorm<T>(                                      \
      const ConvTransposeGeluGroupNormShape&, const T*, const T*, const T*, const T*, const T*);   \
  template std::vector<double> GemmBiasHardtanhMishGroupNorm<T>(                                   \
      const GemmBiasHardtanhMishGroupNormShape&, const T*, const T*, const T*, const T*, const T*, \
      const T*);

FUSESERVE_INSTANTIATE_REFERENCE_FAMILIES(float)
FUSESERVE_INSTANTIATE_REFERENCE_FAMILIES(double)

#undef FUSESERVE_INSTANTIATE_REFERENCE_FAMILIES

}  // namespace reference
}  // namespace fuseserve
