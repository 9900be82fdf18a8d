// L2 reuse probe for the GroupNorm family (bench/kernel_notes.md v22).
//
// A one-read GroupNorm reads each chunk twice: once for the statistics and,
// some distance later, again to normalise it, hoping the second read hits
// L2. This probe measures how many second reads L2 serves as a function of
// that distance and of WHICH SM makes the second read, with no waiting at
// all (no statistics, no flags): the best any schedule of that shape can do.
//
//   ticket          chunk t read by the CTA with ticket t, re-read (and
//                   written) by ticket t + lag: any SM (the lagged kernel)
//   static_same     a persistent grid of G CTAs; CTA b reads chunk kG + b in
//                   iteration k and re-reads chunk (k - L)G + b: the same SM
//   static_rotated  the same, but re-reads chunk (k - L)G + (b + G/2) % G,
//                   which another SM read: a control for static_same
//   copy            read once, write once (the copy rate)
//   ring K/P/D      a persistent grid of 256-thread CTAs, each with a ring
//                   of K 32 KiB chunks in shared memory: chunk i of the CTA
//                   copied in by cp.async P iterations ahead, summed (two
//                   block barriers, like a partial), and written out from
//                   shared memory D iterations later. One read, one write,
//                   and no second read at all: the traffic of a GroupNorm
//                   that keeps each chunk on its SM until its group is done
//   oneshot BxV     a copy shaped as PyTorch's elementwise kernels: one CTA
//                   of B threads per B * V float4, no loop
//   shapes          the ticket traffic (V=8) with other access shapes: the
//                   ticket from blockIdx instead of an atomic, warp-
//                   contiguous vectors, chunk t by one bulk copy (TMA) into
//                   shared memory, and both chunks by bulk copies with the
//                   output written back by a bulk store
//   fabric          for ncu's L2 fabric counters (scripts/gpu/fabric_probe.sh;
//                   kernel_notes v29), each launch after one untimed one: a
//                   copy; the ticket traffic at 8, 12 and 16 MiB lags, each
//                   followed by sm_local, the same traffic with the second
//                   read on the SM of the first (the CTA with the k-th
//                   position on its SM re-reads the chunk of that SM's
//                   (k - L)-th, L = 1, 2, 3; each SM's last L chunks are not
//                   re-read); then a persistent grid of one CTA per SM whose
//                   second read (12 MiB later) is of a chunk that the SM with
//                   id smid ^ k read first (k = 0: itself, 1: its TPC pair,
//                   ...): does the SM that re-reads a line decide whether it
//                   crosses between the two L2 partitions?
//   l2_read         every CTA re-reads (ld.global.cg) a buffer that fits in
//                   L2, again and again: L2's read rate into the SMs
//   l2_read_write   the same, each vector also written to a second buffer
//                   that fits in L2: L2's rate for the lagged kernel's
//                   L2 traffic without DRAM (a second read and a write)
//
// Build and run (on the GPU host):
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/probe bench/l2_reuse_probe.cu
//   /tmp/probe [gib=2] [ctas_per_sm=4] [l2 | oneshot | shapes: only those rows; ring: the
//               copy and ticket rows, then the ring rows; ring and oneshot run
//               with .cs and with write-back stores; ring512: the copy and
//               ticket rows, then 64 KiB-chunk rings (kernel_notes v36);
//               fabric: those rows]
// Prints a table; every row also as one JSON line.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cuda_check.h"
#include "kernels/cuda/hopper.cuh"

namespace {

namespace hopper = fuseserve::cuda::hopper;

constexpr int kThreads = 256;

struct Args {
  const float4* in;
  float4* out;
  long long chunks;       // chunks of kV * kThreads float4
  long long lag;          // ticket mode: chunks between the two reads
  int rounds;             // static modes: L
  int grid;               // static modes: G
  unsigned int* ticket;
  float* sink;
  bool plain_stores;      // st.global (write-back) instead of st.global.cs
};

__device__ __forceinline__ void Store(const Args& a, float4* to, float4 v) {
  if (a.plain_stores) {
    *to = v;
  } else {
    __stcs(to, v);
  }
}

// What every mode does to a vector it writes: one FMA per value.
__device__ __forceinline__ float4 Scaled(float4 v) {
  return make_float4(v.x * 1.5f + 0.25f, v.y * 1.5f + 0.25f, v.z * 1.5f + 0.25f,
                     v.w * 1.5f + 0.25f);
}

// This thread's vector i of a chunk: interleaved (tid + i * kThreads), or
// warp-contiguous (each warp's 32 kV vectors in a row).
template <int kV, bool kWarpContiguous>
__device__ __forceinline__ int VectorIndex(int i) {
  if constexpr (kWarpContiguous) {
    return static_cast<int>((threadIdx.x / 32) * 32 * kV + i * 32 + threadIdx.x % 32);
  }
  return static_cast<int>(threadIdx.x + i * kThreads);
}

// Chunk `second`'s vectors (`y`), scaled, to the output.
template <int kV, bool kWarpContiguous = false>
__device__ __forceinline__ void WriteScaled(const Args& a, long long second, const float4 (&y)[kV]) {
  float4* o = a.out + second * (kV * kThreads);
#pragma unroll
  for (int i = 0; i < kV; ++i) Store(a, o + VectorIndex<kV, kWarpContiguous>(i), Scaled(y[i]));
}

template <int kV, bool kWarpContiguous = false>
__device__ __forceinline__ void Phase(const Args& a, long long first, long long second,
                                      float& acc) {
  float4 x[kV];
  float4 y[kV];
  const bool has_first = first >= 0 && first < a.chunks;
  const bool has_second = second >= 0 && second < a.chunks;
  const float4* p1 = a.in + first * (kV * kThreads);
  const float4* p2 = a.in + second * (kV * kThreads);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    if (has_first) x[i] = p1[VectorIndex<kV, kWarpContiguous>(i)];
    if (has_second) y[i] = __ldcs(p2 + VectorIndex<kV, kWarpContiguous>(i));
  }
  if (has_first) {
#pragma unroll
    for (int i = 0; i < kV; ++i) acc += x[i].x + x[i].y + x[i].z + x[i].w;
  }
  if (has_second) WriteScaled<kV, kWarpContiguous>(a, second, y);
}

template <int kV>
__global__ void __launch_bounds__(kThreads) TicketKernel(Args a) {
  __shared__ unsigned int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(a.ticket, 1u);
  __syncthreads();
  const long long t = ticket;
  float acc = 0.f;
  Phase<kV>(a, t, t - a.lag, acc);
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

template <int kV, bool kRotate>
__global__ void __launch_bounds__(kThreads) StaticKernel(Args a) {
  const long long b = blockIdx.x;
  const long long g = a.grid;
  const long long partner = kRotate ? (b + g / 2) % g : b;
  float acc = 0.f;
  for (long long k = 0;; ++k) {
    const long long first = k * g + b;
    const long long second = k >= a.rounds ? (k - a.rounds) * g + partner : -1;
    if (first >= a.chunks && k >= a.rounds && second >= a.chunks) break;
    Phase<kV>(a, first, second, acc);
  }
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

template <int kV>
__global__ void __launch_bounds__(kThreads) CopyKernel(Args a) {
  const long long vectors = a.chunks * kV * kThreads;
  for (long long i = blockIdx.x * (long long)kThreads + threadIdx.x; i < vectors;
       i += (long long)gridDim.x * kThreads) {
    const float4 v = Scaled(a.in[i]);
    Store(a, a.out + i, v);
  }
}

// The fabric mode's persistent grid (one CTA per SM, all resident): CTA
// b first maps SM ids to CTAs, then in iteration k reads chunk kG + b
// (ld.global.cg: L2, not L1) and re-reads chunk (k - L)G + p, where p is
// the CTA on SM smid ^ xor_partner (itself when there is none), and writes
// it. Every chunk is re-read once when the partner map is a permutation
// (xor is); `rounds` sets the distance.
__global__ void __launch_bounds__(kThreads) SmPartnerKernel(Args a, int xor_partner,
                                                            int* cta_of_sm, unsigned int* arrived) {
  constexpr int kV = 8;
  unsigned int smid = 0;
  unsigned int nsmid = 0;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
  __shared__ long long partner;
  if (threadIdx.x == 0) {
    cta_of_sm[smid] = static_cast<int>(blockIdx.x);
    __threadfence();
    atomicAdd(arrived, 1u);
    while (atomicAdd(arrived, 0u) < gridDim.x) {
    }
    const unsigned int other = smid ^ static_cast<unsigned int>(xor_partner);
    const int p = other < nsmid ? atomicAdd(cta_of_sm + other, 0) : -1;
    partner = p >= 0 ? p : blockIdx.x;
  }
  __syncthreads();
  const long long b = blockIdx.x;
  const long long g = gridDim.x;
  float acc = 0.f;
  for (long long k = 0;; ++k) {
    const long long first = k * g + b;
    const long long second = k >= a.rounds ? (k - a.rounds) * g + partner : -1;
    if (first >= a.chunks && second >= a.chunks) break;
    const float4* p1 = a.in + first * (kV * kThreads);
    const float4* p2 = a.in + second * (kV * kThreads);
    float4 x[kV];
    float4 y[kV];
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      if (first < a.chunks) x[i] = __ldcg(p1 + threadIdx.x + i * kThreads);
      if (second >= 0 && second < a.chunks) y[i] = __ldcg(p2 + threadIdx.x + i * kThreads);
    }
    if (first < a.chunks) {
#pragma unroll
      for (int i = 0; i < kV; ++i) acc += x[i].x + x[i].y + x[i].z + x[i].w;
    }
    if (second >= 0 && second < a.chunks) WriteScaled<kV>(a, second, y);
  }
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

// The fabric mode's sm_local traffic: ticket t sums chunk t and re-reads
// (and writes) the chunk that the CTA with this SM's (k - L)-th local
// ticket summed, where k is its own local ticket. `local` is [sms][kRing]
// (k << 32 | t, so that a slot is read only once it holds entry k - L) and
// then [sms] counters.
constexpr int kRing = 64;
__global__ void __launch_bounds__(kThreads) SmLocalKernel(Args a, int local_lag,
                                                          unsigned long long* local) {
  constexpr int kV = 8;
  __shared__ long long pair[2];
  if (threadIdx.x == 0) {
    unsigned int smid = 0;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    const long long t = atomicAdd(a.ticket, 1u);
    unsigned long long* ring = local + smid * kRing;
    auto* counter = reinterpret_cast<unsigned int*>(local + 1024 * kRing) + smid * 32;
    const long long k = atomicAdd(counter, 1u);
    __stcg(ring + k % kRing, (static_cast<unsigned long long>(k) << 32) | t);
    long long c = -1;
    if (k >= local_lag) {
      const unsigned long long want = static_cast<unsigned long long>(k - local_lag);
      unsigned long long e;
      do {
        e = __ldcg(ring + (k - local_lag) % kRing);
      } while ((e >> 32) != want);
      c = static_cast<long long>(e & 0xffffffffu);
    }
    pair[0] = t;
    pair[1] = c;
  }
  __syncthreads();
  float acc = 0.f;
  Phase<kV>(a, pair[0], pair[1], acc);
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

// The ring mode (see the top). Chunks kV * kT float4 (kT threads per CTA;
// the ring512 mode uses 512, the chunk of v28's GroupNorm); CTA b takes
// chunks b, b + G, b + 2G, ...
template <int kK, int kP, int kD, int kT = kThreads>
__global__ void __launch_bounds__(kT) RingKernel(Args a) {
  constexpr int kV = 8;
  static_assert(kK >= kP + kD + 1, "a slot is refilled only after it was written out");
  extern __shared__ float4 ring[];
  __shared__ float partial[kT / 32];
  const long long g = gridDim.x;
  const long long iterations = (a.chunks - blockIdx.x + g - 1) / g;
  auto copy_in = [&](long long i) {
    if (i < iterations) {
      const float4* from = a.in + (i * g + blockIdx.x) * (kV * kT);
      float4* slot = ring + (i % kK) * (kV * kT);
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const int index = threadIdx.x + v * kT;
        const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(slot + index));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from + index)
                     : "memory");
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  for (int i = 0; i < kP; ++i) copy_in(i);
  float acc = 0.f;
  for (long long i = 0; i < iterations + kD; ++i) {
    copy_in(i + kP);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kP) : "memory");
    if (i < iterations) {
      const float4* slot = ring + (i % kK) * (kV * kT);
      float sum = 0.f;
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const float4 x = slot[threadIdx.x + v * kT];
        sum += x.x + x.y + x.z + x.w;
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      }
      if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
      __syncthreads();
      if (threadIdx.x == 0) {
        float total = 0.f;
        for (int w = 0; w < kT / 32; ++w) total += partial[w];
        acc += total;
      }
      __syncthreads();
    }
    const long long out = i - kD;
    if (out >= 0 && out < iterations) {
      const float4* slot = ring + (out % kK) * (kV * kT);
      float4* to = a.out + (out * g + blockIdx.x) * (kV * kT);
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const float4 x = Scaled(slot[threadIdx.x + v * kT]);
        Store(a, to + threadIdx.x + v * kT, x);
      }
    }
  }
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

// The ticket kernel's traffic in other access shapes (the `shapes` mode).
enum class Shape { kInterleaved, kBlockIdx, kWarpContiguous, kBulkFirst, kBulkAll };

// The bulk shapes: chunk t (and with kBulkAll chunk c) by one bulk copy
// into shared memory, completing on an mbarrier (hopper.cuh's helpers); with
// kBulkAll the scaled chunk c goes back by one bulk store.
template <Shape kShape>
__global__ void __launch_bounds__(kThreads) ShapedTicketKernel(Args a) {
  constexpr int kV = 8;
  constexpr uint32_t kChunkBytes = 16 * kV * kThreads;
  constexpr bool kBulk = kShape == Shape::kBulkFirst || kShape == Shape::kBulkAll;
  extern __shared__ float4 staged[];  // kBulk*: chunk t, then chunk c
  __shared__ unsigned int ticket;
  __shared__ alignas(8) uint64_t barrier;
  if (threadIdx.x == 0) {
    ticket = kShape == Shape::kBlockIdx ? blockIdx.x : atomicAdd(a.ticket, 1u);
    if (kBulk) {
      hopper::MbarrierInit(&barrier, 1);
      hopper::FenceMbarrierInit();
    }
  }
  __syncthreads();
  const long long t = ticket;
  const long long c = t - a.lag;
  float acc = 0.f;
  if constexpr (!kBulk) {
    Phase<kV, kShape == Shape::kWarpContiguous>(a, t, c, acc);
  } else {
    const bool has_first = t < a.chunks;
    const bool has_second = c >= 0;
    const float4* p2 = a.in + c * (kV * kThreads);
    float4* slot = staged + kV * kThreads;  // chunk c, with kBulkAll
    if (threadIdx.x == 0) {
      const uint32_t bytes = (has_first ? kChunkBytes : 0) +
                             (kShape == Shape::kBulkAll && has_second ? kChunkBytes : 0);
      hopper::MbarrierArriveExpectBytes(&barrier, bytes);
      if (has_first) {
        hopper::BulkCopyToShared(staged, a.in + t * (kV * kThreads), kChunkBytes, &barrier);
      }
      if (kShape == Shape::kBulkAll && has_second) {
        hopper::BulkCopyToShared(slot, p2, kChunkBytes, &barrier);
      }
    }
    float4 y[kV];
    if (kShape == Shape::kBulkFirst && has_second) {
#pragma unroll
      for (int i = 0; i < kV; ++i) y[i] = __ldcs(p2 + VectorIndex<kV, false>(i));
    }
    hopper::MbarrierWait(&barrier, 0);
    if (has_first) {
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const float4 x = staged[VectorIndex<kV, false>(i)];
        acc += x.x + x.y + x.z + x.w;
      }
    }
    if (kShape == Shape::kBulkFirst && has_second) WriteScaled<kV>(a, c, y);
    if (kShape == Shape::kBulkAll && has_second) {
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const int index = VectorIndex<kV, false>(i);
        slot[index] = Scaled(slot[index]);
      }
      hopper::FenceProxyAsyncShared();
      __syncthreads();
      if (threadIdx.x == 0) {
        asm volatile(
            "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
            "cp.async.bulk.commit_group;\n"
            "cp.async.bulk.wait_group.read 0;\n" ::"l"(a.out + c * (kV * kThreads)),
            "r"(hopper::SharedAddress(slot)), "r"(kChunkBytes)
            : "memory");
      }
    }
  }
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

// One-shot copy, as PyTorch's elementwise kernels are shaped: a CTA of
// kBlock threads per kBlock * kVectors float4 (each thread loads its kVectors
// vectors, kBlock apart, then stores them), one CTA per block of the tensor.
template <int kBlock, int kVectors>
__global__ void __launch_bounds__(kBlock) OneShotCopyKernel(Args a) {
  const long long base = blockIdx.x * (long long)(kBlock * kVectors) + threadIdx.x;
  float4 v[kVectors];
#pragma unroll
  for (int i = 0; i < kVectors; ++i) v[i] = a.in[base + i * kBlock];
#pragma unroll
  for (int i = 0; i < kVectors; ++i) {
    v[i] = Scaled(v[i]);
    Store(a, a.out + base + i * kBlock, v[i]);
  }
}

// `passes` sweeps over `vectors` float4 of a.in (resident in L2 after the
// first), grid-strided; with kWrite each vector also goes to a.out.
template <bool kWrite>
__global__ void __launch_bounds__(kThreads) L2Kernel(Args a, long long vectors, int passes) {
  float acc = 0.f;
  const long long stride = (long long)gridDim.x * kThreads;
  for (int pass = 0; pass < passes; ++pass) {
    for (long long i = blockIdx.x * (long long)kThreads + threadIdx.x; i < vectors; i += stride) {
      const float4 v = __ldcg(a.in + i);
      if constexpr (kWrite) {
        __stcg(a.out + i, v);
      } else {
        acc += v.x + v.y + v.z + v.w;
      }
    }
  }
  if (acc == -12345.f) a.sink[blockIdx.x] = acc;
}

struct Probe {
  Args args{};
  int sms = 0;
  int ctas_per_sm = 4;
  size_t pad = 0;
  char* flush = nullptr;
  size_t flush_bytes = size_t{512} << 20;
  cudaEvent_t start{}, stop{};

  template <typename Kernel>
  void Prepare(Kernel kernel) {
    if (pad > 48 * 1024)
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(pad)));
  }

  // Median of `trials` launches, L2 flushed before each.
  template <typename Launch>
  float Time(Launch launch, int trials = 7) {
    std::vector<float> times;
    for (int i = 0; i < trials + 1; ++i) {
      CHECK(cudaMemsetAsync(flush, i, flush_bytes));
      CHECK(cudaMemsetAsync(args.ticket, 0, 4));
      CHECK(cudaEventRecord(start));
      launch();
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i > 0) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

void Report(const char* mode, int v, double lag_mib, float ms, double bytes, double copy_ms) {
  // Implied fraction of second reads served from DRAM, if the copy rate
  // bounds the run: time * rate = 2S + f S.
  const double s = bytes / 2;  // one pass over the input
  const double f = copy_ms > 0 ? (ms / copy_ms * 2 * s - 2 * s) / s : 0;
  std::printf("%-15s V=%d lag %7.2f MiB  %8.3f ms  %6.2f TB/s(1R+1W)  second reads from DRAM ~%5.1f%%\n",
              mode, v, lag_mib, ms, bytes / ms / 1e9, 100 * f);
  std::printf("{\"mode\":\"%s\",\"v\":%d,\"lag_mib\":%.3f,\"ms\":%.4f,\"dram_second_fraction\":%.3f}\n",
              mode, v, lag_mib, ms, f);
}

template <int kV>
void Sweep(Probe& p, double gib) {
  const long long chunk_bytes = 16LL * kV * kThreads;
  p.args.chunks = static_cast<long long>(gib * (1LL << 30)) / chunk_bytes;
  const double bytes = 2.0 * p.args.chunks * chunk_bytes;
  const double chunk_mib = chunk_bytes / double(1 << 20);
  p.Prepare(CopyKernel<kV>);
  p.Prepare(TicketKernel<kV>);
  p.Prepare(StaticKernel<kV, false>);
  p.Prepare(StaticKernel<kV, true>);
  const int grid = p.sms * p.ctas_per_sm;
  p.args.grid = grid;
  const float copy_ms = p.Time([&] { CopyKernel<kV><<<grid, kThreads, p.pad>>>(p.args); });
  Report("copy", kV, 0, copy_ms, bytes, copy_ms);
  p.args.lag = p.args.chunks;
  const float two = p.Time([&] {
    TicketKernel<kV><<<static_cast<unsigned>(2 * p.args.chunks), kThreads, p.pad>>>(p.args);
  });
  Report("ticket_tworead", kV, p.args.chunks * chunk_mib, two, bytes, copy_ms);
  for (double lag_mib : {4.0, 8.0, 12.0, 16.0, 24.0, 32.0}) {
    p.args.lag = static_cast<long long>(lag_mib / chunk_mib);
    const float t = p.Time([&] {
      TicketKernel<kV><<<static_cast<unsigned>(p.args.chunks + p.args.lag), kThreads, p.pad>>>(
          p.args);
    });
    Report("ticket", kV, p.args.lag * chunk_mib, t, bytes, copy_ms);
  }
  const double round_mib = grid * chunk_mib;
  for (int rounds = 1; rounds * round_mib <= 40.0 || rounds == 1; ++rounds) {
    p.args.rounds = rounds;
    const float same =
        p.Time([&] { StaticKernel<kV, false><<<grid, kThreads, p.pad>>>(p.args); });
    Report("static_same", kV, rounds * round_mib, same, bytes, copy_ms);
    const float rot = p.Time([&] { StaticKernel<kV, true><<<grid, kThreads, p.pad>>>(p.args); });
    Report("static_rotated", kV, rounds * round_mib, rot, bytes, copy_ms);
  }
}

// L2's own rates: a buffer of `mib` MiB read (and written) `passes` times.
void L2Rates(Probe& p, double mib) {
  const long long vectors = static_cast<long long>(mib * (1 << 20)) / 16;
  const int passes = 64;
  const int grid = p.sms * p.ctas_per_sm;
  for (bool write : {false, true}) {
    auto run = [&] {
      if (write) {
        L2Kernel<true><<<grid, kThreads>>>(p.args, vectors, passes);
      } else {
        L2Kernel<false><<<grid, kThreads>>>(p.args, vectors, passes);
      }
    };
    run();  // warm: the buffers into L2
    const float ms = p.Time(run);
    // Time() flushes L2 before each trial: the first pass reads DRAM; the
    // other passes - 1 are L2 hits and dominate.
    const double bytes = double(vectors) * 16 * passes * (write ? 2 : 1);
    std::printf("%-15s %6.1f MiB x %d passes  %8.3f ms  %6.2f TB/s (L2 bytes %s)\n",
                write ? "l2_read_write" : "l2_read", mib, passes, ms, bytes / ms / 1e9,
                write ? "read + written" : "read");
    std::printf("{\"mode\":\"%s\",\"mib\":%.1f,\"ms\":%.4f,\"tbps\":%.3f}\n",
                write ? "l2_read_write" : "l2_read", mib, ms, bytes / ms / 1e9);
  }
}

template <int kBlock, int kVectors>
void OneShot(Probe& p, double gib) {
  const long long vectors = static_cast<long long>(gib * (1LL << 30)) / 16;
  const double bytes = 2.0 * vectors * 16;
  const auto grid = static_cast<unsigned>(vectors / (kBlock * kVectors));
  const float ms = p.Time([&] { OneShotCopyKernel<kBlock, kVectors><<<grid, kBlock>>>(p.args); });
  char mode[64];
  std::snprintf(mode, sizeof(mode), "oneshot %dx%d%s", kBlock, kVectors,
                p.args.plain_stores ? " wb" : "");
  Report(mode, kVectors, 0, ms, bytes, 0);
}

// The `shapes` mode: the ticket traffic at V=8 and a 12 MiB lag in each
// Shape, at the probe's CTAs per SM (padding on top of the bulk shapes'
// own shared memory).
void Shapes(Probe& p, double gib) {
  constexpr int kV = 8;
  const long long chunk_bytes = 16LL * kV * kThreads;
  p.args.chunks = static_cast<long long>(gib * (1LL << 30)) / chunk_bytes;
  p.args.lag = static_cast<long long>(12.0 * (1 << 20)) / chunk_bytes;
  const double bytes = 2.0 * p.args.chunks * chunk_bytes;
  const auto blocks = static_cast<unsigned>(p.args.chunks + p.args.lag);
  auto run = [&](auto kernel, const char* name, size_t own_shared) {
    const size_t shared = std::max(own_shared, p.pad);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shared)));
    const float ms = p.Time([&] { kernel<<<blocks, kThreads, shared>>>(p.args); });
    Report(name, kV, p.args.lag * chunk_bytes / double(1 << 20), ms, bytes, 0);
  };
  run(ShapedTicketKernel<Shape::kInterleaved>, "interleaved", 0);
  run(ShapedTicketKernel<Shape::kBlockIdx>, "blockidx", 0);
  run(ShapedTicketKernel<Shape::kWarpContiguous>, "warp_contig", 0);
  run(ShapedTicketKernel<Shape::kBulkFirst>, "bulk_first", chunk_bytes);
  run(ShapedTicketKernel<Shape::kBulkAll>, "bulk_all", 2 * chunk_bytes);
}

// `grid` CTAs when above 0, else ctas_per_sm per SM.
template <int kK, int kP, int kD, int kT = kThreads>
void Ring(Probe& p, double gib, int ctas_per_sm, double copy_ms, int grid = 0) {
  constexpr int kV = 8;
  const long long chunk_bytes = 16LL * kV * kT;
  p.args.chunks = static_cast<long long>(gib * (1LL << 30)) / chunk_bytes;
  const double bytes = 2.0 * p.args.chunks * chunk_bytes;
  const int shared = static_cast<int>(kK * chunk_bytes);
  CHECK(cudaFuncSetAttribute(RingKernel<kK, kP, kD, kT>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  if (grid <= 0) grid = p.sms * ctas_per_sm;
  const float ms = p.Time([&] { RingKernel<kK, kP, kD, kT><<<grid, kT, shared>>>(p.args); });
  char mode[64];
  std::snprintf(mode, sizeof(mode), "ring%dx%d:%d/%d/%d%s", grid, kT, kK, kP, kD,
                p.args.plain_stores ? " wb" : "");
  Report(mode, kV, 0, ms, bytes, copy_ms);
}

// The fabric mode (see the top). Each row is the median of 1 launch (the
// copy, the 12 MiB ticket row, the partner rows) or 3 (the lag pairs) after
// an untimed one; under ncu every launch is one line, in that order.
void Fabric(Probe& p, double gib) {
  constexpr int kV = 8;
  const long long chunk_bytes = 16LL * kV * kThreads;
  p.args.chunks = static_cast<long long>(gib * (1LL << 30)) / chunk_bytes;
  const double bytes = 2.0 * p.args.chunks * chunk_bytes;
  const int grid = p.sms;
  p.args.grid = grid;
  const float copy_ms = p.Time([&] { CopyKernel<kV><<<grid * 4, kThreads>>>(p.args); }, 1);
  Report("copy", kV, 0, copy_ms, bytes, copy_ms);
  p.args.lag = static_cast<long long>(12.0 * (1 << 20)) / chunk_bytes;
  const float ticket = p.Time(
      [&] {
        TicketKernel<kV><<<static_cast<unsigned>(p.args.chunks + p.args.lag), kThreads>>>(p.args);
      },
      1);
  Report("ticket", kV, 12.0, ticket, bytes, copy_ms);
  p.Prepare(TicketKernel<kV>);
  p.Prepare(SmLocalKernel);
  unsigned long long* local = nullptr;
  const size_t local_bytes = 1024 * kRing * sizeof(unsigned long long) + 1024 * 128;
  CHECK(cudaMalloc(&local, local_bytes));
  // Ticket lags of 8 / 12 / 16 MiB, each followed by sm_local at 1 / 2 / 3
  // queue positions (4.1 / 8.3 / 12.4 MiB with 132 SMs).
  const double ticket_lags_mib[] = {8.0, 12.0, 16.0};
  for (int local_lag = 1; local_lag <= 3; ++local_lag) {
    const double lag_mib = ticket_lags_mib[local_lag - 1];
    p.args.lag = static_cast<long long>(lag_mib * (1 << 20)) / chunk_bytes;
    const auto blocks = static_cast<unsigned>(p.args.chunks + p.args.lag);
    auto ticket_run = [&] { TicketKernel<kV><<<blocks, kThreads, p.pad>>>(p.args); };
    Report("ticket", kV, lag_mib, p.Time(ticket_run, 3), bytes, copy_ms);
    auto local_run = [&] {
      CHECK(cudaMemsetAsync(local, 0xff, 1024 * kRing * sizeof(unsigned long long)));
      CHECK(cudaMemsetAsync(local + 1024 * kRing, 0, 1024 * 128));
      SmLocalKernel<<<static_cast<unsigned>(p.args.chunks), kThreads, p.pad>>>(p.args, local_lag,
                                                                                 local);
    };
    Report("sm_local", kV, local_lag * grid * chunk_bytes / double(1 << 20), p.Time(local_run, 3),
           bytes, copy_ms);
  }
  int* cta_of_sm = nullptr;
  CHECK(cudaMalloc(&cta_of_sm, 1024 * sizeof(int)));
  p.args.rounds = static_cast<int>(12.0 * (1 << 20) / (grid * chunk_bytes) + 0.5);
  for (int xor_partner : {0, 1, 2, 4, 8, 16, 32, 64, 3, 6}) {
    const float ms = p.Time(
        [&] {
          CHECK(cudaMemsetAsync(cta_of_sm, 0xff, 1024 * sizeof(int)));
          SmPartnerKernel<<<grid, kThreads>>>(p.args, xor_partner, cta_of_sm, p.args.ticket);
        },
        1);
    char mode[64];
    std::snprintf(mode, sizeof(mode), "sm_xor_%d", xor_partner);
    Report(mode, kV, p.args.rounds * grid * chunk_bytes / double(1 << 20), ms, bytes, copy_ms);
  }
  CHECK(cudaFree(cta_of_sm));
  CHECK(cudaFree(local));
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  Probe p;
  p.ctas_per_sm = argc > 2 ? std::atoi(argv[2]) : 4;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  p.sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MiB, %.1f GiB in, %d CTAs/SM\n", prop.name, p.sms,
              prop.l2CacheSize >> 20, gib, p.ctas_per_sm);
  const size_t per_sm = prop.sharedMemPerMultiprocessor;
  p.pad = per_sm / p.ctas_per_sm > 2048 ? per_sm / p.ctas_per_sm - 2048 : 0;
  const size_t bytes = static_cast<size_t>(gib * (1LL << 30)) + (1 << 20);
  float* in = nullptr;
  float* out = nullptr;
  CHECK(cudaMalloc(&in, bytes));
  CHECK(cudaMalloc(&out, bytes));
  CHECK(cudaMemset(in, 0, bytes));
  CHECK(cudaMalloc(&p.flush, p.flush_bytes));
  CHECK(cudaMalloc(&p.args.ticket, 4));
  CHECK(cudaMalloc(&p.args.sink, 1 << 24));
  CHECK(cudaEventCreate(&p.start));
  CHECK(cudaEventCreate(&p.stop));
  p.args.in = reinterpret_cast<const float4*>(in);
  p.args.out = reinterpret_cast<float4*>(out);
  if (argc > 3 && std::string(argv[3]) == "oneshot") {
    for (bool plain : {true, false}) {
      p.args.plain_stores = plain;
      OneShot<128, 1>(p, gib);
      OneShot<128, 4>(p, gib);
      OneShot<128, 8>(p, gib);
      OneShot<256, 2>(p, gib);
      OneShot<256, 8>(p, gib);
      OneShot<512, 4>(p, gib);
      OneShot<1024, 2>(p, gib);
    }
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "ring") {
    for (bool plain : {false, true}) {
      p.args.plain_stores = plain;
      std::printf("stores: %s\n", plain ? "st.global (write-back)" : "st.global.cs");
      Sweep<8>(p, gib);
      Ring<7, 3, 3>(p, gib, 1, 0);
      Ring<3, 1, 1>(p, gib, 2, 0);
    }
    return 0;
  }
  // bench/kernel_notes.md v36: does a persistent ring of 64 KiB chunks (512
  // threads), one CTA per SM or 128 CTAs (one chunk of every 8 MiB group
  // each), keep the copy rate? Run with gib=7 (the reference shape's input).
  if (argc > 3 && std::string(argv[3]) == "ring512") {
    Sweep<8>(p, gib);
    Ring<3, 1, 1, 512>(p, gib, 1, 0, 128);
    Ring<3, 1, 1, 512>(p, gib, 1, 0);
    Ring<6, 2, 3>(p, gib, 1, 0, 128);
    Ring<6, 2, 3>(p, gib, 1, 0);
    Ring<7, 3, 3>(p, gib, 1, 0);
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "shapes") {
    for (bool plain : {false, true}) {
      p.args.plain_stores = plain;
      std::printf("stores: %s\n", plain ? "st.global (write-back)" : "st.global.cs");
      Shapes(p, gib);
    }
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "fabric") {
    Fabric(p, gib);
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "l2") {
    for (double mib : {4.0, 8.0, 16.0}) L2Rates(p, mib);
    return 0;
  }
  Sweep<2>(p, gib);
  Sweep<8>(p, gib);
  return 0;
}
