// Host<->device bandwidth of one GPU alone against every GPU at once (issue
// 6). Conv over shared memory scaled 1.56x from one H100 to two on a 2x H100
// host, with the two GPUs together moving 53.5 GB/s host to device: about
// what one PCIe Gen5 x16 link carries one way
// (bench/results/2026-11-27-x2-conv-scaling.md). If both GPUs sit behind one
// uplink, their copies share it, and no server can scale past it.
//
// For each direction (h2d, d2h, both at once), each GPU copies `bytes` per
// transfer between page-locked host memory and its own memory, `reps` times
// back to back on its own streams, first GPU 0 alone, then every GPU at
// once (one host thread per GPU, started together). Printed: GB/s per GPU
// and in total. Run `nvidia-smi topo -m` beside it.
//
//   nvcc -O2 -std=c++17 -o pcie_pair_probe bench/pcie_pair_probe.cu
//   ./pcie_pair_probe [bytes=16777216] [reps=200]

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

enum class Direction { kH2D, kD2H, kBoth };
const char* DirectionName(Direction d) {
  return d == Direction::kH2D ? "h2d" : d == Direction::kD2H ? "d2h" : "both";
}

struct GpuBuffers {
  char* host_in = nullptr;   // page-locked, source of h2d
  char* host_out = nullptr;  // page-locked, destination of d2h
  char* device_in = nullptr;
  char* device_out = nullptr;
  cudaStream_t h2d = nullptr, d2h = nullptr;
};

GpuBuffers Allocate(int device, size_t bytes) {
  GpuBuffers b;
  CHECK(cudaSetDevice(device));
  CHECK(cudaMallocHost(&b.host_in, bytes));
  CHECK(cudaMallocHost(&b.host_out, bytes));
  CHECK(cudaMalloc(&b.device_in, bytes));
  CHECK(cudaMalloc(&b.device_out, bytes));
  CHECK(cudaStreamCreateWithFlags(&b.h2d, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b.d2h, cudaStreamNonBlocking));
  return b;
}

// Seconds for `reps` transfers each way `direction` asks, on `device`.
double Copy(int device, const GpuBuffers& b, size_t bytes, int reps, Direction direction) {
  CHECK(cudaSetDevice(device));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    if (direction != Direction::kD2H) {
      CHECK(cudaMemcpyAsync(b.device_in, b.host_in, bytes, cudaMemcpyHostToDevice, b.h2d));
    }
    if (direction != Direction::kH2D) {
      CHECK(cudaMemcpyAsync(b.host_out, b.device_out, bytes, cudaMemcpyDeviceToHost, b.d2h));
    }
  }
  CHECK(cudaStreamSynchronize(b.h2d));
  CHECK(cudaStreamSynchronize(b.d2h));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{16} << 20;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 200;
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  std::vector<GpuBuffers> buffers;
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, d));
    std::printf("GPU %d: %s, PCI %04x:%02x:%02x\n", d, prop.name, prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID);
    buffers.push_back(Allocate(d, bytes));
  }
  std::printf("%zu bytes per transfer, %d transfers per GPU and direction\n", bytes, reps);
  for (Direction direction : {Direction::kH2D, Direction::kD2H, Direction::kBoth}) {
    const double ways = direction == Direction::kBoth ? 2.0 : 1.0;
    Copy(0, buffers[0], bytes, 5, direction);  // warm-up
    const double alone = Copy(0, buffers[0], bytes, reps, direction);
    std::printf("%-4s GPU 0 alone: %6.1f GB/s\n", DirectionName(direction),
                ways * bytes * reps / alone / 1e9);
    if (devices < 2) continue;
    std::vector<double> seconds(devices);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d) {
      threads.emplace_back([&, d] {
        ++ready;
        while (ready.load() < devices) {
        }
        seconds[d] = Copy(d, buffers[d], bytes, reps, direction);
      });
    }
    for (std::thread& thread : threads) thread.join();
    double total = 0;
    for (int d = 0; d < devices; ++d) {
      const double rate = ways * bytes * reps / seconds[d] / 1e9;
      total += rate;
      std::printf("%-4s GPU %d with the others: %6.1f GB/s\n", DirectionName(direction), d, rate);
    }
    std::printf("%-4s every GPU at once: %6.1f GB/s in total\n", DirectionName(direction), total);
  }
  return 0;
}
