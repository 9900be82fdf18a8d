#include "kernels/cuda/add_partials.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
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

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// `count` values per array; the partials span six orders of magnitude so
// that summing them in any order but first + p0 + p1 + ... changes the
// rounding of many elements.
struct Data {
  std::vector<float> first;
  std::vector<float> partials;  // num_partials arrays of count
};

Data MakeData(int64_t num_partials, int64_t count, uint64_t seed) {
  constexpr float kScales[] = {1e3f, 1e-3f, 1.0f, 1e2f, 1e-2f};
  Data d;
  d.first = reference::RandomNormal(count, seed);
  for (int64_t s = 0; s < num_partials; ++s) {
    const std::vector<float> p =
        reference::RandomNormal(count, seed + 1 + s, 0.0f, kScales[s % 5]);
    d.partials.insert(d.partials.end(), p.begin(), p.end());
  }
  return d;
}

// The float32 sum in the order AddPartials promises.
std::vector<float> HostSum(const Data& d, int64_t num_partials, int64_t count) {
  std::vector<float> out(count);
  for (int64_t i = 0; i < count; ++i) {
    float sum = d.first[i];
    for (int64_t s = 0; s < num_partials; ++s) sum += d.partials[s * count + i];
    out[i] = sum;
  }
  return out;
}

void ExpectBitwiseEqual(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (Bits(actual[i]) != Bits(expected[i]) && ++mismatches <= 10) {
      ADD_FAILURE() << "at " << i << ": " << actual[i] << ", expected " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

class CudaAddPartialsTest : public GpuStreamTest {
 protected:

  // AddPartials into a separate NaN-poisoned output, or (`in_place`) into
  // `first` itself.
  std::vector<float> Run(const Data& d, int64_t num_partials, int64_t count, bool in_place) {
    DeviceBuffer first = ToDevice(d.first);
    DeviceBuffer partials;
    if (num_partials > 0) partials = ToDevice(d.partials);
    DeviceBuffer separate;
    if (!in_place) separate = PoisonedDevice(count);
    float* out = in_place ? first.as<float>() : separate.as<float>();
    FinishUploads();
    const absl::Status status = AddPartials(first.as<float>(), partials.as<float>(), num_partials,
                                            count, out, stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(in_place ? first : separate, count);
  }

};

TEST_F(CudaAddPartialsTest, SumsInOrderBitwiseLikeTheHost) {
  struct Case {
    int64_t num_partials;
    int64_t count;
    bool in_place;
  };
  uint64_t seed = 1;
  // 0 partials (a copy, with null partials), 1 and 5; an odd count, a
  // single element, and 4096 x 256 + 3 elements (more than the kernel's
  // 4096 blocks cover in one pass: the grid-stride loop runs); in place.
  for (const Case& c : std::vector<Case>{{0, 1001, false},
                                         {1, 1001, false},
                                         {5, 1001, false},
                                         {5, 1, false},
                                         {2, 4096 * 256 + 3, false},
                                         {0, 1001, true},
                                         {5, 1001, true},
                                         {3, 4096 * 256 + 3, true}}) {
    SCOPED_TRACE(absl::StrCat(c.num_partials, " partials of ", c.count,
                              c.in_place ? ", in place" : ""));
    const Data d = MakeData(c.num_partials, c.count, seed);
    seed += 10;
    ExpectBitwiseEqual(Run(d, c.num_partials, c.count, c.in_place),
                       HostSum(d, c.num_partials, c.count));
  }
}

// The data must make the order matter, or the test above could not catch a
// reassociated sum.
TEST(AddPartialsDataTest, ReversedOrderChangesTheSum) {
  constexpr int64_t kCount = 1001;
  constexpr int64_t kPartials = 5;
  const Data d = MakeData(kPartials, kCount, 1);
  const std::vector<float> in_order = HostSum(d, kPartials, kCount);
  int64_t differing = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    float reversed = 0.0f;
    for (int64_t s = kPartials - 1; s >= 0; --s) reversed += d.partials[s * kCount + i];
    reversed += d.first[i];
    if (Bits(reversed) != Bits(in_order[i])) ++differing;
  }
  EXPECT_GT(differing, kCount / 10);
}

// Rejected before anything is launched, so no device is needed.
TEST(AddPartialsValidationTest, RejectsNullArraysAndBadCounts) {
  float first[4] = {};
  float partials[8] = {};
  float out[4] = {};
  struct Case {
    const char* name;
    const float* first;
    const float* partials;
    int64_t num_partials;
    int64_t count;
    float* out;
  };
  for (const Case& c : std::vector<Case>{{"null first", nullptr, partials, 2, 4, out},
                                         {"null out", first, partials, 2, 4, nullptr},
                                         {"null partials", first, nullptr, 1, 4, out},
                                         {"negative num_partials", first, partials, -1, 4, out},
                                         {"zero count", first, partials, 2, 0, out},
                                         {"negative count", first, partials, 2, -4, out}}) {
    EXPECT_EQ(AddPartials(c.first, c.partials, c.num_partials, c.count, c.out, nullptr).code(),
              absl::StatusCode::kInvalidArgument)
        << c.name;
  }
}

}  // namespace
}  // namespace fuseserve::cuda
