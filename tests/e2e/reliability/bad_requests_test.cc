// Malformed requests against the real server (issue 8, item 3): each is
// answered with its status code (SPEC.md §3, Triton's codes, REFERENCE.md
// §1.7) and a message naming the problem; afterwards the server still serves
// and its memory has not grown. NaN and Inf inputs are not malformed: they
// are computed with IEEE/PyTorch semantics.

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/test_server.h"
#include "tests/e2e/reliability/reliability_testing.h"

namespace fuseserve::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kBroken[] = "broken_groupnorm";        // config contradicts its weights
constexpr char kUnbatched[] = "unbatched_groupnorm";  // max_batch_size 0

const Shape kShape = {1, 8, 4, 4};  // a valid groupnorm input: 128 values, 512 bytes

struct BadRequest {
  std::string name;
  inference::ModelInferRequest request;
  grpc::StatusCode code;
  std::string message;  // a substring of the answer's message
};

inference::ModelInferRequest Valid(const std::string& model = kGroupNorm,
                                   const Shape& shape = kShape) {
  return MakeRequest(model, shape, RandomValues(NumElements(shape), 3));
}

// `request` changed by `edit`.
inference::ModelInferRequest Edited(
    inference::ModelInferRequest request,
    const std::function<void(inference::ModelInferRequest&)>& edit) {
  edit(request);
  return request;
}

inference::ModelInferRequest WithParameter(
    const std::string& key, const std::function<void(inference::InferParameter&)>& set) {
  return Edited(Valid(), [&](auto& r) { set((*r.mutable_parameters())[key]); });
}

inference::ModelInferRequest WithRawBytes(int64_t bytes, const Shape& shape = kShape) {
  return Edited(Valid(kGroupNorm, shape),
                [bytes](auto& r) { r.mutable_raw_input_contents(0)->resize(bytes); });
}

// The table: at least one row per way a request can be wrong.
std::vector<BadRequest> BadRequests() {
  using grpc::StatusCode;
  constexpr int64_t kHuge = int64_t{1} << 62;
  // 128 KiB: a leak of it would show in the RSS (and it stays below glibc's
  // mmap threshold, whose adjustments make larger blocks' RSS jump by MiBs).
  const Shape large = {1, 8, 64, 64};
  std::vector<BadRequest> rows = {
      // Model and version.
      {"unknown model", Valid("nope"), StatusCode::NOT_FOUND, "unknown model \"nope\""},
      {"empty model name", Valid(""), StatusCode::NOT_FOUND, "unknown model \"\""},
      {"unknown version", Edited(Valid(), [](auto& r) { r.set_model_version("7"); }),
       StatusCode::NOT_FOUND, "unknown version \"7\" of model \"groupnorm\""},
      {"version not a number", Edited(Valid(), [](auto& r) { r.set_model_version("latest"); }),
       StatusCode::INVALID_ARGUMENT, "version \"latest\" of model \"groupnorm\" is not a version"},
      {"negative version", Edited(Valid(), [](auto& r) { r.set_model_version("-1"); }),
       StatusCode::INVALID_ARGUMENT, "version \"-1\""},
      {"model that failed to load", Valid(kBroken), StatusCode::UNAVAILABLE, "gn.weight"},
      // Input names and count.
      {"wrong input name", Edited(Valid(), [](auto& r) { r.mutable_inputs(0)->set_name("x"); }),
       StatusCode::INVALID_ARGUMENT, "unknown input \"x\" for model \"groupnorm\""},
      {"missing input",
       Edited(Valid(),
              [](auto& r) {
                r.clear_inputs();
                r.clear_raw_input_contents();
              }),
       StatusCode::INVALID_ARGUMENT, "expects 1 input (\"input\"), request has 0"},
      {"extra input",
       Edited(Valid(),
              [](auto& r) {
                *r.add_inputs() = r.inputs(0);
                r.mutable_inputs(1)->set_name("input2");
                r.add_raw_input_contents(r.raw_input_contents(0));
              }),
       StatusCode::INVALID_ARGUMENT, "request has 2"},
      // Datatype.
      {"datatype FP16", Edited(Valid(), [](auto& r) { r.mutable_inputs(0)->set_datatype("FP16"); }),
       StatusCode::INVALID_ARGUMENT, "datatype \"FP16\", model expects \"FP32\""},
      {"datatype missing", Edited(Valid(), [](auto& r) { r.mutable_inputs(0)->clear_datatype(); }),
       StatusCode::INVALID_ARGUMENT, "datatype \"\""},
      // Shape: rank, values, sign, size.
      {"rank too low", Valid(kGroupNorm, {8, 4, 4}), StatusCode::INVALID_ARGUMENT,
       "rank 3, model expects rank 4"},
      {"rank too high", Valid(kGroupNorm, {1, 8, 4, 4, 1}), StatusCode::INVALID_ARGUMENT,
       "rank 5, model expects rank 4"},
      {"wrong channel count", Valid(kGroupNorm, {1, 4, 8, 4}), StatusCode::INVALID_ARGUMENT,
       "dimension 1 is 4, expected 8"},
      {"wrong feature count", Valid(kGemm, {2, 32}), StatusCode::INVALID_ARGUMENT,
       "dimension 1 is 32, expected 64"},
      {"wrong fixed spatial size", Valid(kConv, {1, 8, 8, 8}), StatusCode::INVALID_ARGUMENT,
       "dimension 2 is 8, expected 16"},
      {"batch dimension on a model that does not batch", Valid(kUnbatched, {1, 1, 8, 4, 4}),
       StatusCode::INVALID_ARGUMENT, "rank 5, model expects rank 4"},
      {"negative dimension",
       Edited(Valid(), [](auto& r) { r.mutable_inputs(0)->set_shape(2, -4); }),
       StatusCode::INVALID_ARGUMENT, "dimension 2 must be positive"},
      {"zero dimension", Edited(Valid(), [](auto& r) { r.mutable_inputs(0)->set_shape(3, 0); }),
       StatusCode::INVALID_ARGUMENT, "dimension 3 must be positive"},
      {"empty batch",
       Edited(Valid(),
              [](auto& r) {
                r.mutable_inputs(0)->set_shape(0, 0);
                r.mutable_raw_input_contents(0)->clear();
              }),
       StatusCode::INVALID_ARGUMENT, "dimension 0 (the batch size) must be positive"},
      {"batch above max_batch_size", Valid(kGroupNorm, {9, 8, 4, 1}), StatusCode::INVALID_ARGUMENT,
       "batch size 9, which exceeds the model's max_batch_size of 8"},
      {"dimensions whose product overflows",
       Edited(Valid(),
              [](auto& r) {
                r.mutable_inputs(0)->set_shape(2, kHuge);
                r.mutable_inputs(0)->set_shape(3, kHuge);
              }),
       StatusCode::INVALID_ARGUMENT, "more than INT64_MAX elements"},
      {"huge declared size with little data",
       Edited(Valid(),
              [](auto& r) {
                r.mutable_inputs(0)->set_shape(0, 8);
                r.mutable_inputs(0)->set_shape(2, 65536);
                r.mutable_inputs(0)->set_shape(3, 65536);
              }),
       StatusCode::INVALID_ARGUMENT, "has 512 bytes of raw data, expected 1099511627776"},
      // Data.
      {"raw data one value short", WithRawBytes(508), StatusCode::INVALID_ARGUMENT,
       "has 508 bytes of raw data, expected 512"},
      {"raw data one value long", WithRawBytes(516), StatusCode::INVALID_ARGUMENT,
       "has 516 bytes of raw data, expected 512"},
      {"raw data not a whole number of values", WithRawBytes(510), StatusCode::INVALID_ARGUMENT,
       "has 510 bytes of raw data, expected 512"},
      {"large raw data one value short", WithRawBytes(NumElements(large) * 4 - 4, large),
       StatusCode::INVALID_ARGUMENT, "has 131068 bytes of raw data, expected 131072"},
      {"raw and typed data mixed",
       Edited(Valid(),
              [](auto& r) { r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f); }),
       StatusCode::INVALID_ARGUMENT,
       "contents field must not be specified when using raw_input_contents"},
      {"typed data one value short",
       Edited(Valid(),
              [](auto& r) {
                r.clear_raw_input_contents();
                for (int i = 0; i < 127; ++i) {
                  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
                }
              }),
       StatusCode::INVALID_ARGUMENT, "has 127 fp32_contents values, expected 128"},
      {"typed data of another type",
       Edited(Valid(),
              [](auto& r) {
                r.clear_raw_input_contents();
                r.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
              }),
       StatusCode::INVALID_ARGUMENT, "has datatype FP32 but carries int_contents"},
      {"no data", Edited(Valid(), [](auto& r) { r.clear_raw_input_contents(); }),
       StatusCode::INVALID_ARGUMENT, "input \"input\" has no data"},
      {"two raw entries for one input",
       Edited(Valid(), [](auto& r) { r.add_raw_input_contents(r.raw_input_contents(0)); }),
       StatusCode::INVALID_ARGUMENT, "2 raw_input_contents entries for 1 input"},
      {"shared memory input",
       Edited(
           Valid(),
           [](auto& r) {
             (*r.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
                 "region");
           }),
       StatusCode::INVALID_ARGUMENT, "input \"input\" uses shared memory"},
      // Requested outputs.
      {"unknown output", Edited(Valid(), [](auto& r) { r.add_outputs()->set_name("y"); }),
       StatusCode::INVALID_ARGUMENT, "unknown output \"y\""},
      {"output requested twice",
       Edited(Valid(),
              [](auto& r) {
                r.add_outputs()->set_name("output");
                r.add_outputs()->set_name("output");
              }),
       StatusCode::INVALID_ARGUMENT, "output \"output\" is requested more than once"},
      {"classification output",
       Edited(Valid(),
              [](auto& r) {
                auto* output = r.add_outputs();
                output->set_name("output");
                (*output->mutable_parameters())["classification"].set_int64_param(3);
              }),
       StatusCode::INVALID_ARGUMENT, "classification"},
      // Request parameters.
      {"timeout of type string",
       WithParameter("timeout", [](auto& p) { p.set_string_param("1s"); }),
       StatusCode::INVALID_ARGUMENT,
       "parameter \"timeout\" must be an int64_param or uint64_param"},
      {"negative timeout", WithParameter("timeout", [](auto& p) { p.set_int64_param(-5); }),
       StatusCode::INVALID_ARGUMENT, "parameter \"timeout\" must not be negative, got -5"},
      {"timeout beyond int64",
       WithParameter("timeout",
                     [](auto& p) { p.set_uint64_param(std::numeric_limits<uint64_t>::max()); }),
       StatusCode::INVALID_ARGUMENT, "parameter \"timeout\" is out of range"},
      {"priority of type bool", WithParameter("priority", [](auto& p) { p.set_bool_param(true); }),
       StatusCode::INVALID_ARGUMENT, "parameter \"priority\" must be an int64_param"},
      {"sequence_id set", WithParameter("sequence_id", [](auto& p) { p.set_int64_param(42); }),
       StatusCode::INVALID_ARGUMENT, "does not support sequence batching"},
  };
  return rows;
}

class BadRequestsTest : public SharedServerTest<BadRequestsTest> {
 public:
  static absl::Status AddModels(TestRepository& repository) {
    RETURN_IF_ERROR(repository.AddGroupNorm(kBroken, 8, "", /*channels=*/16));
    return repository.AddGroupNorm(kUnbatched, 0, "");
  }

 protected:
  // Sends every row once; returns how many got the expected code and message.
  int SendTable(const std::vector<BadRequest>& rows) {
    int matched = 0;
    for (const BadRequest& row : rows) {
      inference::ModelInferResponse response;
      const grpc::Status status = Infer(*stub_, row.request, &response);
      EXPECT_EQ(status.error_code(), row.code) << row.name << ": " << status.error_message();
      EXPECT_THAT(status.error_message(), HasSubstr(row.message)) << row.name;
      if (status.error_code() == row.code &&
          status.error_message().find(row.message) != std::string::npos) {
        ++matched;
      }
    }
    return matched;
  }

  void ExpectServesAGoodRequest() {
    const std::vector<float> input = RandomValues(NumElements(kShape), 5);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(*stub_, MakeRequest(kGroupNorm, kShape, input), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    EXPECT_EQ(response.raw_output_contents(0).size(), input.size() * sizeof(float));
  }
};

TEST_F(BadRequestsTest, EachMalformedRequestGetsItsCodeAndAMessageNamingTheProblem) {
  const std::vector<BadRequest> rows = BadRequests();
  ASSERT_GE(rows.size(), 30u);
  EXPECT_EQ(SendTable(rows), static_cast<int>(rows.size()));
  ExpectServesAGoodRequest();
}

// A leak of the rejected requests (128 KiB of them per round: 3.1 MiB per
// half of the rounds) or of their error paths keeps growing the resident set
// round after round; warm-up effects do not. So the growth is measured over
// the second half of the rounds only, after a first half that lets one-time
// growth settle: on a 32-core, 2-GPU host the first half alone grew it by
// 3.4 MiB (a malloc arena for each gRPC thread that first serves a request,
// pooled answer buffers, CUDA graph state), the second by far less.
// Not under the sanitizers: their allocators (ASan's quarantine, TSan's
// shadow memory) grow the resident set by design, and LeakSanitizer checks
// for leaks there.
TEST_F(BadRequestsTest, ServerKeepsServingWithFlatMemoryAfterRepeatedBadRequests) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "resident-set check not meaningful under a sanitizer's allocator";
#endif
#endif
  constexpr int kRoundsPerHalf = 25;
  constexpr int64_t kMaxGrowthBytes = int64_t{3} << 19;  // 1.5 MiB per half
  const std::vector<BadRequest> rows = BadRequests();
  constexpr int kWarmupRounds = 5;
  for (int round = 0; round < kWarmupRounds; ++round) SendTable(rows);
  // Three good requests: on a GPU the second captures the batch's CUDA graph
  // (host memory the driver keeps), the third replays it.
  for (int i = 0; i < 3; ++i) ExpectServesAGoodRequest();
  std::vector<int64_t> resident;
  for (int half = 0; half < 2; ++half) {
    absl::StatusOr<int64_t> bytes = server_->ResidentBytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    resident.push_back(*bytes);
    for (int round = 0; round < kRoundsPerHalf; ++round) {
      ASSERT_EQ(SendTable(rows), static_cast<int>(rows.size())) << "round " << round;
    }
    ExpectServesAGoodRequest();
  }
  absl::StatusOr<int64_t> after = server_->ResidentBytes();
  ASSERT_TRUE(after.ok()) << after.status();
  resident.push_back(*after);

  EXPECT_LT(resident[2] - resident[1], kMaxGrowthBytes)
      << "resident set: " << resident[0] << " bytes, then " << resident[1] << " and "
      << resident[2] << " after each " << kRoundsPerHalf << " rounds of " << rows.size()
      << " bad requests";
  grpc::ClientContext context;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(&context, {}, &ready).ok());
  EXPECT_TRUE(ready.ready()) << "every model that loaded is still ready";
  EXPECT_EQ(MetricValue(ScrapeMetrics(*server_), "nv_inference_pending_request_count",
                        ModelLabels(kGroupNorm)),
            0);
}

// GroupNorm over a group holding a NaN or an Inf is NaN for the whole group
// (the group's mean is NaN or Inf, and Inf - Inf is NaN), as in PyTorch; the
// other groups are computed as usual.
class NonFiniteGroupNormTest : public BadRequestsTest,
                               public ::testing::WithParamInterface<float> {};

TEST_P(NonFiniteGroupNormTest, MakesItsGroupNanLikePyTorchAndLeavesTheOthersAlone) {
  const Shape shape = {2, 8, 3, 3};  // 4 groups of 2 channels: 18 values per group
  const int64_t group_size = 2 * 3 * 3;
  const int poisoned_sample = 1, poisoned_group = 2;
  std::vector<float> input = RandomValues(NumElements(shape), 9);
  const int64_t poisoned_begin = (poisoned_sample * 4 + poisoned_group) * group_size;
  std::vector<float> finite = input;  // the reference sees a finite value there
  input[poisoned_begin + 5] = GetParam();
  inference::ModelInferResponse response;
  const grpc::Status status = Infer(*stub_, MakeRequest(kGroupNorm, shape, input), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents(0).size(), input.size() * sizeof(float));
  const float* got = reinterpret_cast<const float*>(response.raw_output_contents(0).data());

  absl::StatusOr<std::vector<float>> expected =
      ReferenceOutput(repository_->path(), kGroupNorm, shape, finite);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    if (i >= poisoned_begin && i < poisoned_begin + group_size) {
      EXPECT_TRUE(std::isnan(got[i])) << "index " << i << " of the poisoned group is " << got[i];
    } else {
      EXPECT_NEAR(got[i], (*expected)[i], 1e-5) << "index " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(NonFiniteValues, NonFiniteGroupNormTest,
                         ::testing::Values(std::numeric_limits<float>::quiet_NaN(),
                                           std::numeric_limits<float>::infinity(),
                                           -std::numeric_limits<float>::infinity()),
                         [](const ::testing::TestParamInfo<float>& info) {
                           return std::isnan(info.param)
                                      ? std::string("NaN")
                                      : std::string(info.param > 0 ? "PlusInf" : "MinusInf");
                         });

// In the GEMM family a NaN reaches every output of its row (the matrix
// product mixes all features; Hardtanh and Mish keep NaN), while an Inf is
// clamped by Hardtanh to +-1 and the row stays finite, as in PyTorch.
TEST_F(BadRequestsTest, NanPropagatesThroughTheGemmFamilyAndInfIsClampedByHardtanh) {
  const Shape shape = {3, 64};
  std::vector<float> input = RandomValues(NumElements(shape), 10);
  input[0 * 64 + 17] = std::numeric_limits<float>::quiet_NaN();
  input[1 * 64 + 3] = std::numeric_limits<float>::infinity();
  inference::ModelInferResponse response;
  const grpc::Status status = Infer(*stub_, MakeRequest(kGemm, shape, input), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents(0).size(), input.size() * sizeof(float));
  const float* got = reinterpret_cast<const float*>(response.raw_output_contents(0).data());

  for (int j = 0; j < 64; ++j) {
    EXPECT_TRUE(std::isnan(got[0 * 64 + j])) << "row 0 (NaN input), output " << j;
    EXPECT_TRUE(std::isfinite(got[1 * 64 + j])) << "row 1 (Inf input), output " << j;
    EXPECT_TRUE(std::isfinite(got[2 * 64 + j])) << "row 2 (finite input), output " << j;
  }
  absl::StatusOr<std::vector<float>> expected = ReferenceOutput(
      repository_->path(), kGemm, {1, 64}, std::vector<float>(input.begin() + 128, input.end()));
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(got[2 * 64 + j], (*expected)[j], 1e-5) << j;
}

}  // namespace
}  // namespace fuseserve::testing
