#include "server/grpc/infer_wire.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::testing::HasSubstr;

// `bytes` as a ByteBuffer cut into slices at `cuts` (ascending offsets).
grpc::ByteBuffer Sliced(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + begin, cut - begin);
    begin = cut;
  }
  slices.emplace_back(bytes.data() + begin, bytes.size() - begin);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Contents(const WireBytes& bytes) {
  std::string out(bytes.size(), '\0');
  bytes.CopyTo(out.data());
  return out;
}

ModelInferRequest FullRequest() {
  ModelInferRequest request;
  request.set_model_name("groupnorm");
  request.set_model_version("3");
  request.set_id("request-42");
  (*request.mutable_parameters())["timeout"].set_int64_param(1500);
  (*request.mutable_parameters())["priority"].set_uint64_param(1);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  input->add_shape(2);
  input->add_shape(3);
  (*input->mutable_parameters())["shared_memory_offset"].set_int64_param(64);
  request.add_outputs()->set_name("output");
  std::string first(24, '\0');
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<char>(i * 7);
  request.add_raw_input_contents(first);
  request.add_raw_input_contents(std::string(5, 'x'));
  return request;
}

// Parsing the pieces gives the header protobuf would give, and the raw
// entries byte for byte.
void ExpectSameAsProtobuf(const ModelInferRequest& original, const grpc::ByteBuffer& buffer) {
  absl::StatusOr<WireInferRequest> parsed = ParseWireInferRequest(buffer);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ModelInferRequest header = original;
  header.clear_raw_input_contents();
  // Compared as messages: map entries serialise in no fixed order.
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed->header, header))
      << parsed->header.DebugString() << "\nexpected\n" << header.DebugString();
  ASSERT_EQ(parsed->raw_input_contents.size(),
            static_cast<size_t>(original.raw_input_contents_size()));
  for (int i = 0; i < original.raw_input_contents_size(); ++i) {
    EXPECT_EQ(Contents(parsed->raw_input_contents[i]), original.raw_input_contents(i)) << i;
  }
}


// Instances copy large inputs in pieces, several threads at once.
TEST(WireBytesTest, CopyRangeToCopiesAnyRangeAcrossPieces) {
  const std::string data = "abcdefghijklmnopqrstuvwxyz";
  WireBytes bytes;
  bytes.Append(data.data(), 5);        // abcde
  bytes.Append(data.data() + 6, 7);    // ghijklm (not adjacent: a second piece)
  bytes.Append(data.data() + 20, 6);   // uvwxyz
  ASSERT_EQ(bytes.pieces().size(), 3u);
  const std::string all = "abcdeghijklmuvwxyz";
  ASSERT_EQ(bytes.size(), all.size());
  for (size_t offset = 0; offset <= all.size(); ++offset) {
    for (size_t size = 0; offset + size <= all.size(); ++size) {
      std::string out(size, '.');
      bytes.CopyRangeTo(offset, size, out.data());
      ASSERT_EQ(out, all.substr(offset, size)) << "offset " << offset << ", size " << size;
    }
  }
}

TEST(InferWireTest, ParsesEveryFieldFromOneSlice) {
  const ModelInferRequest request = FullRequest();
  ExpectSameAsProtobuf(request, Sliced(request.SerializeAsString(), {}));
}

TEST(InferWireTest, ParsesAMessageCutAtEveryPossibleOffset) {
  const ModelInferRequest request = FullRequest();
  const std::string bytes = request.SerializeAsString();
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    SCOPED_TRACE(cut);
    ExpectSameAsProtobuf(request, Sliced(bytes, {cut}));
  }
}

TEST(InferWireTest, ParsesAMessageCutIntoOneByteSlices) {
  const ModelInferRequest request = FullRequest();
  const std::string bytes = request.SerializeAsString();
  std::vector<size_t> cuts;
  for (size_t cut = 1; cut < bytes.size(); ++cut) cuts.push_back(cut);
  ExpectSameAsProtobuf(request, Sliced(bytes, cuts));
}

TEST(InferWireTest, RawContentsPointIntoTheReceivedSlicesWithoutCopying) {
  ModelInferRequest request;
  request.add_raw_input_contents(std::string(1 << 16, 'a'));
  const grpc::ByteBuffer buffer = Sliced(request.SerializeAsString(), {1000});
  absl::StatusOr<WireInferRequest> parsed = ParseWireInferRequest(buffer);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->raw_input_contents.size(), 1u);
  const WireBytes& contents = parsed->raw_input_contents[0];
  ASSERT_EQ(contents.pieces().size(), 2u) << "one piece per slice it spans";
  const char* second_slice = reinterpret_cast<const char*>(parsed->slices[1].begin());
  EXPECT_EQ(contents.pieces()[1].data, second_slice);
  EXPECT_EQ(contents.size(), size_t{1} << 16);
}

TEST(InferWireTest, FieldsInAnyOrderAndRepeatedScalarsMergeAsProtobufDoes) {
  ModelInferRequest first;
  first.set_model_name("a");
  first.add_raw_input_contents("xyz");
  ModelInferRequest second;
  second.set_model_name("b");  // the last scalar wins
  second.set_id("id");
  second.add_raw_input_contents("12");
  // Concatenated messages are one merged message on the wire.
  const std::string bytes = first.SerializeAsString() + second.SerializeAsString();
  ModelInferRequest merged;
  ASSERT_TRUE(merged.ParseFromString(bytes));
  EXPECT_EQ(merged.model_name(), "b");
  ExpectSameAsProtobuf(merged, Sliced(bytes, {3}));
}

TEST(InferWireTest, KeepsUnknownFields) {
  std::string bytes = FullRequest().SerializeAsString();
  // Field 99, varint 300; field 100, fixed64; field 101, fixed32; field 102, bytes.
  bytes += std::string("\x98\x06\xAC\x02", 4);
  bytes += std::string("\xA1\x06", 2) + std::string(8, '\x01');
  bytes += std::string("\xAD\x06", 2) + std::string(4, '\x02');
  bytes += std::string("\xB2\x06\x03", 3) + "abc";
  ModelInferRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ExpectSameAsProtobuf(expected, Sliced(bytes, {5, 17}));
}

TEST(InferWireTest, ParsesGroupEncodedUnknownFieldsThroughTheWholeMessage) {
  std::string bytes = FullRequest().SerializeAsString();
  // Field 50 as a group (start 0x93 0x03, a varint field inside, end 0x94 0x03).
  bytes += std::string("\x93\x03\x08\x01\x94\x03", 6);
  ModelInferRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ExpectSameAsProtobuf(expected, Sliced(bytes, {7}));
}

TEST(InferWireTest, AcceptsWideTagsExactlyAsProtobufDoes) {
  // Field 3 (id), wire type 2, as a 5-byte tag whose last byte carries bits
  // past 32, which protobuf drops (found by the decoder fuzzer).
  std::string bytes = FullRequest().SerializeAsString();
  bytes += std::string("\x9a\x80\x80\x80\x70\x02id", 8);
  ModelInferRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes)) << "precondition: protobuf accepts it";
  ExpectSameAsProtobuf(expected, Sliced(bytes, {4}));
}

TEST(InferWireTest, AnEmptyMessageIsAnEmptyRequest) {
  absl::StatusOr<WireInferRequest> parsed = ParseWireInferRequest(grpc::ByteBuffer());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->raw_input_contents.empty());
  EXPECT_EQ(parsed->header.model_name(), "");
}

TEST(InferWireTest, RejectsMalformedMessagesWithAReason) {
  const std::string good = FullRequest().SerializeAsString();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string("\x3A\x80\x80\x80\x80\x10", 6), "raw_input_contents runs past the end"},
      {std::string("\x3A\x05" "abc", 5), "raw_input_contents runs past the end"},
      {std::string("\x0A\x05" "ab", 4), "field 1 is truncated or invalid"},
      {std::string("\x80", 1), "truncated field tag"},
      {std::string("\x00\x01", 2), "invalid field tag"},
      {std::string("\x80\x80\x80\x80\x10\x01", 6), "protobuf rejects it"},  // field 0, wide
      {std::string("\x0E", 1), "field 1 is truncated or invalid"},  // wire type 6
      {std::string(11, '\xFF'), "truncated field tag"},
      {std::string("\x11\x01\x02", 3), "field 2 is truncated or invalid"},  // short fixed64
      // Well-formed on the wire, but the field's type is wrong for protobuf.
      {std::string("\x0A\x02\xC3\x28", 4), "protobuf rejects its fields"},
  };
  for (const auto& [bytes, reason] : cases) {
    SCOPED_TRACE(reason);
    for (const std::string& message : {bytes, good + bytes}) {
      absl::StatusOr<WireInferRequest> parsed = ParseWireInferRequest(Sliced(message, {}));
      ASSERT_FALSE(parsed.ok());
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(parsed.status().message(), HasSubstr(reason));
    }
  }
}

TEST(InferWireTest, RandomMessagesParseAsProtobufParsesThem) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    ModelInferRequest request;
    request.set_model_name(std::string(random() % 20, 'm'));
    request.set_id(std::string(random() % 300, 'i'));
    for (int i = 0, n = random() % 4; i < n; ++i) {
      std::string contents(random() % 3000, '\0');
      for (char& c : contents) c = static_cast<char>(random());
      request.add_raw_input_contents(contents);
      request.add_inputs()->add_shape(static_cast<int64_t>(random()));
    }
    const std::string bytes = request.SerializeAsString();
    std::vector<size_t> cuts;
    for (size_t at = 0; bytes.size() > 1 && cuts.size() < 5;) {
      at += 1 + random() % (bytes.size() / 3 + 1);
      if (at >= bytes.size()) break;
      cuts.push_back(at);
    }
    SCOPED_TRACE(trial);
    ExpectSameAsProtobuf(request, Sliced(bytes, cuts));
  }
}

// The response: header fields and zero-copy raw entries, read back by
// protobuf.
TEST(InferWireTest, SerialisedResponseParsesBackWithEveryEntry) {
  ModelInferResponse header;
  header.set_model_name("conv");
  header.set_model_version("1");
  header.set_id("r");
  auto* output = header.add_outputs();
  output->set_name("output");
  output->set_datatype("FP32");
  output->add_shape(1);
  output->add_shape(300);
  header.add_outputs()->set_name("second");
  std::vector<char> big(1200, 'q');  // length needs a 2-byte varint
  std::vector<grpc::Slice> raw;
  raw.emplace_back(big.data(), big.size());
  raw.emplace_back();  // an empty entry (an output placed in shared memory)
  const grpc::ByteBuffer buffer = SerializeWireInferResponse(header, std::move(raw));

  grpc::Slice whole;
  ASSERT_TRUE(buffer.DumpToSingleSlice(&whole).ok());
  ModelInferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromArray(whole.begin(), static_cast<int>(whole.size())));
  ModelInferResponse expected = header;
  expected.add_raw_output_contents(std::string(big.begin(), big.end()));
  expected.add_raw_output_contents("");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, expected))
      << parsed.DebugString();
}

struct Released {
  int count = 0;
};

TEST(InferWireTest, ResponseReleasesEachOutputBufferOnceGrpcIsDoneWithIt) {
  Released released;
  std::vector<char> memory(64, 'z');
  {
    std::vector<grpc::Slice> raw;
    raw.emplace_back(
        memory.data(), memory.size(), [](void* user) { ++static_cast<Released*>(user)->count; },
        &released);
    grpc::ByteBuffer buffer = SerializeWireInferResponse(ModelInferResponse(), std::move(raw));
    EXPECT_EQ(released.count, 0) << "released while still referenced";
  }
  EXPECT_EQ(released.count, 1);
}

}  // namespace
}  // namespace fuseserve
