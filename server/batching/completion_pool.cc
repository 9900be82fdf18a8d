#include "server/batching/completion_pool.h"

#include <utility>

#include "common/thread_name.h"

namespace fuseserve {

CompletionPool::CompletionPool(int num_threads, const std::string& thread_name) {
  threads_.reserve(num_threads < 1 ? 1 : num_threads);
  for (int i = 0; i < num_threads || threads_.empty(); ++i) {
    threads_.emplace_back([this, thread_name] {
      NameCurrentThread(thread_name);
      ThreadLoop();
    });
  }
}

CompletionPool::~CompletionPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void CompletionPool::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void CompletionPool::ThreadLoop() {
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(this, &CompletionPool::HasWork));
    if (tasks_.empty()) break;  // stopping, and nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    mu_.Unlock();
    task();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace fuseserve
