#pragma once

// Shared by the client library and CLI tests: a temporary model repository
// (the small default models plus `slow_groupnorm`, a groupnorm whose batcher
// waits 30 s for a batch to fill, so a lone request stays queued until its
// deadline or queue timeout), the real server on ephemeral ports, and the
// in-process CPU reference for a model of that repository.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/shape.h"
#include "tests/e2e/server_process.h"

namespace fuseserve::testing {

inline constexpr char kConvModel[] = "convtranspose_gelu_groupnorm";
inline constexpr char kGemmModel[] = "gemm_bias_hardtanh_mish_groupnorm";
inline constexpr char kGroupNormModel[] = "groupnorm";
inline constexpr char kSlowModel[] = "slow_groupnorm";

// Writes the repository into a fresh temporary directory; returns its path.
absl::StatusOr<std::string> MakeClientTestRepository();

// The repository above served by `server_binary`.
struct TestServer {
  std::string repository;
  std::unique_ptr<ServerProcess> process;
  ~TestServer();  // stops the server and removes the repository
};
absl::StatusOr<std::unique_ptr<TestServer>> StartTestServer(const std::string& server_binary);

// `model`'s output for `input` computed in this process by the CPU backend
// from the repository's weights (the server must agree within float32
// rounding).
absl::StatusOr<std::vector<float>> ReferenceOutput(const std::string& repository,
                                                   const std::string& model, const Shape& shape,
                                                   const std::vector<float>& input);

// N(0, 1) values from a fixed seed.
std::vector<float> RandomValues(int64_t count, uint32_t seed);

// ||got - expected|| / ||expected||.
double RelativeL2Error(const std::vector<float>& got, const std::vector<float>& expected);

}  // namespace fuseserve::testing
