#include "server/models/model_factory.h"

#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/repository/safetensors_writer.h"
#include "tests/server/models/model_test_util.h"

namespace fuseserve {
namespace {

using testing::IsInvalidArgumentWith;
using testing::UniformTensor;

TEST(ModelFactoryTest, KnowsTheThreeFamilies) {
  EXPECT_EQ(KnownModelFamilies(),
            (std::vector<std::string>{"convtranspose_gelu_groupnorm",
                                      "gemm_bias_hardtanh_mish_groupnorm", "groupnorm"}));
}

TEST(ModelFactoryTest, UnknownPlatformListsTheKnownOnes) {
  testing::ModelSpec spec;
  spec.platform = "pytorch_libtorch";
  spec.input_dims = {1};
  spec.output_dims = {1};
  EXPECT_TRUE(IsInvalidArgumentWith(
      spec.Create().status(),
      "unknown platform \"pytorch_libtorch\" (known: convtranspose_gelu_groupnorm, "
      "gemm_bias_hardtanh_mish_groupnorm, groupnorm)"));
  spec.platform = "";
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "config has no platform (known: convtranspose"));
}

// A Triton-style config.pbtxt, parsed by protobuf's TextFormat as the
// repository does, dispatches to its family.
TEST(ModelFactoryTest, CreatesEachFamilyFromTritonStyleConfig) {
  const struct {
    std::string text;
    std::vector<NamedF32Tensor> tensors;
  } cases[] = {
      {R"pb(
         name: "a"
         platform: "convtranspose_gelu_groupnorm"
         max_batch_size: 8 input
         [ {
           name: "input",
           data_type: TYPE_FP32,
           dims: [ 2, -1, -1 ]
         }] output
         [ {
           name: "output",
           data_type: TYPE_FP32,
           dims: [ 4, -1, -1 ]
         }]
         parameters {
           key: "in_channels"
           value: { string_value: "2" }
         }
         parameters {
           key: "out_channels"
           value: { string_value: "4" }
         }
         parameters {
           key: "kernel_size"
           value: { string_value: "3" }
         }
         parameters {
           key: "num_groups"
           value: { string_value: "2" }
         }
       )pb",
       {UniformTensor("conv_transpose.weight", {2, 4, 3, 3}, 1, -1, 1),
        UniformTensor("conv_transpose.bias", {4}, 2, -1, 1),
        UniformTensor("group_norm.weight", {4}, 3, -1, 1),
        UniformTensor("group_norm.bias", {4}, 4, -1, 1)}},
      {R"pb(
         name: "b"
         platform: "gemm_bias_hardtanh_mish_groupnorm"
         max_batch_size: 16 input
         [ {
           name: "input",
           data_type: TYPE_FP32,
           dims: [ 8 ]
         }] output
         [ {
           name: "output",
           data_type: TYPE_FP32,
           dims: [ 4 ]
         }]
         parameters {
           key: "in_features"
           value: { string_value: "8" }
         }
         parameters {
           key: "out_features"
           value: { string_value: "4" }
         }
         parameters {
           key: "num_groups"
           value: { string_value: "2" }
         }
       )pb",
       {UniformTensor("gemm.weight", {4, 8}, 1, -1, 1), UniformTensor("gemm.bias", {4}, 2, -1, 1),
        UniformTensor("bias", {4}, 3, -1, 1), UniformTensor("groupnorm.weight", {4}, 4, -1, 1),
        UniformTensor("groupnorm.bias", {4}, 5, -1, 1)}},
      {R"pb(
         name: "c"
         platform: "groupnorm"
         max_batch_size: 0 input
         [ {
           name: "x",
           data_type: TYPE_FP32,
           dims: [ -1, 4, -1 ]
         }] output
         [ {
           name: "y",
           data_type: TYPE_FP32,
           dims: [ -1, 4, -1 ]
         }]
         parameters {
           key: "num_channels"
           value: { string_value: "4" }
         }
         parameters {
           key: "num_groups"
           value: { string_value: "2" }
         }
       )pb",
       {UniformTensor("gn.weight", {4}, 1, -1, 1), UniformTensor("gn.bias", {4}, 2, -1, 1)}},
  };
  for (const auto& c : cases) {
    inference::ModelConfig config;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.text, &config)) << c.text;
    auto weights = SafetensorsFile::FromBytes(SerializeSafetensors(c.tensors), "w.safetensors");
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto model = CreateModel(config, **weights);
    ASSERT_TRUE(model.ok()) << config.name() << ": " << model.status();
    EXPECT_EQ((*model)->family(), config.platform());
  }
}

TEST(ModelFactoryTest, RejectsConfigWithoutExactlyOneFp32InputAndOutput) {
  testing::ModelSpec spec;
  spec.platform = "groupnorm";
  spec.max_batch_size = 2;
  spec.input_dims = {4};
  spec.output_dims = {4};
  spec.parameters = {{"num_channels", "4"}, {"num_groups", "2"}};
  spec.tensors = {UniformTensor("gn.weight", {4}, 1, -1, 1),
                  UniformTensor("gn.bias", {4}, 2, -1, 1)};
  auto weights = spec.Weights();
  ASSERT_NE(weights, nullptr);
  ASSERT_TRUE(CreateModel(spec.Config(), *weights).ok());

  inference::ModelConfig two_inputs = spec.Config();
  *two_inputs.add_input() = two_inputs.input(0);
  EXPECT_TRUE(IsInvalidArgumentWith(CreateModel(two_inputs, *weights).status(),
                                    "has one input and one output, config has 2 input(s)"));
  inference::ModelConfig no_output = spec.Config();
  no_output.clear_output();
  EXPECT_TRUE(IsInvalidArgumentWith(CreateModel(no_output, *weights).status(),
                                    "config has 1 input(s) and 0 output(s)"));
  inference::ModelConfig fp16 = spec.Config();
  fp16.mutable_input(0)->set_data_type(inference::TYPE_FP16);
  EXPECT_TRUE(IsInvalidArgumentWith(CreateModel(fp16, *weights).status(),
                                    "input \"input\" has data_type TYPE_FP16, expected TYPE_FP32"));
  inference::ModelConfig fp64 = spec.Config();
  fp64.mutable_output(0)->set_data_type(inference::TYPE_FP64);
  EXPECT_TRUE(IsInvalidArgumentWith(CreateModel(fp64, *weights).status(),
                                    "output \"output\" has data_type TYPE_FP64"));
}

}  // namespace
}  // namespace fuseserve
