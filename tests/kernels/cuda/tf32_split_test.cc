#include "kernels/cuda/tf32_split.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "kernels/reference/test_data.h"
#include "tests/kernels/cuda/device_copy.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"

namespace fuseserve::cuda {
namespace {

// The 13 float32 mantissa bits TF32 drops.
constexpr uint32_t kDroppedBits = 0x1fffu;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

std::string Hex(float value) { return absl::StrCat("0x", absl::Hex(Bits(value))); }

// An oracle independent of the bit trick under test: `value` rounded in
// float64 to a multiple of its TF32 unit (2^-10 of its binade; float32
// denormals share the smallest normal binade), ties away from zero
// (std::round), truncated instead where the rounded magnitude would exceed
// FLT_MAX. Infinities and NaNs come back as they are.
float ExpectedBig(float value) {
  if (!std::isfinite(value) || value == 0.0f) return value;
  int exponent = 0;
  std::frexp(static_cast<double>(value), &exponent);  // |value| in [2^(e-1), 2^e)
  const double unit = std::ldexp(1.0, std::max(exponent - 1, -126) - 10);
  double big = std::round(value / unit) * unit;
  if (std::fabs(big) > FLT_MAX) big = std::trunc(value / unit) * unit;
  return static_cast<float>(big);
}

// Values that exercise every branch of the split: signed zeros, denormals
// (rounding within and out of the denormal range), exact TF32 values,
// ties and their neighbours, a binade carry, values near FLT_MAX whose
// rounding would overflow, infinities and NaNs.
std::vector<float> EdgeValues() {
  return {
      0.0f,
      -0.0f,
      std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(),
      FromBits(0x00000fffu),  // denormal below a half unit: rounds to 0
      FromBits(0x00001000u),  // denormal tie: rounds up to 0x2000
      FromBits(0x80001000u),  // negative denormal tie: away from zero
      FromBits(0x007ff000u),  // largest denormal tie: rounds to FLT_MIN
      FLT_MIN,
      -FLT_MIN,
      1.0f,
      -1.5f,
      FromBits(0x3f801000u),  // 1 + 2^-11: tie, away from zero to 1 + 2^-10
      FromBits(0xbf801000u),  // -(1 + 2^-11)
      FromBits(0x3f800fffu),  // just below the tie: down to 1
      FromBits(0x3f801001u),  // just above the tie: up to 1 + 2^-10
      FromBits(0x3f803000u),  // 1 + 3 * 2^-11: tie with an odd TF32 neighbour below
      FromBits(0x3fffffffu),  // just below 2: rounds up into the next binade
      FromBits(0x7f7fd000u),  // tie below the top TF32 value: rounds up, finite
      FromBits(0x7f7fefffu),  // rounds down to the top TF32 value
      FromBits(0x7f7ff000u),  // tie that would round to infinity: truncated
      FLT_MAX,                // would round to infinity: truncated
      -FLT_MAX,
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      FromBits(0xffc00000u),  // negative NaN
      FromBits(0x7fc01234u),  // NaN with a payload in the dropped bits
  };
}

// Random values over many binades: U[0,1), N(0,1), and normal values scaled
// into the denormal range and up towards FLT_MAX.
std::vector<float> RandomValues(int64_t count_each, uint64_t seed) {
  std::vector<float> values;
  for (const std::vector<float>& part :
       {reference::RandomUniform(count_each, seed), reference::RandomNormal(count_each, seed + 1),
        reference::RandomUniform(count_each, seed + 2, -1e-30f, 1e-30f),
        reference::RandomNormal(count_each, seed + 3, 0.0f, 1e-39f),
        reference::RandomNormal(count_each, seed + 4, 0.0f, 1e37f),
        reference::RandomUniform(count_each, seed + 5, -3e38f, 3e38f)}) {
    values.insert(values.end(), part.begin(), part.end());
  }
  return values;
}

// `values` padded with 1.0f to rows * cols.
std::vector<float> AsMatrix(std::vector<float> values, int64_t rows, int64_t cols) {
  values.resize(rows * cols, 1.0f);
  return values;
}

// Every element of a host split of the [rows, cols] matrix `in` in `order`
// against the contract: big is `in` rounded to TF32 (ExpectedBig, bitwise),
// so its dropped mantissa bits are zero; small is finite and big + small
// gives `in` back exactly (bitwise, except that a zero may come back with
// the other sign); infinities and NaNs pass through as big unchanged.
void ExpectValidSplit(const std::vector<float>& in, int64_t rows, int64_t cols,
                      Tf32SplitOrder order, const std::vector<float>& out) {
  ASSERT_EQ(out.size(), in.size() * 2);
  const bool big_first = order == Tf32SplitOrder::kBigFirst;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t col = 0; col < cols; ++col) {
      const float value = in[row * cols + col];
      const float* out_row = out.data() + row * 2 * cols;
      const float big = out_row[big_first ? col : cols + col];
      const float small = out_row[big_first ? cols + col : col];
      SCOPED_TRACE(absl::StrCat("[", row, ", ", col, "] value ", value, " (", Hex(value),
                                "): big ", big, " (", Hex(big), "), small ", small));
      if (std::isnan(value)) {
        EXPECT_EQ(Bits(big), Bits(value));
        continue;
      }
      EXPECT_EQ(Bits(big), Bits(ExpectedBig(value)));
      if (std::isinf(value)) continue;
      EXPECT_EQ(Bits(big) & kDroppedBits, 0u);
      EXPECT_TRUE(std::isfinite(small));
      if (value == 0.0f) {
        EXPECT_EQ(big + small, 0.0f);
      } else {
        EXPECT_EQ(Bits(big + small), Bits(value));
      }
    }
  }
}

std::vector<float> HostSplit(const std::vector<float>& in, int64_t rows, int64_t cols,
                             Tf32SplitOrder order) {
  std::vector<float> out(in.size() * 2, std::numeric_limits<float>::quiet_NaN());
  const absl::Status status = SplitTf32OnHost(in.data(), rows, cols, order, out.data());
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(Tf32SplitTest, ExpectedBigOracleRoundsAsSpecified) {
  // The oracle itself, on values whose TF32 rounding is known by hand.
  EXPECT_EQ(ExpectedBig(FromBits(0x3f801000u)), 1.0f + 0x1p-10f);
  EXPECT_EQ(ExpectedBig(FromBits(0xbf801000u)), -(1.0f + 0x1p-10f));
  EXPECT_EQ(ExpectedBig(FromBits(0x3f800fffu)), 1.0f);
  EXPECT_EQ(ExpectedBig(FromBits(0x3fffffffu)), 2.0f);
  EXPECT_EQ(Bits(ExpectedBig(FLT_MAX)), 0x7f7fe000u);
  EXPECT_EQ(Bits(ExpectedBig(FromBits(0x00001000u))), 0x00002000u);
  EXPECT_EQ(Bits(ExpectedBig(-0.0f)), 0x80000000u);
}

TEST(Tf32SplitTest, HostSplitRoundsTiesAwayFromZero) {
  const std::vector<float> in = {FromBits(0x3f801000u), FromBits(0xbf801000u)};
  const std::vector<float> out = HostSplit(in, 1, 2, Tf32SplitOrder::kBigFirst);
  // [big(1 + 2^-11), big(-(1 + 2^-11)) | small, small]
  EXPECT_EQ(out[0], 1.0f + 0x1p-10f);
  EXPECT_EQ(out[1], -(1.0f + 0x1p-10f));
  EXPECT_EQ(out[2], -0x1p-11f);
  EXPECT_EQ(out[3], 0x1p-11f);
}

TEST(Tf32SplitTest, HostSplitTruncatesWhereRoundingWouldOverflow) {
  const std::vector<float> in = {FLT_MAX, -FLT_MAX, FromBits(0x7f7ff000u)};
  const std::vector<float> out = HostSplit(in, 1, 3, Tf32SplitOrder::kBigFirst);
  EXPECT_EQ(Bits(out[0]), 0x7f7fe000u);
  EXPECT_EQ(Bits(out[1]), 0xff7fe000u);
  EXPECT_EQ(Bits(out[2]), 0x7f7fe000u);
  EXPECT_EQ(out[3], FLT_MAX - FromBits(0x7f7fe000u));
  EXPECT_GT(out[3], 0.0f);
  EXPECT_EQ(out[4], -out[3]);
  EXPECT_TRUE(std::isfinite(out[5]));
}

TEST(Tf32SplitTest, HostSplitPassesInfinityAndNanThroughAsBig) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> in = {inf, -inf, FromBits(0x7fc01234u), FromBits(0xffc00000u)};
  const std::vector<float> out = HostSplit(in, 1, 4, Tf32SplitOrder::kBigFirst);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Bits(out[i]), Bits(in[i])) << i;
}

TEST(Tf32SplitTest, HostSplitOfEdgeValuesMeetsTheContractInBothOrders) {
  const std::vector<float> edges = EdgeValues();
  const int64_t cols = static_cast<int64_t>(edges.size());
  for (Tf32SplitOrder order : {Tf32SplitOrder::kBigFirst, Tf32SplitOrder::kSmallFirst}) {
    SCOPED_TRACE(order == Tf32SplitOrder::kBigFirst ? "big first" : "small first");
    ExpectValidSplit(edges, 1, cols, order, HostSplit(edges, 1, cols, order));
  }
}

TEST(Tf32SplitTest, HostSplitOfRandomValuesMeetsTheContractInBothOrders) {
  // 3 rows of an odd width, so a row-layout mistake shows.
  constexpr int64_t kRows = 3;
  constexpr int64_t kCols = 2001;
  std::vector<float> values = RandomValues(1000, 7);
  ASSERT_LE(static_cast<int64_t>(values.size()), kRows * kCols);
  const std::vector<float> in = AsMatrix(std::move(values), kRows, kCols);
  for (Tf32SplitOrder order : {Tf32SplitOrder::kBigFirst, Tf32SplitOrder::kSmallFirst}) {
    SCOPED_TRACE(order == Tf32SplitOrder::kBigFirst ? "big first" : "small first");
    ExpectValidSplit(in, kRows, kCols, order, HostSplit(in, kRows, kCols, order));
  }
}

TEST(Tf32SplitTest, HostSplitOrdersAreMirrorImagesPerRow) {
  const int64_t rows = 4;
  const int64_t cols = 5;
  const std::vector<float> in = reference::RandomNormal(rows * cols, 11);
  const std::vector<float> big_first = HostSplit(in, rows, cols, Tf32SplitOrder::kBigFirst);
  const std::vector<float> small_first = HostSplit(in, rows, cols, Tf32SplitOrder::kSmallFirst);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t base = row * 2 * cols;
      EXPECT_EQ(Bits(big_first[base + col]), Bits(small_first[base + cols + col]));
      EXPECT_EQ(Bits(big_first[base + cols + col]), Bits(small_first[base + col]));
    }
  }
}

TEST(Tf32SplitTest, RejectsInvalidSizesAndNullPointers) {
  float in[4] = {1, 2, 3, 4};
  float out[8] = {};
  const Tf32SplitOrder order = Tf32SplitOrder::kBigFirst;
  struct Case {
    const char* name;
    const float* in;
    int64_t rows;
    int64_t cols;
    float* out;
  };
  const int64_t huge = int64_t{1} << 62;
  for (const Case& c : std::vector<Case>{{"zero rows", in, 0, 4, out},
                                         {"zero cols", in, 4, 0, out},
                                         {"negative rows", in, -1, 4, out},
                                         {"negative cols", in, 1, -4, out},
                                         {"output size overflows", in, huge, 4, out},
                                         {"null in", nullptr, 1, 4, out},
                                         {"null out", in, 1, 4, nullptr}}) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(SplitTf32OnHost(c.in, c.rows, c.cols, order, c.out).code(),
              absl::StatusCode::kInvalidArgument);
    // Rejected before anything is enqueued: no device is needed.
    EXPECT_EQ(SplitTf32(c.in, c.rows, c.cols, order, c.out, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // The host split wrote nothing.
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

class CudaTf32SplitTest : public GpuStreamTest {
 protected:

  std::vector<float> DeviceSplit(const std::vector<float>& in, int64_t rows, int64_t cols,
                                 Tf32SplitOrder order) {
    DeviceBuffer din = ToDevice(in);
    DeviceBuffer dout = PoisonedDevice(rows * 2 * cols);
    FinishUploads();
    const absl::Status status = SplitTf32(din.as<float>(), rows, cols, order, dout.as<float>(),
                                          stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(dout, rows * 2 * cols);
  }

};

// Bitwise against the host split, except that a NaN small (from an infinite
// or NaN input) need only be a NaN: the two processors' NaN payloads differ.
void ExpectSameSplit(const std::vector<float>& device, const std::vector<float>& host) {
  ASSERT_EQ(device.size(), host.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    const bool same = std::isnan(host[i]) ? std::isnan(device[i]) : Bits(device[i]) == Bits(host[i]);
    if (!same && ++mismatches <= 10) {
      ADD_FAILURE() << "at " << i << ": device " << device[i] << " (" << Hex(device[i])
                    << "), host " << host[i] << " (" << Hex(host[i]) << ")";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(CudaTf32SplitTest, DeviceSplitEqualsHostSplitBitwise) {
  struct Shape {
    int64_t rows, cols;
  };
  uint64_t seed = 21;
  // 257 x 4099 is more than the kernel's 4096 blocks of 256 threads cover in
  // one pass, so the grid-stride loop runs too.
  for (const Shape& s : std::vector<Shape>{{1, 1}, {5, 3}, {3, 1001}, {257, 4099}}) {
    const int64_t count = s.rows * s.cols;
    std::vector<float> in = RandomValues((count + 5) / 6, seed++);
    in.resize(count);
    // Edge values spread through the matrix (the first ones in the 1x1 case).
    const std::vector<float> edges = EdgeValues();
    for (size_t e = 0; e < edges.size(); ++e) {
      in[(static_cast<int64_t>(e) * 7919) % count] = edges[e];
    }
    for (Tf32SplitOrder order : {Tf32SplitOrder::kBigFirst, Tf32SplitOrder::kSmallFirst}) {
      SCOPED_TRACE(absl::StrCat(s.rows, "x", s.cols,
                                order == Tf32SplitOrder::kBigFirst ? " big first" : " small first"));
      ExpectSameSplit(DeviceSplit(in, s.rows, s.cols, order), HostSplit(in, s.rows, s.cols, order));
    }
  }
}

}  // namespace
}  // namespace fuseserve::cuda
