#include "tests/kernels/cuda/sample_producer.h"

#include <cuda_runtime.h>

#include "kernels/cuda/gpu_scope.cuh"

namespace fuseserve::cuda {
namespace {

__device__ void SleepFor(unsigned nanoseconds) {
  const long long start = clock64();
  // ~1 cycle per ns at the GPUs' clocks: a lower bound is all that matters.
  while (clock64() - start < static_cast<long long>(nanoseconds)) __nanosleep(100);
}

__global__ void SlowSampleProducer(const float* source, float* data, const double* source_sums,
                                   double* sums, int64_t batch, int64_t sample_floats,
                                   int64_t sums_per_sample, unsigned* sample_done,
                                   unsigned target, unsigned delay_ns) {
  if (threadIdx.x == 0) gpu_scope::LaunchDependents();
  for (int64_t n = 0; n < batch; ++n) {
    if (threadIdx.x == 0) SleepFor(delay_ns);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < sample_floats; i += blockDim.x) {
      data[n * sample_floats + i] = source[n * sample_floats + i];
    }
    for (int64_t i = threadIdx.x; i < sums_per_sample; i += blockDim.x) {
      sums[n * sums_per_sample + i] = source_sums[n * sums_per_sample + i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned k = 0; k < target; ++k) {
        gpu_scope::IncrementRelease(sample_done + n);
        SleepFor(delay_ns);
      }
    }
  }
}

}  // namespace

cudaError_t LaunchSlowSampleProducer(const float* source, float* data, const double* source_sums,
                                     double* sums, int64_t batch, int64_t sample_floats,
                                     int64_t sums_per_sample, unsigned* sample_done,
                                     unsigned target, unsigned delay_ns, cudaStream_t stream) {
  SlowSampleProducer<<<1, 256, 0, stream>>>(source, data, source_sums, sums, batch, sample_floats,
                                            sums_per_sample, sample_done, target, delay_ns);
  return cudaGetLastError();
}

}  // namespace fuseserve::cuda
