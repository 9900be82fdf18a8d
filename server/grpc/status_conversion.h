#pragma once

// The one place where an absl::Status becomes a grpc::Status (SPEC.md §3).
// Inside the server every error is an absl::Status whose code already says
// what the client should see: NotFound (unknown model), InvalidArgument (bad
// tensor), Unavailable (queue full, not ready, shutting down),
// DeadlineExceeded (expired in the queue), Cancelled, Internal (device).

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace fuseserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace fuseserve
