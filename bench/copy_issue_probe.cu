// What a batch of small requests costs in copies (issue 6): a GPU instance
// serving 1x8192 GEMM requests (32 KiB in, 32 KiB out) in batches of ~9
// spent ~50 us gathering the inputs on the host and ~34 us issuing one
// device-to-host copy per answer, per batch, on an H200 host.
//
// For N requests of B bytes, each in its own page-locked buffer, this probe
// times (host time to issue, and issue + stream completion) the copies:
//   loop      N cudaMemcpyAsync calls
//   batch     one cudaMemcpyBatchAsync of the N copies
//   one       one cudaMemcpyAsync of N * B contiguous bytes (the floor)
// both ways (H2D and D2H), and the host gather the instance does today:
//   gather    N * B bytes copied with memcpy into one page-locked buffer from
//             ordinary memory another thread wrote last (so the bytes are in
//             another core's cache, as gRPC's received slices are)
// Medians over many repetitions; each repetition starts with the stream idle.
//
//   nvcc -O2 -std=c++17 -o copy_issue_probe bench/copy_issue_probe.cu
//   ./copy_issue_probe [B=32768] [REPS=2000]

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

enum class Mode { kLoop, kBatch, kOne };
const char* ModeName(Mode mode) {
  return mode == Mode::kLoop ? "loop" : mode == Mode::kBatch ? "batch" : "one";
}

struct Timing {
  double issue_us;
  double total_us;
};

// Issues the N copies between `host` (N separate buffers) and `device`
// (contiguous) in `mode`, then waits for the stream.
Timing Run(Mode mode, bool to_device, int n, size_t bytes, std::vector<char*>& host,
           char* host_contiguous, char* device, cudaStream_t stream, int reps) {
  std::vector<double> issue, total;
  std::vector<void*> dsts(n);
  std::vector<const void*> srcs(n);
  std::vector<size_t> sizes(n, bytes);
  cudaMemcpyAttributes attrs{};
  attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attrs.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t attrs_index = 0;
  for (int rep = 0; rep < reps; ++rep) {
    CHECK(cudaStreamSynchronize(stream));
    const double t0 = NowUs();
    if (mode == Mode::kOne) {
      if (to_device) {
        CHECK(cudaMemcpyAsync(device, host_contiguous, n * bytes, cudaMemcpyHostToDevice, stream));
      } else {
        CHECK(cudaMemcpyAsync(host_contiguous, device, n * bytes, cudaMemcpyDeviceToHost, stream));
      }
    } else if (mode == Mode::kLoop) {
      for (int i = 0; i < n; ++i) {
        if (to_device) {
          CHECK(
              cudaMemcpyAsync(device + i * bytes, host[i], bytes, cudaMemcpyHostToDevice, stream));
        } else {
          CHECK(
              cudaMemcpyAsync(host[i], device + i * bytes, bytes, cudaMemcpyDeviceToHost, stream));
        }
      }
    } else {
      for (int i = 0; i < n; ++i) {
        dsts[i] = to_device ? static_cast<void*>(device + i * bytes) : host[i];
        srcs[i] = to_device ? static_cast<const void*>(host[i]) : device + i * bytes;
      }
      CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), n, &attrs, &attrs_index, 1,
                                 stream));
    }
    const double t1 = NowUs();
    CHECK(cudaStreamSynchronize(stream));
    const double t2 = NowUs();
    issue.push_back(t1 - t0);
    total.push_back(t2 - t0);
  }
  return {Median(issue), Median(total)};
}

// memcpy of n * bytes from `source` (last written by another thread) into
// `pinned`.
double Gather(int n, size_t bytes, char* source, char* pinned, int reps) {
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    std::thread writer([&] { std::memset(source, rep & 0xff, n * bytes); });
    writer.join();
    const double t0 = NowUs();
    for (int i = 0; i < n; ++i) std::memcpy(pinned + i * bytes, source + i * bytes, bytes);
    times.push_back(NowUs() - t0);
  }
  return Median(times);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 32768;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int counts[] = {1, 4, 9, 16, 32, 64};
  const int max_n = 64;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %zu bytes per request, %d repetitions (medians, us)\n", prop.name, bytes,
              reps);

  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<char*> host(max_n);
  for (auto& buffer : host) CHECK(cudaMallocHost(&buffer, bytes));
  char* host_contiguous;
  CHECK(cudaMallocHost(&host_contiguous, max_n * bytes));
  char* device;
  CHECK(cudaMalloc(&device, max_n * bytes));
  std::vector<char> source(max_n * bytes);

  std::printf("%-4s %-4s %-6s %9s %9s\n", "dir", "n", "mode", "issue", "total");
  for (bool to_device : {true, false}) {
    for (int n : counts) {
      for (Mode mode : {Mode::kLoop, Mode::kBatch, Mode::kOne}) {
        const Timing t =
            Run(mode, to_device, n, bytes, host, host_contiguous, device, stream, reps);
        std::printf("%-4s %-4d %-6s %9.2f %9.2f\n", to_device ? "h2d" : "d2h", n, ModeName(mode),
                    t.issue_us, t.total_us);
      }
    }
  }
  for (int n : counts) {
    const double us = Gather(n, bytes, source.data(), host_contiguous, reps / 4);
    std::printf("gather n=%-3d %9.2f us (%.1f GB/s)\n", n, us, n * bytes / us / 1e3);
  }
  return 0;
}
