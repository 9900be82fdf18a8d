#include "server/repository/model_config_loader.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/shape.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace fuseserve {
namespace {

namespace fs = std::filesystem;

// Collects TextFormat's errors as "<path>:<line>:<column>: <message>".
class CollectingErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectingErrorCollector(std::string display_path)
      : display_path_(std::move(display_path)) {}

  // `line` and `column` are 0-based; -1 when the error has no position.
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (line < 0) {
      errors_.push_back(absl::StrCat(display_path_, ": ", message));
    } else {
      errors_.push_back(absl::StrCat(display_path_, ":", line + 1, ":", column + 1, ": ", message));
    }
  }

  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string display_path_;
  std::vector<std::string> errors_;
};

// <model_dir>/config.pbtxt, the name every message gives the config.
std::string ConfigPath(const std::string& model_dir) {
  return (fs::path(model_dir) / "config.pbtxt").string();
}

// The basename of `dir`, ignoring trailing separators ("a/b/" -> "b").
std::string DirectoryName(const std::string& dir) {
  fs::path path(dir);
  if (path.filename().empty()) path = path.parent_path();
  return path.filename().string();
}

std::string DataTypeName(inference::DataType type) {
  const std::string& name = inference::DataType_Name(type);
  return name.empty() ? absl::StrCat("data type ", static_cast<int>(type)) : name;
}

// Checks what ModelInput and ModelOutput share. `kind` is "input" / "output".
template <typename TensorConfig>
absl::Status ValidateTensor(const TensorConfig& tensor, const std::string& kind,
                            const std::string& where) {
  if (tensor.name().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", kind, " has no name"));
  }
  const std::string what = absl::StrCat(where, ": ", kind, " \"", tensor.name(), "\"");
  if (tensor.data_type() != inference::TYPE_FP32) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has data_type ",
                                                   DataTypeName(tensor.data_type()),
                                                   "; only TYPE_FP32 is supported"));
  }
  const Shape dims(tensor.dims().begin(), tensor.dims().end());
  if (dims.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no dims"));
  }
  for (int64_t dim : dims) {
    if (dim <= 0 && dim != -1) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has dims ", ShapeToString(dims),
                                                     "; each dim must be > 0 or -1 (any size)"));
    }
  }
  if (tensor.has_reshape()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has a reshape, which is not supported"));
  }
  if (tensor.is_shape_tensor()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is a shape tensor, which is not supported"));
  }
  return absl::OkStatus();
}

absl::Status NormalizeInstanceGroups(inference::ModelConfig& config, const std::string& where) {
  if (config.instance_group().empty()) {
    inference::ModelInstanceGroup* group = config.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_AUTO);
    group->set_count(1);
    return absl::OkStatus();
  }
  for (int i = 0; i < config.instance_group_size(); ++i) {
    inference::ModelInstanceGroup* group = config.mutable_instance_group(i);
    const std::string what = absl::StrCat(where, ": instance_group ", i);
    if (group->count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has count ", group->count(), "; count must be >= 0"));
    }
    if (group->count() == 0) group->set_count(1);
    switch (group->kind()) {
      case inference::ModelInstanceGroup::KIND_AUTO:
      case inference::ModelInstanceGroup::KIND_GPU:
      case inference::ModelInstanceGroup::KIND_CPU:
        break;
      case inference::ModelInstanceGroup::KIND_MODEL:
        return absl::InvalidArgumentError(
            absl::StrCat(what,
                         " has kind KIND_MODEL, which is not supported (use KIND_GPU, KIND_CPU or "
                         "KIND_AUTO)"));
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has unknown kind ", static_cast<int>(group->kind())));
    }
    for (int gpu : group->gpus()) {
      if (gpu < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " lists GPU ", gpu, "; GPU ids must be >= 0"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeVersionPolicy(inference::ModelConfig& config, const std::string& where) {
  inference::ModelVersionPolicy* policy = config.mutable_version_policy();
  switch (policy->policy_choice_case()) {
    case inference::ModelVersionPolicy::POLICY_CHOICE_NOT_SET:
      policy->mutable_latest()->set_num_versions(1);
      break;
    case inference::ModelVersionPolicy::kLatest:
      if (policy->latest().num_versions() == 0) policy->mutable_latest()->set_num_versions(1);
      break;
    case inference::ModelVersionPolicy::kAll:
      break;
    case inference::ModelVersionPolicy::kSpecific:
      if (policy->specific().versions().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": version_policy specific lists no versions"));
      }
      for (int64_t version : policy->specific().versions()) {
        if (version < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": version_policy specific lists version ", version,
                           "; versions are positive integers"));
        }
      }
      break;
  }
  return absl::OkStatus();
}

absl::Status ValidateDynamicBatching(const inference::ModelConfig& config,
                                     const std::string& where) {
  if (!config.has_dynamic_batching()) return absl::OkStatus();
  for (int32_t size : config.dynamic_batching().preferred_batch_size()) {
    if (size < 1 || (config.max_batch_size() > 0 && size > config.max_batch_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": dynamic_batching preferred_batch_size ", size, " is outside [1, ",
                       config.max_batch_size() > 0 ? absl::StrCat(config.max_batch_size())
                                                   : std::string("max_batch_size"),
                       "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<inference::ModelConfig> ParseModelConfig(const std::string& pbtxt,
                                                        const std::string& display_path) {
  CollectingErrorCollector errors(display_path);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  inference::ModelConfig config;
  if (!parser.ParseFromString(pbtxt, &config)) {
    if (errors.errors().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(display_path, ": cannot parse ModelConfig"));
    }
    return absl::InvalidArgumentError(absl::StrJoin(errors.errors(), "; "));
  }
  return config;
}

absl::StatusOr<inference::ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = ConfigPath(model_dir);
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat("model directory ", model_dir, " has no config.pbtxt (expected ", path, ")"));
  }
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", error.message()));
  }
  if (status.type() != fs::file_type::regular) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot open ", path));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  return LoadModelConfigFromText(text, model_dir);
}

absl::StatusOr<inference::ModelConfig> LoadModelConfigFromText(const std::string& pbtxt,
                                                               const std::string& model_dir) {
  const std::string path = ConfigPath(model_dir);
  ASSIGN_OR_RETURN(inference::ModelConfig config, ParseModelConfig(pbtxt, path));

  const std::string directory_name = DirectoryName(model_dir);
  if (config.name().empty()) {
    config.set_name(directory_name);
  } else if (config.name() != directory_name) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": name \"", config.name(),
                                                   "\" does not match the model directory \"",
                                                   directory_name, "\""));
  }
  if (config.platform().empty()) {
    if (!config.backend().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": backend \"", config.backend(),
                       "\" is not supported; set platform to the model family instead"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": platform is required (the model family)"));
  }
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": max_batch_size is ", config.max_batch_size(), "; it must be >= 0"));
  }
  if (config.input_size() != 1 || config.output_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the model has ", config.input_size(),
                                                   " inputs and ", config.output_size(),
                                                   " outputs; exactly one of each is required"));
  }
  RETURN_IF_ERROR(ValidateTensor(config.input(0), "input", path));
  RETURN_IF_ERROR(ValidateTensor(config.output(0), "output", path));
  RETURN_IF_ERROR(NormalizeInstanceGroups(config, path));
  RETURN_IF_ERROR(NormalizeVersionPolicy(config, path));
  RETURN_IF_ERROR(ValidateDynamicBatching(config, path));
  const std::string& filename = config.default_model_filename();
  if (!filename.empty() &&
      (filename == "." || filename == ".." || filename.find('/') != std::string::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": default_model_filename \"", filename,
                     "\" must be a file name inside the version directory"));
  }
  return config;
}

}  // namespace fuseserve
