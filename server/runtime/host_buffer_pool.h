#pragma once

// Host buffers for answers' tensors, reused from request to request so that a
// steady stream of requests neither allocates nor page-faults (a fresh 64 MiB
// buffer costs 16k page faults). Page-locked when the process has a GPU: the
// GPU then copies an output straight into its answer's buffer, and gRPC sends
// it from there, so an output is never copied on the host.
//
// Thread-safe. A buffer goes back to the pool when its HostBuffer is destroyed
// (or, once detached for gRPC, when gRPC releases it); the pool lives as long
// as any of its buffers. The idle buffers are bounded in bytes; what was used
// least recently goes first, so that the sizes of the current load stay
// pooled when it changes. (A pool that freed the returned buffer instead,
// once full of a previous load's 64 MiB GroupNorm answers, allocated and
// freed page-locked memory for every 32 KiB GEMM answer after it: 11k
// instead of 50k GEMM inferences a second on an H200,
// bench/results/2026-11-27-h200-parallel-gather.md.)

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fuseserve {

class HostBufferPool;

// One buffer of the pool, move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  ~HostBuffer();

  char* data() const { return data_; }
  size_t size() const { return size_; }  // as asked for
  bool page_locked() const;

  // Gives up ownership to a C-style release callback (a gRPC slice's):
  // `Release(context)` must be called exactly once, and returns the buffer
  // to the pool. Leaves this HostBuffer empty.
  void* Detach();
  static void Release(void* context);

 private:
  friend class HostBufferPool;
  HostBuffer(std::shared_ptr<HostBufferPool> pool, char* data, size_t size, size_t capacity);
  void Return();

  std::shared_ptr<HostBufferPool> pool_;
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

class HostBufferPool : public std::enable_shared_from_this<HostBufferPool> {
 public:
  struct Options {
    // Page-locked buffers (needs a CUDA device); else ordinary memory.
    bool page_locked = false;
    // Idle buffers are kept up to this many bytes: a buffer returned to a
    // full pool displaces the least recently returned ones (a buffer larger
    // than the limit is freed).
    size_t max_idle_bytes = size_t{1} << 30;
    // Frees displaced and oversized buffers on a thread of the pool's own
    // rather than on the thread that returns them. For page-locked buffers:
    // releasing page-locked memory takes the driver milliseconds, which the
    // gRPC thread that returns an answer's buffer (and every call it serves
    // next) should not wait for.
    bool free_in_background = false;
    // For tests: called with each buffer, on the thread that frees it, just
    // before it is freed.
    std::function<void(const char* data)> on_free;
  };

  static std::shared_ptr<HostBufferPool> Create(const Options& options);
  ~HostBufferPool();
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  // A buffer of at least `bytes`: an idle one of up to twice the size when
  // there is one, else a new one. ResourceExhausted when memory runs out.
  absl::StatusOr<HostBuffer> Acquire(size_t bytes);

  bool page_locked() const { return options_.page_locked; }
  // Buffers ever allocated (successfully), and idle bytes held (for tests
  // and metrics).
  int64_t allocations() const;
  size_t idle_bytes() const;

  // The pool's memory at one instant: every buffer allocated (or being
  // allocated) and not let go (freed, or handed to the background freer),
  // and those of them out of the pool (in use).
  struct Usage {
    size_t held_bytes = 0;
    size_t in_use_bytes = 0;
  };
  Usage usage() const;

 private:
  friend class HostBuffer;
  class BackgroundFreer;

  explicit HostBufferPool(const Options& options);
  void Return(char* data, size_t capacity);
  // A new buffer of `capacity` bytes (a whole number of pages).
  absl::StatusOr<char*> Allocate(size_t capacity) const;
  void Free(char* data) const;
  // Frees `buffers` here or hands them to the background freer.
  void Release(std::vector<char*> buffers);

  struct Idle {
    char* data;
    uint64_t returned;  // when, in Return calls
  };
  using IdleMap = std::multimap<size_t, Idle>;  // capacity -> buffer

  const Options options_;
  mutable absl::Mutex mu_;
  IdleMap idle_ ABSL_GUARDED_BY(mu_);
  // The same buffers by age, oldest first: a full pool displaces these.
  std::map<uint64_t, IdleMap::iterator> idle_by_age_ ABSL_GUARDED_BY(mu_);
  uint64_t returns_ ABSL_GUARDED_BY(mu_) = 0;
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
  // With free_in_background; declared last, so destroyed first: every buffer
  // handed to it is freed before the rest of the pool goes.
  std::unique_ptr<BackgroundFreer> freer_;
};

}  // namespace fuseserve
