#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gpu_scope.cuh"
#include "kernels/cuda/group_norm_chunk_steps.cuh"
#include "kernels/cuda/group_norm_common.cuh"
#include "kernels/cuda/group_norm_lagged.h"
#include "kernels/cuda/residency.h"

// Schedule. The two-read schedule (group_norm.cu) reads the input from HBM
// twice: once for the statistics, once to normalise. Here one kernel does
// both, one CTA per chunk of kChunkElements, and the normalisation of a
// chunk runs `lag` chunks after its statistics, early enough that the chunk
// is still in L2 for its second read. Each CTA takes a ticket t (an atomic
// counter: tickets are handed out in the order CTAs start, so every lower
// ticket belongs to a CTA that is running or done), then
//  - loads chunk t (phase 1, from HBM) and chunk c = t - lag (phase 2, from
//    L2) at once: chunk c does not change before this CTA writes it (in
//    place too), so only its statistics have to wait, not its read. Chunk c
//    goes to shared memory by cp.async (each thread copies its own vectors
//    and, when it normalises them, reads them where they landed) and chunk
//    t is loaded where it is summed, so that a CTA holds few registers
//    (40) and 3 CTAs of 512 threads fit per SM;
//  - sums chunk t (shifted sum and sum of squares) into partials[t] and
//    arrives on its group's counter with a release increment, which nothing
//    waits for (chunk 0 of each group also stores the group's shift);
//  - once chunk c's group counter shows every chunk arrived (acquire), one
//    warp combines the group's partials, in chunk order, into its
//    statistics, and the CTA normalises chunk c (loaded evict-first) with
//    streaming stores.
// No CTA waits for a higher ticket: with lag >= chunks per group, every
// chunk of the group that ticket t waits for has a ticket below t. So the
// kernel cannot deadlock, whatever the residency.
//
// Why this shape (bench/kernel_notes.md v22). The kernel is bound by how
// long a CTA lives, not by bytes: the earlier form (phase 2's read after
// phase 1's, a fence and a returning atomic per arrival, the last arrival
// publishing the statistics, per-vector channel arithmetic) ran at 2.2 TB/s
// even with its waits removed. Both reads at once, an arrival nothing waits
// for, whole-chunk fast paths and 3 CTAs per SM took the reference shape
// from 6.75 to ~6.0 ms on an H100; staging chunk c in shared memory (4 CTAs
// per SM at 64 registers, no spills), read evict-first, to ~5.65 ms (v24):
// a fourth CTA covers much of the wait for the group. Normalising straight
// from shared memory (no copy to registers first) is worth 1.5-2% on an
// H200 and nothing on an H100; loading chunk t where it is summed, to 48
// registers and 5 CTAs per SM with a lag of one group + 192, a further 5%
// on an H200 (4.37 ms) and 4.5% on an H100 (5.39 ms) (v26). Chunks of 512
// threads (64 KiB; 3 CTAs per SM at 40 registers) halve the ticket, block
// sum, partial and arrival per byte: 4.27-4.29 ms on an H200 and 5.31-5.32 ms
// on an H100, 1.4-1.6% faster than v26 in the same calls (v28).
//
// Bytes: the input once from HBM (plus what L2 drops within the lag), the
// output once. Numerics are the two-read schedule's (group_norm.cu): values
// shifted by the group's first value, at most 4 added in float before
// double, the partials combined in double in chunk order, the mean carried
// as hi + lo: bitwise the same output.

namespace fuseserve::cuda::group_norm_detail {
namespace {

using gpu_scope::FenceAcquireRelease;
using gpu_scope::IncrementRelease;
using gpu_scope::LoadAcquire;
using gpu_scope::LoadRelaxed;

// Past one group's chunks, how many more tickets the lag spans by default:
// 4 MiB of chunks. A shorter lag keeps more second reads in L2, a longer one
// waits less for the group, and the more CTAs run at once the longer the lag
// has to be. Measured at the reference shape (one group is 128 chunks of
// 64 KiB), the staged build at 3 CTAs per SM (bench/kernel_notes.md v28):
// lags of 160 / 192 / 224 chunks ran 4.32 / 4.27 / 4.29 ms on an H200 and
// 5.326 / 5.321 / 5.323 ms on an H100. With 32 KiB chunks the best was 448
// (one group + 192, 14 MiB, v26); the H100's L2 keeps ~12 MiB of second
// reads (v22).
constexpr int64_t kLagSlackChunks = 64;

// The chunk to normalise is staged in shared memory (kStagedChunkBytes,
// 64 KiB per CTA), so shared memory allows 3 CTAs per SM, which the
// registers are bounded for.
constexpr int kMinCtasPerSm = 3;

// Each group's arrival counter on its own 128-byte line: the counters are
// polled and incremented by hundreds of CTAs at once.
constexpr int64_t kCounterStride = 32;

// Scratch: partials (double2 per chunk), each group's shift (float), then
// the counters each launch zeroes, kCounterStride apart: arrivals per group,
// then the ticket.
struct LaggedLayout {
  GroupGeometry geometry;
  size_t partials_offset = 0;
  size_t shifts_offset = 0;
  size_t counters_offset = 0;
  size_t counters_bytes = 0;
  size_t total_bytes = 0;
};

LaggedLayout Layout(const GroupNormParams& p) {
  LaggedLayout layout;
  layout.geometry = Geometry(p);
  const auto groups = static_cast<size_t>(layout.geometry.total_groups);
  layout.partials_offset = 0;
  layout.shifts_offset =
      RoundUp16(static_cast<size_t>(layout.geometry.total_chunks) * sizeof(double2));
  // A whole line per counter (a cudaMalloc'd workspace is 256-byte aligned).
  layout.counters_offset = (layout.shifts_offset + groups * sizeof(float) + 127) / 128 * 128;
  layout.counters_bytes = (groups + 1) * static_cast<size_t>(kCounterStride) * sizeof(unsigned int);
  layout.total_bytes = layout.counters_offset + layout.counters_bytes;
  return layout;
}

// Phase 1 for chunk `t` (at `span`), this thread's vectors of it in
// `loaded`: its partial, then the arrival. Block-uniform; synchronises the
// block (BlockSum2).
template <bool kGelu, typename Vectors>
__device__ __forceinline__ void SumChunk(const OneReadArgs& a, int64_t t, const ChunkSpan& span,
                                         const Vectors& loaded) {
  const float shift = GroupShift<kGelu>(a, span);
  const double2 total = ChunkPartial<kGelu>(span, loaded, shift);
  if (threadIdx.x == 0) {
    if (span.begin == 0) a.shifts[span.group] = shift;
    a.partials[t] = total;
    // Release: the partial (and shift) are visible to whoever acquires the
    // count that includes this arrival.
    IncrementRelease(a.arrivals + span.group * kCounterStride);
  }
}

// By one warp: group `group`'s statistics (PackStats), valid in every lane,
// once every chunk of the group has arrived. `early_count` is each lane's
// relaxed read of the group's counter, issued before the CTA's own sum: if
// it shows every chunk arrived, a fence makes it an acquire and the wait
// costs no round trip; otherwise the warp polls with acquire loads.
__device__ __forceinline__ float4 GroupStats(const OneReadArgs& a, int64_t group,
                                             unsigned int early_count) {
  const auto chunks = static_cast<unsigned int>(a.chunks_per_group);
  const unsigned int* arrivals = a.arrivals + group * kCounterStride;
  if (__all_sync(0xffffffffu, early_count == chunks)) {
    FenceAcquireRelease();
  } else {
    unsigned int backoff = 32;
    while (!__all_sync(0xffffffffu, LoadAcquire(arrivals) == chunks)) {
      __nanosleep(backoff);
      backoff = min(backoff * 2, 256u);
    }
  }
  const int lane = static_cast<int>(threadIdx.x & 31);
  double group_sum = 0.0;
  double group_squares = 0.0;
  for (int64_t chunk = lane; chunk < a.chunks_per_group; chunk += 32) {
    const double2 partial = __ldcg(a.partials + group * a.chunks_per_group + chunk);
    group_sum += partial.x;
    group_squares += partial.y;
  }
  return StatsFromLaneSums(group_sum, group_squares,
                           static_cast<double>(__ldcg(a.shifts + group)), a.group_size, a.eps);
}


// Ticket t's work: sum chunk t, normalise chunk t - lag. Copies chunk
// t - lag to `staged` first and loads chunk t where it sums it.
// Block-uniform.
template <bool kGelu>
__device__ __forceinline__ void RunTicket(const OneReadArgs& a, int64_t t, float4* staged) {
  __shared__ float4 group_stats;
  const bool has_sum = t < a.total_chunks;
  const bool has_normalize = t >= a.lag;
  const int64_t c = t - a.lag;
  if (has_normalize) StageChunk<StagedLines::kEvictFirst>(a, c, staged);
  const bool stats_warp = has_normalize && threadIdx.x / 32 == kStatsWarp;
  const int64_t group = Quotient32(c, a.chunks_per_group);
  const unsigned int early_count =
      stats_warp ? LoadRelaxed(a.arrivals + group * kCounterStride) : 0;
  if (has_sum) {
    const ChunkSpan span = SpanOf(a, t);
    SumChunk<kGelu>(a, t, span, GlobalVectorsOfThread{FirstOf(a, span, a.input)});
  }
  if (has_normalize) {
    if (stats_warp) {
      const float4 stats = GroupStats(a, group, early_count);
      if (threadIdx.x % 32 == 0) group_stats = stats;
    }
    __syncthreads();
    const ChunkSpan span = SpanOf(a, c);
    NormalizeStaged<kGelu>(a, span, group_stats, FirstChannelAffine(a, span), WaitStaged(staged));
  }
}

// One CTA per ticket, with kStagedChunkBytes of dynamic shared memory; bounded
// to 40 registers (no spills) so that 3 fit per SM.
template <bool kGelu>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) LaggedGroupNormKernel(OneReadArgs a) {
  extern __shared__ float4 staged[];
  __shared__ unsigned int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(a.ticket, 1u);
  __syncthreads();
  RunTicket<kGelu>(a, ticket, staged);
}

}  // namespace

int64_t DefaultLagChunks(const GroupNormParams& params) {
  const LaggedLayout layout = Layout(params);
  return std::min(layout.geometry.chunks_per_group + kLagSlackChunks, layout.geometry.total_chunks);
}

bool LaggedEligible(const GroupNormParams& params, const float* input, const float* output,
                    int64_t lag_chunks) {
  const LaggedLayout layout = Layout(params);
  return OneReadShapeEligible(params, input, output) &&
         lag_chunks >= layout.geometry.chunks_per_group &&
         lag_chunks <= layout.geometry.total_chunks &&
         layout.geometry.total_chunks + lag_chunks <= std::numeric_limits<int32_t>::max();
}

size_t LaggedWorkspaceBytes(const GroupNormParams& params) { return Layout(params).total_bytes; }

absl::Status LaunchLaggedGroupNorm(const GroupNormParams& params, const float* input,
                                   const float* weight, const float* bias, float* output,
                                   void* workspace, int64_t lag_chunks, int ctas_per_sm,
                                   cudaStream_t stream) {
  const LaggedLayout layout = Layout(params);
  char* base = static_cast<char*>(workspace);
  auto* counters = reinterpret_cast<unsigned int*>(base + layout.counters_offset);
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(counters, 0, layout.counters_bytes, stream),
                             "GroupNorm counters memset"));
  OneReadArgs args = ArgsFor(params, layout.geometry, input, weight, bias, output);
  args.partials = reinterpret_cast<double2*>(base + layout.partials_offset);
  args.shifts = reinterpret_cast<float*>(base + layout.shifts_offset);
  args.arrivals = counters;
  args.lag = lag_chunks;
  args.ticket = counters + layout.geometry.total_groups * kCounterStride;
  const auto blocks = static_cast<unsigned int>(layout.geometry.total_chunks + lag_chunks);
  void (*const kernel)(OneReadArgs) = params.prologue == GroupNormPrologue::kGeluErf
                                         ? LaggedGroupNormKernel<true>
                                         : LaggedGroupNormKernel<false>;
  ASSIGN_OR_RETURN(
      const size_t shared_bytes,
      ResidencyPadding(reinterpret_cast<const void*>(kernel), ctas_per_sm, kStagedChunkBytes));
  kernel<<<blocks, kThreads, shared_bytes, stream>>>(args);
  return CudaStatus(cudaGetLastError(), "GroupNorm (lagged) kernel launch");
}

}  // namespace fuseserve::cuda::group_norm_detail
