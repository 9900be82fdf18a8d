#include "server/repository/model_config_loader.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The reference conv model's config (REFERENCE.md §2.2), as Triton users
// write it.
constexpr char kTritonStyleConfig[] = R"config(
name: "convtranspose_gelu_groupnorm"
platform: "convtranspose_gelu_groupnorm"
max_batch_size: 32
input  [ { name: "input",  data_type: TYPE_FP32, dims: [ 64, 256, 256 ] } ]
output [ { name: "output", data_type: TYPE_FP32, dims: [ 64, 258, 258 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 500
  default_queue_policy { max_queue_size: 256 }
}
instance_group [ { count: 2, kind: KIND_GPU, gpus: [ 0 ] } ]
parameters { key: "in_channels"  value: { string_value: "64" } }
parameters { key: "out_channels" value: { string_value: "64" } }
parameters { key: "kernel_size"  value: { string_value: "3" } }
parameters { key: "stride"       value: { string_value: "1" } }
parameters { key: "num_groups"   value: { string_value: "8" } }
)config";

// A minimal valid config for a model directory named "m"; tests append or
// substitute fields.
std::string MinimalConfig(const std::string& input =
                              "input { name: \"input\" data_type: "
                              "TYPE_FP32 dims: [ 4, -1 ] }") {
  return "platform: \"groupnorm\"\nmax_batch_size: 8\n" + input +
         "\noutput { name: \"output\" data_type: TYPE_FP32 dims: [ 4, -1 ] }\n";
}

class LoadModelConfigTest : public ::testing::Test {
 protected:
  // Writes `pbtxt` as <tmp>/<model>/config.pbtxt and loads that directory.
  absl::StatusOr<inference::ModelConfig> Load(const std::string& pbtxt,
                                              const std::string& model = "m") {
    dir_.WriteFile(model + "/config.pbtxt", pbtxt);
    return LoadModelConfig(dir_.Path(model));
  }

  // Loads `pbtxt` and expects InvalidArgument containing `problem`.
  void ExpectInvalid(const std::string& pbtxt, const std::string& problem) {
    const absl::Status status = Load(pbtxt).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                AllOf(HasSubstr("config.pbtxt"), HasSubstr(problem)));
  }

  TestDir dir_;
};

TEST_F(LoadModelConfigTest, ParsesTritonStyleConfigWithAllFields) {
  auto config = Load(kTritonStyleConfig, "convtranspose_gelu_groupnorm");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "convtranspose_gelu_groupnorm");
  EXPECT_EQ(config->platform(), "convtranspose_gelu_groupnorm");
  EXPECT_EQ(config->max_batch_size(), 32);
  ASSERT_EQ(config->input_size(), 1);
  EXPECT_EQ(config->input(0).name(), "input");
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(config->input(0).dims(), ElementsAre(64, 256, 256));
  ASSERT_EQ(config->output_size(), 1);
  EXPECT_EQ(config->output(0).name(), "output");
  EXPECT_THAT(config->output(0).dims(), ElementsAre(64, 258, 258));
  ASSERT_TRUE(config->has_dynamic_batching());
  EXPECT_EQ(config->dynamic_batching().max_queue_delay_microseconds(), 500u);
  EXPECT_EQ(config->dynamic_batching().default_queue_policy().max_queue_size(), 256u);
  ASSERT_EQ(config->instance_group_size(), 1);
  EXPECT_EQ(config->instance_group(0).count(), 2);
  EXPECT_EQ(config->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_THAT(config->instance_group(0).gpus(), ElementsAre(0));
  EXPECT_EQ(config->parameters().size(), 5u);
  EXPECT_EQ(config->parameters().at("in_channels").string_value(), "64");
  EXPECT_EQ(config->parameters().at("num_groups").string_value(), "8");
  EXPECT_EQ(config->version_policy().latest().num_versions(), 1u);
}

TEST_F(LoadModelConfigTest, FillsDefaults) {
  auto config = Load(MinimalConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "m");
  ASSERT_EQ(config->instance_group_size(), 1);
  EXPECT_EQ(config->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_AUTO);
  EXPECT_EQ(config->instance_group(0).count(), 1);
  ASSERT_TRUE(config->version_policy().has_latest());
  EXPECT_EQ(config->version_policy().latest().num_versions(), 1u);
  EXPECT_FALSE(config->has_dynamic_batching());
}

TEST_F(LoadModelConfigTest, TurnsZeroCountsIntoOne) {
  auto config = Load(MinimalConfig() +
                     "instance_group { kind: KIND_CPU }\n"
                     "version_policy { latest { num_versions: 0 } }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->instance_group(0).count(), 1);
  EXPECT_EQ(config->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config->version_policy().latest().num_versions(), 1u);
}

TEST_F(LoadModelConfigTest, KeepsExplicitVersionPolicy) {
  auto config = Load(MinimalConfig() + "version_policy { specific { versions: [ 3, 1 ] } }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->version_policy().specific().versions(), ElementsAre(3, 1));
}

TEST_F(LoadModelConfigTest, ReportsUnknownFieldWithLineAndName) {
  const absl::Status status = Load("platform: \"groupnorm\"\nmax_batch: 8\n").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("m/config.pbtxt:2:"), HasSubstr("max_batch")));
}

TEST(ParseModelConfigTest, ReportsSyntaxErrorWithPosition) {
  const absl::Status status = ParseModelConfig("name: \"x\"\nmax_batch_size: [\n", "cfg").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cfg:2:"));
}

TEST_F(LoadModelConfigTest, RejectsNameThatDiffersFromDirectory) {
  ExpectInvalid("name: \"other\"\n" + MinimalConfig(),
                "name \"other\" does not match the model directory \"m\"");
}

TEST_F(LoadModelConfigTest, ReportsMissingConfigAsNotFound) {
  const std::string model_dir = dir_.MakeDir("m");
  const absl::Status status = LoadModelConfig(model_dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr(model_dir + "/config.pbtxt"));
}

TEST_F(LoadModelConfigTest, AcceptsTrailingSlashInDirectory) {
  dir_.WriteFile("m/config.pbtxt", "name: \"m\"\n" + MinimalConfig());
  auto config = LoadModelConfig(dir_.Path("m") + "/");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "m");
}

TEST_F(LoadModelConfigTest, RequiresPlatform) {
  ExpectInvalid("max_batch_size: 1\n", "platform is required");
  ExpectInvalid("backend: \"pytorch\"\n", "backend \"pytorch\" is not supported; set platform");
}

TEST_F(LoadModelConfigTest, RejectsNegativeMaxBatchSize) {
  ExpectInvalid("platform: \"groupnorm\"\nmax_batch_size: -1\n", "max_batch_size is -1");
}

TEST_F(LoadModelConfigTest, RejectsTwoInputs) {
  ExpectInvalid(MinimalConfig() + "input { name: \"extra\" data_type: TYPE_FP32 dims: [ 1 ] }\n",
                "the model has 2 inputs and 1 outputs; exactly one of each is required");
}

TEST_F(LoadModelConfigTest, RejectsFp16Input) {
  ExpectInvalid(MinimalConfig("input { name: \"input\" data_type: TYPE_FP16 dims: [ 4 ] }"),
                "input \"input\" has data_type TYPE_FP16; only TYPE_FP32 is supported");
}

TEST_F(LoadModelConfigTest, RejectsZeroDim) {
  ExpectInvalid(MinimalConfig("input { name: \"input\" data_type: TYPE_FP32 dims: [ 4, 0 ] }"),
                "input \"input\" has dims [4, 0]; each dim must be > 0 or -1");
}

TEST_F(LoadModelConfigTest, RejectsMalformedTensors) {
  ExpectInvalid(MinimalConfig("input { data_type: TYPE_FP32 dims: [ 4 ] }"), "input has no name");
  ExpectInvalid(MinimalConfig("input { name: \"input\" data_type: TYPE_FP32 }"),
                "input \"input\" has no dims");
  ExpectInvalid(MinimalConfig("input { name: \"input\" data_type: TYPE_FP32 dims: [ -2 ] }"),
                "has dims [-2]");
  ExpectInvalid(MinimalConfig("input { name: \"input\" data_type: TYPE_FP32 dims: [ 4 ] "
                              "reshape { shape: [ 2, 2 ] } }"),
                "input \"input\" has a reshape");
  ExpectInvalid(MinimalConfig("input { name: \"input\" data_type: TYPE_FP32 dims: [ 4 ] "
                              "is_shape_tensor: true }"),
                "input \"input\" is a shape tensor");
}

TEST_F(LoadModelConfigTest, RejectsBadInstanceGroups) {
  ExpectInvalid(MinimalConfig() + "instance_group { count: -1 }\n",
                "instance_group 0 has count -1");
  ExpectInvalid(MinimalConfig() + "instance_group { kind: KIND_MODEL }\n",
                "instance_group 0 has kind KIND_MODEL, which is not supported");
  ExpectInvalid(MinimalConfig() + "instance_group { kind: KIND_GPU gpus: [ -1 ] }\n",
                "lists GPU -1");
}

TEST_F(LoadModelConfigTest, RejectsEmptyOrNonPositiveSpecificVersions) {
  ExpectInvalid(MinimalConfig() + "version_policy { specific { } }\n",
                "version_policy specific lists no versions");
  ExpectInvalid(MinimalConfig() + "version_policy { specific { versions: [ 0 ] } }\n",
                "version_policy specific lists version 0");
}

TEST_F(LoadModelConfigTest, ChecksPreferredBatchSizes) {
  ExpectInvalid(MinimalConfig() + "dynamic_batching { preferred_batch_size: [ 4, 16 ] }\n",
                "preferred_batch_size 16 is outside [1, 8]");
  ExpectInvalid(MinimalConfig() + "dynamic_batching { preferred_batch_size: [ 0 ] }\n",
                "preferred_batch_size 0 is outside [1, 8]");
  EXPECT_TRUE(Load(MinimalConfig() + "dynamic_batching { preferred_batch_size: [ 2, 8 ] }\n").ok());
}

TEST_F(LoadModelConfigTest, AllowsDynamicBatchingWithoutBatchDimension) {
  auto config = Load(
      "platform: \"groupnorm\"\nmax_batch_size: 0\n"
      "input { name: \"input\" data_type: TYPE_FP32 dims: [ 2, 4, -1 ] }\n"
      "output { name: \"output\" data_type: TYPE_FP32 dims: [ 2, 4, -1 ] }\n"
      "dynamic_batching { max_queue_delay_microseconds: 100 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->has_dynamic_batching());
  EXPECT_EQ(config->max_batch_size(), 0);
}

TEST_F(LoadModelConfigTest, RejectsWeightsFilenameOutsideVersionDirectory) {
  ExpectInvalid(MinimalConfig() + "default_model_filename: \"../other.safetensors\"\n",
                "default_model_filename \"../other.safetensors\" must be a file name");
  EXPECT_TRUE(Load(MinimalConfig() + "default_model_filename: \"w.safetensors\"\n").ok());
}

TEST(LoadModelConfigFromTextTest, AppliesTheFileRulesWithoutReadingTheDirectory) {
  // The directory does not exist: only its name is used.
  auto config = LoadModelConfigFromText(MinimalConfig(), "/nonexistent/models/m");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "m");
  EXPECT_EQ(config->instance_group_size(), 1);

  const absl::Status status =
      LoadModelConfigFromText("platform: \"groupnorm\"\nmax_batch_size: -1\n",
                              "/nonexistent/models/m")
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr("/nonexistent/models/m/config.pbtxt"),
                                                   HasSubstr("max_batch_size is -1")));
}

}  // namespace
}  // namespace fuseserve
