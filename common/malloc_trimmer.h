#pragma once

// Hands the free memory that glibc's malloc arenas hold back to the system
// every `interval` (malloc_trim(0): the free pages inside every arena, not
// only the top of the main heap, which is all glibc returns on its own).
//
// Why the server runs one: under load, freed blocks stay resident in the
// per-thread arenas, scattered between live ones, and the resident set grows
// for as long as the load lasts. On the soak (three families at saturation,
// 5M requests in 11 minutes on an H200) the resident set grew 8% after
// warm-up; trimming every 10 s kept it flat, and a trim returns only free
// memory, so nothing had leaked (bench/results/2026-11-22-h200-soak-v3.md).
// Under an LD_PRELOAD allocator (jemalloc, tcmalloc) glibc's arenas are
// unused and the trim finds nothing to return.

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fuseserve {

class MallocTrimmer {
 public:
  // Starts the thread ("fs-malloc-trim"); interval > 0.
  explicit MallocTrimmer(absl::Duration interval);
  // Stops and joins it (at most one trim in progress delays this).
  ~MallocTrimmer();

  MallocTrimmer(const MallocTrimmer&) = delete;
  MallocTrimmer& operator=(const MallocTrimmer&) = delete;

  // Trims done so far.
  int64_t trims() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace fuseserve
