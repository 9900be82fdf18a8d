// fuseserve-cli: client-side tools for fuseserve (and any KServe v2 / Triton
// gRPC server): health, metadata, config, stats, infer, bench, and writing the
// default model repository.

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/bench/bench_command.h"
#include "client/cli/commands.h"
#include "common/malloc_options.h"
#include "common/release_mutexes.h"

namespace {

namespace cli = fuseserve::client::cli;

// No free() trims a heap's top (fuseserve::kNoTrimThresholdBytes says why).
// Setting any threshold stops glibc from raising the mmap threshold itself,
// as it did after the first large answer was freed, so it is set to where
// glibc would take it (its maximum, 32 MiB): large answers come from the
// heaps, not from a fresh mapping, faulted in page by page, each time. The
// environment's settings win.
void TuneMalloc() {
  constexpr int kMmapThresholdBytes = 32 << 20;
  fuseserve::SetMallocOptionUnlessConfigured(fuseserve::MallocOption::kMmapThreshold,
                                             kMmapThresholdBytes);
  fuseserve::SetMallocOptionUnlessConfigured(fuseserve::MallocOption::kTrimThreshold,
                                             fuseserve::kNoTrimThresholdBytes);
}

constexpr char kUsage[] = R"(Usage: fuseserve-cli [global options] <command> [options]

Commands:
  health [--model M]...        server live/ready and per-model readiness
  metadata MODEL               model metadata as JSON
  config MODEL                 model configuration as JSON
  stats [MODEL] [--json]       request counts and average queue/compute times
  infer MODEL --input X.npy    one inference; .npy in and (--output) out
  bench MODEL ...              load generator: throughput and latency percentiles
  make-repository DIR          write the default model repository

`fuseserve-cli <command> --help` describes each command. Exit codes: 0 success,
1 failure (the error is printed on stderr), 2 bad command line.

)";

}  // namespace

int main(int argc, char** argv) {
  // The bench command's threads complete calls through gRPC, whose locks
  // would otherwise all go through Abseil's debug deadlock graph.
  fuseserve::DisableMutexDeadlockDetection();
  TuneMalloc();
  cli::GlobalOptions global;
  const absl::StatusOr<int> command_index = cli::ParseGlobalOptions(argc, argv, &global);
  if (!command_index.ok()) {
    std::cerr << "fuseserve-cli: " << command_index.status().message() << "\n"
              << kUsage << cli::kGlobalOptionsUsage;
    return cli::kExitUsage;
  }
  const int index = *command_index;
  if (index >= argc) {
    std::cerr << kUsage << cli::kGlobalOptionsUsage;
    return cli::kExitUsage;
  }
  const std::string command = argv[index];
  if (command == "--help" || command == "help") {
    std::cout << kUsage << cli::kGlobalOptionsUsage;
    return cli::kExitOk;
  }
  const int sub_argc = argc - index;
  char** sub_argv = argv + index;
  if (command == "health") return cli::RunHealthCommand(global, sub_argc, sub_argv);
  if (command == "metadata") return cli::RunMetadataCommand(global, sub_argc, sub_argv);
  if (command == "config") return cli::RunConfigCommand(global, sub_argc, sub_argv);
  if (command == "stats") return cli::RunStatsCommand(global, sub_argc, sub_argv);
  if (command == "infer") return cli::RunInferCommand(global, sub_argc, sub_argv);
  if (command == "make-repository") return cli::RunMakeRepositoryCommand(sub_argc, sub_argv);
  if (command == "bench") {
    // The bench command parses its own connection options; the global ones
    // are passed on in front of the command's own arguments, which may
    // override them.
    std::vector<std::string> global_args = cli::GlobalOptionsAsArgs(global);
    std::vector<char*> bench_argv = {sub_argv[0]};
    for (std::string& arg : global_args) bench_argv.push_back(arg.data());
    bench_argv.insert(bench_argv.end(), sub_argv + 1, sub_argv + sub_argc);
    bench_argv.push_back(nullptr);
    return fuseserve::client::RunBenchCommand(static_cast<int>(bench_argv.size()) - 1,
                                              bench_argv.data());
  }
  std::cerr << "fuseserve-cli: unknown command \"" << command << "\"\n"
            << kUsage << cli::kGlobalOptionsUsage;
  return cli::kExitUsage;
}
