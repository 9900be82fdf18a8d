#pragma once

// CUDA graphs for a GPU instance's batches (SPEC.md §4, issue 6 item 2): the
// kernels a model enqueues for one batch shape are captured once into a graph
// and replayed for every later batch of that shape, so a batch costs one
// launch instead of one per kernel (and per cuBLAS call). Work that cannot be
// captured (an allocation or a synchronisation inside the model's enqueue, a
// library that refuses capture) runs as plain launches, and is not tried
// again for that shape.
//
// A graph bakes in every pointer and size its kernels were launched with. The
// cache therefore keys graphs by input shape and drops them all whenever the
// memory they read or write may have moved: the instance's buffers or the
// executor's own device memory (weights, scratch). Used by one instance's
// thread only (not thread-safe).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "common/shape.h"
#include "kernels/cuda/resources.h"

namespace fuseserve {

// Where a batch's captured kernels read and write. Graphs captured under one
// layout are invalid under any other.
struct GraphMemoryLayout {
  const void* input = nullptr;
  void* output = nullptr;
  // The executor's device memory in bytes: it reallocates its scratch only by
  // growing, so a change of size is a change of address.
  int64_t executor_bytes = 0;

  bool operator==(const GraphMemoryLayout& other) const {
    return input == other.input && output == other.output &&
           executor_bytes == other.executor_bytes;
  }
};

struct CudaGraphStats {
  int64_t plain_runs = 0;  // batches launched kernel by kernel
  int64_t captures = 0;    // graphs captured and instantiated
  int64_t graph_runs = 0;  // batches launched as a graph (the capturing one included)
  int64_t failed_captures = 0;
};

class CudaGraphCache {
 public:
  // Enqueues one batch's kernels on the stream it is given.
  using EnqueueFn = std::function<absl::Status(cudaStream_t)>;

  // At most `capacity` graphs are kept (one per input shape); shapes beyond
  // that run plainly. capacity 0 disables graphs.
  explicit CudaGraphCache(size_t capacity);
  ~CudaGraphCache();
  CudaGraphCache(const CudaGraphCache&) = delete;
  CudaGraphCache& operator=(const CudaGraphCache&) = delete;

  // Runs `enqueue` for a batch of `input_shape` on `stream`. The first batch
  // of a shape runs plainly (so that lazily sized scratch space settles
  // before anything is captured); the second is captured and launched as a
  // graph; later ones replay it. Does not synchronise. An error of `enqueue`
  // itself, or of a launch, is returned as is.
  absl::Status Run(cudaStream_t stream, const Shape& input_shape, const GraphMemoryLayout& layout,
                   const EnqueueFn& enqueue);

  const CudaGraphStats& stats() const { return stats_; }

 private:
  using GraphExecPtr = cuda::GraphExecPtr;

  enum class State { kSeenOnce, kCaptured, kUncapturable };
  struct Entry {
    State state = State::kSeenOnce;
    GraphExecPtr exec;
  };

  // Captures `enqueue` into an instantiated graph without running it. On
  // failure `stream` is left out of capture mode with no CUDA error pending.
  absl::Status Capture(cudaStream_t stream, const EnqueueFn& enqueue, GraphExecPtr* exec);

  const size_t capacity_;
  GraphMemoryLayout layout_;
  std::map<Shape, Entry> entries_;
  CudaGraphStats stats_;
};

}  // namespace fuseserve
