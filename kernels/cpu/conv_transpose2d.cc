#include "kernels/cpu/conv_transpose2d.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shape.h"
#include "common/status_macros.h"
#include "kernels/cpu/blas_threading.h"

namespace fuseserve {
namespace cpu {
namespace {

// Upper bound on the column buffer of one task (floats): 256 Ki floats = 1 MiB,
// so the sgemm result is still cache-warm when it is scattered.
constexpr int64_t kColumnBufferFloats = 256 * 1024;

// ceil(a / b) for b > 0 and any sign of a.
int64_t CeilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// floor(a / b) for b > 0 and any sign of a.
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

bool FitsBlasInt(int64_t value) { return value <= std::numeric_limits<int>::max(); }

struct Geometry {
  int64_t out_height;
  int64_t out_width;
  int64_t taps;  // kernel_size * kernel_size
};

// The work of one (sample, block of output channels) task. Each task owns its
// output channels, so tasks never write the same element and need no locks.
// The input rows are processed in tiles so that the column buffer stays
// bounded: cols[(co, kh, kw), (ih, iw)] = sum_ci weight[ci, co, kh, kw] *
// input[ci, ih, iw] (one sgemm), then each column value is added to the
// output pixel it lands on.
void RunTask(const ConvTranspose2dParams& p, const Geometry& g, const float* input,
             const float* weight, float* output, int64_t n, int64_t co_begin, int64_t co_end,
             std::vector<float>& cols) {
  const int64_t k = p.kernel_size;
  const int64_t in_plane = p.in_height * p.in_width;
  const int64_t out_plane = g.out_height * g.out_width;
  const int64_t block_rows = (co_end - co_begin) * g.taps;
  const int64_t rows_per_tile =
      std::clamp<int64_t>(kColumnBufferFloats / (block_rows * p.in_width), 1, p.in_height);
  cols.resize(block_rows * rows_per_tile * p.in_width);

  const float* x = input + n * p.in_channels * in_plane;
  for (int64_t ih0 = 0; ih0 < p.in_height; ih0 += rows_per_tile) {
    const int64_t ih1 = std::min(p.in_height, ih0 + rows_per_tile);
    const int64_t tile_cols = (ih1 - ih0) * p.in_width;
    // weight viewed as [in_channels, out_channels * taps]; its transpose,
    // restricted to this block's columns, times the input tile.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(block_rows),
                static_cast<int>(tile_cols), static_cast<int>(p.in_channels), 1.0f,
                weight + co_begin * g.taps, static_cast<int>(p.out_channels * g.taps),
                x + ih0 * p.in_width, static_cast<int>(in_plane), 0.0f, cols.data(),
                static_cast<int>(tile_cols));

    for (int64_t co = co_begin; co < co_end; ++co) {
      float* out = output + (n * p.out_channels + co) * out_plane;
      for (int64_t kh = 0; kh < k; ++kh) {
        for (int64_t kw = 0; kw < k; ++kw) {
          const float* col = cols.data() + (((co - co_begin) * k + kh) * k + kw) * tile_cols;
          // The input columns whose ow = iw * stride - padding + kw lies in
          // [0, out_width).
          const int64_t iw_begin = std::max<int64_t>(0, CeilDiv(p.padding - kw, p.stride));
          const int64_t iw_end = std::min<int64_t>(
              p.in_width, FloorDiv(g.out_width - 1 + p.padding - kw, p.stride) + 1);
          if (iw_begin >= iw_end) continue;
          for (int64_t ih = ih0; ih < ih1; ++ih) {
            const int64_t oh = ih * p.stride - p.padding + kh;
            if (oh < 0 || oh >= g.out_height) continue;
            const float* src = col + (ih - ih0) * p.in_width;
            const int64_t row_offset = oh * g.out_width - p.padding + kw;
            for (int64_t iw = iw_begin; iw < iw_end; ++iw) {
              out[row_offset + iw * p.stride] += src[iw];
            }
          }
        }
      }
    }
  }
}

}  // namespace

int64_t ConvTranspose2dOutputSize(int64_t in_size, int64_t kernel_size, int64_t stride,
                                  int64_t padding, int64_t output_padding) {
  return (in_size - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1;
}

absl::Status ValidateConvTranspose2dParams(const ConvTranspose2dParams& p) {
  const std::pair<const char*, int64_t> positive[] = {
      {"batch", p.batch},         {"in_channels", p.in_channels}, {"out_channels", p.out_channels},
      {"in_height", p.in_height}, {"in_width", p.in_width},       {"kernel_size", p.kernel_size},
      {"stride", p.stride}};
  for (const auto& [name, value] : positive) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv_transpose2d: ", name, " must be >= 1, got ", value));
    }
  }
  if (p.padding < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv_transpose2d: padding must be >= 0, got ", p.padding));
  }
  if (p.output_padding < 0 || p.output_padding >= p.stride) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv_transpose2d: output_padding must be >= 0 and smaller than stride (",
                     p.stride, "), got ", p.output_padding));
  }
  // Bounds that keep every size computation below in int64 and every matrix
  // size inside OpenBLAS's int; far beyond any tensor that fits in memory.
  constexpr int64_t kMaxDim = int64_t{1} << 30;
  if (p.in_height > kMaxDim || p.in_width > kMaxDim || p.kernel_size > kMaxDim ||
      p.stride > kMaxDim || p.padding > kMaxDim) {
    return absl::InvalidArgumentError("conv_transpose2d: a size exceeds 2^30");
  }
  const int64_t out_height =
      ConvTranspose2dOutputSize(p.in_height, p.kernel_size, p.stride, p.padding, p.output_padding);
  const int64_t out_width =
      ConvTranspose2dOutputSize(p.in_width, p.kernel_size, p.stride, p.padding, p.output_padding);
  if (out_height < 1 || out_width < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv_transpose2d: output size ", out_height, "x", out_width, " is not positive (input ",
        p.in_height, "x", p.in_width, ", kernel_size ", p.kernel_size, ", stride ", p.stride,
        ", padding ", p.padding, ", output_padding ", p.output_padding, ")"));
  }
  RETURN_IF_ERROR(CheckedNumElements({p.batch, p.in_channels, p.in_height, p.in_width}).status());
  RETURN_IF_ERROR(CheckedNumElements({p.batch, p.out_channels, out_height, out_width}).status());
  ASSIGN_OR_RETURN(const int64_t weight_columns,
                   CheckedNumElements({p.out_channels, p.kernel_size, p.kernel_size}));
  RETURN_IF_ERROR(CheckedNumElements({p.in_channels, weight_columns}).status());
  if (!FitsBlasInt(weight_columns) || !FitsBlasInt(p.in_channels) ||
      !FitsBlasInt(p.in_height * p.in_width)) {
    return absl::InvalidArgumentError(
        "conv_transpose2d: matrix sizes exceed OpenBLAS's 32-bit integers");
  }
  return absl::OkStatus();
}

absl::Status ConvTranspose2d(const ConvTranspose2dParams& p, const float* input,
                             const float* weight, const float* bias, float* output,
                             ThreadPool& pool) {
  RETURN_IF_ERROR(ValidateConvTranspose2dParams(p));
  if (input == nullptr || weight == nullptr || output == nullptr) {
    return absl::InvalidArgumentError("conv_transpose2d: null input, weight or output");
  }
  UseSingleThreadedBlas();

  const Geometry g{
      ConvTranspose2dOutputSize(p.in_height, p.kernel_size, p.stride, p.padding, p.output_padding),
      ConvTranspose2dOutputSize(p.in_width, p.kernel_size, p.stride, p.padding, p.output_padding),
      p.kernel_size * p.kernel_size};
  const int64_t out_plane = g.out_height * g.out_width;

  // Enough tasks to keep every thread busy even at batch 1: split the output
  // channels of a sample into blocks when there are fewer samples than
  // 2 x threads.
  const int64_t blocks_per_sample =
      std::clamp<int64_t>(CeilDiv(2 * pool.parallelism(), p.batch), 1, p.out_channels);
  const int64_t block_channels = CeilDiv(p.out_channels, blocks_per_sample);
  const int64_t num_blocks = CeilDiv(p.out_channels, block_channels);

  pool.ParallelFor(p.batch * num_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> cols;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / num_blocks;
      const int64_t co_begin = (task % num_blocks) * block_channels;
      const int64_t co_end = std::min(p.out_channels, co_begin + block_channels);
      for (int64_t co = co_begin; co < co_end; ++co) {
        float* out = output + (n * p.out_channels + co) * out_plane;
        std::fill(out, out + out_plane, bias == nullptr ? 0.0f : bias[co]);
      }
      RunTask(p, g, input, weight, output, n, co_begin, co_end, cols);
    }
  });
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace fuseserve
