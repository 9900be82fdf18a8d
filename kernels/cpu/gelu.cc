#include "kernels/cpu/gelu.h"

#include "absl/strings/str_cat.h"

namespace fuseserve {
namespace cpu {

absl::Status Gelu(const float* input, int64_t count, float* output, ThreadPool& pool) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("gelu: count must be >= 0, got ", count));
  }
  if (count > 0 && (input == nullptr || output == nullptr)) {
    return absl::InvalidArgumentError("gelu: null input or output");
  }
  // 16 Ki elements per chunk: enough work to amortize a task hand-off.
  pool.ParallelFor(count, 16 * 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      output[i] = static_cast<float>(GeluErf(input[i]));
    }
  });
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace fuseserve
