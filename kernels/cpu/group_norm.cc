#include "kernels/cpu/group_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/gelu.h"

namespace fuseserve {
namespace cpu {
namespace {

// A group is split into chunks of about this many elements so that large
// groups spread over threads and the partial statistics table stays small.
constexpr int64_t kTargetChunkElements = 64 * 1024;
// Smallest chunk worth a task of its own when splitting for parallelism.
constexpr int64_t kMinChunkElements = 4 * 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

float ApplyPrologue(GroupNormPrologue prologue, float x) {
  switch (prologue) {
    case GroupNormPrologue::kNone:
      return x;
    case GroupNormPrologue::kGeluErf:
      return static_cast<float>(GeluErf(x));
  }
  return x;
}

}  // namespace

absl::StatusOr<GroupNormParams> GroupNormParamsForShape(const Shape& shape, int64_t num_groups,
                                                        double eps) {
  if (shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group_norm: input must have rank >= 2 ([N, C, *]), got ", ShapeToString(shape)));
  }
  ASSIGN_OR_RETURN(const int64_t spatial_size,
                   CheckedNumElements(Shape(shape.begin() + 2, shape.end())));
  GroupNormParams params;
  params.batch = shape[0];
  params.channels = shape[1];
  params.spatial_size = spatial_size;
  params.num_groups = num_groups;
  params.eps = eps;
  return params;
}

absl::Status ValidateGroupNormParams(const GroupNormParams& p) {
  const std::pair<const char*, int64_t> positive[] = {{"batch", p.batch},
                                                      {"channels", p.channels},
                                                      {"spatial_size", p.spatial_size},
                                                      {"num_groups", p.num_groups}};
  for (const auto& [name, value] : positive) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("group_norm: ", name, " must be >= 1, got ", value));
    }
  }
  if (p.channels % p.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("group_norm: num_groups (", p.num_groups,
                                                   ") must divide channels (", p.channels, ")"));
  }
  if (!(p.eps > 0) || !std::isfinite(p.eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_norm: eps must be finite and > 0, got ", p.eps));
  }
  return CheckedNumElements({p.batch, p.channels, p.spatial_size}).status();
}

absl::Status GroupNorm(const GroupNormParams& p, const float* input, const float* weight,
                       const float* bias, float* output, ThreadPool& pool) {
  RETURN_IF_ERROR(ValidateGroupNormParams(p));
  if (input == nullptr || output == nullptr) {
    return absl::InvalidArgumentError("group_norm: null input or output");
  }

  const int64_t channels_per_group = p.channels / p.num_groups;
  const int64_t group_size = channels_per_group * p.spatial_size;
  const int64_t num_group_instances = p.batch * p.num_groups;
  int64_t chunks_per_group = std::max(CeilDiv(group_size, kTargetChunkElements),
                                      CeilDiv(2 * pool.parallelism(), num_group_instances));
  chunks_per_group = std::clamp<int64_t>(chunks_per_group, 1,
                                         std::max<int64_t>(1, group_size / kMinChunkElements));
  const int64_t chunk_size = CeilDiv(group_size, chunks_per_group);
  chunks_per_group = CeilDiv(group_size, chunk_size);
  const int64_t num_tasks = num_group_instances * chunks_per_group;

  // Pass 1: per chunk, sums of (v - shift) and (v - shift)^2 where v is the
  // prologue's output (stored into `output`, which pass 2 then reads) and
  // shift is the group's first v, read before any chunk may overwrite it in
  // place. Shifted sums of one group add up as plain sums do, so chunks
  // combine without Chan's correction term.
  std::vector<double> shifts(num_group_instances);
  for (int64_t i = 0; i < num_group_instances; ++i) {
    shifts[i] = ApplyPrologue(p.prologue, input[i * group_size]);
  }
  std::vector<double> partial_sum(num_tasks);
  std::vector<double> partial_sum_sq(num_tasks);
  const bool stage_in_output = p.prologue != GroupNormPrologue::kNone;
  pool.ParallelFor(num_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t group_offset = (task / chunks_per_group) * group_size;
      const int64_t e_begin = (task % chunks_per_group) * chunk_size;
      const int64_t e_end = std::min(group_size, e_begin + chunk_size);
      const float* x = input + group_offset;
      float* staged = output + group_offset;
      const double shift = shifts[task / chunks_per_group];
      double sum = 0;
      double sum_sq = 0;
      for (int64_t e = e_begin; e < e_end; ++e) {
        const float v = ApplyPrologue(p.prologue, x[e]);
        if (stage_in_output) staged[e] = v;
        const double d = static_cast<double>(v) - shift;
        sum += d;
        sum_sq += d * d;
      }
      partial_sum[task] = sum;
      partial_sum_sq[task] = sum_sq;
    }
  });

  const float* values = stage_in_output ? output : input;
  pool.ParallelFor(num_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t group_instance = task / chunks_per_group;
      const int64_t first_task = group_instance * chunks_per_group;
      double sum = 0;
      double sum_sq = 0;
      for (int64_t t = first_task; t < first_task + chunks_per_group; ++t) {
        sum += partial_sum[t];
        sum_sq += partial_sum_sq[t];
      }
      const int64_t group_offset = group_instance * group_size;
      const double shifted_mean = sum / static_cast<double>(group_size);
      // Rounding can make the difference slightly negative: clamp it, but let
      // a NaN (from an Inf or NaN input) through, as PyTorch does.
      const double raw_var = sum_sq / static_cast<double>(group_size) - shifted_mean * shifted_mean;
      const double var = raw_var < 0.0 ? 0.0 : raw_var;
      const double mean = shifts[group_instance] + shifted_mean;
      const double rstd = 1.0 / std::sqrt(var + p.eps);

      const int64_t first_channel = (group_instance % p.num_groups) * channels_per_group;
      const int64_t e_begin = (task % chunks_per_group) * chunk_size;
      const int64_t e_end = std::min(group_size, e_begin + chunk_size);
      // One channel's run of elements at a time: scale and offset are
      // constant along it.
      for (int64_t e = e_begin; e < e_end;) {
        const int64_t c = first_channel + e / p.spatial_size;
        const int64_t run_end = std::min(e_end, (e / p.spatial_size + 1) * p.spatial_size);
        const double scale = rstd * (weight == nullptr ? 1.0 : weight[c]);
        const double offset = (bias == nullptr ? 0.0 : bias[c]) - mean * scale;
        const float* v = values + group_offset;
        float* y = output + group_offset;
        for (; e < run_end; ++e) y[e] = static_cast<float>(v[e] * scale + offset);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace fuseserve
