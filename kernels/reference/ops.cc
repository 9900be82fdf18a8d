#include "kernels/reference/ops.h"

#include <algorithm>
#include <cmath>

namespace fuseserve {
namespace reference {
namespace {

template <typename T>
double Or(const T* values, int64_t index, double fallback) {
  return values == nullptr ? fallback : static_cast<double>(values[index]);
}

}  // namespace

int64_t ConvTranspose2dShape::out_height() const {
  return (in_height - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1;
}

int64_t ConvTranspose2dShape::out_width() const {
  return (in_width - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1;
}

template <typename T>
std::vector<double> ConvTranspose2d(const ConvTranspose2dShape& s, const T* input, const T* weight,
                                    const T* bias) {
  const int64_t k = s.kernel_size;
  const int64_t out_h = s.out_height();
  const int64_t out_w = s.out_width();
  std::vector<double> out(s.batch * s.out_channels * out_h * out_w);
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t co = 0; co < s.out_channels; ++co) {
      for (int64_t i = 0; i < out_h * out_w; ++i) {
        out[(n * s.out_channels + co) * out_h * out_w + i] = Or(bias, co, 0.0);
      }
    }
    for (int64_t ci = 0; ci < s.in_channels; ++ci) {
      for (int64_t ih = 0; ih < s.in_height; ++ih) {
        for (int64_t iw = 0; iw < s.in_width; ++iw) {
          const double x = input[((n * s.in_channels + ci) * s.in_height + ih) * s.in_width + iw];
          for (int64_t co = 0; co < s.out_channels; ++co) {
            for (int64_t kh = 0; kh < k; ++kh) {
              for (int64_t kw = 0; kw < k; ++kw) {
                const int64_t oh = ih * s.stride - s.padding + kh;
                const int64_t ow = iw * s.stride - s.padding + kw;
                if (oh < 0 || oh >= out_h || ow < 0 || ow >= out_w) continue;
                const double w = weight[((ci * s.out_channels + co) * k + kh) * k + kw];
                out[((n * s.out_channels + co) * out_h + oh) * out_w + ow] += x * w;
              }
            }
          }
        }
      }
    }
  }
  return out;
}

template <typename T>
std::vector<double> Gelu(const T* input, int64_t count) {
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) {
    const double x = input[i];
    out[i] = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  }
  return out;
}

double Hardtanh(double x, double min_value, double max_value) {
  return std::min(std::max(x, min_value), max_value);
}

double Mish(double x) {
  const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
  return x * std::tanh(softplus);
}

template <typename T>
std::vector<double> GroupNorm(const GroupNormShape& s, const T* input, const T* weight,
                              const T* bias) {
  const int64_t channels_per_group = s.channels / s.num_groups;
  const int64_t group_size = channels_per_group * s.spatial_size;
  std::vector<double> out(s.batch * s.channels * s.spatial_size);
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t g = 0; g < s.num_groups; ++g) {
      const int64_t begin = (n * s.channels + g * channels_per_group) * s.spatial_size;
      double sum = 0;
      for (int64_t i = 0; i < group_size; ++i) sum += input[begin + i];
      const double mean = sum / group_size;
      double sum_sq = 0;
      for (int64_t i = 0; i < group_size; ++i) {
        const double d = input[begin + i] - mean;
        sum_sq += d * d;
      }
      const double var = sum_sq / group_size;
      for (int64_t i = 0; i < group_size; ++i) {
        const int64_t c = g * channels_per_group + i / s.spatial_size;
        out[begin + i] = (input[begin + i] - mean) / std::sqrt(var + s.eps) * Or(weight, c, 1.0) +
                         Or(bias, c, 0.0);
      }
    }
  }
  return out;
}

template <typename T>
std::vector<double> Linear(const LinearShape& s, const T* input, const T* weight, const T* bias) {
  std::vector<double> out(s.batch * s.out_features);
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t o = 0; o < s.out_features; ++o) {
      double acc = Or(bias, o, 0.0);
      for (int64_t i = 0; i < s.in_features; ++i) {
        acc += static_cast<double>(input[n * s.in_features + i]) *
               static_cast<double>(weight[o * s.in_features + i]);
      }
      out[n * s.out_features + o] = acc;
    }
  }
  return out;
}

template <typename T>
std::vector<double> BiasHardtanhMishGroupNorm(const BiasHardtanhMishGroupNormShape& s,
                                              const T* input, const T* bias, const T* gn_weight,
                                              const T* gn_bias) {
  std::vector<double> activated(s.batch * s.channels);
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t c = 0; c < s.channels; ++c) {
      const double x = static_cast<double>(input[n * s.channels + c]) + Or(bias, c, 0.0);
      activated[n * s.channels + c] = Mish(Hardtanh(x, s.hardtanh_min, s.hardtanh_max));
    }
  }
  std::vector<double> gn_w(s.channels);
  std::vector<double> gn_b(s.channels);
  for (int64_t c = 0; c < s.channels; ++c) {
    gn_w[c] = Or(gn_weight, c, 1.0);
    gn_b[c] = Or(gn_bias, c, 0.0);
  }
  return GroupNorm(GroupNormShape{s.batch, s.channels, 1, s.num_groups, s.eps}, activated.data(),
                   gn_w.data(), gn_b.data());
}

#define FUSESERVE_INSTANTIATE_REFERENCE_OPS(T)                                                     \
  template std::vector<double> ConvTranspose2d<T>(const ConvTranspose2dShape&, const T*, const T*, \
                                                  const T*);                                       \
  template std::vector<double> Gelu<T>(const T*, int64_t);                                         \
  template std::vector<double> GroupNorm<T>(const GroupNormShape&, const T*, const T*, const T*);  \
  template std::vector<double> Linear<T>(const LinearShape&, const T*, const T*, const T*);        \
  template std::vector<double> BiasHardtanhMishGroupNorm<T>(                                       \
      const BiasHardtanhMishGroupNormShape&, const T*, const T*, const T*, const T*);

FUSESERVE_INSTANTIATE_REFERENCE_OPS(float)
FUSESERVE_INSTANTIATE_REFERENCE_OPS(double)

#undef FUSESERVE_INSTANTIATE_REFERENCE_OPS

}  // namespace reference
}  // namespace fuseserve
