#include "server/runtime/host_buffer_pool.h"

#include <atomic>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "server/runtime/page_locked_memory.h"

namespace fuseserve {
namespace {

// Buffers are whole pages; ordinary ones are page-aligned too, like pinned
// ones, so that either may be handed to DMA or vector code alike.
constexpr size_t kPage = 4096;

size_t RoundUpToPage(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// A buffer handed to a C-style release callback. The thread that releases it
// (gRPC's, once the slice is sent) is not the one that detached it, and the
// hand-off between them happens inside gRPC core, whose synchronisation
// neither the C++ memory model of our code nor ThreadSanitizer can see. The
// release store and acquire load make the hand-off explicit: everything the
// detaching thread did to the buffer happens before its return to the pool.
struct DetachedHostBuffer {
  explicit DetachedHostBuffer(HostBuffer&& detached) : buffer(std::move(detached)) {
    published.store(true, std::memory_order_release);
  }
  HostBuffer buffer;
  std::atomic<bool> published{false};
};

}  // namespace

HostBuffer::HostBuffer(std::shared_ptr<HostBufferPool> pool, char* data, size_t size,
                       size_t capacity)
    : pool_(std::move(pool)), data_(data), size_(size), capacity_(capacity) {}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    Return();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { Return(); }

bool HostBuffer::page_locked() const { return pool_ != nullptr && pool_->page_locked(); }

void HostBuffer::Return() {
  if (data_ != nullptr) pool_->Return(data_, capacity_);
  data_ = nullptr;
  pool_.reset();
}

void* HostBuffer::Detach() { return new DetachedHostBuffer(std::move(*this)); }

void HostBuffer::Release(void* context) {
  auto* detached = static_cast<DetachedHostBuffer*>(context);
  static_cast<void>(detached->published.load(std::memory_order_acquire));
  delete detached;
}

// A thread that frees the buffers it is handed, in the order handed.
class HostBufferPool::BackgroundFreer {
 public:
  explicit BackgroundFreer(const HostBufferPool* pool)
      : pool_(pool), thread_([this] {
          NameCurrentThread("fs-buffer-free");
          Loop();
        }) {}

  // Frees every buffer handed over, then stops.
  ~BackgroundFreer() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  BackgroundFreer(const BackgroundFreer&) = delete;
  BackgroundFreer& operator=(const BackgroundFreer&) = delete;

  void Hand(std::vector<char*> buffers) {
    absl::MutexLock lock(&mu_);
    pending_.insert(pending_.end(), buffers.begin(), buffers.end());
  }

 private:
  void Loop() {
    for (;;) {
      std::vector<char*> batch;
      bool stopping = false;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](BackgroundFreer* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
              return self->stopping_ || !self->pending_.empty();
            },
            this));
        batch.swap(pending_);
        stopping = stopping_;
      }
      for (char* data : batch) pool_->Free(data);
      if (stopping && batch.empty()) return;
    }
  }

  const HostBufferPool* const pool_;  // outlives this (destroyed first)
  absl::Mutex mu_;
  std::vector<char*> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

HostBufferPool::HostBufferPool(const Options& options)
    : options_(options),
      freer_(options.free_in_background ? std::make_unique<BackgroundFreer>(this) : nullptr) {}

std::shared_ptr<HostBufferPool> HostBufferPool::Create(const Options& options) {
  return std::shared_ptr<HostBufferPool>(new HostBufferPool(options));
}

HostBufferPool::~HostBufferPool() {
  freer_.reset();  // what it was handed, freed first
  absl::MutexLock lock(&mu_);
  for (const auto& [capacity, idle] : idle_) Free(idle.data);
}

void HostBufferPool::Release(std::vector<char*> buffers) {
  if (buffers.empty()) return;
  if (freer_ != nullptr) {
    freer_->Hand(std::move(buffers));
    return;
  }
  for (char* data : buffers) Free(data);
}

void HostBufferPool::Free(char* data) const {
  if (options_.on_free) options_.on_free(data);
  if (options_.page_locked) {
    FreePageLocked(data);
  } else {
    std::free(data);
  }
}

absl::StatusOr<HostBuffer> HostBufferPool::Acquire(size_t bytes) {
  const size_t capacity = RoundUpToPage(bytes == 0 ? 1 : bytes);
  {
    absl::MutexLock lock(&mu_);
    auto found = idle_.lower_bound(capacity);
    if (found != idle_.end() && found->first / 2 <= capacity) {
      const size_t found_capacity = found->first;
      char* data = found->second.data;
      idle_by_age_.erase(found->second.returned);
      idle_.erase(found);
      idle_bytes_ -= found_capacity;
      return HostBuffer(shared_from_this(), data, bytes, found_capacity);
    }
    // Counted as held now, so that an allocation that succeeds takes the
    // lock once; one that fails gives them back below.
    ++allocations_;
    held_bytes_ += capacity;
  }
  absl::StatusOr<char*> data = Allocate(capacity);
  if (!data.ok()) {
    absl::MutexLock lock(&mu_);
    --allocations_;
    held_bytes_ -= capacity;
    return data.status();
  }
  return HostBuffer(shared_from_this(), *data, bytes, capacity);
}

absl::StatusOr<char*> HostBufferPool::Allocate(size_t capacity) const {
  if (options_.page_locked) {
    absl::StatusOr<void*> allocated = AllocatePageLocked(capacity);
    if (!allocated.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          capacity, " bytes of page-locked host memory: ", allocated.status().message()));
    }
    return static_cast<char*>(*allocated);
  }
  auto* data = static_cast<char*>(std::aligned_alloc(kPage, capacity));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(capacity, " bytes of host memory"));
  }
  return data;
}

void HostBufferPool::Return(char* data, size_t capacity) {
  std::vector<char*> displaced;
  {
    absl::MutexLock lock(&mu_);
    if (capacity <= options_.max_idle_bytes) {
      while (idle_bytes_ + capacity > options_.max_idle_bytes) {
        const IdleMap::iterator oldest = idle_by_age_.begin()->second;
        displaced.push_back(oldest->second.data);
        idle_bytes_ -= oldest->first;
        held_bytes_ -= oldest->first;
        idle_by_age_.erase(idle_by_age_.begin());
        idle_.erase(oldest);
      }
      const uint64_t returned = returns_++;
      idle_by_age_.emplace(returned, idle_.emplace(capacity, Idle{data, returned}));
      idle_bytes_ += capacity;
      data = nullptr;
    } else {
      held_bytes_ -= capacity;
    }
  }
  // Outside the lock: freeing page-locked memory takes the driver's time.
  if (data != nullptr) displaced.push_back(data);
  Release(std::move(displaced));
}

int64_t HostBufferPool::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

HostBufferPool::Usage HostBufferPool::usage() const {
  absl::MutexLock lock(&mu_);
  return {held_bytes_, held_bytes_ - idle_bytes_};
}

size_t HostBufferPool::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

}  // namespace fuseserve
