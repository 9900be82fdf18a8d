#include "server/models/parameters.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuseserve {
namespace {

// Every integer parameter is a size or a count; bounding them keeps the
// families' size arithmetic (e.g. (H - 1) * stride) far from int64 overflow.
constexpr int64_t kMaxIntParameter = (int64_t{1} << 31) - 1;

std::string IntRequirement(int64_t min_value) {
  if (min_value == 1) return "a positive integer";
  if (min_value == 0) return "a non-negative integer";
  return absl::StrCat("an integer >= ", min_value);
}

absl::Status BadValue(const std::string& key, const std::string& requirement,
                      const std::string& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("parameter \"", key, "\" must be ", requirement, ", got \"", value, "\""));
}

absl::StatusOr<int64_t> ParseInt(const std::string& key, const std::string& value,
                                 int64_t min_value) {
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < min_value) {
    return BadValue(key, IntRequirement(min_value), value);
  }
  if (parsed > kMaxIntParameter) {
    return BadValue(key, absl::StrCat(IntRequirement(min_value), " <= ", kMaxIntParameter), value);
  }
  return parsed;
}

}  // namespace

ModelParameters::ModelParameters(const inference::ModelConfig& config) {
  for (const auto& [key, parameter] : config.parameters()) {
    values_[key] = parameter.string_value();
  }
}

absl::Status ModelParameters::CheckKnownKeys(const std::string& family,
                                             const std::vector<std::string>& known) const {
  for (const auto& entry : values_) {
    if (std::find(known.begin(), known.end(), entry.first) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown parameter \"", entry.first,
                                                     "\" for platform ", family,
                                                     " (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

const std::string* ModelParameters::Find(const std::string& key) const {
  const auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> ModelParameters::RequiredInt(const std::string& key,
                                                     int64_t min_value) const {
  const std::string* value = Find(key);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required parameter \"", key, "\" (", IntRequirement(min_value), ")"));
  }
  return ParseInt(key, *value, min_value);
}

absl::StatusOr<int64_t> ModelParameters::OptionalInt(const std::string& key, int64_t min_value,
                                                     int64_t default_value) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  return ParseInt(key, *value, min_value);
}

absl::StatusOr<double> ModelParameters::OptionalDouble(const std::string& key,
                                                       double default_value) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  double parsed = 0;
  if (!absl::SimpleAtod(*value, &parsed) || !std::isfinite(parsed)) {
    return BadValue(key, "a finite number", *value);
  }
  return parsed;
}

absl::StatusOr<double> ModelParameters::OptionalPositiveDouble(const std::string& key,
                                                               double default_value) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  double parsed = 0;
  if (!absl::SimpleAtod(*value, &parsed) || !std::isfinite(parsed) || !(parsed > 0)) {
    return BadValue(key, "a finite number > 0", *value);
  }
  return parsed;
}

absl::StatusOr<std::string> ModelParameters::OptionalString(
    const std::string& key, const std::string& default_value) const {
  const std::string* value = Find(key);
  return value == nullptr ? default_value : *value;
}

absl::StatusOr<Precision> ModelParameters::OptionalPrecision(const std::string& key,
                                                             Precision default_value) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  absl::StatusOr<Precision> precision = ParsePrecision(*value);
  if (!precision.ok()) return BadValue(key, "\"fp32\" or \"tf32\"", *value);
  return precision;
}

}  // namespace fuseserve
