#include "tests/e2e/repository_editing.h"

#include <fstream>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "server/repository/model_config_loader.h"

namespace fuseserve::testing {

absl::Status CopyModel(const std::filesystem::path& repository, const std::string& source,
                       const std::string& name,
                       const std::function<void(inference::ModelConfig&)>& edit) {
  ASSIGN_OR_RETURN(inference::ModelConfig config, LoadModelConfig((repository / source).string()));
  config.set_name(name);
  if (edit) edit(config);
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(config, &text)) {
    return absl::InternalError(absl::StrCat("cannot print the config of ", name));
  }
  const std::filesystem::path target = repository / name;
  std::error_code error;
  std::filesystem::create_directories(target / "1", error);
  if (!error) {
    std::filesystem::copy_file(repository / source / "1" / "model.safetensors",
                               target / "1" / "model.safetensors", error);
  }
  if (error) {
    return absl::InternalError(absl::StrCat("cannot copy ", source, "'s weights to ",
                                            target.string(), ": ", error.message()));
  }
  std::ofstream out(target / "config.pbtxt");
  out << text;
  if (!out.good()) {
    return absl::InternalError(absl::StrCat("cannot write ", (target / "config.pbtxt").string()));
  }
  return absl::OkStatus();
}

}  // namespace fuseserve::testing
