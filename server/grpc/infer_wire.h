#pragma once

// ModelInfer messages on the wire, without copying tensor bytes (issue 6
// item 1). The service receives ModelInferRequest as a grpc::ByteBuffer: the
// small fields are parsed into a message as usual, while each
// `raw_input_contents` entry stays where the transport put it (a list of
// pieces of the received slices), to be copied once, by the instance that
// runs the request, straight into its batch's staging buffer. The answer is
// serialised the same way: the header fields as a message, each
// `raw_output_contents` entry as a slice that points at the output's own
// memory and is released when gRPC has sent it.
//
// Protobuf semantics are kept: fields in any order, repeated and merged
// scalar fields, unknown fields. Malformed input is InvalidArgument, never a
// crash or an over-read.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/grpc_service.pb.h"

namespace fuseserve {

// Bytes that may span several slices; the slices are owned by the
// WireInferRequest they came from.
class WireBytes {
 public:
  struct Piece {
    const char* data;
    size_t size;
  };

  size_t size() const { return size_; }
  const std::vector<Piece>& pieces() const { return pieces_; }

  // Copies all size() bytes to `destination`.
  void CopyTo(char* destination) const;

  // Copies bytes [offset, offset + size) (within size()) to `destination`.
  void CopyRangeTo(size_t offset, size_t size, char* destination) const;

  // Appends `size` bytes at `data` (adjacent pieces are merged).
  void Append(const char* data, size_t size);

 private:
  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

struct WireInferRequest {
  // Every field but raw_input_contents.
  inference::ModelInferRequest header;
  // The raw_input_contents entries, in order.
  std::vector<WireBytes> raw_input_contents;
  // Keep the bytes of raw_input_contents alive: the received slices, or the
  // entries themselves when the message had to be parsed as a whole (it
  // used the deprecated group encoding, which the piecewise parser does not
  // follow).
  std::vector<grpc::Slice> slices;
  std::vector<std::string> owned_contents;
};

// Parses a serialised ModelInferRequest. InvalidArgument when it is not a
// well-formed message.
absl::StatusOr<WireInferRequest> ParseWireInferRequest(const grpc::ByteBuffer& buffer);

// One raw_output_contents entry: `slice` carries the bytes (typically
// wrapping the output's buffer with a release callback, so nothing is
// copied).
grpc::ByteBuffer SerializeWireInferResponse(const inference::ModelInferResponse& header,
                                            std::vector<grpc::Slice> raw_output_contents);

}  // namespace fuseserve
