#include "server/models/gemm_bias_hardtanh_mish_groupnorm.h"

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

// in_features 24, out_features 16, num_groups 4, Hardtanh(-0.5, 0.75).
ModelSpec ValidSpec() {
  ModelSpec spec;
  spec.platform = "gemm_bias_hardtanh_mish_groupnorm";
  spec.max_batch_size = 8;
  spec.input_dims = {24};
  spec.output_dims = {16};
  spec.parameters = {{"in_features", "24"},
                     {"out_features", "16"},
                     {"num_groups", "4"},
                     {"hardtanh_min", "-0.5"},
                     {"hardtanh_max", "0.75"}};
  spec.tensors = {UniformTensor("gemm.weight", {16, 24}, 1, -0.3f, 0.3f),
                  UniformTensor("gemm.bias", {16}, 2, -0.2f, 0.2f),
                  UniformTensor("bias", {16}, 3, -0.5f, 0.5f),
                  UniformTensor("groupnorm.weight", {16}, 4, 0.5f, 1.5f),
                  UniformTensor("groupnorm.bias", {16}, 5, -0.5f, 0.5f)};
  return spec;
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, LoadsAndDefaultsToFp32Precision) {
  auto model = ValidSpec().Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->family(), "gemm_bias_hardtanh_mish_groupnorm");
  EXPECT_EQ((*model)->precision(), Precision::kFp32);
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, ReportsExplicitTf32Precision) {
  ModelSpec spec = ValidSpec();
  spec.parameters["precision"] = "tf32";
  auto model = spec.Create();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->precision(), Precision::kTf32);
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, RejectsEveryInvalidHyperParameter) {
  const std::vector<ParameterCase> cases = {
      {"in_features", "", "missing required parameter \"in_features\""},
      {"out_features", "", "missing required parameter \"out_features\""},
      {"num_groups", "", "missing required parameter \"num_groups\""},
      {"in_features", "0", "parameter \"in_features\" must be a positive integer, got \"0\""},
      {"out_features", "1.5", "parameter \"out_features\" must be a positive integer, got \"1.5\""},
      {"num_groups", "-4", "parameter \"num_groups\" must be a positive integer, got \"-4\""},
      {"num_groups", "5",
       "parameter \"num_groups\" (5) must divide parameter \"out_features\" (16)"},
      {"hardtanh_min", "low", "parameter \"hardtanh_min\" must be a finite number, got \"low\""},
      {"hardtanh_max", "inf", "parameter \"hardtanh_max\" must be a finite number, got \"inf\""},
      {"hardtanh_min", "1",
       "parameter \"hardtanh_min\" (1) must not exceed parameter \"hardtanh_max\" (0.75)"},
      {"eps", "0", "parameter \"eps\" must be a finite number > 0, got \"0\""},
      {"precision", "bf16", "parameter \"precision\" must be \"fp32\" or \"tf32\", got \"bf16\""},
      {"kernel_size", "3", "unknown parameter \"kernel_size\""},
  };
  ExpectParameterErrors(ValidSpec(), cases);
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, AcceptsEqualHardtanhBoundsAndDefaults) {
  ModelSpec spec = ValidSpec();
  spec.parameters["hardtanh_min"] = "0.25";
  spec.parameters["hardtanh_max"] = "0.25";
  EXPECT_TRUE(spec.Create().ok());
  spec.parameters.erase("hardtanh_min");
  spec.parameters.erase("hardtanh_max");
  EXPECT_TRUE(spec.Create().ok());
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, RejectsConfigDimsThatContradictTheParameters) {
  struct Case {
    int max_batch_size;
    Shape input_dims;
    Shape output_dims;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {8, {25}, {16}, "dimension 0 (features) is 25, expected 24 (in_features)"},
      {8, {-1}, {16}, "dimension 0 (features) is -1 (variable), expected 24 (in_features)"},
      {8,
       {24},
       {15},
       "output \"output\" dims [15] do not match the input dims and parameters, "
       "which give [16]"},
      {8, {24}, {-1}, "which give [16]"},
      {8, {2, 24}, {2, 16}, "expected 1 dims (features) after the batch dimension"},
      {0, {24}, {16}, "expected 2 dims (batch, features), batch dimension included"},
      {0, {-1, 24}, {3, 16}, "which give [-1, 16]"},
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

TEST(GemmBiasHardtanhMishGroupNormModelTest, RejectsMissingTensorNamingIt) {
  for (const std::string name :
       {"gemm.weight", "gemm.bias", "bias", "groupnorm.weight", "groupnorm.bias"}) {
    ModelSpec spec = ValidSpec();
    spec.RemoveTensor(name);
    EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(), "tensor \"" + name + "\"")) << name;
  }
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, RejectsWrongTensorShapeNamingTensorAndShapes) {
  ModelSpec spec = ValidSpec();
  *spec.FindTensor("gemm.weight") = UniformTensor("gemm.weight", {24, 16}, 1, -1.0f, 1.0f);
  EXPECT_TRUE(IsInvalidArgumentWith(
      spec.Create().status(),
      "tensor \"gemm.weight\" in test.safetensors has shape [24, 16], expected [16, 24] "
      "([out_features, in_features])"));
  spec = ValidSpec();
  *spec.FindTensor("bias") = UniformTensor("bias", {1, 16}, 1, -1.0f, 1.0f);
  EXPECT_TRUE(IsInvalidArgumentWith(spec.Create().status(),
                                    "tensor \"bias\" in test.safetensors has shape [1, 16], "
                                    "expected [16]"));
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, RejectsUnexpectedTensor) {
  ModelSpec spec = ValidSpec();
  spec.tensors.push_back(UniformTensor("gemm.weight_scale", {1}, 5, 0.0f, 1.0f));
  EXPECT_TRUE(
      IsInvalidArgumentWith(spec.Create().status(), "unexpected tensor \"gemm.weight_scale\""));
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, OutputShapeFollowsBatchingRules) {
  auto batching = ValidSpec().Create();
  ASSERT_TRUE(batching.ok()) << batching.status();
  EXPECT_EQ(*(*batching)->OutputShape({1, 24}), (Shape{1, 16}));
  EXPECT_EQ(*(*batching)->OutputShape({8, 24}), (Shape{8, 16}));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({24}).status(),
                                    "has rank 1, model expects rank 2 (batch, features)"));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({2, 23}).status(),
                                    "input dimension 1 (features) is 23, model expects 24"));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({9, 24}).status(),
                                    "input batch size 9 exceeds max_batch_size 8"));
  EXPECT_TRUE(IsInvalidArgumentWith((*batching)->OutputShape({0, 24}).status(),
                                    "input dimension 0 (batch) is 0, must be positive"));

  ModelSpec spec = ValidSpec();
  spec.max_batch_size = 0;
  spec.input_dims = {3, 24};
  spec.output_dims = {3, 16};
  auto fixed = spec.Create();
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(*(*fixed)->OutputShape({3, 24}), (Shape{3, 16}));
  EXPECT_TRUE(IsInvalidArgumentWith((*fixed)->OutputShape({4, 24}).status(),
                                    "input dimension 0 (batch) is 4, model expects 3"));

  spec.input_dims = {-1, 24};
  spec.output_dims = {-1, 16};
  auto variable = spec.Create();
  ASSERT_TRUE(variable.ok()) << variable.status();
  EXPECT_EQ(*(*variable)->OutputShape({100, 24}), (Shape{100, 16}));
}

// SPEC.md §1.4 fp32 tolerance (rel L2 <= 5e-6, max abs <= 1e-4) against the
// float64 reference, on U[0,1) and N(0,1) inputs; both precisions compute
// float32 on the CPU.
TEST(GemmBiasHardtanhMishGroupNormModelTest, RunOnCpuMatchesFloat64Reference) {
  for (const std::string precision : {"fp32", "tf32"}) {
    ModelSpec spec = ValidSpec();
    spec.parameters["precision"] = precision;
    auto model = spec.Create();
    ASSERT_TRUE(model.ok()) << model.status();
    ThreadPool pool(2);
    for (const auto& input :
         {reference::RandomUniform(5 * 24, 21), reference::RandomNormal(5 * 24, 22)}) {
      std::vector<float> output(5 * 16, -7.0f);
      ASSERT_TRUE((*model)->RunOnCpu(input.data(), {5, 24}, output.data(), pool).ok());
      const auto expected = reference::GemmBiasHardtanhMishGroupNorm(
          reference::GemmBiasHardtanhMishGroupNormShape{5, 24, 16, 4, -0.5, 0.75, 1e-5},
          input.data(), spec.FindTensor("gemm.weight")->data.data(),
          spec.FindTensor("gemm.bias")->data.data(), spec.FindTensor("bias")->data.data(),
          spec.FindTensor("groupnorm.weight")->data.data(),
          spec.FindTensor("groupnorm.bias")->data.data());
      const reference::ErrorStats stats = reference::CompareToReference(output, expected);
      EXPECT_TRUE(stats.Within(reference::kFp32Tolerance)) << precision << ": " << stats;
    }
  }
}

TEST(GemmBiasHardtanhMishGroupNormModelTest, RunOnCpuRejectsInvalidInputShape) {
  auto model = ValidSpec().Create();
  ASSERT_TRUE(model.ok());
  std::vector<float> data(1000);
  ThreadPool pool(1);
  EXPECT_TRUE(IsInvalidArgumentWith((*model)->RunOnCpu(data.data(), {2, 16}, data.data(), pool),
                                    "input dimension 1 (features) is 16, model expects 24"));
}

}  // namespace
}  // namespace fuseserve
