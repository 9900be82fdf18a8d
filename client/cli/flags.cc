#include "client/cli/flags.h"

#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

int Fail(const std::string& command, const std::string& message, int exit_code) {
  std::cerr << "fuseserve-cli " << command << ": " << message << "\n";
  return exit_code;
}

}  // namespace fuseserve::client::cli
