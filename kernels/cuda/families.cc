#include "kernels/cuda/families.h"

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

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

}  // namespace

// The per-(sample, group) (sum, sum of squares) doubles the convolution's
// epilogue accumulates.
size_t ConvFamilyWorkspaceBytes(const ConvFamilyParams& params) {
  if (!ValidateConvFamilyParams(params).ok()) return 0;
  return static_cast<size_t>(2 * params.conv.batch * params.num_groups) * sizeof(double);
}

absl::Status RunConvFamily(const ConvFamilyParams& params, const ConvFamilyWeights& weights,
                           const float* input, float* output, void* workspace,
                           cudaStream_t stream) {
  RETURN_IF_ERROR(ValidateConvFamilyParams(params));
  if (input == nullptr || output == nullptr || workspace == nullptr) {
    return absl::InvalidArgumentError(
        "RunConvFamily: input, output and workspace must be non-null");
  }
  auto* group_sums = static_cast<double*>(workspace);
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(group_sums, 0, ConvFamilyWorkspaceBytes(params), stream));
  RETURN_IF_ERROR(ConvTranspose2dBiasGelu(params.conv, params.mode, input, weights.prepared_weight,
                                          weights.bias, output, params.num_groups, group_sums,
                                          stream));
  return GroupNormApply(ConvGroupNormParams(params), group_sums, weights.gn_weight, weights.gn_bias,
                        output, stream);
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
