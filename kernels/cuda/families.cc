#include "kernels/cuda/families.h"

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/group_norm_concurrent.h"

namespace fuseserve::cuda {
namespace {

// The GroupNorm that follows the transposed convolution, on its output.
GroupNormParams ConvGroupNormParams(const ConvFamilyParams& params) {
  const ConvTranspose2dParams& conv = params.conv;
  GroupNormParams gn;
  gn.batch = conv.batch;
  gn.channels = conv.out_channels;
  gn.spatial_size = ConvTranspose2dOutputSize(conv.in_height, conv.kernel_size, conv.stride,
                                              conv.padding, conv.output_padding) *
                    ConvTranspose2dOutputSize(conv.in_width, conv.kernel_size, conv.stride,
                                              conv.padding, conv.output_padding);
  gn.num_groups = params.num_groups;
  gn.eps = params.eps;
  gn.prologue = GroupNormPrologue::kNone;
  return gn;
}

absl::Status ValidateConvFamilyParams(const ConvFamilyParams& params) {
  RETURN_IF_ERROR(ValidateConvTranspose2dParams(params.conv));
  return ValidateGroupNormParams(ConvGroupNormParams(params));
}

// The workspace: the per-(sample, group) (sum, sum of squares) doubles the
// convolution's epilogue accumulates, then the per-sample signals and the
// concurrent GroupNorm's scratch (kConcurrent), all zeroed per run.
struct ConvWorkspaceLayout {
  size_t signals_offset = 0;
  size_t scratch_offset = 0;
  size_t total_bytes = 0;
};

size_t RoundUp16(size_t bytes) { return (bytes + 15) / 16 * 16; }

ConvWorkspaceLayout ConvLayout(const ConvFamilyParams& params) {
  ConvWorkspaceLayout layout;
  layout.signals_offset =
      RoundUp16(static_cast<size_t>(2 * params.conv.batch * params.num_groups) * sizeof(double));
  layout.scratch_offset =
      layout.signals_offset + RoundUp16(static_cast<size_t>(params.conv.batch) * sizeof(unsigned));
  layout.total_bytes = layout.scratch_offset + kGroupNormConcurrentScratchBytes;
  return layout;
}

// Whether RunConvFamily runs the GroupNorm beside the convolution;
// FailedPrecondition where kConcurrent is pinned and cannot run.
absl::StatusOr<bool> RunsConcurrentGroupNorm(const ConvFamilyParams& params, const float* output) {
  const ConvGroupNormSchedule schedule = params.options.schedule;
  if (schedule == ConvGroupNormSchedule::kAfter) return false;
  if (schedule == ConvGroupNormSchedule::kAuto && params.conv.batch < kMinConcurrentGroupNormBatch) {
    return false;
  }
  ASSIGN_OR_RETURN(bool serves, ConvTranspose2dGivesSampleSignals(params.conv, params.mode));
  serves = serves && GroupNormConcurrentSupports(ConvGroupNormParams(params), output);
  if (!serves && schedule == ConvGroupNormSchedule::kConcurrent) {
    return absl::FailedPreconditionError(
        "RunConvFamily: the concurrent GroupNorm needs the wgmma convolution (stride 1, tf32, a "
        "compute capability 9.0 device), H_out * W_out % 4 == 0 and a 16-byte aligned output");
  }
  return serves;
}

}  // namespace

size_t ConvFamilyWorkspaceBytes(const ConvFamilyParams& params) {
  if (!ValidateConvFamilyParams(params).ok()) return 0;
  return ConvLayout(params).total_bytes;
}

absl::Status RunConvFamily(const ConvFamilyParams& params, const ConvFamilyWeights& weights,
                           const float* input, float* output, void* workspace,
                           cudaStream_t stream) {
  RETURN_IF_ERROR(ValidateConvFamilyParams(params));
  if (input == nullptr || output == nullptr || workspace == nullptr) {
    return absl::InvalidArgumentError(
        "RunConvFamily: input, output and workspace must be non-null");
  }
  if (params.options.group_norm_multiprocessors < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunConvFamily: group_norm_multiprocessors must be >= 0, got ",
                     params.options.group_norm_multiprocessors));
  }
  ASSIGN_OR_RETURN(const bool concurrent, RunsConcurrentGroupNorm(params, output));
  const ConvWorkspaceLayout layout = ConvLayout(params);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* group_sums = reinterpret_cast<double*>(base);
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(workspace, 0, layout.total_bytes, stream));
  const GroupNormParams gn = ConvGroupNormParams(params);
  if (!concurrent) {
    RETURN_IF_ERROR(ConvTranspose2dBiasGelu(params.conv, params.mode, input,
                                            weights.prepared_weight, weights.bias, output,
                                            params.num_groups, group_sums, stream));
    return GroupNormApply(gn, group_sums, weights.gn_weight, weights.gn_bias, output, stream);
  }
  ConvSampleSignals signals;
  signals.sample_done = reinterpret_cast<unsigned*>(base + layout.signals_offset);
  signals.free_multiprocessors = params.options.group_norm_multiprocessors > 0
                                     ? params.options.group_norm_multiprocessors
                                     : kDefaultGroupNormMultiprocessors;
  RETURN_IF_ERROR(ConvTranspose2dBiasGelu(params.conv, params.mode, input,
                                          weights.prepared_weight, weights.bias, output,
                                          params.num_groups, group_sums, stream, signals));
  const SampleProgress progress{
      signals.sample_done, static_cast<unsigned>(ConvTranspose2dSignalsPerSample(params.conv))};
  return GroupNormApplyConcurrent(gn, group_sums, progress, weights.gn_weight, weights.gn_bias,
                                  output, base + layout.scratch_offset, stream);
}

size_t GemmFamilyWorkspaceBytes(const GemmFamilyParams& params) {
  return LinearWorkspaceBytes(params.linear, params.mode, params.linear_options);
}

absl::Status RunGemmFamily(cublasHandle_t handle, const GemmFamilyParams& params,
                           const GemmFamilyWeights& weights, const float* input, float* output,
                           void* workspace, cudaStream_t stream) {
  if (params.epilogue.batch != params.linear.batch ||
      params.epilogue.channels != params.linear.out_features) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunGemmFamily: epilogue shape [", params.epilogue.batch, ", ",
                     params.epilogue.channels, "] differs from the linear output [",
                     params.linear.batch, ", ", params.linear.out_features, "]"));
  }
  RETURN_IF_ERROR(ValidateLinearParams(params.linear));
  RETURN_IF_ERROR(ValidateBiasHardtanhMishGroupNormParams(params.epilogue));
  const LinearWeights linear_weights{weights.weight, weights.tf32x3_weight};
  RETURN_IF_ERROR(Linear(handle, params.linear, params.mode, input, linear_weights, output,
                         workspace, stream, params.linear_options));
  return BiasHardtanhMishGroupNorm(params.epilogue, output, weights.gemm_bias, weights.bias,
                                   weights.gn_weight, weights.gn_bias, output, stream);
}

size_t GroupNormFamilyWorkspaceBytes(const GroupNormParams& params) {
  return GroupNormWorkspaceBytes(params);
}

absl::Status RunGroupNormFamily(const GroupNormParams& params, const float* gn_weight,
                                const float* gn_bias, const float* input, float* output,
                                void* workspace, cudaStream_t stream,
                                const GroupNormOptions& options) {
  return GroupNorm(params, input, gn_weight, gn_bias, output, workspace, stream, options);
}

}  // namespace fuseserve::cuda
