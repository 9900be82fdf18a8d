#include "server/models/groupnorm.h"

#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"
#include "tests/server/models/model_test_util.h"

namespace fuseserve {
namespace {

using testing::ExpectParameterErrors;
using testing::IsInvalidArgumentWith;
using testing::ModelSpec;
using testing::ParameterCase;
using testing::UniformTensor;

// num_channels 6, num_groups 3, input [N, 6, H, W].
ModelSpec ValidSpec() {
  ModelSpec spec;
  spec.platform = "groupnorm";
  spec.max_batch_size = 4;
  spec.input_dims = {6, -1, -1};
  spec.output_dims = {6, -1, -1};
  spec.parameters = {{"num_channels", "6"}, {"num_groups", "3"}};
  spec.tensors = {UniformTensor("gn.weight", {6}, 1, 0.5f, 1.5f),
                  UniformTensor("gn.bias", {6}, 2, -0.5f, 0.5f)};
  return spec;
}

TEST(GroupNormModelTest, LoadsAndReportsFp32) {
  auto model = ValidSpec().Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->family(), "groupnorm");
  EXPECT_EQ((*model)->precision(), Precision::kFp32);
}

TEST(GroupNormModelTest, AcceptsPrecisionParameterButAlwaysComputesFp32) {
  // The server writes the precision back into the served config, so a
  // config read back from the ModelConfig RPC must load again.
  ModelSpec spec = ValidSpec();
  spec.parameters["precision"] = "tf32";
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->precision(), Precision::kFp32);
  spec.parameters["precision"] = "int8";
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "parameter \"precision\" must be \"fp32\" or \"tf32\""));
}

TEST(GroupNormModelTest, RejectsEveryInvalidHyperParameter) {
  const std::vector<ParameterCase> cases = {
      {"num_channels", "", "missing required parameter \"num_channels\""},
      {"num_groups", "", "missing required parameter \"num_groups\""},
      {"num_channels", "0", "parameter \"num_channels\" must be a positive integer, got \"0\""},
      {"num_groups", "0", "parameter \"num_groups\" must be a positive integer, got \"0\""},
      {"num_groups", "4",
       "parameter \"num_groups\" (4) must divide parameter \"num_channels\" (6)"},
      {"eps", "-1", "parameter \"eps\" must be a finite number > 0, got \"-1\""},
      {"eps", "nan", "parameter \"eps\" must be a finite number > 0, got \"nan\""},
      {"affine", "false", "unknown parameter \"affine\""},
  };
  ExpectParameterErrors(ValidSpec(), cases);
}

TEST(GroupNormModelTest, RejectsConfigDimsThatContradictTheParameters) {
  struct Case {
    int max_batch_size;
    Shape input_dims;
    Shape output_dims;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {4, {8, -1, -1}, {8, -1, -1}, "dimension 0 (channels) is 8, expected 6 (num_channels)"},
      {4, {}, {}, "expected at least 1 dims (channels, ...) after the batch dimension"},
      {0, {6}, {6}, "expected at least 2 dims (batch, channels, ...), batch dimension included"},
      {4, {6, -1, -1}, {6, -1}, "output \"output\" dims [6, -1] do not match"},
      {4, {6, 8, -1}, {6, -1, -1}, "which give [6, 8, -1]"},
  };
  for (const Case& c : cases) {
    ModelSpec spec = ValidSpec();
    spec.max_batch_size = c.max_batch_size;
    spec.input_dims = c.input_dims;
    spec.output_dims = c.output_dims;
    EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(), c.message_part))
        << ShapeToString(c.input_dims) << " -> " << ShapeToString(c.output_dims);
  }
}

TEST(GroupNormModelTest, RejectsMissingOrMisshapenOrUnexpectedTensors) {
  for (const std::string name : {"gn.weight", "gn.bias"}) {
    ModelSpec spec = ValidSpec();
    spec.RemoveTensor(name);
    EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(), "tensor \"" + name + "\""));
  }
  ModelSpec spec = ValidSpec();
  *spec.FindTensor("gn.weight") = UniformTensor("gn.weight", {3}, 1, 0.0f, 1.0f);
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "tensor \"gn.weight\" in test.safetensors has shape [3], "
                                    "expected [6] ([num_channels])"));
  spec = ValidSpec();
  spec.tensors.push_back(UniformTensor("gn.running_mean", {6}, 3, 0.0f, 1.0f));
  EXPECT_TRUE(
      IsInvalidArgumentWith(spec.Create().status(), "unexpected tensor \"gn.running_mean\""));
}

TEST(GroupNormModelTest, OutputShapeEqualsInputShapeForEveryRank) {
  for (const Shape& dims : {Shape{6}, Shape{6, -1}, Shape{6, -1, -1}, Shape{6, -1, -1, -1}}) {
    ModelSpec spec = ValidSpec();
    spec.input_dims = dims;
    spec.output_dims = dims;
    auto model = spec.Create();
    ASSERT_TRUE(model.ok()) << model.status();
    Shape input = {2};
    for (size_t i = 0; i < dims.size(); ++i) input.push_back(dims[i] == -1 ? 3 + i : dims[i]);
    EXPECT_EQ(*(*model)->OutputShape(input), input);
  }
}

TEST(GroupNormModelTest, OutputShapeValidatesBatchingAndNonBatchingInputs) {
  auto batching = ValidSpec().Create();
  ASSERT_TRUE(batching.ok());
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({2, 4, 4, 4}).status(),
                                    "input dimension 1 (channels) is 4, model expects 6"));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({2, 6, 4}).status(),
                                    "has rank 3, model expects rank 4"));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({2, 6, 4, 0}).status(),
                                    "input dimension 3 (spatial) is 0, must be positive"));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({5, 6, 4, 4}).status(),
                                    "input batch size 5 exceeds max_batch_size 4"));

  ModelSpec spec = ValidSpec();
  spec.max_batch_size = 0;
  spec.input_dims = {-1, 6, 16};
  spec.output_dims = {-1, 6, 16};
  auto non_batching = spec.Create();
  ASSERT_TRUE(non_batching.ok()) << non_batching.status();
  EXPECT_EQ(*(*non_batching)->OutputShape({100, 6, 16}), (Shape{100, 6, 16}));
  EXPECT_TRUE(IsInvalidArgumentWith((*non_batching)->OutputShape({1, 6, 15}).status(),
                                    "input dimension 2 (spatial) is 15, model expects 16"));
}

// SPEC.md §1.4 fp32 tolerance (rel L2 <= 5e-6, max abs <= 1e-4) against the
// float64 reference, on U[0,1) and N(0,1) inputs, ranks 3 to 5.
TEST(GroupNormModelTest, RunOnCpuMatchesFloat64Reference) {
  for (const Shape& shape : {Shape{3, 6, 10}, Shape{2, 6, 5, 7}, Shape{1, 6, 2, 3, 4}}) {
    ModelSpec spec = ValidSpec();
    spec.input_dims = Shape(shape.size() - 1, -1);
    spec.input_dims[0] = 6;
    spec.output_dims = spec.input_dims;
    auto model = spec.Create();
    ASSERT_TRUE(model.ok()) << model.status();
    ThreadPool pool(2);
    const int64_t count = NumElements(shape);
    for (const auto& input :
         {reference::RandomUniform(count, 31), reference::RandomNormal(count, 32)}) {
      std::vector<float> output(count, -7.0f);
      ASSERT_TRUE((*model)->RunOnCpu(input.data(), shape, output.data(), pool).ok());
      const auto expected = reference::GroupNorm(
          reference::GroupNormShape{shape[0], 6, count / (shape[0] * 6), 3, 1e-5}, input.data(),
          spec.FindTensor("gn.weight")->data.data(), spec.FindTensor("gn.bias")->data.data());
      const reference::ErrorStats stats = reference::CompareToReference(output, expected);
      EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << ShapeToString(shape) << stats;
    }
  }
}

TEST(GroupNormModelTest, UsesConfiguredEps) {
  // Group {0, 2}: mean 1, variance 1; eps 3 gives rstd 1/2.
  ModelSpec spec = ValidSpec();
  spec.parameters = {{"num_channels", "2"}, {"num_groups", "1"}, {"eps", "3"}};
  spec.input_dims = {2};
  spec.output_dims = {2};
  spec.tensors = {{"gn.weight", {2}, {1.0f, 1.0f}}, {"gn.bias", {2}, {0.0f, 0.0f}}};
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<float> input = {0.0f, 2.0f};
  std::vector<float> output(2);
  ThreadPool pool(1);
  ASSERT_TRUE((*model)->RunOnCpu(input.data(), {1, 2}, output.data(), pool).ok());
  EXPECT_FLOAT_EQ(output[0], -0.5f);
  EXPECT_FLOAT_EQ(output[1], 0.5f);
}

}  // namespace
}  // namespace fuseserve
