#include "server/models/gemm_bias_hardtanh_mish_groupnorm.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/bias_hardtanh_mish_group_norm.h"
#include "kernels/cpu/linear.h"
#include "server/models/gpu_executors.h"
#include "server/models/model_io.h"
#include "server/models/parameters.h"
#include "server/models/weights.h"

namespace fuseserve {
namespace {

struct HyperParameters {
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t num_groups = 0;
  double hardtanh_min = -1.0;
  double hardtanh_max = 1.0;
  double eps = 1e-5;
  Precision precision = Precision::kFp32;
};

absl::StatusOr<HyperParameters> ParseHyperParameters(const inference::ModelConfig& config) {
  const ModelParameters params(config);
  RETURN_IF_ERROR(params.CheckKnownKeys(kGemmBiasHardtanhMishGroupNormFamily,
                                        {"in_features", "out_features", "num_groups",
                                         "hardtanh_min", "hardtanh_max", "eps", "precision"}));
  HyperParameters h;
  ASSIGN_OR_RETURN(h.in_features, params.RequiredInt("in_features", 1));
  ASSIGN_OR_RETURN(h.out_features, params.RequiredInt("out_features", 1));
  ASSIGN_OR_RETURN(h.num_groups, params.RequiredInt("num_groups", 1));
  ASSIGN_OR_RETURN(h.hardtanh_min, params.OptionalDouble("hardtanh_min", -1.0));
  ASSIGN_OR_RETURN(h.hardtanh_max, params.OptionalDouble("hardtanh_max", 1.0));
  ASSIGN_OR_RETURN(h.eps, params.OptionalPositiveDouble("eps", 1e-5));
  ASSIGN_OR_RETURN(h.precision, params.OptionalPrecision("precision", Precision::kFp32));
  if (h.out_features % h.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"num_groups\" (", h.num_groups,
                                                   ") must divide parameter \"out_features\" (",
                                                   h.out_features, ")"));
  }
  if (h.hardtanh_min > h.hardtanh_max) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"hardtanh_min\" (", h.hardtanh_min,
                                                   ") must not exceed parameter \"hardtanh_max\" (",
                                                   h.hardtanh_max, ")"));
  }
  return h;
}

class GemmBiasHardtanhMishGroupNormModel final : public Model {
 public:
  GemmBiasHardtanhMishGroupNormModel(HyperParameters hyper, ModelIo io,
                                     std::vector<float> gemm_weight, std::vector<float> gemm_bias,
                                     std::vector<float> bias, std::vector<float> gn_weight,
                                     std::vector<float> gn_bias)
      : hyper_(hyper),
        io_(std::move(io)),
        gemm_weight_(std::move(gemm_weight)),
        gemm_bias_(std::move(gemm_bias)),
        bias_(std::move(bias)),
        gn_weight_(std::move(gn_weight)),
        gn_bias_(std::move(gn_bias)) {}

  const std::string& family() const override { return family_; }
  Precision precision() const override { return hyper_.precision; }

  absl::StatusOr<Shape> OutputShape(const Shape& input_shape) const override {
    RETURN_IF_ERROR(io_.CheckInputShape(input_shape));
    Shape output = {input_shape[0], hyper_.out_features};
    RETURN_IF_ERROR(CheckedNumElements(output).status());
    return output;
  }

  // Float32 sgemm with gemm.bias into `output`, then the epilogue (second
  // bias, Hardtanh, Mish, GroupNorm) in place.
  absl::Status RunOnCpu(const float* input, const Shape& input_shape, float* output,
                        ThreadPool& pool) const override {
    RETURN_IF_ERROR(OutputShape(input_shape).status());
    const int64_t batch = input_shape[0];
    RETURN_IF_ERROR(cpu::Linear({batch, hyper_.in_features, hyper_.out_features}, input,
                                gemm_weight_.data(), gemm_bias_.data(), output, pool));
    const cpu::BiasHardtanhMishGroupNormParams epilogue{
        batch,     hyper_.out_features, hyper_.num_groups, hyper_.hardtanh_min, hyper_.hardtanh_max,
        hyper_.eps};
    return cpu::BiasHardtanhMishGroupNorm(epilogue, output, bias_.data(), gn_weight_.data(),
                                          gn_bias_.data(), output, pool);
  }

  absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGpuExecutor() const override {
    GemmGpuSpec spec;
    spec.in_features = hyper_.in_features;
    spec.out_features = hyper_.out_features;
    spec.num_groups = hyper_.num_groups;
    spec.hardtanh_min = hyper_.hardtanh_min;
    spec.hardtanh_max = hyper_.hardtanh_max;
    spec.eps = hyper_.eps;
    spec.precision = hyper_.precision;
    spec.weight = &gemm_weight_;
    spec.gemm_bias = &gemm_bias_;
    spec.bias = &bias_;
    spec.gn_weight = &gn_weight_;
    spec.gn_bias = &gn_bias_;
    return CreateGemmGpuExecutor(spec);
  }

 private:
  const std::string family_ = kGemmBiasHardtanhMishGroupNormFamily;
  const HyperParameters hyper_;
  const ModelIo io_;
  const std::vector<float> gemm_weight_;  // [out_features, in_features]
  const std::vector<float> gemm_bias_;    // [out_features]
  const std::vector<float> bias_;         // [out_features]
  const std::vector<float> gn_weight_;    // [out_features]
  const std::vector<float> gn_bias_;      // [out_features]
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateGemmBiasHardtanhMishGroupNormModel(
    const inference::ModelConfig& config, const SafetensorsFile& weights) {
  ASSIGN_OR_RETURN(const HyperParameters h, ParseHyperParameters(config));

  ASSIGN_OR_RETURN(ModelIo io, ModelIo::FromConfig(config, {"batch", "features"}));
  RETURN_IF_ERROR(io.CheckInputRank(2));
  RETURN_IF_ERROR(io.CheckInputDim(1, h.in_features, "in_features"));
  RETURN_IF_ERROR(io.CheckOutputDims({io.full_input_dims()[0], h.out_features}));

  const std::vector<std::string> names = {"gemm.weight", "gemm.bias", "bias", "groupnorm.weight",
                                          "groupnorm.bias"};
  ASSIGN_OR_RETURN(std::vector<float> gemm_weight,
                   CopyF32Tensor(weights, names[0], {h.out_features, h.in_features},
                                 "[out_features, in_features]"));
  std::vector<float> per_feature[4];
  for (int i = 0; i < 4; ++i) {
    ASSIGN_OR_RETURN(per_feature[i],
                     CopyF32Tensor(weights, names[i + 1], {h.out_features}, "[out_features]"));
  }
  RETURN_IF_ERROR(CheckNoUnexpectedTensors(weights, names));

  return std::make_unique<GemmBiasHardtanhMishGroupNormModel>(
      h, std::move(io), std::move(gemm_weight), std::move(per_feature[0]),
      std::move(per_feature[1]), std::move(per_feature[2]), std::move(per_feature[3]));
}

}  // namespace fuseserve
