#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fuseserve {
namespace {

std::atomic<int> g_min_severity{static_cast<int>(LogSeverity::kInfo)};

const char* SeverityLetter(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return "I";
    case LogSeverity::kWarning:
      return "W";
    case LogSeverity::kError:
      return "E";
  }
  return "?";
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  g_min_severity.store(static_cast<int>(severity));
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity) {
  stream_ << SeverityLetter(severity)
          << absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ ", absl::Now(),
                              absl::UTCTimeZone())
          << Basename(file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  if (static_cast<int>(severity_) < g_min_severity.load()) return;
  stream_ << '\n';
  const std::string line = stream_.str();
  // One fwrite per line keeps concurrent messages from interleaving.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace fuseserve
