#include "client/bench/bench_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/bench/bench_options.h"
#include "client/bench/level_runner.h"
#include "client/bench/measurement.h"
#include "client/bench/progress_line.h"
#include "client/bench/report.h"
#include "client/bench/request_pool.h"
#include "client/bench/request_sender.h"
#include "client/client.h"
#include "client/interrupt_cleanup.h"
#include "client/shared_memory.h"
#include "client/shared_memory_registry.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_service.grpc.pb.h"

namespace fuseserve::client {

namespace {

constexpr absl::Duration kControlTimeout = absl::Seconds(10);

absl::Status FromGrpc(const grpc::Status& status, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// Metadata, config and statistics go over their own channel so that they
// never queue behind the load.
class ControlClient {
 public:
  ControlClient(const std::string& url, std::shared_ptr<grpc::ChannelCredentials> credentials)
      : stub_(inference::GRPCInferenceService::NewStub(
            CreateBenchChannel(url, -1, std::move(credentials)))) {}

  absl::StatusOr<inference::ModelMetadataResponse> Metadata(const BenchOptions& options) {
    inference::ModelMetadataRequest request;
    request.set_name(options.model);
    request.set_version(options.model_version);
    inference::ModelMetadataResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kControlTimeout));
    const grpc::Status status = stub_->ModelMetadata(&context, request, &response);
    if (!status.ok()) {
      return FromGrpc(status,
                      absl::StrCat("metadata of model \"", options.model, "\" from ", options.url));
    }
    return response;
  }

  absl::StatusOr<inference::ModelConfigResponse> Config(const BenchOptions& options) {
    inference::ModelConfigRequest request;
    request.set_name(options.model);
    request.set_version(options.model_version);
    inference::ModelConfigResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kControlTimeout));
    const grpc::Status status = stub_->ModelConfig(&context, request, &response);
    if (!status.ok()) {
      return FromGrpc(status,
                      absl::StrCat("config of model \"", options.model, "\" from ", options.url));
    }
    return response;
  }

  absl::StatusOr<ServerCounters> Counters(const BenchOptions& options) {
    inference::ModelStatisticsRequest request;
    request.set_name(options.model);
    request.set_version(options.model_version);
    inference::ModelStatisticsResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kControlTimeout));
    const grpc::Status status = stub_->ModelStatistics(&context, request, &response);
    if (!status.ok()) return FromGrpc(status, "ModelStatistics");
    return CountersFromStatistics(response, options.model, options.model_version);
  }

 private:
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

std::vector<LevelSpec> Levels(const BenchOptions& options) {
  std::vector<LevelSpec> levels;
  if (options.mode == LoadMode::kClosedLoop) {
    for (int concurrency : options.concurrency) {
      levels.push_back({LoadMode::kClosedLoop, concurrency, 0, options.arrivals, options.seed});
    }
  } else {
    for (double rate : options.rates_per_s) {
      levels.push_back({LoadMode::kOpenLoop, 0, rate, options.arrivals, options.seed});
    }
  }
  return levels;
}

// Runs every level; errors here are the ones that prevent a run at all.
absl::StatusOr<BenchReport> RunBench(const BenchOptions& options) {
  ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(options.tls));
  ControlClient control(options.url, credentials);
  ASSIGN_OR_RETURN(const inference::ModelMetadataResponse metadata, control.Metadata(options));
  ASSIGN_OR_RETURN(const inference::ModelConfigResponse config, control.Config(options));
  BenchReport report;
  report.options = options;
  ASSIGN_OR_RETURN(report.plan, PlanRequests(metadata, config, options));
  std::vector<inference::ModelInferRequest> requests =
      BuildRequestPool(report.plan, options.num_inputs, options.seed);

  // Destroyed in reverse: the sender (no call in flight after it) before the
  // interrupt handler before the regions it releases.
  std::unique_ptr<Client> shared_memory_client;
  std::unique_ptr<SharedMemoryRegistry> registry;
  std::unique_ptr<InterruptCleanup> interrupt;
  RequestAssignment assignment = RequestAssignment::kRoundRobin;
  if (options.shared_memory == SharedMemoryType::kSystem) {
    shared_memory_client = Client::Create(options.url, credentials);
    registry = std::make_unique<SharedMemoryRegistry>(shared_memory_client.get());
    ASSIGN_OR_RETURN(interrupt, InterruptCleanup::Install("fuseserve-cli bench", [&registry] {
                       registry->ReleaseBeforeExit();
                     }));
    report.shared_memory_slots = SharedMemorySlots(options);
    ASSIGN_OR_RETURN(
        const std::vector<SlotLocations> slots,
        CreateSlotRegions(report.plan, requests, report.shared_memory_slots, *registry));
    ASSIGN_OR_RETURN(requests, BuildSharedMemoryRequests(report.plan, slots));
    assignment = RequestAssignment::kPerSlot;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RequestSender> sender,
                   RequestSender::Connect(options.url, credentials, options.channels,
                                          std::move(requests), assignment, options.timeout,
                                          options.typed_serialization ? Serialization::kTyped
                                                                      : Serialization::kOnce,
                                          options.completion_queues));

  LevelSettings settings;
  settings.rule.stability = options.stability;
  settings.rule.max_windows = options.max_windows;
  settings.rule.fixed_duration = options.duration.has_value();
  settings.warmup = options.warmup;
  settings.window = options.duration.value_or(options.window);
  settings.drain_timeout = options.drain_timeout;
  settings.inferences_per_request = report.plan.inferences_per_request;

  const bool show_progress = !options.quiet && ProgressLine::StderrIsTerminal();
  ProgressLine progress(show_progress);
  ProgressSink sink;
  if (show_progress) sink = [&progress](const std::string& line) { progress.Update(line); };
  for (const LevelSpec& spec : Levels(options)) {
    LevelResult level = RunLevel(
        spec, settings, *sender, [&] { return control.Counters(options); }, sink);
    progress.Clear();
    if (!options.quiet) {
      std::cerr << absl::StrFormat(
          "%s: %.1f infer/s, p99 %.3f ms, %d sent, %d lost, %d failed (%s)\n", LevelName(spec),
          level.inferences_per_s, level.latency.p99_us / 1000.0, level.sent, level.lost,
          level.failed, WindowDecisionName(level.decision));
    }
    report.levels.push_back(std::move(level));
  }
  if (registry != nullptr) {
    sender.reset();
    interrupt.reset();
    if (const absl::Status released = registry->Release(); !released.ok()) {
      std::cerr << "fuseserve-cli bench: warning: " << released.message() << "\n";
    }
  }
  return report;
}

}  // namespace

int RunBenchCommand(int argc, char** argv) {
  absl::StatusOr<BenchOptions> options = ParseBenchOptions(argc, argv);
  if (!options.ok()) {
    std::cerr << "fuseserve-cli bench: " << options.status().message()
              << "\n(fuseserve-cli bench --help lists the options)\n";
    return 2;
  }
  if (options->help) {
    std::cout << kBenchUsage;
    return 0;
  }
  absl::StatusOr<BenchReport> report = RunBench(*options);
  if (!report.ok()) {
    std::cerr << "fuseserve-cli bench: " << report.status().message() << "\n";
    return 1;
  }
  PrintReport(*report, std::cout);
  std::cout.flush();
  int exit_code = 0;
  if (!options->json_path.empty()) {
    const absl::Status written = WriteJsonReport(*report, options->json_path);
    if (!written.ok()) {
      std::cerr << "fuseserve-cli bench: " << written.message() << "\n";
      exit_code = 1;
    }
  }
  const RunSummary summary = Summarize(report->levels);
  if (!summary.ok()) {
    std::cerr << "fuseserve-cli bench: " << summary.failed << " request(s) failed and "
              << summary.lost << " were lost"
              << (options->allow_errors ? " (exit code 0: --allow-errors)" : "") << "\n";
    if (!options->allow_errors) exit_code = 1;
  }
  return exit_code;
}

}  // namespace fuseserve::client
