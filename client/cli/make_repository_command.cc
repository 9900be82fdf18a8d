// `fuseserve-cli make-repository DIR [--small]`: writes the default model
// repository (client/default_repository.h).

#include <iostream>
#include <string>

#include "client/cli/commands.h"
#include "client/default_repository.h"

namespace fuseserve::client::cli {
namespace {

constexpr char kUsage[] = R"(Usage: fuseserve-cli make-repository DIR [--small]

Writes the default model repository into DIR: one model per family at the
reference sizes (--small: tiny shapes, for tests), weights from a fixed seed.
Exit code 0 on success, 1 when writing fails, 2 on a bad command line.
)";

}  // namespace

int RunMakeRepositoryCommand(int argc, char** argv) {
  const auto args = ParseArgs(argc, argv, {}, {"small"});
  if (!args.ok()) {
    return Fail("make-repository", std::string(args.status().message()) + "\n" + kUsage,
                kExitUsage);
  }
  if (args->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (args->positional().size() != 1) {
    return Fail("make-repository", "expected exactly one DIR\n" + std::string(kUsage), kExitUsage);
  }
  const std::string& directory = args->positional()[0];
  const RepositorySize size =
      args->Has("small") ? RepositorySize::kSmall : RepositorySize::kReference;
  const absl::Status status = WriteDefaultRepository(directory, size);
  if (!status.ok()) return Fail("make-repository", std::string(status.message()));
  std::cout << "wrote the default model repository to " << directory << "\n";
  return kExitOk;
}

}  // namespace fuseserve::client::cli
