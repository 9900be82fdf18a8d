#pragma once

// Many small host<->device copies issued as one (issue 6). A batch of 1x8192
// GEMM requests has a 32 KiB input and a 32 KiB output per request, each in
// its own page-locked buffer. One cudaMemcpyAsync per buffer costs ~1.8 us of
// host time each, more under load (a GPU instance spent ~34 us issuing 9
// answers' copies, serving on an H200). cudaMemcpyBatchAsync issues them in
// one call: 9 copies of 32 KiB device-to-host took 6.9 us to issue and 17.3
// us to complete, against 16.5 and 23.9 one by one
// (bench/copy_issue_probe.cu, bench/results/2026-11-27-h200-answer-path.md).
//
// Directions come from the pointers (unified addressing): page-locked host
// memory, host memory registered with CUDA, device memory.
//
// Usage: Add the copies, then Issue them on a stream; Issue clears the list
// and keeps its storage, so that a long-lived CopyBatch allocates nothing in
// steady state. The copies of one Issue run in stream order as a whole, in
// no order among themselves: they must not overlap.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "absl/status/status.h"

namespace fuseserve::cuda {

class CopyBatch {
 public:
  void Add(void* destination, const void* source, size_t bytes);
  size_t size() const { return destinations_.size(); }

  // Issues every copy added since the last Issue on `stream` (a non-null
  // stream), then forgets them.
  absl::Status Issue(cudaStream_t stream);

 private:
  std::vector<void*> destinations_;
  std::vector<const void*> sources_;
  std::vector<size_t> sizes_;
};

}  // namespace fuseserve::cuda
