#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/add_partials.h"
#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/skinny_linear.h"

namespace fuseserve::cuda {
namespace {

// One m16n8k8 tile: 16 rows of x (the batch, padded) by 8 weight rows (the
// outputs), 8 columns of K per MMA.
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroupsPerWarp = 2;                     // 8-row groups of W per warp
constexpr int kRowsPerWarp = 8 * kGroupsPerWarp;      // 16
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;  // 128
constexpr int kTileRows = 16;                         // batch rows per MMA tile
constexpr int kStageColumns = static_cast<int>(kSkinnyLinearStageColumns);
constexpr int kStepColumns = 16;                              // K per float4 load of 4 lanes
constexpr int kStepsPerStage = kStageColumns / kStepColumns;  // 4
constexpr int kStageVectors = kStageColumns / 4;              // float4 per row of a stage
// Shared rows of x are 80 floats apart: the 8 rows x 4 float4 that one
// quarter-warp reads fall in distinct banks.
constexpr int kStageStride = kStageColumns + 16;
constexpr int64_t kTargetBlocks = 512;
static_assert(kSkinnyLinearMaxBatch % kTileRows == 0, "the padded batches cover the maximum");

// The TF32 halves of one staged x value, as the MMAs read them: `big` =
// the value rounded to TF32 and `small` = the remainder rounded to TF32
// (x = big + small to ~2^-22 relative). Where the rounding is not finite
// (Inf, NaN, or a value within 2^-11 of the largest float), big is 0 and
// small holds the value itself (a NaN as the canonical quiet NaN, which the
// MMA's truncation to TF32 keeps a NaN): it then reaches the result once,
// through small * W_big, as through a float32 product, and never meets
// W's small half, whose sign may differ from W_big's (Inf - Inf would give
// NaN). Weights are finite (model weights): a non-finite weight gives NaN
// where float32 may give Inf.
__device__ __forceinline__ void SplitStaged(float value, float& big, float& small) {
  const uint32_t rounded = Tf32Bits(value);
  if ((rounded & 0x7f800000u) != 0x7f800000u) {
    big = __uint_as_float(rounded);
    small = __uint_as_float(Tf32Bits(value - big));
  } else {
    big = 0.0f;
    small = value != value ? __uint_as_float(0x7fc00000u) : value;
  }
}

// W's halves (rounded to nearest TF32, like x's).
struct Tf32Pair {
  uint32_t big;
  uint32_t small;
};

__device__ __forceinline__ Tf32Pair Split(float value) {
  const uint32_t big = Tf32Bits(value);
  return {big, Tf32Bits(value - __uint_as_float(big))};
}

// Block (bx, s) computes rows [128 bx, 128 bx + 128) of y over K slice s
// ([s k_per_block, (s + 1) k_per_block)) into out + s * batch * F_out, on
// the tensor cores in 3xTF32 (big*big into one accumulator, the two cross
// products into another, added at the end: float32 accuracy at K slices of
// up to kSkinnyLinearMaxSliceColumns; non-finite inputs as in float32, see
// SplitStaged). kTiles: 16-row tiles of x (batch padded to 16 kTiles; rows
// past `batch` are staged as zeros and dropped).
//
// x is split once per CTA: each stage lands in xs by cp.async
// (double-buffered), then the CTA rewrites it in place as the big halves
// and writes the small halves to x_small, so that the 8 warps that read
// the stage do no conversion.
//
// Lane (r = lane / 4, q = lane % 4) loads W[row r of group g][16 s + 4 q,
// +4) per step s (four lanes read 64 contiguous bytes of a row). The MMA's
// K order is permuted so that these float4 are its B fragments as loaded:
// the first MMA of a step takes columns 4q and 4q + 1 as its k = q and
// k = q + 4, the second 4q + 2 and 4q + 3. x's A fragments follow the
// same order, from one float4 of rows r and r + 8 of the tile.
template <int kTiles>
__global__ void __launch_bounds__(kThreads)
    SkinnyLinearKernel(const float* __restrict__ x, const float* __restrict__ weight,
                       float* __restrict__ out, int batch, int in_features, int out_features,
                       int k_per_block) {
  constexpr int kBatch = kTiles * kTileRows;
  __shared__ alignas(16) float xs[2][kBatch][kStageStride];  // raw, then the big halves
  __shared__ alignas(16) float x_small[kBatch][kStageStride];
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int r = lane / 4;
  const int q = lane % 4;
  const int k_begin = static_cast<int>(blockIdx.y) * k_per_block;
  const int stages = k_per_block / kStageColumns;
  const int first_row = static_cast<int>(blockIdx.x) * kRowsPerBlock + warp * kRowsPerWarp;

  const float4* w_rows[kGroupsPerWarp];
#pragma unroll
  for (int g = 0; g < kGroupsPerWarp; ++g) {
    // A row past the end re-reads the last one; its sums are not stored.
    const int row = min(first_row + g * 8 + r, out_features - 1);
    w_rows[g] = reinterpret_cast<const float4*>(weight + static_cast<int64_t>(row) * in_features +
                                                k_begin) +
                q;
  }

  // Stage `stage` of this block's K slice into xs[buffer] (zeros past batch).
  const auto load_stage = [&](int stage, int buffer) {
    for (int i = static_cast<int>(threadIdx.x); i < kBatch * kStageVectors; i += kThreads) {
      const int n = i / kStageVectors;
      const int v = i % kStageVectors;
      const bool valid = n < batch;
      const float* source = valid ? x + static_cast<int64_t>(n) * in_features + k_begin +
                                        stage * kStageColumns + v * 4
                                  : x;
      CpAsync16(&xs[buffer][n][v * 4], source, valid);
    }
    CpAsyncCommit();
  };

  // xs[buffer] -> the big halves in place, x_small the small halves.
  const auto split_stage = [&](int buffer) {
    for (int i = static_cast<int>(threadIdx.x); i < kBatch * kStageVectors; i += kThreads) {
      const int n = i / kStageVectors;
      const int c = i % kStageVectors * 4;
      float4* big4 = reinterpret_cast<float4*>(&xs[buffer][n][c]);
      const float4 value = *big4;
      float4 big_half;
      float4 small_half;
      SplitStaged(value.x, big_half.x, small_half.x);
      SplitStaged(value.y, big_half.y, small_half.y);
      SplitStaged(value.z, big_half.z, small_half.z);
      SplitStaged(value.w, big_half.w, small_half.w);
      *big4 = big_half;
      *reinterpret_cast<float4*>(&x_small[n][c]) = small_half;
    }
  };

  float big[kTiles][kGroupsPerWarp][4];
  float cross[kTiles][kGroupsPerWarp][4];
  ZeroAccumulators(big);
  ZeroAccumulators(cross);

  load_stage(0, 0);
  for (int stage = 0; stage < stages; ++stage) {
    // This stage's weights first: they are in flight across the barrier.
    float4 w[kStepsPerStage][kGroupsPerWarp];
#pragma unroll
    for (int s = 0; s < kStepsPerStage; ++s) {
#pragma unroll
      for (int g = 0; g < kGroupsPerWarp; ++g) {
        // Streamed: the weight is read once per call; x is what stays cached.
        w[s][g] = __ldcs(w_rows[g] + stage * kStageVectors + s * 4);
      }
    }
    CpAsyncWait<0>();
    // Stage `stage` is visible to all, and every warp is done with the
    // buffer the next copy overwrites and with x_small (both read in the
    // previous iteration).
    __syncthreads();
    if (stage + 1 < stages) load_stage(stage + 1, (stage + 1) & 1);
    split_stage(stage & 1);
    __syncthreads();
    const float(*x_big)[kStageStride] = xs[stage & 1];
#pragma unroll
    for (int s = 0; s < kStepsPerStage; ++s) {
      // B fragments: {column 4q + 2h, 4q + 2h + 1} of each group's row r.
      uint32_t b_big[kGroupsPerWarp][2][2];
      uint32_t b_small[kGroupsPerWarp][2][2];
#pragma unroll
      for (int g = 0; g < kGroupsPerWarp; ++g) {
        const float values[4] = {w[s][g].x, w[s][g].y, w[s][g].z, w[s][g].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const Tf32Pair pair = Split(values[e]);
          b_big[g][e / 2][e % 2] = pair.big;
          b_small[g][e / 2][e % 2] = pair.small;
        }
      }
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const int upper_row = t * kTileRows + r;
        const int column = s * kStepColumns + q * 4;
        const float4 big_upper = *reinterpret_cast<const float4*>(&x_big[upper_row][column]);
        const float4 big_lower = *reinterpret_cast<const float4*>(&x_big[upper_row + 8][column]);
        const float4 small_upper = *reinterpret_cast<const float4*>(&x_small[upper_row][column]);
        const float4 small_lower =
            *reinterpret_cast<const float4*>(&x_small[upper_row + 8][column]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // A fragment {row r, row r + 8} x {k = q, k = q + 4}.
          const uint32_t a_big[4] = {__float_as_uint(h == 0 ? big_upper.x : big_upper.z),
                                     __float_as_uint(h == 0 ? big_lower.x : big_lower.z),
                                     __float_as_uint(h == 0 ? big_upper.y : big_upper.w),
                                     __float_as_uint(h == 0 ? big_lower.y : big_lower.w)};
          const uint32_t a_small[4] = {__float_as_uint(h == 0 ? small_upper.x : small_upper.z),
                                       __float_as_uint(h == 0 ? small_lower.x : small_lower.z),
                                       __float_as_uint(h == 0 ? small_upper.y : small_upper.w),
                                       __float_as_uint(h == 0 ? small_lower.y : small_lower.w)};
#pragma unroll
          for (int g = 0; g < kGroupsPerWarp; ++g) {
            const uint32_t bb[2] = {b_big[g][h][0], b_big[g][h][1]};
            const uint32_t bs[2] = {b_small[g][h][0], b_small[g][h][1]};
            MmaTf32(big[t][g], a_big, bb);
            MmaTf32(cross[t][g], a_big, bs);
            MmaTf32(cross[t][g], a_small, bb);
          }
        }
      }
    }
  }

  // C fragment: rows r and r + 8 of the tile, outputs 2q and 2q + 1 of the
  // group.
  float* out_slice = out + static_cast<int64_t>(blockIdx.y) * batch * out_features;
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int g = 0; g < kGroupsPerWarp; ++g) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = t * kTileRows + r + (e / 2) * 8;
        const int o = first_row + g * 8 + 2 * q + e % 2;
        if (n < batch && o < out_features) {
          out_slice[static_cast<int64_t>(n) * out_features + o] = big[t][g][e] + cross[t][g][e];
        }
      }
    }
  }
}

int64_t RowBlocks(int64_t out_features) {
  return (out_features + kRowsPerBlock - 1) / kRowsPerBlock;
}

template <int kTiles>
absl::Status Launch(int64_t batch, int64_t in_features, int64_t out_features, int64_t slices,
                    const float* x, const float* weight, float* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(RowBlocks(out_features)), static_cast<unsigned>(slices));
  SkinnyLinearKernel<kTiles><<<grid, kThreads, 0, stream>>>(
      x, weight, out, static_cast<int>(batch), static_cast<int>(in_features),
      static_cast<int>(out_features), static_cast<int>(in_features / slices));
  return CudaStatus(cudaGetLastError(), "SkinnyLinear kernel launch");
}

absl::Status LaunchPadded(int64_t batch, int64_t in_features, int64_t out_features, int64_t slices,
                          const float* x, const float* weight, float* out, cudaStream_t stream) {
  switch ((batch + kTileRows - 1) / kTileRows) {
    case 1:
      return Launch<1>(batch, in_features, out_features, slices, x, weight, out, stream);
    case 2:
      return Launch<2>(batch, in_features, out_features, slices, x, weight, out, stream);
    default:
      return Launch<3>(batch, in_features, out_features, slices, x, weight, out, stream);
  }
}

}  // namespace

bool SkinnyLinearSupports(int64_t batch, int64_t in_features, int64_t out_features, const float* x,
                          const float* weight) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  return x != nullptr && weight != nullptr && batch >= 1 && batch <= kSkinnyLinearMaxBatch &&
         in_features >= kSkinnyLinearStageColumns && in_features % kSkinnyLinearStageColumns == 0 &&
         in_features <= kMaxInt && out_features >= 1 && out_features <= kMaxInt - kRowsPerBlock &&
         in_features / SkinnyLinearSlices(in_features, out_features) <=
             kSkinnyLinearMaxSliceColumns &&
         Aligned16(x) && Aligned16(weight);
}

int64_t SkinnyLinearSlices(int64_t in_features, int64_t out_features) {
  if (in_features < kSkinnyLinearStageColumns || out_features < 1) return 1;
  int64_t slices = 1;
  while (slices * 2 <= kSkinnyLinearMaxSlices &&
         in_features % (slices * 2 * kSkinnyLinearStageColumns) == 0 &&
         RowBlocks(out_features) * slices * 2 <= kTargetBlocks) {
    slices *= 2;
  }
  return slices;
}

size_t SkinnyLinearWorkspaceBytes(int64_t batch, int64_t in_features, int64_t out_features) {
  if (batch < 1 || out_features < 1) return 0;
  const int64_t slices = SkinnyLinearSlices(in_features, out_features);
  if (slices <= 1) return 0;
  return static_cast<size_t>(slices * batch * out_features) * sizeof(float);
}

absl::Status SkinnyLinear(int64_t batch, int64_t in_features, int64_t out_features, const float* x,
                          const float* weight, float* y, void* workspace, cudaStream_t stream) {
  if (y == nullptr || !SkinnyLinearSupports(batch, in_features, out_features, x, weight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SkinnyLinear needs 1 <= batch <= ", kSkinnyLinearMaxBatch,
                     ", in_features a multiple of ", kSkinnyLinearStageColumns,
                     ", 16-byte aligned non-null x and weight and a non-null y; got batch ", batch,
                     ", in_features ", in_features, ", out_features ", out_features));
  }
  const int64_t slices = SkinnyLinearSlices(in_features, out_features);
  if (slices == 1) {
    return LaunchPadded(batch, in_features, out_features, 1, x, weight, y, stream);
  }
  const int64_t count = batch * out_features;
  const auto begin = reinterpret_cast<uintptr_t>(workspace);
  const auto end = begin + static_cast<uintptr_t>(slices * count) * sizeof(float);
  const auto y_begin = reinterpret_cast<uintptr_t>(y);
  const auto y_end = y_begin + static_cast<uintptr_t>(count) * sizeof(float);
  if (workspace == nullptr || !Aligned16(workspace) || (begin < y_end && y_begin < end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SkinnyLinear needs a 16-byte aligned workspace of SkinnyLinearWorkspaceBytes (",
        slices * count * static_cast<int64_t>(sizeof(float)), " bytes) apart from y"));
  }
  float* partials = static_cast<float*>(workspace);
  RETURN_IF_ERROR(
      LaunchPadded(batch, in_features, out_features, slices, x, weight, partials, stream));
  // y = partial 0 + partial 1 + ... in slice order.
  return AddPartials(partials, partials + count, slices - 1, count, y, stream);
}

}  // namespace fuseserve::cuda
