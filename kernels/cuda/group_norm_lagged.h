#pragma once

// GroupNorm's one-HBM-read schedule (internal to group_norm.cu's dispatch;
// see group_norm_lagged.cu): every chunk's partial sums and, a fixed lag of
// chunks later, its normalisation, in one kernel, so that the second read of
// a chunk comes from L2.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/group_norm.h"

namespace fuseserve::cuda::group_norm_detail {

// Whether the schedule can run `params` on these pointers: 16-byte aligned
// input and output, spatial_size a multiple of 4 (every float4 lies in one
// channel), and the grid (chunks + lag) within the launch limit.
bool LaggedEligible(const GroupNormParams& params, const float* input, const float* output,
                    int64_t lag_chunks);

// The lag used when GroupNormOptions::lag_chunks is 0: one group's chunks plus
// kLagSlackChunks (the group of the chunk being normalised has been read by
// CTAs that started at least that many tickets earlier), at most the tensor's.
int64_t DefaultLagChunks(const GroupNormParams& params);

// Scratch: per-chunk partials, per-group shifts, and the counters that the
// launch zeroes (arrivals per group, the ticket).
size_t LaggedWorkspaceBytes(const GroupNormParams& params);

// Enqueues the memset of the counters and the kernel; `params` validated,
// LaggedEligible true, workspace 16-byte aligned. The kernel stages the
// chunk to normalise in 64 KiB of shared memory, so at most 3 CTAs run per
// SM; ctas_per_sm > 0 caps them lower (1 or 2, through dynamic shared memory
// the kernel does not use); 0 or 3 and more leave them at 3.
absl::Status LaunchLaggedGroupNorm(const GroupNormParams& params, const float* input,
                                   const float* weight, const float* bias, float* output,
                                   void* workspace, int64_t lag_chunks, int ctas_per_sm,
                                   cudaStream_t stream);

}  // namespace fuseserve::cuda::group_norm_detail
