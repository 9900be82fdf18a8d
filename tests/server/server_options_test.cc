#include "server/server_options.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

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
  EXPECT_EQ(options->max_request_bytes, 2147483647);
  EXPECT_EQ(options->grpc_address, "0.0.0.0");
  EXPECT_EQ(options->metrics_address, "0.0.0.0");
  EXPECT_FALSE(options->strict_readiness);
  EXPECT_EQ(options->port_file, "");
  EXPECT_FALSE(options->help);
}

TEST(ServerOptionsTest, ParsesEveryFlagInEqualsForm) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--model-repository=/srv/models", "--grpc-port=9001", "--metrics-port=9002",
             "--exit-timeout-secs=5", "--grpc-address=127.0.0.1", "--metrics-address=::1",
             "--strict-readiness=true", "--port-file=/tmp/ports.json",
             "--max-request-bytes=4096"});

  ASSERT_TRUE(options.ok()) << options.status();
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

TEST(ServerOptionsTest, UsageDescribesEveryFlag) {
  const std::string usage = ServerUsage();

  for (const char* flag :
       {"--model-repository", "--grpc-port", "--metrics-port", "--exit-timeout-secs",
        "--grpc-address", "--metrics-address", "--strict-readiness", "--port-file",
        "--max-request-bytes", "--help"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
  EXPECT_THAT(usage, AllOf(HasSubstr("8001"), HasSubstr("8002"), HasSubstr("30")));
}

}  // namespace
}  // namespace fuseserve
