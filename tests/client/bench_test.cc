// Unit tests of the bench's pure parts: options, percentiles, the stability
// rule, window accounting, server-side deltas, request planning, arrivals and
// the report. (bench_server_test.cc runs it against the real server.)

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/bench/bench_options.h"
#include "client/bench/level_runner.h"
#include "client/bench/load_tracker.h"
#include "client/bench/measurement.h"
#include "client/bench/open_loop_driver.h"
#include "client/bench/report.h"
#include "client/bench/request_pool.h"
#include "client/bench/statistics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.pb.h"

namespace fuseserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<BenchOptions> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "bench");
  return ParseBenchOptions(static_cast<int>(args.size()), args.data());
}

TEST(BenchOptionsTest, DefaultsToOneClosedLoopLevel) {
  auto options = Parse({"gemm"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->model, "gemm");
  EXPECT_EQ(options->mode, LoadMode::kClosedLoop);
  EXPECT_THAT(options->concurrency, ElementsAre(1));
  EXPECT_EQ(options->url, "localhost:8001");
  EXPECT_EQ(options->batch_size, 1);
  EXPECT_FALSE(options->duration.has_value());
}

TEST(BenchOptionsTest, ParsesEveryFlagInBothSpellings) {
  auto options = Parse({"--url=host:9",
                        "gemm",
                        "--concurrency",
                        "1,4,16,64",
                        "--batch-size=8",
                        "--shape",
                        "3,32,32",
                        "--channels",
                        "2",
                        "--inputs=3",
                        "--seed",
                        "7",
                        "--warmup-s",
                        "0.5",
                        "--window-s=1.5",
                        "--stability",
                        "0.2",
                        "--max-windows",
                        "5",
                        "--timeout-ms",
                        "250",
                        "--drain-timeout-s",
                        "9",
                        "--json",
                        "/tmp/out.json",
                        "--quiet",
                        "--allow-errors",
                        "--typed-serialization",
                        "--completion-queues",
                        "3",
                        "--model-version",
                        "2"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->url, "host:9");
  EXPECT_THAT(options->concurrency, ElementsAre(1, 4, 16, 64));
  EXPECT_EQ(options->batch_size, 8);
  ASSERT_TRUE(options->shape.has_value());
  EXPECT_THAT(*options->shape, ElementsAre(3, 32, 32));
  EXPECT_EQ(options->channels, 2);
  EXPECT_EQ(options->num_inputs, 3);
  EXPECT_EQ(options->seed, 7u);
  EXPECT_EQ(options->warmup, absl::Milliseconds(500));
  EXPECT_EQ(options->window, absl::Milliseconds(1500));
  EXPECT_DOUBLE_EQ(options->stability, 0.2);
  EXPECT_EQ(options->max_windows, 5);
  EXPECT_EQ(options->timeout, absl::Milliseconds(250));
  EXPECT_EQ(options->drain_timeout, absl::Seconds(9));
  EXPECT_EQ(options->json_path, "/tmp/out.json");
  EXPECT_TRUE(options->quiet);
  EXPECT_TRUE(options->allow_errors);
  EXPECT_TRUE(options->typed_serialization);
  EXPECT_EQ(options->completion_queues, 3);
  EXPECT_EQ(options->model_version, "2");
}

TEST(BenchOptionsTest, CompletionQueuesMustBeZeroToSixtyFour) {
  auto plain = Parse({"gemm"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->completion_queues, 4);
  for (const char* value : {"-1", "65", "two", ""}) {
    auto options = Parse({"gemm", "--completion-queues", value});
    EXPECT_FALSE(options.ok()) << value;
    EXPECT_THAT(std::string(options.status().message()),
                HasSubstr("--completion-queues expects an integer in [0, 64]"))
        << value;
  }
}

TEST(BenchOptionsTest, ParsesTlsOptions) {
  auto plain = Parse({"gemm"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->tls.ssl);

  auto options = Parse({"gemm", "--ssl", "--root-certificates=/tls/ca.pem", "--private-key",
                        "/tls/client.key", "--certificate-chain", "/tls/client.pem"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->tls.ssl);
  EXPECT_EQ(options->tls.root_certificates, "/tls/ca.pem");
  EXPECT_EQ(options->tls.private_key, "/tls/client.key");
  EXPECT_EQ(options->tls.certificate_chain, "/tls/client.pem");
  EXPECT_THAT(kBenchUsage, HasSubstr("--ssl"));
}

TEST(BenchOptionsTest, ParsesSharedMemoryOptions) {
  auto plain = Parse({"gemm"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->shared_memory, SharedMemoryType::kNone);
  EXPECT_FALSE(plain->output_shared_memory_size.has_value());

  auto options =
      Parse({"gemm", "--shared-memory", "system", "--output-shared-memory-size=1048576"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->shared_memory, SharedMemoryType::kSystem);
  EXPECT_EQ(options->output_shared_memory_size, 1048576u);
  EXPECT_THAT(kBenchUsage, HasSubstr("--shared-memory none|system"));
  EXPECT_THAT(kBenchUsage, HasSubstr("--output-shared-memory-size"));
}

TEST(BenchOptionsTest, RateSelectsOpenLoop) {
  auto options =
      Parse({"gemm", "--rate", "100,250.5", "--arrivals", "constant", "--duration-s", "30"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->mode, LoadMode::kOpenLoop);
  EXPECT_THAT(options->rates_per_s, ElementsAre(100, 250.5));
  EXPECT_EQ(options->arrivals, Arrivals::kConstant);
  EXPECT_EQ(options->duration, absl::Seconds(30));
}

TEST(BenchOptionsTest, RejectsBadUsageNamingTheFlag) {
  struct Case {
    std::vector<const char*> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, "MODEL is required"},
      {{"gemm", "--concurrency", "4", "--rate", "10"}, "mutually exclusive"},
      {{"gemm", "--concurrency", "1,0"}, "--concurrency"},
      {{"gemm", "--concurrency", "1,x"}, "--concurrency"},
      {{"gemm", "--rate", "-5"}, "--rate"},
      {{"gemm", "--batch-size", "0"}, "--batch-size"},
      {{"gemm", "--shape", "3,-1"}, "--shape"},
      {{"gemm", "--window-s", "0"}, "--window-s"},
      {{"gemm", "--stability", "nan"}, "--stability"},
      {{"gemm", "--arrivals", "bursty"}, "--arrivals"},
      {{"gemm", "--json"}, "--json needs a value"},
      {{"gemm", "--frobnicate"}, "unknown option \"--frobnicate\""},
      {{"gemm", "other"}, "unexpected argument \"other\""},
      {{"gemm", "--quiet=yes"}, "--quiet takes no value"},
      {{"gemm", "--ssl=true"}, "--ssl takes no value"},
      {{"gemm", "--shared-memory", "cuda"}, "--shared-memory expects none or system"},
      {{"gemm", "--shared-memory=system", "--output-shared-memory-size", "0"},
       "--output-shared-memory-size"},
      {{"gemm", "--output-shared-memory-size", "64"}, "needs --shared-memory system"},
  };
  for (const Case& c : cases) {
    auto options = Parse(c.args);
    ASSERT_FALSE(options.ok()) << c.message;
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(options.status().message()), HasSubstr(c.message));
  }
}

TEST(BenchOptionsTest, HelpNeedsNothingElse) {
  auto options = Parse({"--help"});
  ASSERT_TRUE(options.ok());
  EXPECT_TRUE(options->help);
  EXPECT_THAT(kBenchUsage, HasSubstr("--concurrency"));
  EXPECT_THAT(kBenchUsage, HasSubstr("--rate"));
}

TEST(StatisticsTest, NearestRankPercentileOfTenSamples) {
  const std::vector<int64_t> sorted = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(NearestRankPercentile(sorted, 0), 1);
  EXPECT_EQ(NearestRankPercentile(sorted, 50), 5);
  EXPECT_EQ(NearestRankPercentile(sorted, 90), 9);
  EXPECT_EQ(NearestRankPercentile(sorted, 91), 10);
  EXPECT_EQ(NearestRankPercentile(sorted, 99), 10);
  EXPECT_EQ(NearestRankPercentile(sorted, 100), 10);
  EXPECT_EQ(NearestRankPercentile(sorted, 250), 10);
  EXPECT_EQ(NearestRankPercentile({}, 50), 0);
}

TEST(StatisticsTest, SummaryIsInMicrosecondsAndOrdered) {
  std::vector<int64_t> latencies_ns;
  for (int i = 200; i >= 1; --i) latencies_ns.push_back(i * 1000);  // 1..200 µs, reversed
  const LatencySummary summary = SummarizeLatencies(&latencies_ns);
  EXPECT_EQ(summary.count, 200);
  EXPECT_DOUBLE_EQ(summary.min_us, 1);
  EXPECT_DOUBLE_EQ(summary.max_us, 200);
  EXPECT_DOUBLE_EQ(summary.avg_us, 100.5);
  EXPECT_DOUBLE_EQ(summary.p50_us, 100);
  EXPECT_DOUBLE_EQ(summary.p90_us, 180);
  EXPECT_DOUBLE_EQ(summary.p95_us, 190);
  EXPECT_DOUBLE_EQ(summary.p99_us, 198);
}

TEST(StatisticsTest, EmptySummaryIsZero) {
  std::vector<int64_t> none;
  const LatencySummary summary = SummarizeLatencies(&none);
  EXPECT_EQ(summary.count, 0);
  EXPECT_EQ(summary.p99_us, 0);
}

TEST(StatisticsTest, ToleranceIsRelativeToTheMean) {
  EXPECT_TRUE(WithinTolerance({100, 105, 95}, 0.1));
  EXPECT_TRUE(WithinTolerance({100, 100, 100}, 0.0));
  EXPECT_FALSE(WithinTolerance({100, 100, 130}, 0.1));
  EXPECT_FALSE(WithinTolerance({0, 0, 0}, 0.1));
  EXPECT_FALSE(WithinTolerance({}, 0.1));
}

TEST(MeasurementRuleTest, NeedsThreeAgreeingWindows) {
  MeasurementRule rule;
  rule.stability = 0.1;
  rule.max_windows = 10;
  EXPECT_EQ(DecideAfterWindow({100}, rule), WindowDecision::kContinue);
  EXPECT_EQ(DecideAfterWindow({100, 101}, rule), WindowDecision::kContinue);
  EXPECT_EQ(DecideAfterWindow({100, 101, 99}, rule), WindowDecision::kStable);
  // An early outlier (warming caches) only delays the decision.
  EXPECT_EQ(DecideAfterWindow({40, 100, 101}, rule), WindowDecision::kContinue);
  EXPECT_EQ(DecideAfterWindow({40, 100, 101, 99}, rule), WindowDecision::kStable);
}

TEST(MeasurementRuleTest, StopsUnstableAtMaxWindows) {
  MeasurementRule rule;
  rule.stability = 0.05;
  rule.max_windows = 4;
  EXPECT_EQ(DecideAfterWindow({100, 150, 100}, rule), WindowDecision::kContinue);
  EXPECT_EQ(DecideAfterWindow({100, 150, 100, 150}, rule), WindowDecision::kNotStable);
  EXPECT_EQ(WindowsToReport(WindowDecision::kNotStable, 4, rule), 3);
  EXPECT_EQ(WindowsToReport(WindowDecision::kStable, 7, rule), 3);
}

TEST(MeasurementRuleTest, FixedDurationIsOneWindow) {
  MeasurementRule rule;
  rule.fixed_duration = true;
  EXPECT_EQ(DecideAfterWindow({}, rule), WindowDecision::kContinue);
  EXPECT_EQ(DecideAfterWindow({5}, rule), WindowDecision::kFixedDuration);
  EXPECT_EQ(WindowsToReport(WindowDecision::kFixedDuration, 1, rule), 1);
  EXPECT_EQ(WindowDecisionName(WindowDecision::kFixedDuration), "fixed_duration");
}

inference::ModelStatistics* AddStats(inference::ModelStatisticsResponse* response,
                                     const std::string& name, const std::string& version,
                                     uint64_t scale) {
  inference::ModelStatistics* stats = response->add_model_stats();
  stats->set_name(name);
  stats->set_version(version);
  stats->set_inference_count(40 * scale);
  stats->set_execution_count(10 * scale);
  auto* infer = stats->mutable_inference_stats();
  infer->mutable_success()->set_count(20 * scale);
  infer->mutable_success()->set_ns(20'000'000 * scale);
  infer->mutable_queue()->set_count(20 * scale);
  infer->mutable_queue()->set_ns(4'000'000 * scale);
  infer->mutable_compute_input()->set_count(20 * scale);
  infer->mutable_compute_input()->set_ns(1'000'000 * scale);
  infer->mutable_compute_infer()->set_count(20 * scale);
  infer->mutable_compute_infer()->set_ns(10'000'000 * scale);
  infer->mutable_compute_output()->set_count(20 * scale);
  infer->mutable_compute_output()->set_ns(2'000'000 * scale);
  return stats;
}

TEST(ServerStatsTest, DeltaGivesPerRequestAveragesAndBatchSize) {
  inference::ModelStatisticsResponse before_response, after_response;
  AddStats(&before_response, "gemm", "1", 1);
  AddStats(&before_response, "other", "1", 100);
  AddStats(&after_response, "gemm", "1", 3);
  auto before = CountersFromStatistics(before_response, "gemm", "");
  auto after = CountersFromStatistics(after_response, "gemm", "");
  ASSERT_TRUE(before.ok() && after.ok());
  const ServerSideStats delta = ServerDelta(*before, *after);
  EXPECT_TRUE(delta.available);
  EXPECT_EQ(delta.requests, 40);
  EXPECT_EQ(delta.executions, 20);
  EXPECT_EQ(delta.inferences, 80);
  EXPECT_DOUBLE_EQ(delta.avg_batch_size, 4.0);
  EXPECT_DOUBLE_EQ(delta.avg_request_us, 1000.0);
  EXPECT_DOUBLE_EQ(delta.avg_queue_us, 200.0);
  EXPECT_DOUBLE_EQ(delta.avg_compute_input_us, 50.0);
  EXPECT_DOUBLE_EQ(delta.avg_compute_infer_us, 500.0);
  EXPECT_DOUBLE_EQ(delta.avg_compute_output_us, 100.0);
}

TEST(ServerStatsTest, SumsVersionsUnlessOneIsNamed) {
  inference::ModelStatisticsResponse response;
  AddStats(&response, "gemm", "1", 1);
  AddStats(&response, "gemm", "2", 2);
  auto all = CountersFromStatistics(response, "gemm", "");
  auto two = CountersFromStatistics(response, "gemm", "2");
  ASSERT_TRUE(all.ok() && two.ok());
  EXPECT_EQ(all->execution_count, 30u);
  EXPECT_EQ(two->execution_count, 20u);
  EXPECT_EQ(CountersFromStatistics(response, "gemm", "3").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(CountersFromStatistics(response, "conv", "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ServerStatsTest, ShrinkingCountersReadAsNothingHappened) {
  ServerCounters before, after;
  before.execution_count = 10;
  before.inference_count = 10;
  const ServerSideStats delta = ServerDelta(before, after);
  EXPECT_EQ(delta.executions, 0);
  EXPECT_EQ(delta.avg_batch_size, 0);
}

TEST(LoadTrackerTest, CountsSentAnsweredAndErrorsByCode) {
  LoadTracker tracker;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(tracker.TryBeginSend());
  tracker.OnAnswered(0, 1000);
  tracker.OnAnswered(14, 0);  // UNAVAILABLE
  tracker.OnAnswered(14, 0);
  const LoadTotals totals = tracker.Totals();
  EXPECT_EQ(totals.sent, 4);
  EXPECT_EQ(totals.answered, 3);
  EXPECT_EQ(totals.succeeded, 1);
  EXPECT_EQ(totals.failed, 2);
  EXPECT_EQ(totals.outstanding, 1);
  EXPECT_EQ(totals.errors_by_code.at(14), 2);
}

TEST(LoadTrackerTest, ReissueKeepsOutstandingConstantUntilStopped) {
  LoadTracker tracker;
  ASSERT_TRUE(tracker.TryBeginSend());
  ASSERT_TRUE(tracker.TryBeginSend());
  EXPECT_TRUE(tracker.OnAnswered(0, 10, /*reissue=*/true));
  EXPECT_EQ(tracker.Totals().outstanding, 2);
  EXPECT_EQ(tracker.Totals().sent, 3);
  tracker.StopAccepting();
  EXPECT_FALSE(tracker.TryBeginSend());
  EXPECT_FALSE(tracker.OnAnswered(0, 10, /*reissue=*/true));
  EXPECT_EQ(tracker.Totals().outstanding, 1);
  EXPECT_FALSE(tracker.WaitUntilIdle(absl::Now()));
  tracker.OnAnswered(0, 10);
  EXPECT_TRUE(tracker.WaitUntilIdle(absl::Now()));
}

TEST(LoadTrackerTest, IdleNeedsStopAcceptingToo) {
  LoadTracker tracker;
  EXPECT_FALSE(tracker.WaitUntilIdle(absl::Now()));
  tracker.StopAccepting();
  EXPECT_TRUE(tracker.WaitUntilIdle(absl::Now()));
}

TEST(LoadTrackerTest, WindowsPartitionAnswersByArrival) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  LoadTracker tracker(start);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tracker.TryBeginSend());
  tracker.OnAnswered(0, 5000);
  WindowSample first = tracker.TakeWindow(start + absl::Seconds(2));
  tracker.OnAnswered(0, 7000);
  tracker.OnAnswered(4, 0);
  WindowSample second = tracker.TakeWindow(start + absl::Seconds(3));
  EXPECT_EQ(first.duration, absl::Seconds(2));
  EXPECT_EQ(first.sent, 3);
  EXPECT_EQ(first.succeeded, 1);
  EXPECT_EQ(first.max_outstanding, 3);
  EXPECT_THAT(first.latencies_ns, ElementsAre(5000));
  EXPECT_EQ(second.duration, absl::Seconds(1));
  EXPECT_EQ(second.sent, 0);
  EXPECT_EQ(second.succeeded, 1);
  EXPECT_EQ(second.failed, 1);
  EXPECT_EQ(second.max_outstanding, 2);  // what was in flight when it began
  EXPECT_THAT(second.latencies_ns, ElementsAre(7000));
}

TEST(ArrivalScheduleTest, ConstantGapsAreTheInverseRate) {
  ArrivalSchedule schedule(250, Arrivals::kConstant, 1);
  EXPECT_EQ(schedule.NextGap(), absl::Milliseconds(4));
  EXPECT_EQ(schedule.NextGap(), absl::Milliseconds(4));
}

TEST(ArrivalScheduleTest, PoissonGapsAverageTheInverseRateAndVary) {
  ArrivalSchedule schedule(1000, Arrivals::kPoisson, 1);
  absl::Duration total;
  absl::Duration smallest = absl::InfiniteDuration(), largest;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    const absl::Duration gap = schedule.NextGap();
    total += gap;
    smallest = std::min(smallest, gap);
    largest = std::max(largest, gap);
  }
  // Mean 1 ms; the standard error over 20000 draws is 0.7%.
  EXPECT_NEAR(absl::ToDoubleMilliseconds(total / kDraws), 1.0, 0.03);
  EXPECT_LT(smallest, absl::Microseconds(100));
  EXPECT_GT(largest, absl::Milliseconds(5));
}

inference::ModelMetadataResponse Metadata(const std::string& datatype, std::vector<int64_t> shape) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("m");
  auto* input = metadata.add_inputs();
  input->set_name("input");
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
  return metadata;
}

inference::ModelMetadataResponse WithOutput(inference::ModelMetadataResponse metadata,
                                            std::vector<int64_t> shape) {
  auto* output = metadata.add_outputs();
  output->set_name("output");
  output->set_datatype("FP32");
  for (int64_t dim : shape) output->add_shape(dim);
  return metadata;
}

inference::ModelConfigResponse Config(int max_batch_size) {
  inference::ModelConfigResponse config;
  config.mutable_config()->set_max_batch_size(max_batch_size);
  return config;
}

BenchOptions Options(int64_t batch_size, std::optional<Shape> shape = std::nullopt) {
  BenchOptions options;
  options.model = "m";
  options.batch_size = batch_size;
  options.shape = std::move(shape);
  return options;
}

TEST(RequestPlanTest, BatchingModelGetsTheBatchDimension) {
  auto plan = PlanRequests(Metadata("FP32", {-1, 64}), Config(16), Options(4));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->inferences_per_request, 4);
  ASSERT_EQ(plan->inputs.size(), 1u);
  EXPECT_EQ(plan->inputs[0].name, "input");
  EXPECT_THAT(plan->inputs[0].shape, ElementsAre(4, 64));
}

TEST(RequestPlanTest, NonBatchingModelSendsTheFullShapeOnce) {
  auto plan = PlanRequests(Metadata("FP32", {1, 8192}), Config(0), Options(1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->inferences_per_request, 1);
  EXPECT_THAT(plan->inputs[0].shape, ElementsAre(1, 8192));
  auto batched = PlanRequests(Metadata("FP32", {1, 8192}), Config(0), Options(2));
  EXPECT_THAT(std::string(batched.status().message()), HasSubstr("--batch-size must be 1"));
}

TEST(RequestPlanTest, VariableDimsNeedAFittingShape) {
  const auto metadata = Metadata("FP32", {-1, 8, -1, -1});
  auto missing = PlanRequests(metadata, Config(8), Options(1));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("give the non-batch dims"));
  auto fits = PlanRequests(metadata, Config(8), Options(2, Shape{8, 16, 12}));
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_THAT(fits->inputs[0].shape, ElementsAre(2, 8, 16, 12));
  auto wrong_fixed = PlanRequests(metadata, Config(8), Options(1, Shape{4, 16, 12}));
  EXPECT_THAT(std::string(wrong_fixed.status().message()), HasSubstr("does not fit"));
  auto wrong_rank = PlanRequests(metadata, Config(8), Options(1, Shape{8, 16}));
  EXPECT_THAT(std::string(wrong_rank.status().message()), HasSubstr("does not fit"));
}

TEST(RequestPlanTest, RejectsOversizedBatchesAndOtherDatatypes) {
  auto too_big = PlanRequests(Metadata("FP32", {-1, 64}), Config(16), Options(17));
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("max_batch_size of 16"));
  auto int8 = PlanRequests(Metadata("INT8", {-1, 64}), Config(16), Options(1));
  EXPECT_THAT(std::string(int8.status().message()), HasSubstr("FP32 inputs only"));
}

TEST(RequestPoolTest, BuildsDistinctRawFp32RequestsDeterministically) {
  auto plan = PlanRequests(Metadata("FP32", {-1, 6}), Config(8), Options(2));
  ASSERT_TRUE(plan.ok());
  const auto pool = BuildRequestPool(*plan, 3, 42);
  const auto again = BuildRequestPool(*plan, 3, 42);
  ASSERT_EQ(pool.size(), 3u);
  for (size_t i = 0; i < pool.size(); ++i) {
    EXPECT_EQ(pool[i].model_name(), "m");
    ASSERT_EQ(pool[i].inputs_size(), 1);
    EXPECT_EQ(pool[i].inputs(0).datatype(), "FP32");
    EXPECT_THAT(pool[i].inputs(0).shape(), ElementsAre(2, 6));
    ASSERT_EQ(pool[i].raw_input_contents_size(), 1);
    EXPECT_EQ(pool[i].raw_input_contents(0).size(), 2 * 6 * sizeof(float));
    EXPECT_EQ(pool[i].raw_input_contents(0), again[i].raw_input_contents(0));
  }
  EXPECT_NE(pool[0].raw_input_contents(0), pool[1].raw_input_contents(0));
}

TEST(RequestPlanTest, SharedMemorySizesEveryOutputRegion) {
  BenchOptions options = Options(4);
  auto plain = PlanRequests(WithOutput(Metadata("FP32", {-1, 64}), {-1, 32}), Config(16), options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->outputs.empty());

  options.shared_memory = SharedMemoryType::kSystem;
  auto from_metadata =
      PlanRequests(WithOutput(Metadata("FP32", {-1, 64}), {-1, 32}), Config(16), options);
  ASSERT_TRUE(from_metadata.ok()) << from_metadata.status();
  ASSERT_EQ(from_metadata->outputs.size(), 1u);
  EXPECT_EQ(from_metadata->outputs[0].name, "output");
  EXPECT_EQ(from_metadata->outputs[0].shared_memory_byte_size, 4u * 32 * sizeof(float));

  const auto variable = WithOutput(Metadata("FP32", {-1, 8, -1, -1}), {-1, 8, -1, -1});
  options.shape = Shape{8, 4, 4};
  auto unknown = PlanRequests(variable, Config(8), options);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--output-shared-memory-size"));
  options.output_shared_memory_size = 1000;
  auto given = PlanRequests(variable, Config(8), options);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->outputs[0].shared_memory_byte_size, 1000u);
}

TEST(RequestPoolTest, SharedMemoryRequestsPointAtTheirSlotsRegionsAndCarryNoBytes) {
  BenchOptions options = Options(2);
  options.shared_memory = SharedMemoryType::kSystem;
  auto plan = PlanRequests(WithOutput(Metadata("FP32", {-1, 6}), {-1, 3}), Config(8), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<SlotLocations> slots = {
      {{{"in0", 48, 0}}, {{"out0", 24, 0}}},
      {{{"in1", 48, 0}}, {{"out1", 24, 0}}},
  };
  const auto requests = BuildSharedMemoryRequests(*plan, slots);
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_EQ(requests->size(), 2u);
  for (size_t i = 0; i < requests->size(); ++i) {
    const inference::ModelInferRequest& request = (*requests)[i];
    EXPECT_EQ(request.model_name(), "m");
    EXPECT_EQ(request.raw_input_contents_size(), 0);
    ASSERT_EQ(request.inputs_size(), 1);
    EXPECT_THAT(request.inputs(0).shape(), ElementsAre(2, 6));
    EXPECT_EQ(request.inputs(0).parameters().at("shared_memory_region").string_param(),
              absl::StrCat("in", i));
    EXPECT_EQ(request.inputs(0).parameters().at("shared_memory_byte_size").int64_param(), 48);
    ASSERT_EQ(request.outputs_size(), 1);
    EXPECT_EQ(request.outputs(0).name(), "output");
    EXPECT_EQ(request.outputs(0).parameters().at("shared_memory_region").string_param(),
              absl::StrCat("out", i));
  }
  const std::vector<SlotLocations> mismatched = {{{}, {{"out0", 24, 0}}}};
  EXPECT_FALSE(BuildSharedMemoryRequests(*plan, mismatched).ok());
}

TEST(RequestPoolTest, SlotsAreTheLargestConcurrencyOrTheInputs) {
  BenchOptions options = Options(1);
  options.concurrency = {1, 16, 4};
  EXPECT_EQ(SharedMemorySlots(options), 16);
  options.mode = LoadMode::kOpenLoop;
  options.num_inputs = 5;
  EXPECT_EQ(SharedMemorySlots(options), 5);
}

LevelResult Level(int concurrency, int64_t sent, int64_t answered, int64_t failed) {
  LevelResult level;
  level.spec.concurrency = concurrency;
  level.decision = WindowDecision::kStable;
  level.windows_measured = 3;
  level.windows_reported = 3;
  level.sent = sent;
  level.answered = answered;
  level.succeeded = answered - failed;
  level.failed = failed;
  level.lost = sent - answered;
  if (failed > 0) level.errors_by_code["UNAVAILABLE"] = failed;
  level.requests_per_s = 100;
  level.inferences_per_s = 100;
  level.server.available = true;
  level.server.avg_batch_size = 1;
  return level;
}

BenchReport Report(std::vector<LevelResult> levels) {
  BenchReport report;
  report.options.model = "gemm";
  report.plan.model = "gemm";
  report.plan.inputs.push_back({"input", {1, 64}});
  report.levels = std::move(levels);
  return report;
}

TEST(ReportTest, SaysEveryRequestWasAnswered) {
  std::ostringstream out;
  PrintReport(Report({Level(1, 10, 10, 0), Level(4, 30, 30, 0)}), out);
  EXPECT_THAT(out.str(), HasSubstr("all 40 requests answered, none failed"));
  EXPECT_THAT(out.str(), HasSubstr("concurrency"));
  EXPECT_THAT(out.str(), Not(HasSubstr("LOST")));
  const nlohmann::json json = ReportToJson(Report({Level(1, 10, 10, 0)}));
  EXPECT_EQ(json["summary"]["ok"], true);
  EXPECT_EQ(json["summary"]["all_answered"], true);
}

TEST(ReportTest, SaysWhichTransportCarriedTheTensors) {
  BenchReport report = Report({Level(1, 10, 10, 0)});
  std::ostringstream plain;
  PrintReport(report, plain);
  EXPECT_THAT(plain.str(), HasSubstr("tensors: in the gRPC messages"));
  nlohmann::json json = ReportToJson(report);
  EXPECT_EQ(json["shared_memory"], "none");
  EXPECT_TRUE(json["settings"]["shared_memory_slots"].is_null());
  EXPECT_TRUE(json["settings"]["output_shared_memory_size"].is_null());

  report.options.shared_memory = SharedMemoryType::kSystem;
  report.plan.outputs.push_back({"output", 256});
  report.shared_memory_slots = 4;
  std::ostringstream shared;
  PrintReport(report, shared);
  EXPECT_THAT(shared.str(), HasSubstr("tensors: in system shared memory, 4 slot(s)"));
  EXPECT_THAT(shared.str(), HasSubstr("output 256 B"));
  json = ReportToJson(report);
  EXPECT_EQ(json["shared_memory"], "system");
  EXPECT_EQ(json["settings"]["shared_memory_slots"], 4);
  EXPECT_EQ(json["settings"]["output_shared_memory_size"]["output"], 256);
}

TEST(ReportTest, SaysHowRequestsWereSerialised) {
  BenchReport report = Report({Level(1, 10, 10, 0)});
  std::ostringstream once;
  PrintReport(report, once);
  EXPECT_THAT(once.str(), Not(HasSubstr("serialised")));
  EXPECT_EQ(ReportToJson(report)["settings"]["serialization"], "once");

  report.options.typed_serialization = true;
  std::ostringstream typed;
  PrintReport(report, typed);
  EXPECT_THAT(typed.str(), HasSubstr("each request serialised and each answer parsed"));
  EXPECT_EQ(ReportToJson(report)["settings"]["serialization"], "typed");
}

TEST(ReportTest, SaysWhatWasLostAndWhatFailed) {
  std::ostringstream out;
  const BenchReport report = Report({Level(1, 10, 10, 2), Level(4, 30, 27, 0)});
  PrintReport(report, out);
  EXPECT_THAT(out.str(), HasSubstr("LOST: 3 of 40 requests were never answered"));
  EXPECT_THAT(out.str(), HasSubstr("FAILED: 2 (UNAVAILABLE:2)"));
  const RunSummary summary = Summarize(report.levels);
  EXPECT_FALSE(summary.ok());
  const nlohmann::json json = ReportToJson(report);
  EXPECT_EQ(json["summary"]["lost"], 3);
  EXPECT_EQ(json["summary"]["failed"], 2);
  EXPECT_EQ(json["summary"]["errors"]["UNAVAILABLE"], 2);
  EXPECT_EQ(json["summary"]["ok"], false);
  EXPECT_EQ(json["levels"][0]["errors"]["UNAVAILABLE"], 2);
}

}  // namespace
}  // namespace fuseserve::client
