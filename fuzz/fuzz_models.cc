#include "fuzz/fuzz_models.h"

#include <cstdio>
#include <cstdlib>

#include "server/models/model_factory.h"
#include "server/repository/model_config_loader.h"
#include "server/repository/safetensors.h"

namespace fuseserve::fuzzing {
namespace {

// Deterministic, varied values: a wrong index in a kernel changes results.
NamedF32Tensor Tensor(const std::string& name, const Shape& shape) {
  NamedF32Tensor tensor{name, shape, {}};
  tensor.data.resize(NumElements(shape));
  for (size_t i = 0; i < tensor.data.size(); ++i) {
    tensor.data[i] = 0.25f + 0.125f * static_cast<float>(i % 7) - 0.05f * static_cast<float>(i % 3);
  }
  return tensor;
}

std::string Parameter(const std::string& key, const std::string& value) {
  return "parameters { key: \"" + key + "\" value: { string_value: \"" + value + "\" } }\n";
}

std::string Tensors(const std::string& input_dims, const std::string& output_dims) {
  return "input { name: \"input\" data_type: TYPE_FP32 dims: [ " + input_dims +
         " ] }\noutput { name: \"output\" data_type: TYPE_FP32 dims: [ " + output_dims + " ] }\n";
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fuzz fixture does not load: %s\n", what.c_str());
  std::abort();
}

}  // namespace

const std::vector<FuzzModelSpec>& FuzzModelSpecs() {
  static const auto* const specs = new std::vector<FuzzModelSpec>{
      {"platform: \"groupnorm\"\nmax_batch_size: 4\n" + Tensors("4, -1, -1", "4, -1, -1") +
           Parameter("num_channels", "4") + Parameter("num_groups", "2"),
       {Tensor("gn.weight", {4}), Tensor("gn.bias", {4})}},
      {"platform: \"groupnorm\"\nmax_batch_size: 0\n" + Tensors("2, 4, -1", "2, 4, -1") +
           Parameter("num_channels", "4") + Parameter("num_groups", "4") +
           Parameter("eps", "0.001"),
       {Tensor("gn.weight", {4}), Tensor("gn.bias", {4})}},
      {"platform: \"gemm_bias_hardtanh_mish_groupnorm\"\nmax_batch_size: 8\n" + Tensors("8", "6") +
           Parameter("in_features", "8") + Parameter("out_features", "6") +
           Parameter("num_groups", "3") + Parameter("hardtanh_min", "-0.5"),
       {Tensor("gemm.weight", {6, 8}), Tensor("gemm.bias", {6}), Tensor("bias", {6}),
        Tensor("groupnorm.weight", {6}), Tensor("groupnorm.bias", {6})}},
      {"platform: \"convtranspose_gelu_groupnorm\"\nmax_batch_size: 2\n" +
           Tensors("2, -1, -1", "4, -1, -1") + Parameter("in_channels", "2") +
           Parameter("out_channels", "4") + Parameter("kernel_size", "3") +
           Parameter("stride", "2") + Parameter("padding", "1") + Parameter("output_padding", "1") +
           Parameter("num_groups", "2") + Parameter("precision", "fp32"),
       {Tensor("conv_transpose.weight", {2, 4, 3, 3}), Tensor("conv_transpose.bias", {4}),
        Tensor("group_norm.weight", {4}), Tensor("group_norm.bias", {4})}},
  };
  return *specs;
}

const std::vector<FuzzModel>& FuzzModels() {
  static const auto* const models = [] {
    auto* loaded = new std::vector<FuzzModel>();
    for (const FuzzModelSpec& spec : FuzzModelSpecs()) {
      absl::StatusOr<inference::ModelConfig> config =
          LoadModelConfigFromText(spec.config_pbtxt, kFuzzModelDirectory);
      if (!config.ok()) Die(config.status().ToString());
      absl::StatusOr<std::unique_ptr<SafetensorsFile>> weights =
          SafetensorsFile::FromBytes(SerializeSafetensors(spec.weights), "fixture");
      if (!weights.ok()) Die(weights.status().ToString());
      absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(*config, **weights);
      if (!model.ok()) Die(model.status().ToString());
      loaded->push_back({*std::move(config), *std::move(model)});
    }
    return loaded;
  }();
  return *models;
}

}  // namespace fuseserve::fuzzing
