// `fuseserve-cli health`: server liveness and readiness, and the readiness
// of each model (every model in the repository index unless --model is given).

#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/client.h"

namespace fuseserve::client::cli {
namespace {

constexpr char kUsage[] = R"(Usage: fuseserve-cli [global options] health [--model MODEL]...

Prints whether the server is live and ready, and whether each model is ready:
the models named with --model (repeatable), else every model in the server's
repository index (with the reason a model is not ready, when the server gives one).
Exit code 0 when the server is live and ready and every listed model is ready,
1 otherwise (or when the server cannot be reached), 2 on a bad command line.
)";

}  // namespace

int RunHealthCommand(const GlobalOptions& global, int argc, char** argv) {
  const auto args = ParseServerCommandArgs(argc, argv, {"model"}, {});
  if (!args.ok())
    return Fail("health", std::string(args.status().message()) + "\n" + kUsage, kExitUsage);
  if (args->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (!args->positional().empty()) {
    return Fail("health", "unexpected argument \"" + args->positional()[0] + "\"\n" + kUsage,
                kExitUsage);
  }
  const auto connected = Connect(global, *args);
  if (!connected.ok()) return Fail("health", std::string(connected.status().message()), kExitUsage);
  Client& client = **connected;
  const absl::StatusOr<bool> live = client.ServerLive();
  if (!live.ok()) return Fail("health", live.status().ToString());
  const absl::StatusOr<bool> ready = client.ServerReady();
  if (!ready.ok()) return Fail("health", ready.status().ToString());
  std::cout << "server live:  " << (*live ? "true" : "false") << "\n";
  std::cout << "server ready: " << (*ready ? "true" : "false") << "\n";
  bool healthy = *live && *ready;

  struct Entry {
    std::string name;
    std::string version;
    std::string reason;
  };
  std::vector<Entry> models;
  if (args->Has("model")) {
    for (const std::string& name : args->All("model")) models.push_back({name, "", ""});
  } else {
    const auto index = client.RepositoryIndex();
    if (!index.ok()) return Fail("health", index.status().ToString());
    for (const auto& model : index->models()) {
      models.push_back({model.name(), model.version(), model.reason()});
    }
  }
  for (const Entry& model : models) {
    const std::string label =
        model.version.empty() ? model.name : model.name + " (version " + model.version + ")";
    const absl::StatusOr<bool> model_ready = client.ModelReady(model.name, model.version);
    if (!model_ready.ok()) {
      std::cout << "model " << label << ": error: " << model_ready.status().ToString() << "\n";
      healthy = false;
      continue;
    }
    std::cout << "model " << label << ": " << (*model_ready ? "ready" : "NOT READY");
    if (!*model_ready && !model.reason.empty()) std::cout << " (" << model.reason << ")";
    std::cout << "\n";
    healthy = healthy && *model_ready;
  }
  return healthy ? kExitOk : kExitFailure;
}

}  // namespace fuseserve::client::cli
