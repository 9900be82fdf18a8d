#pragma once

// GroupNormApply for a tensor that the previous kernel on the stream is
// still writing: the normalisation runs beside its producer, on the
// multiprocessors the producer leaves free, sample by sample as the producer
// reports each one complete, instead of after it. Internal to the CUDA
// backend: RunConvFamily pairs it with the wgmma transposed convolution
// (families.cc).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/group_norm.h"

namespace fuseserve::cuda {

// How the producer reports progress: sample_done[n] (device, [batch]) reaches
// `target` once every value of sample n and its group sums are written,
// by an increment with release semantics at GPU scope (gpu_scope.cuh
// IncrementRelease).
struct SampleProgress {
  const unsigned* sample_done = nullptr;
  unsigned target = 0;
};

// Whether GroupNormApplyConcurrent serves these arguments: the prologue is
// kNone, spatial_size % 4 == 0 and `data` is 16-byte aligned (float4 loads
// and stores), and the chunk count fits its 32-bit work counter.
bool GroupNormConcurrentSupports(const GroupNormParams& params, const float* data);

// Bytes of device scratch it needs (its work counter), zeroed by the caller
// before the producer starts.
constexpr size_t kGroupNormConcurrentScratchBytes = 16;

// GroupNormApply's result (bitwise the same: the same chunks, statistics and
// arithmetic), launched on `stream` right after the producer with
// programmatic dependent launch, so that it starts once every block of the
// producer runs (the producer calls gpu_scope::LaunchDependents early) and
// keeps to the multiprocessors left free. Its blocks take the chunks in
// sample order from a counter in `scratch`, wait for their sample's
// progress, and normalise in place; they end after the producer, so that
// the stream's next work follows both kernels. Blocks that start when the
// producer ends take what is left.
//
// Deadlock-free whatever else runs on the GPU: it starts only when every
// block of the producer is running, and the producer never waits for it.
// Preconditions: GroupNormConcurrentSupports; group_sums as GroupNormApply's,
// complete for a sample once its progress reaches the target.
absl::Status GroupNormApplyConcurrent(const GroupNormParams& params, const double* group_sums,
                                      SampleProgress progress, const float* weight,
                                      const float* bias, float* data, void* scratch,
                                      cudaStream_t stream);

}  // namespace fuseserve::cuda
