#pragma once

// GroupNorm's resident schedule (internal to group_norm.cu's dispatch; see
// group_norm_resident.cu): one persistent CTA per SM, each holding its
// chunks in a shared-memory ring from the HBM read until its group's
// statistics are known, so that every element is read from HBM once and
// never again, not even from L2.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/group_norm.h"

namespace fuseserve::cuda::group_norm_detail {

// Whether the schedule's access shape fits `params` on these pointers,
// before any device question: 16-byte aligned input and output and
// spatial_size a multiple of 4 (every float4 in one channel). No CUDA call.
bool ResidentShapeEligible(const GroupNormParams& params, const float* input,
                           const float* output);

// How many CTAs the schedule would launch for `params` on the current
// device (`requested`, GroupNormOptions::resident_ctas, or the default for
// 0), or 0 where it cannot run there: the device lacks cooperative launch or
// the ring's shared memory, or a group has more chunks than the device has
// SMs (a CTA would wait for chunks that no running CTA owns) or than 256.
// InvalidArgument for a requested count the device or shape cannot take.
absl::StatusOr<int> ResidentCtas(const GroupNormParams& params, int requested);

// Whether GroupNormSchedule::kAuto takes the schedule, where it can run, on
// a device whose DRAM peaks at `dram_bytes_per_second`: from 4 TB/s. The
// lagged schedule's second reads cost L2 bandwidth, which binds before DRAM
// only on the faster HBM: at the reference shape the resident schedule ran
// 1.9% faster than the lagged one on an H200 (4.8 TB/s) and 1.1% slower on
// an H100 (3.35 TB/s) (bench/kernel_notes.md v36).
bool ResidentPreferredAt(double dram_bytes_per_second);

// The current device's peak DRAM bandwidth in bytes per second (memory
// clock x bus width x 2, double data rate).
absl::StatusOr<double> PeakDramBandwidth();

// Scratch: per-chunk partials and per-group shifts.
size_t ResidentWorkspaceBytes(const GroupNormParams& params);

// Enqueues the memset of the scratch and the kernel, as a cooperative
// launch of `ctas` CTAs (ResidentCtas(params) > 0); `params` validated,
// ResidentShapeEligible true, workspace of ResidentWorkspaceBytes, 16-byte
// aligned. Where the driver holds fewer CTAs at
// once than the device's SMs (an MPS share of the SMs, say), it refuses the
// grid (cudaErrorCooperativeLaunchTooLarge): returned as ResourceExhausted,
// with nothing but the memset enqueued, so that a caller can take another
// schedule.
absl::Status LaunchResidentGroupNorm(const GroupNormParams& params, const float* input,
                                     const float* weight, const float* bias, float* output,
                                     void* workspace, int ctas, cudaStream_t stream);

}  // namespace fuseserve::cuda::group_norm_detail
