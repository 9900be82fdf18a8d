#pragma once

// A fixed pool of worker threads: for data-parallel loops on the CPU backend
// (ParallelFor), and for tasks handed off to run elsewhere (Post: the
// batcher's response threads).
//
// ParallelFor splits [0, n) into contiguous chunks and runs them on the pool
// and on the calling thread, returning when all chunks are done. Several
// threads may call ParallelFor on one pool at once (several model instances
// share the process's cores); their chunks interleave on the workers, and
// each caller runs those of its chunks no worker has taken yet rather than
// wait for them. So a ParallelFor also completes when called from one of the
// pool's own tasks.
//
// Tasks run in the order they were queued on one worker, concurrently on
// several. Destruction runs every task queued before it began, then joins.

#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fuseserve {

class ThreadPool {
 public:
  // `num_threads` workers (0 = hardware concurrency - 1, at least 1), each
  // named `thread_name` (what profiles show; Linux keeps 15 characters).
  explicit ThreadPool(int num_threads = 0, std::string_view thread_name = "fs-cpu-pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of threads that run a ParallelFor: the workers plus the caller.
  int parallelism() const { return static_cast<int>(workers_.size()) + 1; }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Runs `task` on a worker, after the tasks queued before it.
  void Post(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // `min_chunk` long (except possibly the last). Blocks until all are done.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // The process-wide pool used by the CPU backend.
  static ThreadPool& Default();

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace fuseserve
