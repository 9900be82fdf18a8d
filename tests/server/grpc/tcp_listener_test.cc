#include "server/grpc/tcp_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

// A non-blocking connect to 127.0.0.1:port.
UniqueFd StartConnect(int port) {
  UniqueFd socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int started = ::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address),
                                sizeof(address));
  EXPECT_TRUE(started == 0 || errno == EINPROGRESS) << std::strerror(errno);
  return socket;
}

// Waits up to `timeout` for a non-blocking connect to finish: 0 once it
// connected, its errno once it failed, -1 while it is still under way.
int ConnectOutcome(const UniqueFd& socket, absl::Duration timeout) {
  pollfd polled{socket.get(), POLLOUT, 0};
  if (::poll(&polled, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 0) return -1;
  int error = 0;
  socklen_t length = sizeof(error);
  ::getsockopt(socket.get(), SOL_SOCKET, SO_ERROR, &error, &length);
  return error;
}

// Records the connections handed over; optionally holds the accept thread in
// its first hand-over until released.
class Receiver {
 public:
  explicit Receiver(bool hold_first = false) : hold_first_(hold_first) {}

  std::function<void(int)> Callback() {
    return [this](int fd) {
      bool hold = false;
      {
        absl::MutexLock lock(&mu_);
        fds_.emplace_back(fd);
        hold = hold_first_ && fds_.size() == 1;
      }
      if (hold) {
        holding_.Notify();
        release_.WaitForNotification();
      }
    };
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return fds_.size();
  }
  bool AwaitCount(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return fds_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  absl::Notification holding_;
  absl::Notification release_;

 private:
  const bool hold_first_;
  absl::Mutex mu_;
  std::vector<UniqueFd> fds_ ABSL_GUARDED_BY(mu_);
};

TEST(TcpListenerTest, HandsEachConnectionOverOnAnEphemeralPort) {
  auto listener = TcpListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_GT((*listener)->port(), 0);
  Receiver receiver;
  (*listener)->Start(receiver.Callback());
  UniqueFd first = StartConnect((*listener)->port());
  UniqueFd second = StartConnect((*listener)->port());
  EXPECT_EQ(ConnectOutcome(first, absl::Seconds(10)), 0);
  EXPECT_EQ(ConnectOutcome(second, absl::Seconds(10)), 0);
  EXPECT_TRUE(receiver.AwaitCount(2, absl::Seconds(10)));
}

TEST(TcpListenerTest, PortInUseIsUnavailableNamingTheAddress) {
  auto first = TcpListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = TcpListener::Listen("127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string((*first)->port())),
            std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
}

TEST(TcpListenerTest, UnknownHostAndBadPortAreRefused) {
  auto unknown = TcpListener::Listen("no-such-host.invalid", 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(unknown.status().message().find("no-such-host.invalid"), std::string::npos);
  auto port = TcpListener::Listen("127.0.0.1", 70000);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TcpListenerTest, BracketedIpv6ListensOnBothFamilies) {
  auto listener = TcpListener::Listen("[::]", 0);
  if (!listener.ok()) GTEST_SKIP() << "no IPv6 on this host: " << listener.status();
  Receiver receiver;
  (*listener)->Start(receiver.Callback());
  UniqueFd ipv4 = StartConnect((*listener)->port());
  EXPECT_EQ(ConnectOutcome(ipv4, absl::Seconds(10)), 0);
  EXPECT_TRUE(receiver.AwaitCount(1, absl::Seconds(10)));
}

// The drain: connections the kernel completed are handed over, never reset;
// a new attempt is not completed while the listener drains and is refused
// once it closed.
TEST(TcpListenerTest, StopAcceptingServesQueuedConnectionsAndRefusesNewOnes) {
  auto listener = TcpListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = (*listener)->port();
  Receiver receiver(/*hold_first=*/true);
  (*listener)->Start(receiver.Callback());

  // The accept thread holds the first connection; the second completes in
  // the kernel and waits in the accept queue.
  UniqueFd held = StartConnect(port);
  ASSERT_TRUE(receiver.holding_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  UniqueFd queued = StartConnect(port);
  ASSERT_EQ(ConnectOutcome(queued, absl::Seconds(10)), 0);

  std::thread stopper([&] { (*listener)->StopAccepting(absl::Milliseconds(100)); });
  // Until the socket filter is in place an attempt still completes (and is
  // queued, so it must be handed over too); after, one stays unanswered.
  // (At most 400 attempts, 10 ms apart: far below the accept queue's 4096,
  // so a full queue cannot pass for the filter.)
  std::vector<UniqueFd> completed;
  UniqueFd dropped;
  for (int attempt_index = 0; attempt_index < 400 && !dropped.valid(); ++attempt_index) {
    UniqueFd attempt = StartConnect(port);
    if (ConnectOutcome(attempt, absl::Milliseconds(200)) == -1) {
      dropped = std::move(attempt);
    } else {
      completed.push_back(std::move(attempt));
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_TRUE(dropped.valid()) << "every new connection completed: the SYN filter has no effect";
  receiver.release_.Notify();
  stopper.join();

  // Every connection the kernel completed was handed over.
  EXPECT_EQ(receiver.count(), 2 + completed.size());
  // The dropped SYN is retransmitted to a closed port and refused.
  EXPECT_EQ(ConnectOutcome(dropped, absl::Seconds(10)), ECONNREFUSED);
  UniqueFd late = StartConnect(port);
  EXPECT_EQ(ConnectOutcome(late, absl::Seconds(10)), ECONNREFUSED);
}

TEST(TcpListenerTest, StopAcceptingIsIdempotentAndWorksBeforeStart) {
  auto listener = TcpListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = (*listener)->port();
  (*listener)->StopAccepting(absl::ZeroDuration());
  (*listener)->StopAccepting(absl::ZeroDuration());
  UniqueFd late = StartConnect(port);
  EXPECT_EQ(ConnectOutcome(late, absl::Seconds(10)), ECONNREFUSED);
}

}  // namespace
}  // namespace fuseserve
