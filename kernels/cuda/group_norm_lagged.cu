#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gpu_scope.cuh"
#include "kernels/cuda/group_norm_common.cuh"
#include "kernels/cuda/group_norm_lagged.h"

// Schedule. The two-read schedule (group_norm.cu) reads the input from HBM
// twice: once for the statistics, once to normalise. Here one kernel does
// both, one CTA per chunk of kChunkElements, and the normalisation of a
// chunk runs `lag` chunks after its statistics, early enough that the chunk
// is still in L2 for its second read:
//  - each CTA takes a ticket t (an atomic counter: tickets are handed out in
//    the order CTAs start, so every lower ticket belongs to a CTA that is
//    running or done);
//  - phase 1 (t < chunks): the shifted sum and sum of squares of chunk t
//    into partials[t], then an arrival on its group's counter; the CTA that
//    arrives last combines the group's partials (in chunk order: the result
//    does not depend on who is last) into its statistics and sets the
//    group's ready flag (release);
//  - phase 2 (t >= lag): chunk c = t - lag is normalised once its group is
//    ready (acquire), read with evict-first loads and written with
//    streaming stores.
// No CTA waits for a higher ticket: with lag >= chunks per group, every
// chunk of the group that ticket t waits for has a ticket below t. So the
// kernel cannot deadlock, whatever the residency.
//
// Bytes: the input once from HBM (plus what L2 drops within the lag), the
// output once. The lag is the trade: too short, and phase 2 waits for its
// group's last chunks; too long, and the chunk has left L2.
//
// Numerics are the two-read schedule's (group_norm.cu): values shifted by
// the group's first value, at most 4 added in float before double, the
// partials combined in double, the mean carried as hi + lo.

namespace fuseserve::cuda::group_norm_detail {
namespace {

using gpu_scope::LoadAcquire;
using gpu_scope::StoreRelease;

// Past one group's chunks, how many more tickets the lag spans by default:
// 4 MiB of chunks. Measured on an H200 at the reference shape (one group is
// 256 chunks): lags of 288 / 384 / 512 / 768 chunks ran 5.15 / 5.00 / 5.50
// / 5.49 ms, the two-read schedule 5.30 (bench/kernel_notes.md v5).
constexpr int64_t kLagSlackChunks = 128;

struct LaggedLayout {
  GroupGeometry geometry;
  size_t partials_offset = 0;  // double2 per chunk
  size_t stats_offset = 0;     // float4 per group
  size_t counters_offset = 0;  // int32 arrivals and ready per group, then the ticket
  size_t counters_bytes = 0;
  size_t total_bytes = 0;
};

size_t RoundUp16(size_t bytes) { return (bytes + 15) / 16 * 16; }

LaggedLayout Layout(const GroupNormParams& p) {
  LaggedLayout layout;
  layout.geometry = Geometry(p);
  const auto groups = static_cast<size_t>(layout.geometry.total_groups);
  layout.partials_offset = 0;
  layout.stats_offset =
      RoundUp16(static_cast<size_t>(layout.geometry.total_chunks) * sizeof(double2));
  layout.counters_offset = layout.stats_offset + groups * sizeof(float4);
  layout.counters_bytes = RoundUp16((2 * groups + 1) * 4);
  layout.total_bytes = layout.counters_offset + layout.counters_bytes;
  return layout;
}

struct LaggedArgs {
  const float* input;
  const float* weight;  // [channels] or null
  const float* bias;    // [channels] or null
  float* output;        // may equal input
  int64_t group_size;
  int64_t chunks_per_group;
  int64_t total_chunks;
  int64_t lag;
  int64_t num_groups;
  int64_t channels_per_group;
  int64_t spatial_size;
  float eps;
  double2* partials;
  float4* stats;
  int* arrivals;
  int* ready;
  unsigned int* ticket;
};

template <bool kGelu>
__global__ void __launch_bounds__(kThreads) LaggedGroupNormKernel(LaggedArgs a) {
  __shared__ unsigned int ticket;
  __shared__ bool last_arrival;
  __shared__ float4 group_stats;
  if (threadIdx.x == 0) ticket = atomicAdd(a.ticket, 1u);
  __syncthreads();
  const int64_t t = ticket;

  if (t < a.total_chunks) {
    const int64_t group = t / a.chunks_per_group;
    const int64_t begin = (t - group * a.chunks_per_group) * kChunkElements;
    const int count = static_cast<int>((min(begin + kChunkElements, a.group_size) - begin) / 4);
    const float* x = a.input + group * a.group_size;
    // Not __ldg: with output == input, other CTAs write this tensor.
    const float shift = Prologue<kGelu>(x[0]);
    const float4* vectors = reinterpret_cast<const float4*>(x + begin);
    float4 loaded[kVectorsPerThread];
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < count) loaded[i] = vectors[index];
    }
    double sum = 0.0;
    double sum_squares = 0.0;
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < count) AddShifted4<kGelu>(loaded[i], shift, sum, sum_squares);
    }
    const double2 total = BlockSum2(sum, sum_squares);
    if (threadIdx.x == 0) {
      a.partials[t] = total;
      __threadfence();
      last_arrival = atomicAdd(a.arrivals + group, 1) == a.chunks_per_group - 1;
    }
    __syncthreads();
    if (last_arrival && threadIdx.x < 32) {
      __threadfence();
      const int lane = static_cast<int>(threadIdx.x);
      double group_sum = 0.0;
      double group_squares = 0.0;
      for (int64_t chunk = lane; chunk < a.chunks_per_group; chunk += 32) {
        const double2 partial = __ldcg(a.partials + group * a.chunks_per_group + chunk);
        group_sum += partial.x;
        group_squares += partial.y;
      }
      group_sum = WarpSum(group_sum);
      group_squares = WarpSum(group_squares);
      if (lane == 0) {
        const double n = static_cast<double>(a.group_size);
        const double shifted_mean = group_sum / n;
        const double variance = ClampVariance(group_squares / n - shifted_mean * shifted_mean);
        a.stats[group] = PackStats(static_cast<double>(shift) + shifted_mean, variance, a.eps);
        __threadfence();
        StoreRelease(a.ready + group, 1);
      }
    }
  }

  if (t >= a.lag) {
    const int64_t c = t - a.lag;
    const int64_t group = c / a.chunks_per_group;
    if (threadIdx.x == 0) {
      while (LoadAcquire(a.ready + group) == 0) __nanosleep(64);
      group_stats = __ldcg(a.stats + group);
    }
    __syncthreads();
    const float mean_hi = group_stats.x;
    const float mean_lo = group_stats.y;
    const float rstd = group_stats.z;
    const int64_t begin = (c - group * a.chunks_per_group) * kChunkElements;
    const int count = static_cast<int>((min(begin + kChunkElements, a.group_size) - begin) / 4);
    const int64_t base = group * a.group_size + begin;
    const int64_t first_channel = (group % a.num_groups) * a.channels_per_group;
    const float4* in = reinterpret_cast<const float4*>(a.input + base);
    float4* out = reinterpret_cast<float4*>(a.output + base);
    float4 loaded[kVectorsPerThread];
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < count) loaded[i] = __ldcs(in + index);
    }
    // 32-bit division whenever the group allows it.
    const bool narrow = a.group_size <= int64_t{std::numeric_limits<uint32_t>::max()};
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int index = static_cast<int>(threadIdx.x) + i * kThreads;
      if (index < count) {
        const int64_t offset = begin + int64_t{index} * 4;
        const int64_t channel =
            first_channel + (narrow ? static_cast<int64_t>(static_cast<uint32_t>(offset) /
                                                           static_cast<uint32_t>(a.spatial_size))
                                    : offset / a.spatial_size);
        const float scale = rstd * LoadOr(a.weight, channel, 1.0f);
        __stcs(out + index, Normalize4<kGelu>(loaded[i], mean_hi, mean_lo, scale,
                                              LoadOr(a.bias, channel, 0.0f)));
      }
    }
  }
}

// Dynamic shared memory a launch may ask for without opting in.
constexpr size_t kDefaultDynamicSharedLimit = 48 * 1024;

// Shared memory per SM of `device`, read once per device (launches are on
// the per-batch path).
absl::StatusOr<int> SharedMemoryPerSm(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  if (device >= 0 && device < kMaxDevices) {
    const int cached = cache[device].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  int per_sm = 0;
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
      "shared memory per SM"));
  if (device >= 0 && device < kMaxDevices) cache[device].store(per_sm, std::memory_order_relaxed);
  return per_sm;
}

// Raises `kernel`'s dynamic shared-memory limit on `device` to at least
// `bytes`, calling the runtime only when a launch needs more than was set
// before (once per device and variant in practice: launches are on the
// per-batch path).
absl::Status OptInDynamicShared(const void* kernel, bool gelu, int device, int bytes) {
  constexpr int kMaxDevices = 64;
  static std::array<std::array<std::atomic<int>, kMaxDevices>, 2> opted_in{};
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable && opted_in[gelu ? 1 : 0][device].load(std::memory_order_relaxed) >= bytes) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                 "GroupNorm (lagged) shared memory cap"));
  if (cacheable) {
    std::atomic<int>& slot = opted_in[gelu ? 1 : 0][device];
    int seen = slot.load(std::memory_order_relaxed);
    while (seen < bytes && !slot.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t DefaultLagChunks(const GroupNormParams& params) {
  const LaggedLayout layout = Layout(params);
  return std::min(layout.geometry.chunks_per_group + kLagSlackChunks, layout.geometry.total_chunks);
}

bool LaggedEligible(const GroupNormParams& params, const float* input, const float* output,
                    int64_t lag_chunks) {
  const LaggedLayout layout = Layout(params);
  return Aligned16(input) && Aligned16(output) && params.spatial_size % 4 == 0 &&
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
  auto* counters = reinterpret_cast<int*>(base + layout.counters_offset);
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(counters, 0, layout.counters_bytes, stream),
                             "GroupNorm counters memset"));
  LaggedArgs args{};
  args.input = input;
  args.weight = weight;
  args.bias = bias;
  args.output = output;
  args.group_size = layout.geometry.group_size;
  args.chunks_per_group = layout.geometry.chunks_per_group;
  args.total_chunks = layout.geometry.total_chunks;
  args.lag = lag_chunks;
  args.num_groups = params.num_groups;
  args.channels_per_group = params.channels / params.num_groups;
  args.spatial_size = params.spatial_size;
  args.eps = params.eps;
  args.partials = reinterpret_cast<double2*>(base + layout.partials_offset);
  args.stats = reinterpret_cast<float4*>(base + layout.stats_offset);
  args.arrivals = counters;
  args.ready = counters + layout.geometry.total_groups;
  args.ticket = reinterpret_cast<unsigned int*>(counters + 2 * layout.geometry.total_groups);
  const auto blocks = static_cast<unsigned int>(layout.geometry.total_chunks + lag_chunks);
  auto* kernel = params.prologue == GroupNormPrologue::kGeluErf ? LaggedGroupNormKernel<true>
                                                                : LaggedGroupNormKernel<false>;
  size_t shared_bytes = 0;
  if (ctas_per_sm > 0) {
    int device = 0;
    RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
    ASSIGN_OR_RETURN(const int per_sm, SharedMemoryPerSm(device));
    // Each CTA also holds its static shared memory and 1 KiB the system
    // reserves per CTA; the rest is padding that keeps the next CTA out.
    constexpr size_t kPerCtaOverhead = 2048;
    const size_t share = static_cast<size_t>(per_sm) / static_cast<size_t>(ctas_per_sm);
    shared_bytes = share > kPerCtaOverhead ? share - kPerCtaOverhead : 0;
    if (shared_bytes > kDefaultDynamicSharedLimit) {
      RETURN_IF_ERROR(OptInDynamicShared(reinterpret_cast<const void*>(kernel),
                                         params.prologue == GroupNormPrologue::kGeluErf, device,
                                         static_cast<int>(shared_bytes)));
    }
  }
  kernel<<<blocks, kThreads, shared_bytes, stream>>>(args);
  return CudaStatus(cudaGetLastError(), "GroupNorm (lagged) kernel launch");
}

}  // namespace fuseserve::cuda::group_norm_detail
