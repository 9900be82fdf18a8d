#include "server/grpc/infer_request_decoder.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/shm/shared_memory_manager.h"
#include "tests/server/shm/test_shared_memory_object.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The width the fake model refuses, to show that the model's own shape rules
// are applied after the config's.
constexpr int64_t kRejectedWidth = 13;

// A model whose output doubles the last dimension of its input, so that the
// decoded output shape can only have come from OutputShape.
class FakeModel : public Model {
 public:
  const std::string& family() const override { return family_; }
  Precision precision() const override { return Precision::kFp32; }
  absl::StatusOr<Shape> OutputShape(const Shape& input_shape) const override {
    if (input_shape.back() == kRejectedWidth) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake model cannot take width ", kRejectedWidth));
    }
    Shape output = input_shape;
    output.back() *= 2;
    return output;
  }
  absl::Status RunOnCpu(const float*, const Shape&, float*, ThreadPool&) const override {
    return absl::UnimplementedError("the decoder never runs the model");
  }

 private:
  std::string family_ = "fake";
};

inference::ModelConfig ParseConfig(const std::string& text) {
  inference::ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// Batches up to 4; full input shape [N, 3, W].
inference::ModelConfig BatchingConfig() {
  return ParseConfig(R"pb(
    name: "m"
    platform: "fake"
    max_batch_size: 4
    input {
      name: "input"
      data_type: TYPE_FP32
      dims: [ 3, -1 ]
    }
    output {
      name: "output"
      data_type: TYPE_FP32
      dims: [ 3, -1 ]
    }
  )pb");
}

// Does not batch; full input shape exactly [2, 3].
inference::ModelConfig NonBatchingConfig() {
  return ParseConfig(R"pb(
    name: "m"
    platform: "fake"
    max_batch_size: 0
    input {
      name: "input"
      data_type: TYPE_FP32
      dims: [ 2, 3 ]
    }
    output {
      name: "output"
      data_type: TYPE_FP32
      dims: [ 2, 6 ]
    }
  )pb");
}

std::vector<float> Iota(int64_t count) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = 0.5f * static_cast<float>(i);
  return values;
}

std::string RawBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A request with one FP32 input named "input" of `shape`, no data.
inference::ModelInferRequest RequestWithoutData(const Shape& shape) {
  inference::ModelInferRequest request;
  request.set_model_name("m");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t dim : shape) input->add_shape(dim);
  return request;
}

// A request carrying Iota data of `shape` in raw_input_contents.
inference::ModelInferRequest RawRequest(const Shape& shape) {
  inference::ModelInferRequest request = RequestWithoutData(shape);
  request.add_raw_input_contents(RawBytes(Iota(NumElements(shape))));
  return request;
}

// A request carrying Iota data of `shape` in contents.fp32_contents.
inference::ModelInferRequest TypedRequest(const Shape& shape) {
  inference::ModelInferRequest request = RequestWithoutData(shape);
  for (float value : Iota(NumElements(shape))) {
    request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
  }
  return request;
}

class InferRequestDecoderTest : public ::testing::Test {
 protected:
  absl::StatusOr<DecodedInferRequest> Decode(const inference::ModelInferRequest& request) {
    return DecodeInferRequest(request, config_, model_, shared_memory_);
  }

  // Asserts that decoding fails with InvalidArgument and returns the message.
  std::string DecodeError(const inference::ModelInferRequest& request) {
    absl::StatusOr<DecodedInferRequest> decoded = Decode(request);
    EXPECT_FALSE(decoded.ok()) << "decoded a request that should have been rejected: "
                               << request.ShortDebugString();
    if (decoded.ok()) return "";
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
    return std::string(decoded.status().message());
  }

  inference::ModelConfig config_ = BatchingConfig();
  FakeModel model_;
  // Null: the server does not allow shared memory.
  const SharedMemoryManager* shared_memory_ = nullptr;
};

TEST_F(InferRequestDecoderTest, DecodesRawInputInPlaceWithoutCopying) {
  const inference::ModelInferRequest request = RawRequest({2, 3, 5});
  const std::string& raw = request.raw_input_contents(0);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(raw.data()) % alignof(float), 0u)
      << "precondition: the message's bytes are float-aligned";

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->input_shape, (Shape{2, 3, 5}));
  EXPECT_EQ(decoded->batch_size, 2);
  EXPECT_EQ(decoded->output_shape, (Shape{2, 3, 10}));
  EXPECT_EQ(static_cast<const void*>(decoded->input), static_cast<const void*>(raw.data()));
  EXPECT_TRUE(decoded->aligned_copy.empty());
  EXPECT_EQ(decoded->timeout, absl::ZeroDuration());
}

TEST_F(InferRequestDecoderTest, RawInputSpreadOverSeveralPiecesIsLeftWhereItWasReceived) {
  const inference::ModelInferRequest request = RawRequest({2, 3, 5});
  const std::string& raw = request.raw_input_contents(0);
  // As the transport may hand it over: in two slices, the second unaligned.
  const std::string first = raw.substr(0, 13);
  const std::string second = raw.substr(13);
  std::vector<WireBytes> pieces(1);
  pieces[0].Append(first.data(), first.size());
  pieces[0].Append(second.data(), second.size());

  absl::StatusOr<DecodedInferRequest> decoded =
      DecodeInferRequest(request, pieces, config_, model_, shared_memory_);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->input, nullptr) << "no contiguous copy is made";
  ASSERT_TRUE(decoded->input_pieces.has_value());
  std::vector<float> copied(NumElements(decoded->input_shape));
  decoded->input_pieces->CopyTo(reinterpret_cast<char*>(copied.data()));
  EXPECT_EQ(copied, Iota(30));
}

TEST_F(InferRequestDecoderTest, WireRawEntriesAreCheckedLikeTheMessageOnes) {
  // The header's own raw entries are ignored: the wire entries count.
  const inference::ModelInferRequest request = RequestWithoutData({1, 3, 5});
  const std::string bytes = RawBytes(Iota(14));
  std::vector<WireBytes> pieces(1);
  pieces[0].Append(bytes.data(), bytes.size());
  absl::StatusOr<DecodedInferRequest> decoded =
      DecodeInferRequest(request, pieces, config_, model_, shared_memory_);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("has 56 bytes of raw data, expected 60"));
  pieces.push_back(pieces[0]);
  decoded = DecodeInferRequest(request, pieces, config_, model_, shared_memory_);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("2 raw_input_contents entries for 1 input"));
}

TEST_F(InferRequestDecoderTest, DecodesTypedFp32Contents) {
  const inference::ModelInferRequest request = TypedRequest({1, 3, 2});

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->input_shape, (Shape{1, 3, 2}));
  EXPECT_EQ(decoded->batch_size, 1);
  EXPECT_EQ(decoded->output_shape, (Shape{1, 3, 4}));
  ASSERT_NE(decoded->input, nullptr);
  EXPECT_THAT(std::vector<float>(decoded->input, decoded->input + 6), ElementsAreArray(Iota(6)));
}

TEST_F(InferRequestDecoderTest, NonBatchingModelTakesConfigDimsAsFullShape) {
  config_ = NonBatchingConfig();

  absl::StatusOr<DecodedInferRequest> decoded = Decode(RawRequest({2, 3}));

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->input_shape, (Shape{2, 3}));
  EXPECT_EQ(decoded->batch_size, 1);
  EXPECT_EQ(decoded->output_shape, (Shape{2, 6}));
}

TEST_F(InferRequestDecoderTest, NonBatchingModelRejectsBatchDimension) {
  config_ = NonBatchingConfig();

  EXPECT_THAT(DecodeError(RawRequest({1, 2, 3})), HasSubstr("rank"));
}

TEST_F(InferRequestDecoderTest, RejectsRequestWithoutInputs) {
  inference::ModelInferRequest request;
  request.set_model_name("m");

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("expects 1 input"), HasSubstr("has 0")));
}

TEST_F(InferRequestDecoderTest, RejectsRequestWithTwoInputs) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  *request.add_inputs() = request.inputs(0);
  request.add_raw_input_contents(request.raw_input_contents(0));

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("expects 1 input"), HasSubstr("has 2")));
}

TEST_F(InferRequestDecoderTest, RejectsUnknownInputName) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  request.mutable_inputs(0)->set_name("INPUT0");

  EXPECT_THAT(DecodeError(request),
              AllOf(HasSubstr("unknown input \"INPUT0\""), HasSubstr("\"input\"")));
}

TEST_F(InferRequestDecoderTest, RejectsDatatypeOtherThanFp32) {
  for (const char* datatype : {"FP16", "INT32", "fp32", ""}) {
    inference::ModelInferRequest request = RawRequest({1, 3, 2});
    request.mutable_inputs(0)->set_datatype(datatype);

    EXPECT_THAT(DecodeError(request),
                AllOf(HasSubstr(absl::StrCat("\"", datatype, "\"")), HasSubstr("FP32")))
        << datatype;
  }
}

TEST_F(InferRequestDecoderTest, RejectsWrongRank) {
  EXPECT_THAT(DecodeError(RawRequest({1, 3})), AllOf(HasSubstr("rank 2"), HasSubstr("rank 3")));
  EXPECT_THAT(DecodeError(RawRequest({1, 3, 2, 2})), HasSubstr("rank 4"));
}

TEST_F(InferRequestDecoderTest, RejectsFixedDimensionDifferentFromConfig) {
  EXPECT_THAT(DecodeError(RawRequest({1, 4, 2})),
              AllOf(HasSubstr("\"input\""), HasSubstr("[1, 4, 2]"), HasSubstr("dimension 1 is 4"),
                    HasSubstr("expected 3")));
}

TEST_F(InferRequestDecoderTest, AcceptsAnyPositiveSizeForVariableDimension) {
  for (int64_t width : {1, 2, 17}) {
    absl::StatusOr<DecodedInferRequest> decoded = Decode(RawRequest({1, 3, width}));
    ASSERT_TRUE(decoded.ok()) << "width " << width << ": " << decoded.status();
    EXPECT_EQ(decoded->input_shape, (Shape{1, 3, width}));
  }
}

TEST_F(InferRequestDecoderTest, RejectsNonPositiveDimensions) {
  EXPECT_THAT(DecodeError(RequestWithoutData({1, 3, 0})),
              AllOf(HasSubstr("dimension 2"), HasSubstr("positive")));
  EXPECT_THAT(DecodeError(RequestWithoutData({1, 3, -1})),
              AllOf(HasSubstr("dimension 2"), HasSubstr("positive")));
  EXPECT_THAT(DecodeError(RequestWithoutData({1, -3, 2})), HasSubstr("dimension 1"));
}

TEST_F(InferRequestDecoderTest, RejectsBatchSizeZero) {
  EXPECT_THAT(DecodeError(RequestWithoutData({0, 3, 2})),
              AllOf(HasSubstr("dimension 0 (the batch size)"), HasSubstr("positive")));
}

TEST_F(InferRequestDecoderTest, RejectsShapeWithMoreThanInt64MaxElementsNamingTheInput) {
  constexpr int64_t kHuge = int64_t{1} << 62;
  inference::ModelInferRequest request = RequestWithoutData({4, 3, kHuge});
  request.add_raw_input_contents("");

  EXPECT_THAT(DecodeError(request),
              AllOf(HasSubstr("\"input\""), HasSubstr(absl::StrCat("[4, 3, ", kHuge, "]")),
                    HasSubstr("more than INT64_MAX elements")));
}

TEST_F(InferRequestDecoderTest, AcceptsBatchSizeUpToMaxBatchSize) {
  absl::StatusOr<DecodedInferRequest> decoded = Decode(RawRequest({4, 3, 2}));

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->batch_size, 4);
}

TEST_F(InferRequestDecoderTest, RejectsBatchSizeAboveMaxBatchSize) {
  EXPECT_THAT(DecodeError(RawRequest({5, 3, 2})),
              AllOf(HasSubstr("batch size 5"), HasSubstr("max_batch_size of 4")));
}

TEST_F(InferRequestDecoderTest, PropagatesModelRejectionOfShape) {
  EXPECT_THAT(DecodeError(RawRequest({1, 3, kRejectedWidth})),
              HasSubstr("fake model cannot take width 13"));
}

TEST_F(InferRequestDecoderTest, RejectsRawByteCountThatDoesNotMatchShape) {
  inference::ModelInferRequest short_request = RawRequest({2, 3, 2});
  short_request.mutable_raw_input_contents(0)->resize(11 * sizeof(float));
  EXPECT_THAT(DecodeError(short_request),
              AllOf(HasSubstr("\"input\""), HasSubstr("44 bytes"), HasSubstr("expected 48")));

  inference::ModelInferRequest long_request = RawRequest({2, 3, 2});
  long_request.mutable_raw_input_contents(0)->push_back('\0');
  EXPECT_THAT(DecodeError(long_request), AllOf(HasSubstr("49 bytes"), HasSubstr("expected 48")));
}

// 2^62 elements are 2^64 bytes: a byte count that wraps to 0 in 64 bits must
// not make an empty buffer look like the right size.
TEST_F(InferRequestDecoderTest, RejectsShapeWhoseByteCountOverflows) {
  config_ = ParseConfig(R"pb(
    name: "m"
    platform: "fake"
    max_batch_size: 4
    input {
      name: "input"
      data_type: TYPE_FP32
      dims: [ 4, -1 ]
    }
    output {
      name: "output"
      data_type: TYPE_FP32
      dims: [ 4, -1 ]
    }
  )pb");
  inference::ModelInferRequest request = RequestWithoutData({4, 4, int64_t{1} << 58});
  request.add_raw_input_contents("");

  EXPECT_THAT(DecodeError(request), HasSubstr("\"input\""));
}

TEST_F(InferRequestDecoderTest, RejectsRawAndTypedContentsTogether) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  for (float value : Iota(6)) {
    request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
  }

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("contents"), HasSubstr("raw_input_contents")));
}

TEST_F(InferRequestDecoderTest, RejectsMoreRawEntriesThanInputs) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  request.add_raw_input_contents(request.raw_input_contents(0));

  EXPECT_THAT(DecodeError(request), HasSubstr("2 raw_input_contents"));
}

TEST_F(InferRequestDecoderTest, RejectsWrongNumberOfFp32Contents) {
  inference::ModelInferRequest request = TypedRequest({1, 3, 2});
  request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("7 fp32_contents"), HasSubstr("expected 6")));
}

TEST_F(InferRequestDecoderTest, RejectsTypedContentsOfOtherDatatypes) {
  struct Case {
    const char* field;
    void (*fill)(inference::InferTensorContents*);
  };
  const Case cases[] = {
      {"bool_contents", [](inference::InferTensorContents* c) { c->add_bool_contents(true); }},
      {"int_contents", [](inference::InferTensorContents* c) { c->add_int_contents(1); }},
      {"int64_contents", [](inference::InferTensorContents* c) { c->add_int64_contents(1); }},
      {"uint_contents", [](inference::InferTensorContents* c) { c->add_uint_contents(1); }},
      {"uint64_contents", [](inference::InferTensorContents* c) { c->add_uint64_contents(1); }},
      {"fp64_contents", [](inference::InferTensorContents* c) { c->add_fp64_contents(1.0); }},
      {"bytes_contents", [](inference::InferTensorContents* c) { c->add_bytes_contents("x"); }},
  };
  for (const Case& test_case : cases) {
    inference::ModelInferRequest typed = TypedRequest({1, 3, 2});
    test_case.fill(typed.mutable_inputs(0)->mutable_contents());
    EXPECT_THAT(DecodeError(typed), HasSubstr(test_case.field)) << "beside fp32_contents";

    inference::ModelInferRequest alone = RequestWithoutData({1, 3, 2});
    test_case.fill(alone.mutable_inputs(0)->mutable_contents());
    EXPECT_THAT(DecodeError(alone), HasSubstr(test_case.field)) << "alone";
  }
}

TEST_F(InferRequestDecoderTest, RejectsInputWithoutData) {
  EXPECT_THAT(DecodeError(RequestWithoutData({1, 3, 2})),
              AllOf(HasSubstr("\"input\""), HasSubstr("no data")));
}

TEST_F(InferRequestDecoderTest, AcceptsRequestedOutputByName) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  request.add_outputs()->set_name("output");

  EXPECT_TRUE(Decode(request).ok());
}

TEST_F(InferRequestDecoderTest, RejectsUnknownRequestedOutput) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  request.add_outputs()->set_name("OUTPUT0");

  EXPECT_THAT(DecodeError(request), HasSubstr("unknown output \"OUTPUT0\""));
}

TEST_F(InferRequestDecoderTest, RejectsOutputRequestedTwice) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  request.add_outputs()->set_name("output");
  request.add_outputs()->set_name("output");

  EXPECT_THAT(DecodeError(request), HasSubstr("more than once"));
}

// Without a SharedMemoryManager (--allow-shared-memory off) any of the
// parameters is refused, whatever the others say.
TEST_F(InferRequestDecoderTest, RefusesSharedMemoryInputWhenTheServerDoesNotAllowIt) {
  for (const char* key :
       {"shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"}) {
    inference::ModelInferRequest request = RequestWithoutData({1, 3, 2});
    (*request.mutable_inputs(0)->mutable_parameters())[key].set_string_param("region0");

    EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("input \"input\" uses shared memory"),
                                            HasSubstr("--allow-shared-memory=true")))
        << key;
  }
}

TEST_F(InferRequestDecoderTest, RefusesSharedMemoryOutputWhenTheServerDoesNotAllowIt) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  auto* output = request.add_outputs();
  output->set_name("output");
  (*output->mutable_parameters())["shared_memory_region"].set_string_param("region0");
  (*output->mutable_parameters())["shared_memory_byte_size"].set_int64_param(48);

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("output \"output\" uses shared memory"),
                                          HasSubstr("--allow-shared-memory=true")));
}

TEST_F(InferRequestDecoderTest, RejectsClassificationOutput) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  auto* output = request.add_outputs();
  output->set_name("output");
  (*output->mutable_parameters())["classification"].set_int64_param(3);

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("\"output\""), HasSubstr("classification")));
}

TEST_F(InferRequestDecoderTest, ReadsTimeoutParameterInMicroseconds) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  (*request.mutable_parameters())["timeout"].set_int64_param(1500);
  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->timeout, absl::Microseconds(1500));

  (*request.mutable_parameters())["timeout"].set_uint64_param(2500);
  decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->timeout, absl::Microseconds(2500));
}

TEST_F(InferRequestDecoderTest, RejectsNegativeTimeout) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  (*request.mutable_parameters())["timeout"].set_int64_param(-1);

  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("\"timeout\""), HasSubstr("negative")));
}

TEST_F(InferRequestDecoderTest, RejectsTimeoutAboveInt64Range) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  (*request.mutable_parameters())["timeout"].set_uint64_param(uint64_t{1} << 63);

  EXPECT_THAT(DecodeError(request), HasSubstr("\"timeout\""));
}

TEST_F(InferRequestDecoderTest, RejectsTimeoutOfWrongType) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  auto& timeout = (*request.mutable_parameters())["timeout"];

  timeout.set_string_param("1000");
  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("\"timeout\""), HasSubstr("int64_param")));
  timeout.set_double_param(1000.0);
  EXPECT_THAT(DecodeError(request), HasSubstr("\"timeout\""));
  timeout.set_bool_param(true);
  EXPECT_THAT(DecodeError(request), HasSubstr("\"timeout\""));
}

TEST_F(InferRequestDecoderTest, AcceptsPriorityParameter) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  (*request.mutable_parameters())["priority"].set_int64_param(1);
  EXPECT_TRUE(Decode(request).ok());

  (*request.mutable_parameters())["priority"].set_uint64_param(0);
  EXPECT_TRUE(Decode(request).ok());
}

TEST_F(InferRequestDecoderTest, RejectsSequenceParametersWhenSet) {
  for (const char* key : {"sequence_id", "sequence_start", "sequence_end"}) {
    inference::ModelInferRequest request = RawRequest({1, 3, 2});
    auto& parameter = (*request.mutable_parameters())[key];

    parameter.set_bool_param(true);
    EXPECT_THAT(DecodeError(request), AllOf(HasSubstr(key), HasSubstr("sequence batching")));
    parameter.set_int64_param(7);
    EXPECT_THAT(DecodeError(request), HasSubstr(key));
    parameter.set_uint64_param(7);
    EXPECT_THAT(DecodeError(request), HasSubstr(key));
    parameter.set_string_param("correlation-7");
    EXPECT_THAT(DecodeError(request), HasSubstr(key));
  }
}

// tritonclient may send the sequence parameters at their "no sequence" values.
TEST_F(InferRequestDecoderTest, AcceptsSequenceParametersAtTheirUnsetValues) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  auto& parameters = *request.mutable_parameters();
  parameters["sequence_id"].set_uint64_param(0);
  parameters["sequence_start"].set_bool_param(false);
  parameters["sequence_end"].set_bool_param(false);

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
}

TEST_F(InferRequestDecoderTest, IgnoresParametersThatDoNotChangeTheResult) {
  inference::ModelInferRequest request = RawRequest({1, 3, 2});
  auto& parameters = *request.mutable_parameters();
  parameters["binary_data_output"].set_bool_param(true);
  parameters["user_tag"].set_string_param("abc");
  request.add_outputs()->set_name("output");
  (*request.mutable_outputs(0)->mutable_parameters())["binary_data"].set_bool_param(true);

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(decoded->output_shape, ElementsAre(1, 3, 4));
}

// --- Inputs and outputs in system shared memory ---

constexpr char kRegion[] = "region";
constexpr int64_t kObjectBytes = 4096;
// Input [1, 3, 2] is 6 floats (24 bytes); its output [1, 3, 4] 12 (48 bytes).
const Shape kShape = {1, 3, 2};
constexpr int64_t kInputBytes = 24;
constexpr int64_t kOutputBytes = 48;

using Parameters = google::protobuf::Map<std::string, inference::InferParameter>;

// Sets Triton's shared-memory parameters (int64 values, offset only when given).
void SetSharedMemory(Parameters* parameters, const std::string& region, int64_t byte_size,
                     std::optional<int64_t> offset = std::nullopt) {
  (*parameters)["shared_memory_region"].set_string_param(region);
  (*parameters)["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset.has_value()) (*parameters)["shared_memory_offset"].set_int64_param(*offset);
}

// One object registered whole as region "region".
class InferRequestDecoderSharedMemoryTest : public InferRequestDecoderTest {
 protected:
  void SetUp() override {
    auto object = testing::TestSharedMemoryObject::Create(kObjectBytes);
    ASSERT_TRUE(object.ok()) << object.status();
    object_ = *std::move(object);
    ASSERT_TRUE(manager_.Register(kRegion, object_->key(), 0, kObjectBytes).ok());
    shared_memory_ = &manager_;
  }

  // A request whose input (Iota data of kShape, written into the object at
  // `offset`) is in the region.
  inference::ModelInferRequest SharedMemoryInputRequest(int64_t offset) {
    const std::vector<float> values = Iota(NumElements(kShape));
    std::memcpy(object_->data() + offset, values.data(), kInputBytes);
    inference::ModelInferRequest request = RequestWithoutData(kShape);
    SetSharedMemory(request.mutable_inputs(0)->mutable_parameters(), kRegion, kInputBytes, offset);
    return request;
  }

  // Asks for the output in the region.
  static void AddSharedMemoryOutput(inference::ModelInferRequest* request, int64_t byte_size,
                                    std::optional<int64_t> offset) {
    auto* output = request->add_outputs();
    output->set_name("output");
    SetSharedMemory(output->mutable_parameters(), kRegion, byte_size, offset);
  }

  // The error decoding fails with (asserting its code).
  std::string DecodeErrorWithCode(const inference::ModelInferRequest& request,
                                  absl::StatusCode code) {
    absl::StatusOr<DecodedInferRequest> decoded = Decode(request);
    EXPECT_EQ(decoded.status().code(), code) << decoded.status();
    return std::string(decoded.status().message());
  }

  std::unique_ptr<testing::TestSharedMemoryObject> object_;
  SharedMemoryManager manager_;
};

TEST_F(InferRequestDecoderSharedMemoryTest, ReadsInputInPlaceFromTheRegion) {
  absl::StatusOr<DecodedInferRequest> decoded = Decode(SharedMemoryInputRequest(64));

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->shared_memory_input.has_value());
  const SharedMemoryView& view = *decoded->shared_memory_input;
  EXPECT_EQ(view.region->name(), kRegion);
  EXPECT_EQ(view.offset_in_region, 64u);
  EXPECT_EQ(view.byte_size, static_cast<uint64_t>(kInputBytes));
  EXPECT_EQ(static_cast<const void*>(decoded->input), static_cast<const void*>(view.data));
  EXPECT_TRUE(decoded->aligned_copy.empty());
  EXPECT_THAT(std::vector<float>(decoded->input, decoded->input + 6), ElementsAreArray(Iota(6)));
  EXPECT_EQ(decoded->output_shape, (Shape{1, 3, 4}));
  EXPECT_FALSE(decoded->shared_memory_output.has_value());
}

TEST_F(InferRequestDecoderSharedMemoryTest, OffsetDefaultsToZero) {
  inference::ModelInferRequest request = SharedMemoryInputRequest(0);
  request.mutable_inputs(0)->mutable_parameters()->erase("shared_memory_offset");

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->shared_memory_input->offset_in_region, 0u);
  EXPECT_THAT(std::vector<float>(decoded->input, decoded->input + 6), ElementsAreArray(Iota(6)));
}

TEST_F(InferRequestDecoderSharedMemoryTest, AcceptsUint64SizeAndOffset) {
  inference::ModelInferRequest request = SharedMemoryInputRequest(128);
  auto& parameters = *request.mutable_inputs(0)->mutable_parameters();
  parameters["shared_memory_byte_size"].set_uint64_param(kInputBytes);
  parameters["shared_memory_offset"].set_uint64_param(128);

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->shared_memory_input->offset_in_region, 128u);
}

TEST_F(InferRequestDecoderSharedMemoryTest, CopiesInputThatIsNotFloatAligned) {
  absl::StatusOr<DecodedInferRequest> decoded = Decode(SharedMemoryInputRequest(66));

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->aligned_copy.size(), 6u);
  EXPECT_EQ(decoded->input, decoded->aligned_copy.data());
  EXPECT_THAT(std::vector<float>(decoded->input, decoded->input + 6), ElementsAreArray(Iota(6)));
}

TEST_F(InferRequestDecoderSharedMemoryTest, PlacesOutputInTheRegion) {
  inference::ModelInferRequest request = RawRequest(kShape);
  AddSharedMemoryOutput(&request, kOutputBytes, 256);

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_FALSE(decoded->shared_memory_input.has_value());
  ASSERT_TRUE(decoded->shared_memory_output.has_value());
  EXPECT_EQ(decoded->shared_memory_output->offset_in_region, 256u);
  EXPECT_EQ(decoded->shared_memory_output->byte_size, static_cast<uint64_t>(kOutputBytes));
}

TEST_F(InferRequestDecoderSharedMemoryTest, AcceptsOutputSpaceLargerThanTheOutput) {
  inference::ModelInferRequest request = SharedMemoryInputRequest(0);
  AddSharedMemoryOutput(&request, 1000, 1024);

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->shared_memory_output->byte_size, 1000u);
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsOutputSpaceSmallerThanTheOutput) {
  inference::ModelInferRequest request = RawRequest(kShape);
  AddSharedMemoryOutput(&request, kOutputBytes - 1, 0);

  EXPECT_EQ(DecodeError(request),
            "shared memory size specified with the request for output 'output' (47 bytes) "
            "should be at least 48 bytes to hold the results");
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsInputByteSizeThatDoesNotMatchTheShape) {
  for (int64_t byte_size : {kInputBytes - 4, kInputBytes + 4, kInputBytes + 1}) {
    inference::ModelInferRequest request = SharedMemoryInputRequest(0);
    (*request.mutable_inputs(0)->mutable_parameters())["shared_memory_byte_size"].set_int64_param(
        byte_size);

    EXPECT_EQ(DecodeError(request),
              absl::StrCat("input \"input\" has ", byte_size,
                           " bytes in shared memory (shared_memory_byte_size), expected 24 (6 "
                           "FP32 values of shape [1, 3, 2])"));
  }
}

TEST_F(InferRequestDecoderSharedMemoryTest, ReportsUnknownRegionAsNotFound) {
  inference::ModelInferRequest input = SharedMemoryInputRequest(0);
  (*input.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("x");
  EXPECT_EQ(DecodeErrorWithCode(input, absl::StatusCode::kNotFound),
            "input \"input\": Unable to find shared memory region: 'x'");

  inference::ModelInferRequest output = RawRequest(kShape);
  AddSharedMemoryOutput(&output, kOutputBytes, 0);
  (*output.mutable_outputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("");
  EXPECT_EQ(DecodeErrorWithCode(output, absl::StatusCode::kNotFound),
            "output \"output\": Unable to find shared memory region: ''");
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsRangesOutsideTheRegion) {
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  for (int64_t offset : {kObjectBytes - kInputBytes + 4, kObjectBytes + 4, kInt64Max}) {
    inference::ModelInferRequest request = SharedMemoryInputRequest(0);
    (*request.mutable_inputs(0)->mutable_parameters())["shared_memory_offset"].set_int64_param(
        offset);

    EXPECT_EQ(DecodeError(request),
              absl::StrCat("input \"input\": offset ", offset,
                           " + byte size 24 is out of bounds of shared memory region 'region' "
                           "(4096 bytes)"));
  }
  inference::ModelInferRequest output = RawRequest(kShape);
  AddSharedMemoryOutput(&output, kInt64Max, 8);
  EXPECT_THAT(DecodeError(output), AllOf(HasSubstr("output \"output\""),
                                         HasSubstr("out of bounds of shared memory region")));
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsParametersOfTheWrongType) {
  struct Case {
    const char* key;
    void (*set)(inference::InferParameter*);
    const char* message;
  };
  const Case cases[] = {
      {"shared_memory_region", [](inference::InferParameter* p) { p->set_int64_param(1); },
       "parameter \"shared_memory_region\" must be a string_param"},
      {"shared_memory_byte_size", [](inference::InferParameter* p) { p->set_string_param("24"); },
       "parameter \"shared_memory_byte_size\" must be an int64_param or uint64_param"},
      {"shared_memory_byte_size", [](inference::InferParameter* p) { p->set_double_param(24); },
       "parameter \"shared_memory_byte_size\" must be an int64_param or uint64_param"},
      {"shared_memory_byte_size", [](inference::InferParameter* p) { p->set_int64_param(-24); },
       "parameter \"shared_memory_byte_size\" must not be negative, got -24"},
      {"shared_memory_byte_size",
       [](inference::InferParameter* p) { p->set_uint64_param(uint64_t{1} << 63); },
       "parameter \"shared_memory_byte_size\" is out of range"},
      {"shared_memory_offset", [](inference::InferParameter* p) { p->set_bool_param(true); },
       "parameter \"shared_memory_offset\" must be an int64_param or uint64_param"},
      {"shared_memory_offset", [](inference::InferParameter* p) { p->set_int64_param(-4); },
       "parameter \"shared_memory_offset\" must not be negative, got -4"},
  };
  for (const Case& test_case : cases) {
    inference::ModelInferRequest input = SharedMemoryInputRequest(0);
    test_case.set(&(*input.mutable_inputs(0)->mutable_parameters())[test_case.key]);
    EXPECT_EQ(DecodeError(input), absl::StrCat("input \"input\": ", test_case.message));

    inference::ModelInferRequest output = RawRequest(kShape);
    AddSharedMemoryOutput(&output, kOutputBytes, 0);
    test_case.set(&(*output.mutable_outputs(0)->mutable_parameters())[test_case.key]);
    EXPECT_EQ(DecodeError(output), absl::StrCat("output \"output\": ", test_case.message));
  }
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsIncompleteParameterSets) {
  const struct {
    const char* erased;
    const char* message;
  } cases[] = {
      {"shared_memory_region",
       "parameter \"shared_memory_byte_size\" needs parameter \"shared_memory_region\""},
      {"shared_memory_byte_size",
       "parameter \"shared_memory_region\" needs parameter \"shared_memory_byte_size\""},
  };
  for (const auto& test_case : cases) {
    inference::ModelInferRequest request = SharedMemoryInputRequest(0);
    request.mutable_inputs(0)->mutable_parameters()->erase(test_case.erased);
    EXPECT_EQ(DecodeError(request), absl::StrCat("input \"input\": ", test_case.message));
  }
  inference::ModelInferRequest offset_only = RawRequest(kShape);
  auto* output = offset_only.add_outputs();
  output->set_name("output");
  (*output->mutable_parameters())["shared_memory_offset"].set_int64_param(0);
  EXPECT_EQ(DecodeError(offset_only),
            "output \"output\": parameter \"shared_memory_offset\" needs parameter "
            "\"shared_memory_region\"");
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsSharedMemoryInputThatAlsoCarriesData) {
  inference::ModelInferRequest raw = SharedMemoryInputRequest(0);
  raw.add_raw_input_contents(RawBytes(Iota(6)));
  EXPECT_EQ(DecodeError(raw),
            "request has 1 raw_input_contents entries, but its only input (input \"input\") is "
            "in shared memory");

  inference::ModelInferRequest typed = SharedMemoryInputRequest(0);
  for (float value : Iota(6)) typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
  EXPECT_EQ(DecodeError(typed),
            "input \"input\" is in shared memory and must not also carry contents");
}

TEST_F(InferRequestDecoderSharedMemoryTest, RejectsOutputThatOverlapsTheInput) {
  inference::ModelInferRequest request = SharedMemoryInputRequest(100);
  AddSharedMemoryOutput(&request, kOutputBytes, 100 + kInputBytes - 4);

  EXPECT_EQ(DecodeError(request),
            "output \"output\" (bytes 120 to 168) overlaps input \"input\" (bytes 100 to 124) in "
            "shared memory object '" +
                object_->key() + "'");
}

// The same object registered twice under two names is still one memory.
TEST_F(InferRequestDecoderSharedMemoryTest, DetectsOverlapThroughAnotherRegionOfTheSameObject) {
  ASSERT_TRUE(manager_.Register("alias", object_->key(), 64, 512).ok());
  inference::ModelInferRequest request = SharedMemoryInputRequest(100);
  AddSharedMemoryOutput(&request, kOutputBytes, 0);
  (*request.mutable_outputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
      "alias");

  EXPECT_THAT(DecodeError(request), HasSubstr("(bytes 64 to 112) overlaps input"));
}

TEST_F(InferRequestDecoderSharedMemoryTest, AcceptsOutputRightAfterTheInput) {
  inference::ModelInferRequest request = SharedMemoryInputRequest(0);
  AddSharedMemoryOutput(&request, kOutputBytes, kInputBytes);

  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->shared_memory_input.has_value());
  EXPECT_TRUE(decoded->shared_memory_output.has_value());
}

TEST_F(InferRequestDecoderSharedMemoryTest, DecodedRequestKeepsRegionsMappedAfterUnregister) {
  inference::ModelInferRequest request = SharedMemoryInputRequest(0);
  AddSharedMemoryOutput(&request, kOutputBytes, 512);
  absl::StatusOr<DecodedInferRequest> decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();

  manager_.Unregister("");
  object_->Unlink();

  EXPECT_THAT(std::vector<float>(decoded->input, decoded->input + 6), ElementsAreArray(Iota(6)));
  decoded->shared_memory_output->data[0] = 0x7F;
  EXPECT_EQ(object_->data()[512], 0x7F);
}

}  // namespace
}  // namespace fuseserve
