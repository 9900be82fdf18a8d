// InterruptCleanup: a signal runs the cleanup and ends the process with
// 128 + the signal (death tests, in a child process), one at a time, and the
// previous handling comes back afterwards.

#include "client/interrupt_cleanup.h"

#include <signal.h>

#include <atomic>
#include <iostream>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace fuseserve::client {
namespace {

// Installs a cleanup that says so on stderr, raises `signal_number` and
// waits; the watcher thread ends the process.
void InterruptAndWait(int signal_number) {
  auto installed = InterruptCleanup::Install("test-command", [] { std::cerr << "cleaned up\n"; });
  if (!installed.ok()) {
    std::cerr << installed.status() << "\n";
    return;
  }
  ::raise(signal_number);
  absl::Notification never;
  never.WaitForNotification();
}

TEST(InterruptCleanupDeathTest, SigintRunsTheCleanupAndExitsWith130) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(InterruptAndWait(SIGINT), ::testing::ExitedWithCode(130),
              "cleaned up\ntest-command: interrupted \\(SIGINT\\)");
}

TEST(InterruptCleanupDeathTest, SigtermRunsTheCleanupAndExitsWith143) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(InterruptAndWait(SIGTERM), ::testing::ExitedWithCode(143),
              "cleaned up\ntest-command: interrupted \\(SIGTERM\\)");
}

TEST(InterruptCleanupTest, OnlyOneIsInstalledAtATime) {
  auto first = InterruptCleanup::Install("first", [] {});
  ASSERT_TRUE(first.ok()) << first.status();
  const auto second = InterruptCleanup::Install("second", [] {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  first->reset();
  EXPECT_TRUE(InterruptCleanup::Install("third", [] {}).ok());
}

std::atomic<int> g_previous_handler_calls{0};
extern "C" void CountSignal(int) { ++g_previous_handler_calls; }

TEST(InterruptCleanupTest, ThePreviousHandlerComesBackAndNothingRunsWithoutASignal) {
  struct sigaction counting = {}, original = {};
  counting.sa_handler = CountSignal;
  sigemptyset(&counting.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &counting, &original), 0);
  std::atomic<int> cleanups{0};
  {
    auto installed = InterruptCleanup::Install("test-command", [&cleanups] { ++cleanups; });
    ASSERT_TRUE(installed.ok()) << installed.status();
  }
  EXPECT_EQ(cleanups, 0);
  ::raise(SIGINT);  // the handler runs on this thread before raise returns
  EXPECT_EQ(g_previous_handler_calls, 1);
  ::sigaction(SIGINT, &original, nullptr);
}

}  // namespace
}  // namespace fuseserve::client
