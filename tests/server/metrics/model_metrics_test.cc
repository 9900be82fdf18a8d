#include "server/metrics/model_metrics.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics_registry.h"

namespace fuseserve {
namespace {

const absl::Time kBase = absl::FromUnixSeconds(1700000000);

absl::Time At(int64_t ns) { return kBase + absl::Nanoseconds(ns); }

// Every point set, at odd ns offsets so that any µs rounding would show.
RequestTimestamps FullTimestamps() {
  RequestTimestamps t;
  t.received = At(0);
  t.enqueued = At(1'001);
  t.exec_start = At(5'003);
  t.input_done = At(12'010);
  t.infer_done = At(1'012'345);
  t.output_done = At(1'020'000);
  return t;
}
const absl::Time kFinished = At(1'020'777);

class ModelMetricsTest : public ::testing::Test {
 protected:
  std::unique_ptr<MetricsRegistry> registry_ = MetricsRegistry::Create();
  ModelMetrics& metrics_ = registry_->ForModel("m", "1");
};

TEST_F(ModelMetricsTest, SnapshotStartsEmpty) {
  const ModelStatisticsSnapshot s = metrics_.Snapshot();
  EXPECT_EQ(s.last_inference_ms, 0u);
  EXPECT_EQ(s.inference_count, 0u);
  EXPECT_EQ(s.execution_count, 0u);
  EXPECT_EQ(s.success.count, 0u);
  EXPECT_EQ(s.fail.count, 0u);
  EXPECT_TRUE(s.batch_stats.empty());
}

TEST_F(ModelMetricsTest, SuccessAddsExactNanosecondDurations) {
  metrics_.RecordSuccess(FullTimestamps(), 3, kFinished);
  metrics_.RecordSuccess(FullTimestamps(), 1, kFinished);
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  EXPECT_EQ(s.success.count, 2u);
  EXPECT_EQ(s.success.ns, 2u * 1'020'777);
  EXPECT_EQ(s.queue.count, 2u);
  EXPECT_EQ(s.queue.ns, 2u * (5'003 - 1'001));
  EXPECT_EQ(s.compute_input.count, 2u);
  EXPECT_EQ(s.compute_input.ns, 2u * (12'010 - 5'003));
  EXPECT_EQ(s.compute_infer.count, 2u);
  EXPECT_EQ(s.compute_infer.ns, 2u * (1'012'345 - 12'010));
  EXPECT_EQ(s.compute_output.count, 2u);
  EXPECT_EQ(s.compute_output.ns, 2u * (1'020'000 - 1'012'345));
  EXPECT_EQ(s.fail.count, 0u);
}

TEST_F(ModelMetricsTest, InferenceCountSumsBatchSizesOfSuccessfulRequestsOnly) {
  metrics_.RecordSuccess(FullTimestamps(), 3, kFinished);
  metrics_.RecordSuccess(FullTimestamps(), 5, kFinished);
  metrics_.RecordFailure(FailureReason::kBackend, FullTimestamps(), kFinished);
  metrics_.RecordExecution(9, absl::ZeroDuration(), absl::ZeroDuration(), absl::ZeroDuration());
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  EXPECT_EQ(s.inference_count, 8u);
  EXPECT_EQ(s.execution_count, 1u);
}

TEST_F(ModelMetricsTest, NegativeBatchSizeCountsNoInferences) {
  metrics_.RecordSuccess(FullTimestamps(), -4, kFinished);
  const ModelStatisticsSnapshot s = metrics_.Snapshot();
  EXPECT_EQ(s.inference_count, 0u);
  EXPECT_EQ(s.success.count, 1u);
}

TEST_F(ModelMetricsTest, FailureAddsEndToEndDurationToFailOnly) {
  RequestTimestamps rejected;
  rejected.received = At(0);
  rejected.enqueued = At(100);
  metrics_.RecordFailure(FailureReason::kRejected, rejected, At(250'000));
  metrics_.RecordFailure(FailureReason::kCanceled, rejected, At(7));
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  EXPECT_EQ(s.fail.count, 2u);
  EXPECT_EQ(s.fail.ns, 250'007u);
  EXPECT_EQ(s.success.count, 0u);
  EXPECT_EQ(s.queue.count, 0u);
  EXPECT_EQ(s.queue.ns, 0u);
  EXPECT_EQ(s.inference_count, 0u);
}

TEST_F(ModelMetricsTest, UnsetTimestampsCountAsZeroDuration) {
  RequestTimestamps only_received;
  only_received.received = At(0);
  metrics_.RecordSuccess(only_received, 1, At(40));
  metrics_.RecordFailure(FailureReason::kOther, RequestTimestamps(), At(40));
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  EXPECT_EQ(s.success.count, 1u);
  EXPECT_EQ(s.success.ns, 40u);
  EXPECT_EQ(s.queue.count, 1u);
  EXPECT_EQ(s.queue.ns, 0u);
  EXPECT_EQ(s.compute_input.ns, 0u);
  EXPECT_EQ(s.compute_infer.ns, 0u);
  EXPECT_EQ(s.compute_output.ns, 0u);
  EXPECT_EQ(s.fail.count, 1u);
  EXPECT_EQ(s.fail.ns, 0u);
}

TEST_F(ModelMetricsTest, EndBeforeStartCountsAsZeroNotNegative) {
  RequestTimestamps t = FullTimestamps();
  t.exec_start = t.enqueued - absl::Nanoseconds(5);
  metrics_.RecordSuccess(t, 1, t.received - absl::Nanoseconds(1));
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  EXPECT_EQ(s.success.ns, 0u);
  EXPECT_EQ(s.queue.ns, 0u);
}

TEST_F(ModelMetricsTest, ExecutionsAreGroupedByBatchSize) {
  metrics_.RecordExecution(4, absl::Nanoseconds(10), absl::Nanoseconds(200),
                           absl::Nanoseconds(3'000));
  metrics_.RecordExecution(4, absl::Nanoseconds(1), absl::Nanoseconds(2), absl::Nanoseconds(3));
  metrics_.RecordExecution(1, absl::Nanoseconds(7), absl::Nanoseconds(8), absl::Nanoseconds(9));
  metrics_.RecordExecution(2, -absl::Nanoseconds(7), absl::Nanoseconds(8), absl::Nanoseconds(9));
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  EXPECT_EQ(s.execution_count, 4u);
  ASSERT_EQ(s.batch_stats.size(), 3u);
  const BatchStat& four = s.batch_stats.at(4);
  EXPECT_EQ(four.compute_input.count, 2u);
  EXPECT_EQ(four.compute_input.ns, 11u);
  EXPECT_EQ(four.compute_infer.count, 2u);
  EXPECT_EQ(four.compute_infer.ns, 202u);
  EXPECT_EQ(four.compute_output.count, 2u);
  EXPECT_EQ(four.compute_output.ns, 3'003u);
  EXPECT_EQ(s.batch_stats.at(1).compute_infer.ns, 8u);
  EXPECT_EQ(s.batch_stats.at(2).compute_input.count, 1u);
  EXPECT_EQ(s.batch_stats.at(2).compute_input.ns, 0u);
  // Executions do not touch the per-request statistics.
  EXPECT_EQ(s.compute_infer.count, 0u);
  EXPECT_EQ(s.inference_count, 0u);
}

TEST_F(ModelMetricsTest, LastInferenceMsIsTheWallClockOfTheLatestRecord) {
  const uint64_t before = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  metrics_.RecordFailure(FailureReason::kOther, FullTimestamps(), kFinished);
  const uint64_t after = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  const uint64_t last = metrics_.Snapshot().last_inference_ms;

  EXPECT_GE(last, before);
  EXPECT_LE(last, after);
}

TEST_F(ModelMetricsTest, ModelVersionsAreIndependent) {
  ModelMetrics& other_version = registry_->ForModel("m", "2");
  ModelMetrics& other_model = registry_->ForModel("n", "1");
  metrics_.RecordSuccess(FullTimestamps(), 2, kFinished);
  other_version.RecordFailure(FailureReason::kBackend, FullTimestamps(), kFinished);

  EXPECT_EQ(metrics_.Snapshot().success.count, 1u);
  EXPECT_EQ(metrics_.Snapshot().fail.count, 0u);
  EXPECT_EQ(other_version.Snapshot().success.count, 0u);
  EXPECT_EQ(other_version.Snapshot().fail.count, 1u);
  EXPECT_EQ(other_model.Snapshot().success.count, 0u);
  EXPECT_EQ(other_model.Snapshot().fail.count, 0u);
  EXPECT_EQ(other_model.Snapshot().last_inference_ms, 0u);
}

TEST_F(ModelMetricsTest, ConcurrentRecordingSumsExactly) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([this, i] {
      for (int j = 0; j < kPerThread; ++j) {
        metrics_.RecordSuccess(FullTimestamps(), 1 + i, kFinished);
        metrics_.RecordFailure(FailureReason::kRejected, FullTimestamps(), At(3));
        metrics_.RecordExecution(1 + i, absl::Nanoseconds(1), absl::Nanoseconds(2),
                                 absl::Nanoseconds(3));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const ModelStatisticsSnapshot s = metrics_.Snapshot();

  const uint64_t n = kThreads * kPerThread;
  EXPECT_EQ(s.success.count, n);
  EXPECT_EQ(s.success.ns, n * 1'020'777);
  EXPECT_EQ(s.compute_infer.ns, n * (1'012'345 - 12'010));
  EXPECT_EQ(s.fail.count, n);
  EXPECT_EQ(s.fail.ns, n * 3);
  EXPECT_EQ(s.inference_count, uint64_t{kPerThread} * (1 + 2 + 3 + 4));
  EXPECT_EQ(s.execution_count, n);
  ASSERT_EQ(s.batch_stats.size(), 4u);
  for (const auto& [size, stat] : s.batch_stats) {
    EXPECT_EQ(stat.compute_output.count, uint64_t{kPerThread}) << "batch size " << size;
    EXPECT_EQ(stat.compute_output.ns, uint64_t{kPerThread} * 3) << "batch size " << size;
  }
}

}  // namespace
}  // namespace fuseserve
