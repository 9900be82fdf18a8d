#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "common/thread_name.h"

namespace fuseserve {

ThreadPool::ThreadPool(int num_threads, std::string_view thread_name) {
  if (num_threads <= 0) {
    num_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  }
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) {
    workers_.emplace_back([this, name = std::string(thread_name)] {
      NameCurrentThread(name);
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool* pool = new ThreadPool();
  return *pool;
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || !pool->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

namespace {

// One ParallelFor's chunks, claimed in order by whichever thread comes next:
// the caller and the workers its tasks reach. On the heap, shared by those
// tasks, so that a task a worker starts only after the caller returned (every
// chunk claimed and done by then) finds nothing to claim and touches nothing
// of the caller's.
struct ParallelForChunks {
  ParallelForChunks(int64_t n, int64_t chunk, int64_t count,
                    const std::function<void(int64_t, int64_t)>& fn)
      : n(n), chunk(chunk), count(count), fn(&fn) {}

  // Runs chunks until none is left to claim.
  void RunUnclaimed() {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= count) return;
      const int64_t begin = c * chunk;
      const int64_t end = std::min(n, begin + chunk);
      if (begin < end) (*fn)(begin, end);
      absl::MutexLock lock(&mu);
      ++done;
    }
  }

  const int64_t n;
  const int64_t chunk;
  const int64_t count;
  // Called only for a claimed chunk: while the caller waits for it.
  const std::function<void(int64_t, int64_t)>* const fn;
  std::atomic<int64_t> next{0};
  absl::Mutex mu;
  int64_t done ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace

void ThreadPool::ParallelFor(
    int64_t n, int64_t min_chunk,
    const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  const int64_t num_chunks = std::min<int64_t>(parallelism(), max_chunks);
  if (num_chunks == 1) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + num_chunks - 1) / num_chunks;
  auto chunks = std::make_shared<ParallelForChunks>(n, chunk, num_chunks, fn);
  {
    absl::MutexLock lock(&mu_);
    for (int64_t c = 1; c < num_chunks; ++c) {
      tasks_.emplace_back([chunks] { chunks->RunUnclaimed(); });
    }
  }
  // The caller claims chunks too, so that none waits for a worker busy with
  // someone else's (several instances share the pool), and a ParallelFor
  // called from a worker's own task completes even with every worker busy.
  chunks->RunUnclaimed();
  absl::MutexLock lock(&chunks->mu);
  chunks->mu.Await(absl::Condition(
      +[](ParallelForChunks* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->done == c->count; },
      chunks.get()));
}

}  // namespace fuseserve
