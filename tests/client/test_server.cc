#include "tests/client/test_server.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/default_repository.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "tests/e2e/repository_editing.h"
#include "server/models/model_factory.h"
#include "server/repository/model_config_loader.h"
#include "server/repository/safetensors.h"
#include "tests/testing/test_dir.h"

namespace fuseserve::testing {

absl::Status WriteClientTestRepository(const std::string& root) {
  RETURN_IF_ERROR(WriteDefaultRepository(root, RepositorySize::kSmall));
  return CopyModel(root, kGroupNormModel, kSlowModel, [](inference::ModelConfig& config) {
    config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(30000000);
  });
}

absl::StatusOr<std::unique_ptr<TestServer>> StartTestServer(
    const std::string& server_binary, const std::vector<std::string>& extra_args) {
  auto server = std::make_unique<TestServer>();
  RETURN_IF_ERROR(WriteClientTestRepository(server->repository()));
  ASSIGN_OR_RETURN(server->process,
                   ServerProcess::Start(server_binary, server->repository(), extra_args));
  return server;
}

TestServer* SuiteServerTest::server_ = nullptr;

void SuiteServerTest::StartSuiteServer(const std::vector<std::string>& extra_args) {
  auto server = StartTestServer(FUSESERVE_BINARY, extra_args);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = server->release();
}

void SuiteServerTest::TearDownTestSuite() {
  delete server_;
  server_ = nullptr;
}

void SuiteServerTest::SetUp() { ASSERT_NE(server_, nullptr) << "the server did not start"; }

std::vector<std::string> SharedMemoryObjectsOf(pid_t pid) {
  // UniqueSharedMemoryKey: "/fuseserve_<tag>_<pid>_<counter>_<random>".
  const std::string process = absl::StrCat("_", pid, "_");
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "fuseserve_") && absl::StrContains(name, process)) {
      names.push_back(name);
    }
  }
  return names;
}

absl::Status WaitForRegisteredRegions(const std::string& target, int count,
                                      absl::Duration timeout) {
  const std::unique_ptr<client::Client> client = client::Client::Create(target);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const auto status = client->SystemSharedMemoryStatus();
    if (status.ok() && status->regions_size() >= count) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "fewer than ", count, " shared-memory regions registered after ",
          absl::FormatDuration(timeout), status.ok() ? "" : ": " + status.status().ToString()));
    }
    // A poll interval, not a wait for something to happen in time.
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& stdout_path, const std::string& stderr_path) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (stderr_path.empty()) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = -1;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(error)));
  }
  return pid;
}

absl::StatusOr<int> WaitForExit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

absl::StatusOr<std::vector<float>> ReferenceOutput(const std::string& repository,
                                                   const std::string& model, const Shape& shape,
                                                   const std::vector<float>& input) {
  const std::filesystem::path dir = std::filesystem::path(repository) / model;
  ASSIGN_OR_RETURN(const inference::ModelConfig config, LoadModelConfig(dir.string()));
  ASSIGN_OR_RETURN(auto weights, SafetensorsFile::Open((dir / "1" / "model.safetensors").string()));
  ASSIGN_OR_RETURN(auto bound, CreateModel(config, *weights));
  ASSIGN_OR_RETURN(const Shape output_shape, bound->OutputShape(shape));
  std::vector<float> output(NumElements(output_shape));
  ThreadPool pool(1);
  RETURN_IF_ERROR(bound->RunOnCpu(input.data(), shape, output.data(), pool));
  return output;
}

std::vector<float> RandomValues(int64_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = dist(engine);
  return values;
}

double RelativeL2Error(const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size()) return INFINITY;
  double error = 0, norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    error += std::pow(double{got[i]} - expected[i], 2);
    norm += std::pow(double{expected[i]}, 2);
  }
  return std::sqrt(error / norm);
}

}  // namespace fuseserve::testing
