#pragma once

// GroupNorm on the GPU for [N, C, *] float32 tensors of any rank, with an
// optional elementwise prologue (exact erf GELU) applied before the
// statistics — PyTorch's semantics (SPEC.md §1.3): biased variance over the
// group's C/G channels and all spatial positions of one sample,
// (x - mean) * rsqrt(var + eps) * weight + bias.
//
// Two entry points:
//  - GroupNorm: statistics and normalisation of `input` (two reads of the
//    input at most; see the .cu for the current schedule);
//  - GroupNormApply: normalisation only, from per-(sample, group) sums that a
//    producer kernel (the transposed convolution's epilogue) accumulated.
// Launchers validate their arguments (InvalidArgument, nothing launched),
// enqueue on `stream` and never synchronise.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace fuseserve::cuda {

enum class GroupNormPrologue { kNone, kGeluErf };

struct GroupNormParams {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t spatial_size = 1;  // product of the dims after C (1 for [N, C])
  int64_t num_groups = 0;
  float eps = 1e-5f;
  GroupNormPrologue prologue = GroupNormPrologue::kNone;
};

absl::Status ValidateGroupNormParams(const GroupNormParams& params);

// How GroupNorm reads its input:
//  - kTwoRead: a statistics pass and a normalisation pass, each reading the
//    input from HBM (group_norm.cu); any shape and alignment;
//  - kLagged: one kernel that normalises each chunk a fixed lag of chunks
//    after summing it, so that its second read comes from L2
//    (group_norm_lagged.cu); needs 16-byte aligned input and output and
//    spatial_size % 4 == 0;
//  - kResident: a persistent grid, one CTA per SM, that keeps each chunk in
//    shared memory from its one read until its group's statistics are known
//    (group_norm_resident.cu); needs what kLagged needs, a device with
//    cooperative launch and 192 KiB of shared memory per CTA (sm_90: H100,
//    H200), and groups of at most as many chunks of 16384 elements as the
//    device has SMs;
//  - kAuto: kResident where it can run on a device whose DRAM peaks at
//    4 TB/s or more (H200; bench/kernel_notes.md v36), else kLagged where it
//    can run, else kTwoRead.
enum class GroupNormSchedule { kAuto, kTwoRead, kLagged, kResident };

struct GroupNormOptions {
  GroupNormSchedule schedule = GroupNormSchedule::kAuto;
  // kLagged's lag in chunks of 16384 elements; 0 picks the default (one
  // group's chunks + 64). Must cover one group's chunks and at most the
  // tensor's. The defaults here were the fastest of the lags and residencies
  // measured on both an H100 and an H200 (bench/kernel_notes.md v28).
  int64_t lag_chunks = 0;
  // kLagged's CTAs resident per SM: 3 (the default: the chunk to normalise
  // is staged in 64 KiB of shared memory, which allows no more, so 0 or more
  // than 3 run the same as 3), or 1-2, capped through dynamic shared memory.
  int lagged_ctas_per_sm = 3;
  // kResident's grid (and kAuto's where it takes kResident): 0 picks the
  // default, the largest multiple of a group's chunks within the SMs (each
  // step then holds whole groups) unless that idles more than 1/16 of them,
  // else every SM. Otherwise at most the device's SMs and at least one
  // group's chunks less one; more CTAs than the tensor's chunks run as many
  // as chunks.
  int resident_ctas = 0;
};

// Device scratch GroupNorm needs for `params` under any schedule (may be 0).
size_t GroupNormWorkspaceBytes(const GroupNormParams& params);

// output = GroupNorm(prologue(input)); device pointers; output may equal
// input, otherwise they must not overlap. weight, bias: [channels], or null
// for 1 and 0. `workspace` holds GroupNormWorkspaceBytes(params) bytes,
// 16-byte aligned (cudaMalloc's alignment). Deterministic: the same inputs
// give bitwise the same output, and so do the two schedules (the same
// chunks, sums and order of additions). A schedule pinned in
// `options` that cannot run these arguments is InvalidArgument.
absl::Status GroupNorm(const GroupNormParams& params, const float* input, const float* weight,
                       const float* bias, float* output, void* workspace, cudaStream_t stream,
                       const GroupNormOptions& options = {});

// Per-(sample, group) statistics as a producer accumulates them:
// group_sums[2 * (n * num_groups + g)] = sum of the group's values,
// group_sums[2 * (n * num_groups + g) + 1] = sum of their squares.
// In double: the producer adds millions of terms per group.
//
// data = (data - mean) * rsqrt(var + eps) * weight + bias in place, with
// mean = sum / L and var = max(sum_sq / L - mean^2, 0) in double
// (L = C / G * spatial_size); the prologue of `params` must be kNone (data
// already holds the activations). weight, bias: [channels], or null.
absl::Status GroupNormApply(const GroupNormParams& params, const double* group_sums,
                            const float* weight, const float* bias, float* data,
                            cudaStream_t stream);

}  // namespace fuseserve::cuda
