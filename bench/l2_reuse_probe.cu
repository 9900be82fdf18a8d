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
//
// Build and run (on the GPU host):
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/probe bench/l2_reuse_probe.cu
//   /tmp/probe [gib=2] [ctas_per_sm=4]
// Prints a table; every row also as one JSON line.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kThreads = 256;

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(err_));                                         \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Args {
  const float4* in;
  float4* out;
  long long chunks;       // chunks of kV * kThreads float4
  long long lag;          // ticket mode: chunks between the two reads
  int rounds;             // static modes: L
  int grid;               // static modes: G
  unsigned int* ticket;
  float* sink;
};

template <int kV>
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
    if (has_first) x[i] = p1[threadIdx.x + i * kThreads];
    if (has_second) y[i] = __ldcs(p2 + threadIdx.x + i * kThreads);
  }
  if (has_first) {
#pragma unroll
    for (int i = 0; i < kV; ++i) acc += x[i].x + x[i].y + x[i].z + x[i].w;
  }
  if (has_second) {
    float4* o = a.out + second * (kV * kThreads);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      float4 v = y[i];
      v.x = v.x * 1.5f + 0.25f;
      v.y = v.y * 1.5f + 0.25f;
      v.z = v.z * 1.5f + 0.25f;
      v.w = v.w * 1.5f + 0.25f;
      __stcs(o + threadIdx.x + i * kThreads, v);
    }
  }
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
    float4 v = a.in[i];
    v.x = v.x * 1.5f + 0.25f;
    v.y = v.y * 1.5f + 0.25f;
    v.z = v.z * 1.5f + 0.25f;
    v.w = v.w * 1.5f + 0.25f;
    __stcs(a.out + i, v);
  }
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
  Sweep<2>(p, gib);
  Sweep<8>(p, gib);
  return 0;
}
