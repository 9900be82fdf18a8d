#pragma once

// One inference request as the batcher and the runtime see it: no gRPC types.
// The front end (server/grpc) builds it after validating the request against
// the model's config; the runtime answers it exactly once through
// `on_complete`.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/shape.h"

namespace fuseserve {

// Points in a request's life, on the server's clock. Unset points are
// absl::InfinitePast(). Durations reported in metrics are differences of these.
struct RequestTimestamps {
  absl::Time received = absl::InfinitePast();     // front end accepted it
  absl::Time enqueued = absl::InfinitePast();     // entered the model's queue
  absl::Time exec_start = absl::InfinitePast();   // its batch was handed to an instance
  absl::Time input_done = absl::InfinitePast();   // batch inputs staged (H2D done)
  absl::Time infer_done = absl::InfinitePast();   // compute done
  absl::Time output_done = absl::InfinitePast();  // outputs copied to the response
};

struct InferenceRequest {
  // Client-supplied id, for logs and error messages (may be empty).
  std::string id;

  // Full input shape: [batch, dims...] when the model batches
  // (max_batch_size > 0), otherwise exactly the config's dims.
  Shape input_shape;

  // Leading dimension when the model batches, else 1.
  int64_t batch_size = 1;

  // NumElements(input_shape) floats, row-major. Borrowed: the front end keeps
  // it alive until on_complete has been called. Null when the bytes are not
  // contiguous (they stay where the transport received them): copy_input
  // then places them. Instances read the input through CopyRequestInput and
  // CopyRequestInputRange (batch_io.h), or through `input` directly when it
  // is set.
  const float* input = nullptr;

  // Copies bytes [offset, offset + size) of the input (NumElements(input_shape)
  // floats) to `destination`; set when `input` is null. Same lifetime as
  // `input`. Called from several threads at once for disjoint ranges.
  std::function<void(size_t offset, size_t size, char* destination)> copy_input;

  // True when `input` lies in page-locked host memory (e.g. a shared-memory
  // region registered with CUDA): a GPU instance then copies it to the device
  // directly, without staging it first.
  bool input_pinned = false;

  // The request fails with DEADLINE_EXCEEDED if it has not started executing
  // by then. Set by the front end from the gRPC deadline; the batcher lowers it
  // further by the queue policy's timeout and `requested_timeout`.
  absl::Time deadline = absl::InfiniteFuture();

  // The request's `timeout` parameter (Triton's, in µs on the wire);
  // zero = none. Applied by the batcher under the model's queue policy.
  absl::Duration requested_timeout = absl::ZeroDuration();

  // True once the client has gone away; a request not yet executing is then
  // dropped with CANCELLED. May be empty (never cancelled).
  std::function<bool()> is_cancelled;

  // Called at most once, by the instance that runs the request, with the
  // output shape; returns where to write NumElements(output_shape) floats
  // (e.g. directly into the response message). Must not be null.
  std::function<float*(const Shape& output_shape)> allocate_output;

  // True when allocate_output returns page-locked host memory: a GPU instance
  // then calls it before the batch runs and copies the output from the device
  // straight into it (if the batch fails, what it holds is unspecified).
  bool output_pinned = false;

  // Called exactly once with the final status and the request's timestamps.
  // For an OK status the output has been written through allocate_output.
  std::function<void(const absl::Status& status,
                     const RequestTimestamps& timestamps)>
      on_complete;

  RequestTimestamps timestamps;

  // Copies of this request's tensor bytes made on the host by the server
  // (staging, answering), counted by whoever makes them: the copy budget of
  // the request path is tested against it.
  int host_copies = 0;
};

}  // namespace fuseserve
