#include "server/runtime/parallel_gather.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

using Batch = std::vector<std::unique_ptr<InferenceRequest>>;
using ::testing::ElementsAre;
using ::testing::FieldsAre;

// A request of `floats` values counting up from `first`, held in `values`.
// Contiguous (`input` set) or, when `pieces`, only reachable through
// copy_input, as gRPC's received slices are.
std::unique_ptr<InferenceRequest> Request(std::vector<float>* values, int64_t floats, float first,
                                          bool pieces) {
  values->resize(floats);
  std::iota(values->begin(), values->end(), first);
  auto request = std::make_unique<InferenceRequest>();
  request->input_shape = {1, floats};
  if (pieces) {
    const char* data = reinterpret_cast<const char*>(values->data());
    const size_t bytes = values->size() * sizeof(float);
    request->copy_input = [data, bytes](size_t offset, size_t size, char* destination) {
      ASSERT_LE(offset + size, bytes);
      std::memcpy(destination, data + offset, size);
    };
  } else {
    request->input = values->data();
  }
  return request;
}

// The stacked input that a complete gather must produce.
std::vector<float> Stacked(const std::vector<std::vector<float>>& values) {
  std::vector<float> stacked;
  for (const std::vector<float>& v : values) stacked.insert(stacked.end(), v.begin(), v.end());
  return stacked;
}

TEST(PlanGatherTest, CutsTheStackedInputIntoPiecesThatSpanRequests) {
  std::vector<std::vector<float>> values(3);
  Batch batch;
  batch.push_back(Request(&values[0], 10, 0, false));  // bytes [0, 40)
  batch.push_back(Request(&values[1], 6, 0, false));   // [40, 64)
  batch.push_back(Request(&values[2], 20, 0, false));  // [64, 144)

  EXPECT_THAT(PlanGather(batch, 32, /*skip_page_locked=*/false),
              ElementsAre(FieldsAre(0, 32), FieldsAre(32, 32), FieldsAre(64, 32),
                          FieldsAre(96, 32), FieldsAre(128, 16)));
  EXPECT_THAT(PlanGather(batch, 0, /*skip_page_locked=*/false), ElementsAre(FieldsAre(0, 144)));
}

TEST(PlanGatherTest, LeavesPageLockedInputsOutAndNeverSpansThem) {
  std::vector<std::vector<float>> values(4);
  Batch batch;
  batch.push_back(Request(&values[0], 4, 0, false));  // [0, 16)
  batch.push_back(Request(&values[1], 4, 0, false));  // [16, 32) page-locked
  batch[1]->input_pinned = true;
  batch.push_back(Request(&values[2], 2, 0, false));  // [32, 40)
  batch.push_back(Request(&values[3], 2, 0, true));   // [40, 48), pieces only
  batch[3]->input_pinned = true;  // without `input`, it must be copied on the host

  EXPECT_THAT(PlanGather(batch, 1024, /*skip_page_locked=*/true),
              ElementsAre(FieldsAre(0, 16), FieldsAre(32, 16)));
  EXPECT_THAT(PlanGather(batch, 1024, /*skip_page_locked=*/false),
              ElementsAre(FieldsAre(0, 48)));
}

TEST(PlanGatherTest, AnEmptyBatchOrEmptyInputsNeedNoPiece) {
  Batch empty;
  EXPECT_TRUE(PlanGather(empty, 64, false).empty());
  std::vector<float> none;
  Batch zero;
  zero.push_back(Request(&none, 0, 0, false));
  EXPECT_TRUE(PlanGather(zero, 64, false).empty());
}

// The whole stacked input through CopyAllTo, as the CPU instance copies it.
std::vector<float> GatherAll(Batch& batch, size_t piece_bytes, ThreadPool* pool) {
  size_t total = 0;
  for (const auto& request : batch) total += NumElements(request->input_shape);
  std::vector<float> out(total, -1.0f);
  ParallelGather(batch, PlanGather(batch, piece_bytes, false), pool)
      .CopyAllTo(reinterpret_cast<char*>(out.data()));
  return out;
}

TEST(ParallelGatherTest, EveryPieceLandsInPlaceWithOrWithoutAPool) {
  ThreadPool pool(3, "test-gather");
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    SCOPED_TRACE(p == nullptr ? "no pool" : "3 workers");
    std::vector<std::vector<float>> values(4);
    Batch batch;
    batch.push_back(Request(&values[0], 1000, 0, true));
    batch.push_back(Request(&values[1], 3, 5000, false));
    batch.push_back(Request(&values[2], 2501, 9000, true));
    batch.push_back(Request(&values[3], 77, 20000, false));
    // Pieces of 100 floats and 3 bytes: pieces end inside floats too.
    EXPECT_EQ(GatherAll(batch, 403, p), Stacked(values));
    for (const auto& request : batch) EXPECT_EQ(request->host_copies, 1);
  }
}

TEST(ParallelGatherTest, PiecesCompletedWithoutAnOfferAreCopiedByTheCaller) {
  ThreadPool pool(2, "test-gather");
  std::vector<std::vector<float>> values(1);
  Batch batch;
  batch.push_back(Request(&values[0], 4096, 1, true));
  std::vector<float> out(4096, -1.0f);
  char* base = reinterpret_cast<char*>(out.data());
  ParallelGather gather(batch, PlanGather(batch, 1024, false), &pool);
  ASSERT_EQ(gather.size(), 16u);
  // Only the odd pieces are offered.
  for (size_t i = 1; i < gather.size(); i += 2) gather.Offer(i, base + gather.piece(i).offset);
  for (size_t i = 0; i < gather.size(); ++i) gather.Complete(i, base + gather.piece(i).offset);
  EXPECT_EQ(out, values[0]);
}

// A caller that gives up half-way (an error) destroys the gather: by then no
// worker may still read a request or write a destination.
TEST(ParallelGatherTest, DestructionWaitsForThePiecesWorkersTookAndCancelsTheRest) {
  ThreadPool pool(2, "test-gather");
  std::atomic<int> copying{0};
  std::atomic<int> copies{0};
  auto request = std::make_unique<InferenceRequest>();
  request->input_shape = {1, 64 * 1024};
  request->copy_input = [&](size_t, size_t size, char* destination) {
    copying.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::memset(destination, 0, size);
    copies.fetch_add(1);
    copying.fetch_sub(1);
  };
  Batch batch;
  batch.push_back(std::move(request));
  std::vector<char> out(64 * 1024 * sizeof(float));
  {
    ParallelGather gather(batch, PlanGather(batch, 4096, false), &pool);
    ASSERT_EQ(gather.size(), 64u);
    for (size_t i = 0; i < gather.size(); ++i) gather.Offer(i, out.data() + gather.piece(i).offset);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers take a piece each
  }
  EXPECT_EQ(copying.load(), 0) << "a worker still copies after the gather is gone";
  const int taken = copies.load();
  EXPECT_LT(taken, 64) << "pieces nobody had taken were copied anyway";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the queued tasks run out
  EXPECT_EQ(copies.load(), taken);
}

// Several instances share one pool: their pieces interleave on its workers.
TEST(ParallelGatherTest, ConcurrentGathersSharingAPoolEachGetTheirOwnBytes) {
  ThreadPool pool(3, "test-gather");
  std::vector<std::thread> instances;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    instances.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        std::vector<std::vector<float>> values(3);
        Batch batch;
        for (int r = 0; r < 3; ++r) {
          batch.push_back(Request(&values[r], 700 + 31 * r + round, 10000.0f * t + 1000 * r,
                                  (r + round) % 2 == 0));
        }
        if (GatherAll(batch, 512, &pool) != Stacked(values)) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : instances) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace fuseserve
