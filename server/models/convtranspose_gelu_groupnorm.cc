#include "server/models/convtranspose_gelu_groupnorm.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/conv_transpose2d.h"
#include "kernels/cpu/group_norm.h"
#include "server/models/gpu_executors.h"
#include "server/models/model_io.h"
#include "server/models/parameters.h"
#include "server/models/weights.h"

namespace fuseserve {
namespace {

// Spatial sizes above this are rejected before (H - 1) * stride is formed;
// the CPU kernel's own bound.
constexpr int64_t kMaxSpatialSize = int64_t{1} << 30;

struct HyperParameters {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel_size = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t num_groups = 0;
  double eps = 1e-5;
  Precision precision = Precision::kTf32;

  std::string Describe() const {
    return absl::StrCat("kernel_size ", kernel_size, ", stride ", stride, ", padding ", padding,
                        ", output_padding ", output_padding);
  }
};

absl::StatusOr<HyperParameters> ParseHyperParameters(const inference::ModelConfig& config) {
  const ModelParameters params(config);
  RETURN_IF_ERROR(
      params.CheckKnownKeys(kConvTransposeGeluGroupNormFamily,
                            {"in_channels", "out_channels", "kernel_size", "stride", "padding",
                             "output_padding", "num_groups", "eps", "precision"}));
  HyperParameters h;
  ASSIGN_OR_RETURN(h.in_channels, params.RequiredInt("in_channels", 1));
  ASSIGN_OR_RETURN(h.out_channels, params.RequiredInt("out_channels", 1));
  ASSIGN_OR_RETURN(h.kernel_size, params.RequiredInt("kernel_size", 1));
  ASSIGN_OR_RETURN(h.stride, params.OptionalInt("stride", 1, 1));
  ASSIGN_OR_RETURN(h.padding, params.OptionalInt("padding", 0, 0));
  ASSIGN_OR_RETURN(h.output_padding, params.OptionalInt("output_padding", 0, 0));
  ASSIGN_OR_RETURN(h.num_groups, params.RequiredInt("num_groups", 1));
  ASSIGN_OR_RETURN(h.eps, params.OptionalPositiveDouble("eps", 1e-5));
  ASSIGN_OR_RETURN(h.precision, params.OptionalPrecision("precision", Precision::kTf32));
  // PyTorch's rule for dilation 1: output_padding < max(stride, dilation).
  if (h.output_padding >= h.stride) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter \"output_padding\" (", h.output_padding,
                     ") must be smaller than parameter \"stride\" (", h.stride, ")"));
  }
  if (h.out_channels % h.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"num_groups\" (", h.num_groups,
                                                   ") must divide parameter \"out_channels\" (",
                                                   h.out_channels, ")"));
  }
  return h;
}

// The output size along one spatial dimension of an input of size `in`
// (>= 1); InvalidArgument when it is not positive.
absl::StatusOr<int64_t> OutputSize(const HyperParameters& h, const char* dimension, int64_t in) {
  if (in > kMaxSpatialSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", dimension, " ", in, " exceeds ", kMaxSpatialSize));
  }
  const int64_t out =
      cpu::ConvTranspose2dOutputSize(in, h.kernel_size, h.stride, h.padding, h.output_padding);
  if (out < 1) {
    return absl::InvalidArgumentError(absl::StrCat("input ", dimension, " ", in, " gives output ",
                                                   dimension, " ", out, " (", h.Describe(), ")"));
  }
  return out;
}

class ConvTransposeGeluGroupNormModel final : public Model {
 public:
  ConvTransposeGeluGroupNormModel(HyperParameters hyper, ModelIo io, std::vector<float> conv_weight,
                                  std::vector<float> conv_bias, std::vector<float> gn_weight,
                                  std::vector<float> gn_bias)
      : hyper_(hyper),
        io_(std::move(io)),
        conv_weight_(std::move(conv_weight)),
        conv_bias_(std::move(conv_bias)),
        gn_weight_(std::move(gn_weight)),
        gn_bias_(std::move(gn_bias)) {}

  const std::string& family() const override { return family_; }
  Precision precision() const override { return hyper_.precision; }

  absl::StatusOr<Shape> OutputShape(const Shape& input_shape) const override {
    RETURN_IF_ERROR(io_.CheckInputShape(input_shape));
    ASSIGN_OR_RETURN(const int64_t out_height, OutputSize(hyper_, "height", input_shape[2]));
    ASSIGN_OR_RETURN(const int64_t out_width, OutputSize(hyper_, "width", input_shape[3]));
    Shape output = {input_shape[0], hyper_.out_channels, out_height, out_width};
    RETURN_IF_ERROR(CheckedNumElements(output).status());
    return output;
  }

  // Float32 on the CPU for both precisions (at least as accurate as asked):
  // the transposed convolution with its bias into `output`, then GELU and
  // GroupNorm in place in one op (GELU as the GroupNorm prologue).
  absl::Status RunOnCpu(const float* input, const Shape& input_shape, float* output,
                        ThreadPool& pool) const override {
    ASSIGN_OR_RETURN(const Shape output_shape, OutputShape(input_shape));
    const cpu::ConvTranspose2dParams conv{
        input_shape[0], hyper_.in_channels, hyper_.out_channels,
        input_shape[2], input_shape[3],     hyper_.kernel_size,
        hyper_.stride,  hyper_.padding,     hyper_.output_padding};
    RETURN_IF_ERROR(
        cpu::ConvTranspose2d(conv, input, conv_weight_.data(), conv_bias_.data(), output, pool));
    const cpu::GroupNormParams gn{
        output_shape[0],   output_shape[1], output_shape[2] * output_shape[3],
        hyper_.num_groups, hyper_.eps,      cpu::GroupNormPrologue::kGeluErf};
    return cpu::GroupNorm(gn, output, gn_weight_.data(), gn_bias_.data(), output, pool);
  }

  absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGpuExecutor() const override {
    ConvGpuSpec spec;
    spec.in_channels = hyper_.in_channels;
    spec.out_channels = hyper_.out_channels;
    spec.kernel_size = hyper_.kernel_size;
    spec.stride = hyper_.stride;
    spec.padding = hyper_.padding;
    spec.output_padding = hyper_.output_padding;
    spec.num_groups = hyper_.num_groups;
    spec.eps = hyper_.eps;
    spec.precision = hyper_.precision;
    spec.weight = &conv_weight_;
    spec.bias = &conv_bias_;
    spec.gn_weight = &gn_weight_;
    spec.gn_bias = &gn_bias_;
    return CreateConvGpuExecutor(spec);
  }

 private:
  const std::string family_ = kConvTransposeGeluGroupNormFamily;
  const HyperParameters hyper_;
  const ModelIo io_;
  const std::vector<float> conv_weight_;  // [in_channels, out_channels, k, k]
  const std::vector<float> conv_bias_;    // [out_channels]
  const std::vector<float> gn_weight_;    // [out_channels]
  const std::vector<float> gn_bias_;      // [out_channels]
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateConvTransposeGeluGroupNormModel(
    const inference::ModelConfig& config, const SafetensorsFile& weights) {
  ASSIGN_OR_RETURN(const HyperParameters h, ParseHyperParameters(config));

  ASSIGN_OR_RETURN(ModelIo io,
                   ModelIo::FromConfig(config, {"batch", "channels", "height", "width"}));
  RETURN_IF_ERROR(io.CheckInputRank(4));
  RETURN_IF_ERROR(io.CheckInputDim(1, h.in_channels, "in_channels"));
  Shape expected_output = {io.full_input_dims()[0], h.out_channels, -1, -1};
  for (size_t i : {2, 3}) {
    const int64_t in = io.full_input_dims()[i];
    if (in == -1) continue;
    absl::StatusOr<int64_t> out = OutputSize(h, i == 2 ? "height" : "width", in);
    if (!out.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config input dims: ", out.status().message()));
    }
    expected_output[i] = *out;
  }
  RETURN_IF_ERROR(io.CheckOutputDims(expected_output));

  const int64_t k = h.kernel_size;
  const std::vector<std::string> names = {"conv_transpose.weight", "conv_transpose.bias",
                                          "group_norm.weight", "group_norm.bias"};
  ASSIGN_OR_RETURN(std::vector<float> conv_weight,
                   CopyF32Tensor(weights, names[0], {h.in_channels, h.out_channels, k, k},
                                 "[in_channels, out_channels, kernel_size, kernel_size]"));
  ASSIGN_OR_RETURN(std::vector<float> conv_bias,
                   CopyF32Tensor(weights, names[1], {h.out_channels}, "[out_channels]"));
  ASSIGN_OR_RETURN(std::vector<float> gn_weight,
                   CopyF32Tensor(weights, names[2], {h.out_channels}, "[out_channels]"));
  ASSIGN_OR_RETURN(std::vector<float> gn_bias,
                   CopyF32Tensor(weights, names[3], {h.out_channels}, "[out_channels]"));
  RETURN_IF_ERROR(CheckNoUnexpectedTensors(weights, names));

  return std::make_unique<ConvTransposeGeluGroupNormModel>(
      h, std::move(io), std::move(conv_weight), std::move(conv_bias), std::move(gn_weight),
      std::move(gn_bias));
}

}  // namespace fuseserve
