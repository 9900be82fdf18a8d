#include "client/npy.h"


#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_dir.h"

namespace fuseserve::client {
namespace {

using ::testing::HasSubstr;

// A .npy file built by hand: `header` is the dict text (padded and
// newline-terminated here), `major` the format version (1, 2 or 3).
std::string HandMadeNpy(const std::string& header, const std::string& data, int major = 1) {
  std::string padded = header;
  const size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + padded.size() + 1) % 64 != 0) padded.push_back(' ');
  padded.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes.push_back(static_cast<char>(major));
  bytes.push_back(0);
  for (size_t i = 0; i < preamble - 8; ++i) {
    bytes.push_back(static_cast<char>((padded.size() >> (8 * i)) & 0xff));
  }
  return bytes + padded + data;
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::string F4Header(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(NpyTest, RoundTripIsBitExactForEveryFloat) {
  const std::vector<float> special = {0.0f,
                                      -0.0f,
                                      1.5f,
                                      -3.25e-38f,
                                      std::numeric_limits<float>::denorm_min(),
                                      std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::quiet_NaN(),
                                      0.1f,
                                      123456.789f,
                                      -1.0f};
  for (const Shape& shape : std::vector<Shape>{{12}, {3, 4}, {2, 3, 2}, {1, 2, 1, 6}}) {
    const auto bytes = SerializeNpy(shape, special);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const auto array = ParseNpy(*bytes, "x.npy");
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->shape, shape);
    ASSERT_EQ(array->data.size(), special.size());
    EXPECT_EQ(std::memcmp(array->data.data(), special.data(), special.size() * sizeof(float)), 0)
        << ShapeToString(shape);
  }
}

TEST(NpyTest, RoundTripsScalarsAndEmptyArraysThroughFiles) {
  const TestDir directory("npy-test");
  const std::string path = directory.Path("scalar.npy");
  ASSERT_TRUE(WriteNpyFile(path, {}, std::vector<float>{7.5f}).ok());
  EXPECT_EQ(ReadFile(path), *SerializeNpy({}, std::vector<float>{7.5f}));
  auto scalar = ReadNpyFile(path);
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->data, std::vector<float>{7.5f});

  ASSERT_TRUE(WriteNpyFile(path, {0, 3}, std::vector<float>{}).ok());
  auto empty = ReadNpyFile(path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape, (Shape{0, 3}));
  EXPECT_TRUE(empty->data.empty());
}

TEST(NpyTest, WritesVersion1HeaderAlignedLikeNumpy) {
  const auto bytes = SerializeNpy({2, 3}, std::vector<float>(6, 1.0f));
  ASSERT_TRUE(bytes.ok());
  ASSERT_GE(bytes->size(), 10u);
  EXPECT_EQ(bytes->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_length =
      static_cast<uint8_t>((*bytes)[8]) | (static_cast<uint8_t>((*bytes)[9]) << 8);
  EXPECT_EQ((10 + header_length) % 64, 0u);
  const std::string header = bytes->substr(10, header_length);
  EXPECT_THAT(header, HasSubstr("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes->size(), 10 + header_length + 6 * sizeof(float));
}

TEST(NpyTest, WritesOneDimensionalShapesAsPythonTuples) {
  const auto bytes = SerializeNpy({5}, std::vector<float>(5, 0.0f));
  ASSERT_TRUE(bytes.ok());
  EXPECT_THAT(*bytes, HasSubstr("'shape': (5,), }"));
}

TEST(NpyTest, SwitchesToVersion2WhenTheHeaderOutgrowsSixteenBits) {
  const Shape shape(30000, 1);  // "1, " x 30000 > 65535 header bytes
  const auto bytes = SerializeNpy(shape, std::vector<float>{4.0f});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)[6], 2);
  const auto array = ParseNpy(*bytes, "big.npy");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, shape);
  EXPECT_EQ(array->data, std::vector<float>{4.0f});
}

TEST(NpyTest, ReadsVersion2And3Headers) {
  for (int major : {2, 3}) {
    const auto array =
        ParseNpy(HandMadeNpy(F4Header("(2,)"), FloatBytes({1.0f, 2.0f}), major), "v.npy");
    ASSERT_TRUE(array.ok()) << major << ": " << array.status();
    EXPECT_EQ(array->data, (std::vector<float>{1.0f, 2.0f}));
  }
}

TEST(NpyTest, ReadsHeadersWithOtherKeyOrderAndSpacing) {
  const auto array = ParseNpy(
      HandMadeNpy("{\"shape\":(1,2),'fortran_order':False,\"descr\":\"<f4\"}", FloatBytes({3, 4})),
      "x.npy");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, (Shape{1, 2}));
}

TEST(NpyTest, RejectsOtherDtypesNamingThem) {
  const auto float64 = ParseNpy(
      HandMadeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, 0)),
      "x.npy");
  EXPECT_EQ(float64.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(float64.status().message(),
            "x.npy has dtype '<f8' (float64); fuseserve-cli needs float32 ('<f4')");

  const auto int32 = ParseNpy(
      HandMadeNpy("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", std::string(4, 0)),
      "x.npy");
  EXPECT_THAT(int32.status().message(), HasSubstr("'<i4' (int32)"));

  const auto half = ParseNpy(
      HandMadeNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", std::string(4, 0)),
      "x.npy");
  EXPECT_THAT(half.status().message(), HasSubstr("'<f2' (float16)"));
}

TEST(NpyTest, RejectsBigEndianFloat32) {
  const auto array = ParseNpy(
      HandMadeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", std::string(4, 0)),
      "be.npy");
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(array.status().message(),
            "be.npy has dtype '>f4' (big-endian float32); fuseserve-cli needs little-endian "
            "float32 ('<f4')");
}

TEST(NpyTest, RejectsFortranOrder) {
  const auto array =
      ParseNpy(HandMadeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                           FloatBytes({1, 2, 3, 4})),
               "f.npy");
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("f.npy is in Fortran (column-major) order"));
}

TEST(NpyTest, AcceptsFortranFlagOnOneDimensionalArraysWhereTheBytesAreTheSame) {
  const auto array = ParseNpy(
      HandMadeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", FloatBytes({1, 2})),
      "f.npy");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->data, (std::vector<float>{1, 2}));
}

TEST(NpyTest, RejectsStructuredDtypes) {
  const auto array =
      ParseNpy(HandMadeNpy("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, "
                           "'shape': (1,), }",
                           std::string(8, 0)),
               "s.npy");
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("s.npy has a structured dtype"));
}

TEST(NpyTest, RejectsTruncatedAndOverlongData) {
  const auto truncated =
      ParseNpy(HandMadeNpy(F4Header("(2, 3)"), FloatBytes({1, 2, 3, 4, 5})), "t.npy");
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(truncated.status().message(), HasSubstr("t.npy is truncated"));
  EXPECT_THAT(truncated.status().message(), HasSubstr("(2, 3)"));

  const auto trailing = ParseNpy(HandMadeNpy(F4Header("(2,)"), FloatBytes({1, 2, 3})), "t.npy");
  EXPECT_THAT(trailing.status().message(), HasSubstr("t.npy has trailing bytes"));

  // A shape whose byte count overflows must not be trusted.
  const auto huge =
      ParseNpy(HandMadeNpy(F4Header("(4611686018427387904, 4)"), FloatBytes({1})), "h.npy");
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, RejectsBadMagicAndVersions) {
  EXPECT_THAT(ParseNpy("PK\x03\x04 not numpy at all", "z.npy").status().message(),
              HasSubstr("z.npy: not a NumPy .npy file"));
  EXPECT_EQ(ParseNpy("", "e.npy").status().code(), absl::StatusCode::kInvalidArgument);
  std::string v4 = HandMadeNpy(F4Header("(1,)"), FloatBytes({1}), 2);
  v4[6] = 4;
  EXPECT_THAT(ParseNpy(v4, "v.npy").status().message(),
              HasSubstr("unsupported .npy format version 4.0"));
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x01\x00\x05", 9), "p.npy").status().message(),
              HasSubstr("truncated .npy preamble"));
  EXPECT_THAT(
      ParseNpy(std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17), "h.npy").status().message(),
      HasSubstr("truncated .npy header"));
}

TEST(NpyTest, RejectsMalformedHeaders) {
  for (const std::string& header : std::vector<std::string>{
           "not a dict",
           "{'descr': '<f4', 'fortran_order': False}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
           "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1)}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}",
           "{'descr: '<f4'}",
           "{'descr': 4, 'fortran_order': False, 'shape': (2,)}",
       }) {
    const auto array = ParseNpy(HandMadeNpy(header, FloatBytes({1, 2})), "m.npy");
    EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument) << header;
    EXPECT_THAT(array.status().message(), HasSubstr("m.npy")) << header;
  }
}

TEST(NpyTest, ReportsMissingFilesAndMismatchedWrites) {
  const TestDir directory("npy-test");
  const auto missing = ReadNpyFile(directory.Path("does-not-exist.npy"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does-not-exist.npy"));
  EXPECT_EQ(SerializeNpy({2, 2}, std::vector<float>(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SerializeNpy({-1}, std::vector<float>{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, RefusesADirectoryInsteadOfThrowing) {
  // libstdc++ throws from a stream read that fails with EISDIR.
  const TestDir scratch("npy-test");
  const std::string directory = scratch.MakeDir("a-directory.npy");
  const auto array = ReadNpyFile(directory);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr(directory + " is not a regular file"));
}

// Found by the npy fuzzer: the dtype's readable name multiplied a huge item
// size by 8 (signed overflow) while building the error message.
TEST(NpyTest, RefusesAnAbsurdItemSizeWithoutOverflow) {
  const auto array = ParseNpy(
      HandMadeNpy("{'descr': '<f4000000000000000080', 'fortran_order': False, 'shape': (2,), }",
                  FloatBytes({1.0f, 2.0f})),
      "huge.npy");
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("<f4000000000000000080"));
}

// NumPy interoperability, with the system interpreter's numpy.
class NpyNumpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system(FUSESERVE_TEST_PYTHON " -c 'import numpy' 2>/dev/null") != 0) {
      GTEST_SKIP() << FUSESERVE_TEST_PYTHON << " has no numpy";
    }
  }

  // Runs a Python script; returns its exit status (0 = every assert held).
  int RunPython(const std::string& script) const {
    const std::string path = directory_.WriteFile("script.py", script);
    return std::system((std::string(FUSESERVE_TEST_PYTHON " ") + path).c_str());
  }

  TestDir directory_{"npy-test"};  // this test's files, removed with it
};

TEST_F(NpyNumpyTest, NumpyLoadsWhatWeWriteBitExactly) {
  const std::string path = directory_.Path("ours.npy");
  std::vector<float> values(2 * 3 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 3.1f;
  values[5] = -0.0f;
  values[7] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(WriteNpyFile(path, {2, 3, 4}, values).ok());
  const std::string expected_hex = [&] {
    std::string hex;
    for (unsigned char c : FloatBytes(values)) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
    return hex;
  }();
  EXPECT_EQ(RunPython(absl::StrCat("import numpy as np\n"
                                   "x = np.load('",
                                   path, "')\n",
                                   "assert x.dtype == np.dtype('<f4'), x.dtype\n"
                                   "assert x.shape == (2, 3, 4), x.shape\n"
                                   "assert x.flags['C_CONTIGUOUS']\n"
                                   "assert x.tobytes().hex() == '",
                                   expected_hex, "'\n")),
            0);
}

TEST_F(NpyNumpyTest, ReadsNumpyFilesAndRejectsFortranOrderAndFloat64) {
  const std::string c_path = directory_.Path("c.npy"), f_path = directory_.Path("f.npy"),
                    d_path = directory_.Path("d.npy"), v3_path = directory_.Path("v3.npy");
  ASSERT_EQ(RunPython(absl::StrCat(
                "import numpy as np\n"
                "x = (np.arange(24, dtype=np.float32) * 0.25 - 2).reshape(2, 3, 4)\n"
                "np.save('",
                c_path, "', x)\n", "np.save('", f_path, "', np.asfortranarray(x))\n", "np.save('",
                d_path, "', x.astype(np.float64))\n", "with open('", v3_path,
                "', 'wb') as f:\n"
                "    np.lib.format.write_array(f, x, version=(3, 0))\n")),
            0);
  std::vector<float> expected(24);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<float>(i) * 0.25f - 2;
  for (const std::string& path : {c_path, v3_path}) {
    const auto array = ReadNpyFile(path);
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->shape, (Shape{2, 3, 4}));
    EXPECT_EQ(array->data, expected);
  }
  const auto fortran = ReadNpyFile(f_path);
  EXPECT_EQ(fortran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fortran.status().message(), HasSubstr("Fortran (column-major) order"));
  const auto float64 = ReadNpyFile(d_path);
  EXPECT_EQ(float64.status().message(),
            d_path + " has dtype '<f8' (float64); fuseserve-cli needs float32 ('<f4')");
}

}  // namespace
}  // namespace fuseserve::client
