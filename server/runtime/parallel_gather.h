#pragma once

// A batch's inputs copied into place on the host in pieces, by several
// threads at once (issue 6 item 1).
//
// Why: over gRPC a tensor stays in the slices it was received in (64 KiB
// each) until its batch runs, and one thread copies them out at ~7 GB/s. For
// a 1x64x512x512 GroupNorm request (64 MiB) that copy was 9 of the server's
// 12 ms at concurrency 1 on an H100 (the rest: 1.3 ms of H2D, 0.06 ms of
// kernels). Pieces let the workers of a ThreadPool copy alongside the
// instance's own thread, and let a GPU instance start each piece's transfer
// to the device as soon as it is in place.
//
// The instance plans the pieces (PlanGather), offers those whose destination
// is free to the pool (Offer), and completes them in order (Complete): a
// piece no worker has taken yet is copied by the caller itself, so progress
// never depends on the pool having a free worker. The destructor waits for
// the pieces that workers took, so that no worker reads a request or writes
// a destination after the gather is gone, however the caller leaves (an
// error half-way included).

#include <cstddef>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "server/runtime/inference_request.h"

namespace fuseserve {

// Bytes [offset, offset + bytes) of a batch's stacked input.
struct GatherPiece {
  size_t offset = 0;
  size_t bytes = 0;
};

// The stacked input of `batch` (each request's NumElements(input_shape)
// floats, request after request) cut into pieces of at most `piece_bytes`
// (0: no limit), in order. With `skip_page_locked`, the requests whose input lies in
// page-locked memory (`input_pinned` with `input` set) are left out, and no
// piece spans one: a GPU instance copies those to the device directly.
std::vector<GatherPiece> PlanGather(const std::vector<std::unique_ptr<InferenceRequest>>& batch,
                                    size_t piece_bytes, bool skip_page_locked);

class ParallelGather {
 public:
  // Copies `pieces` of `batch`'s stacked input; `pool` may be null (the
  // caller copies every piece). Counts one host copy for each request that
  // the pieces cover. The batch's requests must outlive this object.
  ParallelGather(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                 std::vector<GatherPiece> pieces, ThreadPool* pool);
  // Waits for the pieces that workers took; the others are never copied.
  ~ParallelGather();
  ParallelGather(const ParallelGather&) = delete;
  ParallelGather& operator=(const ParallelGather&) = delete;

  size_t size() const;
  const GatherPiece& piece(size_t index) const;

  // From now on a worker of the pool may copy piece `index` to `destination`
  // (room for the piece's bytes). Nothing without a pool with workers, or
  // for a gather of one piece. At most once per piece, before
  // Complete(index).
  void Offer(size_t index, char* destination);

  // Returns once piece `index` is at `destination` (the one it was offered
  // with, if it was): copies it on this thread unless a worker took it, else
  // waits for that worker. At most once per piece.
  void Complete(size_t index, char* destination);

  // Every piece to `stacked` + its offset (room for the whole stacked input):
  // offers all but the first, then completes them in order. Instead of
  // Offer and Complete.
  void CopyAllTo(char* stacked);

 private:
  struct State;
  const std::vector<std::unique_ptr<InferenceRequest>>* const batch_;
  const std::vector<GatherPiece> pieces_;
  ThreadPool* const pool_;         // null: the caller copies every piece
  std::shared_ptr<State> state_;   // made by the first Offer

};

}  // namespace fuseserve
