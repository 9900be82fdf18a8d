#pragma once

// Internal to kernels/cuda/conv_transpose2d_gelu.cu, whose public launcher
// dispatches here first: the Hopper (sm_90a) kernel for stride-1
// ConvTranspose2d + bias + GELU (+ GroupNorm sums) in one TF32 pass on wgmma.
// The public API and its contracts are in conv_transpose2d_gelu.h.
//
// GEMM per sample: M = 64 output channels, N = output pixels on a grid
// padded to W_out + k - 1 columns (so that every tap's operand is the input
// tile shifted by one constant: the extra columns are computed and never
// stored), K = (8-channel chunk, tap, channel). A persistent block runs
// 512-pixel tiles: one producer warpgroup copies each chunk's input into
// shared memory (channels interleaved by 4: 16-byte copies of input rows
// transposed in place where they serve, else 4-byte gathers) and its
// weights by one bulk copy; two consumer warpgroups each multiply 64 channels x 256 pixels with
// one m64n256k8 wgmma per tap (the input truncated to TF32 by the hardware,
// the weights rounded at load) and run the epilogue.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/conv_transpose2d_gelu.h"
#include "kernels/cuda/math_mode.h"

namespace fuseserve::cuda::conv_wgmma {

// Whether the kernel (and its weight layout) serves `params` in `mode`:
// stride 1, kTf32, and two pipeline stages fit in 227 KB of shared memory
// per block (Hopper's limit; wide rows or large kernels do not). Depends on
// params and mode only. Precondition: ValidateConvTranspose2dParams ok.
bool Supports(const ConvTranspose2dParams& params, MathMode mode);

// Whether the current device can run the kernel: compute capability 9.0
// with this binary's sm_90a code loaded for it, and FUSESERVE_DISABLE_WGMMA
// not set to 1 (which makes ConvTranspose2dBiasGelu pick the mma.sync
// kernels on Hopper too, so that the tests and compute-sanitizer racecheck
// cover those there).
absl::StatusOr<bool> AvailableOnCurrentDevice();

// Floats of the weight layout: [co_tile][chunk][tap][k half][co % 64][ci % 4]
// with co_tile = co / 64, chunk = ci / 8, k half = ci % 8 / 4: per (co_tile,
// chunk) one contiguous block of k*k x 2 KB, each tap's 64 x 8 operand in
// wgmma's K-major core-matrix order. Channels past C_in or C_out are 0.
int64_t PreparedWeightSize(const ConvTranspose2dParams& params);

// Index of w[ci, co, kh, kw] (tap = kh * k + kw) in that layout.
int64_t WeightIndex(const ConvTranspose2dParams& params, int64_t ci, int64_t co, int64_t tap);

// Bytes of shared memory per block with `stages` pipeline stages.
int64_t SharedMemoryBytes(const ConvTranspose2dParams& params, int stages);

// The count each sample's signal reaches (ConvSampleSignals): one per
// consumer warpgroup per tile of the sample.
int64_t SignalsPerSample(const ConvTranspose2dParams& params);

// How the producer fills a stage with the chunk's input.
//  kAuto: row copies where RowCopiesServe and the input is 16-byte aligned
//    (16-byte copies of whole 4-pixel groups of the input rows, transposed
//    in shared memory), else kGathers;
//  kGathers: 4-byte copies, each placing one float (for tests and
//    benchmarks: both give the same stage contents, so bitwise the same
//    output).
enum class Producer { kAuto, kGathers };

// Whether row copies serve `params`: in_width and the grid's width
// (W_out + k - 1) multiples of 4, k - 1 - padding >= 0, and a tile's span
// of grid pixels at most 1152 (its in-place transposition holds 9 pixels
// per producer thread). The reference shape (256 x 256, k = 3, p = 0) does.
bool RowCopiesServe(const ConvTranspose2dParams& params);

// Launches on `stream` with as many stages (up to 4) as fit the device, one
// block per multiprocessor less signals.free_multiprocessors; arguments as
// ConvTranspose2dBiasGelu's, already validated by it, with prepared_weight
// pointing at this layout (16-byte aligned). Input and output need only
// float alignment (row copies need 16). Preconditions: Supports,
// AvailableOnCurrentDevice.
absl::Status Launch(const ConvTranspose2dParams& params, const float* input,
                    const float* prepared_weight, const float* bias, float* output,
                    int64_t num_groups, double* group_sums, const ConvSampleSignals& signals,
                    cudaStream_t stream, Producer producer = Producer::kAuto);

}  // namespace fuseserve::cuda::conv_wgmma
