#include "server/metrics/metrics_registry.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

using ::testing::Contains;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n'); }

// A request received at `received` that reaches the queue 10 µs later,
// waits `queue`, runs `input`, `infer` and `output`, and is answered 20 µs
// after its outputs are copied.
struct Request {
  RequestTimestamps timestamps;
  absl::Time finished;
};

Request MakeRequest(absl::Time received, absl::Duration queue, absl::Duration input,
                    absl::Duration infer, absl::Duration output) {
  Request r;
  r.timestamps.received = received;
  r.timestamps.enqueued = received + absl::Microseconds(10);
  r.timestamps.exec_start = r.timestamps.enqueued + queue;
  r.timestamps.input_done = r.timestamps.exec_start + input;
  r.timestamps.infer_done = r.timestamps.input_done + infer;
  r.timestamps.output_done = r.timestamps.infer_done + output;
  r.finished = r.timestamps.output_done + absl::Microseconds(20);
  return r;
}

const absl::Time kBase = absl::FromUnixSeconds(1700000000);

// Three successes, two executions, three failures and a pending count of 2
// on model "m" version "1":
//   request  queue  input  infer  output  total   batch
//   A        100    20     1000   50      1200    2
//   B        40     20     1000   50      1140    1
//   C        3000   5      200    5       3240    4      (all µs)
void RecordKnownSequence(ModelMetrics& m) {
  const absl::Duration us = absl::Microseconds(1);
  const Request a = MakeRequest(kBase, 100 * us, 20 * us, 1000 * us, 50 * us);
  const Request b = MakeRequest(kBase, 40 * us, 20 * us, 1000 * us, 50 * us);
  const Request c = MakeRequest(kBase, 3000 * us, 5 * us, 200 * us, 5 * us);
  m.RecordSuccess(a.timestamps, 2, a.finished);
  m.RecordSuccess(b.timestamps, 1, b.finished);
  m.RecordSuccess(c.timestamps, 4, c.finished);
  m.RecordExecution(3, 20 * us, 1000 * us, 50 * us);
  m.RecordExecution(4, 5 * us, 200 * us, 5 * us);

  RequestTimestamps rejected;
  rejected.received = kBase;
  rejected.enqueued = kBase + 10 * us;
  m.RecordFailure(FailureReason::kRejected, rejected, kBase + 300 * us);
  m.RecordFailure(FailureReason::kRejected, rejected, kBase + 500 * us);
  m.RecordFailure(FailureReason::kBackend, a.timestamps, a.finished);

  m.AddPending(1);
  m.AddPending(1);
  m.AddPending(1);
  m.AddPending(-1);
}

std::string Series(const std::string& name, const std::string& value,
                   const std::string& extra_labels = "") {
  return absl::StrCat(name, "{model=\"m\",", extra_labels, "version=\"1\"} ", value);
}

std::string Bucket(const std::string& name, const std::string& le, const std::string& value) {
  return absl::StrCat(name, "_bucket{model=\"m\",version=\"1\",le=\"", le, "\"} ", value);
}

TEST(MetricsRegistryTest, SerializesExactCountersAfterKnownSequence) {
  auto registry = MetricsRegistry::Create();
  RecordKnownSequence(registry->ForModel("m", "1"));
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  EXPECT_THAT(lines, Contains(Series("nv_inference_request_success", "3")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_count", "7")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_exec_count", "2")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_request_duration_us", "5580")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_queue_duration_us", "3140")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_compute_input_duration_us", "45")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_compute_infer_duration_us", "2200")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_compute_output_duration_us", "105")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_pending_request_count", "2")));
}

TEST(MetricsRegistryTest, CountsFailuresUnderTheirReasonLabel) {
  auto registry = MetricsRegistry::Create();
  RecordKnownSequence(registry->ForModel("m", "1"));
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  const std::string name = "nv_inference_request_failure";
  EXPECT_THAT(lines, Contains(Series(name, "2", "reason=\"REJECTED\",")));
  EXPECT_THAT(lines, Contains(Series(name, "1", "reason=\"BACKEND\",")));
  EXPECT_THAT(lines, Contains(Series(name, "0", "reason=\"CANCELED\",")));
  EXPECT_THAT(lines, Contains(Series(name, "0", "reason=\"OTHER\",")));
}

TEST(MetricsRegistryTest, LatencyHistogramsBucketSuccessfulRequestsInMicroseconds) {
  auto registry = MetricsRegistry::Create();
  RecordKnownSequence(registry->ForModel("m", "1"));
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  const std::string request = "nv_inference_request_duration_histogram_us";
  EXPECT_THAT(lines, Contains(Bucket(request, "1000", "0")));
  EXPECT_THAT(lines, Contains(Bucket(request, "2500", "2")));
  EXPECT_THAT(lines, Contains(Bucket(request, "5000", "3")));
  EXPECT_THAT(lines, Contains(Bucket(request, "+Inf", "3")));
  EXPECT_THAT(lines, Contains(Series(request + "_sum", "5580")));
  EXPECT_THAT(lines, Contains(Series(request + "_count", "3")));

  // Bucket bounds are inclusive: the 100 µs wait falls in le="100".
  const std::string queue = "nv_inference_queue_duration_histogram_us";
  EXPECT_THAT(lines, Contains(Bucket(queue, "50", "1")));
  EXPECT_THAT(lines, Contains(Bucket(queue, "100", "2")));
  EXPECT_THAT(lines, Contains(Bucket(queue, "2500", "2")));
  EXPECT_THAT(lines, Contains(Bucket(queue, "5000", "3")));
  EXPECT_THAT(lines, Contains(Series(queue + "_sum", "3140")));
  EXPECT_THAT(lines, Contains(Series(queue + "_count", "3")));

  const std::string infer = "nv_inference_compute_infer_duration_histogram_us";
  EXPECT_THAT(lines, Contains(Bucket(infer, "100", "0")));
  EXPECT_THAT(lines, Contains(Bucket(infer, "250", "1")));
  EXPECT_THAT(lines, Contains(Bucket(infer, "500", "1")));
  EXPECT_THAT(lines, Contains(Bucket(infer, "1000", "3")));
  EXPECT_THAT(lines, Contains(Bucket(infer, "10000000", "3")));
  EXPECT_THAT(lines, Contains(Series(infer + "_sum", "2200")));
  EXPECT_THAT(lines, Contains(Series(infer + "_count", "3")));
}

TEST(MetricsRegistryTest, BatchSizeHistogramObservesEachExecution) {
  auto registry = MetricsRegistry::Create();
  RecordKnownSequence(registry->ForModel("m", "1"));
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  const std::string name = "nv_inference_batch_size";
  EXPECT_THAT(lines, Contains(Bucket(name, "1", "0")));
  EXPECT_THAT(lines, Contains(Bucket(name, "2", "0")));
  EXPECT_THAT(lines, Contains(Bucket(name, "4", "2")));
  EXPECT_THAT(lines, Contains(Bucket(name, "1024", "2")));
  EXPECT_THAT(lines, Contains(Bucket(name, "+Inf", "2")));
  EXPECT_THAT(lines, Contains(Series(name + "_sum", "7")));
  EXPECT_THAT(lines, Contains(Series(name + "_count", "2")));
}

TEST(MetricsRegistryTest, InferenceCountCounterEqualsStatisticsInferenceCount) {
  auto registry = MetricsRegistry::Create();
  ModelMetrics& m = registry->ForModel("m", "1");
  RecordKnownSequence(m);
  const ModelStatisticsSnapshot s = m.Snapshot();
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  EXPECT_THAT(lines, Contains(Series("nv_inference_count", absl::StrCat(s.inference_count))));
  EXPECT_THAT(lines, Contains(Series("nv_inference_exec_count", absl::StrCat(s.execution_count))));
  EXPECT_THAT(lines,
              Contains(Series("nv_inference_request_success", absl::StrCat(s.success.count))));
}

TEST(MetricsRegistryTest, EveryFamilyHasHelpAndItsType) {
  auto registry = MetricsRegistry::Create();
  registry->ForModel("m", "1");
  registry->SetModelLoadDuration("m", "1", 0.5);
  registry->SetGpuMemory("GPU-0", 1, 2);
  const std::string text = registry->SerializeText();
  const std::vector<std::string> lines = Lines(text);

  const std::vector<std::pair<std::string, std::string>> families = {
      {"nv_inference_request_success", "counter"},
      {"nv_inference_request_failure", "counter"},
      {"nv_inference_count", "counter"},
      {"nv_inference_exec_count", "counter"},
      {"nv_inference_request_duration_us", "counter"},
      {"nv_inference_queue_duration_us", "counter"},
      {"nv_inference_compute_input_duration_us", "counter"},
      {"nv_inference_compute_infer_duration_us", "counter"},
      {"nv_inference_compute_output_duration_us", "counter"},
      {"nv_inference_pending_request_count", "gauge"},
      {"nv_inference_request_duration_histogram_us", "histogram"},
      {"nv_inference_queue_duration_histogram_us", "histogram"},
      {"nv_inference_compute_infer_duration_histogram_us", "histogram"},
      {"nv_inference_batch_size", "histogram"},
      {"nv_model_load_duration_secs", "gauge"},
      {"nv_gpu_memory_used_bytes", "gauge"},
      {"nv_gpu_memory_total_bytes", "gauge"},
      {"nv_pinned_memory_pool_total_bytes", "gauge"},
      {"nv_pinned_memory_pool_used_bytes", "gauge"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_THAT(lines, Contains(absl::StrCat("# TYPE ", name, " ", type)));
    EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat("# HELP ", name, " ")));
  }
}

TEST(MetricsRegistryTest, ModelSeriesStartAtZeroBeforeAnyRequest) {
  auto registry = MetricsRegistry::Create();
  registry->ForModel("m", "1");
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  EXPECT_THAT(lines, Contains(Series("nv_inference_request_success", "0")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_request_failure", "0", "reason=\"OTHER\",")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_pending_request_count", "0")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_request_duration_histogram_us_count", "0")));
}

TEST(MetricsRegistryTest, ModelLoadDurationIsAGaugePerModelVersion) {
  auto registry = MetricsRegistry::Create();
  registry->SetModelLoadDuration("m", "1", 2.5);
  registry->SetModelLoadDuration("m", "2", 4);
  registry->SetModelLoadDuration("m", "1", 1.25);
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  EXPECT_THAT(lines, Contains("nv_model_load_duration_secs{model=\"m\",version=\"1\"} 1.25"));
  EXPECT_THAT(lines, Contains("nv_model_load_duration_secs{model=\"m\",version=\"2\"} 4"));
}

TEST(MetricsRegistryTest, GpuMemoryGaugesAreLabelledByGpuUuid) {
  auto registry = MetricsRegistry::Create();
  registry->SetGpuMemory("GPU-a", 1000, 80000000000);
  registry->SetGpuMemory("GPU-b", 7, 9);
  registry->SetGpuMemory("GPU-a", 2048, 80000000000);
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  EXPECT_THAT(lines, Contains("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-a\"} 2048"));
  EXPECT_THAT(lines, Contains("nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-a\"} 80000000000"));
  EXPECT_THAT(lines, Contains("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-b\"} 7"));
  EXPECT_THAT(lines, Contains("nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-b\"} 9"));
  EXPECT_THAT(lines, Not(Contains("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-a\"} 1000")));
}

TEST(MetricsRegistryTest, PinnedMemoryPoolGaugesStartAtZeroAndTakeTheLastValues) {
  auto registry = MetricsRegistry::Create();
  std::vector<std::string> lines = Lines(registry->SerializeText());
  EXPECT_THAT(lines, Contains("nv_pinned_memory_pool_total_bytes 0"));
  EXPECT_THAT(lines, Contains("nv_pinned_memory_pool_used_bytes 0"));

  registry->SetPinnedMemoryPool(1 << 20, 4096);
  registry->SetPinnedMemoryPool(3 << 20, 8192);
  lines = Lines(registry->SerializeText());
  EXPECT_THAT(lines, Contains("nv_pinned_memory_pool_total_bytes 3145728"));
  EXPECT_THAT(lines, Contains("nv_pinned_memory_pool_used_bytes 8192"));
}

TEST(MetricsRegistryTest, ModelsAreSeparateSeries) {
  auto registry = MetricsRegistry::Create();
  RecordKnownSequence(registry->ForModel("m", "1"));
  registry->ForModel("m", "2").AddPending(5);
  registry->ForModel("other", "1");
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  EXPECT_THAT(lines, Contains(Series("nv_inference_request_success", "3")));
  EXPECT_THAT(lines, Contains("nv_inference_request_success{model=\"m\",version=\"2\"} 0"));
  EXPECT_THAT(lines, Contains("nv_inference_pending_request_count{model=\"m\",version=\"2\"} 5"));
  EXPECT_THAT(lines, Contains("nv_inference_request_success{model=\"other\",version=\"1\"} 0"));
}

TEST(MetricsRegistryTest, ForModelReturnsTheSameMetricsForTheSameVersion) {
  auto registry = MetricsRegistry::Create();
  ModelMetrics& a = registry->ForModel("m", "1");
  EXPECT_EQ(&a, &registry->ForModel("m", "1"));
  EXPECT_NE(&a, &registry->ForModel("m", "2"));
  EXPECT_NE(&a, &registry->ForModel("n", "1"));
}

TEST(MetricsRegistryTest, ConcurrentRecordingSumsExactlyInTheExposition) {
  auto registry = MetricsRegistry::Create();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  const Request r =
      MakeRequest(kBase, absl::Microseconds(3), absl::Microseconds(1), absl::Microseconds(4),
                  absl::Microseconds(1));  // 39 µs end to end
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&registry, &r] {
      ModelMetrics& m = registry->ForModel("m", "1");
      for (int j = 0; j < kPerThread; ++j) {
        m.AddPending(1);
        m.AddPending(-1);
        m.RecordSuccess(r.timestamps, 2, r.finished);
        m.RecordExecution(2, absl::Microseconds(1), absl::Microseconds(4), absl::Microseconds(1));
        m.RecordFailure(FailureReason::kCanceled, r.timestamps, r.finished);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = Lines(registry->SerializeText());

  const int n = kThreads * kPerThread;
  EXPECT_THAT(lines, Contains(Series("nv_inference_request_success", absl::StrCat(n))));
  EXPECT_THAT(lines, Contains(Series("nv_inference_count", absl::StrCat(2 * n))));
  EXPECT_THAT(lines, Contains(Series("nv_inference_exec_count", absl::StrCat(n))));
  EXPECT_THAT(lines, Contains(Series("nv_inference_request_duration_us", absl::StrCat(39 * n))));
  EXPECT_THAT(lines, Contains(Series("nv_inference_request_failure", absl::StrCat(n),
                                     "reason=\"CANCELED\",")));
  EXPECT_THAT(lines, Contains(Series("nv_inference_pending_request_count", "0")));
  EXPECT_THAT(lines, Contains(Bucket("nv_inference_batch_size", "2", absl::StrCat(n))));
}

}  // namespace
}  // namespace fuseserve
