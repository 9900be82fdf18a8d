#include "server/metrics/metrics_registry.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace fuseserve {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

constexpr int kNumFailureReasons = 4;

int ReasonIndex(FailureReason reason) {
  switch (reason) {
    case FailureReason::kRejected:
      return 0;
    case FailureReason::kCanceled:
      return 1;
    case FailureReason::kBackend:
      return 2;
    case FailureReason::kOther:
      return 3;
  }
  return 3;
}

// The `reason` label values, indexed by ReasonIndex (Triton's spelling).
constexpr std::array<const char*, kNumFailureReasons> kReasonLabels = {"REJECTED", "CANCELED",
                                                                       "BACKEND", "OTHER"};

// 1-2.5-5 per decade from 50 µs to 10 s: fine enough near the sub-ms
// latencies of small batches, wide enough for multi-second queueing.
Histogram::BucketBoundaries LatencyBucketsUs() {
  return {50,    100,    250,    500,    1000,    2500,    5000,    10000,   25000,
          50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
}

// Powers of two up to 1024: batch sizes are usually powers of two, and a
// bucket per power keeps the series count small for any max_batch_size.
Histogram::BucketBoundaries BatchSizeBuckets() {
  Histogram::BucketBoundaries buckets;
  for (double b = 1; b <= 1024; b *= 2) buckets.push_back(b);
  return buckets;
}

bool IsSet(absl::Time t) { return t != absl::InfinitePast() && t != absl::InfiniteFuture(); }

// ns from `from` to `to`; 0 when either point is unset or `to` precedes `from`.
uint64_t ElapsedNs(absl::Time from, absl::Time to) {
  if (!IsSet(from) || !IsSet(to) || to <= from) return 0;
  return static_cast<uint64_t>(absl::ToInt64Nanoseconds(to - from));
}

uint64_t NonNegativeNs(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<uint64_t>(absl::ToInt64Nanoseconds(d));
}

double NsToUs(uint64_t ns) { return static_cast<double>(ns) / 1e3; }

uint64_t NowMs() { return static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())); }

void Add(DurationStat& stat, uint64_t ns) {
  ++stat.count;
  stat.ns += ns;
}

// Every family, registered once in one prometheus::Registry.
struct Families {
  explicit Families(prometheus::Registry& r)
      : request_success(prometheus::BuildCounter()
                            .Name("nv_inference_request_success")
                            .Help("Number of successful inference requests, all batch sizes")
                            .Register(r)),
        request_failure(prometheus::BuildCounter()
                            .Name("nv_inference_request_failure")
                            .Help("Number of failed inference requests, all batch sizes, "
                                  "by reason (REJECTED, CANCELED, BACKEND, OTHER)")
                            .Register(r)),
        inference_count(prometheus::BuildCounter()
                            .Name("nv_inference_count")
                            .Help("Number of inferences performed by successful requests "
                                  "(a request of batch size n counts n)")
                            .Register(r)),
        exec_count(prometheus::BuildCounter()
                       .Name("nv_inference_exec_count")
                       .Help("Number of model executions performed (a batch counts 1)")
                       .Register(r)),
        request_duration_us(prometheus::BuildCounter()
                                .Name("nv_inference_request_duration_us")
                                .Help("Cumulative end-to-end duration of successful inference "
                                      "requests in microseconds")
                                .Register(r)),
        queue_duration_us(prometheus::BuildCounter()
                              .Name("nv_inference_queue_duration_us")
                              .Help("Cumulative time successful requests waited in the "
                                    "scheduling queue in microseconds")
                              .Register(r)),
        compute_input_duration_us(prometheus::BuildCounter()
                                      .Name("nv_inference_compute_input_duration_us")
                                      .Help("Cumulative input preparation time (including "
                                            "host-to-device copies) of successful requests "
                                            "in microseconds")
                                      .Register(r)),
        compute_infer_duration_us(prometheus::BuildCounter()
                                      .Name("nv_inference_compute_infer_duration_us")
                                      .Help("Cumulative model execution time of successful "
                                            "requests in microseconds")
                                      .Register(r)),
        compute_output_duration_us(prometheus::BuildCounter()
                                       .Name("nv_inference_compute_output_duration_us")
                                       .Help("Cumulative output extraction time (including "
                                             "device-to-host copies) of successful requests "
                                             "in microseconds")
                                       .Register(r)),
        pending_request_count(prometheus::BuildGauge()
                                  .Name("nv_inference_pending_request_count")
                                  .Help("Number of inference requests waiting in the queue, "
                                        "not yet executing")
                                  .Register(r)),
        request_duration_histogram_us(
            prometheus::BuildHistogram()
                .Name("nv_inference_request_duration_histogram_us")
                .Help("End-to-end duration of successful inference requests in microseconds")
                .Register(r)),
        queue_duration_histogram_us(
            prometheus::BuildHistogram()
                .Name("nv_inference_queue_duration_histogram_us")
                .Help("Time successful requests waited in the scheduling queue in microseconds")
                .Register(r)),
        compute_infer_duration_histogram_us(
            prometheus::BuildHistogram()
                .Name("nv_inference_compute_infer_duration_histogram_us")
                .Help("Model execution time of successful requests in microseconds")
                .Register(r)),
        batch_size(prometheus::BuildHistogram()
                       .Name("nv_inference_batch_size")
                       .Help("Batch size (number of inferences) of each model execution")
                       .Register(r)),
        model_load_duration_secs(prometheus::BuildGauge()
                                     .Name("nv_model_load_duration_secs")
                                     .Help("Time taken to load the model version in seconds")
                                     .Register(r)),
        gpu_memory_used_bytes(prometheus::BuildGauge()
                                  .Name("nv_gpu_memory_used_bytes")
                                  .Help("GPU memory held by fuseserve in bytes")
                                  .Register(r)),
        gpu_memory_total_bytes(prometheus::BuildGauge()
                                   .Name("nv_gpu_memory_total_bytes")
                                   .Help("Total memory of the GPU in bytes")
                                   .Register(r)),
        pinned_memory_pool_total_bytes(
            prometheus::BuildGauge()
                .Name("nv_pinned_memory_pool_total_bytes")
                .Help("Page-locked host memory held by the pool of answer buffers in bytes")
                .Register(r)),
        pinned_memory_pool_used_bytes(
            prometheus::BuildGauge()
                .Name("nv_pinned_memory_pool_used_bytes")
                .Help("Page-locked host memory of the answer pool in answers being made or "
                      "sent, in bytes")
                .Register(r)) {}

  Family<Counter>& request_success;
  Family<Counter>& request_failure;
  Family<Counter>& inference_count;
  Family<Counter>& exec_count;
  Family<Counter>& request_duration_us;
  Family<Counter>& queue_duration_us;
  Family<Counter>& compute_input_duration_us;
  Family<Counter>& compute_infer_duration_us;
  Family<Counter>& compute_output_duration_us;
  Family<Gauge>& pending_request_count;
  Family<Histogram>& request_duration_histogram_us;
  Family<Histogram>& queue_duration_histogram_us;
  Family<Histogram>& compute_infer_duration_histogram_us;
  Family<Histogram>& batch_size;
  Family<Gauge>& model_load_duration_secs;
  Family<Gauge>& gpu_memory_used_bytes;
  Family<Gauge>& gpu_memory_total_bytes;
  Family<Gauge>& pinned_memory_pool_total_bytes;
  Family<Gauge>& pinned_memory_pool_used_bytes;
};

prometheus::Labels ModelLabels(const std::string& model, const std::string& version) {
  return {{"model", model}, {"version", version}};
}

prometheus::Labels WithReason(prometheus::Labels labels, int reason_index) {
  labels.emplace("reason", kReasonLabels[reason_index]);
  return labels;
}

// The prometheus series of one (model, version) are resolved once, here; the
// recording methods touch only these objects and the statistics under mu_.
class PrometheusModelMetrics : public ModelMetrics {
 public:
  PrometheusModelMetrics(Families& f, const prometheus::Labels& labels)
      : success_(f.request_success.Add(labels)),
        failure_{&f.request_failure.Add(WithReason(labels, 0)),
                 &f.request_failure.Add(WithReason(labels, 1)),
                 &f.request_failure.Add(WithReason(labels, 2)),
                 &f.request_failure.Add(WithReason(labels, 3))},
        inference_count_(f.inference_count.Add(labels)),
        exec_count_(f.exec_count.Add(labels)),
        request_us_(f.request_duration_us.Add(labels)),
        queue_us_(f.queue_duration_us.Add(labels)),
        compute_input_us_(f.compute_input_duration_us.Add(labels)),
        compute_infer_us_(f.compute_infer_duration_us.Add(labels)),
        compute_output_us_(f.compute_output_duration_us.Add(labels)),
        pending_(f.pending_request_count.Add(labels)),
        request_hist_us_(f.request_duration_histogram_us.Add(labels, LatencyBucketsUs())),
        queue_hist_us_(f.queue_duration_histogram_us.Add(labels, LatencyBucketsUs())),
        compute_infer_hist_us_(
            f.compute_infer_duration_histogram_us.Add(labels, LatencyBucketsUs())),
        batch_size_hist_(f.batch_size.Add(labels, BatchSizeBuckets())) {}

  void RecordSuccess(const RequestTimestamps& t, int64_t batch_size, absl::Time finished) override {
    const uint64_t request_ns = ElapsedNs(t.received, finished);
    const uint64_t queue_ns = ElapsedNs(t.enqueued, t.exec_start);
    const uint64_t input_ns = ElapsedNs(t.exec_start, t.input_done);
    const uint64_t infer_ns = ElapsedNs(t.input_done, t.infer_done);
    const uint64_t output_ns = ElapsedNs(t.infer_done, t.output_done);
    const uint64_t inferences = batch_size > 0 ? static_cast<uint64_t>(batch_size) : 0;
    {
      absl::MutexLock lock(&mu_);
      stats_.inference_count += inferences;
      Add(stats_.success, request_ns);
      Add(stats_.queue, queue_ns);
      Add(stats_.compute_input, input_ns);
      Add(stats_.compute_infer, infer_ns);
      Add(stats_.compute_output, output_ns);
      TouchLocked();
    }
    success_.Increment();
    inference_count_.Increment(static_cast<double>(inferences));
    request_us_.Increment(NsToUs(request_ns));
    queue_us_.Increment(NsToUs(queue_ns));
    compute_input_us_.Increment(NsToUs(input_ns));
    compute_infer_us_.Increment(NsToUs(infer_ns));
    compute_output_us_.Increment(NsToUs(output_ns));
    request_hist_us_.Observe(NsToUs(request_ns));
    queue_hist_us_.Observe(NsToUs(queue_ns));
    compute_infer_hist_us_.Observe(NsToUs(infer_ns));
  }

  void RecordFailure(FailureReason reason, const RequestTimestamps& t,
                     absl::Time finished) override {
    const uint64_t request_ns = ElapsedNs(t.received, finished);
    {
      absl::MutexLock lock(&mu_);
      Add(stats_.fail, request_ns);
      TouchLocked();
    }
    failure_[ReasonIndex(reason)]->Increment();
  }

  void RecordExecution(int64_t batch_size, absl::Duration compute_input,
                       absl::Duration compute_infer, absl::Duration compute_output) override {
    const uint64_t size = batch_size > 0 ? static_cast<uint64_t>(batch_size) : 0;
    {
      absl::MutexLock lock(&mu_);
      ++stats_.execution_count;
      BatchStat& batch = stats_.batch_stats[size];
      Add(batch.compute_input, NonNegativeNs(compute_input));
      Add(batch.compute_infer, NonNegativeNs(compute_infer));
      Add(batch.compute_output, NonNegativeNs(compute_output));
      TouchLocked();
    }
    exec_count_.Increment();
    batch_size_hist_.Observe(static_cast<double>(size));
  }

  void AddPending(int64_t delta) override { pending_.Increment(static_cast<double>(delta)); }

  ModelStatisticsSnapshot Snapshot() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  void TouchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_.last_inference_ms = std::max(stats_.last_inference_ms, NowMs());
  }

  Counter& success_;
  std::array<Counter*, kNumFailureReasons> failure_;
  Counter& inference_count_;
  Counter& exec_count_;
  Counter& request_us_;
  Counter& queue_us_;
  Counter& compute_input_us_;
  Counter& compute_infer_us_;
  Counter& compute_output_us_;
  Gauge& pending_;
  Histogram& request_hist_us_;
  Histogram& queue_hist_us_;
  Histogram& compute_infer_hist_us_;
  Histogram& batch_size_hist_;

  mutable absl::Mutex mu_;
  ModelStatisticsSnapshot stats_ ABSL_GUARDED_BY(mu_);
};

class PrometheusMetricsRegistry : public MetricsRegistry {
 public:
  PrometheusMetricsRegistry()
      : registry_(std::make_shared<prometheus::Registry>()),
        families_(*registry_),
        pinned_total_(families_.pinned_memory_pool_total_bytes.Add({})),
        pinned_used_(families_.pinned_memory_pool_used_bytes.Add({})) {}

  ModelMetrics& ForModel(const std::string& model, const std::string& version) override {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<PrometheusModelMetrics>& metrics = models_[{model, version}];
    if (metrics == nullptr) {
      metrics = std::make_unique<PrometheusModelMetrics>(families_, ModelLabels(model, version));
    }
    return *metrics;
  }

  void SetModelLoadDuration(const std::string& model, const std::string& version,
                            double seconds) override {
    families_.model_load_duration_secs.Add(ModelLabels(model, version)).Set(seconds);
  }

  void SetGpuMemory(const std::string& gpu_uuid, int64_t used_bytes, int64_t total_bytes) override {
    const prometheus::Labels labels = {{"gpu_uuid", gpu_uuid}};
    families_.gpu_memory_used_bytes.Add(labels).Set(static_cast<double>(used_bytes));
    families_.gpu_memory_total_bytes.Add(labels).Set(static_cast<double>(total_bytes));
  }

  void SetPinnedMemoryPool(int64_t total_bytes, int64_t used_bytes) override {
    pinned_total_.Set(static_cast<double>(total_bytes));
    pinned_used_.Set(static_cast<double>(used_bytes));
  }

  std::string SerializeText() const override {
    return prometheus::TextSerializer().Serialize(registry_->Collect());
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  // Family::Add and Registry::Collect lock internally, so only models_ needs mu_.
  Families families_;
  prometheus::Gauge& pinned_total_;
  prometheus::Gauge& pinned_used_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<PrometheusModelMetrics>> models_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<MetricsRegistry> MetricsRegistry::Create() {
  return std::make_unique<PrometheusMetricsRegistry>();
}

}  // namespace fuseserve
