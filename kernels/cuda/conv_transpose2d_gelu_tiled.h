#pragma once

// Internal to kernels/cuda/conv_transpose2d_gelu.cu, whose public launcher
// dispatches here: the shared-memory-tiled tensor-core kernel for stride-1
// ConvTranspose2d + bias + GELU (+ GroupNorm sums) in one TF32 pass. The
// public API and its contracts are in conv_transpose2d_gelu.h.
//
// GEMM per sample: M = output channels, N = the sample's output pixels
// (flat index oy * W_out + ox), K = (8-channel input chunk, tap, channel in
// chunk). A block computes 64 channels x 512 pixels; each pipeline stage
// holds, for one chunk of 8 input channels, the input rows the block's
// pixels touch (copied from NCHW into a zero-padded tile) and the chunk's
// weights for all k*k taps in mma.sync fragment order.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/conv_transpose2d_gelu.h"
#include "kernels/cuda/math_mode.h"

namespace fuseserve::cuda::conv_tiled {

// Whether the tiled kernel (and its weight layout) serves `params` in `mode`:
// stride 1, kTf32, in_width % 4 == 0 (rows copied in 16-byte pieces), and
// two pipeline stages fit in 227 KB of shared memory per block (Hopper's
// limit). Depends on params and mode only, so that weight preparation on the
// host and the launch agree. Precondition: ValidateConvTranspose2dParams ok.
bool Supports(const ConvTranspose2dParams& params, MathMode mode);

// Floats of the tiled weight layout (Supports must hold):
// [co_tile][chunk][tap][m16 tile i][lane][e] with co_tile = co / 64,
// chunk = ci / 8, tap = kh * k + kw, i = co % 64 / 16, and (lane, e) the
// position of A element (row co % 16, column ci % 8) in mma.sync m16n8k8's
// TF32 A fragment: lane = 4 * (row % 8) + column % 4,
// e = row / 8 + 2 * (column / 4). Channels past C_in or C_out are 0.
int64_t PreparedWeightSize(const ConvTranspose2dParams& params);

// Index of w[ci, co, kh, kw] (tap = kh * k + kw) in that layout.
int64_t WeightIndex(const ConvTranspose2dParams& params, int64_t ci, int64_t co, int64_t tap);

// Bytes of shared memory per block (dynamic and static) with `stages`
// pipeline stages.
int64_t SharedMemoryBytes(const ConvTranspose2dParams& params, int stages);

// Pipeline stages to run with on the current device: 3 when they fit in
// its shared memory per block, else 2, else 0 (the tiled kernel cannot run
// there; sm_80 has 164 KB, sm_86/89 100 KB). Precondition: Supports.
absl::StatusOr<int> StagesOnCurrentDevice(const ConvTranspose2dParams& params);

// Launches the kernel with `stages` (2 or 3) stages on `stream`; arguments as
// ConvTranspose2dBiasGelu's, already validated by it, with prepared_weight
// pointing at the tiled layout (16-byte aligned). The input may have any
// 4-byte alignment (16-byte copies when it is 16-byte aligned, 4-byte copies
// otherwise), and so may the output (stored a float at a time, a warp's 32
// consecutive pixels of one channel per store).
absl::Status Launch(const ConvTranspose2dParams& params, int stages, const float* input,
                    const float* prepared_weight, const float* bias, float* output,
                    int64_t num_groups, double* group_sums, cudaStream_t stream);

}  // namespace fuseserve::cuda::conv_tiled
