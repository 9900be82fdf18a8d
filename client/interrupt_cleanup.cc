#include "client/interrupt_cleanup.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fuseserve::client {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM};
// What a byte on the pipe means besides a signal number.
constexpr unsigned char kStop = 0;

// The write end of the installed watcher's pipe, -1 when none is installed:
// all a signal handler can reach.
std::atomic<int> g_write_fd{-1};
// The handlers in place before Install, restored by the destructor. Written
// only while g_write_fd is claimed.
struct sigaction g_previous[std::size(kSignals)];

extern "C" void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal_number);
    // Nothing useful can be done about a failed write inside a handler.
    [[maybe_unused]] const ssize_t written = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

const char* SignalName(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "a signal";
}

void RestoreHandlers(size_t count) {
  for (size_t i = 0; i < count; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
}

}  // namespace

absl::StatusOr<std::unique_ptr<InterruptCleanup>> InterruptCleanup::Install(
    std::string name, std::function<void()> cleanup) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  int none = -1;
  if (!g_write_fd.compare_exchange_strong(none, fds[1])) {
    ::close(fds[0]);
    ::close(fds[1]);
    return absl::FailedPreconditionError("an InterruptCleanup is already installed");
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (::sigaction(kSignals[i], &action, &g_previous[i]) != 0) {
      const int error = errno;
      RestoreHandlers(i);
      g_write_fd.store(-1);
      ::close(fds[0]);
      ::close(fds[1]);
      return absl::InternalError(absl::StrCat("sigaction: ", std::strerror(error)));
    }
  }
  std::unique_ptr<InterruptCleanup> installed(new InterruptCleanup(fds[0], fds[1]));
  installed->watcher_ =
      std::thread([read_fd = fds[0], name = std::move(name), cleanup = std::move(cleanup)] {
        unsigned char byte = kStop;
        ssize_t got = 0;
        do {
          got = ::read(read_fd, &byte, 1);
        } while (got < 0 && errno == EINTR);
        if (got != 1 || byte == kStop) return;
        cleanup();
        std::cerr << name << ": interrupted (" << SignalName(byte) << ")" << std::endl;
        ::_exit(128 + byte);
      });
  return installed;
}

InterruptCleanup::InterruptCleanup(int read_fd, int write_fd)
    : read_fd_(read_fd), write_fd_(write_fd) {}

InterruptCleanup::~InterruptCleanup() {
  RestoreHandlers(std::size(kSignals));
  g_write_fd.store(-1);
  // Behind any signal byte already written, so that one is handled first.
  const unsigned char stop = kStop;
  [[maybe_unused]] const ssize_t written = ::write(write_fd_, &stop, 1);
  watcher_.join();
  ::close(read_fd_);
  ::close(write_fd_);
}

}  // namespace fuseserve::client
