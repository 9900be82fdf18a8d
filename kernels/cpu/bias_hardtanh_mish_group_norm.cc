#include "kernels/cpu/bias_hardtanh_mish_group_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shape.h"
#include "common/status_macros.h"

namespace fuseserve {
namespace cpu {
namespace {

// Smallest number of elements worth a task of its own.
constexpr int64_t kMinTaskElements = 8 * 1024;

// x * tanh(softplus(x)) with one exp: for e = exp(x),
// tanh(log1p(e)) = n / (n + 2) where n = e * (e + 2), exact in real numbers
// and free of cancellation in double for every x (n ~ 2e as x -> -inf).
// Above 20, softplus(x) = x as in PyTorch, and tanh(x) = 1 in double.
double Mish(double x) {
  if (x > 20.0) return x;
  const double e = std::exp(x);
  const double n = e * (e + 2.0);
  return x * n / (n + 2.0);
}

}  // namespace

absl::Status ValidateBiasHardtanhMishGroupNormParams(const BiasHardtanhMishGroupNormParams& p) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", p.batch}, {"channels", p.channels}, {"num_groups", p.num_groups}};
  for (const auto& [name, value] : sizes) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("bias_hardtanh_mish_group_norm: ", name, " must be >= 1, got ", value));
    }
  }
  if (p.channels % p.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bias_hardtanh_mish_group_norm: num_groups (",
                                                   p.num_groups, ") must divide channels (",
                                                   p.channels, ")"));
  }
  if (!std::isfinite(p.hardtanh_min) || !std::isfinite(p.hardtanh_max) ||
      p.hardtanh_min > p.hardtanh_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bias_hardtanh_mish_group_norm: need finite hardtanh_min <= hardtanh_max, got ",
        p.hardtanh_min, " and ", p.hardtanh_max));
  }
  if (!(p.eps > 0) || !std::isfinite(p.eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bias_hardtanh_mish_group_norm: eps must be finite and > 0, got ", p.eps));
  }
  return CheckedNumElements({p.batch, p.channels}).status();
}

absl::Status BiasHardtanhMishGroupNorm(const BiasHardtanhMishGroupNormParams& p, const float* input,
                                       const float* bias, const float* gn_weight,
                                       const float* gn_bias, float* output, ThreadPool& pool) {
  RETURN_IF_ERROR(ValidateBiasHardtanhMishGroupNormParams(p));
  if (input == nullptr || output == nullptr) {
    return absl::InvalidArgumentError("bias_hardtanh_mish_group_norm: null input or output");
  }
  const int64_t group_size = p.channels / p.num_groups;
  const int64_t num_groups_total = p.batch * p.num_groups;
  const int64_t min_groups = std::max<int64_t>(1, kMinTaskElements / group_size);

  // A group is a contiguous run of group_size floats; each task holds one
  // group's activations in double, so statistics are exact two-pass ones and
  // the input is read once (which also makes in-place operation safe).
  pool.ParallelFor(num_groups_total, min_groups, [&](int64_t begin, int64_t end) {
    std::vector<double> v(group_size);
    for (int64_t group = begin; group < end; ++group) {
      const int64_t offset = group * group_size;
      const int64_t first_channel = (group % p.num_groups) * group_size;
      double sum = 0;
      for (int64_t i = 0; i < group_size; ++i) {
        const int64_t c = first_channel + i;
        const double biased =
            static_cast<double>(input[offset + i]) + (bias == nullptr ? 0.0 : bias[c]);
        v[i] = Mish(std::clamp(biased, p.hardtanh_min, p.hardtanh_max));
        sum += v[i];
      }
      const double mean = sum / static_cast<double>(group_size);
      double sum_sq = 0;
      for (int64_t i = 0; i < group_size; ++i) sum_sq += (v[i] - mean) * (v[i] - mean);
      const double rstd = 1.0 / std::sqrt(sum_sq / static_cast<double>(group_size) + p.eps);
      for (int64_t i = 0; i < group_size; ++i) {
        const int64_t c = first_channel + i;
        const double w = gn_weight == nullptr ? 1.0 : gn_weight[c];
        const double b = gn_bias == nullptr ? 0.0 : gn_bias[c];
        output[offset + i] = static_cast<float>((v[i] - mean) * rstd * w + b);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace fuseserve
