#include "client/bench/bench_options.h"

#include <cmath>
#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace fuseserve::client {

const char kBenchUsage[] = R"(Usage: fuseserve-cli bench MODEL [options]

A load generator in the spirit of Triton's perf_analyzer. For every load level
it warms up, then measures consecutive windows until the throughput of the last
three agrees within --stability (or --max-windows is reached), and reports
client-side throughput and latency percentiles plus the server's own
queue/compute split (ModelStatistics deltas over the same windows).

Load (pick one):
  --concurrency N[,M...]  closed loop: exactly N requests outstanding (default 1)
  --rate R[,S...]         open loop: R requests/s issued regardless of completions
  --arrivals poisson|constant
                          open-loop inter-arrival times (default poisson)

Requests:
  --url HOST:PORT         server (default localhost:8001)
  --ssl                   connect over TLS
  --root-certificates F   PEM CA certificate(s) that verify the server
  --private-key F         PEM client key (mutual TLS, with --certificate-chain)
  --certificate-chain F   PEM client certificate chain
  --model-version V       model version (default: the server's choice)
  --batch-size B          rows per request (default 1; must be 1 for a model
                          with max_batch_size 0)
  --shape D1,D2,...       non-batch input dims, needed when the model has -1 dims
                          (default: the model metadata's dims)
  --inputs K              distinct random requests pre-generated (default 8)
  --seed S                seed of the random inputs (default 1)
  --channels N            gRPC channels, each its own HTTP/2 connection (default 4)
  --completion-queues Q   complete calls on Q gRPC completion queues, each polled
                          by a thread of the client's own (default 4; 0: gRPC's
                          callback API and its threads); a closed-loop level
                          uses at most one per concurrent call
  --typed-serialization   serialise every request and parse every answer, as a
                          typed client (tritonclient, perf_analyzer) does;
                          default: requests serialised once, answers' bytes
                          not parsed (only their status is read)
  --timeout-ms T          per-request deadline (default 0 = none)
  --shared-memory none|system
                          system: tensors go through POSIX shared memory, not
                          the gRPC messages (the server must run on this host
                          and allow it); each in-flight request slot has its
                          own input and output region (closed loop: one per
                          concurrency; open loop: --inputs slots, shared when
                          more are outstanding), written once, registered
                          before the first level and removed after the last
                          (also on failure or Ctrl-C) (default none)
  --output-shared-memory-size B
                          bytes of each output region (default: the output's
                          size from the metadata; needed for variable dims)

Measurement:
  --warmup-s S            warm-up before the first window (default 1)
  --window-s S            measurement window (default 2)
  --stability F           relative throughput tolerance of the last 3 windows (default 0.1)
  --max-windows N         cap on windows per level (default 10)
  --duration-s S          one fixed window of S seconds instead of the stability rule
  --drain-timeout-s S     bound on waiting for outstanding answers after a level
                          (default 60); requests still unanswered then are "lost"

Output:
  --json FILE             write every reported field as JSON (schema in README "Bench")
  --quiet                 no progress line on stderr
  --allow-errors          exit 0 even if requests failed or were lost (the report
                          is written either way)

Exit code: 0 when every request succeeded and was answered; 1 when a request
failed or was lost (unless --allow-errors) or the run could not start; 2 on bad
usage.
)";

namespace {

absl::StatusOr<double> ParsePositiveDouble(const std::string& flag, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " expects a positive number, got \"", text, "\""));
  }
  return value;
}

absl::StatusOr<double> ParseNonNegativeDouble(const std::string& flag, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " expects a non-negative number, got \"", text, "\""));
  }
  return value;
}

absl::StatusOr<int64_t> ParsePositiveInt(const std::string& flag, absl::string_view text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " expects a positive integer, got \"", text, "\""));
  }
  return value;
}

// A count of threads the client starts.
absl::StatusOr<int> ParseThreadCount(const std::string& flag, absl::string_view text) {
  constexpr int kMaxThreads = 64;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0 || value > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " expects an integer in [0, ",
                                                   kMaxThreads, "], got \"", text, "\""));
  }
  return value;
}

absl::StatusOr<int> ParsePositiveInt32(const std::string& flag, absl::string_view text) {
  ASSIGN_OR_RETURN(const int64_t value, ParsePositiveInt(flag, text));
  if (value > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is too large: ", text));
  }
  return static_cast<int>(value);
}

// A flag whose value is kept as given.
std::function<absl::Status(const std::string&)> StoreIn(std::string* field) {
  return [field](const std::string& value) {
    *field = value;
    return absl::OkStatus();
  };
}

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  Shape shape;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(",x"))) {
    ASSIGN_OR_RETURN(const int64_t dim, ParsePositiveInt("--shape", part));
    shape.push_back(dim);
  }
  return shape;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParsePositiveIntList(const std::string& text) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    ASSIGN_OR_RETURN(const int value, ParsePositiveInt32("--concurrency", part));
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<std::vector<double>> ParsePositiveDoubleList(const std::string& text) {
  std::vector<double> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    ASSIGN_OR_RETURN(const double value, ParsePositiveDouble("--rate", part));
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<BenchOptions> ParseBenchOptions(int argc, const char* const* argv) {
  BenchOptions options;
  bool concurrency_given = false;
  using Setter = std::function<absl::Status(const std::string&)>;
  // Flags taking a value, as "--flag value" or "--flag=value".
  const std::map<std::string, Setter> valued = {
      {"--url", StoreIn(&options.url)},
      {"--root-certificates", StoreIn(&options.tls.root_certificates)},
      {"--private-key", StoreIn(&options.tls.private_key)},
      {"--certificate-chain", StoreIn(&options.tls.certificate_chain)},
      {"--model-version", StoreIn(&options.model_version)},
      {"--concurrency",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.concurrency, ParsePositiveIntList(v));
         concurrency_given = true;
         return absl::OkStatus();
       }},
      {"--rate",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.rates_per_s, ParsePositiveDoubleList(v));
         options.mode = LoadMode::kOpenLoop;
         return absl::OkStatus();
       }},
      {"--arrivals",
       [&](const std::string& v) -> absl::Status {
         if (v == "poisson") {
           options.arrivals = Arrivals::kPoisson;
         } else if (v == "constant") {
           options.arrivals = Arrivals::kConstant;
         } else {
           return absl::InvalidArgumentError(
               absl::StrCat("--arrivals expects poisson or constant, got \"", v, "\""));
         }
         return absl::OkStatus();
       }},
      {"--batch-size",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.batch_size, ParsePositiveInt("--batch-size", v));
         return absl::OkStatus();
       }},
      {"--shape",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.shape, ParseShape(v));
         return absl::OkStatus();
       }},
      {"--channels",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.channels, ParsePositiveInt32("--channels", v));
         return absl::OkStatus();
       }},
      {"--completion-queues",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.completion_queues, ParseThreadCount("--completion-queues", v));
         return absl::OkStatus();
       }},
      {"--inputs",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.num_inputs, ParsePositiveInt32("--inputs", v));
         return absl::OkStatus();
       }},
      {"--seed",
       [&](const std::string& v) -> absl::Status {
         if (!absl::SimpleAtoi(v, &options.seed)) {
           return absl::InvalidArgumentError(
               absl::StrCat("--seed expects a non-negative integer, got \"", v, "\""));
         }
         return absl::OkStatus();
       }},
      {"--warmup-s",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(const double s, ParseNonNegativeDouble("--warmup-s", v));
         options.warmup = absl::Seconds(s);
         return absl::OkStatus();
       }},
      {"--window-s",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(const double s, ParsePositiveDouble("--window-s", v));
         options.window = absl::Seconds(s);
         return absl::OkStatus();
       }},
      {"--stability",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.stability, ParsePositiveDouble("--stability", v));
         return absl::OkStatus();
       }},
      {"--max-windows",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.max_windows, ParsePositiveInt32("--max-windows", v));
         return absl::OkStatus();
       }},
      {"--duration-s",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(const double s, ParsePositiveDouble("--duration-s", v));
         options.duration = absl::Seconds(s);
         return absl::OkStatus();
       }},
      {"--timeout-ms",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(const double ms, ParseNonNegativeDouble("--timeout-ms", v));
         options.timeout = absl::Milliseconds(ms);
         return absl::OkStatus();
       }},
      {"--drain-timeout-s",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(const double s, ParsePositiveDouble("--drain-timeout-s", v));
         options.drain_timeout = absl::Seconds(s);
         return absl::OkStatus();
       }},
      {"--shared-memory",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.shared_memory, ParseSharedMemoryType(v));
         return absl::OkStatus();
       }},
      {"--output-shared-memory-size",
       [&](const std::string& v) -> absl::Status {
         ASSIGN_OR_RETURN(options.output_shared_memory_size,
                          ParsePositiveInt("--output-shared-memory-size", v));
         return absl::OkStatus();
       }},
      {"--json", StoreIn(&options.json_path)},
  };
  const std::map<std::string, bool*> switches = {
      {"--ssl", &options.tls.ssl},
      {"--quiet", &options.quiet},
      {"--typed-serialization", &options.typed_serialization},
      {"--allow-errors", &options.allow_errors},
      {"--help", &options.help},
  };

  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h") {
      options.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!options.model.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unexpected argument \"", arg, "\" (the model is \"", options.model, "\")"));
      }
      options.model = arg;
      continue;
    }
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    if (auto it = switches.find(name); it != switches.end()) {
      if (equals != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      }
      *it->second = true;
      continue;
    }
    auto it = valued.find(name);
    if (it == valued.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option \"", name, "\""));
    }
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
    }
    RETURN_IF_ERROR(it->second(value));
  }

  if (options.help) return options;
  if (options.model.empty()) return absl::InvalidArgumentError("MODEL is required");
  if (options.output_shared_memory_size.has_value() &&
      options.shared_memory != SharedMemoryType::kSystem) {
    return absl::InvalidArgumentError("--output-shared-memory-size needs --shared-memory system");
  }
  if (concurrency_given && options.mode == LoadMode::kOpenLoop) {
    return absl::InvalidArgumentError(
        "--concurrency (closed loop) and --rate (open loop) are mutually exclusive");
  }
  return options;
}

}  // namespace fuseserve::client
