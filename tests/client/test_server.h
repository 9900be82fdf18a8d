#pragma once

// Shared by the client library and CLI tests: a temporary model repository
// (the small default models plus `slow_groupnorm`, a groupnorm whose batcher
// waits 30 s for a batch to fill, so a lone request stays queued until its
// deadline or queue timeout), the real server on ephemeral ports, and the
// in-process CPU reference for a model of that repository.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shape.h"
#include "gtest/gtest.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/test_dir.h"

namespace fuseserve::testing {

inline constexpr char kConvModel[] = "convtranspose_gelu_groupnorm";
inline constexpr char kGemmModel[] = "gemm_bias_hardtanh_mish_groupnorm";
inline constexpr char kGroupNormModel[] = "groupnorm";
inline constexpr char kSlowModel[] = "slow_groupnorm";

// Writes the repository into the existing directory `root`.
absl::Status WriteClientTestRepository(const std::string& root);

// The repository above, in a directory of its own, served by `server_binary`.
// The server stops before the directory is removed (members are destroyed
// last to first).
struct TestServer {
  const std::string& repository() const { return directory.path(); }

  TestDir directory{"fuseserve-client"};
  std::unique_ptr<ServerProcess> process;
};
absl::StatusOr<std::unique_ptr<TestServer>> StartTestServer(
    const std::string& server_binary, const std::vector<std::string>& extra_args = {});

// The flag that lets the server use clients' system shared memory.
inline constexpr char kAllowSharedMemoryFlag[] = "--allow-shared-memory=true";

// A fixture whose test suite shares one TestServer, started by
// SetUpTestSuite: plain here, with other flags in a derived fixture's own
// SetUpTestSuite (StartSuiteServer). A suite runs its tests together, so the
// one pointer serves each suite in turn.
class SuiteServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartSuiteServer({}); }
  static void StartSuiteServer(const std::vector<std::string>& extra_args);
  static void TearDownTestSuite();
  void SetUp() override;  // fails the test when the server did not start

  static TestServer* server_;
};

// The names (without '/') of the objects in /dev/shm that process `pid`
// created with client/shared_memory.h's UniqueSharedMemoryKey.
std::vector<std::string> SharedMemoryObjectsOf(pid_t pid);

// Waits until the server at `target` has at least `count` system
// shared-memory regions registered (polling); DeadlineExceeded after
// `timeout`.
absl::Status WaitForRegisteredRegions(const std::string& target, int count,
                                      absl::Duration timeout = absl::Seconds(60));

// A child process running `argv` (argv[0] is the program's path), its stdout
// in `stdout_path` and its stderr in `stderr_path` (empty: with stdout).
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& stdout_path,
                                   const std::string& stderr_path = "");

// Waits for child `pid` to end; returns its exit code, or 128 + the signal
// that ended it.
absl::StatusOr<int> WaitForExit(pid_t pid);

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
