#include "server/models/convtranspose_gelu_groupnorm.h"

#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/families.h"
#include "kernels/reference/test_data.h"
#include "tests/server/models/model_test_util.h"

namespace fuseserve {
namespace {

using testing::ExpectParameterErrors;
using testing::IsInvalidArgumentWith;
using testing::ModelSpec;
using testing::ParameterCase;
using testing::UniformTensor;

// in_channels 4, out_channels 6, kernel_size 3, stride 2, padding 1,
// output_padding 1, num_groups 3: H_out = 2 H, W_out = 2 W.
ModelSpec ValidSpec() {
  ModelSpec spec;
  spec.platform = "convtranspose_gelu_groupnorm";
  spec.max_batch_size = 4;
  spec.input_dims = {4, -1, 5};
  spec.output_dims = {6, -1, 10};
  spec.parameters = {{"in_channels", "4"}, {"out_channels", "6"}, {"kernel_size", "3"},
                     {"stride", "2"},      {"padding", "1"},      {"output_padding", "1"},
                     {"num_groups", "3"}};
  spec.tensors = {UniformTensor("conv_transpose.weight", {4, 6, 3, 3}, 1, -0.2f, 0.2f),
                  UniformTensor("conv_transpose.bias", {6}, 2, -0.2f, 0.2f),
                  UniformTensor("group_norm.weight", {6}, 3, 0.5f, 1.5f),
                  UniformTensor("group_norm.bias", {6}, 4, -0.5f, 0.5f)};
  return spec;
}

TEST(ConvTransposeGeluGroupNormModelTest, LoadsAndDefaultsToTf32Precision) {
  auto model = ValidSpec().Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->family(), "convtranspose_gelu_groupnorm");
  EXPECT_EQ((*model)->precision(), Precision::kTf32);
}

TEST(ConvTransposeGeluGroupNormModelTest, ReportsExplicitFp32Precision) {
  ModelSpec spec = ValidSpec();
  spec.parameters["precision"] = "fp32";
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->precision(), Precision::kFp32);
}

TEST(ConvTransposeGeluGroupNormModelTest, AppliesDefaultsForOptionalParameters) {
  // stride 1, padding 0, output_padding 0: H_out = H + k - 1.
  ModelSpec spec = ValidSpec();
  spec.parameters.erase("stride");
  spec.parameters.erase("padding");
  spec.parameters.erase("output_padding");
  spec.output_dims = {6, -1, 7};
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*(*model)->OutputShape({2, 4, 8, 5}), (Shape{2, 6, 10, 7}));
}

TEST(ConvTransposeGeluGroupNormModelTest, RejectsEveryInvalidHyperParameter) {
  const std::vector<ParameterCase> cases = {
      {"in_channels", "", "missing required parameter \"in_channels\""},
      {"out_channels", "", "missing required parameter \"out_channels\""},
      {"kernel_size", "", "missing required parameter \"kernel_size\""},
      {"num_groups", "", "missing required parameter \"num_groups\""},
      {"in_channels", "0", "parameter \"in_channels\" must be a positive integer, got \"0\""},
      {"out_channels", "-6", "parameter \"out_channels\" must be a positive integer, got \"-6\""},
      {"kernel_size", "0", "parameter \"kernel_size\" must be a positive integer, got \"0\""},
      {"stride", "0", "parameter \"stride\" must be a positive integer, got \"0\""},
      {"stride", "two", "parameter \"stride\" must be a positive integer, got \"two\""},
      {"padding", "-1", "parameter \"padding\" must be a non-negative integer, got \"-1\""},
      {"output_padding", "-1",
       "parameter \"output_padding\" must be a non-negative integer, got \"-1\""},
      {"output_padding", "2",
       "parameter \"output_padding\" (2) must be smaller than parameter \"stride\" (2)"},
      {"num_groups", "0", "parameter \"num_groups\" must be a positive integer, got \"0\""},
      {"num_groups", "4",
       "parameter \"num_groups\" (4) must divide parameter \"out_channels\" (6)"},
      {"eps", "0", "parameter \"eps\" must be a finite number > 0, got \"0\""},
      {"eps", "-1e-5", "parameter \"eps\" must be a finite number > 0, got \"-1e-5\""},
      {"precision", "fp16", "parameter \"precision\" must be \"fp32\" or \"tf32\", got \"fp16\""},
      {"strides", "2", "unknown parameter \"strides\""},
  };
  ExpectParameterErrors(ValidSpec(), cases);
}

TEST(ConvTransposeGeluGroupNormModelTest, OutputPaddingMustBeZeroWithStrideOne) {
  ModelSpec spec = ValidSpec();
  spec.parameters["stride"] = "1";
  spec.parameters["output_padding"] = "1";
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "\"output_padding\" (1) must be smaller than parameter "
                                    "\"stride\" (1)"));
}

struct DimsCase {
  int max_batch_size;
  Shape input_dims;
  Shape output_dims;
  std::string message_part;
};

TEST(ConvTransposeGeluGroupNormModelTest, RejectsConfigDimsThatContradictTheParameters) {
  const std::vector<DimsCase> cases = {
      {4, {3, -1, 5}, {6, -1, 10}, "dimension 0 (channels) is 3, expected 4 (in_channels)"},
      {4, {-1, -1, 5}, {6, -1, 10}, "dimension 0 (channels) is -1 (variable), expected 4"},
      {4, {4, 5}, {6, 10}, "expected 3 dims (channels, height, width) after the batch"},
      {0,
       {4, 8, 5},
       {6, 16, 10},
       "expected 4 dims (batch, channels, height, width), batch "
       "dimension included (max_batch_size is 0)"},
      {4, {4, -1, 5}, {5, -1, 10}, "output \"output\" dims [5, -1, 10] do not match"},
      {4, {4, -1, 5}, {6, -1, 11}, "which give [6, -1, 10]"},
      {4, {4, -1, 5}, {6, 8, 10}, "which give [6, -1, 10]"},
      {4, {4, 8, 5}, {6, -1, 10}, "which give [6, 16, 10]"},
      {4, {4, -1, 5}, {6, -1}, "which give [6, -1, 10]"},
      {0, {2, 4, -1, 5}, {3, 6, -1, 10}, "which give [2, 6, -1, 10]"},
      {-1, {4, -1, 5}, {6, -1, 10}, "max_batch_size must be >= 0, got -1"},
      {4, {4, 0, 5}, {6, -1, 10}, "dimension 1 is 0, must be -1 (variable) or positive"},
  };
  for (const DimsCase& c : cases) {
    ModelSpec spec = ValidSpec();
    spec.max_batch_size = c.max_batch_size;
    spec.input_dims = c.input_dims;
    spec.output_dims = c.output_dims;
    EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(), c.message_part))
        << ShapeToString(c.input_dims) << " -> " << ShapeToString(c.output_dims);
  }
}

TEST(ConvTransposeGeluGroupNormModelTest, RejectsFixedInputSizeWithNonPositiveOutput) {
  // k = 1, stride 1, padding 1: H_out = H - 2, so H = 2 gives 0.
  ModelSpec spec = ValidSpec();
  spec.parameters = {{"in_channels", "4"},
                     {"out_channels", "6"},
                     {"kernel_size", "1"},
                     {"padding", "1"},
                     {"num_groups", "3"}};
  spec.tensors[0] = UniformTensor("conv_transpose.weight", {4, 6, 1, 1}, 1, -1.0f, 1.0f);
  spec.input_dims = {4, 2, -1};
  spec.output_dims = {6, 1, -1};
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "input height 2 gives output height 0 (kernel_size 1, "
                                    "stride 1, padding 1, output_padding 0)"));
}

TEST(ConvTransposeGeluGroupNormModelTest, AcceptsNonBatchingConfigWithBatchDimension) {
  ModelSpec spec = ValidSpec();
  spec.max_batch_size = 0;
  spec.input_dims = {-1, 4, 3, -1};
  spec.output_dims = {-1, 6, 6, -1};
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*(*model)->OutputShape({7, 4, 3, 2}), (Shape{7, 6, 6, 4}));
  EXPECT_TRUE(IsInvalidArgumentWith((*model)->OutputShape({7, 4, 4, 2}).status(),
                                    "input dimension 2 (height) is 4, model expects 3"));
}

TEST(ConvTransposeGeluGroupNormModelTest, RejectsMissingTensorNamingIt) {
  for (const std::string name :
       {"conv_transpose.weight", "conv_transpose.bias", "group_norm.weight", "group_norm.bias"}) {
    ModelSpec spec = ValidSpec();
    spec.RemoveTensor(name);
    EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(), "tensor \"" + name + "\"")) << name;
  }
}

TEST(ConvTransposeGeluGroupNormModelTest, RejectsWrongTensorShapeNamingTensorAndShapes) {
  ModelSpec spec = ValidSpec();
  *spec.FindTensor("conv_transpose.weight") =
      UniformTensor("conv_transpose.weight", {6, 4, 3, 3}, 1, -1.0f, 1.0f);
  EXPECT_TRUE(IsInvalidArgumentWith(
      spec.Create().status(),
      "tensor \"conv_transpose.weight\" in test.safetensors has shape [6, 4, 3, 3], expected "
      "[4, 6, 3, 3]"));

  spec = ValidSpec();
  *spec.FindTensor("group_norm.bias") = UniformTensor("group_norm.bias", {3}, 1, 0.0f, 1.0f);
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "tensor \"group_norm.bias\" in test.safetensors has shape "
                                    "[3], expected [6]"));
}

TEST(ConvTransposeGeluGroupNormModelTest, RejectsUnexpectedTensor) {
  ModelSpec spec = ValidSpec();
  spec.tensors.push_back(UniformTensor("conv_transpose.extra", {1}, 5, 0.0f, 1.0f));
  EXPECT_TRUE(
      IsInvalidArgumentWith(spec.Create().status(), "unexpected tensor \"conv_transpose.extra\""));
}

TEST(ConvTransposeGeluGroupNormModelTest, OutputShapeValidatesBatchedInputShapes) {
  auto model = ValidSpec().Create();
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  EXPECT_EQ(*m.OutputShape({1, 4, 1, 5}), (Shape{1, 6, 2, 10}));
  EXPECT_EQ(*m.OutputShape({4, 4, 9, 5}), (Shape{4, 6, 18, 10}));
  EXPECT_TRUE(IsInvalidArgumentWith(m.OutputShape({4, 9, 5}).status(),
                                    "input shape [4, 9, 5] has rank 3, model expects rank 4 "
                                    "(batch, channels, height, width)"));
  EXPECT_TRUE(IsInvalidArgumentWith(m.OutputShape({2, 8, 9, 5}).status(),
                                    "input dimension 1 (channels) is 8, model expects 4"));
  EXPECT_TRUE(IsInvalidArgumentWith(m.OutputShape({2, 4, 9, 6}).status(),
                                    "input dimension 3 (width) is 6, model expects 5"));
  EXPECT_TRUE(IsInvalidArgumentWith(m.OutputShape({0, 4, 9, 5}).status(),
                                    "input dimension 0 (batch) is 0, must be positive"));
  EXPECT_TRUE(IsInvalidArgumentWith(m.OutputShape({2, 4, 0, 5}).status(),
                                    "input dimension 2 (height) is 0, must be positive"));
  EXPECT_TRUE(IsInvalidArgumentWith(m.OutputShape({5, 4, 9, 5}).status(),
                                    "input batch size 5 exceeds max_batch_size 4"));
}

TEST(ConvTransposeGeluGroupNormModelTest, OutputShapeRejectsVariableSizeWithNoOutput) {
  // padding 2, k = 3, stride 1: H_out = H - 2.
  ModelSpec spec = ValidSpec();
  spec.parameters = {{"in_channels", "4"},
                     {"out_channels", "6"},
                     {"kernel_size", "3"},
                     {"padding", "2"},
                     {"num_groups", "3"}};
  spec.input_dims = {4, -1, -1};
  spec.output_dims = {6, -1, -1};
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*(*model)->OutputShape({1, 4, 3, 4}), (Shape{1, 6, 1, 2}));
  EXPECT_TRUE(IsInvalidArgumentWith((*model)->OutputShape({1, 4, 2, 4}).status(),
                                    "input height 2 gives output height 0"));
  EXPECT_TRUE(IsInvalidArgumentWith((*model)->OutputShape({1, 4, 3, 1}).status(),
                                    "input width 1 gives output width -1"));
}

// SPEC.md §1.4: the CPU backend computes float32 for both precisions, so it
// meets the fp32 tolerance (rel L2 <= 5e-6, max abs <= 1e-4) against the
// float64 reference, on U[0,1) and N(0,1) inputs.
TEST(ConvTransposeGeluGroupNormModelTest, RunOnCpuMatchesFloat64Reference) {
  ModelSpec spec = ValidSpec();
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& w = spec.FindTensor("conv_transpose.weight")->data;
  const auto& b = spec.FindTensor("conv_transpose.bias")->data;
  const auto& gw = spec.FindTensor("group_norm.weight")->data;
  const auto& gb = spec.FindTensor("group_norm.bias")->data;
  ThreadPool pool(2);
  for (const auto& input :
       {reference::RandomUniform(3 * 4 * 7 * 5, 11), reference::RandomNormal(3 * 4 * 7 * 5, 12)}) {
    const Shape shape = {3, 4, 7, 5};
    auto output_shape = (*model)->OutputShape(shape);
    ASSERT_TRUE(output_shape.ok()) << output_shape.status();
    std::vector<float> output(NumElements(*output_shape), -7.0f);
    ASSERT_TRUE((*model)->RunOnCpu(input.data(), shape, output.data(), pool).ok());
    const auto expected = reference::ConvTransposeGeluGroupNorm(
        reference::ConvTransposeGeluGroupNormShape{{3, 4, 6, 7, 5, 3, 2, 1, 1}, 3, 1e-5},
        input.data(), w.data(), b.data(), gw.data(), gb.data());
    const reference::ErrorStats stats = reference::CompareToReference(output, expected);
    EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << stats;
  }
}

TEST(ConvTransposeGeluGroupNormModelTest, RunOnCpuRejectsInvalidInputShape) {
  auto model = ValidSpec().Create();
  ASSERT_TRUE(model.ok());
  std::vector<float> data(1000);
  ThreadPool pool(1);
  EXPECT_TRUE(
      IsInvalidArgumentWith((*model)->RunOnCpu(data.data(), {1, 3, 2, 5}, data.data(), pool),
                            "input dimension 1 (channels) is 3, model expects 4"));
}

}  // namespace
}  // namespace fuseserve
