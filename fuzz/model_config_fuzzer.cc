// config.pbtxt loading (server/repository/model_config_loader.h) on arbitrary
// text, followed by what the model manager derives from an accepted config:
// the family's hyper-parameters and dims (CreateModel, against a weights file
// with no tensors, so it stops at the first weight) and the batcher options.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_models.h"
#include "server/batching/dynamic_batcher.h"
#include "server/models/model_factory.h"
#include "server/repository/model_config_loader.h"
#include "server/repository/safetensors.h"
#include "server/repository/safetensors_writer.h"

namespace fuseserve::fuzzing {
namespace {

// Rejections name config.pbtxt (every message says which file is wrong).
void CheckRejection(const absl::Status& status) {
  Check(status.code() == absl::StatusCode::kInvalidArgument);
  Check(status.message().find("config.pbtxt") != absl::string_view::npos);
}

// The normalisation LoadModelConfig promises (model_config_loader.h).
void CheckAccepted(const inference::ModelConfig& config) {
  Check(config.name() == "model");
  Check(!config.platform().empty());
  Check(config.max_batch_size() >= 0);
  Check(config.input_size() == 1 && config.output_size() == 1);
  Check(config.instance_group_size() >= 1);
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    Check(group.count() >= 1);
  }
  Check(config.has_version_policy());
}

}  // namespace
}  // namespace fuseserve::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fuseserve::fuzzing;
  static const fuseserve::SafetensorsFile* const no_weights =
      fuseserve::SafetensorsFile::FromBytes(fuseserve::SerializeSafetensors({}), "empty")
          ->release();
  const absl::StatusOr<inference::ModelConfig> config = fuseserve::LoadModelConfigFromText(
      std::string(reinterpret_cast<const char*>(data), size), kFuzzModelDirectory);
  if (!config.ok()) {
    CheckRejection(config.status());
    return 0;
  }
  CheckAccepted(*config);
  // A weights file without tensors: creation fails at the first weight (or
  // earlier, on a bad parameter or dim), never later.
  const absl::StatusOr<std::unique_ptr<fuseserve::Model>> model =
      fuseserve::CreateModel(*config, *no_weights);
  Check(!model.ok());
  Check(model.status().code() == absl::StatusCode::kInvalidArgument ||
        model.status().code() == absl::StatusCode::kNotFound);
  const absl::StatusOr<fuseserve::BatcherOptions> options =
      fuseserve::BatcherOptionsFromConfig(*config);
  Check(options.ok() || options.status().code() == absl::StatusCode::kInvalidArgument);
  return 0;
}
