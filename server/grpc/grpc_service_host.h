#pragma once

// What GrpcServer serves: a service to register, and, when some of its
// methods are on gRPC's completion-queue API, the queues they need and the
// loop that serves each one.

#include "grpcpp/completion_queue.h"
#include "grpcpp/impl/service_type.h"

namespace fuseserve {

class GrpcServiceHost {
 public:
  virtual ~GrpcServiceHost() = default;

  virtual grpc::Service* service() = 0;

  // How many completion queues the service's asynchronous methods need
  // (0: every method is on the callback API).
  virtual int completion_queues() const { return 0; }

  // Serves `queue` until it has been shut down and drained. GrpcServer calls
  // it once per queue, each on a thread of its own, after the server has
  // started, and shuts the queue down once the server has shut down (every
  // call finished).
  virtual void ServeCompletionQueue(grpc::ServerCompletionQueue* queue) { (void)queue; }
};

}  // namespace fuseserve
