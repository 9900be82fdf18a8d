#pragma once

// Command-line parsing shared by the fuseserve-cli subcommands: positional
// arguments plus `--flag value` / `--flag=value` options (repeatable) and
// `--switch` options without a value.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/shared_memory.h"

namespace fuseserve::client::cli {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the request failed or the answer is "not ready"
inline constexpr int kExitUsage = 2;    // bad command line

// Options that come before the subcommand and are accepted after it too:
// where the server is and how the connection is secured (tritonclient's
// names: --ssl, --root-certificates, --private-key, --certificate-chain).
struct GlobalOptions {
  std::string url = "localhost:8001";
  TlsOptions tls;
};

// The usage text of the global options.
extern const char kGlobalOptionsUsage[];

class ParsedArgs {
 public:
  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The last value given for `flag`, if any.
  std::optional<std::string> Last(const std::string& flag) const;
  // Every value given for `flag`, in order.
  std::vector<std::string> All(const std::string& flag) const;

 private:
  friend absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv,
                                              const std::set<std::string>& value_flags,
                                              const std::set<std::string>& switch_flags);
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>> values_;  // switches map to {""}
};

// Parses argv[1..argc) (argv[0] is the subcommand name). Flags are written
// without the leading "--" in `value_flags` (take a value) and
// `switch_flags` (take none); "help" is always a switch. InvalidArgument for
// an unknown flag, a missing value or a value given to a switch.
absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& switch_flags);

// Parses the global options at the front of argv[1..argc), stopping at the
// first argument that is not one (the command, or --help); returns its index.
// InvalidArgument for a global option without its value.
absl::StatusOr<int> ParseGlobalOptions(int argc, char** argv, GlobalOptions* global);

// The global options as arguments that ParseGlobalOptions (or a command that
// accepts them) reads back: only those that differ from the defaults.
std::vector<std::string> GlobalOptionsAsArgs(const GlobalOptions& global);

// ParseArgs for a command that talks to a server: the global options are
// accepted too (after the command, where they override the global ones).
absl::StatusOr<ParsedArgs> ParseServerCommandArgs(int argc, char** argv,
                                                  std::set<std::string> value_flags,
                                                  std::set<std::string> switch_flags);

// A client for the server named by `global` as overridden by `args`.
// InvalidArgument when the TLS options cannot be used (a file missing, a key
// without a certificate, a file without --ssl).
absl::StatusOr<std::unique_ptr<Client>> Connect(const GlobalOptions& global,
                                                const ParsedArgs& args);

// How a command moves its tensors (perf_analyzer's flag names):
// --shared-memory none|system and --output-shared-memory-size BYTES.
struct SharedMemoryFlags {
  SharedMemoryType type = SharedMemoryType::kNone;
  // Bytes of each output's region; none = the output's size as the model's
  // metadata gives it.
  std::optional<uint64_t> output_byte_size;
};

// The flags above (both take a value), for ParseArgs' `value_flags`, and
// their usage text.
inline constexpr char kSharedMemoryFlag[] = "shared-memory";
inline constexpr char kOutputSharedMemorySizeFlag[] = "output-shared-memory-size";
extern const char kSharedMemoryUsage[];

// InvalidArgument for an unknown type, a size that is not a positive
// integer, or a size without --shared-memory system.
absl::StatusOr<SharedMemoryFlags> ParseSharedMemoryFlags(const ParsedArgs& args);

// Prints "fuseserve-cli <command>: <message>" on stderr and returns `exit_code`.
int Fail(const std::string& command, const std::string& message, int exit_code = kExitFailure);

}  // namespace fuseserve::client::cli
