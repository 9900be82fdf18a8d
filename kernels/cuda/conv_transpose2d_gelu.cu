#include "kernels/cuda/conv_transpose2d_gelu.h"

#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/conv_transpose2d_gelu_tiled.h"
#include "kernels/cuda/conv_transpose2d_gelu_wgmma.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/mma_sync.cuh"

// Four kernels (ConvTranspose2dBiasGelu):
//
//  stride 1, kTf32 on a Hopper GPU (compute capability 9.0) when its stages
//    fit (conv_wgmma::Supports; the reference shape): the warp-specialised
//    wgmma kernel of conv_transpose2d_gelu_wgmma.cu.
//  other stride 1, kTf32, in_width % 4 == 0 and the shared-memory tiles fit
//    (conv_tiled::Supports; the reference shape): the tiled kernel of
//    conv_transpose2d_gelu_tiled.cu, which copies the input rows a block
//    touches into shared memory once per 8-channel chunk and reads every
//    tap's operand from there. Its weight layout is prepared next to the
//    general one, so that a device with too little shared memory for it
//    (conv_tiled::StagesOnCurrentDevice) runs the general stride-1 kernel.
//  other stride 1: an implicit GEMM on the tensor cores. A stride-1 transposed
//    convolution is a regular correlation of the input with the flipped
//    kernel: out[n, co, oh, ow] = sum over (kh, kw, ci) of
//    x[n, ci, oh + p - kh, ow + p - kw] * w[ci, co, kh, kw] (taps that fall
//    outside the input contribute 0). GEMM rows M are the output pixels of
//    one sample, columns N the output channels, and the reduction index
//    K = (kh * k + kw) * C_in + ci. A tiles are gathered straight from NCHW
//    through registers (0 outside the input), B tiles come from the prepared
//    weight by cp.async; mma.sync m16n8k8 TF32 (sm_80+, also runs on
//    Hopper). kTf32 runs one TF32 product; kFp32 runs 3xTF32
//    (a = a_big + a_small, acc += a_small*b_big + a_big*b_small + a_big*b_big),
//    which keeps float32-class accuracy on the tensor cores. When C_in is a
//    multiple of the K tile (64), each K tile lies in one tap and the gather
//    takes a cheaper path (kWholeTapTiles); otherwise (kh, kw, ci) is decoded
//    per element.
//  stride > 1: a direct gather in float32 FFMA, for both modes: each output
//    pixel sums only the taps with (o + p - kh) divisible by the stride.
//
// Both epilogues add the bias, apply GELU, write the output, and add each
// (sample, group)'s sum and sum of squares into group_sums: per-thread double
// partials, a warp reduction per group, shared-memory slots per block, and
// then one global double atomic per (block, group, statistic).

namespace fuseserve::cuda {
namespace {

// Implicit-GEMM tile. BN = 64 covers the reference shape's 64 output channels
// in one tile, so every gathered input patch is read by exactly one block.
// BM = 128 pixels x BN = 64 with 8 warps gives each warp a 32x32 tile (2x4
// m16n8k8 blocks, 32 accumulator floats per thread) at ~118 registers, so
// two blocks fit on an SM (kTf32; kSplit needs ~158 and runs one). BK = 64
// is eight k8 steps per stage: half the barriers and loop overhead per MMA
// of BK = 32, measured 8% faster on an H200 at the reference shape (two
// 106 KB blocks per SM on Hopper; one on sm_80's 164 KB).
constexpr int kBlockM = 128;
constexpr int kBlockN = 64;
constexpr int kBlockK = 64;
constexpr int kThreads = 256;
constexpr int kWarpTileM = 32;
constexpr int kWarpTileN = 32;
constexpr int kWarpsM = kBlockM / kWarpTileM;  // 4
constexpr int kFragM = kWarpTileM / 16;        // 2 m16n8k8 row blocks
constexpr int kFragN = kWarpTileN / 8;         // 4 m16n8k8 column blocks
// Two shared-memory stages: while the tensor cores work on one, the next
// tile's weights arrive by cp.async and its input gathers are in flight in
// registers (registers limit a block to 2 per SM anyway).
// The gathers go through registers rather than 4-byte cp.async (measured
// slower: one LSU operation per element and no chance to round) so that A is
// rounded to TF32 once when stored instead of once per fragment load.
constexpr int kStages = 2;
// Leading dimensions: an A or B fragment load reads K rows q and q + 4
// (q < 4) at 8 offsets g each, so a leading dimension of 8 (mod 32) puts the
// 32 lanes on distinct banks (A's float2 loads too: 2g + 8q covers the even
// banks of each half-warp); the accumulator store writes columns 2q, so C
// uses 4 (mod 32). Multiples of 4 keep the 16-byte cp.async destinations
// aligned.
constexpr int kLdA = kBlockM + 8;  // A stored K-major: element (m, k) at k * kLdA + m
constexpr int kLdB = kBlockN + 8;  // B stored K-major: element (k, n) at k * kLdB + n
constexpr int kLdC = kBlockM + 4;  // C stored channel-major: (m, n) at n * kLdC + m
constexpr int kStageFloats = kBlockK * kLdA + kBlockK * kLdB;
constexpr int kPipelineBytes = kStages * kStageFloats * static_cast<int>(sizeof(float));
constexpr int kEpilogueBytes = kBlockN * kLdC * static_cast<int>(sizeof(float));
constexpr int kGemmSmemBytes = kPipelineBytes > kEpilogueBytes ? kPipelineBytes : kEpilogueBytes;
// Each thread gathers one pixel (threadIdx % BM) for every kKStep-th K row.
constexpr int kKStep = kThreads / kBlockM;                  // 2
constexpr int kARowsPerThread = kBlockK / kKStep;           // 16
constexpr int kBVectorsPerThread = kBlockK * kBlockN / 4 / kThreads;  // 2
// Epilogue: each thread owns one pixel and kBlockN / kKStep channels.
constexpr int kGemmChannelsPerThread = kBlockN / kKStep;  // 32

static_assert(kBlockM % kWarpTileM == 0 && kBlockN % kWarpTileN == 0, "warp tiling");
static_assert((kBlockM / kWarpTileM) * (kBlockN / kWarpTileN) * 32 == kThreads, "warp count");
static_assert(kBlockK % 8 == 0 && kBlockK % kKStep == 0, "K tiling");
static_assert(kBlockK * kBlockN / 4 % kThreads == 0, "B vectors per thread");
static_assert(kBlockM % 32 == 0, "a warp's pixels share one channel half in the epilogue");

// Direct (stride > 1) kernel: one pixel per thread, 16 channels per block
// row: 16 accumulators per thread, weights read as four float4 per tap.
constexpr int kDirectThreads = 128;
constexpr int kDirectChannels = 16;
static_assert(kBlockN % kDirectChannels == 0, "direct blocks stay inside a padded row");

int64_t RoundUp(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

int64_t PaddedK(const ConvTranspose2dParams& p) {
  return RoundUp(p.in_channels * p.kernel_size * p.kernel_size, kBlockK);
}
int64_t PaddedN(const ConvTranspose2dParams& p) { return RoundUp(p.out_channels, kBlockN); }

// Round to nearest TF32 (ties away from zero), as cvt.rna.tf32.f32 does.
float RoundToTf32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7f800000u) != 0x7f800000u) {  // finite
    bits = (bits + 0x1000u) & 0xffffe000u;
  }
  float rounded;
  std::memcpy(&rounded, &bits, sizeof(rounded));
  return rounded;
}

// Everything a kernel needs, in 32-bit where ValidateConvTranspose2dParams
// guarantees that per-sample sizes fit.
struct Geometry {
  int in_channels;
  int out_channels;
  int in_height;
  int in_width;
  int out_height;
  int out_width;
  int kernel_size;
  int stride;
  int padding;
  int k_total;       // in_channels * kernel_size^2
  int padded_n;      // row length of the prepared weight
  int channels_per_group;  // 0: no statistics
  int num_groups;
};

// kSplit: value = big + small with both TF32 (small holds what big's 10
// mantissa bits miss). Otherwise value is already TF32 and only big is set.
template <bool kSplit>
__device__ __forceinline__ void SplitTf32(float value, uint32_t& big, uint32_t& small) {
  if (kSplit) {
    const float rounded = RoundTf32(value);
    big = __float_as_uint(rounded);
    small = __float_as_uint(RoundTf32(value - rounded));
  } else {
    big = __float_as_uint(value);
  }
}

// Where pixel m of a tile lives in an A row of shared memory: within each
// 16 pixels, m and m + 8 are adjacent so that an A fragment's rows g and
// g + 8 load as one float2 (still a bijection on each 16-pixel block).
__device__ __forceinline__ int PixelSlot(int m) {
  return (m & ~15) | ((m & 7) << 1) | ((m >> 3) & 1);
}

// Adds a warp's partial (sum, sum of squares) of one group into the block's
// shared slots and resets them. Called by all 32 lanes of a warp together
// (the channel sequence, hence every call site's condition, is warp-uniform).
__device__ __forceinline__ void FlushGroup(double& sum, double& sum_squares, double* slot) {
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
    sum_squares += __shfl_down_sync(0xffffffffu, sum_squares, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(slot, sum);
    atomicAdd(slot + 1, sum_squares);
  }
  sum = 0;
  sum_squares = 0;
}

// Adds the block's slots (groups first_group.. of the channels
// [channel_begin, channel_end)) to group_sums. Call after a barrier that
// follows every FlushGroup.
__device__ __forceinline__ void PublishGroupSlots(const Geometry& g, const double* slots,
                                                  int channel_begin, int channel_end, int sample,
                                                  double* group_sums) {
  const int first_group = channel_begin / g.channels_per_group;
  const int last_group = (channel_end - 1) / g.channels_per_group;
  const int t = static_cast<int>(threadIdx.x);
  if (t < 2 * (last_group - first_group + 1)) {
    const int64_t group = static_cast<int64_t>(sample) * g.num_groups + first_group + t / 2;
    atomicAdd(group_sums + 2 * group + (t & 1), slots[t]);
  }
}

// One (pixel tile, channel tile, sample) of the stride-1 implicit GEMM.
// kSplit: 3xTF32 (kFp32 mode, B raw float32); otherwise one TF32 product
// (B already rounded to TF32 by PrepareConvTransposeWeight).
//
// The tensor cores add into their float32 accumulator with truncation, an
// error biased in one direction that grows with the length of the chain of
// MMAs into one accumulator (measured: rel L2 ~1e-5 at K = 576, above the
// fp32 contract). So kSplit sums each K tile (12 MMAs per accumulator) into
// fresh registers and adds those to the running sum with a rounded FADD. It
// needs 32 more registers per thread, hence one block per SM for kSplit.
//
// kWholeTapTiles (C_in % kBlockK == 0): every K tile lies inside one tap, so
// a thread's gathers in a tile share their bounds check and differ by a
// constant channel stride; decoding (kh, kw, ci) per element otherwise costs
// more issue slots than the MMAs themselves.
template <bool kSplit, bool kWholeTapTiles>
__global__ void __launch_bounds__(kThreads, kSplit ? 1 : 2)
    ConvTransposeStride1Gemm(Geometry g, const float* __restrict__ input,
                             const float* __restrict__ weight, const float* __restrict__ bias,
                             float* __restrict__ output, double* __restrict__ group_sums) {
  extern __shared__ __align__(128) float smem[];
  __shared__ double slots[2 * kBlockN];

  const int t = static_cast<int>(threadIdx.x);
  const int sample = static_cast<int>(blockIdx.z);
  const int channel_begin = static_cast<int>(blockIdx.y) * kBlockN;
  const int out_plane = g.out_height * g.out_width;
  const int in_plane = g.in_height * g.in_width;
  const int pixel_begin = static_cast<int>(blockIdx.x) * kBlockM;
  if (t < 2 * kBlockN) slots[t] = 0;

  // This thread's gather pixel and its K sequence r0, r0 + kKStep, ...
  // decoded incrementally as (kh, kw, ci) to avoid divisions per element.
  const int gather_m = t % kBlockM;
  const int gather_pixel = pixel_begin + gather_m;
  const bool pixel_valid = gather_pixel < out_plane;
  const int oh = pixel_valid ? gather_pixel / g.out_width : 0;
  const int ow = pixel_valid ? gather_pixel - oh * g.out_width : 0;
  const int oh_padded = oh + g.padding;
  const int ow_padded = ow + g.padding;
  const int r0 = t / kBlockM;
  int ci = r0 % g.in_channels;
  int tap = r0 / g.in_channels;
  int kh = tap / g.kernel_size;
  int kw = tap - kh * g.kernel_size;
  const float* sample_input = input + static_cast<int64_t>(sample) * g.in_channels * in_plane;

  const int num_k_tiles = (g.k_total + kBlockK - 1) / kBlockK;

  // Input values outside the image (and K rows past C_in * k^2) are 0.
  float a_values[kARowsPerThread];
  auto load_a = [&](int k_tile) {
    if (kWholeTapTiles) {
      const int k_begin = k_tile * kBlockK;
      const int tile_tap = k_begin / g.in_channels;
      const int tile_kh = tile_tap / g.kernel_size;
      const int ih = oh_padded - tile_kh;
      const int iw = ow_padded - (tile_tap - tile_kh * g.kernel_size);
      const bool valid = pixel_valid &&
                         static_cast<unsigned>(ih) < static_cast<unsigned>(g.in_height) &&
                         static_cast<unsigned>(iw) < static_cast<unsigned>(g.in_width);
      const float* source = valid ? sample_input +
                                        (k_begin - tile_tap * g.in_channels + r0) * in_plane +
                                        ih * g.in_width + iw
                                  : input;
      const int channel_step = valid ? kKStep * in_plane : 0;
#pragma unroll
      for (int j = 0; j < kARowsPerThread; ++j) {
        a_values[j] = valid ? __ldg(source) : 0.0f;
        source += channel_step;
      }
    }
#pragma unroll
    for (int j = 0; j < (kWholeTapTiles ? 0 : kARowsPerThread); ++j) {
      const int ih = oh_padded - kh;
      const int iw = ow_padded - kw;
      const bool valid = pixel_valid && kh < g.kernel_size &&
                         static_cast<unsigned>(ih) < static_cast<unsigned>(g.in_height) &&
                         static_cast<unsigned>(iw) < static_cast<unsigned>(g.in_width);
      a_values[j] = valid ? __ldg(sample_input + ci * in_plane + ih * g.in_width + iw) : 0.0f;
      ci += kKStep;
      while (ci >= g.in_channels) {
        ci -= g.in_channels;
        if (++kw == g.kernel_size) {
          kw = 0;
          ++kh;
        }
      }
    }
  };
  // kSplit keeps A in float32 (split per fragment); otherwise it is rounded
  // to TF32 here, once per element.
  auto store_a = [&](int stage) {
    float* a_stage = smem + stage * kStageFloats;
#pragma unroll
    for (int j = 0; j < kARowsPerThread; ++j) {
      a_stage[(r0 + j * kKStep) * kLdA + PixelSlot(gather_m)] =
          kSplit ? a_values[j] : RoundTf32(a_values[j]);
    }
  };
  auto issue_b = [&](int k_tile, int stage) {
    float* b_stage = smem + stage * kStageFloats + kBlockK * kLdA;
    const float* b_source = weight + static_cast<int64_t>(k_tile) * kBlockK * g.padded_n +
                            channel_begin;
#pragma unroll
    for (int j = 0; j < kBVectorsPerThread; ++j) {
      const int vector = t + j * kThreads;
      const int row = vector / (kBlockN / 4);
      const int column = (vector % (kBlockN / 4)) * 4;
      CpAsync16(b_stage + row * kLdB + column, b_source + row * g.padded_n + column);
    }
  };

  const int warp = t / 32;
  const int warp_m = (warp % kWarpsM) * kWarpTileM;
  const int warp_n = (warp / kWarpsM) * kWarpTileN;
  const int lane = t % 32;
  const int lane_group = lane / 4;  // PTX fragment "groupID"
  const int lane_quad = lane % 4;   // PTX fragment "threadID_in_group"

  float acc[kFragM][kFragN][4];
  ZeroAccumulators(acc);

  static_assert(kStages == 2, "the loop below alternates two stages");
  load_a(0);
  issue_b(0, 0);
  CpAsyncCommit();
  store_a(0);
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    CpAsyncWait<0>();
    __syncthreads();
    // Tile k_tile is complete in its stage. The other stage was last read
    // in iteration k_tile - 1, which every warp has finished (barrier
    // above), so it can be refilled while this one is multiplied.
    const bool has_next = k_tile + 1 < num_k_tiles;
    if (has_next) {
      issue_b(k_tile + 1, (k_tile + 1) % kStages);
      CpAsyncCommit();
      load_a(k_tile + 1);
    }

    const float* a_stage = smem + (k_tile % kStages) * kStageFloats;
    const float* b_stage = a_stage + kBlockK * kLdA;
    float tile_acc[kFragM][kFragN][4];
    ZeroAccumulators(tile_acc);
#pragma unroll
    for (int kk = 0; kk < kBlockK; kk += 8) {
      // m16n8k8 fragments (PTX ISA, "mma.m16n8k8" .tf32): A holds rows
      // g, g + 8 at columns q, q + 4 (adjacent in shared memory thanks to
      // PixelSlot); B holds rows q, q + 4 at column g.
      uint32_t a_big[kFragM][4];
      uint32_t a_small[kFragM][4];
      uint32_t b_big[kFragN][2];
      uint32_t b_small[kFragN][2];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
        const float* a = a_stage + (kk + lane_quad) * kLdA + warp_m + i * 16 + 2 * lane_group;
        const float2 low_k = *reinterpret_cast<const float2*>(a);
        const float2 high_k = *reinterpret_cast<const float2*>(a + 4 * kLdA);
        const float values[4] = {low_k.x, low_k.y, high_k.x, high_k.y};
#pragma unroll
        for (int e = 0; e < 4; ++e) SplitTf32<kSplit>(values[e], a_big[i][e], a_small[i][e]);
      }
#pragma unroll
      for (int j = 0; j < kFragN; ++j) {
        const float* b = b_stage + (kk + lane_quad) * kLdB + warp_n + j * 8 + lane_group;
        SplitTf32<kSplit>(b[0], b_big[j][0], b_small[j][0]);
        SplitTf32<kSplit>(b[4 * kLdB], b_big[j][1], b_small[j][1]);
      }
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragN; ++j) {
          if (kSplit) {
            // Small terms first: they are added before the large product
            // makes the accumulator large.
            MmaTf32(tile_acc[i][j], a_small[i], b_big[j]);
            MmaTf32(tile_acc[i][j], a_big[i], b_small[j]);
            MmaTf32(tile_acc[i][j], a_big[i], b_big[j]);
          } else {
            MmaTf32(acc[i][j], a_big[i], b_big[j]);
          }
        }
      }
    }
    if (kSplit) {
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragN; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] += tile_acc[i][j][e];
        }
      }
    }
    if (has_next) store_a((k_tile + 1) % kStages);
  }
  __syncthreads();  // every warp is done with the stages before they hold C

  // Epilogue: accumulators through shared memory (channel-major) so that
  // each thread then writes one pixel of consecutive channels and a warp's
  // stores to one channel plane are coalesced. Accumulator element 2h + c
  // is (row g + 8h, column 2q + c).
  float* tile = smem;
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp_m + i * 16 + lane_group + 8 * (e / 2);
        const int column = warp_n + j * 8 + 2 * lane_quad + e % 2;
        tile[column * kLdC + row] = acc[i][j][e];
      }
    }
  }
  __syncthreads();

  const int m = t % kBlockM;
  const int pixel = pixel_begin + m;
  const bool store = pixel < out_plane;
  const int local_begin = (t / kBlockM) * kGemmChannelsPerThread;
  const int channel_end = min(channel_begin + kBlockN, g.out_channels);
  float* sample_output = output + static_cast<int64_t>(sample) * g.out_channels * out_plane;
  const bool stats = group_sums != nullptr;
  const int first_group = stats ? channel_begin / g.channels_per_group : 0;
  // First channel of the next group, tracked instead of a modulo per element.
  int group_end =
      stats ? ((channel_begin + local_begin) / g.channels_per_group + 1) * g.channels_per_group : 0;
  double sum = 0;
  double sum_squares = 0;
#pragma unroll 4
  for (int j = 0; j < kGemmChannelsPerThread; ++j) {
    const int local = local_begin + j;
    const int channel = channel_begin + local;
    if (channel >= g.out_channels) break;  // warp-uniform: depends on the channel only
    const float value =
        GeluErf(tile[local * kLdC + m] + (bias != nullptr ? bias[channel] : 0.0f));
    if (store) {
      sample_output[channel * out_plane + pixel] = value;
      sum += value;
      sum_squares += static_cast<double>(value) * value;
    }
    if (stats && (channel + 1 == group_end || j == kGemmChannelsPerThread - 1 ||
                  channel + 1 == g.out_channels)) {
      FlushGroup(sum, sum_squares,
                 slots + 2 * (group_end / g.channels_per_group - 1 - first_group));
    }
    if (channel + 1 == group_end) group_end += g.channels_per_group;
  }
  if (stats) {
    __syncthreads();
    PublishGroupSlots(g, slots, channel_begin, channel_end, sample, group_sums);
  }
}

// One (pixel tile, 16-channel block, sample) of the direct transposed
// convolution for any stride: out[n, co, oh, ow] sums x[n, ci, ih, iw] *
// w[ci, co, kh, kw] over the taps with oh + p - kh = ih * stride (same for w).
__global__ void __launch_bounds__(kDirectThreads)
    ConvTransposeDirect(Geometry g, const float* __restrict__ input,
                        const float* __restrict__ weight, const float* __restrict__ bias,
                        float* __restrict__ output, double* __restrict__ group_sums) {
  __shared__ double slots[2 * kDirectChannels];
  const int t = static_cast<int>(threadIdx.x);
  const int sample = static_cast<int>(blockIdx.z);
  const int channel_begin = static_cast<int>(blockIdx.y) * kDirectChannels;
  const int out_plane = g.out_height * g.out_width;
  const int in_plane = g.in_height * g.in_width;
  if (t < 2 * kDirectChannels) slots[t] = 0;

  const int pixel = static_cast<int>(blockIdx.x) * kDirectThreads + t;
  const bool pixel_valid = pixel < out_plane;
  float acc[kDirectChannels];
#pragma unroll
  for (int c = 0; c < kDirectChannels; ++c) acc[c] = 0.0f;

  if (pixel_valid) {
    const int oh = pixel / g.out_width;
    const int ow = pixel - oh * g.out_width;
    const int oh_padded = oh + g.padding;
    const int ow_padded = ow + g.padding;
    const float* sample_input = input + static_cast<int64_t>(sample) * g.in_channels * in_plane;
    // Only taps kh = (oh + p) mod stride + j * stride land on an input row.
    for (int kh = oh_padded % g.stride; kh < g.kernel_size; kh += g.stride) {
      const int ih = (oh_padded - kh) / g.stride;  // exact: kh = oh + p (mod stride)
      if (ih < 0) break;
      if (ih >= g.in_height) continue;
      for (int kw = ow_padded % g.stride; kw < g.kernel_size; kw += g.stride) {
        const int iw = (ow_padded - kw) / g.stride;
        if (iw < 0) break;
        if (iw >= g.in_width) continue;
        const float* x = sample_input + ih * g.in_width + iw;
        const float* w = weight +
                         static_cast<int64_t>(kh * g.kernel_size + kw) * g.in_channels * g.padded_n +
                         channel_begin;
        for (int ci = 0; ci < g.in_channels; ++ci) {
          const float xv = x[ci * in_plane];
          const float4* w4 = reinterpret_cast<const float4*>(w + ci * g.padded_n);
#pragma unroll
          for (int v = 0; v < kDirectChannels / 4; ++v) {
            const float4 wv = w4[v];
            acc[4 * v + 0] = fmaf(xv, wv.x, acc[4 * v + 0]);
            acc[4 * v + 1] = fmaf(xv, wv.y, acc[4 * v + 1]);
            acc[4 * v + 2] = fmaf(xv, wv.z, acc[4 * v + 2]);
            acc[4 * v + 3] = fmaf(xv, wv.w, acc[4 * v + 3]);
          }
        }
      }
    }
  }
  __syncthreads();  // slots zeroed before any FlushGroup

  float* sample_output = output + static_cast<int64_t>(sample) * g.out_channels * out_plane;
  const bool stats = group_sums != nullptr;
  const int first_group = stats ? channel_begin / g.channels_per_group : 0;
  const int channel_end = min(channel_begin + kDirectChannels, g.out_channels);
  double sum = 0;
  double sum_squares = 0;
#pragma unroll
  for (int c = 0; c < kDirectChannels; ++c) {
    const int channel = channel_begin + c;
    if (channel < g.out_channels) {  // block-uniform
      const float value = GeluErf(acc[c] + (bias != nullptr ? bias[channel] : 0.0f));
      if (pixel_valid) {
        sample_output[channel * out_plane + pixel] = value;
        sum += value;
        sum_squares += static_cast<double>(value) * value;
      }
      if (stats && ((channel + 1) % g.channels_per_group == 0 || c == kDirectChannels - 1 ||
                    channel + 1 == g.out_channels)) {
        FlushGroup(sum, sum_squares,
                   slots + 2 * (channel / g.channels_per_group - first_group));
      }
    }
  }
  if (stats) {
    __syncthreads();
    PublishGroupSlots(g, slots, channel_begin, channel_end, sample, group_sums);
  }
}

}  // namespace

int64_t ConvTranspose2dOutputSize(int64_t in, int64_t kernel_size, int64_t stride, int64_t padding,
                                  int64_t output_padding) {
  return (in - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1;
}

absl::Status ValidateConvTranspose2dParams(const ConvTranspose2dParams& p) {
  if (p.batch < 1 || p.in_channels < 1 || p.out_channels < 1 || p.in_height < 1 ||
      p.in_width < 1 || p.kernel_size < 1 || p.stride < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvTranspose2d: batch, channels, input sizes, kernel_size and stride must be >= 1; got "
        "batch ",
        p.batch, ", in_channels ", p.in_channels, ", out_channels ", p.out_channels, ", input ",
        p.in_height, "x", p.in_width, ", kernel_size ", p.kernel_size, ", stride ", p.stride));
  }
  if (p.padding < 0 || p.output_padding < 0 || p.output_padding >= p.stride) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvTranspose2d: need padding >= 0 and 0 <= output_padding < stride; got padding ",
        p.padding, ", output_padding ", p.output_padding, ", stride ", p.stride));
  }
  // Every size below is checked against int32 before any product of them is
  // formed, so that none of the products overflows int64.
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (p.in_channels > kInt32Max || p.out_channels > kInt32Max || p.in_height > kInt32Max ||
      p.in_width > kInt32Max || p.kernel_size > 4096 || p.stride > kInt32Max ||
      p.padding > kInt32Max / 4) {
    return absl::InvalidArgumentError("ConvTranspose2d: sizes too large");
  }
  const int64_t out_height =
      ConvTranspose2dOutputSize(p.in_height, p.kernel_size, p.stride, p.padding, p.output_padding);
  const int64_t out_width =
      ConvTranspose2dOutputSize(p.in_width, p.kernel_size, p.stride, p.padding, p.output_padding);
  if (out_height < 1 || out_width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConvTranspose2d: output size ", out_height, "x", out_width,
                     " is empty (padding too large for the input)"));
  }
  // The kernels index within one sample in int32 (the sample's base offset is
  // int64) and put the sample and channel block on grid dimensions z and y.
  const bool fits =
      out_height <= kInt32Max && out_width <= kInt32Max &&
      p.in_channels * p.in_height <= kInt32Max &&
      p.in_channels * p.in_height * p.in_width <= kInt32Max &&
      p.out_channels * out_height <= kInt32Max && p.out_channels * out_height * out_width <= kInt32Max &&
      PaddedK(p) * PaddedN(p) <= kInt32Max && p.batch <= 65535 &&
      PaddedN(p) / kDirectChannels <= 65535;
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvTranspose2d: one sample's input or output, or the weight, exceeds 2^31 - 1 "
        "elements, or batch exceeds 65535 (batch ",
        p.batch, ", in_channels ", p.in_channels, ", out_channels ", p.out_channels, ", output ",
        out_height, "x", out_width, ")"));
  }
  return absl::OkStatus();
}

namespace {

// Whether the prepared weight carries the tiled and wgmma kernels' layouts
// too: every stride-1 kTf32 weight does, whatever the spatial sizes and the
// device, because the weight is prepared once at load and serves inputs of
// any size, while conv_tiled::Supports and conv_wgmma::Supports also depend
// on the input width (and the launch on the device).
bool HasTensorCoreLayouts(const ConvTranspose2dParams& params, MathMode mode) {
  return mode == MathMode::kTf32 && params.stride == 1;
}

}  // namespace

int64_t PreparedConvTransposeWeightSize(const ConvTranspose2dParams& params, MathMode mode) {
  if (!ValidateConvTranspose2dParams(params).ok()) return 0;
  return PaddedK(params) * PaddedN(params) +
         (HasTensorCoreLayouts(params, mode)
              ? conv_tiled::PreparedWeightSize(params) + conv_wgmma::PreparedWeightSize(params)
              : 0);
}

// Layout: row-major [K_pad, N_pad] with row (kh * k + kw) * C_in + ci and
// column co holding w[ci, co, kh, kw]; rows >= C_in * k^2 and columns >=
// C_out are zero (so that whole tiles load without bounds checks). kTf32
// rounds every value to TF32 here (the kernel then uses B as loaded); kFp32
// keeps float32 values, which the kernel splits into TF32 pairs. For
// stride-1 kTf32 (HasTensorCoreLayouts), the tiled kernel's layout
// (conv_tiled::WeightIndex, TF32-rounded) follows at offset K_pad * N_pad,
// a multiple of 64 * 64 floats, so 16-byte aligned like the buffer, and the
// wgmma kernel's (conv_wgmma::WeightIndex) after it, at a further multiple
// of 64 * 8 floats.
absl::Status PrepareConvTransposeWeight(const ConvTranspose2dParams& params, MathMode mode,
                                        const float* weight, float* prepared) {
  RETURN_IF_ERROR(ValidateConvTranspose2dParams(params));
  if (weight == nullptr || prepared == nullptr) {
    return absl::InvalidArgumentError("PrepareConvTransposeWeight: null weight or output");
  }
  const int64_t k = params.kernel_size;
  const int64_t padded_n = PaddedN(params);
  const int64_t general_size = PaddedK(params) * padded_n;
  const bool tiled = HasTensorCoreLayouts(params, mode);  // and wgmma
  float* tiled_prepared = prepared + general_size;
  float* wgmma_prepared = tiled ? tiled_prepared + conv_tiled::PreparedWeightSize(params) : nullptr;
  const int64_t size = PreparedConvTransposeWeightSize(params, mode);
  for (int64_t i = 0; i < size; ++i) prepared[i] = 0.0f;
  for (int64_t ci = 0; ci < params.in_channels; ++ci) {
    for (int64_t co = 0; co < params.out_channels; ++co) {
      for (int64_t tap = 0; tap < k * k; ++tap) {
        const float raw = weight[(ci * params.out_channels + co) * k * k + tap];
        const float value = mode == MathMode::kTf32 ? RoundToTf32(raw) : raw;
        prepared[(tap * params.in_channels + ci) * padded_n + co] = value;
        if (tiled) {
          tiled_prepared[conv_tiled::WeightIndex(params, ci, co, tap)] = value;
          wgmma_prepared[conv_wgmma::WeightIndex(params, ci, co, tap)] = value;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ConvTranspose2dBiasGelu(const ConvTranspose2dParams& params, MathMode mode,
                                     const float* input, const float* prepared_weight,
                                     const float* bias, float* output, int64_t num_groups,
                                     double* group_sums, cudaStream_t stream,
                                     const ConvSampleSignals& signals) {
  return ConvTranspose2dBiasGeluOn(ConvTransposeKernel::kAuto, params, mode, input,
                                   prepared_weight, bias, output, num_groups, group_sums, stream,
                                   signals);
}

absl::StatusOr<bool> ConvTranspose2dGivesSampleSignals(const ConvTranspose2dParams& params,
                                                       MathMode mode) {
  RETURN_IF_ERROR(ValidateConvTranspose2dParams(params));
  if (!HasTensorCoreLayouts(params, mode) || !conv_wgmma::Supports(params, mode)) return false;
  return conv_wgmma::AvailableOnCurrentDevice();
}

int64_t ConvTranspose2dSignalsPerSample(const ConvTranspose2dParams& params) {
  return conv_wgmma::SignalsPerSample(params);
}

absl::Status ConvTranspose2dBiasGeluOn(ConvTransposeKernel kernel,
                                       const ConvTranspose2dParams& params, MathMode mode,
                                       const float* input, const float* prepared_weight,
                                       const float* bias, float* output, int64_t num_groups,
                                       double* group_sums, cudaStream_t stream,
                                       const ConvSampleSignals& signals) {
  RETURN_IF_ERROR(ValidateConvTranspose2dParams(params));
  if (input == nullptr || prepared_weight == nullptr || output == nullptr) {
    return absl::InvalidArgumentError("ConvTranspose2dBiasGelu: null input, weight or output");
  }
  if (reinterpret_cast<uintptr_t>(prepared_weight) % 16 != 0) {
    return absl::InvalidArgumentError(
        "ConvTranspose2dBiasGelu: prepared_weight must be 16-byte aligned");
  }
  if (group_sums != nullptr &&
      (num_groups < 1 || num_groups > params.out_channels || params.out_channels % num_groups != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConvTranspose2dBiasGelu: num_groups ", num_groups,
                     " must be >= 1 and divide out_channels ", params.out_channels));
  }
  if (signals.sample_done != nullptr &&
      (group_sums == nullptr ||
       (kernel != ConvTransposeKernel::kAuto && kernel != ConvTransposeKernel::kWgmma &&
        kernel != ConvTransposeKernel::kWgmmaGathers))) {
    return absl::FailedPreconditionError(
        "ConvTranspose2dBiasGelu: sample signals need group sums and the wgmma kernel");
  }
  const bool automatic = kernel == ConvTransposeKernel::kAuto;
  const float* tiled_weight = prepared_weight + PaddedK(params) * PaddedN(params);
  const bool gathers = kernel == ConvTransposeKernel::kWgmmaGathers;
  if (automatic || kernel == ConvTransposeKernel::kWgmma || gathers) {
    bool serves = HasTensorCoreLayouts(params, mode) && conv_wgmma::Supports(params, mode);
    if (serves) {
      ASSIGN_OR_RETURN(serves, conv_wgmma::AvailableOnCurrentDevice());
    }
    if (serves) {
      return conv_wgmma::Launch(params, input, tiled_weight + conv_tiled::PreparedWeightSize(params),
                                bias, output, num_groups, group_sums, signals, stream,
                                gathers ? conv_wgmma::Producer::kGathers
                                        : conv_wgmma::Producer::kAuto);
    }
    if (!automatic || signals.sample_done != nullptr) {
      return absl::FailedPreconditionError(
          "ConvTranspose2d wgmma kernel (the one that gives sample signals): needs stride 1, "
          "tf32, a compute capability 9.0 device and shared memory for its stages");
    }
  }
  if (automatic || kernel == ConvTransposeKernel::kTiled) {
    int stages = 0;
    if (HasTensorCoreLayouts(params, mode) && conv_tiled::Supports(params, mode)) {
      ASSIGN_OR_RETURN(stages, conv_tiled::StagesOnCurrentDevice(params));
    }
    if (stages > 0) {
      return conv_tiled::Launch(params, stages, input, tiled_weight, bias, output, num_groups,
                                group_sums, stream);
    }
    if (!automatic) {
      return absl::FailedPreconditionError(
          "ConvTranspose2d tiled kernel: needs stride 1, tf32, in_width % 4 == 0 and shared "
          "memory for its tiles");
    }
  }
  if (kernel == ConvTransposeKernel::kImplicitGemm && params.stride != 1) {
    return absl::FailedPreconditionError("ConvTranspose2d implicit GEMM kernel: needs stride 1");
  }
  const bool implicit_gemm =
      params.stride == 1 && kernel != ConvTransposeKernel::kDirect;

  Geometry g;
  g.in_channels = static_cast<int>(params.in_channels);
  g.out_channels = static_cast<int>(params.out_channels);
  g.in_height = static_cast<int>(params.in_height);
  g.in_width = static_cast<int>(params.in_width);
  g.out_height = static_cast<int>(ConvTranspose2dOutputSize(
      params.in_height, params.kernel_size, params.stride, params.padding, params.output_padding));
  g.out_width = static_cast<int>(ConvTranspose2dOutputSize(
      params.in_width, params.kernel_size, params.stride, params.padding, params.output_padding));
  g.kernel_size = static_cast<int>(params.kernel_size);
  g.stride = static_cast<int>(params.stride);
  g.padding = static_cast<int>(params.padding);
  g.k_total = static_cast<int>(params.in_channels * params.kernel_size * params.kernel_size);
  g.padded_n = static_cast<int>(PaddedN(params));
  g.num_groups = group_sums != nullptr ? static_cast<int>(num_groups) : 0;
  g.channels_per_group = group_sums != nullptr ? static_cast<int>(params.out_channels / num_groups) : 0;
  const int64_t out_plane = static_cast<int64_t>(g.out_height) * g.out_width;

  if (implicit_gemm) {
    const dim3 grid(static_cast<unsigned>((out_plane + kBlockM - 1) / kBlockM),
                    static_cast<unsigned>(g.padded_n / kBlockN),
                    static_cast<unsigned>(params.batch));
    const bool whole_tap_tiles = params.in_channels % kBlockK == 0;
    auto* kernel = mode == MathMode::kTf32
                       ? (whole_tap_tiles ? ConvTransposeStride1Gemm<false, true>
                                          : ConvTransposeStride1Gemm<false, false>)
                       : (whole_tap_tiles ? ConvTransposeStride1Gemm<true, true>
                                          : ConvTransposeStride1Gemm<true, false>);
    RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              kGemmSmemBytes));
    kernel<<<grid, kThreads, kGemmSmemBytes, stream>>>(g, input, prepared_weight, bias, output,
                                                      group_sums);
  } else {
    const dim3 grid(static_cast<unsigned>((out_plane + kDirectThreads - 1) / kDirectThreads),
                    static_cast<unsigned>((params.out_channels + kDirectChannels - 1) /
                                          kDirectChannels),
                    static_cast<unsigned>(params.batch));
    ConvTransposeDirect<<<grid, kDirectThreads, 0, stream>>>(g, input, prepared_weight, bias,
                                                              output, group_sums);
  }
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace fuseserve::cuda
