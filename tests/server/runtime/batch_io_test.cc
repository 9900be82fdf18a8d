#include "server/runtime/batch_io.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

using Batch = std::vector<std::unique_ptr<InferenceRequest>>;

std::unique_ptr<InferenceRequest> Request(const Shape& shape, int64_t batch_size) {
  auto request = std::make_unique<InferenceRequest>();
  request->input_shape = shape;
  request->batch_size = batch_size;
  return request;
}

TEST(BatchIoTest, StackedShapeSumsLeadingDimensions) {
  Batch batch;
  batch.push_back(Request({1, 3, 5}, 1));
  batch.push_back(Request({4, 3, 5}, 4));
  batch.push_back(Request({2, 3, 5}, 2));

  EXPECT_EQ(StackedInputShape(batch), (Shape{7, 3, 5}));
}

TEST(BatchIoTest, StackedShapeOfSingleRequestIsItsOwnShape) {
  Batch batching;
  batching.push_back(Request({3, 8}, 3));
  EXPECT_EQ(StackedInputShape(batching), (Shape{3, 8}));

  // A model that does not batch: the leading dimension is not a batch.
  Batch non_batching;
  non_batching.push_back(Request({5, 8}, 1));
  EXPECT_EQ(StackedInputShape(non_batching), (Shape{5, 8}));
}

TEST(BatchIoTest, RequestOutputShapeTakesTheRequestsBatchSize) {
  const auto request = Request({2, 3}, 2);

  EXPECT_EQ(RequestOutputShape({7, 6, 4}, *request, 3), (Shape{2, 6, 4}));
}

TEST(BatchIoTest, RequestOutputShapeOfSingleRequestIsTheWholeOutput) {
  const auto request = Request({5, 8}, 1);

  EXPECT_EQ(RequestOutputShape({5, 16}, *request, 1), (Shape{5, 16}));
}

TEST(BatchIoTest, CompleteBatchAnswersEveryRequestOnceWithItsTimestamps) {
  std::vector<int> answers(3, 0);
  std::vector<absl::Status> statuses(3);
  std::vector<absl::Time> received(3);
  Batch batch;
  for (int i = 0; i < 3; ++i) {
    auto request = Request({1, 2}, 1);
    request->timestamps.received = absl::FromUnixSeconds(100 + i);
    request->on_complete = [&, i](const absl::Status& status, const RequestTimestamps& timestamps) {
      ++answers[i];
      statuses[i] = status;
      received[i] = timestamps.received;
    };
    batch.push_back(std::move(request));
  }

  CompleteBatch(batch, absl::UnavailableError("draining"));

  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(answers[i], 1) << i;
    EXPECT_EQ(statuses[i], absl::UnavailableError("draining")) << i;
    EXPECT_EQ(received[i], absl::FromUnixSeconds(100 + i)) << i;
  }
}

}  // namespace
}  // namespace fuseserve
