#include "server/grpc/status_conversion.h"

#include <string>

namespace fuseserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numbering (both follow
  // google.rpc.Code), so the code carries over unchanged.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace fuseserve
