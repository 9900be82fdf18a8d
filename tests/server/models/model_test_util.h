#pragma once

// Builds a family's config and weights in memory for the model tests.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/shape.h"
#include "gtest/gtest.h"
#include "proto/model_config.pb.h"
#include "server/repository/safetensors.h"
#include "server/repository/safetensors_writer.h"
#include "server/runtime/model.h"

namespace fuseserve {
namespace testing {

// A config (one FP32 input "input", one FP32 output "output") plus the
// weights file, each editable before Create().
struct ModelSpec {
  std::string platform;
  int max_batch_size = 0;
  Shape input_dims;
  Shape output_dims;
  std::map<std::string, std::string> parameters;
  std::vector<NamedF32Tensor> tensors;

  inference::ModelConfig Config() const;
  // The tensors as a safetensors image read back by SafetensorsFile.
  std::unique_ptr<SafetensorsFile> Weights() const;
  // CreateModel(Config(), *Weights()).
  absl::StatusOr<std::unique_ptr<Model>> Create() const;

  // The tensor named `name`; null if absent.
  NamedF32Tensor* FindTensor(const std::string& name);
  void RemoveTensor(const std::string& name);
};

// A tensor filled with deterministic random values: U[low, high).
NamedF32Tensor UniformTensor(const std::string& name, const Shape& shape, uint64_t seed, float low,
                             float high);

// One invalid hyper-parameter: `key` set to `value` (or removed when `value`
// is empty) must fail Create with InvalidArgument containing `message_part`.
struct ParameterCase {
  std::string key;
  std::string value;
  std::string message_part;
};

// Checks every case against `valid` (a spec that creates successfully).
void ExpectParameterErrors(const ModelSpec& valid, const std::vector<ParameterCase>& cases);

// The contract of Create / OutputShape errors: InvalidArgument whose message
// contains `part`.
::testing::AssertionResult IsInvalidArgumentWith(const absl::Status& status,
                                                 const std::string& part);

}  // namespace testing
}  // namespace fuseserve
