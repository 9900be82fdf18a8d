// fuseserve-cli: client-side tools for fuseserve.

#include <iostream>
#include <string>

#include "client/default_repository.h"

namespace {

constexpr char kUsage[] = R"(Usage: fuseserve-cli <command> [options]

Commands:
  make-repository DIR [--small]   write the default model repository (one model
                                  per family at the reference sizes; --small:
                                  tiny shapes for tests) into DIR
)";

int MakeRepository(int argc, char** argv) {
  std::string directory;
  fuseserve::RepositorySize size = fuseserve::RepositorySize::kReference;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--small") {
      size = fuseserve::RepositorySize::kSmall;
    } else if (arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (directory.empty() && arg.rfind("--", 0) != 0) {
      directory = arg;
    } else {
      std::cerr << "fuseserve-cli make-repository: unexpected argument \"" << arg << "\"\n";
      return 2;
    }
  }
  if (directory.empty()) {
    std::cerr << "fuseserve-cli make-repository: DIR is required\n" << kUsage;
    return 2;
  }
  const absl::Status status = fuseserve::WriteDefaultRepository(directory, size);
  if (!status.ok()) {
    std::cerr << "fuseserve-cli make-repository: " << status.message() << "\n";
    return 1;
  }
  std::cout << "wrote the default model repository to " << directory << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "make-repository") return MakeRepository(argc, argv);
  std::cerr << "fuseserve-cli: unknown command \"" << command << "\"\n" << kUsage;
  return 2;
}
