#include "common/thread_pool.h"

#include <algorithm>
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

  absl::Mutex done_mu;
  int64_t remaining = num_chunks - 1;  // chunks handed to the workers
  {
    absl::MutexLock lock(&mu_);
    for (int64_t c = 1; c < num_chunks; ++c) {
      const int64_t begin = c * chunk;
      const int64_t end = std::min(n, begin + chunk);
      tasks_.emplace_back([&, begin, end] {
        if (begin < end) fn(begin, end);
        absl::MutexLock done_lock(&done_mu);
        --remaining;
      });
    }
  }
  fn(0, std::min(n, chunk));
  absl::MutexLock done_lock(&done_mu);
  done_mu.Await(absl::Condition(
      +[](int64_t* left) { return *left == 0; }, &remaining));
}

}  // namespace fuseserve
