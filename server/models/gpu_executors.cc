#include "server/models/gpu_executors.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/resources.h"

namespace fuseserve {
namespace {

cuda::MathMode MathModeOf(Precision precision) {
  return precision == Precision::kTf32 ? cuda::MathMode::kTf32 : cuda::MathMode::kFp32;
}

// Copies weights to the current device at load time. A cudaMemcpy from
// pageable memory may return before its DMA lands, on the legacy default
// stream, which the instances' non-blocking streams do not wait for: the
// copy is finished here, before any batch can read the weights.
absl::StatusOr<cuda::DeviceBuffer> Upload(const float* data, size_t count) {
  ASSIGN_OR_RETURN(cuda::DeviceBuffer buffer, cuda::DeviceBuffer::Allocate(count * sizeof(float)));
  RETURN_IF_CUDA_ERROR(
      cudaMemcpy(buffer.data(), data, count * sizeof(float), cudaMemcpyHostToDevice));
  RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(cudaStreamLegacy));
  return buffer;
}

absl::StatusOr<cuda::DeviceBuffer> Upload(const std::vector<float>& host) {
  return Upload(host.data(), host.size());
}

// Scratch space that grows to the largest size asked for. It is sized at the
// first batch of each new largest shape; with fixed config dims that is the
// first batch of max_batch_size, so steady state allocates nothing. A size
// that does not fit is ResourceExhausted, not a device fault: the instance
// stays healthy for the sizes that do.
class Scratch {
 public:
  absl::StatusOr<void*> Get(size_t bytes) {
    if (bytes > buffer_.bytes()) {
      absl::StatusOr<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(bytes);
      if (!buffer.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            bytes, " bytes of device scratch space do not fit: ", buffer.status().message()));
      }
      buffer_ = *std::move(buffer);
    }
    return buffer_.data();
  }
  size_t bytes() const { return buffer_.bytes(); }

 private:
  cuda::DeviceBuffer buffer_;
};

cudaStream_t StreamOf(const GpuLaunchContext& context) {
  return static_cast<cudaStream_t>(context.stream);
}

class ConvGpuExecutor final : public GpuExecutor {
 public:
  ConvGpuExecutor(cuda::ConvFamilyParams params, cuda::DeviceBuffer weight,
                  cuda::DeviceBuffer bias, cuda::DeviceBuffer gn_weight,
                  cuda::DeviceBuffer gn_bias)
      : params_(params),
        weight_(std::move(weight)),
        bias_(std::move(bias)),
        gn_weight_(std::move(gn_weight)),
        gn_bias_(std::move(gn_bias)) {}

  absl::Status Enqueue(const GpuLaunchContext& context, const float* input,
                       const Shape& input_shape, float* output) override {
    cuda::ConvFamilyParams params = params_;
    params.conv.batch = input_shape[0];
    params.conv.in_height = input_shape[2];
    params.conv.in_width = input_shape[3];
    ASSIGN_OR_RETURN(void* workspace, scratch_.Get(cuda::ConvFamilyWorkspaceBytes(params)));
    const cuda::ConvFamilyWeights weights{weight_.as<float>(), bias_.as<float>(),
                                          gn_weight_.as<float>(), gn_bias_.as<float>()};
    return cuda::RunConvFamily(params, weights, input, output, workspace, StreamOf(context));
  }

  int64_t device_bytes() const override {
    return weight_.bytes() + bias_.bytes() + gn_weight_.bytes() + gn_bias_.bytes() +
           scratch_.bytes();
  }

 private:
  const cuda::ConvFamilyParams params_;  // batch and spatial sizes set per call
  cuda::DeviceBuffer weight_;            // prepared layout
  cuda::DeviceBuffer bias_;
  cuda::DeviceBuffer gn_weight_;
  cuda::DeviceBuffer gn_bias_;
  Scratch scratch_;
};

class GemmGpuExecutor final : public GpuExecutor {
 public:
  // tf32x3_weight: the 3xTF32 layout of the weight (kFp32), or empty.
  GemmGpuExecutor(cuda::GemmFamilyParams params, cuda::DeviceBuffer weight,
                  cuda::DeviceBuffer tf32x3_weight, cuda::DeviceBuffer gemm_bias,
                  cuda::DeviceBuffer bias, cuda::DeviceBuffer gn_weight,
                  cuda::DeviceBuffer gn_bias)
      : params_(params),
        weight_(std::move(weight)),
        tf32x3_weight_(std::move(tf32x3_weight)),
        gemm_bias_(std::move(gemm_bias)),
        bias_(std::move(bias)),
        gn_weight_(std::move(gn_weight)),
        gn_bias_(std::move(gn_bias)) {}

  absl::Status Enqueue(const GpuLaunchContext& context, const float* input,
                       const Shape& input_shape, float* output) override {
    cuda::GemmFamilyParams params = params_;
    params.linear.batch = input_shape[0];
    params.epilogue.batch = input_shape[0];
    cuda::GemmFamilyWeights weights;
    weights.weight = weight_.as<float>();
    weights.tf32x3_weight = tf32x3_weight_.as<float>();
    weights.gemm_bias = gemm_bias_.as<float>();
    weights.bias = bias_.as<float>();
    weights.gn_weight = gn_weight_.as<float>();
    weights.gn_bias = gn_bias_.as<float>();
    ASSIGN_OR_RETURN(void* workspace, scratch_.Get(cuda::GemmFamilyWorkspaceBytes(params)));
    return cuda::RunGemmFamily(static_cast<cublasHandle_t>(context.cublas_handle), params,
                               weights, input, output, workspace, StreamOf(context));
  }

  int64_t device_bytes() const override {
    return weight_.bytes() + tf32x3_weight_.bytes() + gemm_bias_.bytes() + bias_.bytes() +
           gn_weight_.bytes() + gn_bias_.bytes() + scratch_.bytes();
  }

 private:
  const cuda::GemmFamilyParams params_;  // batch set per call
  cuda::DeviceBuffer weight_;
  cuda::DeviceBuffer tf32x3_weight_;
  cuda::DeviceBuffer gemm_bias_;
  cuda::DeviceBuffer bias_;
  cuda::DeviceBuffer gn_weight_;
  cuda::DeviceBuffer gn_bias_;
  Scratch scratch_;
};

class GroupNormGpuExecutor final : public GpuExecutor {
 public:
  GroupNormGpuExecutor(cuda::GroupNormParams params, cuda::DeviceBuffer gn_weight,
                       cuda::DeviceBuffer gn_bias)
      : params_(params), gn_weight_(std::move(gn_weight)), gn_bias_(std::move(gn_bias)) {}

  absl::Status Enqueue(const GpuLaunchContext& context, const float* input,
                       const Shape& input_shape, float* output) override {
    cuda::GroupNormParams params = params_;
    params.batch = input_shape[0];
    params.spatial_size = 1;
    for (size_t i = 2; i < input_shape.size(); ++i) params.spatial_size *= input_shape[i];
    ASSIGN_OR_RETURN(void* workspace, scratch_.Get(cuda::GroupNormFamilyWorkspaceBytes(params)));
    return cuda::RunGroupNormFamily(params, gn_weight_.as<float>(), gn_bias_.as<float>(), input,
                                    output, workspace, StreamOf(context));
  }

  int64_t device_bytes() const override {
    return gn_weight_.bytes() + gn_bias_.bytes() + scratch_.bytes();
  }

 private:
  const cuda::GroupNormParams params_;  // batch and spatial size set per call
  cuda::DeviceBuffer gn_weight_;
  cuda::DeviceBuffer gn_bias_;
  Scratch scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateConvGpuExecutor(const ConvGpuSpec& spec) {
  cuda::ConvFamilyParams params;
  // Batch and spatial sizes are set per call; the weight layout does not
  // depend on them, but validation wants a non-empty output: an input of
  // 2 * padding + 1 always has one.
  params.conv.batch = 1;
  params.conv.in_height = 2 * spec.padding + 1;
  params.conv.in_width = 2 * spec.padding + 1;
  params.conv.in_channels = spec.in_channels;
  params.conv.out_channels = spec.out_channels;
  params.conv.kernel_size = spec.kernel_size;
  params.conv.stride = spec.stride;
  params.conv.padding = spec.padding;
  params.conv.output_padding = spec.output_padding;
  params.num_groups = spec.num_groups;
  params.eps = static_cast<float>(spec.eps);
  params.mode = MathModeOf(spec.precision);
  std::vector<float> prepared(cuda::PreparedConvTransposeWeightSize(params.conv, params.mode));
  RETURN_IF_ERROR(cuda::PrepareConvTransposeWeight(params.conv, params.mode,
                                                   spec.weight->data(), prepared.data()));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer weight, Upload(prepared));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer bias, Upload(*spec.bias));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gn_weight, Upload(*spec.gn_weight));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gn_bias, Upload(*spec.gn_bias));
  return std::make_unique<ConvGpuExecutor>(params, std::move(weight), std::move(bias),
                                           std::move(gn_weight), std::move(gn_bias));
}

absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGemmGpuExecutor(const GemmGpuSpec& spec) {
  cuda::GemmFamilyParams params;
  params.linear.in_features = spec.in_features;
  params.linear.out_features = spec.out_features;
  params.epilogue.channels = spec.out_features;
  params.epilogue.num_groups = spec.num_groups;
  params.epilogue.hardtanh_min = static_cast<float>(spec.hardtanh_min);
  params.epilogue.hardtanh_max = static_cast<float>(spec.hardtanh_max);
  params.epilogue.eps = static_cast<float>(spec.eps);
  params.mode = MathModeOf(spec.precision);
  ASSIGN_OR_RETURN(cuda::DeviceBuffer weight, Upload(*spec.weight));
  // fp32 at large batches runs 3xTF32 from a split copy of the weight made
  // here, once (batch 1 still reads the original: one read of the bytes).
  cuda::DeviceBuffer tf32x3_weight;
  params.linear.batch = 1;  // the layout does not depend on it
  if (params.mode == cuda::MathMode::kFp32 && cuda::Tf32x3Slices(spec.in_features) > 0) {
    std::vector<float> split(cuda::Tf32x3WeightSize(params.linear));
    RETURN_IF_ERROR(cuda::PrepareTf32x3Weight(params.linear, spec.weight->data(), split.data()));
    ASSIGN_OR_RETURN(tf32x3_weight, Upload(split));
  }
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gemm_bias, Upload(*spec.gemm_bias));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer bias, Upload(*spec.bias));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gn_weight, Upload(*spec.gn_weight));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gn_bias, Upload(*spec.gn_bias));
  return std::make_unique<GemmGpuExecutor>(params, std::move(weight), std::move(tf32x3_weight),
                                           std::move(gemm_bias),
                                           std::move(bias), std::move(gn_weight),
                                           std::move(gn_bias));
}

absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGroupNormGpuExecutor(
    const GroupNormGpuSpec& spec) {
  cuda::GroupNormParams params;
  params.channels = spec.num_channels;
  params.num_groups = spec.num_groups;
  params.eps = static_cast<float>(spec.eps);
  params.prologue = cuda::GroupNormPrologue::kNone;
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gn_weight, Upload(*spec.gn_weight));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer gn_bias, Upload(*spec.gn_bias));
  return std::make_unique<GroupNormGpuExecutor>(params, std::move(gn_weight), std::move(gn_bias));
}

}  // namespace fuseserve
