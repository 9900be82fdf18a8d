#include "server/repository/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace fuseserve {
namespace {

namespace fs = std::filesystem;

constexpr char kDefaultWeightsFilename[] = "model.safetensors";

absl::Status FilesystemError(const std::string& action, const std::string& path,
                             const std::error_code& error) {
  return absl::Status(absl::ErrnoToStatusCode(error.value()),
                      absl::StrCat("cannot ", action, " ", path, ": ", error.message()));
}

// True when `path` (canonical) lies strictly inside `root` (canonical).
bool IsStrictlyInside(const fs::path& path, const fs::path& root) {
  const fs::path relative = path.lexically_relative(root);
  return !relative.empty() && relative != "." && *relative.begin() != "..";
}

// Why the model in `model_dir` may read outside `canonical_root`, or "" when
// it cannot: a symbolic link among the entries of `model_dir` or of its
// subdirectories (the depths at which the loader opens config.pbtxt and
// <version>/<weights>), reached through directory links too, that does not
// resolve to a path strictly inside `canonical_root`. A link that cannot be
// resolved, or a directory that cannot be listed, counts as escaping: where
// it leads is unknown.
std::string FindEscapingLink(const fs::path& model_dir, const fs::path& canonical_root) {
  std::error_code error;
  fs::recursive_directory_iterator it(model_dir, fs::directory_options::follow_directory_symlink,
                                      error);
  for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it.depth() >= 1) it.disable_recursion_pending();
    std::error_code entry_error;
    if (!it->is_symlink(entry_error) && !entry_error) continue;
    const fs::path target = fs::canonical(it->path(), entry_error);
    if (entry_error) {
      return absl::StrCat(it->path().string(), " is a symbolic link that cannot be resolved (",
                          entry_error.message(), ")");
    }
    if (!IsStrictlyInside(target, canonical_root)) {
      return absl::StrCat(it->path().string(), " is a symbolic link to ", target.string(),
                          ", which is not inside the repository ", canonical_root.string());
    }
  }
  if (error) {
    return absl::StrCat("cannot list ", model_dir.string(),
                        " to check it for symbolic links out of the repository: ", error.message());
  }
  return "";
}

// The version number a directory name denotes: a positive decimal integer
// (leading zeros allowed); 0 for any other name.
int64_t ParseVersion(const std::string& name) {
  if (name.empty() ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 0;
  }
  int64_t version = 0;
  if (!absl::SimpleAtoi(name, &version) || version < 1) return 0;
  return version;
}

}  // namespace

absl::StatusOr<std::vector<RepositoryModelEntry>> ListRepository(
    const std::string& root, std::vector<std::string>* skipped) {
  std::error_code error;
  const fs::file_status root_status = fs::status(root, error);
  if (root_status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat("model repository ", root, " does not exist"));
  }
  if (error) return FilesystemError("access model repository", root, error);
  if (root_status.type() != fs::file_type::directory) {
    return absl::InvalidArgumentError(
        absl::StrCat("model repository ", root, " is not a directory"));
  }
  const fs::path canonical_root = fs::canonical(root, error);
  if (error) return FilesystemError("resolve model repository", root, error);

  auto skip = [skipped](std::string reason) {
    if (skipped != nullptr) {
      skipped->push_back(std::move(reason));
    } else {
      FS_LOG(WARNING) << reason;
    }
  };

  std::vector<RepositoryModelEntry> entries;
  fs::directory_iterator it(root, error);
  if (error) return FilesystemError("list model repository", root, error);
  for (; it != fs::directory_iterator(); it.increment(error)) {
    const fs::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    const std::string directory = entry.path().string();
    std::error_code entry_error;
    if (entry.is_symlink(entry_error)) {
      const fs::path target = fs::canonical(entry.path(), entry_error);
      if (entry_error) {
        skip(absl::StrCat("skipping ", directory, ": symbolic link cannot be resolved (",
                          entry_error.message(), ")"));
        continue;
      }
      if (!IsStrictlyInside(target, canonical_root)) {
        skip(absl::StrCat("skipping ", directory, ": symbolic link to ", target.string(),
                          ", which is not inside the repository ", canonical_root.string()));
        continue;
      }
    }
    if (!entry.is_directory(entry_error) || entry_error) continue;
    const std::string escape = FindEscapingLink(entry.path(), canonical_root);
    if (!escape.empty()) {
      skip(absl::StrCat("skipping model ", directory, ": ", escape));
      continue;
    }
    entries.push_back(RepositoryModelEntry{name, directory});
  }
  if (error) return FilesystemError("list model repository", root, error);
  std::sort(
      entries.begin(), entries.end(),
      [](const RepositoryModelEntry& a, const RepositoryModelEntry& b) { return a.name < b.name; });
  return entries;
}

absl::StatusOr<std::vector<ModelVersion>> SelectVersions(const std::string& model_dir,
                                                         const inference::ModelConfig& config) {
  std::map<int64_t, std::string> available;  // version -> directory
  std::error_code error;
  fs::directory_iterator it(model_dir, error);
  if (error) return FilesystemError("list model directory", model_dir, error);
  for (; it != fs::directory_iterator(); it.increment(error)) {
    const fs::directory_entry& entry = *it;
    const int64_t version = ParseVersion(entry.path().filename().string());
    std::error_code entry_error;
    if (version == 0 || !entry.is_directory(entry_error) || entry_error) continue;
    const std::string directory = entry.path().string();
    auto [existing, inserted] = available.emplace(version, directory);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("model directory ", model_dir, ": ",
                                                     existing->second, " and ", directory,
                                                     " both denote version ", version));
    }
  }
  if (error) return FilesystemError("list model directory", model_dir, error);
  if (available.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model directory ", model_dir,
                     " has no version directories (expected positive integers, e.g. ",
                     (fs::path(model_dir) / "1").string(), ")"));
  }

  std::vector<int64_t> selected;
  const inference::ModelVersionPolicy& policy = config.version_policy();
  switch (policy.policy_choice_case()) {
    case inference::ModelVersionPolicy::kAll:
      for (const auto& [version, directory] : available) selected.push_back(version);
      break;
    case inference::ModelVersionPolicy::kSpecific:
      for (int64_t version : policy.specific().versions()) {
        if (available.count(version) == 0) {
          std::vector<int64_t> versions;
          for (const auto& [v, directory] : available) versions.push_back(v);
          return absl::NotFoundError(absl::StrCat(
              "model directory ", model_dir, ": version_policy lists version ", version, ", but ",
              (fs::path(model_dir) / std::to_string(version)).string(),
              " does not exist (available versions: ", absl::StrJoin(versions, ", "), ")"));
        }
        selected.push_back(version);
      }
      break;
    case inference::ModelVersionPolicy::kLatest:
    case inference::ModelVersionPolicy::POLICY_CHOICE_NOT_SET: {
      const uint32_t wanted = std::max<uint32_t>(1, policy.latest().num_versions());
      for (auto v = available.rbegin(); v != available.rend() && selected.size() < wanted; ++v) {
        selected.push_back(v->first);
      }
      break;
    }
  }
  std::sort(selected.begin(), selected.end());
  selected.erase(std::unique(selected.begin(), selected.end()), selected.end());

  const std::string weights_filename = config.default_model_filename().empty()
                                           ? std::string(kDefaultWeightsFilename)
                                           : config.default_model_filename();
  std::vector<ModelVersion> versions;
  for (int64_t version : selected) {
    ModelVersion selected_version;
    selected_version.version = version;
    selected_version.directory = available.at(version);
    selected_version.weights_path =
        (fs::path(selected_version.directory) / weights_filename).string();
    std::error_code status_error;
    const fs::file_status weights = fs::status(selected_version.weights_path, status_error);
    if (weights.type() == fs::file_type::not_found) {
      return absl::NotFoundError(absl::StrCat("version ", version, " of model directory ",
                                              model_dir, " has no weights file ",
                                              selected_version.weights_path));
    }
    if (status_error) {
      return FilesystemError("access weights file", selected_version.weights_path, status_error);
    }
    if (weights.type() != fs::file_type::regular) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights file ", selected_version.weights_path, " is not a regular file"));
    }
    versions.push_back(std::move(selected_version));
  }
  return versions;
}

}  // namespace fuseserve
