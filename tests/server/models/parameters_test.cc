#include "server/models/parameters.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tests/server/models/model_test_util.h"

namespace fuseserve {
namespace {

using testing::IsInvalidArgumentWith;

ModelParameters ParametersOf(const std::map<std::string, std::string>& values) {
  inference::ModelConfig config;
  for (const auto& [key, value] : values) {
    (*config.mutable_parameters())[key].set_string_value(value);
  }
  return ModelParameters(config);
}

TEST(ModelParametersTest, ReadsIntegersAndAppliesDefaults) {
  const ModelParameters params = ParametersOf({{"stride", "2"}, {"padding", " 3 "}});
  EXPECT_EQ(*params.RequiredInt("stride", 1), 2);
  EXPECT_EQ(*params.OptionalInt("stride", 1, 1), 2);
  EXPECT_EQ(*params.OptionalInt("padding", 0, 0), 3);
  EXPECT_EQ(*params.OptionalInt("output_padding", 0, 0), 0);
  EXPECT_EQ(*params.OptionalInt("absent", 1, 7), 7);
}

TEST(ModelParametersTest, MissingRequiredIntegerNamesTheKey) {
  EXPECT_TRUE(IsInvalidArgumentWith(ParametersOf({}).RequiredInt("in_channels", 1).status(),
                                    "missing required parameter \"in_channels\""));
}

TEST(ModelParametersTest, RejectsIntegersOutOfRangeOrMalformedNamingKeyAndValue) {
  EXPECT_TRUE(
      IsInvalidArgumentWith(ParametersOf({{"stride", "0"}}).RequiredInt("stride", 1).status(),
                            "parameter \"stride\" must be a positive integer, got \"0\""));
  EXPECT_TRUE(
      IsInvalidArgumentWith(ParametersOf({{"padding", "-1"}}).OptionalInt("padding", 0, 0).status(),
                            "parameter \"padding\" must be a non-negative integer, got \"-1\""));
  EXPECT_TRUE(IsInvalidArgumentWith(ParametersOf({{"x", "-3"}}).OptionalInt("x", -2, 0).status(),
                                    "parameter \"x\" must be an integer >= -2, got \"-3\""));
  for (const std::string bad : {"", "abc", "2.5", "1e3", "3x", "99999999999999999999"}) {
    EXPECT_TRUE(IsInvalidArgumentWith(
        ParametersOf({{"kernel_size", bad}}).RequiredInt("kernel_size", 1).status(),
        "parameter \"kernel_size\" must be a positive integer, got \"" + bad + "\""));
  }
  EXPECT_TRUE(IsInvalidArgumentWith(
      ParametersOf({{"kernel_size", "2147483648"}}).RequiredInt("kernel_size", 1).status(),
      "must be a positive integer <= 2147483647, got \"2147483648\""));
  EXPECT_TRUE(ParametersOf({{"kernel_size", "2147483647"}}).RequiredInt("kernel_size", 1).ok());
}

TEST(ModelParametersTest, ReadsFiniteDoubles) {
  const ModelParameters params =
      ParametersOf({{"hardtanh_min", "-0.5"}, {"eps", "1e-3"}, {"hardtanh_max", "2"}});
  EXPECT_EQ(*params.OptionalDouble("hardtanh_min", -1.0), -0.5);
  EXPECT_EQ(*params.OptionalDouble("hardtanh_max", 1.0), 2.0);
  EXPECT_EQ(*params.OptionalDouble("absent", -1.0), -1.0);
  EXPECT_EQ(*params.OptionalPositiveDouble("eps", 1e-5), 1e-3);
  EXPECT_EQ(*params.OptionalPositiveDouble("absent", 1e-5), 1e-5);
}

TEST(ModelParametersTest, RejectsNonFiniteOrMalformedDoubles) {
  for (const std::string bad : {"", "abc", "nan", "inf", "-inf", "1e999", "0.5x"}) {
    EXPECT_TRUE(IsInvalidArgumentWith(
        ParametersOf({{"hardtanh_min", bad}}).OptionalDouble("hardtanh_min", -1.0).status(),
        "parameter \"hardtanh_min\" must be a finite number, got \"" + bad + "\""));
  }
  for (const std::string bad : {"0", "-1e-5", "nan", "x"}) {
    EXPECT_TRUE(IsInvalidArgumentWith(
        ParametersOf({{"eps", bad}}).OptionalPositiveDouble("eps", 1e-5).status(),
        "parameter \"eps\" must be a finite number > 0, got \"" + bad + "\""));
  }
}

TEST(ModelParametersTest, ReadsPrecisionAndStrings) {
  EXPECT_EQ(*ParametersOf({{"precision", "fp32"}}).OptionalPrecision("precision", Precision::kTf32),
            Precision::kFp32);
  EXPECT_EQ(*ParametersOf({{"precision", "tf32"}}).OptionalPrecision("precision", Precision::kFp32),
            Precision::kTf32);
  EXPECT_EQ(*ParametersOf({}).OptionalPrecision("precision", Precision::kTf32), Precision::kTf32);
  EXPECT_TRUE(
      IsInvalidArgumentWith(ParametersOf({{"precision", "fp16"}})
                                .OptionalPrecision("precision", Precision::kFp32)
                                .status(),
                            "parameter \"precision\" must be \"fp32\" or \"tf32\", got \"fp16\""));
  EXPECT_EQ(*ParametersOf({{"s", "v"}}).OptionalString("s", "d"), "v");
  EXPECT_EQ(*ParametersOf({}).OptionalString("s", "d"), "d");
}

TEST(ModelParametersTest, RejectsUnknownKeysListingTheKnownOnes) {
  const ModelParameters params = ParametersOf({{"stride", "1"}, {"strides", "2"}});
  EXPECT_TRUE(params.CheckKnownKeys("fam", {"stride", "strides"}).ok());
  EXPECT_TRUE(IsInvalidArgumentWith(params.CheckKnownKeys("fam", {"stride", "padding"}),
                                    "unknown parameter \"strides\" for platform fam (known: "
                                    "stride, padding)"));
}

}  // namespace
}  // namespace fuseserve
