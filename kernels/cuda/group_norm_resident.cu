#include "kernels/cuda/group_norm_resident.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gpu_scope.cuh"
#include "kernels/cuda/group_norm_chunk_steps.cuh"
#include "kernels/cuda/group_norm_common.cuh"
#include "kernels/cuda/residency.h"

// Schedule. The lagged schedule (group_norm_lagged.cu) reads each chunk
// from HBM once and a second time from L2, a lag later, to normalise it.
// Here the second read does not happen at all: a persistent grid of P CTAs,
// at most one per SM, where CTA b owns chunks b, b + P, b + 2P, ... of the
// tensor (chunk s * P + b at its step s), and keeps each chunk in shared
// memory from its HBM read until it is normalised. Each CTA runs a ring of
// kRingSlots (3) chunk-sized slots; at step s it
//  - copies the first half of chunk s + 1 into its slot (cp.async, each
//    thread its own vectors, which only it reads) and loads its group's
//    shift;
//  - requests the partials of the group of chunk s - 1 and that chunk's
//    affine parameters;
//  - sums chunk s from shared memory into its partial, stored with no
//    fence: the workspace starts each launch filled with a value no sum
//    can take (all bits set), so a partial is its own flag;
//  - copies the second half of chunk s + 1;
//  - once every partial of the group of chunk s - 1 is stored, has one warp
//    combine them in chunk order into the group's statistics, and
//    normalises chunk s - 1 from its slot with streaming stores.
// The slot refilled at step s held chunk s - 2, normalised at step s - 1
// by the same threads: no barrier guards the ring. No fence on either side
// of a partial: the lagged schedule's release arrival and acquire wait each
// wait for the CTA's outstanding stores, the streaming stores of the chunk
// just normalised, which with one CTA per SM puts a store drain into every
// step. Index arithmetic is 32-bit (v36 in bench/kernel_notes.md has the
// versions and their times). The copy in two halves, the second issued
// after the sum, where the CTA would otherwise wait for its group's
// statistics with nothing new in flight: 1.4-2.0% faster on H200s than the
// whole copy at the step's start (v45; the whole copy after the sum, or
// after the normalisation, was slower).
//
// Progress. A CTA waits at step s for the group of chunk (s - 1) P + b,
// whose last chunk is at most (s - 1) P + b + n - 1 (n chunks per group);
// with n <= P + 1 that chunk's step is at most s. Every CTA sums its chunk
// of a step before it waits in that step, so the CTA waiting at the lowest
// step always has what it waits for, provided every CTA runs: the launch is
// cooperative (the driver starts all P CTAs together or refuses the grid).
// P is the largest multiple of n within the SMs, so that a step holds
// whole groups and a CTA waits only for a CTA a whole step behind, unless
// that idles more than 1/16 of the SMs; then P is every SM.
//
// Why (bench/kernel_notes.md v36). On an H200 the lagged schedule runs at
// ~4.27 ms at the reference shape against a copy's 3.88 ms: its second
// reads cost L2 bandwidth, and its CTAs wait with a slot that reads
// nothing. The persistent ring traffic of bench/l2_reuse_probe.cu (the
// `ring512` mode: 128 CTAs of 512 threads, 3 slots of 64 KiB) ran 3.89 ms.
//
// Bytes: the input once, the output once, and per chunk a 16-byte partial
// and each CTA's reads of its group's partials from L2. Numerics are the
// two-read schedule's: bitwise the same output.

namespace fuseserve::cuda::group_norm_detail {
namespace {

constexpr int kRingSlots = 3;
// Of each thread's vectors of a chunk, those copied at the start of the
// step before the chunk's sum; the rest follow the sum of the step's own
// chunk.
constexpr int kEarlyVectors = kVectorsPerThread / 2;
constexpr size_t kRingBytes = kRingSlots * kStagedChunkBytes;
constexpr int64_t kChunkVectors = int64_t{kThreads} * kVectorsPerThread;
// The statistics warp holds a group's partials in registers, at most this
// many per lane: groups of up to 32 * kMaxChunksPerLane chunks.
constexpr int kMaxChunksPerLane = 8;

// Scratch: per chunk its partial (double2), per group its shift (double),
// every bit set at the start of each launch.
struct ResidentLayout {
  GroupGeometry geometry;
  size_t shifts_offset = 0;
  size_t total_bytes = 0;
};

ResidentLayout LayoutOfResident(const GroupNormParams& params) {
  ResidentLayout layout;
  layout.geometry = Geometry(params);
  layout.shifts_offset =
      RoundUp16(static_cast<size_t>(layout.geometry.total_chunks) * sizeof(double2));
  layout.total_bytes =
      layout.shifts_offset + static_cast<size_t>(layout.geometry.total_groups) * sizeof(double);
  return layout;
}

// The value of a partial or shift not yet stored. No sum or shift takes it:
// a double converted from a float has its low 29 mantissa bits clear, and a
// NaN that arithmetic makes carries an operand's payload or the canonical
// one; Unstamped keeps even that impossible case out.
__device__ __forceinline__ bool IsUnset(double value) {
  return __double_as_longlong(value) == -1LL;
}

__device__ __forceinline__ double Unstamped(double value) {
  return IsUnset(value) ? __longlong_as_double(0x7ff8000000000000LL) : value;
}

// Chunk `t`'s partial and, for a group's first chunk, the group's shift,
// by thread 0, after ChunkPartial.
__device__ __forceinline__ void PublishPartial(const OneReadArgs& a, double* shifts, int64_t t,
                                               const ChunkSpan& span, double2 total,
                                               float shift) {
  if (threadIdx.x != 0) return;
  if (span.begin == 0) gpu_scope::StoreRelaxed(shifts + span.group, static_cast<double>(shift));
  gpu_scope::StoreRelaxed(&a.partials[t].x, Unstamped(total.x));
  gpu_scope::StoreRelaxed(&a.partials[t].y, Unstamped(total.y));
}

// One lane's share of a group's partials (chunks lane, lane + 32, ...) and
// the group's shift, loaded by the statistics warp a step ahead of their
// use, so that their trip to L2 overlaps the CTA's own sum.
struct GroupPartialsInFlight {
  double sums[kMaxChunksPerLane];
  double squares[kMaxChunksPerLane];
  double shift;

  __device__ __forceinline__ void Load(const OneReadArgs& a, const double* shifts, int64_t group) {
    const double2* partials = a.partials + group * a.chunks_per_group;
    const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
    for (int i = 0; i < kMaxChunksPerLane; ++i) {
      const int64_t chunk = lane + 32 * i;
      if (chunk < a.chunks_per_group) {
        sums[i] = gpu_scope::LoadRelaxed(&partials[chunk].x);
        squares[i] = gpu_scope::LoadRelaxed(&partials[chunk].y);
      }
    }
    shift = gpu_scope::LoadRelaxed(shifts + group);
  }

  // Whether every lane saw every partial and the shift stored.
  __device__ __forceinline__ bool AllStored(const OneReadArgs& a) const {
    const int lane = static_cast<int>(threadIdx.x & 31);
    bool stored = !IsUnset(shift);
#pragma unroll
    for (int i = 0; i < kMaxChunksPerLane; ++i) {
      if (lane + 32 * i < a.chunks_per_group) {
        stored = stored && !IsUnset(sums[i]) && !IsUnset(squares[i]);
      }
    }
    return __all_sync(0xffffffffu, stored);
  }

  // The group's statistics (every lane), from what AllStored accepted.
  __device__ __forceinline__ float4 Stats(const OneReadArgs& a) const {
    const int lane = static_cast<int>(threadIdx.x & 31);
    double group_sum = 0.0;
    double group_squares = 0.0;
#pragma unroll
    for (int i = 0; i < kMaxChunksPerLane; ++i) {
      if (lane + 32 * i < a.chunks_per_group) {
        group_sum += sums[i];
        group_squares += squares[i];
      }
    }
    return StatsFromLaneSums(group_sum, group_squares, shift, a.group_size, a.eps);
  }
};

// By one warp: group `group`'s statistics, valid in every lane, from the
// partials `in_flight` loaded earlier, polling again (with backoff) until
// every partial of the group and its shift are stored.
__device__ __forceinline__ float4 AwaitGroupStats(const OneReadArgs& a, const double* shifts,
                                                  int64_t group, GroupPartialsInFlight& in_flight) {
  unsigned int backoff = 32;
  while (!in_flight.AllStored(a)) {
    __nanosleep(backoff);
    backoff = min(backoff * 2, 256u);
    in_flight.Load(a, shifts, group);
  }
  return in_flight.Stats(a);
}

// One CTA per SM (the ring takes 192 KiB of shared memory).
template <bool kGelu>
__global__ void __launch_bounds__(kThreads, 1)
    ResidentGroupNormKernel(OneReadArgs a, double* shifts) {
  extern __shared__ float4 ring[];
  // Double-buffered: past the last sum no block barrier (BlockSum2's)
  // separates one step's readers from the next step's writer.
  __shared__ float4 group_stats[2];
  const int64_t ctas = gridDim.x;
  const int64_t steps = (a.total_chunks - blockIdx.x + ctas - 1) / ctas;
  const auto chunk_at = [&](int64_t step) { return step * ctas + blockIdx.x; };
  const auto slot_of = [&](int64_t step) { return ring + (step % kRingSlots) * kChunkVectors; };
  const bool stats_warp = threadIdx.x / 32 == kStatsWarp;

  GroupPartialsInFlight in_flight;
  // Each chunk's shift is loaded with its copy, a step before its sum.
  float next_shift = 0.0f;
  if (steps > 0) {
    StageChunk<StagedLines::kDefault>(a, chunk_at(0), slot_of(0));
    next_shift = GroupShift<kGelu>(a, SpanOf(a, chunk_at(0)));
  }
  for (int64_t s = 0; s <= steps; ++s) {
    // Two commit groups per step (chunk s + 1's halves), empty past the
    // last chunk, so that at the sum waiting for all but the newest group
    // (this step's first half) waits for chunk s.
    const float shift = next_shift;
    const bool has_next = s + 1 < steps;
    if (has_next) {
      StageChunk<StagedLines::kDefault, 0, kEarlyVectors>(a, chunk_at(s + 1), slot_of(s + 1));
      next_shift = GroupShift<kGelu>(a, SpanOf(a, chunk_at(s + 1)));
    } else {
      CpAsyncCommit();
    }
    // Chunk s - 1's affine parameters and its group's partials, requested
    // before the sum of chunk s so that their trips to L2 overlap it.
    const bool has_normalize = s >= 1;
    const ChunkSpan normalized = has_normalize ? SpanOf(a, chunk_at(s - 1)) : ChunkSpan{};
    ChannelAffine affine{};
    if (has_normalize) {
      affine = FirstChannelAffine(a, normalized);
      if (stats_warp) in_flight.Load(a, shifts, normalized.group);
    }
    if (s < steps) {
      const int64_t t = chunk_at(s);
      const ChunkSpan span = SpanOf(a, t);
      CpAsyncWait<1>();
      const double2 total = ChunkPartial<kGelu>(span, StagedVectorsOfThread{slot_of(s)}, shift);
      PublishPartial(a, shifts, t, span, total, shift);
    }
    // The second commit group of the step: chunk s + 1 is whole once every
    // group but the next step's first one has landed (its CpAsyncWait<1>).
    if (has_next) {
      StageChunk<StagedLines::kDefault, kEarlyVectors, kVectorsPerThread - kEarlyVectors>(
          a, chunk_at(s + 1), slot_of(s + 1));
    } else {
      CpAsyncCommit();
    }
    if (has_normalize) {
      if (stats_warp) {
        const float4 stats = AwaitGroupStats(a, shifts, normalized.group, in_flight);
        if (threadIdx.x % 32 == 0) group_stats[s % 2] = stats;
      }
      __syncthreads();
      NormalizeStaged<kGelu>(a, normalized, group_stats[s % 2], affine,
                             StagedVectorsOfThread{slot_of(s - 1)});
    }
  }
}

// The ring's shared memory beside the kernel's own (the statistics, the
// block sum's scratch) and the 1 KiB the system reserves per CTA.
constexpr size_t kStaticSharedAllowance = 2048;

}  // namespace

bool ResidentShapeEligible(const GroupNormParams& params, const float* input,
                           const float* output) {
  return OneReadShapeEligible(params, input, output);
}

absl::StatusOr<int> ResidentCtas(const GroupNormParams& params, int requested) {
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int cooperative = 0;
  int sms = 0;
  int shared_optin = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const GroupGeometry geometry = Geometry(params);
  const int64_t n = geometry.chunks_per_group;
  if (cooperative == 0 || static_cast<size_t>(shared_optin) < kRingBytes + kStaticSharedAllowance ||
      n > sms || n > 32 * kMaxChunksPerLane) {
    return 0;
  }
  if (requested > 0 && (requested > sms || requested + 1 < n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupNorm: resident_ctas must be at most the device's ", sms,
        " SMs and at least one group's chunks less one (", n - 1, "), got ", requested));
  }
  const int64_t whole_groups = sms / n * n;
  const int64_t ctas = requested > 0                              ? requested
                       : (sms - whole_groups) * 16 <= sms ? whole_groups
                                                                  : sms;
  return static_cast<int>(std::min(ctas, geometry.total_chunks));
}

bool ResidentPreferredAt(double dram_bytes_per_second) {
  return dram_bytes_per_second >= 4e12;
}

absl::StatusOr<double> PeakDramBandwidth() {
  // Asking the driver for the memory clock takes ~0.5 ms (measured on an
  // H200: every kAuto launch at n=1 ran 0.59 ms instead of 0.05), so each
  // device's answer is kept; two threads that both miss store the same.
  constexpr int kCachedDevices = 64;
  static std::array<std::atomic<double>, kCachedDevices> cached{};
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable) {
    const double known = cached[device].load(std::memory_order_relaxed);
    if (known > 0.0) return known;
  }
  int clock_khz = 0;
  int bus_bits = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  const double bandwidth = 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
  if (cacheable) cached[device].store(bandwidth, std::memory_order_relaxed);
  return bandwidth;
}

size_t ResidentWorkspaceBytes(const GroupNormParams& params) {
  return LayoutOfResident(params).total_bytes;
}

absl::Status LaunchResidentGroupNorm(const GroupNormParams& params, const float* input,
                                     const float* weight, const float* bias, float* output,
                                     void* workspace, int ctas, cudaStream_t stream) {
  const ResidentLayout layout = LayoutOfResident(params);
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(workspace, 0xFF, layout.total_bytes, stream),
                             "GroupNorm partials memset"));
  OneReadArgs args = ArgsFor(params, layout.geometry, input, weight, bias, output);
  args.partials = static_cast<double2*>(workspace);
  auto* shifts = reinterpret_cast<double*>(static_cast<char*>(workspace) + layout.shifts_offset);
  void (*const kernel)(OneReadArgs, double*) = params.prologue == GroupNormPrologue::kGeluErf
                                          ? ResidentGroupNormKernel<true>
                                          : ResidentGroupNormKernel<false>;
  ASSIGN_OR_RETURN(const size_t shared_bytes,
                   ResidencyPadding(reinterpret_cast<const void*>(kernel), 0, kRingBytes));
  void* kernel_args[] = {&args, &shifts};
  const cudaError_t error =
      cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(ctas),
                                  dim3(kThreads), kernel_args, shared_bytes, stream);
  if (error == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();  // not sticky: clear it for the next check
    return absl::ResourceExhaustedError(
        absl::StrCat("GroupNorm (resident): the device does not hold ", ctas,
                     " CTAs of the ring at once"));
  }
  return CudaStatus(error, "GroupNorm (resident) cooperative kernel launch");
}

}  // namespace fuseserve::cuda::group_norm_detail
