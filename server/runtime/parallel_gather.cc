#include "server/runtime/parallel_gather.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <utility>

#include "absl/synchronization/notification.h"
#include "server/runtime/batch_io.h"

namespace fuseserve {
namespace {

size_t InputBytes(const InferenceRequest& request) {
  return static_cast<size_t>(NumElements(request.input_shape)) * sizeof(float);
}

bool CopiedToDeviceDirectly(const InferenceRequest& request) {
  return request.input_pinned && request.input != nullptr;
}

// Who copies a piece.
enum Owner : int { kNobody = 0, kWorker = 1, kCaller = 2 };

}  // namespace

std::vector<GatherPiece> PlanGather(const std::vector<std::unique_ptr<InferenceRequest>>& batch,
                                    size_t piece_bytes, bool skip_page_locked) {
  if (piece_bytes == 0) piece_bytes = std::numeric_limits<size_t>::max();
  std::vector<GatherPiece> pieces;
  size_t offset = 0;
  bool open = false;  // the last piece may still grow
  for (const auto& request : batch) {
    const size_t bytes = InputBytes(*request);
    if (skip_page_locked && CopiedToDeviceDirectly(*request)) {
      open = false;
      offset += bytes;
      continue;
    }
    size_t left = bytes;
    while (left > 0) {
      if (!open || pieces.back().bytes == piece_bytes) {
        pieces.push_back({offset, 0});
        open = true;
      }
      const size_t take = std::min(left, piece_bytes - pieces.back().bytes);
      pieces.back().bytes += take;
      offset += take;
      left -= take;
    }
  }
  return pieces;
}

namespace {

// Copies the bytes of `batch`'s stacked input that fall in `piece` to
// `destination`.
void CopyPiece(const std::vector<std::unique_ptr<InferenceRequest>>& batch, GatherPiece piece,
               char* destination) {
  const size_t end = piece.offset + piece.bytes;
  size_t start = 0;  // of the request
  for (const auto& request : batch) {
    if (start >= end) return;
    const size_t bytes = InputBytes(*request);
    const size_t from = std::max(start, piece.offset);
    const size_t to = std::min(start + bytes, end);
    if (from < to) {
      CopyRequestInputRange(*request, from - start, to - from, destination + (from - piece.offset));
    }
    start += bytes;
  }
}

}  // namespace

// What the pool's workers share with the caller, once a piece is offered.
struct ParallelGather::State {
  State(const std::vector<std::unique_ptr<InferenceRequest>>* batch_in,
        const std::vector<GatherPiece>& pieces_in)
      : batch(batch_in),
        pieces(pieces_in),
        owners(new std::atomic<int>[pieces.size()]),
        copied(new absl::Notification[pieces.size()]),
        destinations(pieces.size(), nullptr) {
    for (size_t i = 0; i < pieces.size(); ++i) owners[i].store(kNobody, std::memory_order_relaxed);
  }

  const std::vector<std::unique_ptr<InferenceRequest>>* const batch;
  const std::vector<GatherPiece> pieces;
  std::unique_ptr<std::atomic<int>[]> owners;    // Owner, per piece
  std::unique_ptr<absl::Notification[]> copied;  // notified by the worker that copied it
  std::vector<char*> destinations;               // of offered pieces, set before posting
};

ParallelGather::ParallelGather(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                               std::vector<GatherPiece> pieces, ThreadPool* pool)
    : batch_(&batch),
      pieces_(std::move(pieces)),
      pool_(pool != nullptr && pool->num_workers() > 0 && pieces_.size() > 1 ? pool : nullptr) {
  // A request is covered by the pieces entirely or not at all.
  size_t next = 0;
  size_t start = 0;
  for (const auto& request : batch) {
    while (next < pieces_.size() && pieces_[next].offset + pieces_[next].bytes <= start) ++next;
    const size_t bytes = InputBytes(*request);
    if (bytes > 0 && next < pieces_.size() && pieces_[next].offset <= start) {
      ++request->host_copies;
    }
    start += bytes;
  }
}

ParallelGather::~ParallelGather() {
  if (state_ == nullptr) return;  // nothing was offered
  // First take every piece nobody has taken, so that workers stop taking
  // any; then wait for the ones they took.
  std::vector<size_t> taken;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    int owner = kNobody;
    if (!state_->owners[i].compare_exchange_strong(owner, kCaller, std::memory_order_acq_rel) &&
        owner == kWorker) {
      taken.push_back(i);
    }
  }
  for (size_t i : taken) state_->copied[i].WaitForNotification();
}

size_t ParallelGather::size() const { return pieces_.size(); }

const GatherPiece& ParallelGather::piece(size_t index) const { return pieces_[index]; }

void ParallelGather::Offer(size_t index, char* destination) {
  if (pool_ == nullptr) return;
  if (state_ == nullptr) state_ = std::make_shared<State>(batch_, pieces_);
  state_->destinations[index] = destination;
  pool_->Post([state = state_, index] {
    int owner = kNobody;
    if (!state->owners[index].compare_exchange_strong(owner, kWorker,
                                                      std::memory_order_acq_rel)) {
      return;  // the caller copied it, or gave up on the gather
    }
    CopyPiece(*state->batch, state->pieces[index], state->destinations[index]);
    state->copied[index].Notify();
  });
}

void ParallelGather::Complete(size_t index, char* destination) {
  int owner = kNobody;
  if (state_ == nullptr ||
      state_->owners[index].compare_exchange_strong(owner, kCaller, std::memory_order_acq_rel)) {
    CopyPiece(*batch_, pieces_[index], destination);
    return;
  }
  state_->copied[index].WaitForNotification();
}

void ParallelGather::CopyAllTo(char* stacked) {
  for (size_t i = 1; i < pieces_.size(); ++i) Offer(i, stacked + pieces_[i].offset);
  for (size_t i = 0; i < pieces_.size(); ++i) Complete(i, stacked + pieces_[i].offset);
}

}  // namespace fuseserve
