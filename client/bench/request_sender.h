#pragma once

// The hot path of the load generator: pre-built ModelInferRequests, serialised
// once, sent as raw bytes with gRPC's callback API over several channels, each
// its own HTTP/2 connection (distinct channel arguments keep gRPC from sharing
// one subchannel), with INT32_MAX message sizes; answers are received as raw
// bytes and only their status is read. Sending never blocks.
//
// A typed client (the generated stub, tritonclient, perf_analyzer) serialises
// every request and parses every answer: kTyped does the same, for a client
// whose CPU per call is that of such a client.
//
// Calls complete on gRPC's callback API (its own threads run `done`), or on
// completion queues, each polled by a thread of the sender's own.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_service.grpc.pb.h"

namespace fuseserve::client {

// A channel with INT32_MAX message sizes, secured by `credentials`;
// `channel_index` makes its arguments, and therefore its connection, distinct
// from the others.
std::shared_ptr<grpc::Channel> CreateBenchChannel(
    const std::string& target, int channel_index,
    std::shared_ptr<grpc::ChannelCredentials> credentials);

// How a call picks its request from the sender's list.
enum class RequestAssignment {
  kRoundRobin,  // each call the next request, whatever is in flight
  // Request i belongs to in-flight slot i (its shared-memory regions): a call
  // takes a free slot and frees it when answered, so that no two calls in
  // flight share one. Closed loop never runs out (its concurrency is at most
  // the slots); an open-loop backlog beyond the slots shares them
  // round-robin.
  kPerSlot,
};

// What each call costs the client besides gRPC itself.
enum class Serialization {
  kOnce,   // requests serialised at start, answers not parsed
  kTyped,  // each request serialised and each answer parsed, per call
};

// Owns the load channels. Its callbacks never own it: gRPC 1.51 aborts when
// the last reference to a channel that used the callback API is dropped on
// one of the callback threads (grpc/grpc#32584: the channel then shuts down
// the thread pool it runs on), so the channels are always destroyed by the
// owner's thread, after every callback has finished.
class RequestSender {
 public:
  // `code` is the grpc::StatusCode value (0 = OK); latency is end to end as
  // the client saw it, from just before the call starts to its callback.
  using Done = std::function<void(int code, int64_t latency_ns)>;

  // Opens `num_channels` channels to `target`, secured by `credentials`, and
  // waits (up to `connect_timeout`) until each is connected. `requests` are
  // sent as `assignment` says; each call gets `timeout` as its deadline (0 =
  // none).
  static absl::StatusOr<std::unique_ptr<RequestSender>> Connect(
      const std::string& target, std::shared_ptr<grpc::ChannelCredentials> credentials,
      int num_channels, std::vector<inference::ModelInferRequest> requests,
      RequestAssignment assignment, absl::Duration timeout,
      Serialization serialization = Serialization::kOnce, int completion_queues = 0,
      absl::Duration connect_timeout = absl::Seconds(10));

  // Cancels the calls still in flight and waits for all their callbacks.
  // Destroy only after every load driver using the sender has stopped (a
  // callback that sends again would keep it waiting).
  ~RequestSender();

  // Starts one call; `done` runs once, on a gRPC thread or a completion
  // queue's thread (it may Send again).
  void Send(Done done);

  // Cancels every call still in flight (their `done` then reports CANCELLED).
  void CancelAll();

  // Completes the calls sent from now on on the first
  // min(concurrency, completion queues) queues (0: all of them), and returns
  // how many that is (0 on the callback API). A closed-loop level of
  // concurrency N keeps at most N calls in flight, and each queue beyond
  // those costs latency: a call completing on a queue whose thread is not the
  // one polling gRPC's sockets waits for that thread to be woken (at
  // concurrency 1, 4 queues against 1: p50 +110-140 us on an H200 host,
  // bench/results/2026-11-26-h200-c1-latency-tail.md). Meant for the start
  // of a level; calls already in flight complete on the queue they started
  // on.
  int UseQueuesFor(int concurrency);

 private:
  struct Call;
  // The calls in flight; shared with the callbacks so that the last one can
  // still unlock the mutex after the owner stopped waiting.
  struct InFlight {
    absl::Mutex mu;
    std::set<Call*> calls ABSL_GUARDED_BY(mu);
    std::vector<size_t> free_slots ABSL_GUARDED_BY(mu);  // kPerSlot only
  };

  RequestSender(std::vector<std::shared_ptr<grpc::Channel>> channels,
                std::vector<inference::ModelInferRequest> requests, RequestAssignment assignment,
                absl::Duration timeout, Serialization serialization, int completion_queues);

  // Ends `call` with `status` (the answer parsed first when `typed`): frees
  // its slot, runs its `done`, and deletes it.
  static void Complete(const std::shared_ptr<InFlight>& in_flight, Call* call,
                       grpc::Status status, bool typed);

  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  const std::vector<inference::ModelInferRequest> requests_;
  // requests_, serialised (kOnce): each call sends a reference to its bytes.
  std::vector<grpc::ByteBuffer> serialized_;
  const absl::Duration timeout_;
  const Serialization serialization_;
  // Completion queues (none: the callback API) and the threads polling them.
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> queue_threads_;
  std::atomic<size_t> queues_in_use_{0};  // the first ones of queues_ (UseQueuesFor)
  std::atomic<uint64_t> next_{0};
  const std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>();
};

}  // namespace fuseserve::client
