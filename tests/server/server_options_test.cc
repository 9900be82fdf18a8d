#include "server/server_options.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Parses `args` as the arguments after the program name.
absl::StatusOr<ServerOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "fuseserve");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return ParseServerOptions(static_cast<int>(argv.size()), argv.data());
}

// Asserts that parsing fails with InvalidArgument and returns the message.
std::string ParseError(std::vector<std::string> args) {
  absl::StatusOr<ServerOptions> options = Parse(std::move(args));
  EXPECT_FALSE(options.ok()) << "parsed arguments that should have been rejected";
  if (options.ok()) return "";
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << options.status();
  return std::string(options.status().message());
}

TEST(ServerOptionsTest, DefaultsFollowTheSpec) {
  absl::StatusOr<ServerOptions> options = Parse({"--model-repository=/models"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->model_repository, "/models");
  EXPECT_EQ(options->grpc_port, 8001);
  EXPECT_EQ(options->metrics_port, 8002);
  EXPECT_EQ(options->exit_timeout_secs, 30);
  EXPECT_EQ(options->malloc_trim_interval_secs, 10);
  EXPECT_EQ(options->max_request_bytes, 2147483647);
  EXPECT_FALSE(options->response_threads.has_value());
  EXPECT_EQ(ResponseThreads(*options), 0);
  EXPECT_EQ(options->grpc_infer_threads, 6);
  EXPECT_EQ(options->grpc_address, "0.0.0.0");
  EXPECT_EQ(options->metrics_address, "0.0.0.0");
  EXPECT_FALSE(options->strict_readiness);
  EXPECT_FALSE(options->allow_shared_memory);
  EXPECT_EQ(options->port_file, "");
  EXPECT_EQ(options->batch_trace_file, "");
  EXPECT_FALSE(options->help);
}

TEST(ServerOptionsTest, ParsesEveryFlagInEqualsForm) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository=/srv/models", "--grpc-port=9001", "--metrics-port=9002",
             "--exit-timeout-secs=5", "--grpc-address=127.0.0.1", "--metrics-address=::1",
             "--strict-readiness=true", "--port-file=/tmp/ports.json", "--max-request-bytes=4096",
             "--allow-shared-memory=true", "--batch-trace-file=/tmp/trace.json",
             "--malloc-trim-interval-secs=0", "--response-threads=3", "--grpc-infer-threads=0"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->malloc_trim_interval_secs, 0);
  EXPECT_EQ(options->response_threads, 3);
  EXPECT_EQ(options->grpc_infer_threads, 0);
  EXPECT_TRUE(options->allow_shared_memory);
  EXPECT_EQ(options->batch_trace_file, "/tmp/trace.json");
  EXPECT_EQ(options->max_request_bytes, 4096);
  EXPECT_EQ(options->model_repository, "/srv/models");
  EXPECT_EQ(options->grpc_port, 9001);
  EXPECT_EQ(options->metrics_port, 9002);
  EXPECT_EQ(options->exit_timeout_secs, 5);
  EXPECT_EQ(options->grpc_address, "127.0.0.1");
  EXPECT_EQ(options->metrics_address, "::1");
  EXPECT_TRUE(options->strict_readiness);
  EXPECT_EQ(options->port_file, "/tmp/ports.json");
}

TEST(ServerOptionsTest, ParsesEveryFlagInSeparateValueForm) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository", "/srv/models", "--grpc-port", "9001", "--metrics-port", "9002",
             "--exit-timeout-secs", "0", "--strict-readiness", "1"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->model_repository, "/srv/models");
  EXPECT_EQ(options->grpc_port, 9001);
  EXPECT_EQ(options->metrics_port, 9002);
  EXPECT_EQ(options->exit_timeout_secs, 0);
  EXPECT_TRUE(options->strict_readiness);
}

TEST(ServerOptionsTest, KeepsEqualsSignsInsideTheValue) {
  absl::StatusOr<ServerOptions> options = Parse({"--model-repository=/data/a=b"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->model_repository, "/data/a=b");
}

TEST(ServerOptionsTest, LaterFlagWins) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository=/a", "--grpc-port=1", "--grpc-port=2"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->grpc_port, 2);
}

TEST(ServerOptionsTest, AcceptsPortZeroAndHighestPort) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository=/m", "--grpc-port=0", "--metrics-port=65535"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->grpc_port, 0);
  EXPECT_EQ(options->metrics_port, 65535);
}

TEST(ServerOptionsTest, RejectsBadPorts) {
  for (const char* value : {"65536", "-1", "http", "", "80x", "99999999999"}) {
    EXPECT_THAT(ParseError({"--model-repository=/m", std::string("--grpc-port=") + value}),
                AllOf(HasSubstr("--grpc-port"), HasSubstr(std::string("\"") + value + "\"")))
        << value;
    EXPECT_THAT(ParseError({"--model-repository=/m", std::string("--metrics-port=") + value}),
                HasSubstr("--metrics-port"))
        << value;
  }
}

TEST(ServerOptionsTest, RejectsBadExitTimeout) {
  for (const char* value : {"-1", "soon", "1.5"}) {
    EXPECT_THAT(ParseError({"--model-repository=/m", std::string("--exit-timeout-secs=") + value}),
                HasSubstr("--exit-timeout-secs"))
        << value;
  }
}

TEST(ServerOptionsTest, RejectsBadMallocTrimInterval) {
  for (const char* value : {"-1", "often", "0.5", ""}) {
    EXPECT_THAT(
        ParseError({"--model-repository=/m", std::string("--malloc-trim-interval-secs=") + value}),
        HasSubstr("--malloc-trim-interval-secs"))
        << value;
  }
}

// Answer threads only hand answers on to the completion queues' threads, so
// by default there are none with them, and 4 on the callback API; a given
// --response-threads holds either way.
TEST(ServerOptionsTest, ResponseThreadsDefaultFollowsHowModelInferIsReceived) {
  absl::StatusOr<ServerOptions> callback_api =
      Parse({"--model-repository=/m", "--grpc-infer-threads=0"});
  ASSERT_TRUE(callback_api.ok()) << callback_api.status();
  EXPECT_EQ(ResponseThreads(*callback_api), kCallbackApiResponseThreads);

  absl::StatusOr<ServerOptions> queues_with_threads =
      Parse({"--model-repository=/m", "--grpc-infer-threads=2", "--response-threads=3"});
  ASSERT_TRUE(queues_with_threads.ok()) << queues_with_threads.status();
  EXPECT_EQ(ResponseThreads(*queues_with_threads), 3);

  absl::StatusOr<ServerOptions> callback_api_without_threads =
      Parse({"--model-repository=/m", "--grpc-infer-threads=0", "--response-threads=0"});
  ASSERT_TRUE(callback_api_without_threads.ok()) << callback_api_without_threads.status();
  EXPECT_EQ(ResponseThreads(*callback_api_without_threads), 0);
}

TEST(ServerOptionsTest, RejectsResponseThreadsOutsideZeroToSixtyFour) {
  for (const char* value : {"-1", "65", "two", "1.5", ""}) {
    EXPECT_THAT(ParseError({"--model-repository=/m", std::string("--response-threads=") + value}),
                HasSubstr("--response-threads must be an integer in [0, 64]"))
        << value;
  }
}

TEST(ServerOptionsTest, RejectsGrpcInferThreadsOutsideZeroToSixtyFour) {
  for (const char* value : {"-1", "65", "four", "2.5", ""}) {
    EXPECT_THAT(ParseError({"--model-repository=/m", std::string("--grpc-infer-threads=") + value}),
                HasSubstr("--grpc-infer-threads must be an integer in [0, 64]"))
        << value;
  }
}

TEST(ServerOptionsTest, RejectsMaxRequestBytesOutsideOneToInt32Max) {
  for (const char* value : {"0", "-1", "2147483648", "1e6", "lots", ""}) {
    absl::StatusOr<ServerOptions> options =
        Parse({"--model-repository=/m", absl::StrCat("--max-request-bytes=", value)});
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(options.status().message(), HasSubstr("--max-request-bytes")) << value;
  }
  EXPECT_TRUE(Parse({"--model-repository=/m", "--max-request-bytes=1"}).ok());
  EXPECT_TRUE(Parse({"--model-repository=/m", "--max-request-bytes=2147483647"}).ok());
}

TEST(ServerOptionsTest, RejectsBadBoolean) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "--strict-readiness=yes"}),
              AllOf(HasSubstr("--strict-readiness"), HasSubstr("\"yes\"")));
}

TEST(ServerOptionsTest, ParsesAllowSharedMemoryBoolean) {
  for (const auto& [value, expected] : std::vector<std::pair<std::string, bool>>{
           {"true", true}, {"1", true}, {"false", false}, {"0", false}}) {
    absl::StatusOr<ServerOptions> options =
        Parse({"--model-repository=/m", "--allow-shared-memory=" + value});
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->allow_shared_memory, expected) << value;
  }
  EXPECT_THAT(ParseError({"--model-repository=/m", "--allow-shared-memory=on"}),
              AllOf(HasSubstr("--allow-shared-memory"), HasSubstr("\"on\"")));
}

TEST(ServerOptionsTest, RejectsUnknownFlagNamingIt) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "--http-port=8000"}), HasSubstr("--http-port"));
  EXPECT_THAT(ParseError({"--model-repository=/m", "--model_repository=/n"}),
              HasSubstr("--model_repository"));
}

TEST(ServerOptionsTest, RejectsPositionalArgument) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "extra"}), HasSubstr("\"extra\""));
}

TEST(ServerOptionsTest, RejectsFlagWithoutValueAtTheEnd) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "--grpc-port"}),
              AllOf(HasSubstr("--grpc-port"), HasSubstr("value")));
}

TEST(ServerOptionsTest, RequiresModelRepository) {
  EXPECT_THAT(ParseError({}), HasSubstr("--model-repository"));
  EXPECT_THAT(ParseError({"--grpc-port=9001"}), HasSubstr("--model-repository"));
  EXPECT_THAT(ParseError({"--model-repository="}), HasSubstr("--model-repository"));
}

TEST(ServerOptionsTest, HelpNeedsNoRepository) {
  for (const char* flag : {"--help", "-h"}) {
    absl::StatusOr<ServerOptions> options = Parse({flag});
    ASSERT_TRUE(options.ok()) << flag << ": " << options.status();
    EXPECT_TRUE(options->help) << flag;
  }
}

TEST(ServerOptionsTest, TlsIsOffByDefault) {
  absl::StatusOr<ServerOptions> options = Parse({"--model-repository=/m"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->grpc_ssl.enabled());
  absl::StatusOr<std::optional<GrpcTlsCredentials>> tls = LoadGrpcTls(options->grpc_ssl);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_FALSE(tls->has_value());
}

TEST(ServerOptionsTest, ParsesTritonTlsFlags) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository=/m", "--grpc-use-ssl=true", "--grpc-server-cert=/tls/cert.pem",
             "--grpc-server-key", "/tls/key.pem", "--grpc-root-cert=/tls/ca.pem"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->grpc_ssl.use_ssl);
  EXPECT_FALSE(options->grpc_ssl.use_mutual_auth);
  EXPECT_EQ(options->grpc_ssl.server_cert, "/tls/cert.pem");
  EXPECT_EQ(options->grpc_ssl.server_key, "/tls/key.pem");
  EXPECT_EQ(options->grpc_ssl.root_cert, "/tls/ca.pem");
}

TEST(ServerOptionsTest, MutualTlsImpliesTls) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository=/m", "--grpc-use-ssl-mutual=1", "--grpc-server-cert=/c",
             "--grpc-server-key=/k", "--grpc-root-cert=/ca"});

  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->grpc_ssl.use_ssl);
  EXPECT_TRUE(options->grpc_ssl.use_mutual_auth);
  EXPECT_TRUE(options->grpc_ssl.enabled());
}

TEST(ServerOptionsTest, TlsNeedsCertificateAndKey) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "--grpc-use-ssl=true", "--grpc-server-key=/k"}),
              AllOf(HasSubstr("--grpc-use-ssl"), HasSubstr("--grpc-server-cert")));
  EXPECT_THAT(ParseError({"--model-repository=/m", "--grpc-use-ssl=true", "--grpc-server-cert=/c"}),
              HasSubstr("needs --grpc-server-key"));
  EXPECT_THAT(ParseError({"--model-repository=/m", "--grpc-use-ssl-mutual=true",
                          "--grpc-server-cert=/c", "--grpc-root-cert=/ca"}),
              AllOf(HasSubstr("--grpc-use-ssl-mutual"), HasSubstr("--grpc-server-key")));
}

TEST(ServerOptionsTest, MutualTlsNeedsRootCertificate) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "--grpc-use-ssl-mutual=true",
                          "--grpc-server-cert=/c", "--grpc-server-key=/k"}),
              HasSubstr("--grpc-use-ssl-mutual needs --grpc-root-cert"));
}

TEST(ServerOptionsTest, RejectsBadTlsBooleans) {
  EXPECT_THAT(ParseError({"--model-repository=/m", "--grpc-use-ssl=on"}),
              AllOf(HasSubstr("--grpc-use-ssl"), HasSubstr("\"on\"")));
  // A bare switch would swallow the next flag as its value; that is refused.
  EXPECT_THAT(
      ParseError({"--model-repository=/m", "--grpc-use-ssl-mutual", "--grpc-server-cert=/c"}),
      HasSubstr("--grpc-use-ssl-mutual must be true or false"));
}

class LoadGrpcTlsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& contents) {
    return directory_.WriteFile(name, contents);
  }

  // TLS options naming PEM files written here (the PEM bodies are markers,
  // not real keys: LoadGrpcTls reads, gRPC parses).
  GrpcSslOptions WrittenOptions() {
    GrpcSslOptions ssl;
    ssl.use_ssl = true;
    ssl.server_cert = Write("cert.pem", "-----BEGIN CERTIFICATE-----\nCERT\n");
    ssl.server_key = Write("key.pem", "-----BEGIN PRIVATE KEY-----\nSECRETKEY\n");
    ssl.root_cert = Write("ca.pem", "-----BEGIN CERTIFICATE-----\nCA\n");
    return ssl;
  }

  TestDir directory_{"load-grpc-tls"};
};

TEST_F(LoadGrpcTlsTest, ReadsTheFilesAndLeavesTheRootOutWithoutMutualTls) {
  absl::StatusOr<std::optional<GrpcTlsCredentials>> tls = LoadGrpcTls(WrittenOptions());

  ASSERT_TRUE(tls.ok()) << tls.status();
  ASSERT_TRUE(tls->has_value());
  EXPECT_THAT((*tls)->server_cert_pem, HasSubstr("CERT"));
  EXPECT_THAT((*tls)->server_key_pem, HasSubstr("SECRETKEY"));
  EXPECT_FALSE((*tls)->require_client_certificate);
  EXPECT_EQ((*tls)->client_ca_pem, "");
}

TEST_F(LoadGrpcTlsTest, MutualTlsRequiresClientCertificatesVerifiedByTheRoot) {
  GrpcSslOptions ssl = WrittenOptions();
  ssl.use_ssl = false;
  ssl.use_mutual_auth = true;
  absl::StatusOr<std::optional<GrpcTlsCredentials>> tls = LoadGrpcTls(ssl);

  ASSERT_TRUE(tls.ok()) << tls.status();
  ASSERT_TRUE(tls->has_value());
  EXPECT_TRUE((*tls)->require_client_certificate);
  EXPECT_THAT((*tls)->client_ca_pem, HasSubstr("CA"));
}

TEST_F(LoadGrpcTlsTest, NamesTheFlagAndPathOfAMissingFile) {
  for (const char* flag : {"grpc-server-cert", "grpc-server-key", "grpc-root-cert"}) {
    GrpcSslOptions ssl = WrittenOptions();
    const std::string missing = directory_.Path("missing.pem");
    if (std::string(flag) == "grpc-server-cert") ssl.server_cert = missing;
    if (std::string(flag) == "grpc-server-key") ssl.server_key = missing;
    if (std::string(flag) == "grpc-root-cert") ssl.root_cert = missing;
    const absl::Status status = LoadGrpcTls(ssl).status();

    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_THAT(std::string(status.message()),
                AllOf(HasSubstr(absl::StrCat("--", flag, ": cannot open ", missing)),
                      HasSubstr("No such file")))
        << flag;
  }
}

TEST_F(LoadGrpcTlsTest, RejectsAFileThatIsNotPemWithoutQuotingIt) {
  GrpcSslOptions ssl = WrittenOptions();
  ssl.server_key = Write("key.der", "SECRETKEY in some other format");
  const absl::Status status = LoadGrpcTls(ssl).status();

  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("--grpc-server-key"), HasSubstr(ssl.server_key),
                    HasSubstr("not a PEM file")));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("SECRETKEY")));
}

TEST_F(LoadGrpcTlsTest, RejectsADirectory) {
  GrpcSslOptions ssl = WrittenOptions();
  ssl.server_cert = directory_.path();
  const absl::Status status = LoadGrpcTls(ssl).status();

  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--grpc-server-cert: " + directory_.path() + " is not a file"));
}

TEST(ServerOptionsTest, UsageDescribesEveryFlag) {
  const std::string usage = ServerUsage();

  for (const char* flag :
       {"--model-repository", "--grpc-port", "--metrics-port", "--exit-timeout-secs",
        "--grpc-address", "--metrics-address", "--strict-readiness", "--port-file",
        "--max-request-bytes", "--grpc-use-ssl", "--grpc-use-ssl-mutual", "--grpc-server-cert",
        "--grpc-server-key", "--grpc-root-cert", "--allow-shared-memory", "--batch-trace-file",
        "--help"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
  EXPECT_THAT(usage, AllOf(HasSubstr("8001"), HasSubstr("8002"), HasSubstr("30")));
}

}  // namespace
}  // namespace fuseserve
