#pragma once

// Threads that answer a model's executed requests, so that an instance's own
// thread goes back to its next batch as soon as the batch's results are in
// (as Triton's backends hand responses to the front end's threads instead of
// sending them). Answering a request runs its on_complete: for the gRPC front
// end, serialising the answer's header, recording metrics and Finish(), which
// sends the answer from the calling thread (a syscall per answer). Done
// inline, a batch of 16 answers delays the instance's next batch by all 16.
//
// Tasks run in the order they were posted to one thread and concurrently on
// several. Destruction runs every task posted before it began, then joins.

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fuseserve {

class CompletionPool {
 public:
  // `num_threads` >= 1 threads, each named `thread_name` (cut to 15 characters).
  CompletionPool(int num_threads, const std::string& thread_name);
  ~CompletionPool();
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  int num_threads() const { return static_cast<int>(threads_.size()); }

  // Runs `task` on one of the threads, after the tasks posted before it.
  void Post(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ThreadLoop() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !tasks_.empty(); }

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace fuseserve
