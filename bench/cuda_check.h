#pragma once

// CHECK(call) for the standalone probes in bench/ (l2_reuse_probe.cu,
// l2_partition_probe.cu): a CUDA runtime call that fails prints where and
// why and ends the probe.

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                     \
  do {                                                                  \
    cudaError_t err_ = (call);                                          \
    if (err_ != cudaSuccess) {                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(err_));                           \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)
