#pragma once

// A model's GPU path on one device: the family's weights in device memory
// (in the layout its kernels read) and its scratch space. Created once per
// GPU instance at load time by Model::CreateGpuExecutor; used only by that
// instance's thread. No CUDA types appear here so that the runtime compiles
// without CUDA; the instance passes its stream and cuBLAS handle through
// GpuLaunchContext.

#include "absl/status/status.h"
#include "common/shape.h"

namespace fuseserve {

struct GpuLaunchContext {
  void* stream = nullptr;         // cudaStream_t of the instance
  void* cublas_handle = nullptr;  // cublasHandle_t bound to that stream
};

class GpuExecutor {
 public:
  virtual ~GpuExecutor() = default;

  // Enqueues the model on the context's stream: `input` and `output` are
  // device buffers ([input_shape] and the model's OutputShape). Does not
  // synchronise. May grow its own scratch space (rare: only for input
  // shapes larger than any seen before).
  virtual absl::Status Enqueue(const GpuLaunchContext& context, const float* input,
                               const Shape& input_shape, float* output) = 0;

  // Device memory the executor holds (weights and scratch), in bytes.
  virtual int64_t device_bytes() const = 0;
};

}  // namespace fuseserve
