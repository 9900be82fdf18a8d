// `fuseserve-cli metadata MODEL` and `fuseserve-cli config MODEL`: the
// server's ModelMetadata / ModelConfig answers as JSON (protobuf's JSON
// mapping with the .proto field names, as config.pbtxt and Triton's own
// clients spell them).

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "client/cli/commands.h"
#include "client/client.h"
#include "google/protobuf/util/json_util.h"

namespace fuseserve::client::cli {
namespace {

constexpr char kMetadataUsage[] =
    R"(Usage: fuseserve-cli [global options] metadata MODEL [--version V]

Prints the model's metadata (name, versions, platform, inputs and outputs with
datatype and shape, properties such as the precision) as JSON.
Exit code 0 on success, 1 when the request fails (e.g. NOT_FOUND), 2 on a bad command line.
)";

constexpr char kConfigUsage[] = R"(Usage: fuseserve-cli [global options] config MODEL [--version V]

Prints the model's configuration as the server applies it (config.pbtxt with
defaults filled in) as JSON, field names as in config.pbtxt.
Exit code 0 on success, 1 when the request fails (e.g. NOT_FOUND), 2 on a bad command line.
)";

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a message the program just parsed cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// Parses `MODEL [--version V]` and connects; returns the exit code when the
// caller should stop (help or a usage error).
std::optional<int> ParseModelArgs(const std::string& command, const char* usage, int argc,
                                  char** argv, const GlobalOptions& global,
                                  std::unique_ptr<Client>* client, std::string* model,
                                  std::string* version) {
  const auto args = ParseServerCommandArgs(argc, argv, {"version"}, {});
  if (!args.ok()) {
    return Fail(command, std::string(args.status().message()) + "\n" + usage, kExitUsage);
  }
  if (args->Has("help")) {
    std::cout << usage;
    return kExitOk;
  }
  if (args->positional().size() != 1) {
    return Fail(command, "expected exactly one MODEL\n" + std::string(usage), kExitUsage);
  }
  auto connected = Connect(global, *args);
  if (!connected.ok()) return Fail(command, std::string(connected.status().message()), kExitUsage);
  *client = std::move(*connected);
  *model = args->positional()[0];
  *version = args->Last("version").value_or("");
  return std::nullopt;
}

}  // namespace

int RunMetadataCommand(const GlobalOptions& global, int argc, char** argv) {
  std::unique_ptr<Client> client;
  std::string model, version;
  if (auto exit_code = ParseModelArgs("metadata", kMetadataUsage, argc, argv, global, &client,
                                      &model, &version)) {
    return *exit_code;
  }
  const auto metadata = client->ModelMetadata(model, version);
  if (!metadata.ok()) return Fail("metadata", metadata.status().ToString());
  std::cout << ToJson(*metadata);
  return kExitOk;
}

int RunConfigCommand(const GlobalOptions& global, int argc, char** argv) {
  std::unique_ptr<Client> client;
  std::string model, version;
  if (auto exit_code =
          ParseModelArgs("config", kConfigUsage, argc, argv, global, &client, &model, &version)) {
    return *exit_code;
  }
  const auto config = client->ModelConfig(model, version);
  if (!config.ok()) return Fail("config", config.status().ToString());
  std::cout << ToJson(config->config());
  return kExitOk;
}

}  // namespace fuseserve::client::cli
