#pragma once

// GroupNorm as PyTorch computes it, on [N, C, *] float32 tensors of any rank
// >= 2, with an optional elementwise prologue applied to the input first (so
// that "activation, then GroupNorm" is one op reading the input once).
//
// For each sample n and group g (channels [g*C/G, (g+1)*C/G) and every
// spatial position): mean and biased variance of the group's values v, then
//   y = (v - mean) * rsqrt(var + eps) * weight[c] + bias[c].
// Statistics are accumulated in double over values shifted by the group's
// first value, so a group of millions of elements (the reference groupnorm
// has 8 x 512 x 512 = 2 Mi per group) keeps float32 accuracy even when its
// mean is large relative to its spread. Normalization is evaluated in double
// and rounded once to float32.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shape.h"
#include "common/thread_pool.h"

namespace fuseserve {
namespace cpu {

// What is applied to each input element before the statistics.
enum class GroupNormPrologue {
  kNone,
  kGeluErf,  // exact GELU (kernels/cpu/gelu.h)
};

struct GroupNormParams {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t spatial_size = 1;  // product of the dimensions after C (1 for [N, C])
  int64_t num_groups = 0;
  double eps = 1e-5;
  GroupNormPrologue prologue = GroupNormPrologue::kNone;
};

// Params for a [N, C, *] shape (rank >= 2). InvalidArgument on a lower rank.
absl::StatusOr<GroupNormParams> GroupNormParamsForShape(const Shape& shape, int64_t num_groups,
                                                        double eps);

// InvalidArgument unless every size >= 1, num_groups divides channels, eps is
// finite and > 0, and the element count fits int64.
absl::Status ValidateGroupNormParams(const GroupNormParams& params);

// input, output: [batch, channels, spatial_size]; output may equal input
// (in place), otherwise they must not overlap.
// weight, bias: [channels], or null for 1 and 0.
absl::Status GroupNorm(const GroupNormParams& params, const float* input, const float* weight,
                       const float* bias, float* output, ThreadPool& pool);

}  // namespace cpu
}  // namespace fuseserve
