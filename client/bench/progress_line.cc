#include "client/bench/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

namespace fuseserve::client {

namespace {

size_t TerminalColumns() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1) return size.ws_col - 1;
  return 79;
}

}  // namespace

bool ProgressLine::StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

void ProgressLine::Update(const std::string& text) {
  if (!enabled_) return;
  const std::string line = text.substr(0, TerminalColumns());
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!enabled_ || !shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace fuseserve::client
