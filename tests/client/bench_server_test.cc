// The bench against the real server (the small models of the client tests
// repository, tests/client/test_server.h), run exactly as
// `fuseserve-cli bench ...` runs it (RunBenchCommand), with short windows so
// that the suite takes seconds. Timing-dependent figures are only checked
// for sanity (ordering, positivity), never for particular values. The
// --shared-memory system runs use a second server that allows it, and the
// interrupt test the built fuseserve-cli.

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/config.h"
#include "client/bench/bench_command.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/test_server.h"
#include "tests/testing/test_dir.h"

namespace fuseserve::client {
namespace {

using ::testing::HasSubstr;

class BenchServerTest : public testing::SuiteServerTest {
 protected:
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_TRUE(server_->process->Terminate().ok());
    }
    SuiteServerTest::TearDownTestSuite();
  }

  // Runs `fuseserve-cli bench MODEL --url ... --quiet --json FILE <args>`.
  int RunBench(const std::string& json_name, std::vector<std::string> args,
               const std::string& model = testing::kGemmModel) {
    json_path_ = reports_.Path(json_name);
    std::filesystem::remove(json_path_);
    std::vector<std::string> all = {"bench",   model,    "--url",   server_->process->grpc_target(),
                                    "--quiet", "--json", json_path_};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : all) argv.push_back(arg.data());
    argv.push_back(nullptr);
    return RunBenchCommand(static_cast<int>(all.size()), argv.data());
  }

  nlohmann::json ReadJson() {
    std::ifstream file(json_path_);
    EXPECT_TRUE(file.good()) << json_path_ << " was not written";
    return nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  }

  TestDir reports_{"fuseserve-bench"};  // this test's reports, removed with it
  std::string json_path_;
};

// Every field of the schema documented in README.md "Bench".
void ExpectEveryField(const nlohmann::json& json) {
  for (const char* key : {"model", "model_version", "url", "mode", "arrivals", "shared_memory",
                          "batch_size", "inputs", "settings", "levels", "summary"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  for (const char* key : {"channels", "serialization", "completion_queues", "pregenerated_inputs",
                          "seed", "warmup_s", "window_s",
                          "stability", "max_windows", "duration_s", "timeout_ms", "drain_timeout_s",
                          "shared_memory_slots", "output_shared_memory_size"}) {
    EXPECT_TRUE(json["settings"].contains(key)) << "settings." << key;
  }
  for (const char* key :
       {"sent", "answered", "succeeded", "failed", "lost", "errors", "all_answered", "ok"}) {
    EXPECT_TRUE(json["summary"].contains(key)) << "summary." << key;
  }
  const std::vector<std::pair<const char*, std::vector<const char*>>> level_fields = {
      {"measurement",
       {"status", "windows_measured", "windows_reported", "measured_s", "window_requests_per_s"}},
      {"throughput", {"inferences_per_s", "requests_per_s"}},
      {"latency_us", {"count", "avg", "min", "max", "p50", "p90", "p95", "p99"}},
      {"requests", {"sent", "answered", "succeeded", "failed", "lost"}},
      {"load", {"send_rate_per_s", "max_outstanding", "outstanding_at_end", "completion_queues"}},
      {"server",
       {"available", "error", "requests", "failed", "executions", "inferences", "avg_batch_size",
        "avg_request_us", "avg_queue_us", "avg_compute_input_us", "avg_compute_infer_us",
        "avg_compute_output_us"}},
  };
  for (const nlohmann::json& level : json["levels"]) {
    for (const char* key : {"concurrency", "request_rate", "errors"}) {
      EXPECT_TRUE(level.contains(key)) << "levels[]." << key;
    }
    for (const auto& [group, keys] : level_fields) {
      ASSERT_TRUE(level.contains(group)) << "levels[]." << group;
      for (const char* key : keys) {
        EXPECT_TRUE(level[group].contains(key)) << "levels[]." << group << "." << key;
      }
    }
  }
}

// Figures every healthy level must show.
void ExpectSaneLevel(const nlohmann::json& level, int64_t batch_size) {
  SCOPED_TRACE(level.dump());
  const nlohmann::json& latency = level["latency_us"];
  EXPECT_GT(latency["count"].get<int64_t>(), 0);
  EXPECT_GT(latency["min"].get<double>(), 0);
  EXPECT_LE(latency["min"].get<double>(), latency["p50"].get<double>());
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>());
  EXPECT_LE(latency["p90"].get<double>(), latency["p95"].get<double>());
  EXPECT_LE(latency["p95"].get<double>(), latency["p99"].get<double>());
  EXPECT_LE(latency["p99"].get<double>(), latency["max"].get<double>());
  EXPECT_LE(latency["min"].get<double>(), latency["avg"].get<double>());
  EXPECT_LE(latency["avg"].get<double>(), latency["max"].get<double>());

  const nlohmann::json& throughput = level["throughput"];
  EXPECT_GT(throughput["requests_per_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(throughput["inferences_per_s"].get<double>(),
                   throughput["requests_per_s"].get<double>() * batch_size);

  const nlohmann::json& requests = level["requests"];
  EXPECT_GT(requests["sent"].get<int64_t>(), 0);
  EXPECT_EQ(requests["answered"], requests["sent"]);
  EXPECT_EQ(requests["succeeded"], requests["sent"]);
  EXPECT_EQ(requests["failed"], 0);
  EXPECT_EQ(requests["lost"], 0);
  EXPECT_TRUE(level["errors"].empty());
  EXPECT_GE(requests["sent"].get<int64_t>(), latency["count"].get<int64_t>());

  const nlohmann::json& measurement = level["measurement"];
  EXPECT_GE(measurement["windows_measured"].get<int>(), measurement["windows_reported"].get<int>());
  EXPECT_GE(measurement["windows_reported"].get<int>(), 1);
  EXPECT_GT(measurement["measured_s"].get<double>(), 0);

  const nlohmann::json& server = level["server"];
  EXPECT_EQ(server["available"], true) << server["error"];
  EXPECT_GT(server["requests"].get<int64_t>(), 0);
  EXPECT_GT(server["executions"].get<int64_t>(), 0);
  // Triton's counting rule (server/metrics/model_metrics.h) records an
  // execution before the successes of its requests, so a window edge can
  // fall between the two for each request in flight: the executions exceed
  // the completed requests by at most the requests outstanding.
  EXPECT_LE(server["executions"].get<int64_t>(),
            server["inferences"].get<int64_t>() / batch_size +
                level["load"]["max_outstanding"].get<int64_t>());
  EXPECT_GT(server["avg_batch_size"].get<double>(), 0.0);
  EXPECT_GE(server["inferences"].get<int64_t>(), server["requests"].get<int64_t>());
  EXPECT_GT(server["avg_request_us"].get<double>(), 0);
  EXPECT_GE(server["avg_queue_us"].get<double>(), 0);
  EXPECT_GT(server["avg_compute_infer_us"].get<double>(), 0);
}

TEST_F(BenchServerTest, ClosedLoopSweepReportsEveryFieldWithSaneNumbers) {
  ASSERT_EQ(RunBench("closed.json", {"--concurrency", "1,4", "--warmup-s", "0.2", "--window-s",
                                     "0.5", "--max-windows", "4", "--stability", "0.5"}),
            0);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  ExpectEveryField(json);
  EXPECT_EQ(json["model"], testing::kGemmModel);
  EXPECT_EQ(json["mode"], "closed_loop");
  EXPECT_EQ(json["batch_size"], 1);
  EXPECT_EQ(json["inputs"][0]["shape"], nlohmann::json({1, 64}));
  ASSERT_EQ(json["levels"].size(), 2u);
  EXPECT_EQ(json["levels"][0]["concurrency"], 1);
  EXPECT_EQ(json["levels"][1]["concurrency"], 4);
  for (const nlohmann::json& level : json["levels"]) {
    ExpectSaneLevel(level, 1);
    EXPECT_TRUE(level["request_rate"].is_null());
  }
  // Closed loop: never more in flight than the concurrency, and no more
  // completion queues than that (of the default 4).
  EXPECT_LE(json["levels"][0]["load"]["max_outstanding"].get<int>(), 1);
  EXPECT_LE(json["levels"][1]["load"]["max_outstanding"].get<int>(), 4);
  EXPECT_EQ(json["settings"]["completion_queues"], 4);
  EXPECT_EQ(json["levels"][0]["load"]["completion_queues"], 1);
  EXPECT_EQ(json["levels"][1]["load"]["completion_queues"], 4);
  EXPECT_EQ(json["summary"]["ok"], true);
  EXPECT_EQ(json["summary"]["all_answered"], true);
  EXPECT_EQ(json["summary"]["lost"], 0);
  EXPECT_EQ(json["summary"]["sent"], json["levels"][0]["requests"]["sent"].get<int64_t>() +
                                         json["levels"][1]["requests"]["sent"].get<int64_t>());
}

TEST_F(BenchServerTest, BatchSizeMultipliesInferences) {
  ASSERT_EQ(RunBench("batch.json", {"--concurrency", "2", "--batch-size", "4", "--warmup-s", "0.1",
                                    "--duration-s", "0.5"}),
            0);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  EXPECT_EQ(json["batch_size"], 4);
  EXPECT_EQ(json["inputs"][0]["shape"], nlohmann::json({4, 64}));
  ASSERT_EQ(json["levels"].size(), 1u);
  const nlohmann::json& level = json["levels"][0];
  ExpectSaneLevel(level, 4);
  EXPECT_EQ(level["measurement"]["status"], "fixed_duration");
  EXPECT_EQ(level["measurement"]["windows_measured"], 1);
  // Every request carries 4 rows, so every execution has at least 4. The
  // statistics are read while requests are in flight and an execution is
  // counted before its requests' inferences, so each end of the window may
  // hold up to 2 (the concurrency) executions whose inferences fall outside.
  const int64_t executions = level["server"]["executions"].get<int64_t>();
  const int64_t inferences = level["server"]["inferences"].get<int64_t>();
  EXPECT_EQ(inferences % 4, 0);
  EXPECT_GE(inferences, 4 * (executions - 2 * 2)) << level["server"].dump();
}

// Requests serialised per call and answers parsed, as a typed client: the
// same answers, every one of them OK.
TEST_F(BenchServerTest, TypedSerializationAnswersEveryRequest) {
  ASSERT_EQ(RunBench("typed.json", {"--concurrency", "4", "--typed-serialization", "--warmup-s",
                                    "0.1", "--duration-s", "0.5"}),
            0);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  EXPECT_EQ(json["settings"]["serialization"], "typed");
  ASSERT_EQ(json["levels"].size(), 1u);
  ExpectSaneLevel(json["levels"][0], 1);
  EXPECT_EQ(json["summary"]["ok"], true);
  EXPECT_EQ(json["summary"]["lost"], 0);
}

// The other tests run on the default 4 completion queues; here 1 queue and
// gRPC's callback API (0), closed and open loop: every request answered OK,
// and the sender shuts down cleanly.
TEST_F(BenchServerTest, OneQueueAndTheCallbackApiAnswerEveryRequest) {
  for (const char* queues : {"1", "0"}) {
    for (const std::vector<std::string>& load :
         {std::vector<std::string>{"--concurrency", "8"},
          std::vector<std::string>{"--rate", "200", "--arrivals", "constant"}}) {
      std::vector<std::string> args = load;
      for (const char* arg : {"--completion-queues", queues, "--warmup-s", "0.1", "--duration-s",
                              "0.5"}) {
        args.push_back(arg);
      }
      ASSERT_EQ(RunBench("queues.json", args), 0) << queues << " " << load[0];
      const nlohmann::json json = ReadJson();
      ASSERT_FALSE(json.is_discarded());
      EXPECT_EQ(json["settings"]["completion_queues"], std::atoi(queues));
      ASSERT_EQ(json["levels"].size(), 1u);
      EXPECT_EQ(json["levels"][0]["load"]["completion_queues"], std::atoi(queues));
      ExpectSaneLevel(json["levels"][0], 1);
      EXPECT_EQ(json["summary"]["ok"], true) << queues << " " << load[0];
      EXPECT_EQ(json["summary"]["lost"], 0) << queues << " " << load[0];
    }
  }
}

TEST_F(BenchServerTest, OpenLoopKeepsAModestRate) {
  ASSERT_EQ(RunBench("open.json", {"--rate", "100", "--arrivals", "constant", "--warmup-s", "0.2",
                                   "--duration-s", "1"}),
            0);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  ExpectEveryField(json);
  EXPECT_EQ(json["mode"], "open_loop");
  EXPECT_EQ(json["arrivals"], "constant");
  ASSERT_EQ(json["levels"].size(), 1u);
  const nlohmann::json& level = json["levels"][0];
  // Open loop: the calls in flight are not bounded, so every queue is used.
  EXPECT_EQ(level["load"]["completion_queues"], 4);
  ExpectSaneLevel(level, 1);
  EXPECT_EQ(level["request_rate"], 100.0);
  EXPECT_TRUE(level["concurrency"].is_null());
  // A tiny model at 100/s: the client keeps the schedule and the server keeps up.
  EXPECT_NEAR(level["load"]["send_rate_per_s"].get<double>(), 100.0, 20.0);
  EXPECT_NEAR(level["throughput"]["requests_per_s"].get<double>(), 100.0, 20.0);
}

// slow_groupnorm keeps a lone request queued for 30 s (its batcher waits
// for a batch that never fills), so these outcomes are deterministic.
TEST_F(BenchServerTest, ExpiredRequestsAreReportedByCodeAndFailTheRun) {
  ASSERT_EQ(RunBench("expired.json",
                     {"--concurrency", "2", "--shape", "8,4,4", "--timeout-ms", "50", "--warmup-s",
                      "0", "--duration-s", "0.2"},
                     testing::kSlowModel),
            1);
  nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  ExpectEveryField(json);
  const nlohmann::json& level = json["levels"][0];
  EXPECT_GE(level["requests"]["failed"].get<int64_t>(), 2);
  EXPECT_EQ(level["requests"]["failed"], level["requests"]["sent"]);
  EXPECT_EQ(level["requests"]["succeeded"], 0);
  EXPECT_EQ(level["errors"]["DEADLINE_EXCEEDED"], level["requests"]["failed"]);
  EXPECT_EQ(level["requests"]["lost"], 0);
  EXPECT_EQ(level["throughput"]["requests_per_s"], 0.0);
  EXPECT_EQ(json["summary"]["ok"], false);
  EXPECT_EQ(json["summary"]["all_answered"], true);

  // The same run with --allow-errors: the same report, but exit code 0.
  EXPECT_EQ(RunBench("allowed.json",
                     {"--concurrency", "1", "--shape", "8,4,4", "--timeout-ms", "50", "--warmup-s",
                      "0", "--duration-s", "0.1", "--allow-errors"},
                     testing::kSlowModel),
            0);
  json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  EXPECT_EQ(json["summary"]["ok"], false);
  EXPECT_GT(json["summary"]["failed"].get<int64_t>(), 0);
}

TEST_F(BenchServerTest, UnansweredRequestsAreCountedLost) {
  ASSERT_EQ(RunBench("lost.json",
                     {"--concurrency", "1", "--shape", "8,4,4", "--warmup-s", "0", "--duration-s",
                      "0.1", "--drain-timeout-s", "0.2"},
                     testing::kSlowModel),
            1);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  const nlohmann::json& level = json["levels"][0];
  EXPECT_EQ(level["requests"]["sent"], 1);
  EXPECT_EQ(level["requests"]["answered"], 0);
  EXPECT_EQ(level["requests"]["lost"], 1);
  EXPECT_EQ(level["load"]["outstanding_at_end"], 1);
  EXPECT_EQ(json["summary"]["lost"], 1);
  EXPECT_EQ(json["summary"]["all_answered"], false);
}

TEST_F(BenchServerTest, UnknownModelFailsBeforeAnyLoad) {
  std::string target = server_->process->grpc_target();
  std::vector<std::string> all = {"bench", "no_such_model", "--url", target, "--quiet"};
  std::vector<char*> argv;
  for (std::string& arg : all) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunBenchCommand(static_cast<int>(all.size()), argv.data()), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("no_such_model"));
}

TEST_F(BenchServerTest, SharedMemoryRefusedByTheServerFailsBeforeAnyLoadAndLeavesNothing) {
  // This server runs without --allow-shared-memory.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunBench("refused.json", {"--shared-memory", "system", "--duration-s", "0.1"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("registering system shared-memory region"));
  EXPECT_THAT(testing::SharedMemoryObjectsOf(::getpid()), ::testing::IsEmpty());
}

// The server with --allow-shared-memory.
class BenchSharedMemoryTest : public BenchServerTest {
 protected:
  static void SetUpTestSuite() { StartSuiteServer({testing::kAllowSharedMemoryFlag}); }

  void TearDown() override {
    // Whatever the run did, nothing is left registered or in /dev/shm.
    const auto status = Client::Create(server_->process->grpc_target())->SystemSharedMemoryStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    if (status.ok()) {
      EXPECT_EQ(status->regions_size(), 0);
    }
    EXPECT_THAT(testing::SharedMemoryObjectsOf(::getpid()), ::testing::IsEmpty());
  }
};

TEST_F(BenchSharedMemoryTest, ClosedLoopThroughSystemSharedMemoryHasNoErrorsAndSaysSo) {
  ASSERT_EQ(RunBench("shm.json", {"--shared-memory", "system", "--concurrency", "1,3", "--warmup-s",
                                  "0.1", "--duration-s", "0.5"}),
            0);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  ExpectEveryField(json);
  EXPECT_EQ(json["shared_memory"], "system");
  EXPECT_EQ(json["settings"]["shared_memory_slots"], 3);
  // gemm's output is [1, 64] float32.
  EXPECT_EQ(json["settings"]["output_shared_memory_size"]["output"], 256);
  ASSERT_EQ(json["levels"].size(), 2u);
  for (const nlohmann::json& level : json["levels"]) ExpectSaneLevel(level, 1);
  EXPECT_EQ(json["summary"]["ok"], true);
}

// Sharing is the point: two requests in flight on one slot have the server
// write the same output region from two instances at once, a race the
// client asks for (Triton's perf_analyzer shares its regions the same way).
// ThreadSanitizer, which watches the server of the tsan stage, reports it.
TEST_F(BenchSharedMemoryTest, OpenLoopSharesItsSlotsWithoutErrors) {
#ifdef ABSL_HAVE_THREAD_SANITIZER
  GTEST_SKIP() << "the shared output regions are written concurrently by design";
#endif
  ASSERT_EQ(
      RunBench("shm-open.json", {"--shared-memory", "system", "--rate", "100", "--inputs", "2",
                                 "--batch-size", "2", "--warmup-s", "0.1", "--duration-s", "0.5"}),
      0);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  EXPECT_EQ(json["settings"]["shared_memory_slots"], 2);
  EXPECT_EQ(json["settings"]["output_shared_memory_size"]["output"], 2 * 256);
  ExpectSaneLevel(json["levels"][0], 2);
}

TEST_F(BenchSharedMemoryTest, AFailedRunStillRemovesItsRegions) {
  // slow_groupnorm keeps a lone request queued for 30 s: it is lost.
  ASSERT_EQ(RunBench("shm-lost.json",
                     {"--shared-memory", "system", "--output-shared-memory-size", "512",
                      "--concurrency", "1", "--shape", "8,4,4", "--warmup-s", "0", "--duration-s",
                      "0.1", "--drain-timeout-s", "0.2"},
                     testing::kSlowModel),
            1);
  const nlohmann::json json = ReadJson();
  ASSERT_FALSE(json.is_discarded());
  EXPECT_EQ(json["summary"]["lost"], 1);
}

TEST_F(BenchSharedMemoryTest, VariableOutputDimsNeedTheSize) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunBench("shm-variable.json",
                     {"--shared-memory", "system", "--shape", "8,4,4", "--duration-s", "0.1"},
                     testing::kGroupNormModel),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("--output-shared-memory-size"));
}

TEST_F(BenchSharedMemoryTest, AnInterruptedBenchUnregistersAndRemovesItsRegions) {
  const TestDir directory("fuseserve-bench");
  const std::string output = directory.Path("interrupted.txt");
  const auto pid = testing::SpawnProcess(
      {FUSESERVE_CLI, "bench", testing::kGemmModel, "--url", server_->process->grpc_target(),
       "--shared-memory", "system", "--concurrency", "2", "--duration-s", "60", "--quiet"},
      output);
  ASSERT_TRUE(pid.ok()) << pid.status();
  const absl::Status registered =
      testing::WaitForRegisteredRegions(server_->process->grpc_target(), 4);
  EXPECT_TRUE(registered.ok()) << registered;
  ::kill(*pid, SIGINT);
  const auto exit_code = testing::WaitForExit(*pid);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  std::ifstream file(output);
  const std::string printed((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
  EXPECT_EQ(*exit_code, 130) << printed;
  EXPECT_THAT(printed, HasSubstr("fuseserve-cli bench: interrupted (SIGINT)"));
  EXPECT_THAT(testing::SharedMemoryObjectsOf(*pid), ::testing::IsEmpty());
  std::filesystem::remove(output);
}

TEST(BenchCommandTest, BadUsageExitsTwoAndHelpZero) {
  std::vector<std::string> bad = {"bench", "gemm", "--concurrency", "0"};
  std::vector<char*> argv;
  for (std::string& arg : bad) argv.push_back(arg.data());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunBenchCommand(static_cast<int>(argv.size()), argv.data()), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("--concurrency"));

  std::vector<std::string> help = {"bench", "--help"};
  argv.clear();
  for (std::string& arg : help) argv.push_back(arg.data());
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunBenchCommand(static_cast<int>(argv.size()), argv.data()), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("Usage: fuseserve-cli bench"));
}

}  // namespace
}  // namespace fuseserve::client
