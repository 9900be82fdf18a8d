#pragma once

// ConvTranspose2d (NCHW, weight [C_in, C_out, k, k], dilation 1, groups 1)
// + bias + exact erf GELU on the GPU, for any kernel size, stride, padding
// and output_padding, with the GroupNorm statistics of its output
// accumulated in the epilogue so that the normalisation needs no extra read
// for statistics (kernels/cuda/group_norm.h GroupNormApply).
//
// H_out = (H - 1) * stride - 2 * padding + (k - 1) + output_padding + 1.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/math_mode.h"

namespace fuseserve::cuda {

struct ConvTranspose2dParams {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t in_height = 0;
  int64_t in_width = 0;
  int64_t kernel_size = 1;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
};

int64_t ConvTranspose2dOutputSize(int64_t in, int64_t kernel_size, int64_t stride,
                                  int64_t padding, int64_t output_padding);

// InvalidArgument unless every size and the stride are >= 1, padding >= 0,
// 0 <= output_padding < stride, the output is non-empty, batch <= 65535, and
// one sample's input and output and the prepared weight each hold fewer than
// 2^31 elements (the kernels index within a sample in 32 bits).
absl::Status ValidateConvTranspose2dParams(const ConvTranspose2dParams& params);

// Floats of the device-side weight layout the kernels read, prepared once
// at load time from PyTorch's [C_in, C_out, k, k] by PrepareConvTransposeWeight
// (0 for invalid params). The layout depends on C_in, C_out, k, the stride
// and the mode only — never on batch or spatial sizes, so one prepared
// weight serves inputs of any size (kTf32 stores TF32-rounded values, and
// stride-1 kTf32 appends the tiled kernel's layout): prepare with the mode
// the kernel will run in.
int64_t PreparedConvTransposeWeightSize(const ConvTranspose2dParams& params, MathMode mode);

// Writes the prepared layout of `weight` (host, PyTorch layout) into
// `prepared` (host, PreparedConvTransposeWeightSize floats). Layout changes
// and precision splits are allowed at load time (SPEC.md §4).
absl::Status PrepareConvTransposeWeight(const ConvTranspose2dParams& params, MathMode mode,
                                        const float* weight, float* prepared);

// Progress reports of a convolution to a kernel that runs beside it.
struct ConvSampleSignals {
  // [batch] counters, zeroed by the caller; sample n's reaches
  // ConvTranspose2dSignalsPerSample once every output value of the sample
  // and its group sums are written (incremented with release semantics at
  // GPU scope). Null: no signals.
  unsigned* sample_done = nullptr;
  // Multiprocessors the convolution leaves to the kernel launched after it
  // (with programmatic dependent launch, which the convolution allows as
  // soon as each of its blocks runs).
  int free_multiprocessors = 0;
};

// output = GELU(conv_transpose(input) + bias) [N, C_out, H_out, W_out];
// bias may be null (0). prepared_weight must be 16-byte aligned (cudaMalloc
// memory is); input and output need only float alignment. Stride 1 runs on
// the tensor cores (kTf32: one TF32 pass, by a kernel that tiles the input in
// shared memory when in_width % 4 == 0 and its tiles fit the device; kFp32:
// 3xTF32); stride > 1 runs in float32 FFMA in both modes.
// When group_sums is not null, adds each (sample, group)'s sum and sum of
// squares of the output into group_sums (2 * batch * num_groups doubles,
// zeroed by the caller; num_groups must divide out_channels); when it is
// null, num_groups is ignored.
//
// With signals.sample_done (which only the wgmma kernel gives: see
// ConvTranspose2dGivesSampleSignals; FailedPrecondition otherwise) the
// convolution reports each sample's completion to a kernel launched right
// after it that runs beside it (group_norm_concurrent.h).
absl::Status ConvTranspose2dBiasGelu(const ConvTranspose2dParams& params, MathMode mode,
                                     const float* input, const float* prepared_weight,
                                     const float* bias, float* output, int64_t num_groups,
                                     double* group_sums, cudaStream_t stream,
                                     const ConvSampleSignals& signals = {});

// Whether ConvTranspose2dBiasGelu runs these arguments on the wgmma kernel
// here, the one that gives sample signals.
absl::StatusOr<bool> ConvTranspose2dGivesSampleSignals(const ConvTranspose2dParams& params,
                                                       MathMode mode);

// The count a sample's signal reaches once the sample is written.
int64_t ConvTranspose2dSignalsPerSample(const ConvTranspose2dParams& params);

// The kernels behind ConvTranspose2dBiasGelu, which picks the first that
// serves the call (kAuto):
//  kWgmma: stride 1, kTf32, compute capability 9.0 (sm_90a wgmma), its
//    pipeline stages fit in shared memory; its producer copies whole
//    16-byte groups of input rows where it can (conv_wgmma::RowCopiesServe,
//    a 16-byte aligned input), else gathers floats;
//  kWgmmaGathers: the same kernel with the gathering producer wherever it
//    serves (not chosen by kAuto; bitwise the same output as kWgmma);
//  kTiled: stride 1, kTf32, in_width % 4 == 0, its tiles fit in shared
//    memory (mma.sync, sm_80+);
//  kImplicitGemm: stride 1, either mode (mma.sync; kFp32 as 3xTF32);
//  kDirect: any stride, either mode (float32 FFMA).
enum class ConvTransposeKernel { kAuto, kWgmma, kWgmmaGathers, kTiled, kImplicitGemm, kDirect };

// ConvTranspose2dBiasGelu on the given kernel, so that tests and benchmarks
// can run each one wherever it serves the call; FailedPrecondition where it
// does not (kDirect always serves a valid call).
absl::Status ConvTranspose2dBiasGeluOn(ConvTransposeKernel kernel,
                                       const ConvTranspose2dParams& params, MathMode mode,
                                       const float* input, const float* prepared_weight,
                                       const float* bias, float* output, int64_t num_groups,
                                       double* group_sums, cudaStream_t stream,
                                       const ConvSampleSignals& signals = {});

}  // namespace fuseserve::cuda
