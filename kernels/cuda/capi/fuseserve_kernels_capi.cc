// A C ABI over the GPU family launchers (kernels/cuda/families.h), for
// bench/kernel_bench.py, which times them next to PyTorch eager and
// torch.compile on the same GPU, stream and inputs (ctypes, torch tensors'
// device pointers). Every function returns 0 on success or writes the error
// message into `error` (NUL-terminated, at most `error_size` bytes) and
// returns non-zero. Nothing here allocates device memory or synchronises.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/families.h"

namespace {

int Report(const absl::Status& status, char* error, int64_t error_size) {
  if (status.ok()) return 0;
  if (error != nullptr && error_size > 0) {
    std::strncpy(error, status.ToString().c_str(), static_cast<size_t>(error_size - 1));
    error[error_size - 1] = '\0';
  }
  return 1;
}

fuseserve::cuda::MathMode Mode(int64_t tf32) {
  return tf32 != 0 ? fuseserve::cuda::MathMode::kTf32 : fuseserve::cuda::MathMode::kFp32;
}

// Parameters that determine the prepared weight's layout; batch and input
// sizes do not, but validation wants them positive.
fuseserve::cuda::ConvTranspose2dParams WeightLayoutParams(int64_t in_channels,
                                                          int64_t out_channels,
                                                          int64_t kernel_size, int64_t stride) {
  fuseserve::cuda::ConvTranspose2dParams params;
  params.batch = 1;
  params.in_height = 1;
  params.in_width = 1;
  params.in_channels = in_channels;
  params.out_channels = out_channels;
  params.kernel_size = kernel_size;
  params.stride = stride;
  return params;
}

fuseserve::cuda::ConvFamilyParams ConvParams(int64_t batch, int64_t in_channels,
                                             int64_t out_channels, int64_t height, int64_t width,
                                             int64_t kernel_size, int64_t stride, int64_t padding,
                                             int64_t output_padding, int64_t num_groups,
                                             double eps, int64_t tf32) {
  fuseserve::cuda::ConvFamilyParams params;
  params.conv = {batch, in_channels, out_channels, height, width,
                 kernel_size, stride, padding, output_padding};
  params.num_groups = num_groups;
  params.eps = static_cast<float>(eps);
  params.mode = Mode(tf32);
  return params;
}

// 0 auto, 1 after the convolution, 2 concurrent (families.h
// ConvGroupNormSchedule).
fuseserve::cuda::ConvGroupNormSchedule GroupNormScheduleOf(int64_t schedule) {
  switch (schedule) {
    case 1: return fuseserve::cuda::ConvGroupNormSchedule::kAfter;
    case 2: return fuseserve::cuda::ConvGroupNormSchedule::kConcurrent;
    default: return fuseserve::cuda::ConvGroupNormSchedule::kAuto;
  }
}

fuseserve::cuda::LinearOptions LinearOptionsOf(int64_t algorithm, int64_t tf32x3_slices) {
  fuseserve::cuda::LinearOptions options;
  switch (algorithm) {
    case 1: options.algorithm = fuseserve::cuda::LinearAlgorithm::kSmallBatch; break;
    case 2: options.algorithm = fuseserve::cuda::LinearAlgorithm::kSgemm; break;
    case 3: options.algorithm = fuseserve::cuda::LinearAlgorithm::kTf32x3; break;
    case 4: options.algorithm = fuseserve::cuda::LinearAlgorithm::kSkinny; break;
    default: options.algorithm = fuseserve::cuda::LinearAlgorithm::kAuto; break;
  }
  options.tf32x3_slices = tf32x3_slices;
  return options;
}

}  // namespace

extern "C" {

int64_t fs_conv_prepared_weight_size(int64_t in_channels, int64_t out_channels,
                                     int64_t kernel_size, int64_t stride, int64_t tf32) {
  return fuseserve::cuda::PreparedConvTransposeWeightSize(
      WeightLayoutParams(in_channels, out_channels, kernel_size, stride), Mode(tf32));
}

int fs_conv_prepare_weight(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                           int64_t stride, int64_t tf32, const float* host_weight,
                           float* host_prepared, char* error, int64_t error_size) {
  return Report(fuseserve::cuda::PrepareConvTransposeWeight(
                    WeightLayoutParams(in_channels, out_channels, kernel_size, stride),
                    Mode(tf32), host_weight, host_prepared),
                error, error_size);
}

int64_t fs_conv_workspace_bytes(int64_t batch, int64_t in_channels, int64_t out_channels,
                                int64_t height, int64_t width, int64_t kernel_size,
                                int64_t stride, int64_t padding, int64_t output_padding,
                                int64_t num_groups, double eps, int64_t tf32) {
  return static_cast<int64_t>(fuseserve::cuda::ConvFamilyWorkspaceBytes(
      ConvParams(batch, in_channels, out_channels, height, width, kernel_size, stride, padding,
                 output_padding, num_groups, eps, tf32)));
}

int fs_conv_family(int64_t batch, int64_t in_channels, int64_t out_channels, int64_t height,
                   int64_t width, int64_t kernel_size, int64_t stride, int64_t padding,
                   int64_t output_padding, int64_t num_groups, double eps, int64_t tf32,
                   const float* input, const float* prepared_weight, const float* bias,
                   const float* gn_weight, const float* gn_bias, float* output, void* workspace,
                   void* stream, char* error, int64_t error_size, int64_t group_norm_schedule,
                   int64_t group_norm_multiprocessors) {
  const fuseserve::cuda::ConvFamilyWeights weights{prepared_weight, bias, gn_weight, gn_bias};
  fuseserve::cuda::ConvFamilyParams params =
      ConvParams(batch, in_channels, out_channels, height, width, kernel_size, stride, padding,
                 output_padding, num_groups, eps, tf32);
  params.options.schedule = GroupNormScheduleOf(group_norm_schedule);
  params.options.group_norm_multiprocessors = static_cast<int>(group_norm_multiprocessors);
  return Report(fuseserve::cuda::RunConvFamily(params, weights, input, output, workspace,
                                               static_cast<cudaStream_t>(stream)),
                error, error_size);
}

void* fs_cublas_create(void* stream) {
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return nullptr;
  cublasSetStream(handle, static_cast<cudaStream_t>(stream));
  return handle;
}

void fs_cublas_destroy(void* handle) {
  if (handle != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle));
}

// algorithm: 0 auto, 1 small batch, 2 SGEMM / one TF32 pass, 3 3xTF32, 4 skinny
// (linear.h LinearAlgorithm); tf32x3_slices 0 = the default.
int64_t fs_gemm_workspace_bytes(int64_t batch, int64_t in_features, int64_t out_features,
                                int64_t tf32, int64_t algorithm, int64_t tf32x3_slices) {
  return static_cast<int64_t>(fuseserve::cuda::LinearWorkspaceBytes(
      {batch, in_features, out_features}, Mode(tf32), LinearOptionsOf(algorithm, tf32x3_slices)));
}

int fs_gemm_prepare_tf32x3(int64_t in_features, int64_t out_features, const float* host_weight,
                           float* host_prepared, char* error, int64_t error_size) {
  return Report(fuseserve::cuda::PrepareTf32x3Weight({1, in_features, out_features},
                                                     host_weight, host_prepared),
                error, error_size);
}

int fs_gemm_family(void* cublas_handle, int64_t batch, int64_t in_features, int64_t out_features,
                   int64_t num_groups, double hardtanh_min, double hardtanh_max, double eps,
                   int64_t tf32, int64_t algorithm, int64_t tf32x3_slices, const float* input,
                   const float* weight, const float* tf32x3_weight, const float* gemm_bias,
                   const float* bias, const float* gn_weight, const float* gn_bias, float* output,
                   void* workspace, void* stream, char* error, int64_t error_size) {
  fuseserve::cuda::GemmFamilyParams params;
  params.linear = {batch, in_features, out_features};
  params.epilogue.batch = batch;
  params.epilogue.channels = out_features;
  params.epilogue.num_groups = num_groups;
  params.epilogue.hardtanh_min = static_cast<float>(hardtanh_min);
  params.epilogue.hardtanh_max = static_cast<float>(hardtanh_max);
  params.epilogue.eps = static_cast<float>(eps);
  params.mode = Mode(tf32);
  params.linear_options = LinearOptionsOf(algorithm, tf32x3_slices);
  fuseserve::cuda::GemmFamilyWeights weights;
  weights.weight = weight;
  weights.tf32x3_weight = tf32x3_weight;
  weights.gemm_bias = gemm_bias;
  weights.bias = bias;
  weights.gn_weight = gn_weight;
  weights.gn_bias = gn_bias;
  return Report(fuseserve::cuda::RunGemmFamily(static_cast<cublasHandle_t>(cublas_handle), params,
                                               weights, input, output, workspace,
                                               static_cast<cudaStream_t>(stream)),
                error, error_size);
}

int64_t fs_groupnorm_workspace_bytes(int64_t batch, int64_t channels, int64_t spatial_size,
                                     int64_t num_groups) {
  fuseserve::cuda::GroupNormParams params;
  params.batch = batch;
  params.channels = channels;
  params.spatial_size = spatial_size;
  params.num_groups = num_groups;
  return static_cast<int64_t>(fuseserve::cuda::GroupNormFamilyWorkspaceBytes(params));
}

// schedule: 0 auto, 1 two reads, 2 lagged, 3 resident (group_norm.h
// GroupNormSchedule);
// lag_chunks 0 and ctas_per_sm < 0 = the defaults (GroupNormOptions);
// with the resident schedule, ctas_per_sm >= 0 is its whole grid
// (GroupNormOptions::resident_ctas).
int fs_groupnorm_family(int64_t batch, int64_t channels, int64_t spatial_size,
                        int64_t num_groups, double eps, int64_t schedule, int64_t lag_chunks,
                        int64_t ctas_per_sm, const float* input, const float* gn_weight,
                        const float* gn_bias, float* output, void* workspace, void* stream,
                        char* error, int64_t error_size) {
  if (schedule < 0 || schedule > 3) {
    return Report(absl::InvalidArgumentError("schedule must be 0, 1, 2 or 3"), error, error_size);
  }
  fuseserve::cuda::GroupNormParams params;
  params.batch = batch;
  params.channels = channels;
  params.spatial_size = spatial_size;
  params.num_groups = num_groups;
  params.eps = static_cast<float>(eps);
  fuseserve::cuda::GroupNormOptions options;
  options.schedule = static_cast<fuseserve::cuda::GroupNormSchedule>(schedule);
  options.lag_chunks = lag_chunks;
  if (ctas_per_sm >= 0) {
    if (schedule == 3) {
      options.resident_ctas = static_cast<int>(ctas_per_sm);
    } else {
      options.lagged_ctas_per_sm = static_cast<int>(ctas_per_sm);
    }
  }
  return Report(fuseserve::cuda::RunGroupNormFamily(params, gn_weight, gn_bias, input, output,
                                                    workspace, static_cast<cudaStream_t>(stream),
                                                    options),
                error, error_size);
}

}  // extern "C"
