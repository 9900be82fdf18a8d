#pragma once

// RAII owners of CUDA resources: device memory, pinned host memory, streams
// and events. Each is created through a factory that returns a Status (no
// throwing constructors), is move-only, and frees its resource on
// destruction. Release errors at destruction cannot be reported and are
// ignored (they only occur after a sticky device error, which the instance
// has already reported).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {

// `bytes` of device memory on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) {
    DeviceBuffer buffer;
    if (bytes > 0) RETURN_IF_CUDA_ERROR(cudaMalloc(&buffer.data_, bytes));
    buffer.bytes_ = bytes;
    return buffer;
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
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

// `bytes` of page-locked host memory (the staging buffers of async copies).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes) {
    PinnedBuffer buffer;
    if (bytes > 0) RETURN_IF_CUDA_ERROR(cudaMallocHost(&buffer.data_, bytes));
    buffer.bytes_ = bytes;
    return buffer;
  }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
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

// An event for ordering and timing work on streams.
class Event {
 public:
  Event() = default;
  static absl::StatusOr<Event> Create(bool timing = true) {
    Event event;
    RETURN_IF_CUDA_ERROR(
        cudaEventCreateWithFlags(&event.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
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

}  // namespace fuseserve::cuda
