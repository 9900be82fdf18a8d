#pragma once

// CUDA errors as absl::Status. Every CUDA runtime call and every launch is
// checked; an error becomes a Status naming the call, never an abort.

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fuseserve::cuda {

inline absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

}  // namespace fuseserve::cuda

// RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(...)) returns an Internal status naming
// the call from the enclosing function when it fails.
#define RETURN_IF_CUDA_ERROR(call)                                                \
  do {                                                                            \
    ::absl::Status fuseserve_cuda_status_ = ::fuseserve::cuda::CudaStatus((call), #call); \
    if (!fuseserve_cuda_status_.ok()) return fuseserve_cuda_status_;              \
  } while (false)
