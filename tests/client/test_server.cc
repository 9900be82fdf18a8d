#include "tests/client/test_server.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/default_repository.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "server/models/model_factory.h"
#include "server/repository/model_config_loader.h"
#include "server/repository/safetensors.h"

namespace fuseserve::testing {

absl::StatusOr<std::string> MakeClientTestRepository() {
  std::string pattern = (std::filesystem::temp_directory_path() / "fuseserve-client-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::filesystem::path root(pattern);
  RETURN_IF_ERROR(WriteDefaultRepository(root.string(), RepositorySize::kSmall));

  const std::filesystem::path slow = root / kSlowModel;
  std::filesystem::create_directories(slow / "1");
  std::filesystem::copy_file(root / kGroupNormModel / "1" / "model.safetensors",
                             slow / "1" / "model.safetensors");
  std::ifstream in(root / kGroupNormModel / "config.pbtxt");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string slow_config = absl::StrReplaceAll(
      config, {{absl::StrCat("name: \"", kGroupNormModel, "\""),
                absl::StrCat("name: \"", kSlowModel, "\"")},
               {"max_queue_delay_microseconds: 500", "max_queue_delay_microseconds: 30000000"}});
  if (slow_config.find("30000000") == std::string::npos ||
      slow_config.find(kSlowModel) == std::string::npos) {
    return absl::InternalError(absl::StrCat("the groupnorm config changed shape; cannot derive ",
                                            kSlowModel, ":\n", config));
  }
  std::ofstream(slow / "config.pbtxt") << slow_config;
  return root.string();
}

TestServer::~TestServer() {
  process.reset();
  if (!repository.empty()) std::filesystem::remove_all(repository);
}

absl::StatusOr<std::unique_ptr<TestServer>> StartTestServer(const std::string& server_binary) {
  auto server = std::make_unique<TestServer>();
  ASSIGN_OR_RETURN(server->repository, MakeClientTestRepository());
  ASSIGN_OR_RETURN(server->process, ServerProcess::Start(server_binary, server->repository));
  return server;
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
