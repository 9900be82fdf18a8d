// `fuseserve-cli stats [MODEL]`: the server's ModelStatistics as a table (or
// the full answer as JSON).

#include <algorithm>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "client/cli/commands.h"
#include "client/client.h"
#include "google/protobuf/util/json_util.h"

namespace fuseserve::client::cli {
namespace {

constexpr char kUsage[] =
    R"(Usage: fuseserve-cli [global options] stats [MODEL] [--version V] [--json]

Prints the server's statistics for MODEL (every model when omitted), one row
per model version:
  success / fail   requests answered successfully / with an error
  inferences       inferences run (a request of batch size N counts N)
  executions       model executions (batches) run
  avg batch        inferences / executions
  queue us         average time a successful request waited in the queue, microseconds
  compute us       average input + infer + output time of a successful request's
                   execution, microseconds
--json prints the ModelStatisticsResponse as JSON instead (durations in ns;
64-bit counts are JSON strings, per protobuf's JSON mapping).
Exit code 0 on success, 1 when the request fails (e.g. NOT_FOUND), 2 on a bad command line.
)";

// Average of a StatisticDuration in microseconds (0 when nothing was counted).
double AverageUs(const inference::StatisticDuration& duration) {
  return duration.count() == 0 ? 0.0 : duration.ns() / 1e3 / duration.count();
}

}  // namespace

int RunStatsCommand(const GlobalOptions& global, int argc, char** argv) {
  const auto args = ParseServerCommandArgs(argc, argv, {"version"}, {"json"});
  if (!args.ok()) {
    return Fail("stats", std::string(args.status().message()) + "\n" + kUsage, kExitUsage);
  }
  if (args->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (args->positional().size() > 1) {
    return Fail("stats", "expected at most one MODEL\n" + std::string(kUsage), kExitUsage);
  }
  const std::string model = args->positional().empty() ? "" : args->positional()[0];
  const auto connected = Connect(global, *args);
  if (!connected.ok()) return Fail("stats", std::string(connected.status().message()), kExitUsage);
  Client& client = **connected;
  const auto stats = client.ModelStatistics(model, args->Last("version").value_or(""));
  if (!stats.ok()) return Fail("stats", stats.status().ToString());

  if (args->Has("json")) {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(*stats, &json, options);
    std::cout << json;
    return kExitOk;
  }
  size_t name_width = 5;
  for (const auto& model_stats : stats->model_stats()) {
    name_width = std::max(name_width, model_stats.name().size());
  }
  const int width = static_cast<int>(name_width);
  std::cout << absl::StrFormat("%-*s %7s %10s %8s %12s %12s %9s %12s %12s\n", width, "model",
                               "version", "success", "fail", "inferences", "executions",
                               "avg batch", "queue us", "compute us");
  for (const auto& model_stats : stats->model_stats()) {
    const auto& infer = model_stats.inference_stats();
    const uint64_t executions = model_stats.execution_count();
    const double avg_batch =
        executions == 0 ? 0.0 : static_cast<double>(model_stats.inference_count()) / executions;
    const double compute_us = AverageUs(infer.compute_input()) + AverageUs(infer.compute_infer()) +
                              AverageUs(infer.compute_output());
    std::cout << absl::StrFormat("%-*s %7s %10d %8d %12d %12d %9.2f %12.1f %12.1f\n", width,
                                 model_stats.name(), model_stats.version(), infer.success().count(),
                                 infer.fail().count(), model_stats.inference_count(), executions,
                                 avg_batch, AverageUs(infer.queue()), compute_us);
  }
  return kExitOk;
}

}  // namespace fuseserve::client::cli
