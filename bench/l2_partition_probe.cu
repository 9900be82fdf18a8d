// L2 partition probe (bench/kernel_notes.md v29-v30): which of Hopper's two L2
// partitions holds which line, as seen from each SM, by load latency.
//
// The buffer (zeros) is written by the copy engine (cudaMemcpy from the
// host), so each line sits in L2 at its home partition only. Then, for one
// SM at a time, one thread of a CTA on that SM loads every probed line once
// (ld.global.cg, L2 only) and times it with clock64: a line homed in the
// SM's own partition answers faster than one behind the fabric. After the
// last SM, SM 0 times the lines a second time without rewriting them:
// if a line read through the fabric is kept in the reader's partition too
// (v29's probe), every line is then fast for SM 0.
//
// Probed lines: 4096 lines at 128-byte steps (the first 512 KiB), then 4096
// lines at 4 KiB steps over the next 16 MiB (8 large pages: does the map
// repeat from page to page?).
//
// `copy` mode: with the map that mode found (a 4 KiB block's home is the
// parity of address bits 12, 13, 15, 17, 19, XOR one bit per 2 MiB page),
// calibrated on a cold L2 (each page's bit, each SM's side), copies in which
// every SM touches only blocks of its own partition, and the lagged
// GroupNorm's traffic (read block t, re-read and write block t - lag) on
// its own side or on either, timed (L2 flushed before each) and checked.
//
// Build and run (on the GPU host):
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/partition bench/l2_partition_probe.cu
//   /tmp/partition OUT_FILE        # the map; python3 bench/l2_partition_fit.py OUT_FILE
//   /tmp/partition copy [GiB=4]    # needs 1 + 8 x SMs pages of 2 MiB
// The map prints, per SM, the fraction of fast lines and how far its fast
// set agrees with SM 0's, and writes the cycles as uint16 [SMs + 1][8192]
// (the last row: SM 0's second pass) to OUT_FILE.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cuda_check.h"

namespace {

constexpr int kFineLines = 4096;    // 128-byte steps
constexpr int kCoarseLines = 4096;  // 4 KiB steps
constexpr int kLines = kFineLines + kCoarseLines;
constexpr size_t kFineBytes = size_t{kFineLines} * 128;
constexpr size_t kBufferBytes = kFineBytes + size_t{kCoarseLines} * 4096;

__host__ __device__ size_t LineOffset(int i) {
  return i < kFineLines ? size_t(i) * 128 : kFineBytes + size_t(i - kFineLines) * 4096;
}

// The first CTA to reach SM `target` times every line once.
__global__ void TimeLines(const unsigned char* buffer, unsigned int target, unsigned int* claimed,
                          unsigned short* cycles, unsigned int* sink) {
  unsigned int smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (smid != target || threadIdx.x != 0 || atomicCAS(claimed, 0u, 1u) != 0u) return;
  // A dependent chain: the buffer holds zeros, and each line's address
  // adds the value the previous load returned, so a load cannot issue
  // before the previous one returned; no unrolling, and the clock is read
  // after an instruction that uses the loaded value (in-order issue).
  __shared__ volatile unsigned int use;
  unsigned int acc = 0;
#pragma unroll 1
  for (int i = 0; i < kLines; ++i) {
    const auto* p = reinterpret_cast<const unsigned int*>(buffer + LineOffset(i) + acc);
    const long long t0 = clock64();
    unsigned int v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    use = v;
    acc += v;
    const long long t1 = clock64();
    cycles[i] = static_cast<unsigned short>(min(t1 - t0, 65535ll));
  }
  sink[target] = acc;
}

// ---- `copy` mode: a copy in which every SM reads and writes only the 4 KiB
// blocks homed in its own L2 partition.
//
// The map the `lines` mode measured on an H200: within a 2 MiB page, the
// block at page offset o is homed by parity(o bits 12, 13, 15, 17, 19), XOR
// one bit per page (physical address bits above 21). Calibrated here by
// latency on a cold L2: the page bits (SM 0 times one cold line of block 0
// of each page) and each SM's side (it times cold lines of known side).

constexpr size_t kPageBytes = size_t{2} << 20;
constexpr int kBlocksPerPage = 512;  // 4 KiB blocks
constexpr unsigned int kParityBits = 0xABu;  // block-index bits 0, 1, 3, 5, 7

__device__ __forceinline__ unsigned int Smid() {
  unsigned int smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  return smid;
}

// Latency of one load (dependent chain, as in TimeLines).
__device__ __forceinline__ unsigned int TimedLoad(const unsigned char* p, unsigned int& acc) {
  __shared__ volatile unsigned int use;
  const long long t0 = clock64();
  unsigned int v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p + acc) : "memory");
  use = v;
  acc += v;
  return static_cast<unsigned int>(clock64() - t0);
}

// SM 0 (the first CTA there): for each page, is block 0 near (bit 0) or far (1)?
__global__ void CalibratePages(const unsigned char* buffer, int pages, unsigned int* claimed,
                               unsigned char* page_bits) {
  if (Smid() != 0 || threadIdx.x != 0 || atomicCAS(claimed, 0u, 1u) != 0u) return;
  unsigned int acc = 0;
#pragma unroll 1
  for (int page = 0; page < pages; ++page) {
    const unsigned int cycles = TimedLoad(buffer + size_t(page) * kPageBytes, acc);
    page_bits[page] = cycles > 650 ? 1 : 0;  // cold: ~560 near, ~740 far
  }
}

// Every SM: its side (0: SM 0's). Each SM's first CTA times 8 cold lines
// of block 0 of pages 1 + 8 * smid + k (distinct per SM, so still cold).
__global__ void CalibrateSms(const unsigned char* buffer, const unsigned char* page_bits,
                             unsigned int* claimed, unsigned char* sm_side) {
  const unsigned int sm = Smid();
  if (threadIdx.x != 0 || atomicCAS(claimed + sm, 0u, 1u) != 0u) return;
  unsigned int acc = 0;
  int far_votes = 0;
#pragma unroll 1
  for (int k = 0; k < 8; ++k) {
    const int page = 1 + 8 * static_cast<int>(sm) + k;
    // Block 0 of this page is on side page_bits[page] (0: SM 0's side).
    const unsigned int cycles = TimedLoad(buffer + size_t(page) * kPageBytes + 64 * k, acc);
    const int far = cycles > 650 ? 1 : 0;
    // near a block of side b means this SM is on side b.
    far_votes += far ^ page_bits[page];
  }
  sm_side[sm] = far_votes > 4 ? 1 : 0;
}

// The t-th block of side `side` (page-major): the k-th block of the page
// whose homing parity is side ^ page bit.
__device__ __forceinline__ size_t BlockOfSide(long long t, unsigned int side,
                                              const unsigned char* page_bits) {
  const long long page = t / (kBlocksPerPage / 2);
  const unsigned int k = static_cast<unsigned int>(t % (kBlocksPerPage / 2));
  const unsigned int q = side ^ page_bits[page];
  const unsigned int high = k << 1;
  const unsigned int j = high | (q ^ (__popc(high & kParityBits) & 1u));
  return size_t(page) * kPageBytes + size_t(j) * 4096;
}

// 256 threads, one 4 KiB block per CTA: ordered by blockIdx (kMode 0), by a
// ticket (1), or by a ticket of the SM's own side (2; once that side has no
// block left, a ticket of the other side: every CTA copies one block).
template <int kMode>
__global__ void __launch_bounds__(256) BlockCopy(const float4* in, float4* out,
                                                 long long blocks_per_side, unsigned int* tickets,
                                                 const unsigned char* page_bits,
                                                 const unsigned char* sm_side) {
  __shared__ long long block;
  if (threadIdx.x == 0) {
    if (kMode == 0) {
      block = blockIdx.x;
    } else if (kMode == 1) {
      block = atomicAdd(tickets, 1u);
    } else {
      unsigned int side = sm_side[Smid()];
      long long t = atomicAdd(tickets + 32 * side, 1u);
      if (t >= blocks_per_side) {
        side ^= 1u;
        t = atomicAdd(tickets + 32 * side, 1u);
      }
      block = t < blocks_per_side ? static_cast<long long>(BlockOfSide(t, side, page_bits) / 4096)
                                  : -1;
    }
  }
  __syncthreads();
  const long long b = block;
  if (b < 0 || b >= 2 * blocks_per_side) return;
  const size_t v = size_t(b) * 256 + threadIdx.x;
  float4 x = in[v];
  x.x = x.x * 1.5f + 0.25f;
  x.y = x.y * 1.5f + 0.25f;
  x.z = x.z * 1.5f + 0.25f;
  x.w = x.w * 1.5f + 0.25f;
  out[v] = x;
}

// The lagged GroupNorm's traffic in 4 KiB blocks: ticket t of a side reads
// block t of that side (summed), re-reads block t - lag of that side and
// writes it. kOwnSide: the CTA takes the tickets of its SM's side (every
// access near); otherwise of side smid & 1 (unrelated to the partition).
// Once its side has no ticket left, the other side's.
template <bool kOwnSide>
__global__ void __launch_bounds__(256) LaggedBlocks(const float4* in, float4* out,
                                                    long long blocks_per_side, long long lag,
                                                    unsigned int* tickets,
                                                    const unsigned char* page_bits,
                                                    const unsigned char* sm_side, float* sink) {
  __shared__ long long first;
  __shared__ long long second;
  if (threadIdx.x == 0) {
    unsigned int side = kOwnSide ? sm_side[Smid()] : (Smid() & 1u);
    long long t = atomicAdd(tickets + 32 * side, 1u);
    if (t >= blocks_per_side + lag) {
      side ^= 1u;
      t = atomicAdd(tickets + 32 * side, 1u);
    }
    first = t < blocks_per_side ? static_cast<long long>(BlockOfSide(t, side, page_bits) / 4096)
                                : -1;
    second = t >= lag && t - lag < blocks_per_side
                 ? static_cast<long long>(BlockOfSide(t - lag, side, page_bits) / 4096)
                 : -1;
  }
  __syncthreads();
  const long long a = first;
  const long long b = second;
  float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 y = x;
  if (a >= 0) x = in[size_t(a) * 256 + threadIdx.x];
  if (b >= 0) y = __ldcs(in + size_t(b) * 256 + threadIdx.x);
  if (a >= 0 && x.x + x.y + x.z + x.w == -12345.f) sink[0] = x.x;
  if (b >= 0) {
    y.x = y.x * 1.5f + 0.25f;
    y.y = y.y * 1.5f + 0.25f;
    y.z = y.z * 1.5f + 0.25f;
    y.w = y.w * 1.5f + 0.25f;
    out[size_t(b) * 256 + threadIdx.x] = y;
  }
}

int CopyMode(double gib) {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const size_t bytes = static_cast<size_t>(gib * (1 << 30)) / kPageBytes * kPageBytes;
  const int pages = static_cast<int>(bytes / kPageBytes);
  unsigned char* in = nullptr;
  unsigned char* out = nullptr;
  char* flush = nullptr;
  unsigned int* scratch = nullptr;
  unsigned char* page_bits = nullptr;
  unsigned char* sm_side = nullptr;
  CHECK(cudaMalloc(&in, bytes));
  CHECK(cudaMalloc(&out, bytes));
  CHECK(cudaMalloc(&flush, size_t{512} << 20));
  CHECK(cudaMalloc(&scratch, 4096 * sizeof(unsigned int)));
  CHECK(cudaMalloc(&page_bits, pages));
  CHECK(cudaMalloc(&sm_side, 1024));
  if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) % kPageBytes != 0) {
    std::printf("buffers not 2 MiB aligned\n");
    return 1;
  }
  CHECK(cudaMemset(in, 0, bytes));
  CHECK(cudaMemset(sm_side, 0, 1024));
  auto flush_l2 = [&] { CHECK(cudaMemset(flush, 1, size_t{512} << 20)); };
  flush_l2();
  CHECK(cudaMemset(scratch, 0, 4096 * sizeof(unsigned int)));
  CalibratePages<<<sms * 8, 32>>>(in, pages, scratch, page_bits);
  CHECK(cudaDeviceSynchronize());
  if (pages < 1 + 8 * sms) {
    std::printf("CalibrateSms needs %d pages\n", 1 + 8 * sms);
    return 1;
  }
  flush_l2();
  CHECK(cudaMemset(scratch, 0, 4096 * sizeof(unsigned int)));
  CalibrateSms<<<sms * 8, 32>>>(in, page_bits, scratch, sm_side);
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> sides(1024), pbits(pages);
  CHECK(cudaMemcpy(sides.data(), sm_side, 1024, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(pbits.data(), page_bits, pages, cudaMemcpyDeviceToHost));
  int side1 = 0;
  for (int s = 0; s < sms; ++s) side1 += sides[s];
  int pages1 = 0;
  for (int p = 0; p < pages; ++p) pages1 += pbits[p];
  std::printf("SMs on side 1: %d of %d; pages with bit 1: %d of %d\nsides:", side1, sms, pages1,
              pages);
  for (int s = 0; s < sms; ++s) std::printf("%d", sides[s]);
  std::printf("\n");
  const long long blocks = static_cast<long long>(bytes / 4096);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  auto run = [&](const char* name, auto launch) {
    for (int trial = 0; trial < 4; ++trial) {
      flush_l2();
      CHECK(cudaMemset(scratch, 0, 4096 * sizeof(unsigned int)));
      CHECK(cudaEventRecord(start));
      launch();
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (trial > 0) std::printf("%-12s %.3f ms  %.2f TB/s\n", name, ms, 2.0 * bytes / ms / 1e9);
    }
  };
  const auto* fin = reinterpret_cast<const float4*>(in);
  auto* fout = reinterpret_cast<float4*>(out);
  run("blockidx", [&] {
    BlockCopy<0><<<static_cast<unsigned>(blocks), 256>>>(fin, fout, blocks / 2, scratch,
                                                        page_bits, sm_side);
  });
  run("ticket", [&] {
    BlockCopy<1><<<static_cast<unsigned>(blocks), 256>>>(fin, fout, blocks / 2, scratch,
                                                        page_bits, sm_side);
  });
  CHECK(cudaMemset(out, 0, bytes));
  run("own_side", [&] {
    BlockCopy<2><<<static_cast<unsigned>(blocks), 256>>>(fin, fout, blocks / 2, scratch,
                                                        page_bits, sm_side);
  });
  float* sink = reinterpret_cast<float*>(scratch + 2048);
  for (double lag_mib : {8.0, 12.0}) {
    const long long lag = static_cast<long long>(lag_mib * (1 << 20) / 4096 / 2);  // per side
    const auto grid = static_cast<unsigned>(2 * (blocks / 2 + lag));
    char name[64];
    std::snprintf(name, sizeof(name), "lag%.0f_any", lag_mib);
    run(name, [&] {
      LaggedBlocks<false><<<grid, 256>>>(fin, fout, blocks / 2, lag, scratch, page_bits, sm_side,
                                         sink);
    });
    std::snprintf(name, sizeof(name), "lag%.0f_own", lag_mib);
    run(name, [&] {
      LaggedBlocks<true><<<grid, 256>>>(fin, fout, blocks / 2, lag, scratch, page_bits, sm_side,
                                        sink);
    });
  }
  // Every block written exactly once: out == in * 1.5 + 0.25 = 0.25.
  std::vector<float> check(bytes / 4);
  CHECK(cudaMemcpy(check.data(), out, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (float x : check) wrong += x != 0.25f;
  std::printf("own_side output: %zu of %zu values wrong\n", wrong, check.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "copy") {
    return CopyMode(argc > 2 ? std::atof(argv[2]) : 4.0);
  }
  const char* out_path = argc > 1 ? argv[1] : "/tmp/partition_cycles.bin";
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
  std::vector<unsigned char> host(kBufferBytes, 0);
  unsigned char* buffer = nullptr;
  unsigned int* claimed = nullptr;
  unsigned int* sink = nullptr;
  unsigned short* cycles = nullptr;
  CHECK(cudaMalloc(&buffer, kBufferBytes));
  CHECK(cudaMalloc(&claimed, sizeof(unsigned int)));
  CHECK(cudaMalloc(&sink, 4096 * sizeof(unsigned int)));
  CHECK(cudaMalloc(&cycles, size_t(sms + 1) * kLines * sizeof(unsigned short)));
  // SM ids are probed 0 .. sms - 1; an id with no CTA times nothing (its
  // row stays 0).
  CHECK(cudaMemset(cycles, 0, size_t(sms + 1) * kLines * sizeof(unsigned short)));
  auto time_on = [&](int sm, int row, bool rewrite) {
    if (rewrite) CHECK(cudaMemcpy(buffer, host.data(), kBufferBytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(claimed, 0, sizeof(unsigned int)));
    TimeLines<<<sms * 8, 32>>>(buffer, sm, claimed, cycles + size_t(row) * kLines, sink);
    CHECK(cudaDeviceSynchronize());
  };
  for (int sm = 0; sm < sms; ++sm) time_on(sm, sm, true);
  time_on(0, sms, false);  // SM 0 again, after every SM read every line
  std::vector<unsigned short> all(size_t(sms + 1) * kLines);
  CHECK(cudaMemcpy(all.data(), cycles, all.size() * sizeof(unsigned short),
                   cudaMemcpyDeviceToHost));
  if (FILE* f = std::fopen(out_path, "wb")) {
    std::fwrite(all.data(), sizeof(unsigned short), all.size(), f);
    std::fclose(f);
  }
  // Fast = below the midpoint of the row's 10th and 90th percentiles.
  auto fast_set = [&](int row) {
    std::vector<unsigned short> sorted(all.begin() + size_t(row) * kLines,
                                       all.begin() + size_t(row + 1) * kLines);
    std::sort(sorted.begin(), sorted.end());
    const int cut = (sorted[kLines / 10] + sorted[kLines * 9 / 10]) / 2;
    std::vector<bool> fast(kLines);
    for (int i = 0; i < kLines; ++i) fast[i] = all[size_t(row) * kLines + i] < cut;
    std::printf("{\"row\":%d,\"p10\":%d,\"p50\":%d,\"p90\":%d", row, sorted[kLines / 10],
                sorted[kLines / 2], sorted[kLines * 9 / 10]);
    return fast;
  };
  const std::vector<bool> reference = fast_set(0);
  std::printf(",\"fast\":%.3f}\n",
              std::count(reference.begin(), reference.end(), true) / double(kLines));
  for (int row = 1; row <= sms; ++row) {
    const std::vector<bool> fast = fast_set(row);
    int agree = 0;
    for (int i = 0; i < kLines; ++i) agree += fast[i] == reference[i];
    std::printf(",\"fast\":%.3f,\"agree_sm0\":%.3f}\n",
                std::count(fast.begin(), fast.end(), true) / double(kLines),
                agree / double(kLines));
  }
  return 0;
}
