#pragma once

// A listening TCP socket that fuseserve accepts on itself, so that a drain can
// stop taking connections without resetting any the kernel already completed.
//
// gRPC's own listener (ServerBuilder::AddListeningPort) stops only as part of
// Server::Shutdown, which closes the listening socket with connections still in
// its accept queue (the kernel resets them) and drops connections that are
// mid-handshake. A load balancer in front (nginx's grpc_pass opens a connection
// per request) has already sent its request on such a connection and cannot
// retry it elsewhere; a refused connect, on the other hand, it retries on the
// next backend (grpc_next_upstream error). So a draining server must refuse at
// connect time and serve every connection it let complete.
//
// Each accepted connection is handed to `on_connection` (the caller passes it
// to grpc::AddInsecureChannelFromFd), so this serves plaintext gRPC only: with
// TLS the server keeps gRPC's listener.

#include <poll.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace fuseserve {

class TcpListener {
 public:
  // Binds every address `host` resolves to ("0.0.0.0", "127.0.0.1", "[::]" or
  // "::" for IPv6 and IPv4, a host name) on `port` (0: one ephemeral port, the
  // same for all of them) and listens. Unavailable, naming the address, when
  // one of them cannot be bound (address in use, not local) or `host` does not
  // resolve.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(const std::string& host, int port);

  // StopAccepting(zero) if it was not called.
  ~TcpListener();

  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }

  // Starts the accept thread. Each connection, non-blocking, close-on-exec and
  // with TCP_NODELAY, is handed to `on_connection`, which owns the descriptor
  // from then on. Called at most once.
  void Start(std::function<void(int fd)> on_connection);

  // Stops taking connections without resetting one the kernel completed:
  // from now on new connection attempts (SYNs) are dropped by a socket
  // filter; the accept queue is emptied; handshakes already under way get
  // `settle` to complete and are accepted too; then the sockets close. A
  // client whose SYN was dropped retransmits it (after about a second) and
  // finds the port closed: its connect is refused, which it can retry
  // elsewhere. Returns once the sockets are closed. Idempotent.
  void StopAccepting(absl::Duration settle);

 private:
  TcpListener(std::vector<UniqueFd> sockets, int port, UniqueFd wake);

  // One read-poll entry per listening socket.
  std::vector<pollfd> PolledSockets() const;
  void AcceptLoop();
  // Accepts every connection waiting on `socket` and hands it over. False
  // when accept failed other than by an empty queue (out of descriptors: the
  // connection stays queued and the caller retries later).
  bool AcceptAll(int socket);

  std::vector<UniqueFd> sockets_;
  const int port_;
  UniqueFd wake_;  // eventfd: written to stop the accept thread
  std::function<void(int fd)> on_connection_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace fuseserve
