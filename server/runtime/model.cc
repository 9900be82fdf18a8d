#include "server/runtime/model.h"

#include "absl/strings/str_cat.h"

namespace fuseserve {

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
  }
  return "unknown";
}

absl::StatusOr<Precision> ParsePrecision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "tf32") return Precision::kTf32;
  return absl::InvalidArgumentError(
      absl::StrCat("precision must be \"fp32\" or \"tf32\", got \"", text, "\""));
}

}  // namespace fuseserve
