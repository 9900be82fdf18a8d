#include "tests/server/models/model_test_util.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "kernels/reference/test_data.h"
#include "server/models/model_factory.h"

namespace fuseserve {
namespace testing {

inference::ModelConfig ModelSpec::Config() const {
  inference::ModelConfig config;
  config.set_name("test_model");
  config.set_platform(platform);
  config.set_max_batch_size(max_batch_size);
  inference::ModelInput* input = config.add_input();
  input->set_name("input");
  input->set_data_type(inference::TYPE_FP32);
  for (int64_t dim : input_dims) input->add_dims(dim);
  inference::ModelOutput* output = config.add_output();
  output->set_name("output");
  output->set_data_type(inference::TYPE_FP32);
  for (int64_t dim : output_dims) output->add_dims(dim);
  for (const auto& [key, value] : parameters) {
    (*config.mutable_parameters())[key].set_string_value(value);
  }
  return config;
}

std::unique_ptr<SafetensorsFile> ModelSpec::Weights() const {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::FromBytes(SerializeSafetensors(tensors), "test.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? std::move(*file) : nullptr;
}

absl::StatusOr<std::unique_ptr<Model>> ModelSpec::Create() const {
  const std::unique_ptr<SafetensorsFile> weights = Weights();
  if (weights == nullptr) return absl::InternalError("test weights did not parse");
  return CreateModel(Config(), *weights);
}

NamedF32Tensor* ModelSpec::FindTensor(const std::string& name) {
  for (NamedF32Tensor& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

void ModelSpec::RemoveTensor(const std::string& name) {
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [&](const NamedF32Tensor& t) { return t.name == name; }),
                tensors.end());
}

NamedF32Tensor UniformTensor(const std::string& name, const Shape& shape, uint64_t seed, float low,
                             float high) {
  return NamedF32Tensor{name, shape, reference::RandomUniform(NumElements(shape), seed, low, high)};
}

::testing::AssertionResult IsInvalidArgumentWith(const absl::Status& status,
                                                 const std::string& part) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "expected InvalidArgument, got " << status;
  }
  if (status.message().find(part) == absl::string_view::npos) {
    return ::testing::AssertionFailure()
           << "message \"" << status.message() << "\" does not contain \"" << part << "\"";
  }
  return ::testing::AssertionSuccess();
}

void ExpectParameterErrors(const ModelSpec& valid, const std::vector<ParameterCase>& cases) {
  for (const ParameterCase& c : cases) {
    ModelSpec spec = valid;
    if (c.value.empty()) {
      spec.parameters.erase(c.key);
    } else {
      spec.parameters[c.key] = c.value;
    }
    EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(), c.message_part))
        << c.key << "=" << c.value;
  }
}

}  // namespace testing
}  // namespace fuseserve
