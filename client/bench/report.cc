#include "client/bench/report.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fuseserve::client {

namespace {

// Right-aligned columns; widths from the widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void Print(std::ostream& out) const {
    std::vector<size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
        widths[i] = std::max(widths[i], row[i].size());
      }
    }
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
        absl::StrAppend(&line, i == 0 ? "" : "  ", std::string(widths[i] - row[i].size(), ' '),
                        row[i]);
      }
      out << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Ms(double us) { return absl::StrFormat("%.3f", us / 1000.0); }
std::string Rate(double per_s) { return absl::StrFormat("%.1f", per_s); }

std::string ModeName(LoadMode mode) {
  return mode == LoadMode::kClosedLoop ? "closed_loop" : "open_loop";
}

std::string ArrivalsName(Arrivals arrivals) {
  return arrivals == Arrivals::kPoisson ? "poisson" : "constant";
}

std::string LevelLabel(const LevelSpec& spec) {
  return spec.mode == LoadMode::kClosedLoop ? absl::StrCat(spec.concurrency)
                                            : absl::StrFormat("%g", spec.rate_per_s);
}

std::string ErrorsText(const std::map<std::string, int64_t>& errors) {
  if (errors.empty()) return "0";
  std::vector<std::string> parts;
  for (const auto& [code, count] : errors) parts.push_back(absl::StrCat(code, ":", count));
  return absl::StrJoin(parts, ",");
}

std::string MeasurementText(const LevelResult& level) {
  switch (level.decision) {
    case WindowDecision::kStable:
      return absl::StrCat("stable/", level.windows_measured);
    case WindowDecision::kNotStable:
      return absl::StrCat("UNSTABLE/", level.windows_measured);
    case WindowDecision::kFixedDuration:
      return absl::StrFormat("fixed %.0fs", level.measured_s);
    case WindowDecision::kContinue:
      break;
  }
  return "-";
}

std::string ShapesText(const RequestPlan& plan) {
  std::vector<std::string> parts;
  for (const InputSpec& input : plan.inputs) {
    parts.push_back(absl::StrCat(input.name, " [", absl::StrJoin(input.shape, ","), "]"));
  }
  return absl::StrJoin(parts, ", ");
}

std::string TransportText(const BenchReport& report) {
  if (report.options.shared_memory != SharedMemoryType::kSystem) return "in the gRPC messages";
  std::vector<std::string> outputs;
  for (const OutputSpec& output : report.plan.outputs) {
    outputs.push_back(absl::StrCat(output.name, " ", output.shared_memory_byte_size, " B"));
  }
  return absl::StrCat("in system shared memory, ", report.shared_memory_slots,
                      " slot(s) with their own regions (outputs: ", absl::StrJoin(outputs, ", "),
                      ")");
}

}  // namespace

RunSummary Summarize(const std::vector<LevelResult>& levels) {
  RunSummary summary;
  for (const LevelResult& level : levels) {
    summary.sent += level.sent;
    summary.answered += level.answered;
    summary.succeeded += level.succeeded;
    summary.failed += level.failed;
    summary.lost += level.lost;
    for (const auto& [code, count] : level.errors_by_code) summary.errors_by_code[code] += count;
  }
  return summary;
}

void PrintReport(const BenchReport& report, std::ostream& out) {
  const BenchOptions& options = report.options;
  const bool closed = options.mode == LoadMode::kClosedLoop;
  out << "fuseserve bench: model " << options.model
      << (options.model_version.empty() ? "" : absl::StrCat(" version ", options.model_version))
      << " at " << options.url << "\n"
      << "  "
      << (closed ? "closed loop"
                 : absl::StrCat("open loop, ", ArrivalsName(options.arrivals), " arrivals"))
      << ", " << report.plan.inferences_per_request << " inference(s) per request ("
      << ShapesText(report.plan) << "), " << options.channels << " channels"
      << (options.typed_serialization ? ", each request serialised and each answer parsed" : "")
      << "\n"
      << "  tensors: " << TransportText(report) << "\n"
      << "  latency: client-side end to end, over the reported windows (the last agreeing"
      << " ones)\n\n";

  std::vector<std::string> header = {closed ? "concurrency" : "rate/s"};
  if (!closed) header.push_back("sent/s");
  for (const char* column :
       {"infer/s", "req/s", "avg ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms"}) {
    header.push_back(column);
  }
  if (!closed) {
    header.push_back("backlog");
    header.push_back("max out");
  }
  for (const char* column : {"sent", "answered", "lost", "errors", "windows"}) {
    header.push_back(column);
  }
  Table client(header);
  for (const LevelResult& level : report.levels) {
    std::vector<std::string> row = {LevelLabel(level.spec)};
    if (!closed) row.push_back(Rate(level.send_rate_per_s));
    row.push_back(Rate(level.inferences_per_s));
    row.push_back(Rate(level.requests_per_s));
    for (double us : {level.latency.avg_us, level.latency.p50_us, level.latency.p90_us,
                      level.latency.p95_us, level.latency.p99_us}) {
      row.push_back(Ms(us));
    }
    if (!closed) {
      row.push_back(absl::StrCat(level.outstanding_at_end));
      row.push_back(absl::StrCat(level.max_outstanding));
    }
    row.push_back(absl::StrCat(level.sent));
    row.push_back(absl::StrCat(level.answered));
    row.push_back(absl::StrCat(level.lost));
    row.push_back(ErrorsText(level.errors_by_code));
    row.push_back(MeasurementText(level));
    client.AddRow(std::move(row));
  }
  client.Print(out);

  out << "\nserver side (ModelStatistics deltas over the same windows; ms per request):\n";
  Table server({closed ? "concurrency" : "rate/s", "avg batch", "executions", "queue ms",
                "compute in ms", "compute infer ms", "compute out ms", "server total ms",
                "client-server ms"});
  for (const LevelResult& level : report.levels) {
    if (!level.server.available) {
      server.AddRow({LevelLabel(level.spec), "n/a: " + level.server_error});
      continue;
    }
    const ServerSideStats& s = level.server;
    server.AddRow({LevelLabel(level.spec), absl::StrFormat("%.2f", s.avg_batch_size),
                   absl::StrCat(s.executions), Ms(s.avg_queue_us), Ms(s.avg_compute_input_us),
                   Ms(s.avg_compute_infer_us), Ms(s.avg_compute_output_us), Ms(s.avg_request_us),
                   Ms(level.latency.avg_us - s.avg_request_us)});
  }
  server.Print(out);
  out << "  (client-server: client avg latency minus the server's avg request time, i.e. the"
      << " network, gRPC and client overhead)\n\n";

  const RunSummary summary = Summarize(report.levels);
  if (summary.lost == 0) {
    out << "all " << summary.sent << " requests answered";
  } else {
    out << "LOST: " << summary.lost << " of " << summary.sent << " requests were never answered";
  }
  if (summary.failed == 0) {
    out << ", none failed\n";
  } else {
    out << "; FAILED: " << summary.failed << " (" << ErrorsText(summary.errors_by_code) << ")\n";
  }
  for (const LevelResult& level : report.levels) {
    if (level.decision == WindowDecision::kNotStable) {
      out << "note: " << LevelName(level.spec) << " did not stabilise within "
          << level.windows_measured << " windows (throughput within " << options.stability * 100
          << "%); its figures are the last " << level.windows_reported << " windows\n";
    }
  }
}

nlohmann::json ReportToJson(const BenchReport& report) {
  using nlohmann::json;
  const BenchOptions& options = report.options;
  json inputs = json::array();
  for (const InputSpec& input : report.plan.inputs) {
    inputs.push_back({{"name", input.name}, {"shape", input.shape}});
  }
  json levels = json::array();
  for (const LevelResult& level : report.levels) {
    const bool closed = level.spec.mode == LoadMode::kClosedLoop;
    const ServerSideStats& s = level.server;
    json errors = json::object();
    for (const auto& [code, count] : level.errors_by_code) errors[code] = count;
    levels.push_back({
        {"concurrency", closed ? json(level.spec.concurrency) : json(nullptr)},
        {"request_rate", closed ? json(nullptr) : json(level.spec.rate_per_s)},
        {"measurement",
         {{"status", WindowDecisionName(level.decision)},
          {"windows_measured", level.windows_measured},
          {"windows_reported", level.windows_reported},
          {"measured_s", level.measured_s},
          {"window_requests_per_s", level.window_requests_per_s}}},
        {"throughput",
         {{"inferences_per_s", level.inferences_per_s}, {"requests_per_s", level.requests_per_s}}},
        {"latency_us",
         {{"count", level.latency.count},
          {"avg", level.latency.avg_us},
          {"min", level.latency.min_us},
          {"max", level.latency.max_us},
          {"p50", level.latency.p50_us},
          {"p90", level.latency.p90_us},
          {"p95", level.latency.p95_us},
          {"p99", level.latency.p99_us}}},
        {"requests",
         {{"sent", level.sent},
          {"answered", level.answered},
          {"succeeded", level.succeeded},
          {"failed", level.failed},
          {"lost", level.lost}}},
        {"errors", errors},
        {"load",
         {{"send_rate_per_s", level.send_rate_per_s},
          {"max_outstanding", level.max_outstanding},
          {"outstanding_at_end", level.outstanding_at_end},
          {"completion_queues", level.completion_queues}}},
        {"server",
         {{"available", s.available},
          {"error", level.server_error},
          {"requests", s.requests},
          {"failed", s.failed},
          {"executions", s.executions},
          {"inferences", s.inferences},
          {"avg_batch_size", s.avg_batch_size},
          {"avg_request_us", s.avg_request_us},
          {"avg_queue_us", s.avg_queue_us},
          {"avg_compute_input_us", s.avg_compute_input_us},
          {"avg_compute_infer_us", s.avg_compute_infer_us},
          {"avg_compute_output_us", s.avg_compute_output_us}}},
    });
  }
  const RunSummary summary = Summarize(report.levels);
  json errors = json::object();
  for (const auto& [code, count] : summary.errors_by_code) errors[code] = count;
  const bool shared_memory = options.shared_memory == SharedMemoryType::kSystem;
  json output_sizes = shared_memory ? json::object() : json(nullptr);
  for (const OutputSpec& output : report.plan.outputs) {
    output_sizes[output.name] = output.shared_memory_byte_size;
  }
  return {
      {"model", options.model},
      {"model_version", options.model_version},
      {"url", options.url},
      {"mode", ModeName(options.mode)},
      {"arrivals",
       options.mode == LoadMode::kOpenLoop ? json(ArrivalsName(options.arrivals)) : json(nullptr)},
      {"shared_memory", SharedMemoryTypeName(options.shared_memory)},
      {"batch_size", report.plan.inferences_per_request},
      {"inputs", inputs},
      {"settings",
       {{"channels", options.channels},
        {"serialization", options.typed_serialization ? "typed" : "once"},
        {"completion_queues", options.completion_queues},
        {"pregenerated_inputs", options.num_inputs},
        {"seed", options.seed},
        {"warmup_s", absl::ToDoubleSeconds(options.warmup)},
        {"window_s", absl::ToDoubleSeconds(options.window)},
        {"stability", options.stability},
        {"max_windows", options.max_windows},
        {"duration_s", options.duration.has_value() ? json(absl::ToDoubleSeconds(*options.duration))
                                                    : json(nullptr)},
        {"timeout_ms", absl::ToDoubleMilliseconds(options.timeout)},
        {"drain_timeout_s", absl::ToDoubleSeconds(options.drain_timeout)},
        {"shared_memory_slots", shared_memory ? json(report.shared_memory_slots) : json(nullptr)},
        {"output_shared_memory_size", output_sizes}}},
      {"levels", levels},
      {"summary",
       {{"sent", summary.sent},
        {"answered", summary.answered},
        {"succeeded", summary.succeeded},
        {"failed", summary.failed},
        {"lost", summary.lost},
        {"errors", errors},
        {"all_answered", summary.lost == 0},
        {"ok", summary.ok()}}},
  };
}

absl::Status WriteJsonReport(const BenchReport& report, const std::string& path) {
  std::ofstream file(path);
  if (!file) return absl::UnavailableError(absl::StrCat("cannot open ", path, " for writing"));
  file << ReportToJson(report).dump(2) << "\n";
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace fuseserve::client
