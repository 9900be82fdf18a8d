#pragma once

// A single status line on stderr, rewritten in place ("\r" + clear to end of
// line) while a load level runs. Disabled lines print nothing, so callers
// need no checks; it is enabled only for an interactive terminal.

#include <string>

namespace fuseserve::client {

class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  ~ProgressLine() { Clear(); }

  // True when stderr is a terminal (the only place an in-place line makes sense).
  static bool StderrIsTerminal();

  // Replaces the line; cut to the terminal's width so that it never wraps
  // (a wrapped line cannot be rewritten in place).
  void Update(const std::string& text);

  // Erases the line.
  void Clear();

 private:
  const bool enabled_;
  bool shown_ = false;
};

}  // namespace fuseserve::client
