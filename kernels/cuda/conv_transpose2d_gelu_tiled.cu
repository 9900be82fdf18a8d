#include "kernels/cuda/conv_transpose2d_gelu_tiled.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/mma_sync.cuh"

// A stride-1 transposed convolution is a correlation of the input with the
// flipped kernel: out[n, co, oy, ox] = sum over (ci, kh, kw) of
// x[n, ci, oy + p - kh, ox + p - kw] * w[ci, co, kh, kw], taps outside the
// input contributing 0. The block computes 64 output channels (M) x 512 flat
// output pixels (N) of one sample with mma.sync m16n8k8 TF32, K running over
// 8-channel chunks (one pipeline stage each) and, inside a chunk, over the
// k*k taps (one k8 step each).
//
// Shared memory per stage: the input rows that the block's pixels touch, for
// the chunk's 8 channels, in a tile whose columns are padded with zeros on
// both sides (written once at block start, never overwritten), rows outside
// the image and channels past C_in zero-filled by cp.async; then the chunk's
// weights, prepared at load time in fragment order and TF32-rounded. A tap's
// B operand is the tile read at each pixel's offset minus a per-tap
// constant, rounded to TF32 as it is loaded, so the input is read from
// global memory once per block and stage instead of once per tap.
//
// The epilogue adds the bias, applies GELU, stores, and adds each (sample,
// group)'s sum and sum of squares into group_sums: float partials per lane,
// double per warp and block, one global double atomic per (block, group,
// statistic).
//
// Measured on an H100 at the reference shape (N = 128, 64 -> 64 channels,
// 256 x 256, k = 3; 628 GFLOP): 5.1 ms (123 TFLOP/s), of which about 0.5 ms
// is the GELU and 0.65 ms the copies; the MMA loop alone runs at about
// 60% of what mma.sync reaches on Hopper.

namespace fuseserve::cuda::conv_tiled {
namespace {

// 16 warps, each 64 channels x 32 pixels: 4 x 4 m16n8k8 tiles, 64 float
// accumulators per thread, at most 128 registers, so that each scheduler has
// 4 warps to hide latencies with (8 warps of 64 x 64 tiles left 2 per
// scheduler: latency-bound, 8.0 ms against 6.6 ms at the reference shape). Per tap (k8 step) a warp
// loads A with 4 16-byte LDS (2 KB) and B with 8 4-byte LDS (1 KB) for 16
// MMAs: 0.75 LDS and 1.5 128-byte wavefronts per MMA. (Two blocks of 8
// warps x 256 pixels per SM, so that one's epilogue overlaps the other's
// MMAs, measured no faster: twice the weight and halo copies.)
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockChannels = 64;
constexpr int kWarpPixels = 32;
constexpr int kBlockPixels = kWarps * kWarpPixels;  // 512
constexpr int kFragM = kBlockChannels / 16;         // m16 tiles per warp
constexpr int kFragN = kWarpPixels / 8;             // n8 tiles per warp
// One stage holds one k8 step's channels: the MMA's K.
constexpr int kChunkChannels = 8;
// One m16 A fragment for 32 lanes, 4 floats each (one 16-byte load).
constexpr int kFragmentFloats = 32 * 4;
constexpr int kTapWeightFloats = kFragM * kFragmentFloats;  // 64 channels x 8 K
// Epilogue: each warp passes half of its accumulators (32 channels x 32
// pixels) at a time through shared memory, so that the GELU runs in a loop
// (one copy of its code: with one inlined copy per accumulator, instruction
// fetch was the top stall reason) and a warp stores 128 contiguous bytes of
// one channel row at a time. Row pitch == 8 (mod 32)
// floats: the float2 writes of rows g, columns 2q hit distinct banks in each
// half-warp.
constexpr int kStagingRows = kBlockChannels / 2;
constexpr int kStagingPitch = kWarpPixels + 8;
constexpr int kStagingFloats = kWarps * kStagingRows * kStagingPitch;
// GroupNorm statistics: each warp's double (sum, sum of squares) per group
// of the block's channels (at most 64 groups), summed over the warps after a
// barrier. Plain stores by one lane per warp: shared-memory double atomics
// are compare-and-swap loops, which contending lanes serialise.
constexpr int kMaxGroups = kBlockChannels;
constexpr int kWarpStats = kWarps * kMaxGroups * 2;
constexpr int64_t kStaticSharedBytes = kWarpStats * sizeof(double);
// Hopper's shared memory per block (opt-in); other devices may have less
// (StagesOnCurrentDevice).
constexpr int64_t kSharedMemoryLimitBytes = 227 * 1024;

static_assert(kBlockPixels == 512, "the tile shape the layout comments assume");
static_assert(2 * kMaxGroups <= kThreads, "one thread per (group, statistic) to publish");
static_assert(kWarpPixels == 32, "the epilogue stores one pixel per lane");

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Shared-memory tile geometry of one stage, in floats.
struct Layout {
  int64_t left_pad;      // columns before input column 0: >= k - 1 - p, multiple of 4
  int64_t row_pitch;     // multiple of 4 (16-byte cp.async destinations)
  int64_t rows;          // input rows the block's pixels touch, at most
  int64_t plane_pitch;   // per channel: == 8 (mod 16), i.e. 8 or 24 (mod 32)
  int64_t stage_floats;  // 8 channel planes, then k*k taps of weights
};

// A B fragment load reads channels q = 0..3 (and q + 4) at 8 consecutive
// pixels g: a plane pitch of 8 or 24 (mod 32) words puts the 32 lanes on
// distinct banks.
Layout ComputeLayout(const ConvTranspose2dParams& p) {
  const int64_t out_height =
      ConvTranspose2dOutputSize(p.in_height, p.kernel_size, 1, p.padding, p.output_padding);
  const int64_t out_width =
      ConvTranspose2dOutputSize(p.in_width, p.kernel_size, 1, p.padding, p.output_padding);
  // Taps reach k - 1 - p columns beyond each side of the input.
  const int64_t halo = std::max<int64_t>(0, p.kernel_size - 1 - p.padding);
  Layout layout;
  layout.left_pad = RoundUp(halo, 4);
  layout.row_pitch = RoundUp(layout.left_pad + p.in_width + halo, 4);
  // 512 consecutive pixels span at most ceil(511 / W_out) + 1 output rows.
  const int64_t out_rows = std::min(out_height, (kBlockPixels - 1 + out_width - 1) / out_width + 1);
  layout.rows = out_rows + p.kernel_size - 1;
  const int64_t plane = layout.rows * layout.row_pitch;
  layout.plane_pitch = plane + (8 - plane % 16 + 16) % 16;
  layout.stage_floats =
      kChunkChannels * layout.plane_pitch + p.kernel_size * p.kernel_size * kTapWeightFloats;
  return layout;
}

// What the kernel needs, in 32-bit (ValidateConvTranspose2dParams bounds
// one sample's input and output below 2^31 elements).
struct Geometry {
  int in_channels;
  int out_channels;
  int in_height;
  int in_width;
  int out_width;
  int out_plane;
  int kernel_size;
  int padding;
  int num_chunks;
  int left_pad;
  int row_pitch;
  int rows;
  int plane_pitch;
  int stage_floats;
  int channels_per_group;  // 0: no statistics
  int num_groups;
  bool vector_input;  // input 16-byte aligned: 16-byte copies
};

// One (512-pixel tile, 64-channel tile, sample). Stage s of the pipeline
// holds chunk s (mod kStages); a chunk's copies are waited for and a barrier
// passed before any warp reads it, and a stage is refilled only after the
// barrier that follows every warp's last read of it. kKernel > 0: the kernel
// size, known at compile time (a row's taps then read at immediate offsets
// from one address per pixel); 0: any kernel size.
template <int kStages, int kKernel>
__global__ void __launch_bounds__(kThreads, 1)
    ConvTransposeTiledTf32(Geometry g, const float* __restrict__ input,
                           const float* __restrict__ weight, const float* __restrict__ bias,
                           float* __restrict__ output, double* __restrict__ group_sums) {
  extern __shared__ __align__(16) float smem[];
  __shared__ double warp_stats[kWarpStats];  // [warp][group - first group][statistic]

  const int t = static_cast<int>(threadIdx.x);
  const int warp = t / 32;
  const int lane = t % 32;
  const int lane_group = lane / 4;  // PTX fragment "groupID"
  const int lane_quad = lane % 4;   // PTX fragment "threadID_in_group"
  const int sample = static_cast<int>(blockIdx.z);
  const int channel_begin = static_cast<int>(blockIdx.y) * kBlockChannels;
  const int tile_begin = static_cast<int>(blockIdx.x) * kBlockPixels;
  const int warp_begin = tile_begin + warp * kWarpPixels;
  const int kernel_size = kKernel > 0 ? kKernel : g.kernel_size;
  const int taps = kernel_size * kernel_size;
  const int in_plane = g.in_height * g.in_width;
  // Tile row r of every stage holds input row first_in_row + r.
  const int first_out_row = tile_begin / g.out_width;
  const int first_in_row = first_out_row + g.padding - (kernel_size - 1);

  for (int index = t; index < kWarpStats; index += kThreads) warp_stats[index] = 0;
  // The pad columns of every row of every stage: [0, left_pad) and
  // [left_pad + in_width, row_pitch). cp.async writes only the columns in
  // between, so these stay zero until the epilogue.
  if (g.row_pitch > g.in_width) {
    for (int row = t; row < kStages * kChunkChannels * g.rows; row += kThreads) {
      const int plane = row / g.rows;  // stage * 8 + channel in chunk
      const int stage = plane / kChunkChannels;
      float* start = smem + stage * g.stage_floats +
                     (plane - stage * kChunkChannels) * g.plane_pitch +
                     (row - plane * g.rows) * g.row_pitch;
      for (int column = 0; column < g.left_pad; ++column) start[column] = 0.0f;
      for (int column = g.left_pad + g.in_width; column < g.row_pitch; ++column) {
        start[column] = 0.0f;
      }
    }
  }

  // Byte offsets in a stage of this lane's B elements (channels q and q + 4,
  // pixel g of each n8 tile) at tap (0, 0); tap (kh, kw) reads
  // 4 (kh * row_pitch + kw) bytes before them. Pixels past the plane read
  // pixel tile_begin's elements (always in the tile); their results are
  // never stored.
  int b_low[kFragN];
  int b_high[kFragN];
#pragma unroll
  for (int j = 0; j < kFragN; ++j) {
    int pixel = warp_begin + j * 8 + lane_group;
    if (pixel >= g.out_plane) pixel = tile_begin;
    const int oy = pixel / g.out_width;
    const int ox = pixel - oy * g.out_width;
    b_low[j] = 4 * ((oy - first_out_row + kernel_size - 1) * g.row_pitch + g.left_pad + ox +
                    g.padding + lane_quad * g.plane_pitch);
    b_high[j] = b_low[j] + 16 * g.plane_pitch;
  }
  const char* smem_bytes = reinterpret_cast<const char*>(smem);

  const float* sample_input = input + static_cast<int64_t>(sample) * g.in_channels * in_plane;
  const float* tile_weight =
      weight + static_cast<int64_t>(blockIdx.y) * g.num_chunks * taps * kTapWeightFloats;

  // Warp w copies the tile rows w, w + 16, ... of the 8 * rows (channel,
  // row) rows of every stage, its lanes along the row.
  const int warp_channel = warp / g.rows;
  const int warp_row = warp - warp_channel * g.rows;
  // Issues (does not wait for) the copies of chunk `chunk` into `stage`.
  auto load_stage = [&](int chunk, int stage) {
    const int chunk_channel = chunk * kChunkChannels;
    int channel = warp_channel;
    int row = warp_row;
    float* stage_input = smem + stage * g.stage_floats + g.left_pad;
    for (int index = warp; index < kChunkChannels * g.rows; index += kWarps) {
      float* destination = stage_input + channel * g.plane_pitch + row * g.row_pitch;
      const int in_row = first_in_row + row;
      const bool valid = chunk_channel + channel < g.in_channels &&
                         static_cast<unsigned>(in_row) < static_cast<unsigned>(g.in_height);
      const float* source =
          valid ? sample_input + (chunk_channel + channel) * in_plane + in_row * g.in_width : input;
      if (g.vector_input) {
        for (int column = 4 * lane; column < g.in_width; column += 4 * 32) {
          CpAsync16(destination + column, valid ? source + column : input, valid);
        }
      } else {
        for (int column = lane; column < g.in_width; column += 32) {
          CpAsync4(destination + column, valid ? source + column : input, valid);
        }
      }
      row += kWarps;
      while (row >= g.rows) {
        row -= g.rows;
        ++channel;
      }
    }
    const float* chunk_weight = tile_weight + static_cast<int64_t>(chunk) * taps * kTapWeightFloats;
    float* stage_weight = smem + stage * g.stage_floats + kChunkChannels * g.plane_pitch;
    for (int index = 4 * t; index < taps * kTapWeightFloats; index += 4 * kThreads) {
      CpAsync16(stage_weight + index, chunk_weight + index, true);
    }
  };
  float acc[kFragM][kFragN][4];
  ZeroAccumulators(acc);

  // One commit per stage and per iteration, empty or not, so that
  // "chunk c is complete" is always "at most kStages - 2 groups pending".
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < g.num_chunks) load_stage(stage, stage);
    CpAsyncCommit();
  }
  for (int chunk = 0; chunk < g.num_chunks; ++chunk) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of chunk `chunk`
    // Chunk `chunk` is in its stage for every thread, and every warp is done
    // with chunk - 1, whose stage the next load refills (issued after the
    // first tap's MMAs, so that warps leave the barrier for the tensor
    // cores).
    __syncthreads();
    const int next = chunk + kStages - 1;

    const int stage_input = (chunk % kStages) * g.stage_floats;
    const float4* stage_weight =
        reinterpret_cast<const float4*>(smem + stage_input + kChunkChannels * g.plane_pitch) + lane;
#pragma unroll(kKernel > 0 ? kKernel : 1)
    for (int kh = 0; kh < kernel_size; ++kh) {
      const int row_bytes = 4 * (stage_input - kh * g.row_pitch);
#pragma unroll(kKernel > 0 ? kKernel : 1)
      for (int kw = 0; kw < kernel_size; ++kw) {
        const int tap = kh * kernel_size + kw;
        // m16n8k8 fragments (PTX ISA, "mma.m16n8k8" .tf32): A (weights) is
        // one float4 per lane per m16 tile; B holds K rows (channels) q and
        // q + 4 at column (pixel) g.
        uint32_t a[kFragM][4];
#pragma unroll
        for (int i = 0; i < kFragM; ++i) {
          const float4 v = stage_weight[(tap * kFragM + i) * 32];
          a[i][0] = __float_as_uint(v.x);
          a[i][1] = __float_as_uint(v.y);
          a[i][2] = __float_as_uint(v.z);
          a[i][3] = __float_as_uint(v.w);
        }
        // The input arrives raw: rounded here, on instructions that issue
        // between MMAs. (A rounding pass over each stage before the barrier,
        // with the next copies issued before the first tap, kept every warp
        // off the tensor cores meanwhile: 5.9 ms against 5.1.)
        uint32_t b[kFragN][2];
#pragma unroll
        for (int j = 0; j < kFragN; ++j) {
          b[j][0] =
              Tf32Bits(*reinterpret_cast<const float*>(smem_bytes + (row_bytes + b_low[j]) - 4 * kw));
          b[j][1] = Tf32Bits(
              *reinterpret_cast<const float*>(smem_bytes + (row_bytes + b_high[j]) - 4 * kw));
        }
#pragma unroll
        for (int i = 0; i < kFragM; ++i) {
#pragma unroll
          for (int j = 0; j < kFragN; ++j) MmaTf32(acc[i][j], a[i], b[j]);
        }
        if (kh == 0 && kw == 0) {
          if (next < g.num_chunks) load_stage(next, next % kStages);
          CpAsyncCommit();
        }
      }
    }
  }
  // Every warp is done with the stages, which the staging rows reuse.
  __syncthreads();

  // Accumulator element e of tile (i, j) is channel 16 i + g + 8 (e / 2) and
  // pixel 8 j + 2 q + e % 2 of the warp's tile; staged as rows of channels
  // 32 half .. 32 half + 31, of which lane l takes pixel l.
  float* staging = smem + warp * kStagingRows * kStagingPitch;
  const int pixel = warp_begin + lane;
  const bool store = pixel < g.out_plane;
  // Lane l holds the bias of the block's channels l and 32 + l.
  float lane_bias[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int channel = channel_begin + half * 32 + lane;
    lane_bias[half] = bias != nullptr && channel < g.out_channels ? bias[channel] : 0.0f;
  }
  float* output_row =
      output + (static_cast<int64_t>(sample) * g.out_channels + channel_begin) * g.out_plane +
      pixel;
  const bool stats = group_sums != nullptr;
  const int first_group = stats ? channel_begin / g.channels_per_group : 0;
  // The current group and its first channel (relative to the block).
  int group = first_group;
  int group_begin = first_group * g.channels_per_group - channel_begin;
  // This lane's sums over the current group's rows of the current half (at
  // most 32 values in float); the warp's sums are formed in double.
  float sum = 0.0f;
  float sum_squares = 0.0f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int half_begin = half * kStagingRows;
    const int rows = min(kStagingRows, g.out_channels - channel_begin - half_begin);
    if (rows <= 0) break;  // block-uniform
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < kFragN; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          *reinterpret_cast<float2*>(staging + (i * 16 + lane_group + 8 * h) * kStagingPitch +
                                     j * 8 + 2 * lane_quad) =
              make_float2(acc[2 * half + i][j][2 * h], acc[2 * half + i][j][2 * h + 1]);
        }
      }
    }
    __syncwarp();
    // The row after which the lane sums go to the warp's group slot: the
    // group's last row, or the half's.
    int flush_row = min(group_begin + g.channels_per_group - half_begin, rows) - 1;
#pragma unroll 4
    for (int r = 0; r < rows; ++r) {
      const float value =
          GeluErfShort(staging[r * kStagingPitch + lane] + __shfl_sync(0xffffffffu, lane_bias[half], r));
      if (store) *output_row = value;
      output_row += g.out_plane;
      if (stats) {
        const float kept = store ? value : 0.0f;
        sum += kept;
        sum_squares += kept * kept;
        if (r == flush_row) {  // warp-uniform
          double warp_sum = sum;
          double warp_sum_squares = sum_squares;
          for (int offset = 16; offset > 0; offset /= 2) {
            warp_sum += __shfl_xor_sync(0xffffffffu, warp_sum, offset);
            warp_sum_squares += __shfl_xor_sync(0xffffffffu, warp_sum_squares, offset);
          }
          if (lane == 0) {
            double* slot = warp_stats + (warp * kMaxGroups + group - first_group) * 2;
            slot[0] += warp_sum;
            slot[1] += warp_sum_squares;
          }
          sum = 0.0f;
          sum_squares = 0.0f;
          if (half_begin + r + 1 == group_begin + g.channels_per_group) {
            ++group;
            group_begin += g.channels_per_group;
          }
          flush_row = min(group_begin + g.channels_per_group - half_begin, rows) - 1;
        }
      }
    }
    __syncwarp();  // the next half overwrites the staging rows
  }
  if (stats) {
    __syncthreads();  // every warp's group sums are in warp_stats
    const int channel_end = min(channel_begin + kBlockChannels, g.out_channels);
    const int groups = (channel_end - 1) / g.channels_per_group - first_group + 1;
    if (t < 2 * groups) {
      double total = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += warp_stats[w * 2 * kMaxGroups + t];
      const int64_t group_index = static_cast<int64_t>(sample) * g.num_groups + first_group + t / 2;
      atomicAdd(group_sums + 2 * group_index + (t & 1), total);
    }
  }
}

// The pipeline's stages, or the epilogue's staging rows that reuse them if
// those are more.
int64_t DynamicSharedMemoryBytes(const ConvTranspose2dParams& params, int stages) {
  return std::max<int64_t>(stages * ComputeLayout(params).stage_floats, kStagingFloats) *
         static_cast<int64_t>(sizeof(float));
}

}  // namespace

bool Supports(const ConvTranspose2dParams& params, MathMode mode) {
  return mode == MathMode::kTf32 && params.stride == 1 && params.in_width % 4 == 0 &&
         SharedMemoryBytes(params, 2) <= kSharedMemoryLimitBytes;
}

int64_t PreparedWeightSize(const ConvTranspose2dParams& params) {
  return RoundUp(params.out_channels, kBlockChannels) *
         RoundUp(params.in_channels, kChunkChannels) * params.kernel_size * params.kernel_size;
}

int64_t WeightIndex(const ConvTranspose2dParams& params, int64_t ci, int64_t co, int64_t tap) {
  const int64_t num_chunks = RoundUp(params.in_channels, kChunkChannels) / kChunkChannels;
  const int64_t taps = params.kernel_size * params.kernel_size;
  const int64_t row = co % 16;
  const int64_t column = ci % kChunkChannels;
  const int64_t lane = 4 * (row % 8) + column % 4;
  const int64_t e = row / 8 + 2 * (column / 4);
  const int64_t block = (co / kBlockChannels * num_chunks + ci / kChunkChannels) * taps + tap;
  return ((block * kFragM + co % kBlockChannels / 16) * 32 + lane) * 4 + e;
}

int64_t SharedMemoryBytes(const ConvTranspose2dParams& params, int stages) {
  return DynamicSharedMemoryBytes(params, stages) + kStaticSharedBytes;
}

absl::StatusOr<int> StagesOnCurrentDevice(const ConvTranspose2dParams& params) {
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int limit = 0;
  RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (const int stages : {3, 2}) {
    if (SharedMemoryBytes(params, stages) <= limit) return stages;
  }
  return 0;
}

absl::Status Launch(const ConvTranspose2dParams& params, int stages, const float* input,
                    const float* prepared_weight, const float* bias, float* output,
                    int64_t num_groups, double* group_sums, cudaStream_t stream) {
  if (stages != 2 && stages != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConvTranspose2d tiled kernel: stages must be 2 or 3, got ", stages));
  }
  const Layout layout = ComputeLayout(params);
  const int64_t out_width =
      ConvTranspose2dOutputSize(params.in_width, params.kernel_size, 1, params.padding, 0);
  const int64_t out_plane =
      ConvTranspose2dOutputSize(params.in_height, params.kernel_size, 1, params.padding, 0) *
      out_width;
  Geometry g;
  g.in_channels = static_cast<int>(params.in_channels);
  g.out_channels = static_cast<int>(params.out_channels);
  g.in_height = static_cast<int>(params.in_height);
  g.in_width = static_cast<int>(params.in_width);
  g.out_width = static_cast<int>(out_width);
  g.out_plane = static_cast<int>(out_plane);
  g.kernel_size = static_cast<int>(params.kernel_size);
  g.padding = static_cast<int>(params.padding);
  g.num_chunks = static_cast<int>(RoundUp(params.in_channels, kChunkChannels) / kChunkChannels);
  g.left_pad = static_cast<int>(layout.left_pad);
  g.row_pitch = static_cast<int>(layout.row_pitch);
  g.rows = static_cast<int>(layout.rows);
  g.plane_pitch = static_cast<int>(layout.plane_pitch);
  g.stage_floats = static_cast<int>(layout.stage_floats);
  g.num_groups = group_sums != nullptr ? static_cast<int>(num_groups) : 0;
  g.channels_per_group =
      group_sums != nullptr ? static_cast<int>(params.out_channels / num_groups) : 0;
  g.vector_input = reinterpret_cast<uintptr_t>(input) % 16 == 0;

  const dim3 grid(
      static_cast<unsigned>((out_plane + kBlockPixels - 1) / kBlockPixels),
      static_cast<unsigned>(RoundUp(params.out_channels, kBlockChannels) / kBlockChannels),
      static_cast<unsigned>(params.batch));
  const int dynamic_bytes = static_cast<int>(DynamicSharedMemoryBytes(params, stages));
  // The reference shape's kernel size gets its own instantiation.
  auto* kernel = params.kernel_size == 3
                     ? (stages == 3 ? ConvTransposeTiledTf32<3, 3> : ConvTransposeTiledTf32<2, 3>)
                     : (stages == 3 ? ConvTransposeTiledTf32<3, 0> : ConvTransposeTiledTf32<2, 0>);
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_bytes));
  kernel<<<grid, kThreads, dynamic_bytes, stream>>>(g, input, prepared_weight, bias, output,
                                                    group_sums);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace fuseserve::cuda::conv_tiled
