#pragma once

// Command-line parsing shared by the fuseserve-cli subcommands: positional
// arguments plus `--flag value` / `--flag=value` options (repeatable) and
// `--switch` options without a value.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fuseserve::client::cli {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the request failed or the answer is "not ready"
inline constexpr int kExitUsage = 2;    // bad command line

// Options that come before the subcommand and are accepted after it too.
struct GlobalOptions {
  std::string url = "localhost:8001";
};

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

// Prints "fuseserve-cli <command>: <message>" on stderr and returns `exit_code`.
int Fail(const std::string& command, const std::string& message, int exit_code = kExitFailure);

}  // namespace fuseserve::client::cli
