#include "kernels/cuda/conv_transpose2d_gelu_wgmma.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gpu_scope.cuh"
#include "kernels/cuda/hopper.cuh"

// A stride-1 transposed convolution is a correlation of the input with the
// flipped kernel: out[n, co, oy, ox] = sum over (ci, kh, kw) of
// x[n, ci, oy + p - kh, ox + p - kw] * w[ci, co, kh, kw]. Put the input on a
// grid of Wp = W_out + k - 1 columns, shifted by h = k - 1 - p rows and
// columns (grid (r, c) holds x[r - h, c - h], 0 outside the image), and
// number output pixels on the same grid, q = oy * Wp + ox (ox < W_out are
// kept, the k - 1 others computed and dropped). Then tap (kh, kw) reads grid
// index q + (k - 1 - kh) * Wp + (k - 1 - kw): the same shift for every pixel,
// so each tap's GEMM operand is the tile itself at a constant offset, which
// a wgmma descriptor expresses by its start address.
//
// Block roles (384 threads, one block per SM, persistent over tiles of 64
// channels x 512 grid pixels of one sample):
//  - warpgroup 0, the producer: for each 8-channel chunk of each tile, wait
//    for a free stage, bulk-copy the chunk's weights (prepared at load in
//    wgmma order, TF32-rounded; one thread) and fill the stage with the grid
//    pixels [q0, q0 + L) of the chunk's channels as [channel quad][pixel][4
//    channels] (zeros outside the image): by row copies where they serve
//    (16-byte cp.async of the input rows, transposed in shared memory one
//    chunk later, ProduceByRowCopies), else by 4-byte cp.async gathers
//    (ProduceByGathers); then the producer threads arrive on the stage's
//    full barrier;
//  - warpgroups 1 and 2, the consumers: each multiplies the 64 channels by
//    256 of the tile's pixels, one m64n256k8 wgmma per tap per chunk, the
//    accumulators in registers (128 per thread), releasing each stage once
//    the wgmmas that read it are done; then the epilogue adds the bias,
//    applies GELU, stores the kept pixels and adds the GroupNorm sums;
//    with sample signals (RunConvFamily's concurrent GroupNorm), each
//    warpgroup then counts the tile into its sample's signal (release), and
//    the grid, one block per multiprocessor it is given, lets the next
//    kernel start as soon as every block runs.
//
// The input enters the tensor cores as float32, which wgmma reads as TF32 by
// dropping the low 13 mantissa bits (truncation, as in CUTLASS's and
// Triton's Hopper TF32 kernels fed by bulk copies); the weights are rounded
// to nearest at load. A consumer pass rounding each stage in place cost
// ~0.3 ms of 4.67 at the reference shape (its shared-memory traffic competes
// with the wgmmas' operand reads) for an error of 3.3e-4 instead of 3.5e-4
// relative L2 on the family's output, against tf32's contract of 1e-3
// (bench/kernel_notes.md v15).

namespace fuseserve::cuda::conv_wgmma {
namespace {

constexpr int kProducerThreads = 128;
constexpr int kProducerWarps = kProducerThreads / 32;
// Grid pixels between a producer lane's consecutive copies: 8 per warp.
constexpr int kProducerStep = 8 * kProducerWarps;
// Tiles of at most this many steps (spans up to 1152 pixels: the reference
// shape's is 1056) keep their source offsets in the producer's registers.
constexpr int kMaxProducerSteps = 36;
// Row copies (RowCopiesServe): the 16 lanes of a channel copy 16-byte
// groups of its input rows, 64 grid pixels per step; then the producer
// transposes the stage in place, one grid pixel per thread per step, so
// spans of up to kMaxTransposeSteps * 128 pixels.
constexpr int kRowCopyLanes = 16;
constexpr int kMaxTransposeSteps = 9;
constexpr int kMaxRowCopySteps =
    (kMaxTransposeSteps * kProducerThreads / 4 + 1 + kRowCopyLanes - 1) / kRowCopyLanes;
constexpr int kConsumerThreads = 128;
constexpr int kConsumerWarpgroups = 2;
constexpr int kThreads = kProducerThreads + kConsumerThreads * kConsumerWarpgroups;
constexpr int kConsumerWarps = kConsumerWarpgroups * 4;
constexpr int kBlockChannels = 64;
constexpr int kWarpgroupPixels = 256;
constexpr int kTilePixels = kConsumerWarpgroups * kWarpgroupPixels;
constexpr int kChunkChannels = 8;
// One tap's 64 x 8 weight operand: two K-halves of 64 rows x 16 bytes.
constexpr int kTapWeightBytes = kBlockChannels * kChunkChannels * 4;
constexpr int kKHalfBytes = kTapWeightBytes / 2;
constexpr int kCoreRowBytes = 16;
constexpr int kCoreMatrixBytes = 8 * kCoreRowBytes;
// Each channel quad's part of a stage holds the span's pixels x 4 channels
// and 64 bytes more: row copies land there as 4 raw channel rows of whole
// 16-byte groups (up to 3 floats before and after the span each) before the
// in-place transposition.
constexpr int kQuadSlackBytes = 64;
// Registers per thread after reallocation (ptxas compiles each role within
// its share): the consumers hold 128 accumulators (below 208 they spill); a
// producer cut to 56 reloaded its kernel parameters on every copy (ncu),
// and it keeps a tile's source offsets. 128 * 88 + 256 * 208 <= 65536. A
// second producer warpgroup does not fit: 512 threads cap every thread at
// 128 registers at entry, too few for the consumers' wgmma.
constexpr int kProducerRegisters = 88;
constexpr int kConsumerRegisters = 208;
// At least two chunks in flight ahead of the consumers.
constexpr int kMinStages = 3;
constexpr int kMaxStages = 4;
// Named barrier kFirstEpilogueBarrier + c: consumer warpgroup c's epilogue
// (barrier 0 is __syncthreads).
constexpr int kFirstEpilogueBarrier = 1;
// Named barrier of the producer warpgroup (row copies).
constexpr int kProducerBarrier = 3;
// Epilogue: each consumer warp passes 16 channels x 32 pixels at a time
// (bias, GELU and statistics already applied in the accumulators' layout)
// through its own shared rows, so that a warp stores 128 contiguous bytes
// of one channel. Pitch == 8 (mod 32):
// the float2 writes of rows g, columns 2q fall on distinct banks per
// half-warp.
constexpr int kStagingRows = 16;
constexpr int kStagingPitch = 40;
constexpr int kStagingBytes = kConsumerWarps * kStagingRows * kStagingPitch * 4;
// GroupNorm sums of a tile, per consumer warpgroup: (sum, sum of squares) of
// each of its 64 channel rows over its 256 pixels, written by one lane each
// and added up per group after a barrier. (Shared-memory atomics in double
// are compare-and-swap loops: adding rows into group slots took ~10% of the
// consumers' time, ncu.)
constexpr int kRowSlotBytes = kConsumerWarpgroups * kBlockChannels * 2 * 4;
constexpr int kBarrierBytes = 2 * kMaxStages * 8;
constexpr int64_t kSharedMemoryLimitBytes = 227 * 1024;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

int64_t OutWidth(const ConvTranspose2dParams& p) {
  return ConvTranspose2dOutputSize(p.in_width, p.kernel_size, 1, p.padding, 0);
}

int64_t OutHeight(const ConvTranspose2dParams& p) {
  return ConvTranspose2dOutputSize(p.in_height, p.kernel_size, 1, p.padding, 0);
}

// Grid pixels a tile's operands span: its 512 pixels plus the largest tap
// shift, rounded so that every producer warp runs the same copy loop.
int64_t TileSpan(const ConvTranspose2dParams& p) {
  const int64_t padded_width = OutWidth(p) + p.kernel_size - 1;
  return RoundUp(kTilePixels + (p.kernel_size - 1) * (padded_width + 1), kProducerStep);
}

int64_t QuadBytes(const ConvTranspose2dParams& p) {
  return TileSpan(p) * kCoreRowBytes + kQuadSlackBytes;
}

int64_t StageBytes(const ConvTranspose2dParams& p) {
  return 2 * QuadBytes(p) + p.kernel_size * p.kernel_size * kTapWeightBytes;
}

// Halo k - 1 - p, the shift between grid and input coordinates.
int64_t Halo(const ConvTranspose2dParams& p) { return p.kernel_size - 1 - p.padding; }

// Row copies: the first grid pixel (relative to the tile) of a tile's first
// 16-byte group, 0 or up to 3 pixels before the tile. Input column x sits
// at grid column x + halo, so groups start where the grid column is the
// halo modulo 4.
int RowCopyFirst(const ConvTranspose2dParams& p) {
  const int phase = static_cast<int>(Halo(p) % 4);
  return phase == 0 ? 0 : phase - 4;
}

int RowCopyGroups(const ConvTranspose2dParams& p) {
  return static_cast<int>((TileSpan(p) - RowCopyFirst(p) + 3) / 4);
}

int64_t NumChunks(const ConvTranspose2dParams& p) {
  return RoundUp(p.in_channels, kChunkChannels) / kChunkChannels;
}

struct Geometry {
  int in_channels;
  int out_channels;
  int in_height;
  int in_width;
  int out_height;
  int out_width;
  int padded_width;  // Wp
  int halo;          // k - 1 - p, may be negative
  int kernel_size;
  int num_chunks;
  int co_tiles;
  int q_tiles;
  int64_t num_tiles;
  int span;        // TileSpan
  int quad_bytes;  // QuadBytes
  // Row copies (false: the 4-byte gathers): the first group's pixel relative to
  // the tile (RowCopyFirst), groups per channel row, the raw rows' pitch in
  // floats (4 x groups).
  bool row_copies;
  int raw_first;
  int raw_groups;
  int raw_pitch;
  // kProducerStep grid pixels as whole rows and the remaining columns.
  int step_rows;
  int step_columns;
  int stage_bytes;
  int stages;
  int channels_per_group;  // 0: no statistics
  int num_groups;
};

// Tile t of the persistent loop: pixel tiles fastest, so that the blocks
// running at once work on neighbouring rows of one sample (their halo rows
// shared in L2).
struct TileIndex {
  int q_tile;
  int co_tile;
  int64_t sample;
};

// In 32-bit arithmetic whenever the tile count allows it (a 64-bit division
// is a long emulated sequence, and both roles decompose every tile).
__device__ __forceinline__ TileIndex DecomposeTile(int64_t tile, const Geometry& g) {
  if (g.num_tiles <= int64_t{0xffffffff}) {
    const unsigned narrow = static_cast<unsigned>(tile);
    const unsigned q_tiles = static_cast<unsigned>(g.q_tiles);
    const unsigned co_tiles = static_cast<unsigned>(g.co_tiles);
    const unsigned rest = narrow / q_tiles;
    return {static_cast<int>(narrow - rest * q_tiles), static_cast<int>(rest % co_tiles),
            static_cast<int64_t>(rest / co_tiles)};
  }
  const int64_t rest = tile / g.q_tiles;
  return {static_cast<int>(tile % g.q_tiles), static_cast<int>(rest % g.co_tiles),
          rest / g.co_tiles};
}

// The epilogue of pixels 32 kBlock .. 32 kBlock + 31 (j = 4 kBlock .. 4 kBlock
// + 3) in the accumulators' own layout: accumulator 4 j + 2 h + e is channel
// row lane / 4 + 8 h, pixel 8 j + 2 (lane % 4) + e. Each value becomes
// GELU(accumulator + bias), joins the thread's running GroupNorm sums of its
// two rows (kept pixels only: keep_bits has bit p set when the block's pixel
// p is an output pixel), and goes to the warp's staging rows for the
// coalesced stores. In this layout the statistics cost two instructions per
// element; summed after staging (lane = pixel) they took a 31-shuffle
// reduce-scatter per 32 pixels (~8 per element, bench/kernel_notes.md v11b).
template <int kBlock>
__device__ __forceinline__ void EpilogueBlock(float (&acc)[128], const float (&row_bias)[2],
                                              unsigned keep_bits, int lane, float* staging,
                                              float (&sum)[2], float (&sum_sq)[2]) {
  // In place: the next tile's first wgmma does not read the accumulators
  // (a separate array of 16 values made ptxas spill 1.7 KB in the k = 3
  // kernel).
  float* value = acc + 16 * kBlock;
#pragma unroll
  for (int i = 0; i < 16; ++i) value[i] = GeluErfFast(value[i] + row_bias[(i / 2) % 2]);
  if (keep_bits == 0xffffffffu) {  // the same in every lane
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int h = (i / 2) % 2;
      sum[h] += value[i];
      sum_sq[h] = fmaf(value[i], value[i], sum_sq[h]);
    }
  } else {
    // Rare at large images (a row's last grid columns, a sample's last
    // tile). Selected, not added and taken back out: where masked pixels
    // outnumber kept ones (small images) the subtraction cancelled.
    const unsigned lane_bits = keep_bits >> (2 * (lane % 4));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int h = (i / 2) % 2;
      const float kept = (lane_bits >> (8 * (i / 4) + i % 2)) & 1u ? value[i] : 0.0f;
      sum[h] += kept;
      sum_sq[h] = fmaf(kept, kept, sum_sq[h]);
    }
  }
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 4 * jj + 2 * h;
      *reinterpret_cast<float2*>(staging + (lane / 4 + 8 * h) * kStagingPitch + 8 * jj +
                                 2 * (lane % 4)) = make_float2(value[i], value[i + 1]);
    }
  }
}

// A position in the ring of pipeline stages: the stage a chunk uses and the
// parity of that use, advanced chunk by chunk. (Taking it % stages and
// it / stages with the runtime stage count cost a ~30-instruction division
// per chunk on both sides of the pipeline, ~6% of the consumers' samples:
// ncu, bench/kernel_notes.md v21.)
struct StageRing {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void Advance(int stages) {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Waits until the ring's stage is free, then thread 0 bulk-copies the
// chunk's weights into it, arriving on its full barrier with their bytes.
// Returns the stage.
__device__ __forceinline__ int BeginStage(const Geometry& g, unsigned char* smem, uint64_t* full,
                                          uint64_t* empty, const float* __restrict__ weight,
                                          const StageRing& ring, int co_tile, int chunk, int t) {
  const int stage = ring.stage;
  hopper::MbarrierWait(&empty[stage], ring.phase ^ 1u);
  if (t == 0) {
    const int weight_bytes = g.kernel_size * g.kernel_size * kTapWeightBytes;
    hopper::MbarrierArriveExpectBytes(&full[stage], weight_bytes);
    hopper::BulkCopyToShared(
        smem + stage * g.stage_bytes + 2 * g.quad_bytes,
        weight + (static_cast<int64_t>(co_tile) * g.num_chunks + chunk) * (weight_bytes / 4),
        weight_bytes, &full[stage]);
  }
  return stage;
}

// In bytes from its channel plane's start (the copy loops add it to a byte
// pointer as is): input (in_row, in_column), 0 where that is outside the
// image, which `inside` tells.
__device__ __forceinline__ unsigned InputOffsetBytes(const Geometry& g, int in_row, int in_column,
                                                     bool& inside) {
  inside = static_cast<unsigned>(in_row) < static_cast<unsigned>(g.in_height) &&
           static_cast<unsigned>(in_column) < static_cast<unsigned>(g.in_width);
  return inside ? static_cast<unsigned>(in_row * g.in_width + in_column) * 4u : 0u;
}

// Moves a position on the grid (row, column) on by step_rows whole rows
// and step_columns < padded_width columns, carrying into the next row
// without a division. Columns count from first_column: 0 in grid
// coordinates, -halo in input ones.
__device__ __forceinline__ void StepGridPosition(const Geometry& g, int step_rows,
                                                 int step_columns, int first_column, int& row,
                                                 int& column) {
  column += step_columns;
  row += step_rows;
  if (column >= g.padded_width + first_column) {
    column -= g.padded_width;
    ++row;
  }
}

// The producer's 4-byte gathers: each copy transposes one float of NCHW
// input into the stage's [quad][pixel][4 channels] layout (zeros outside the
// image), and each thread's copies arrive on the stage's full barrier as
// they land.
__device__ __forceinline__ void ProduceByGathers(const Geometry& g, const float* __restrict__ input,
                                                 const float* __restrict__ weight,
                                                 unsigned char* smem, uint64_t* full,
                                                 uint64_t* empty, int t) {
  const int warp = t / 32;
  const int lane = t % 32;
  const uint32_t smem_address = hopper::SharedAddress(smem);
  const int64_t sample_stride = static_cast<int64_t>(g.in_channels) * g.in_height * g.in_width;
  const int in_plane = g.in_height * g.in_width;
  // Lane l copies channel l % 4 of each quad at grid pixels
  // 8 warp + l / 4 + 64 i of the tile.
  const int channel = lane % 4;
  const int first_pixel = 8 * warp + lane / 4;
  const bool table = g.span <= kMaxProducerSteps * kProducerStep;
  StageRing ring;
  for (int64_t tile = blockIdx.x; tile < g.num_tiles; tile += gridDim.x) {
    const auto [q_tile, co_tile, sample] = DecomposeTile(tile, g);
    const float* sample_input = input + sample * sample_stride;
    const int start = q_tile * kTilePixels + first_pixel;
    const int start_row = start / g.padded_width;
    const int start_column = start - start_row * g.padded_width;
    // When the tile's span takes at most kMaxProducerSteps steps, this
    // lane's source offsets (and which are inside the image) for every
    // step, in registers.
    unsigned offsets[kMaxProducerSteps];
    uint64_t inside_mask = 0;
    if (table) {
      int in_row = start_row - g.halo;
      int in_column = start_column - g.halo;
#pragma unroll
      for (int i = 0; i < kMaxProducerSteps; ++i) {
        bool inside;
        offsets[i] = InputOffsetBytes(g, in_row, in_column, inside);
        inside_mask |= static_cast<uint64_t>(inside) << i;
        StepGridPosition(g, g.step_rows, g.step_columns, -g.halo, in_row, in_column);
      }
    }
    for (int chunk = 0; chunk < g.num_chunks; ++chunk, ring.Advance(g.stages)) {
      const int stage = BeginStage(g, smem, full, empty, weight, ring, co_tile, chunk, t);
      // The lane's two channels (one per quad) as pointers at the sample's
      // pixel 0; a channel past C_in reads nothing (zeros) and points at
      // the sample's first one.
      const int channel_0 = chunk * kChunkChannels + channel;
      const bool channel_valid_0 = channel_0 < g.in_channels;
      const bool channel_valid_1 = channel_0 + 4 < g.in_channels;
      const float* source_0 = channel_valid_0
                                  ? sample_input + static_cast<int64_t>(channel_0) * in_plane
                                  : sample_input;
      const float* source_1 = channel_valid_1 ? source_0 + 4 * in_plane : sample_input;
      const uint32_t quad_bytes = g.quad_bytes;
      uint32_t destination =
          smem_address + stage * g.stage_bytes + first_pixel * kCoreRowBytes + channel * 4;
      if (table) {
        // The tile's offsets, computed once for its chunks. Per step two
        // copies, each one 64-bit address add and one predicate bit: the
        // producer has one warp per scheduler, so every dependent
        // instruction of its copy loop is exposed latency (ncu: the loop
        // was ~70% of the producer's time and the consumers waited ~20%
        // of theirs for a stage). The span is a multiple of the step, so
        // every lane runs the same steps.
        const char* bytes_0 = reinterpret_cast<const char*>(source_0);
        const char* bytes_1 = reinterpret_cast<const char*>(source_1);
        const uint64_t mask_0 = channel_valid_0 ? inside_mask : 0;
        const uint64_t mask_1 = channel_valid_1 ? inside_mask : 0;
        const uint32_t destination_1 = destination + quad_bytes;
        const int steps = g.span / kProducerStep;
#pragma unroll
        for (int i = 0; i < kMaxProducerSteps; ++i) {
          if (i < steps) {
            CpAsync4ToShared(destination + i * kProducerStep * kCoreRowBytes,
                             reinterpret_cast<const float*>(bytes_0 + offsets[i]),
                             (mask_0 >> i) & 1u);
            CpAsync4ToShared(destination_1 + i * kProducerStep * kCoreRowBytes,
                             reinterpret_cast<const float*>(bytes_1 + offsets[i]),
                             (mask_1 >> i) & 1u);
          }
        }
      } else {
        int in_row = start_row - g.halo;
        int in_column = start_column - g.halo;
        // A few instructions per pixel step: 32-bit offsets, the grid
        // position stepped by constants (the first version, with generic
        // pointers, signed 64-bit offsets and a wrap loop, executed ~56
        // per step, the second ~30: ncu).
#pragma unroll 4
        for (int j = first_pixel; j < g.span; j += kProducerStep) {
          const bool inside = static_cast<unsigned>(in_row) < static_cast<unsigned>(g.in_height) &&
                              static_cast<unsigned>(in_column) < static_cast<unsigned>(g.in_width);
          const unsigned offset =
              inside ? static_cast<unsigned>(in_row * g.in_width + in_column) : 0u;
          CpAsync4ToShared(destination, source_0 + offset, inside && channel_valid_0);
          CpAsync4ToShared(destination + quad_bytes, source_1 + offset, inside && channel_valid_1);
          destination += kProducerStep * kCoreRowBytes;
          StepGridPosition(g, g.step_rows, g.step_columns, -g.halo, in_row, in_column);
        }
      }
      // Each thread's copies arrive on the stage's full barrier as they land.
      // (Waiting for them and arriving by an ordinary release, one chunk
      // late, measured 6% slower.)
      hopper::CpAsyncArriveOnCompletion(&full[stage]);
    }
  }
}

// Transposes a stage's channel quads in place from 4 raw channel rows (row
// c's grid pixel j at float c * raw_pitch + j - raw_first of the quad) to
// [pixel][4 channels]. The rows and the result share the quad's bytes, so
// every producer thread reads its pixels of a quad (one per step: 4
// conflict-free 4-byte loads, then one 16-byte store) before any writes.
// Precondition: the stage's row copies have landed for all producer threads.
__device__ __forceinline__ void TransposeStage(const Geometry& g, float* stage, int t) {
#pragma unroll 1
  for (int quad = 0; quad < 2; ++quad) {
    float* base = stage + quad * (g.quad_bytes / 4);
    const float* raw = base - g.raw_first;
    float4 pixel[kMaxTransposeSteps];
#pragma unroll
    for (int i = 0; i < kMaxTransposeSteps; ++i) {
      const int j = t + kProducerThreads * i;
      if (j < g.span) {
        pixel[i] = make_float4(raw[j], raw[g.raw_pitch + j], raw[2 * g.raw_pitch + j],
                               raw[3 * g.raw_pitch + j]);
      }
    }
    hopper::NamedBarrier(kProducerBarrier, kProducerThreads);
#pragma unroll
    for (int i = 0; i < kMaxTransposeSteps; ++i) {
      const int j = t + kProducerThreads * i;
      if (j < g.span) reinterpret_cast<float4*>(base)[j] = pixel[i];
    }
  }
}

// The producer's row copies (RowCopiesServe): 16-byte cp.async of whole
// 4-pixel groups of the chunk's input rows into the stage as raw channel
// rows (zeros for groups outside the image or past C_in: with in_width and
// the grid's width multiples of 4, a group is all inside or all outside),
// then, one chunk later so that the copies have had a chunk's time to land,
// the in-place transposition and the arrivals on the stage's full barrier.
// A quarter of the gathers' copy instructions, and each moves a whole
// 16-byte piece of a line (bench/kernel_notes.md v20).
__device__ __forceinline__ void ProduceByRowCopies(const Geometry& g,
                                                   const float* __restrict__ input,
                                                   const float* __restrict__ weight,
                                                   unsigned char* smem, uint64_t* full,
                                                   uint64_t* empty, int t) {
  const uint32_t smem_address = hopper::SharedAddress(smem);
  const int64_t sample_stride = static_cast<int64_t>(g.in_channels) * g.in_height * g.in_width;
  const int in_plane = g.in_height * g.in_width;
  // Thread t copies groups t % 16 + 16 i of chunk channel t / 16: lanes of a
  // channel cover 256 contiguous bytes per step.
  const int copy_channel = t / kRowCopyLanes;
  const int copy_lane = t % kRowCopyLanes;
  constexpr int kStepPixels = 4 * kRowCopyLanes;
  const int step_rows = kStepPixels / g.padded_width;
  const int step_columns = kStepPixels % g.padded_width;
  const uint32_t copy_destination = smem_address + (copy_channel / 4) * g.quad_bytes +
                                    ((copy_channel % 4) * g.raw_pitch + 4 * copy_lane) * 4;
  StageRing ring;
  int pending_stage = -1;  // copied, not yet transposed
  for (int64_t tile = blockIdx.x; tile < g.num_tiles; tile += gridDim.x) {
    const auto [q_tile, co_tile, sample] = DecomposeTile(tile, g);
    const float* sample_input = input + sample * sample_stride;
    // This thread's source offsets (bytes, from the channel's plane) and
    // which groups are inside the image, for the tile's every chunk.
    unsigned offsets[kMaxRowCopySteps];
    uint32_t inside_mask = 0;
    uint32_t active_mask = 0;
    {
      const int first = q_tile * kTilePixels + g.raw_first + 4 * copy_lane;  // may be -3..-1
      int row = (first + g.padded_width) / g.padded_width - 1;
      int column = first - row * g.padded_width;
#pragma unroll
      for (int i = 0; i < kMaxRowCopySteps; ++i) {
        bool inside;
        offsets[i] = InputOffsetBytes(g, row - g.halo, column - g.halo, inside);
        inside_mask |= static_cast<uint32_t>(inside) << i;
        active_mask |= static_cast<uint32_t>(copy_lane + kRowCopyLanes * i < g.raw_groups) << i;
        StepGridPosition(g, step_rows, step_columns, 0, row, column);
      }
    }
    for (int chunk = 0; chunk < g.num_chunks; ++chunk, ring.Advance(g.stages)) {
      const int stage = BeginStage(g, smem, full, empty, weight, ring, co_tile, chunk, t);
      const int channel = chunk * kChunkChannels + copy_channel;
      const bool channel_valid = channel < g.in_channels;
      const char* source = reinterpret_cast<const char*>(
          sample_input + (channel_valid ? static_cast<int64_t>(channel) * in_plane : 0));
      const uint32_t inside = channel_valid ? inside_mask : 0u;
      const uint32_t destination = copy_destination + stage * g.stage_bytes;
#pragma unroll
      for (int i = 0; i < kMaxRowCopySteps; ++i) {
        if ((active_mask >> i) & 1u) {
          CpAsync16ToShared(destination + i * kStepPixels * 4,
                            reinterpret_cast<const float*>(source + offsets[i]),
                            (inside >> i) & 1u);
        }
      }
      CpAsyncCommit();
      if (pending_stage >= 0) {
        CpAsyncWait<1>();  // this thread's copies of the pending stage
        hopper::NamedBarrier(kProducerBarrier, kProducerThreads);  // everyone's
        TransposeStage(g, reinterpret_cast<float*>(smem + pending_stage * g.stage_bytes), t);
        hopper::FenceProxyAsyncShared();
        hopper::MbarrierArrive(&full[pending_stage]);
      }
      pending_stage = stage;
    }
  }
  if (pending_stage >= 0) {
    CpAsyncWait<0>();
    hopper::NamedBarrier(kProducerBarrier, kProducerThreads);
    TransposeStage(g, reinterpret_cast<float*>(smem + pending_stage * g.stage_bytes), t);
    hopper::FenceProxyAsyncShared();
    hopper::MbarrierArrive(&full[pending_stage]);
  }
}

template <int kKernel>
__global__ void __launch_bounds__(kThreads, 1)
    ConvTransposeWgmmaTf32(Geometry g, const float* __restrict__ input,
                           const float* __restrict__ weight, const float* __restrict__ bias,
                           float* __restrict__ output, double* __restrict__ group_sums,
                           unsigned* __restrict__ sample_done) {
  extern __shared__ __align__(128) unsigned char smem[];
#if !FUSESERVE_HOPPER_DEVICE
  // Built for a target without wgmma (the helpers compile to nothing there):
  // fail loudly rather than leave the output unwritten. The host never
  // launches this code (AvailableOnCurrentDevice).
  __trap();
#endif
  const int t = static_cast<int>(threadIdx.x);
  const int warp = t / 32;
  const int lane = t % 32;
  const int kernel_size = kKernel > 0 ? kKernel : g.kernel_size;

  unsigned char* staging_base = smem + g.stages * g.stage_bytes;
  float* row_slots = reinterpret_cast<float*>(staging_base + kStagingBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(staging_base + kStagingBytes + kRowSlotBytes);
  uint64_t* empty = full + kMaxStages;

  if (t == 0) {
    for (int s = 0; s < g.stages; ++s) {
      // One arrival per producer thread (gathers: when its copies land; row
      // copies: after the stage's transposition), one with the weights'
      // expected bytes.
      hopper::MbarrierInit(&full[s], kProducerThreads + 1);
      hopper::MbarrierInit(&empty[s], kConsumerWarps);
    }
    hopper::FenceMbarrierInit();
    // The kernel that reads the sample signals may start now (it keeps to
    // the multiprocessors this grid leaves free).
    if (sample_done != nullptr) gpu_scope::LaunchDependents();
  }
  __syncthreads();

  const uint32_t smem_address = hopper::SharedAddress(smem);
  const int64_t out_plane = static_cast<int64_t>(g.out_height) * g.out_width;

  if (warp < kProducerWarps) {
    // ---- producer ----
    hopper::ReleaseRegisters<kProducerRegisters>();
    if (g.row_copies) {
      ProduceByRowCopies(g, input, weight, smem, full, empty, t);
    } else {
      ProduceByGathers(g, input, weight, smem, full, empty, t);
    }
    return;
  }

  // ---- consumers ----
  hopper::AcquireRegisters<kConsumerRegisters>();
  // Consumer warpgroup c computes pixels [256 c, 256 c + 256) of each tile.
  const int consumer = (warp - kProducerWarps) / 4;
  const int consumer_thread = t - kProducerThreads - kConsumerThreads * consumer;
  const int warp_in_group = warp % 4;
  float* staging = reinterpret_cast<float*>(staging_base) +
                   (warp - kProducerWarps) * kStagingRows * kStagingPitch;
  float* slots = row_slots + consumer * kBlockChannels * 2;
  const bool stats = group_sums != nullptr;

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  StageRing ring;
  // The sample of this warpgroup's last tile, whose completion it has yet to
  // signal (-1: none). Signalled one tile late, after the next tile's
  // mainloop: by then the tile's stores have had a whole mainloop to land,
  // so the release fence has little left to wait for.
  int64_t unsignalled_sample = -1;
  for (int64_t tile = blockIdx.x; tile < g.num_tiles; tile += gridDim.x) {
    const auto [q_tile, co_tile, sample] = DecomposeTile(tile, g);

    int previous_stage = 0;
    for (int chunk = 0; chunk < g.num_chunks; ++chunk, ring.Advance(g.stages)) {
      const int stage = ring.stage;
      hopper::MbarrierWait(&full[stage], ring.phase);
      // The copies wrote through the generic proxy; the wgmmas read through
      // the async proxy.
      hopper::FenceProxyAsyncShared();
      const uint32_t stage_address = smem_address + stage * g.stage_bytes;
      const uint64_t a_descriptor =
          hopper::MatrixDescriptor(stage_address + 2 * g.quad_bytes, kKHalfBytes, kCoreMatrixBytes);
      const uint64_t b_descriptor =
          hopper::MatrixDescriptor(stage_address + consumer * kWarpgroupPixels * kCoreRowBytes,
                                   g.quad_bytes, kCoreMatrixBytes);
      hopper::WgmmaFence();
#pragma unroll(kKernel > 0 ? kKernel : 1)
      for (int kh = 0; kh < kernel_size; ++kh) {
#pragma unroll(kKernel > 0 ? kKernel : 1)
        for (int kw = 0; kw < kernel_size; ++kw) {
          const int tap = kh * kernel_size + kw;
          const int shift = (kernel_size - 1 - kh) * g.padded_width + (kernel_size - 1 - kw);
          // Descriptor addresses count 16-byte units from bit 0.
          hopper::WgmmaTf32M64N256K8(acc, a_descriptor + tap * (kTapWeightBytes >> 4),
                                     b_descriptor + shift, chunk > 0 || tap > 0);
        }
      }
      hopper::WgmmaCommit();
      hopper::WgmmaWait<1>();  // the previous chunk's wgmmas are done with its stage
      if (chunk > 0 && lane == 0) hopper::MbarrierArrive(&empty[previous_stage]);
      previous_stage = stage;
    }
    hopper::WgmmaWait<0>();
    if (lane == 0) hopper::MbarrierArrive(&empty[previous_stage]);

    // ---- epilogue ----
    // The previous tile's flush has read this warpgroup's row slots, and its
    // outputs and sums are written.
    hopper::NamedBarrier(kFirstEpilogueBarrier + consumer, kConsumerThreads);
    if (sample_done != nullptr && consumer_thread == 0 && unsignalled_sample >= 0) {
      gpu_scope::IncrementRelease(sample_done + unsignalled_sample);
    }
    unsignalled_sample = sample;
    const int warp_channel = co_tile * kBlockChannels + 16 * warp_in_group;
    const int rows = min(kStagingRows, g.out_channels - warp_channel);
    // The thread's accumulator rows are channels warp_channel + lane / 4 + 8 h.
    float row_bias[2];
    float sum[2] = {0.0f, 0.0f};
    float sum_sq[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      row_bias[h] = bias != nullptr && row < rows ? bias[warp_channel + row] : 0.0f;
    }
    const int first_group = stats ? co_tile * kBlockChannels / g.channels_per_group : 0;
    float* sample_output = output + (sample * g.out_channels + warp_channel) * out_plane;
    int q = q_tile * kTilePixels + consumer * kWarpgroupPixels + lane;
    int y = q / g.padded_width;
    int x = q - y * g.padded_width;
    // One copy of the block's store code, not eight: with the block loop
    // unrolled the epilogue was ~150 KB of instructions and its warps
    // stalled on instruction fetch for half of their time (ncu). Only the
    // per-block work on the accumulators is specialised per block (their
    // indices must be compile-time constants).
#pragma unroll 1
    for (int block = 0; block < kWarpgroupPixels / 32; ++block) {
      const bool keep = y < g.out_height && x < g.out_width;
      const unsigned keep_bits = __ballot_sync(0xffffffffu, keep);
      switch (block) {
        case 0: EpilogueBlock<0>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        case 1: EpilogueBlock<1>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        case 2: EpilogueBlock<2>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        case 3: EpilogueBlock<3>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        case 4: EpilogueBlock<4>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        case 5: EpilogueBlock<5>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        case 6: EpilogueBlock<6>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
        default: EpilogueBlock<7>(acc, row_bias, keep_bits, lane, staging, sum, sum_sq); break;
      }
      __syncwarp();
      // Lane l stores pixel l of the block: 128 contiguous bytes per row.
      float* out = sample_output + static_cast<int64_t>(y) * g.out_width + x;
#pragma unroll
      for (int r = 0; r < kStagingRows; ++r) {
        const float value = staging[r * kStagingPitch + lane];
        if (keep && r < rows) out[r * out_plane] = value;
      }
      __syncwarp();  // the next block overwrites the staging rows
      x += 32;
      while (x >= g.padded_width) {
        x -= g.padded_width;
        ++y;
      }
    }
    if (stats) {
      // The 4 lanes of a row (lane / 4 equal) hold its pixels' partial sums.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int width = 1; width <= 2; width *= 2) {
          sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], width);
          sum_sq[h] += __shfl_xor_sync(0xffffffffu, sum_sq[h], width);
        }
        if (lane % 4 == 0) {
          const int row = 16 * warp_in_group + lane / 4 + 8 * h;
          slots[2 * row] = sum[h];
          slots[2 * row + 1] = sum_sq[h];
        }
      }
      // Every row's sums are in the slots.
      hopper::NamedBarrier(kFirstEpilogueBarrier + consumer, kConsumerThreads);
      // Thread 2 i + s adds up statistic s of the tile's i-th group.
      const int channel_end = min((co_tile + 1) * kBlockChannels, g.out_channels);
      const int groups = (channel_end - 1) / g.channels_per_group - first_group + 1;
      if (consumer_thread < 2 * groups) {
        const int group = first_group + consumer_thread / 2;
        const int tile_channel = co_tile * kBlockChannels;
        const int row_end = min((group + 1) * g.channels_per_group, channel_end) - tile_channel;
        double total = 0.0;
        for (int row = max(group * g.channels_per_group, tile_channel) - tile_channel;
             row < row_end; ++row) {
          total += slots[2 * row + consumer_thread % 2];
        }
        atomicAdd(group_sums + 2 * (sample * g.num_groups + group) + consumer_thread % 2, total);
      }
    }
  }
  if (sample_done != nullptr && unsignalled_sample >= 0) {
    hopper::NamedBarrier(kFirstEpilogueBarrier + consumer, kConsumerThreads);
    if (consumer_thread == 0) gpu_scope::IncrementRelease(sample_done + unsignalled_sample);
  }
}

}  // namespace

bool Supports(const ConvTranspose2dParams& params, MathMode mode) {
  return mode == MathMode::kTf32 && params.stride == 1 && params.output_padding == 0 &&
         SharedMemoryBytes(params, kMinStages) <= kSharedMemoryLimitBytes;
}

absl::StatusOr<bool> AvailableOnCurrentDevice() {
#if !defined(FUSESERVE_BUILD_HAS_SM90A)
  return false;  // no sm_90a code in this build (FUSESERVE_CUDA_ARCHITECTURES)
#endif
  if (const char* disabled = std::getenv("FUSESERVE_DISABLE_WGMMA");
      disabled != nullptr && std::string_view(disabled) == "1") {
    return false;
  }
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int major = 0;
  int minor = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  // The sm_90a code of this binary, not a PTX or sm_80 fallback (which
  // trap: the kernel's body needs sm_90a).
  cudaFuncAttributes attributes{};
  RETURN_IF_CUDA_ERROR(cudaFuncGetAttributes(&attributes, ConvTransposeWgmmaTf32<3>));
  return attributes.binaryVersion == 90;
}

bool RowCopiesServe(const ConvTranspose2dParams& params) {
  const int64_t padded_width = OutWidth(params) + params.kernel_size - 1;
  return params.in_width % 4 == 0 && padded_width % 4 == 0 && Halo(params) >= 0 &&
         TileSpan(params) <= kMaxTransposeSteps * kProducerThreads;
}

int64_t PreparedWeightSize(const ConvTranspose2dParams& params) {
  return RoundUp(params.out_channels, kBlockChannels) * NumChunks(params) * kChunkChannels *
         params.kernel_size * params.kernel_size;
}

int64_t WeightIndex(const ConvTranspose2dParams& params, int64_t ci, int64_t co, int64_t tap) {
  const int64_t taps = params.kernel_size * params.kernel_size;
  const int64_t block =
      (co / kBlockChannels * NumChunks(params) + ci / kChunkChannels) * taps + tap;
  const int64_t k_half = ci % kChunkChannels / 4;
  return ((block * 2 + k_half) * kBlockChannels + co % kBlockChannels) * 4 + ci % 4;
}

int64_t SharedMemoryBytes(const ConvTranspose2dParams& params, int stages) {
  return stages * StageBytes(params) + kStagingBytes + kRowSlotBytes + kBarrierBytes;
}

int64_t SignalsPerSample(const ConvTranspose2dParams& params) {
  const int64_t q_tiles =
      RoundUp(OutHeight(params) * (OutWidth(params) + params.kernel_size - 1), kTilePixels) /
      kTilePixels;
  return RoundUp(params.out_channels, kBlockChannels) / kBlockChannels * q_tiles *
         kConsumerWarpgroups;
}

absl::Status Launch(const ConvTranspose2dParams& params, const float* input,
                    const float* prepared_weight, const float* bias, float* output,
                    int64_t num_groups, double* group_sums, const ConvSampleSignals& signals,
                    cudaStream_t stream, Producer producer) {
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int shared_limit = 0;
  RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int multiprocessors = 0;
  RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  int stages = kMaxStages;
  while (stages >= kMinStages && SharedMemoryBytes(params, stages) > shared_limit) --stages;
  if (stages < kMinStages) {
    return absl::FailedPreconditionError(
        "ConvTranspose2d wgmma kernel: its shared memory does not fit this device");
  }

  const int64_t out_height = OutHeight(params);
  const int64_t out_width = OutWidth(params);
  Geometry g;
  g.in_channels = static_cast<int>(params.in_channels);
  g.out_channels = static_cast<int>(params.out_channels);
  g.in_height = static_cast<int>(params.in_height);
  g.in_width = static_cast<int>(params.in_width);
  g.out_height = static_cast<int>(out_height);
  g.out_width = static_cast<int>(out_width);
  g.padded_width = static_cast<int>(out_width + params.kernel_size - 1);
  g.halo = static_cast<int>(params.kernel_size - 1 - params.padding);
  g.kernel_size = static_cast<int>(params.kernel_size);
  g.num_chunks = static_cast<int>(NumChunks(params));
  g.co_tiles = static_cast<int>(RoundUp(params.out_channels, kBlockChannels) / kBlockChannels);
  g.q_tiles = static_cast<int>(RoundUp(out_height * g.padded_width, kTilePixels) / kTilePixels);
  g.num_tiles = params.batch * g.co_tiles * g.q_tiles;
  g.span = static_cast<int>(TileSpan(params));
  g.quad_bytes = static_cast<int>(QuadBytes(params));
  // The row copies read 16-byte groups: every channel plane starts 16-byte
  // aligned when in_width % 4 == 0 and the input pointer is.
  g.row_copies = producer == Producer::kAuto && RowCopiesServe(params) && Aligned16(input);
  g.raw_first = g.row_copies ? RowCopyFirst(params) : 0;
  g.raw_groups = g.row_copies ? RowCopyGroups(params) : 0;
  g.raw_pitch = 4 * g.raw_groups;
  g.step_rows = kProducerStep / g.padded_width;
  g.step_columns = kProducerStep % g.padded_width;
  g.stage_bytes = static_cast<int>(StageBytes(params));
  g.stages = stages;
  g.num_groups = group_sums != nullptr ? static_cast<int>(num_groups) : 0;
  g.channels_per_group =
      group_sums != nullptr ? static_cast<int>(params.out_channels / num_groups) : 0;

  const int dynamic_bytes = static_cast<int>(SharedMemoryBytes(params, stages));
  auto* kernel = params.kernel_size == 3 ? ConvTransposeWgmmaTf32<3> : ConvTransposeWgmmaTf32<0>;
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_bytes));
  const int busy_multiprocessors =
      std::max(1, multiprocessors - std::max(0, signals.free_multiprocessors));
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(g.num_tiles, static_cast<int64_t>(busy_multiprocessors)));
  kernel<<<blocks, kThreads, dynamic_bytes, stream>>>(g, input, prepared_weight, bias, output,
                                                      group_sums, signals.sample_done);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace fuseserve::cuda::conv_wgmma
