#include "server/runtime/cpu_instance.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Batch = std::vector<std::unique_ptr<InferenceRequest>>;

// A clock that moves 1 ms forward on every reading, so that each phase of an
// execution has a distinct, known duration.
class SteppingClock : public Clock {
 public:
  static constexpr absl::Duration kStep = absl::Milliseconds(1);

  absl::Time Now() const override { return start_ + kStep * readings_.fetch_add(1); }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ADD_FAILURE() << "an instance never waits on the clock";
    return condition.Eval();
  }

  absl::Time start() const { return start_; }

 private:
  const absl::Time start_ = absl::FromUnixSeconds(1'700'000'000);
  mutable std::atomic<int64_t> readings_{0};
};

// What one call of RunOnCpu saw.
struct RunCall {
  const float* input;
  Shape input_shape;
  float* output;
};

// y = 2x + 1, same shape as the input. Records every call; fails on request.
class AffineModel : public Model {
 public:
  const std::string& family() const override { return family_; }
  Precision precision() const override { return Precision::kFp32; }

  absl::StatusOr<Shape> OutputShape(const Shape& input_shape) const override {
    if (!shape_error_.ok()) return shape_error_;
    return input_shape;
  }

  absl::Status RunOnCpu(const float* input, const Shape& input_shape, float* output,
                        ThreadPool& pool) const override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({input, input_shape, output});
    if (!run_error_.ok()) return run_error_;
    for (int64_t i = 0; i < NumElements(input_shape); ++i) output[i] = 2.0f * input[i] + 1.0f;
    return absl::OkStatus();
  }

  void FailRuns(absl::Status status) { run_error_ = std::move(status); }
  void RejectShapes(absl::Status status) { shape_error_ = std::move(status); }

  std::vector<RunCall> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  std::string family_ = "affine";
  absl::Status run_error_;
  absl::Status shape_error_;
  mutable absl::Mutex mu_;
  mutable std::vector<RunCall> calls_ ABSL_GUARDED_BY(mu_);
};

struct Execution {
  int64_t batch_size;
  absl::Duration compute_input;
  absl::Duration compute_infer;
  absl::Duration compute_output;
};

class RecordingMetrics : public ModelMetrics {
 public:
  void RecordSuccess(const RequestTimestamps&, int64_t, absl::Time) override {
    ADD_FAILURE() << "requests are recorded by whoever answers them, not by the instance";
  }
  void RecordFailure(FailureReason, const RequestTimestamps&, absl::Time) override {
    ADD_FAILURE() << "requests are recorded by whoever answers them, not by the instance";
  }
  void RecordExecution(int64_t batch_size, absl::Duration compute_input,
                       absl::Duration compute_infer, absl::Duration compute_output) override {
    executions.push_back({batch_size, compute_input, compute_infer, compute_output});
  }
  void AddPending(int64_t) override { ADD_FAILURE() << "the instance has no queue"; }
  ModelStatisticsSnapshot Snapshot() const override { return {}; }

  std::vector<Execution> executions;
};

// What happened to one request: its answers and the outputs it was given.
struct Outcome {
  int answers = 0;
  absl::Status status;
  RequestTimestamps timestamps;
  std::vector<Shape> allocated_shapes;
  std::vector<float> output;
};

// A request of `shape` (leading dimension = batch size) whose input is
// `input`, writing into `outcome`.
std::unique_ptr<InferenceRequest> MakeRequest(const Shape& shape, const std::vector<float>& input,
                                              Outcome* outcome) {
  auto request = std::make_unique<InferenceRequest>();
  request->input_shape = shape;
  request->batch_size = shape.front();
  request->input = input.data();
  request->allocate_output = [outcome](const Shape& output_shape) {
    outcome->allocated_shapes.push_back(output_shape);
    outcome->output.assign(NumElements(output_shape), -1.0f);
    return outcome->output.data();
  };
  request->on_complete = [outcome](const absl::Status& status,
                                   const RequestTimestamps& timestamps) {
    ++outcome->answers;
    outcome->status = status;
    outcome->timestamps = timestamps;
  };
  return request;
}

std::vector<float> Values(int64_t count, float first) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = first + static_cast<float>(i);
  return values;
}

std::vector<float> Affine(const std::vector<float>& values) {
  std::vector<float> result;
  for (float value : values) result.push_back(2.0f * value + 1.0f);
  return result;
}

class CpuInstanceTest : public ::testing::Test {
 protected:
  CpuInstanceTest() : instance_("cpu#0", &model_, &pool_, &clock_, &metrics_) {}

  AffineModel model_;
  ThreadPool pool_{1};
  SteppingClock clock_;
  RecordingMetrics metrics_;
  CpuInstance instance_;
};

TEST_F(CpuInstanceTest, ReportsItsNameAndHealth) {
  EXPECT_EQ(instance_.name(), "cpu#0");
  EXPECT_TRUE(instance_.healthy());
}

TEST_F(CpuInstanceTest, ComputesSingleRequestFromItsInputStraightIntoItsOutput) {
  const std::vector<float> input = Values(6, 0.0f);
  Outcome outcome;
  Batch batch;
  batch.push_back(MakeRequest({2, 3}, input, &outcome));

  instance_.Execute(batch);

  EXPECT_EQ(outcome.answers, 1);
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_THAT(outcome.allocated_shapes, ElementsAre(Shape{2, 3}));
  EXPECT_THAT(outcome.output, ElementsAreArray(Affine(input)));
  const std::vector<RunCall> calls = model_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].input, input.data()) << "the single request's input was copied";
  EXPECT_EQ(calls[0].output, outcome.output.data()) << "the output was not written in place";
  EXPECT_EQ(calls[0].input_shape, (Shape{2, 3}));
}

TEST_F(CpuInstanceTest, GathersSeveralRequestsAndGivesEachItsOwnSlice) {
  const std::vector<float> input_a = Values(1 * 3, 0.0f);
  const std::vector<float> input_b = Values(2 * 3, 100.0f);
  const std::vector<float> input_c = Values(3 * 3, 200.0f);
  Outcome a, b, c;
  Batch batch;
  batch.push_back(MakeRequest({1, 3}, input_a, &a));
  batch.push_back(MakeRequest({2, 3}, input_b, &b));
  batch.push_back(MakeRequest({3, 3}, input_c, &c));

  instance_.Execute(batch);

  const std::vector<RunCall> calls = model_.calls();
  ASSERT_EQ(calls.size(), 1u) << "one batch is one execution";
  EXPECT_EQ(calls[0].input_shape, (Shape{6, 3}));
  for (const Outcome* outcome : {&a, &b, &c}) {
    EXPECT_EQ(outcome->answers, 1);
    EXPECT_TRUE(outcome->status.ok()) << outcome->status;
    ASSERT_EQ(outcome->allocated_shapes.size(), 1u);
  }
  EXPECT_EQ(a.allocated_shapes[0], (Shape{1, 3}));
  EXPECT_EQ(b.allocated_shapes[0], (Shape{2, 3}));
  EXPECT_EQ(c.allocated_shapes[0], (Shape{3, 3}));
  EXPECT_THAT(a.output, ElementsAreArray(Affine(input_a)));
  EXPECT_THAT(b.output, ElementsAreArray(Affine(input_b)));
  EXPECT_THAT(c.output, ElementsAreArray(Affine(input_c)));
}

TEST_F(CpuInstanceTest, CountsHostCopiesOfEachRequest) {
  const std::vector<float> input = Values(3, 0.0f);
  Outcome single;
  Batch alone;
  alone.push_back(MakeRequest({1, 3}, input, &single));
  instance_.Execute(alone);
  EXPECT_EQ(alone[0]->host_copies, 0) << "a batch of one is computed in place";

  Outcome a, b;
  Batch gathered;
  gathered.push_back(MakeRequest({1, 3}, input, &a));
  gathered.push_back(MakeRequest({1, 3}, input, &b));
  instance_.Execute(gathered);
  for (const auto& request : gathered) {
    EXPECT_EQ(request->host_copies, 2) << "gathered in, scattered out";
  }
}

TEST_F(CpuInstanceTest, ReadsInputsThatAreOnlyReachableThroughCopyInput) {
  // An input left in the transport's pieces: no pointer, a copy function.
  const std::vector<float> input_a = Values(2 * 3, 5.0f);
  const std::vector<float> input_b = Values(1 * 3, 50.0f);
  for (const bool batched : {false, true}) {
    SCOPED_TRACE(batched ? "batched" : "alone");
    Outcome a, b;
    Batch batch;
    batch.push_back(MakeRequest({2, 3}, input_a, &a));
    if (batched) batch.push_back(MakeRequest({1, 3}, input_b, &b));
    for (auto& request : batch) {
      const float* data = request->input;
      request->input = nullptr;
      request->copy_input = [data](size_t offset, size_t size, char* destination) {
        std::memcpy(destination, reinterpret_cast<const char*>(data) + offset, size);
      };
    }
    instance_.Execute(batch);
    EXPECT_TRUE(a.status.ok()) << a.status;
    EXPECT_THAT(a.output, ElementsAreArray(Affine(input_a)));
    EXPECT_EQ(batch[0]->host_copies, batched ? 2 : 1);
    if (batched) {
      EXPECT_THAT(b.output, ElementsAreArray(Affine(input_b)));
    }
  }
}

TEST_F(CpuInstanceTest, KeepsNonBatchDimensionsOfGatheredRequests) {
  const std::vector<float> input_a = Values(1 * 2 * 2, 0.0f);
  const std::vector<float> input_b = Values(1 * 2 * 2, 50.0f);
  Outcome a, b;
  Batch batch;
  batch.push_back(MakeRequest({1, 2, 2}, input_a, &a));
  batch.push_back(MakeRequest({1, 2, 2}, input_b, &b));

  instance_.Execute(batch);

  ASSERT_EQ(model_.calls().size(), 1u);
  EXPECT_EQ(model_.calls()[0].input_shape, (Shape{2, 2, 2}));
  EXPECT_THAT(a.allocated_shapes, ElementsAre(Shape{1, 2, 2}));
  EXPECT_THAT(b.allocated_shapes, ElementsAre(Shape{1, 2, 2}));
  EXPECT_THAT(a.output, ElementsAreArray(Affine(input_a)));
  EXPECT_THAT(b.output, ElementsAreArray(Affine(input_b)));
}

// The gather and scatter buffers are reused: a smaller batch after a larger
// one must not see the larger one's data, nor a larger one overrun them.
TEST_F(CpuInstanceTest, ExecutesSuccessiveBatchesOfDifferentSizes) {
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{3, 2}, {1, 1}, {4, 1, 2}}) {
    std::vector<std::vector<float>> inputs;
    std::vector<Outcome> outcomes(sizes.size());
    Batch batch;
    for (size_t i = 0; i < sizes.size(); ++i) {
      inputs.push_back(Values(sizes[i] * 2, 10.0f * static_cast<float>(i + 1)));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      batch.push_back(MakeRequest({sizes[i], 2}, inputs[i], &outcomes[i]));
    }

    instance_.Execute(batch);

    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(outcomes[i].answers, 1);
      EXPECT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
      EXPECT_THAT(outcomes[i].output, ElementsAreArray(Affine(inputs[i])))
          << "request " << i << " of a batch of " << sizes.size();
    }
  }
}

TEST_F(CpuInstanceTest, FailingModelAnswersEveryRequestOfTheBatchWithTheError) {
  model_.FailRuns(absl::InternalError("device lost"));
  const std::vector<float> input_a = Values(3, 0.0f);
  const std::vector<float> input_b = Values(6, 0.0f);
  Outcome a, b;
  Batch batch;
  batch.push_back(MakeRequest({1, 3}, input_a, &a));
  batch.push_back(MakeRequest({2, 3}, input_b, &b));

  instance_.Execute(batch);

  for (const Outcome* outcome : {&a, &b}) {
    EXPECT_EQ(outcome->answers, 1);
    EXPECT_EQ(outcome->status.code(), absl::StatusCode::kInternal) << outcome->status;
    EXPECT_THAT(outcome->status.message(), HasSubstr("device lost"));
    EXPECT_THAT(outcome->status.message(), HasSubstr("cpu#0"));
    EXPECT_TRUE(outcome->allocated_shapes.empty()) << "a failed batch wrote an output";
  }
}

// ModelMetrics::RecordExecution counts every execution "successful or not",
// and Instance::Execute records the execution whatever its outcome.
TEST_F(CpuInstanceTest, RecordsFailedExecutionWithTheTotalBatchSize) {
  model_.FailRuns(absl::InternalError("device lost"));
  const std::vector<float> input_a = Values(3, 0.0f);
  const std::vector<float> input_b = Values(6, 0.0f);
  Outcome a, b;
  Batch batch;
  batch.push_back(MakeRequest({1, 3}, input_a, &a));
  batch.push_back(MakeRequest({2, 3}, input_b, &b));

  instance_.Execute(batch);

  ASSERT_EQ(metrics_.executions.size(), 1u);
  EXPECT_EQ(metrics_.executions[0].batch_size, 3);
}

TEST_F(CpuInstanceTest, FailingModelAnswersSingleRequestWithTheError) {
  model_.FailRuns(absl::InternalError("device lost"));
  const std::vector<float> input = Values(3, 0.0f);
  Outcome outcome;
  Batch batch;
  batch.push_back(MakeRequest({1, 3}, input, &outcome));

  instance_.Execute(batch);

  EXPECT_EQ(outcome.answers, 1);
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kInternal) << outcome.status;
  EXPECT_THAT(outcome.status.message(), HasSubstr("device lost"));
}

TEST_F(CpuInstanceTest, ShapeRejectedByModelAnswersEveryRequestWithoutRunning) {
  model_.RejectShapes(absl::InvalidArgumentError("width 7 is too small"));
  const std::vector<float> input = Values(3, 0.0f);
  Outcome a, b;
  Batch batch;
  batch.push_back(MakeRequest({1, 3}, input, &a));
  batch.push_back(MakeRequest({1, 3}, input, &b));

  instance_.Execute(batch);

  EXPECT_TRUE(model_.calls().empty());
  for (const Outcome* outcome : {&a, &b}) {
    EXPECT_EQ(outcome->answers, 1);
    EXPECT_EQ(outcome->status.code(), absl::StatusCode::kInvalidArgument) << outcome->status;
    EXPECT_THAT(outcome->status.message(), HasSubstr("width 7 is too small"));
  }
}

TEST_F(CpuInstanceTest, RecordsOneExecutionWithTheTotalBatchSize) {
  const std::vector<float> input_a = Values(2, 0.0f);
  const std::vector<float> input_b = Values(4, 0.0f);
  const std::vector<float> input_c = Values(6, 0.0f);
  Outcome a, b, c;
  Batch batch;
  batch.push_back(MakeRequest({1, 2}, input_a, &a));
  batch.push_back(MakeRequest({2, 2}, input_b, &b));
  batch.push_back(MakeRequest({3, 2}, input_c, &c));

  instance_.Execute(batch);

  ASSERT_EQ(metrics_.executions.size(), 1u);
  const Execution& execution = metrics_.executions[0];
  EXPECT_EQ(execution.batch_size, 6);
  EXPECT_EQ(execution.compute_input, a.timestamps.input_done - clock_.start());
  EXPECT_EQ(execution.compute_infer, a.timestamps.infer_done - a.timestamps.input_done);
  EXPECT_EQ(execution.compute_output, a.timestamps.output_done - a.timestamps.infer_done);
  EXPECT_GT(execution.compute_infer, absl::ZeroDuration());
}

TEST_F(CpuInstanceTest, RecordsSingleRequestExecutionWithItsBatchSize) {
  const std::vector<float> input = Values(4 * 2, 0.0f);
  Outcome outcome;
  Batch batch;
  batch.push_back(MakeRequest({4, 2}, input, &outcome));

  instance_.Execute(batch);

  ASSERT_EQ(metrics_.executions.size(), 1u);
  EXPECT_EQ(metrics_.executions[0].batch_size, 4);
}

TEST_F(CpuInstanceTest, SetsInputInferAndOutputTimestampsInOrder) {
  const std::vector<float> input_a = Values(2, 0.0f);
  const std::vector<float> input_b = Values(2, 0.0f);
  Outcome a, b;
  Batch batch;
  batch.push_back(MakeRequest({1, 2}, input_a, &a));
  batch.push_back(MakeRequest({1, 2}, input_b, &b));
  const absl::Time received = clock_.start() - absl::Seconds(1);
  batch[0]->timestamps.received = received;

  instance_.Execute(batch);

  for (const Outcome* outcome : {&a, &b}) {
    const RequestTimestamps& t = outcome->timestamps;
    EXPECT_GT(t.input_done, clock_.start());
    EXPECT_GT(t.infer_done, t.input_done);
    EXPECT_GT(t.output_done, t.infer_done);
  }
  EXPECT_EQ(a.timestamps.input_done, b.timestamps.input_done) << "one batch, one timeline";
  EXPECT_EQ(a.timestamps.output_done, b.timestamps.output_done);
  EXPECT_EQ(a.timestamps.received, received) << "earlier timestamps are kept";
  EXPECT_EQ(b.timestamps.received, absl::InfinitePast());
}

TEST_F(CpuInstanceTest, RunsWithoutMetrics) {
  CpuInstance instance("cpu#1", &model_, &pool_, &clock_, nullptr);
  const std::vector<float> input = Values(2, 0.0f);
  Outcome outcome;
  Batch batch;
  batch.push_back(MakeRequest({1, 2}, input, &outcome));

  instance.Execute(batch);

  EXPECT_EQ(outcome.answers, 1);
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_THAT(outcome.output, ElementsAreArray(Affine(input)));
}

TEST_F(CpuInstanceTest, EmptyBatchDoesNothing) {
  Batch batch;

  instance_.Execute(batch);

  EXPECT_TRUE(model_.calls().empty());
  EXPECT_TRUE(metrics_.executions.empty());
}

}  // namespace
}  // namespace fuseserve
