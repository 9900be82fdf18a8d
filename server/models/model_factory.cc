#include "server/models/model_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/models/convtranspose_gelu_groupnorm.h"
#include "server/models/gemm_bias_hardtanh_mish_groupnorm.h"
#include "server/models/groupnorm.h"

namespace fuseserve {

const std::vector<std::string>& KnownModelFamilies() {
  static const std::vector<std::string>* families = new std::vector<std::string>{
      kConvTransposeGeluGroupNormFamily, kGemmBiasHardtanhMishGroupNormFamily, kGroupNormFamily};
  return *families;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const inference::ModelConfig& config,
                                                   const SafetensorsFile& weights) {
  const std::string& platform = config.platform();
  if (platform == kConvTransposeGeluGroupNormFamily) {
    return CreateConvTransposeGeluGroupNormModel(config, weights);
  }
  if (platform == kGemmBiasHardtanhMishGroupNormFamily) {
    return CreateGemmBiasHardtanhMishGroupNormModel(config, weights);
  }
  if (platform == kGroupNormFamily) {
    return CreateGroupNormModel(config, weights);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(platform.empty() ? "config has no platform"
                                    : absl::StrCat("unknown platform \"", platform, "\""),
                   " (known: ", absl::StrJoin(KnownModelFamilies(), ", "), ")"));
}

}  // namespace fuseserve
