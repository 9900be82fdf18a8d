// fuseserve-cli: client-side tools for fuseserve (and any KServe v2 / Triton
// gRPC server): health, metadata, config, stats, infer, bench, and writing the
// default model repository.

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/bench/bench_command.h"
#include "client/cli/commands.h"

namespace {

namespace cli = fuseserve::client::cli;

constexpr char kUsage[] = R"(Usage: fuseserve-cli [--url HOST:PORT] <command> [options]

Global options:
  --url HOST:PORT   the server's gRPC address (default localhost:8001); also
                    accepted after the command

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
  cli::GlobalOptions global;
  bool url_given = false;
  int index = 1;
  // Global options come before the command.
  while (index < argc && absl::StartsWith(argv[index], "--url")) {
    const std::string arg = argv[index];
    if (arg == "--url" && index + 1 < argc) {
      global.url = argv[index + 1];
      index += 2;
    } else if (absl::StartsWith(arg, "--url=")) {
      global.url = arg.substr(6);
      index += 1;
    } else {
      std::cerr << "fuseserve-cli: bad global option \"" << arg << "\"\n" << kUsage;
      return cli::kExitUsage;
    }
    url_given = true;
  }
  if (index >= argc) {
    std::cerr << kUsage;
    return cli::kExitUsage;
  }
  const std::string command = argv[index];
  if (command == "--help" || command == "help") {
    std::cout << kUsage;
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
    // The bench command parses its own --url; a global one is passed on in
    // front of the command's own arguments, which may override it.
    std::vector<char*> bench_argv = {sub_argv[0]};
    std::string url_flag = "--url=" + global.url;
    if (url_given) bench_argv.push_back(url_flag.data());
    bench_argv.insert(bench_argv.end(), sub_argv + 1, sub_argv + sub_argc);
    bench_argv.push_back(nullptr);
    return fuseserve::client::RunBenchCommand(static_cast<int>(bench_argv.size()) - 1,
                                              bench_argv.data());
  }
  std::cerr << "fuseserve-cli: unknown command \"" << command << "\"\n" << kUsage;
  return cli::kExitUsage;
}
