// Repository confinement, end to end: models whose files lie outside the
// repository through symbolic links are not loaded, and no model name or
// version in a request (gRPC or HTTP) reaches outside the repository. The
// outside models are complete and valid, so if either guard failed they
// would be served and the requests below would succeed.


#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/client.h"
#include "client/default_repository.h"
#include "common/shape.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/e2e/security/security_testing.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

namespace fs = std::filesystem;

using client::Client;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ServerBinary;
using testing::ServerProcess;
using ::testing::UnorderedElementsAre;

// Copies the groupnorm model of `source_repository` to `model_dir`, renamed
// to the directory's name (config.pbtxt names its model).
void CopyGroupNormAs(const fs::path& source_repository, const fs::path& model_dir) {
  fs::create_directories(model_dir);
  fs::copy(source_repository / "groupnorm", model_dir, fs::copy_options::recursive);
  std::ifstream in(model_dir / "config.pbtxt");
  const std::string config((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(model_dir / "config.pbtxt", std::ios::trunc) << absl::StrReplaceAll(
      config, {{"name: \"groupnorm\"", "name: \"" + model_dir.filename().string() + "\""}});
}

// The code a model-control RPC (repository load or unload) answers for
// `model_name` in the repository "../outside".
template <typename Request, typename Response>
grpc::StatusCode ModelControlCode(grpc::Status (inference::GRPCInferenceService::Stub::*rpc)(
                                      grpc::ClientContext*, const Request&, Response*),
                                  inference::GRPCInferenceService::Stub& stub,
                                  const std::string& model_name) {
  grpc::ClientContext context;
  Request request;
  request.set_repository_name("../outside");
  request.set_model_name(model_name);
  Response response;
  return (stub.*rpc)(&context, request, &response).error_code();
}

class RepositoryConfinementE2eTest : public ::testing::Test {
 protected:
  // <temp>/repo: the small default models, plus
  //   escape -> <temp>/outside/escape     (the model directory links out)
  //   leaky/1 -> <temp>/outside/leaky/1   (a version directory links out)
  // <temp>/outside: the models "escape" and "leaky", complete and valid.
  static void SetUpTestSuite() {
    directory_ = new TestDir("fuseserve-confinement");
    const fs::path repo = Root() / "repo", outside = Root() / "outside";
    fs::create_directories(repo);
    ASSERT_TRUE(WriteDefaultRepository(repo.string(), RepositorySize::kSmall).ok());
    CopyGroupNormAs(repo, outside / "escape");
    CopyGroupNormAs(repo, outside / "leaky");
    fs::create_directory_symlink(outside / "escape", repo / "escape");
    fs::create_directories(repo / "leaky");
    fs::copy_file(outside / "leaky" / "config.pbtxt", repo / "leaky" / "config.pbtxt");
    fs::create_directory_symlink(outside / "leaky" / "1", repo / "leaky" / "1");

    auto server = ServerProcess::Start(ServerBinary(), repo.string());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }

  static void TearDownTestSuite() {
    delete server_;
    delete directory_;  // and the directory
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = Client::Create(server_->grpc_target());
  }

  // Model names that would reach outside the repository if they were ever
  // joined to its path, or that name the models refused at load.
  static std::vector<std::string> EscapingNames() {
    const std::string outside = (Root() / "outside" / "escape").string();
    return {"escape",
            "leaky",
            "../outside/escape",
            "..%2foutside%2fescape",
            "..\\outside\\escape",
            outside,
            "/" + outside,
            "groupnorm/../escape",
            "./groupnorm",
            "groupnorm/",
            "groupnorm/1",
            std::string("groupnorm\0/../escape", 20),
            std::string("groupnorm\0", 10),
            ".",
            ".."};
  }

  static ServerProcess* server_;
  static fs::path Root() { return directory_->path(); }

  static TestDir* directory_;
  std::unique_ptr<Client> client_;
};

ServerProcess* RepositoryConfinementE2eTest::server_ = nullptr;
TestDir* RepositoryConfinementE2eTest::directory_ = nullptr;

// NOT_FOUND or INVALID_ARGUMENT: refused as a name, never served.
MATCHER(IsRefusedName, "") {
  return arg == absl::StatusCode::kNotFound || arg == absl::StatusCode::kInvalidArgument;
}

TEST_F(RepositoryConfinementE2eTest, LoadsOnlyTheModelsInsideTheRepository) {
  const auto index = client_->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  std::vector<std::string> names;
  for (const auto& model : index->models()) names.push_back(model.name());
  EXPECT_THAT(names, UnorderedElementsAre("convtranspose_gelu_groupnorm",
                                          "gemm_bias_hardtanh_mish_groupnorm", "groupnorm"));

  const std::string log = server_->Log();
  EXPECT_THAT(
      log, HasSubstr("skipping " + (Root() / "repo" / "escape").string() + ": symbolic link to"));
  EXPECT_THAT(log,
              HasSubstr("skipping model " + (Root() / "repo" / "leaky").string() + ": " +
                        (Root() / "repo" / "leaky" / "1").string() + " is a symbolic link to"));
  EXPECT_THAT(log, Not(HasSubstr("loaded model escape")));
  EXPECT_THAT(log, Not(HasSubstr("loaded model leaky")));
}

TEST_F(RepositoryConfinementE2eTest, RefusesEscapingModelNamesInEveryRpc) {
  const Shape shape = {1, 8, 2, 2};
  const client::Tensor input{"input", shape, std::vector<float>(NumElements(shape), 1.0f)};
  for (const std::string& name : EscapingNames()) {
    SCOPED_TRACE(absl::StrCat("model name \"", absl::CEscape(name), "\""));
    EXPECT_THAT(client_->ModelMetadata(name).status().code(), IsRefusedName());
    EXPECT_THAT(client_->ModelConfig(name).status().code(), IsRefusedName());
    EXPECT_THAT(client_->ModelStatistics(name).status().code(), IsRefusedName());
    EXPECT_THAT(client_->Infer(name, {input}).status().code(), IsRefusedName());
    const absl::StatusOr<bool> ready = client_->ModelReady(name);
    if (ready.ok()) {
      EXPECT_FALSE(*ready);
    } else {
      EXPECT_THAT(ready.status().code(), IsRefusedName());
    }
  }
}

TEST_F(RepositoryConfinementE2eTest, RepositoryLoadAndUnloadLoadNothingFromOutside) {
  // fuseserve has no model control (UNIMPLEMENTED); if it gains it, these
  // names must still be refused.
  using Stub = inference::GRPCInferenceService::Stub;
  for (const std::string& name : EscapingNames()) {
    SCOPED_TRACE(absl::StrCat("model name \"", absl::CEscape(name), "\""));
    EXPECT_THAT(ModelControlCode(&Stub::RepositoryModelLoad, client_->stub(), name),
                AnyOf(grpc::StatusCode::UNIMPLEMENTED, grpc::StatusCode::NOT_FOUND,
                      grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_THAT(ModelControlCode(&Stub::RepositoryModelUnload, client_->stub(), name),
                AnyOf(grpc::StatusCode::UNIMPLEMENTED, grpc::StatusCode::NOT_FOUND,
                      grpc::StatusCode::INVALID_ARGUMENT));
  }
  const auto index = client_->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->models_size(), 3);
}

TEST_F(RepositoryConfinementE2eTest, RefusesEscapingVersions) {
  const Shape shape = {1, 8, 2, 2};
  const client::Tensor input{"input", shape, std::vector<float>(NumElements(shape), 1.0f)};
  for (const std::string version :
       {"../1", "1/../1", "/1", "..%2f1", "%2e%2e", "..", "1/", "1\\..", "0", "-1"}) {
    SCOPED_TRACE(absl::StrCat("version \"", version, "\""));
    EXPECT_THAT(client_->ModelMetadata("groupnorm", version).status().code(), IsRefusedName());
    EXPECT_THAT(client_->ModelConfig("groupnorm", version).status().code(), IsRefusedName());
    client::InferOptions options;
    options.model_version = version;
    EXPECT_THAT(client_->Infer("groupnorm", {input}, options).status().code(), IsRefusedName());
  }
}

TEST_F(RepositoryConfinementE2eTest, HttpReadinessRefusesEscapingPaths) {
  httplib::Client http("127.0.0.1", server_->metrics_port());
  for (const std::string path :
       {"/v2/models/escape/ready", "/v2/models/leaky/ready", "/v2/models/..%2Fescape/ready",
        "/v2/models/..%2F..%2Foutside%2Fescape/ready", "/v2/models/../escape/ready",
        "/v2/models/%2Fetc%2Fpasswd/ready", "/v2/models/groupnorm/versions/..%2F1/ready",
        "/v2/models/groupnorm%00/ready"}) {
    SCOPED_TRACE(path);
    const auto response = http.Get(path);
    ASSERT_TRUE(response) << httplib::to_string(response.error());
    EXPECT_THAT(response->status, AnyOf(400, 404));
  }
  const auto good = http.Get("/v2/models/groupnorm/ready");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
}

}  // namespace
}  // namespace fuseserve
