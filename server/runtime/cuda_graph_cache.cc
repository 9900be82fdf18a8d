#include "server/runtime/cuda_graph_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve {

CudaGraphCache::CudaGraphCache(size_t capacity) : capacity_(capacity) {}

CudaGraphCache::~CudaGraphCache() = default;

absl::Status CudaGraphCache::Capture(cudaStream_t stream, const EnqueueFn& enqueue,
                                     GraphExecPtr* exec) {
  // Thread-local mode: only this thread's unsafe calls (an allocation, a
  // synchronisation) invalidate the capture; other instances' threads keep
  // launching on their own streams meanwhile.
  RETURN_IF_CUDA_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue(stream);
  cudaGraph_t graph = nullptr;
  // Always ended, even after a failed enqueue, to take the stream out of
  // capture mode.
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  const cuda::GraphPtr graph_owner(graph);
  // Errors raised by calls the capture refused are not sticky; clear them so
  // that the plain run that follows does not report them.
  cudaGetLastError();
  absl::Status status = enqueued;
  if (status.ok() && ended != cudaSuccess) {
    status = cuda::CudaStatus(ended, "cudaStreamEndCapture");
  }
  if (status.ok()) {
    cudaGraphExec_t instantiated = nullptr;
    const cudaError_t result = cudaGraphInstantiate(&instantiated, graph, 0);
    if (result == cudaSuccess) {
      exec->reset(instantiated);
    } else {
      cudaGetLastError();
      status = cuda::CudaStatus(result, "cudaGraphInstantiate");
    }
  }
  return status;
}

absl::Status CudaGraphCache::Run(cudaStream_t stream, const Shape& input_shape,
                                 const GraphMemoryLayout& layout, const EnqueueFn& enqueue) {
  if (!(layout == layout_)) {
    entries_.clear();
    layout_ = layout;
  }
  auto found = entries_.find(input_shape);
  if (found == entries_.end()) {
    if (entries_.size() < capacity_) entries_.emplace(input_shape, Entry{});
    ++stats_.plain_runs;
    return enqueue(stream);
  }
  Entry& entry = found->second;
  if (entry.state == State::kSeenOnce) {
    const absl::Status captured = Capture(stream, enqueue, &entry.exec);
    if (captured.ok()) {
      entry.state = State::kCaptured;
      ++stats_.captures;
    } else {
      entry.state = State::kUncapturable;
      ++stats_.failed_captures;
      FS_LOG(WARNING) << "batches of shape " << ShapeToString(input_shape)
                      << " run without a CUDA graph: capture failed: " << captured.message();
    }
  }
  if (entry.state == State::kUncapturable) {
    ++stats_.plain_runs;
    return enqueue(stream);
  }
  RETURN_IF_CUDA_ERROR(cudaGraphLaunch(entry.exec.get(), stream));
  ++stats_.graph_runs;
  return absl::OkStatus();
}

}  // namespace fuseserve
