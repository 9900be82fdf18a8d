#pragma once

// A timeline of every batch a GPU instance runs (issue 6 item 3: show that
// one instance's copies overlap another's compute). Each batch is three
// phases on its instance's stream, timed by the instance's CUDA events and
// placed on the host clock at the moment the batch started:
//   input   gathering the inputs and copying them to the device,
//   compute the model's kernels,
//   output  copying the outputs back.
// BatchTraceWriter writes them as Chrome trace events (chrome://tracing,
// Perfetto): one process per GPU ("GPU n"), one thread per instance (named
// after it).

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fuseserve {

struct BatchTrace {
  std::string instance;  // e.g. "conv/1 gpu0#1"
  int device = 0;
  int64_t batch_size = 0;
  int requests = 0;
  absl::Time start;  // when the input phase began (the instance's start event)
  // Phase ends, relative to `start`.
  absl::Duration input_end;
  absl::Duration compute_end;
  absl::Duration output_end;
};

class BatchTraceSink {
 public:
  virtual ~BatchTraceSink() = default;
  // Thread-safe: every instance records into one sink.
  virtual void Record(const BatchTrace& batch) = 0;
};

// Writes a Chrome trace file (the JSON array form: events, one per line,
// written as they come; the array is closed when the writer is destroyed,
// and viewers also read a file cut short). Times are microseconds since the
// writer was created.
class BatchTraceWriter final : public BatchTraceSink {
 public:
  static absl::StatusOr<std::unique_ptr<BatchTraceWriter>> Open(const std::string& path);
  ~BatchTraceWriter() override;
  BatchTraceWriter(const BatchTraceWriter&) = delete;
  BatchTraceWriter& operator=(const BatchTraceWriter&) = delete;

  void Record(const BatchTrace& batch) override;

 private:
  BatchTraceWriter(std::FILE* file, absl::Time origin) : file_(file), origin_(origin) {}
  void WriteEvent(const std::string& json) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::FILE* const file_;
  const absl::Time origin_;
  bool first_ ABSL_GUARDED_BY(mu_) = true;
  // Thread ids given to instances, and the devices named so far.
  std::map<std::string, int> thread_ids_ ABSL_GUARDED_BY(mu_);
  std::set<int> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fuseserve
