#pragma once

// GPU instances (SPEC.md §4): each owns a CUDA stream, a cuBLAS handle bound
// to it, device buffers and pinned host staging buffers for its batches, and
// the model's GpuExecutor (device weights). A batch's inputs are gathered
// into a ring of pinned pieces (several threads copying large inputs at
// once, see parallel_gather.h), each piece copied to the device as soon as
// it is in place; the batch is computed and copied back, all asynchronously
// on the instance's stream; the instance's own thread then waits for its
// stream only, so instances on one GPU overlap one another's copies and
// compute. Built from gpu_instance.cc with CUDA, gpu_instance_unavailable.cc
// without (no devices; creating one fails).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/shape.h"
#include "common/thread_pool.h"
#include "server/batching/clock.h"
#include "server/metrics/model_metrics.h"
#include "server/runtime/batch_trace.h"
#include "server/runtime/instance.h"
#include "server/runtime/model.h"

namespace fuseserve {

// Usable CUDA devices (0 without a driver, a device or a CUDA build).
int GpuDeviceCount();

struct GpuDeviceMemory {
  std::string uuid;
  std::string name;
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};
absl::StatusOr<GpuDeviceMemory> QueryGpuMemory(int device);

struct GpuInstanceOptions {
  std::string name;  // for logs, e.g. "gemm/1 gpu0#1"
  int device = 0;
  const Model* model = nullptr;
  Clock* clock = nullptr;
  ModelMetrics* metrics = nullptr;
  // The largest input the batcher can hand over: [max_batch_size] + config
  // dims when batching, else the config dims. Buffers for it are allocated
  // at creation when it has no -1; otherwise, at the first batch of each new
  // largest sample shape, for max_batch_size samples of it.
  Shape max_input_shape;
  // Replay each batch shape's kernels as a CUDA graph (see CudaGraphCache);
  // off runs every batch kernel by kernel.
  bool cuda_graphs = true;
  // Wait for each batch by spinning on its completion event (Triton's
  // optimization.cuda.busy_wait_events) instead of blocking in the driver.
  bool busy_wait_events = false;
  // Receives every batch's phases (input, compute, output), when set.
  BatchTraceSink* trace = nullptr;
  // Its workers copy pieces of large inputs alongside the instance's thread
  // (ParallelGather); may be null (the instance's thread copies alone).
  ThreadPool* copy_pool = nullptr;
};

absl::StatusOr<std::unique_ptr<Instance>> CreateGpuInstance(const GpuInstanceOptions& options);

}  // namespace fuseserve
