#include "client/cli/flags.h"

#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fuseserve::client::cli {

std::optional<std::string> ParsedArgs::Last(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> ParsedArgs::All(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return {};
  return it->second;
}

absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& switch_flags) {
  ParsedArgs parsed;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--") || arg == "--") {
      parsed.positional_.push_back(arg);
      continue;
    }
    const size_t equals = arg.find('=');
    const std::string flag = arg.substr(2, equals == std::string::npos ? equals : equals - 2);
    if (flag == "help" || switch_flags.count(flag) > 0) {
      if (equals != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, " takes no value"));
      }
      parsed.values_[flag].push_back("");
    } else if (value_flags.count(flag) > 0) {
      if (equals != std::string::npos) {
        parsed.values_[flag].push_back(arg.substr(equals + 1));
      } else if (i + 1 < argc) {
        parsed.values_[flag].push_back(argv[++i]);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs a value"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", flag));
    }
  }
  return parsed;
}

const char kGlobalOptionsUsage[] = R"(Global options (also accepted after the command):
  --url HOST:PORT            the server's gRPC address (default localhost:8001)
  --ssl                      connect over TLS
  --root-certificates FILE   PEM CA certificate(s) that verify the server
                             (default: the system's roots)
  --private-key FILE         PEM client key, for servers that require client
                             certificates (with --certificate-chain)
  --certificate-chain FILE   PEM client certificate chain
)";

namespace {

// The global options that take a value, and where each goes.
std::map<std::string, std::string*> ValueOptions(GlobalOptions* global) {
  return {{"url", &global->url},
          {"root-certificates", &global->tls.root_certificates},
          {"private-key", &global->tls.private_key},
          {"certificate-chain", &global->tls.certificate_chain}};
}

}  // namespace

absl::StatusOr<int> ParseGlobalOptions(int argc, char** argv, GlobalOptions* global) {
  const std::map<std::string, std::string*> values = ValueOptions(global);
  int index = 1;
  while (index < argc) {
    const std::string arg = argv[index];
    if (arg == "--ssl") {
      global->tls.ssl = true;
      ++index;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) break;
    const size_t equals = arg.find('=');
    const auto option =
        values.find(arg.substr(2, equals == std::string::npos ? equals : equals - 2));
    if (option == values.end()) break;
    if (equals != std::string::npos) {
      *option->second = arg.substr(equals + 1);
      ++index;
    } else if (index + 1 < argc) {
      *option->second = argv[index + 1];
      index += 2;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
    }
  }
  return index;
}

std::vector<std::string> GlobalOptionsAsArgs(const GlobalOptions& global) {
  std::vector<std::string> args;
  if (global.url != GlobalOptions().url) args.push_back("--url=" + global.url);
  if (global.tls.ssl) args.push_back("--ssl");
  const std::pair<const char*, const std::string&> files[] = {
      {"root-certificates", global.tls.root_certificates},
      {"private-key", global.tls.private_key},
      {"certificate-chain", global.tls.certificate_chain}};
  for (const auto& [flag, path] : files) {
    if (!path.empty()) args.push_back(absl::StrCat("--", flag, "=", path));
  }
  return args;
}

absl::StatusOr<ParsedArgs> ParseServerCommandArgs(int argc, char** argv,
                                                  std::set<std::string> value_flags,
                                                  std::set<std::string> switch_flags) {
  GlobalOptions unused;
  for (const auto& [flag, value] : ValueOptions(&unused)) value_flags.insert(flag);
  switch_flags.insert("ssl");
  return ParseArgs(argc, argv, value_flags, switch_flags);
}

absl::StatusOr<std::unique_ptr<Client>> Connect(const GlobalOptions& global,
                                                const ParsedArgs& args) {
  GlobalOptions connection = global;
  for (const auto& [flag, value] : ValueOptions(&connection)) {
    if (auto given = args.Last(flag)) *value = *given;
  }
  if (args.Has("ssl")) connection.tls.ssl = true;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(connection.tls));
  return Client::Create(connection.url, std::move(credentials));
}

const char kSharedMemoryUsage[] =
    R"(  --shared-memory none|system
                         system: the tensors go through POSIX shared memory
                         instead of the gRPC messages (the server must run on
                         this host and allow it); the regions are created,
                         registered, and removed again on every way out
                         (default none)
  --output-shared-memory-size BYTES
                         bytes reserved for each output in shared memory
                         (default: the output's size from the model metadata;
                         needed when the output has variable dims)
)";

absl::StatusOr<SharedMemoryFlags> ParseSharedMemoryFlags(const ParsedArgs& args) {
  SharedMemoryFlags flags;
  if (auto type = args.Last(kSharedMemoryFlag)) {
    ASSIGN_OR_RETURN(flags.type, ParseSharedMemoryType(*type));
  }
  if (auto size = args.Last(kOutputSharedMemorySizeFlag)) {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(*size, &bytes) || bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", kOutputSharedMemorySizeFlag, ": \"",
                                                     *size, "\" is not a positive byte count"));
    }
    if (flags.type != SharedMemoryType::kSystem) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", kOutputSharedMemorySizeFlag, " needs --shared-memory system"));
    }
    flags.output_byte_size = bytes;
  }
  return flags;
}

int Fail(const std::string& command, const std::string& message, int exit_code) {
  std::cerr << "fuseserve-cli " << command << ": " << message << "\n";
  return exit_code;
}

}  // namespace fuseserve::client::cli
