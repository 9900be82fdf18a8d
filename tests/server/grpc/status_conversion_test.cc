#include "server/grpc/status_conversion.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

TEST(StatusConversionTest, OkBecomesGrpcOk) {
  const grpc::Status status = ToGrpcStatus(absl::OkStatus());

  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(status.error_message(), "");
}

// Listed pairwise rather than derived from the numbering, so that a
// conversion that shifted or merged codes fails here.
TEST(StatusConversionTest, EveryCodeMapsToTheSameGrpcCodeWithItsMessage) {
  const std::vector<std::pair<absl::StatusCode, grpc::StatusCode>> codes = {
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& [absl_code, grpc_code] : codes) {
    const absl::Status input(absl_code, "model \"m\": something precise");

    const grpc::Status status = ToGrpcStatus(input);

    EXPECT_EQ(status.error_code(), grpc_code) << input;
    EXPECT_EQ(status.error_message(), "model \"m\": something precise") << input;
    EXPECT_EQ(status.error_details(), "") << input;
  }
}

TEST(StatusConversionTest, KeepsMessageBytesUnchanged) {
  const std::string message = "input \"x\" \xce\xbc 3\n\ttail";

  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(message));

  EXPECT_EQ(status.error_message(), message);
}

}  // namespace
}  // namespace fuseserve
