#include "server/models/groupnorm.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/group_norm.h"
#include "server/models/gpu_executors.h"
#include "server/models/model_io.h"
#include "server/models/parameters.h"
#include "server/models/weights.h"

namespace fuseserve {
namespace {

struct HyperParameters {
  int64_t num_channels = 0;
  int64_t num_groups = 0;
  double eps = 1e-5;
};

absl::StatusOr<HyperParameters> ParseHyperParameters(const inference::ModelConfig& config) {
  const ModelParameters params(config);
  RETURN_IF_ERROR(
      params.CheckKnownKeys(kGroupNormFamily, {"num_channels", "num_groups", "eps", "precision"}));
  HyperParameters h;
  ASSIGN_OR_RETURN(h.num_channels, params.RequiredInt("num_channels", 1));
  ASSIGN_OR_RETURN(h.num_groups, params.RequiredInt("num_groups", 1));
  ASSIGN_OR_RETURN(h.eps, params.OptionalPositiveDouble("eps", 1e-5));
  RETURN_IF_ERROR(params.OptionalPrecision("precision", Precision::kFp32).status());
  if (h.num_channels % h.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"num_groups\" (", h.num_groups,
                                                   ") must divide parameter \"num_channels\" (",
                                                   h.num_channels, ")"));
  }
  return h;
}

class GroupNormModel final : public Model {
 public:
  GroupNormModel(HyperParameters hyper, ModelIo io, std::vector<float> weight,
                 std::vector<float> bias)
      : hyper_(hyper), io_(std::move(io)), weight_(std::move(weight)), bias_(std::move(bias)) {}

  const std::string& family() const override { return family_; }
  Precision precision() const override { return Precision::kFp32; }

  absl::StatusOr<Shape> OutputShape(const Shape& input_shape) const override {
    RETURN_IF_ERROR(io_.CheckInputShape(input_shape));
    return input_shape;
  }

  absl::Status RunOnCpu(const float* input, const Shape& input_shape, float* output,
                        ThreadPool& pool) const override {
    RETURN_IF_ERROR(OutputShape(input_shape).status());
    ASSIGN_OR_RETURN(const cpu::GroupNormParams params,
                     cpu::GroupNormParamsForShape(input_shape, hyper_.num_groups, hyper_.eps));
    return cpu::GroupNorm(params, input, weight_.data(), bias_.data(), output, pool);
  }

  absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGpuExecutor() const override {
    GroupNormGpuSpec spec;
    spec.num_channels = hyper_.num_channels;
    spec.num_groups = hyper_.num_groups;
    spec.eps = hyper_.eps;
    spec.gn_weight = &weight_;
    spec.gn_bias = &bias_;
    return CreateGroupNormGpuExecutor(spec);
  }

 private:
  const std::string family_ = kGroupNormFamily;
  const HyperParameters hyper_;
  const ModelIo io_;
  const std::vector<float> weight_;  // [num_channels]
  const std::vector<float> bias_;    // [num_channels]
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateGroupNormModel(const inference::ModelConfig& config,
                                                            const SafetensorsFile& weights) {
  ASSIGN_OR_RETURN(const HyperParameters h, ParseHyperParameters(config));

  ASSIGN_OR_RETURN(ModelIo io, ModelIo::FromConfig(config, {"batch", "channels"}));
  RETURN_IF_ERROR(io.CheckMinInputRank(2));
  RETURN_IF_ERROR(io.CheckInputDim(1, h.num_channels, "num_channels"));
  RETURN_IF_ERROR(io.CheckOutputDims(io.full_input_dims()));

  const std::vector<std::string> names = {"gn.weight", "gn.bias"};
  ASSIGN_OR_RETURN(std::vector<float> weight,
                   CopyF32Tensor(weights, names[0], {h.num_channels}, "[num_channels]"));
  ASSIGN_OR_RETURN(std::vector<float> bias,
                   CopyF32Tensor(weights, names[1], {h.num_channels}, "[num_channels]"));
  RETURN_IF_ERROR(CheckNoUnexpectedTensors(weights, names));

  return std::make_unique<GroupNormModel>(h, std::move(io), std::move(weight), std::move(bias));
}

}  // namespace fuseserve
