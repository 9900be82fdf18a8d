#pragma once

// The GPU paths of the three families (kernels/cuda/families.h), bound to
// one device's copy of the weights. Built from gpu_executors.cc when CUDA is
// available, from gpu_executors_unavailable.cc otherwise (FailedPrecondition).

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/runtime/gpu_executor.h"
#include "server/runtime/model.h"

namespace fuseserve {

struct ConvGpuSpec {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel_size = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t num_groups = 0;
  double eps = 1e-5;
  Precision precision = Precision::kTf32;
  const std::vector<float>* weight = nullptr;  // [in_channels, out_channels, k, k]
  const std::vector<float>* bias = nullptr;
  const std::vector<float>* gn_weight = nullptr;
  const std::vector<float>* gn_bias = nullptr;
};
absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateConvGpuExecutor(const ConvGpuSpec& spec);

struct GemmGpuSpec {
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t num_groups = 0;
  double hardtanh_min = -1.0;
  double hardtanh_max = 1.0;
  double eps = 1e-5;
  Precision precision = Precision::kFp32;
  const std::vector<float>* weight = nullptr;  // [out_features, in_features]
  const std::vector<float>* gemm_bias = nullptr;
  const std::vector<float>* bias = nullptr;
  const std::vector<float>* gn_weight = nullptr;
  const std::vector<float>* gn_bias = nullptr;
};
absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGemmGpuExecutor(const GemmGpuSpec& spec);

struct GroupNormGpuSpec {
  int64_t num_channels = 0;
  int64_t num_groups = 0;
  double eps = 1e-5;
  const std::vector<float>* gn_weight = nullptr;
  const std::vector<float>* gn_bias = nullptr;
};
absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGroupNormGpuExecutor(
    const GroupNormGpuSpec& spec);

}  // namespace fuseserve
