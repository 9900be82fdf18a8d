#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shape.h"
#include "common/status_macros.h"
#include "kernels/cpu/blas_threading.h"

namespace fuseserve {
namespace cpu {
namespace {

// Smallest slice of the product worth a task of its own (multiply-adds).
constexpr int64_t kMinTaskMacs = 1 << 20;

}  // namespace

absl::Status ValidateLinearParams(const LinearParams& p) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", p.batch}, {"in_features", p.in_features}, {"out_features", p.out_features}};
  for (const auto& [name, value] : sizes) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("linear: ", name, " must be >= 1, got ", value));
    }
    if (value > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("linear: ", name, " ", value, " exceeds OpenBLAS's 32-bit integers"));
    }
  }
  RETURN_IF_ERROR(CheckedNumElements({p.batch, p.in_features}).status());
  RETURN_IF_ERROR(CheckedNumElements({p.out_features, p.in_features}).status());
  return CheckedNumElements({p.batch, p.out_features}).status();
}

absl::Status Linear(const LinearParams& p, const float* input, const float* weight,
                    const float* bias, float* output, ThreadPool& pool) {
  RETURN_IF_ERROR(ValidateLinearParams(p));
  if (input == nullptr || weight == nullptr || output == nullptr) {
    return absl::InvalidArgumentError("linear: null input, weight or output");
  }
  UseSingleThreadedBlas();

  // One sgemm per task over a slice of the larger of the two output
  // dimensions, so that batch 1 still spreads over the threads.
  const bool split_rows = p.batch >= p.out_features;
  const int64_t split_extent = split_rows ? p.batch : p.out_features;
  const int64_t other_extent = split_rows ? p.out_features : p.batch;
  const int64_t min_slice = std::max<int64_t>(1, kMinTaskMacs / (other_extent * p.in_features));
  const int in_features = static_cast<int>(p.in_features);
  const int out_features = static_cast<int>(p.out_features);

  pool.ParallelFor(split_extent, min_slice, [&](int64_t begin, int64_t end) {
    const int64_t row_begin = split_rows ? begin : 0;
    const int64_t row_end = split_rows ? end : p.batch;
    const int64_t col_begin = split_rows ? 0 : begin;
    const int64_t col_end = split_rows ? p.out_features : end;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(row_end - row_begin),
                static_cast<int>(col_end - col_begin), in_features, 1.0f,
                input + row_begin * p.in_features, in_features, weight + col_begin * p.in_features,
                in_features, 0.0f, output + row_begin * p.out_features + col_begin, out_features);
    if (bias == nullptr) return;
    for (int64_t r = row_begin; r < row_end; ++r) {
      float* y = output + r * p.out_features;
      for (int64_t c = col_begin; c < col_end; ++c) y[c] += bias[c];
    }
  });
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace fuseserve
