#pragma once

// A stand-in for a producer kernel that reports progress per sample
// (group_norm_concurrent.h SampleProgress), for the tests of what runs
// beside such a producer.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fuseserve::cuda {

// Launches on `stream` one block that allows the next kernel on the stream
// to start at once (programmatic dependent launch) and then, sample by
// sample in order, sleeps ~delay_ns, copies the sample's sample_floats
// values from `source` into `data` and its sums_per_sample doubles from
// `source_sums` into `sums`, and increments sample_done[n] `target` times
// with release semantics, one increment per delay_ns.
cudaError_t LaunchSlowSampleProducer(const float* source, float* data, const double* source_sums,
                                     double* sums, int64_t batch, int64_t sample_floats,
                                     int64_t sums_per_sample, unsigned* sample_done,
                                     unsigned target, unsigned delay_ns, cudaStream_t stream);

}  // namespace fuseserve::cuda
