#pragma once

// Command-line options of `fuseserve-cli bench` and their parser.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "common/shape.h"

namespace fuseserve::client {

enum class LoadMode {
  kClosedLoop,  // exactly `concurrency` requests outstanding
  kOpenLoop,    // requests issued at a target rate regardless of completions
};

enum class Arrivals {
  kPoisson,   // exponential gaps (independent arrivals, what real traffic looks like)
  kConstant,  // evenly spaced
};

struct BenchOptions {
  std::string model;
  std::string model_version;  // empty = the server's choice
  std::string url = "localhost:8001";
  TlsOptions tls;  // --ssl, --root-certificates, --private-key, --certificate-chain

  LoadMode mode = LoadMode::kClosedLoop;
  std::vector<int> concurrency = {1};
  std::vector<double> rates_per_s;  // open loop only
  Arrivals arrivals = Arrivals::kPoisson;

  // Tensors in the gRPC messages, or in system shared memory: every
  // in-flight slot (closed loop: each of the `concurrency` loops; open loop:
  // `num_inputs` slots, shared round-robin by a larger backlog) gets an input
  // and an output region of its own, registered before the first level and
  // removed after the last, whatever the outcome.
  SharedMemoryType shared_memory = SharedMemoryType::kNone;
  // Bytes of each output region; none = the output's size from the metadata.
  std::optional<uint64_t> output_shared_memory_size;

  int64_t batch_size = 1;
  std::optional<Shape> shape;  // non-batch dims; replaces the metadata's (needed for -1 dims)
  int channels = 4;
  // Calls complete on this many gRPC completion queues, a client thread
  // each; 0 = on gRPC's callback API. 4: at gemm c64 on an H100 host, 59
  // against 85 us of client CPU per call and +8% throughput over the
  // callback API; 2 threads saturate
  // (bench/results/2026-11-26-h100-bench-completion-queues.md).
  int completion_queues = 4;
  int num_inputs = 8;  // distinct pre-generated requests, sent round-robin
  uint64_t seed = 1;

  absl::Duration warmup = absl::Seconds(1);
  absl::Duration window = absl::Seconds(2);
  double stability = 0.1;  // relative tolerance on window throughput
  int max_windows = 10;
  std::optional<absl::Duration> duration;         // one fixed window instead of the stability rule
  absl::Duration timeout = absl::ZeroDuration();  // per-request gRPC deadline; 0 = none
  absl::Duration drain_timeout = absl::Seconds(60);  // bound on waiting for outstanding answers

  std::string json_path;  // empty = no JSON report
  bool quiet = false;
  // Every call serialises its request and parses its answer (a typed
  // client's cost); otherwise requests are serialised once.
  bool typed_serialization = false;
  bool allow_errors = false;  // exit 0 even when requests failed or were lost
  bool help = false;
};

// The `--help` text.
extern const char kBenchUsage[];

// Parses `argv[1..argc)` (argv[0] is "bench"). InvalidArgument names the
// offending flag. With `--help`, returns options with `help` set and nothing
// else checked.
absl::StatusOr<BenchOptions> ParseBenchOptions(int argc, const char* const* argv);

// "1,4,16" -> {1, 4, 16}; every element must be a positive integer.
absl::StatusOr<std::vector<int>> ParsePositiveIntList(const std::string& text);

// "100,250.5" -> {100, 250.5}; every element must be a positive number.
absl::StatusOr<std::vector<double>> ParsePositiveDoubleList(const std::string& text);

}  // namespace fuseserve::client
