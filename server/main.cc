// fuseserve: flags -> options -> run; signal handling and drain.

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "common/malloc_trimmer.h"
#include "common/release_mutexes.h"
#include "server/server.h"
#include "server/server_options.h"

namespace {

// Writes the bound ports atomically (temp file + rename) so a reader never
// sees a partial file.
bool WritePortFile(const std::string& path, int grpc_port, int metrics_port) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << "{\"grpc_port\": " << grpc_port << ", \"metrics_port\": " << metrics_port << "}\n";
    if (!out.good()) return false;
  }
  return std::rename(temp.c_str(), path.c_str()) == 0;
}

// glibc malloc raises its mmap threshold each time a large block is freed (up
// to 32 MiB), after which blocks of a few MiB -- gRPC's receive slices of
// every tensor -- come from the per-thread arenas, where freed ones stay
// resident and fragment: the soak's resident set crept up for minutes
// (bench/results/2026-11-22-h200-soak-v2.md). A fixed threshold (glibc's
// initial 128 KiB) keeps large blocks in their own mappings, returned to the
// system when freed. That was enough on the CPU backend but not on a GPU
// host, where the small blocks left free in the arenas still grew the
// resident set: the MallocTrimmer below returns those (soak-v3.md).
// Where that trimmer runs, no free() trims a heap's top
// (kNoTrimThresholdBytes says why): the trimmer returns that memory too.
// Without it, glibc's own trimming stays. The environment's settings win.
void TuneMalloc(bool trimmer_runs) {
  constexpr int kMmapThresholdBytes = 128 * 1024;
  fuseserve::SetMallocOptionUnlessConfigured(fuseserve::MallocOption::kMmapThreshold,
                                             kMmapThresholdBytes);
  if (trimmer_runs) {
    fuseserve::SetMallocOptionUnlessConfigured(fuseserve::MallocOption::kTrimThreshold,
                                               fuseserve::kNoTrimThresholdBytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  fuseserve::DisableMutexDeadlockDetection();
  absl::StatusOr<fuseserve::ServerOptions> options = fuseserve::ParseServerOptions(argc, argv);
  if (!options.ok()) {
    std::cerr << "fuseserve: " << options.status().message() << "\n";
    return 2;
  }
  if (options->help) {
    std::cout << fuseserve::ServerUsage();
    return 0;
  }

  std::optional<fuseserve::MallocTrimmer> trimmer;
  if (options->malloc_trim_interval_secs > 0) {
    trimmer.emplace(absl::Seconds(options->malloc_trim_interval_secs));
  }
  TuneMalloc(/*trimmer_runs=*/trimmer.has_value());

  // Block the stop signals in every thread (threads inherit the mask) so that
  // only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::unique_ptr<fuseserve::Server>> server = fuseserve::Server::Start(*options);
  if (!server.ok()) {
    FS_LOG(ERROR) << "cannot start: " << server.status().message();
    return 1;
  }
  if (!options->port_file.empty() &&
      !WritePortFile(options->port_file, (*server)->grpc_port(), (*server)->metrics_port())) {
    FS_LOG(ERROR) << "cannot write --port-file " << options->port_file;
    return 1;
  }

  int signal = 0;
  sigwait(&stop_signals, &signal);
  FS_LOG(INFO) << "received " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
               << ": draining (exit timeout " << options->exit_timeout_secs << " s)";
  (*server)->Shutdown();
  return 0;
}
