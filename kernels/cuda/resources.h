#pragma once

// RAII owners of CUDA resources: device memory, pinned host memory, streams,
// events, and captured graphs and their executables. Each is created through a factory that returns a Status (no
// throwing constructors), is move-only, and frees its resource on
// destruction. Release errors at destruction cannot be reported and are
// ignored (they only occur after a sticky device error, which the instance
// has already reported).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {

// Memory from one CUDA allocator (`AllocateFn`/`ReleaseFn`), owned.
template <cudaError_t (*AllocateFn)(void**, size_t), cudaError_t (*ReleaseFn)(void*)>
class OwnedMemory {
 public:
  OwnedMemory() = default;
  static absl::StatusOr<OwnedMemory> Allocate(size_t bytes) {
    OwnedMemory memory;
    if (bytes > 0) RETURN_IF_CUDA_ERROR(AllocateFn(&memory.data_, bytes));
    memory.bytes_ = bytes;
    return memory;
  }
  OwnedMemory(OwnedMemory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  OwnedMemory& operator=(OwnedMemory&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~OwnedMemory() {
    if (data_ != nullptr) ReleaseFn(data_);
  }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

inline cudaError_t DeviceAllocate(void** data, size_t bytes) { return cudaMalloc(data, bytes); }
inline cudaError_t PinnedAllocate(void** data, size_t bytes) {
  return cudaMallocHost(data, bytes);
}

// `bytes` of device memory on the current device.
using DeviceBuffer = OwnedMemory<DeviceAllocate, cudaFree>;

// `bytes` of page-locked host memory (the staging buffers of async copies).
using PinnedBuffer = OwnedMemory<PinnedAllocate, cudaFreeHost>;

// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  static absl::StatusOr<Stream> Create() {
    Stream stream;
    RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking));
    return stream;
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  cudaStream_t get() const { return stream_; }
  absl::Status Synchronize() const {
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event for ordering and timing work on streams. Synchronize() spins
// until the event completes, or, with `blocking_sync`, sleeps in the driver
// until it does (cudaEventBlockingSync: no CPU spent waiting, a thread
// wake-up added).
class Event {
 public:
  Event() = default;
  static absl::StatusOr<Event> Create(bool timing = true, bool blocking_sync = false) {
    Event event;
    const unsigned flags = (timing ? cudaEventDefault : cudaEventDisableTiming) |
                           (blocking_sync ? cudaEventBlockingSync : 0u);
    RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&event.event_, flags));
    return event;
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }

  cudaEvent_t get() const { return event_; }
  absl::Status Record(cudaStream_t stream) const {
    return CudaStatus(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  absl::Status Synchronize() const {
    return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  // Milliseconds between `start` and this event (both completed).
  absl::StatusOr<float> ElapsedMsSince(const Event& start) const {
    float ms = 0;
    RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// A graph from stream capture and an instantiated graph, owned (what
// cudaStreamEndCapture and cudaGraphInstantiate hand back).
struct GraphDeleter {
  void operator()(cudaGraph_t graph) const { cudaGraphDestroy(graph); }
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};
using GraphPtr = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using GraphExecPtr = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

}  // namespace fuseserve::cuda
