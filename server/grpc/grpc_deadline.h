#pragma once

// A call's gRPC deadline as an absl::Time (InfiniteFuture when the client set
// none), for either server API's context.

#include <chrono>

#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace fuseserve {

inline absl::Time DeadlineOf(const grpc::ServerContextBase& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  // gRPC reports "no deadline" as a time point centuries away.
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

}  // namespace fuseserve
