#pragma once

// Minimal structured logging to stderr: one line per message, timestamped,
// with severity and source location. Thread-safe (one write per line).
//
//   FS_LOG(INFO) << "loaded model " << name << " on " << device;

#include <sstream>

namespace fuseserve {

enum class LogSeverity { kInfo, kWarning, kError };

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Messages below this severity are dropped. Tests raise it to keep output short.
void SetMinLogSeverity(LogSeverity severity);

}  // namespace fuseserve

#define FS_LOG_SEVERITY_INFO ::fuseserve::LogSeverity::kInfo
#define FS_LOG_SEVERITY_WARNING ::fuseserve::LogSeverity::kWarning
#define FS_LOG_SEVERITY_ERROR ::fuseserve::LogSeverity::kError
#define FS_LOG(severity) \
  ::fuseserve::LogMessage(FS_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()
