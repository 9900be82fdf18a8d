#include "server/grpc/tcp_listener.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace fuseserve {
namespace {

constexpr int kBacklog = 4096;
constexpr absl::Duration kAcceptRetryDelay = absl::Milliseconds(10);

// "[::1]" -> "::1"; other hosts unchanged.
std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// The port a bound socket got (the ephemeral one when it asked for 0).
int BoundPort(int socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(socket, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

void SetPort(sockaddr* address, int port) {
  if (address->sa_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(address)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(address)->sin_port = htons(static_cast<uint16_t>(port));
  }
}

// Socket filter run on every segment that reaches a listening socket (the
// program sees the TCP header at offset 0): a SYN without ACK, i.e. a new
// connection attempt, is dropped; everything else passes, so handshakes
// already under way still complete.
constexpr uint32_t kTcpFlagsOffset = 13;
constexpr uint32_t kTcpAck = 0x10;
constexpr uint32_t kTcpSyn = 0x02;
constexpr sock_filter kDropNewConnections[] = {
    {BPF_LD | BPF_B | BPF_ABS, 0, 0, kTcpFlagsOffset},
    {BPF_JMP | BPF_JSET | BPF_K, 2, 0, kTcpAck},  // ACK: keep
    {BPF_JMP | BPF_JSET | BPF_K, 0, 1, kTcpSyn},  // SYN: drop
    {BPF_RET | BPF_K, 0, 0, 0},
    {BPF_RET | BPF_K, 0, 0, 0xffffffff},
};

absl::Status DropNewConnections(int socket) {
  sock_fprog program{};
  program.len = sizeof(kDropNewConnections) / sizeof(kDropNewConnections[0]);
  program.filter = const_cast<sock_filter*>(kDropNewConnections);
  if (::setsockopt(socket, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof(program)) != 0) {
    return absl::InternalError(absl::StrCat("SO_ATTACH_FILTER: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// `bind_error` receives bind's errno when that is what failed (0 otherwise).
absl::StatusOr<UniqueFd> BindOne(const addrinfo& info, int port, const std::string& label,
                                 int* bind_error) {
  *bind_error = 0;
  UniqueFd socket(::socket(info.ai_family, info.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                           info.ai_protocol));
  if (!socket.valid()) {
    return absl::UnavailableError(absl::StrCat("cannot open a socket for ", label, ": ",
                                               std::strerror(errno)));
  }
  const int on = 1;
  ::setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (info.ai_family == AF_INET6) {
    // "::" serves IPv4 too, as gRPC's own listener does.
    const int off = 0;
    ::setsockopt(socket.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  }
  sockaddr_storage address{};
  std::memcpy(&address, info.ai_addr, info.ai_addrlen);
  SetPort(reinterpret_cast<sockaddr*>(&address), port);
  if (::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), info.ai_addrlen) != 0) {
    *bind_error = errno;
    return absl::UnavailableError(absl::StrCat("cannot bind ", label, ": ", std::strerror(errno)));
  }
  if (::listen(socket.get(), kBacklog) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", label, ": ",
                                               std::strerror(errno)));
  }
  return socket;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& host,
                                                                 int port) {
  const std::string label = absl::StrCat(host, ":", port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port out of range in ", label));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string node = Unbracketed(host);
  const int resolved =
      ::getaddrinfo(node.empty() ? nullptr : node.c_str(), "0", &hints, &found);
  if (resolved != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", label, ": ", ::gai_strerror(resolved)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> results(found, ::freeaddrinfo);
  std::vector<UniqueFd> sockets;
  int bound_port = port;
  for (const addrinfo* info = found; info != nullptr; info = info->ai_next) {
    int bind_error = 0;
    absl::StatusOr<UniqueFd> socket = BindOne(*info, bound_port, label, &bind_error);
    if (!socket.ok()) {
      // A dual-stack "::" bound first already holds the IPv4 port as well.
      if (!sockets.empty() && bind_error == EADDRINUSE) continue;
      return socket.status();
    }
    if (bound_port == 0) bound_port = BoundPort(socket->get());
    sockets.push_back(*std::move(socket));
  }
  if (sockets.empty()) return absl::UnavailableError(absl::StrCat(label, " has no address"));
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  return std::unique_ptr<TcpListener>(
      new TcpListener(std::move(sockets), bound_port, std::move(wake)));
}

TcpListener::TcpListener(std::vector<UniqueFd> sockets, int port, UniqueFd wake)
    : sockets_(std::move(sockets)), port_(port), wake_(std::move(wake)) {}

TcpListener::~TcpListener() { StopAccepting(absl::ZeroDuration()); }

void TcpListener::Start(std::function<void(int fd)> on_connection) {
  on_connection_ = std::move(on_connection);
  thread_ = std::thread([this] {
    NameCurrentThread("fs-accept");
    AcceptLoop();
  });
}

bool TcpListener::AcceptAll(int socket) {
  while (true) {
    const int connection = ::accept4(socket, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      FS_LOG(WARNING) << "accepting a gRPC connection failed: " << std::strerror(errno);
      return false;
    }
    const int on = 1;
    ::setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    on_connection_(connection);
  }
}

std::vector<pollfd> TcpListener::PolledSockets() const {
  std::vector<pollfd> polled;
  for (const UniqueFd& socket : sockets_) polled.push_back({socket.get(), POLLIN, 0});
  return polled;
}

void TcpListener::AcceptLoop() {
  std::vector<pollfd> polled = PolledSockets();
  polled.push_back({wake_.get(), POLLIN, 0});
  while (true) {
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      FS_LOG(ERROR) << "gRPC accept loop stopped: poll: " << std::strerror(errno);
      return;
    }
    if (polled.back().revents != 0) return;
    bool accepted = true;
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if (polled[i].revents != 0) accepted = AcceptAll(polled[i].fd) && accepted;
    }
    // Out of descriptors, the connection stays queued and poll reports it
    // again at once: back off instead of spinning.
    if (!accepted) absl::SleepFor(kAcceptRetryDelay);
  }
}

void TcpListener::StopAccepting(absl::Duration settle) {
  if (stopped_) return;
  stopped_ = true;
  for (const UniqueFd& socket : sockets_) {
    const absl::Status filtered = DropNewConnections(socket.get());
    if (!filtered.ok()) {
      FS_LOG(WARNING) << "gRPC listener: " << filtered.message()
                      << "; connections arriving as it closes will be reset";
    }
  }
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (::write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
      FS_LOG(ERROR) << "gRPC listener: cannot wake the accept thread: " << std::strerror(errno);
    }
    thread_.join();
  }
  if (on_connection_) {
    // What the kernel completed before the filter, then the handshakes that
    // were under way, until `settle` passes.
    std::vector<pollfd> polled = PolledSockets();
    const absl::Time until = absl::Now() + settle;
    while (true) {
      for (const pollfd& entry : polled) AcceptAll(entry.fd);
      const int64_t left_ms = absl::ToInt64Milliseconds(until - absl::Now());
      if (left_ms <= 0) break;
      if (::poll(polled.data(), polled.size(), static_cast<int>(left_ms)) < 0 && errno != EINTR) {
        break;
      }
    }
  }
  sockets_.clear();
}

}  // namespace fuseserve
