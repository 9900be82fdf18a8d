#pragma once

// ModelInfer on gRPC's completion-queue API (--grpc-infer-threads=N, N > 0,
// the default): N completion queues, each served by a thread of its own that
// runs the handler of every call arriving on it (parse, decode, enqueue) and
// sends its answer once the thread that completed the request has handed the
// call back (while other calls are in flight; a call alone in flight is
// answered by the completing thread). The other RPCs stay on the callback API.
//
// Why: in a gRPC echo of a 32 KiB ModelInfer at concurrency 64 on a 16-core
// H100 host (bench/grpc_api, bench/results/2026-11-25-h100-grpc-api.txt), the
// callback API served 49.7k calls/s at 99.7 us of server CPU per call, and 4
// completion-queue threads 54.7k at 63.0 us: the CPU gRPC spends per call is
// CPU the batcher, the instances and a co-located client do not get. Served,
// 4 queues were ahead of the callback API in every interleaved pair at gemm
// c64 (bench/results/2026-11-26-h100-grpc-infer-threads.md). Answers handed
// back to the queues' threads, 6 of them, against answers sent by 4 answer
// threads on 4 queues: 10% less server CPU per inference and +6% throughput
// at gemm c64 in 6 pairs on one H200 host; in the echo, an answer sent from
// another thread cost gRPC 15-22 us more per call than one sent from the
// queue's thread (bench/results/2026-11-27-h200-grpc-answer-handback.md).
//
// DESIGN.md keeps gRPC on the callback API, without completion-queue state
// machines; this is the one exception, for the one RPC on the hot path, and
// the machine is kept to four tags per call (arrived, handed back, answered,
// done), all handled on the call's own queue thread. --grpc-infer-threads=0 serves
// ModelInfer on the callback API again.

#include <atomic>

#include "server/grpc/inference_rpcs.h"

namespace fuseserve {

class QueuedInferenceService final : public InferenceRpcs<QueuedModelInferApi> {
 public:
  // See InferenceService::Create; options.infer_threads > 0.
  QueuedInferenceService(InferenceServiceOptions options, const ModelManager* models, Clock* clock,
                         SharedMemoryManager* shared_memory);

  int completion_queues() const override { return options().infer_threads; }
  void ServeCompletionQueue(grpc::ServerCompletionQueue* queue) override;

  // Calls requested ahead on each queue: how many may arrive on it at once
  // before the first of them is requested again (gRPC holds further calls
  // until then).
  static constexpr int kCallsRequestedPerQueue = 32;

 private:
  // ModelInfer calls arrived and not yet answered, on every queue.
  std::atomic<int> in_flight_{0};
};

}  // namespace fuseserve
