#include "tests/e2e/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace fuseserve::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Polling interval while waiting for a child process; a subprocess offers no
// notification we could block on instead.
constexpr auto kPoll = std::chrono::milliseconds(20);

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::string& repository,
    const std::vector<std::string>& extra_args, absl::Duration startup_timeout) {
  std::unique_ptr<ServerProcess> process(new ServerProcess());
  std::string pattern = std::filesystem::temp_directory_path() / "fuseserve-e2e-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  process->directory_ = pattern;
  const std::string port_file = process->directory_ + "/ports.json";
  const std::string log_file = process->directory_ + "/server.log";

  std::vector<std::string> args = {binary, "--model-repository=" + repository, "--grpc-port=0",
                                   "--metrics-port=0", "--grpc-address=127.0.0.1",
                                   "--metrics-address=127.0.0.1", "--port-file=" + port_file};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
      dup2(log, STDERR_FILENO);
      dup2(log, STDOUT_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  process->pid_ = pid;

  const absl::Time deadline = absl::Now() + startup_timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->pid_ = -1;
      return absl::InternalError(
          absl::StrCat("server exited during start-up; its log:\n", process->Log()));
    }
    if (std::filesystem::exists(port_file)) {
      const nlohmann::json ports = nlohmann::json::parse(ReadFile(port_file), nullptr, false);
      if (ports.is_object()) {
        process->grpc_port_ = ports.value("grpc_port", 0);
        process->metrics_port_ = ports.value("metrics_port", 0);
        return process;
      }
    }
    std::this_thread::sleep_for(kPoll);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("server did not start within ", absl::FormatDuration(startup_timeout),
                   "; its log:\n", process->Log()));
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

std::string ServerProcess::grpc_target() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

absl::StatusOr<int> ServerProcess::Terminate(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("server is not running");
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(kPoll);
  }
  return absl::DeadlineExceededError("server did not exit after SIGTERM");
}

std::string ServerProcess::Log() const { return ReadFile(directory_ + "/server.log"); }

absl::StatusOr<int64_t> ServerProcess::ResidentBytes() const {
  if (pid_ <= 0) return absl::FailedPreconditionError("server is not running");
  const std::string status = ReadFile(absl::StrCat("/proc/", pid_, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    // "VmRSS:     123456 kB"
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    int64_t kilobytes = 0;
    if (!absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kilobytes)) {
      return absl::InternalError(absl::StrCat("cannot parse VmRSS line \"", line, "\""));
    }
    return kilobytes * 1024;
  }
  return absl::InternalError(absl::StrCat("no VmRSS in /proc/", pid_, "/status"));
}

double MetricValue(const std::string& text, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (labels.empty() && absl::StartsWith(line, name + " ")) {  // a series without labels
      double value = 0;
      if (absl::SimpleAtod(line.substr(name.size() + 1), &value)) return value;
      continue;
    }
    if (!absl::StartsWith(line, name + "{")) continue;
    const size_t close = line.find('}');
    const absl::string_view label_text = line.substr(name.size() + 1, close - name.size() - 1);
    std::map<std::string, std::string> found;
    for (absl::string_view pair : absl::StrSplit(label_text, ',', absl::SkipEmpty())) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || kv[1].size() < 2) continue;
      found[kv[0]] = kv[1].substr(1, kv[1].size() - 2);  // drop the quotes
    }
    if (found != labels) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(close + 1), &value)) return value;
  }
  return -1;
}

}  // namespace fuseserve::testing
