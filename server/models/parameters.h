#pragma once

// Typed, checked access to a ModelConfig's `parameters` map (Triton's
// `parameters { key: "stride" value: { string_value: "2" } }` form). Every
// error names the key and quotes the offending value, e.g.
//   parameter "stride" must be a positive integer, got "0"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "server/runtime/model.h"

namespace fuseserve {

class ModelParameters {
 public:
  explicit ModelParameters(const inference::ModelConfig& config);

  // InvalidArgument naming the first key (in key order) that is not in
  // `known`, so a misspelt optional key ("strides") is not silently replaced
  // by its default.
  absl::Status CheckKnownKeys(const std::string& family,
                              const std::vector<std::string>& known) const;

  // An integer in [min_value, 2^31 - 1]. "positive integer" / "non-negative
  // integer" in messages for min_value 1 / 0. Required: InvalidArgument when
  // absent.
  absl::StatusOr<int64_t> RequiredInt(const std::string& key, int64_t min_value) const;
  absl::StatusOr<int64_t> OptionalInt(const std::string& key, int64_t min_value,
                                      int64_t default_value) const;

  // A finite number.
  absl::StatusOr<double> OptionalDouble(const std::string& key, double default_value) const;
  // A finite number > 0.
  absl::StatusOr<double> OptionalPositiveDouble(const std::string& key, double default_value) const;

  absl::StatusOr<std::string> OptionalString(const std::string& key,
                                             const std::string& default_value) const;

  // "fp32" or "tf32" (SPEC.md §1.4).
  absl::StatusOr<Precision> OptionalPrecision(const std::string& key,
                                              Precision default_value) const;

 private:
  // The value of `key`, or null when absent.
  const std::string* Find(const std::string& key) const;

  std::map<std::string, std::string> values_;
};

}  // namespace fuseserve
