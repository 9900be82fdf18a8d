#include "server/grpc/infer_wire.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fuseserve {
namespace {

// ModelInferRequest.raw_input_contents and ModelInferResponse.raw_output_contents.
constexpr uint32_t kRawInputContentsField = 7;
constexpr uint32_t kRawOutputContentsField = 6;

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Reads a sequence of slices front to back. Every read checks the bytes
// remaining, so a hostile length cannot read past the end. While `record`
// is set, the bytes consumed are also appended to it.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& slice : slices_) remaining_ += slice.size();
    SkipEmpty();
  }

  size_t remaining() const { return remaining_; }
  void set_record(std::string* record) { record_ = record; }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }

  // Consumes `count` bytes, handing each contiguous piece to `piece`.
  template <typename PieceFn>
  bool Take(size_t count, PieceFn piece) {
    if (count > remaining_) return false;
    while (count > 0) {
      const grpc::Slice& slice = slices_[index_];
      const size_t n = std::min(count, slice.size() - offset_);
      const char* data = reinterpret_cast<const char*>(slice.begin()) + offset_;
      if (record_ != nullptr) record_->append(data, n);
      piece(data, n);
      Advance(n);
      count -= n;
    }
    return true;
  }

  bool Skip(size_t count) {
    return Take(count, [](const char*, size_t) {});
  }

 private:
  bool ReadByte(uint8_t* byte) {
    if (remaining_ == 0) return false;
    *byte = slices_[index_].begin()[offset_];
    if (record_ != nullptr) record_->push_back(static_cast<char>(*byte));
    Advance(1);
    return true;
  }

  void Advance(size_t n) {
    offset_ += n;
    remaining_ -= n;
    SkipEmpty();
  }

  void SkipEmpty() {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t remaining_ = 0;
  std::string* record_ = nullptr;
};

absl::Status Malformed(const std::string& detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("the request is not a well-formed ModelInferRequest: ", detail));
}

// The whole message parsed by protobuf, for encodings the piecewise parser
// does not follow (groups).
absl::StatusOr<WireInferRequest> ParseWhole(std::vector<grpc::Slice> slices) {
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  WireInferRequest request;
  if (!request.header.ParseFromString(bytes)) return Malformed("protobuf rejects it");
  request.owned_contents.assign(
      std::make_move_iterator(request.header.mutable_raw_input_contents()->begin()),
      std::make_move_iterator(request.header.mutable_raw_input_contents()->end()));
  request.header.clear_raw_input_contents();
  for (const std::string& contents : request.owned_contents) {
    request.raw_input_contents.emplace_back();
    request.raw_input_contents.back().Append(contents.data(), contents.size());
  }
  return request;
}

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

void WireBytes::Append(const char* data, size_t size) {
  if (size == 0) return;
  if (!pieces_.empty() && pieces_.back().data + pieces_.back().size == data) {
    pieces_.back().size += size;
  } else {
    pieces_.push_back({data, size});
  }
  size_ += size;
}

void WireBytes::CopyTo(char* destination) const { CopyRangeTo(0, size_, destination); }

void WireBytes::CopyRangeTo(size_t offset, size_t size, char* destination) const {
  for (const Piece& piece : pieces_) {
    if (size == 0) return;
    if (offset >= piece.size) {
      offset -= piece.size;
      continue;
    }
    const size_t bytes = std::min(size, piece.size - offset);
    std::memcpy(destination, piece.data + offset, bytes);
    destination += bytes;
    size -= bytes;
    offset = 0;
  }
}

absl::StatusOr<WireInferRequest> ParseWireInferRequest(const grpc::ByteBuffer& buffer) {
  WireInferRequest request;
  if (!buffer.Valid()) return request;  // an empty message
  if (!buffer.Dump(&request.slices).ok()) return Malformed("its bytes cannot be read");
  SliceCursor cursor(request.slices);
  // Every field but raw_input_contents, as it was on the wire; parsed at the
  // end, which merges repeated occurrences exactly as a whole parse would.
  std::string rest;
  while (cursor.remaining() > 0) {
    std::string tag_bytes;
    cursor.set_record(&tag_bytes);
    uint64_t tag = 0;
    if (!cursor.ReadVarint(&tag)) return Malformed("truncated field tag");
    cursor.set_record(nullptr);
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    // Group encodings, and tags wider than 32 bits (protobuf reads a 5-byte
    // tag and drops the bits past 32), are left to protobuf's own parser, so
    // that exactly what protobuf accepts is accepted.
    if (wire_type == kStartGroup || wire_type == kEndGroup || tag > UINT32_MAX) {
      return ParseWhole(std::move(request.slices));
    }
    if (field == 0) return Malformed("invalid field tag");
    if (field == kRawInputContentsField && wire_type == kLengthDelimited) {
      uint64_t length = 0;
      if (!cursor.ReadVarint(&length) || length > cursor.remaining()) {
        return Malformed("raw_input_contents runs past the end of the message");
      }
      WireBytes& contents = request.raw_input_contents.emplace_back();
      cursor.Take(length, [&](const char* data, size_t n) { contents.Append(data, n); });
      continue;
    }
    rest += tag_bytes;
    cursor.set_record(&rest);
    bool ok = false;
    switch (wire_type) {
      case kVarint: {
        uint64_t value;
        ok = cursor.ReadVarint(&value);
        break;
      }
      case kFixed64:
        ok = cursor.Skip(8);
        break;
      case kFixed32:
        ok = cursor.Skip(4);
        break;
      case kLengthDelimited: {
        uint64_t length = 0;
        ok = cursor.ReadVarint(&length) && length <= cursor.remaining() && cursor.Skip(length);
        break;
      }
      default:
        break;  // wire types 6 and 7 do not exist
    }
    cursor.set_record(nullptr);
    if (!ok) return Malformed(absl::StrCat("field ", field, " is truncated or invalid"));
  }
  if (!request.header.ParseFromString(rest)) return Malformed("protobuf rejects its fields");
  return request;
}

grpc::ByteBuffer SerializeWireInferResponse(const inference::ModelInferResponse& header,
                                            std::vector<grpc::Slice> raw_output_contents) {
  std::string head = header.SerializeAsString();
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * raw_output_contents.size() + 1);
  // Each entry: its tag and length (appended to the bytes before it), then
  // its own slice.
  std::string prefix = std::move(head);
  for (grpc::Slice& contents : raw_output_contents) {
    AppendVarint((kRawOutputContentsField << 3) | kLengthDelimited, &prefix);
    AppendVarint(contents.size(), &prefix);
    slices.emplace_back(prefix);
    prefix.clear();
    if (contents.size() > 0) slices.push_back(std::move(contents));
  }
  if (!prefix.empty()) slices.emplace_back(prefix);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace fuseserve
