// How much CPU gRPC itself spends per unary raw ModelInfer, in the server
// and in a callback-API client, with the server on gRPC's callback API (as
// fuseserve) or on its completion-queue API with a fixed number of threads
// (one completion queue each). The server echoes the request's bytes and
// does nothing else, so the difference between the two is gRPC's alone.
// bench/grpc_api/compare.sh runs both and prints a table.
//
//   grpc_api_cpu server callback PORT
//   grpc_api_cpu server cq PORT THREADS
//   grpc_api_cpu server cq+health+notify+handoff PORT THREADS
//       (any of +health, +notify, and +handoff or +handback: CqOptions says
//       what each adds)
//       prints "CPU_SECONDS ANSWERED" every 200 ms until SIGTERM
//   grpc_api_cpu client HOST:PORT CONCURRENCY SECONDS BYTES
//       closed loop over 4 channels (4 connections); prints
//       "RPC_PER_S CLIENT_CPU_US_PER_RPC" over the last SECONDS after a 1 s warm-up

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/release_mutexes.h"
#include "common/thread_pool.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/grpc_service.grpc.pb.h"

namespace {

using inference::GRPCInferenceService;

// utime + stime of this process, in seconds (/proc/self/stat fields 14, 15).
double ProcessCpuSeconds() {
  std::ifstream file("/proc/self/stat");
  const std::string stat((std::istreambuf_iterator<char>(file)), {});
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string skipped;
  for (int i = 3; i < 14; ++i) fields >> skipped;
  long utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::atomic<long> answered{0};
volatile std::sig_atomic_t stopping = 0;

class CallbackEcho final : public GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
                               GRPCInferenceService::CallbackService> {
 public:
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override {
    *response = *request;
    answered.fetch_add(1, std::memory_order_relaxed);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

using CqEcho = GRPCInferenceService::WithRawMethod_ModelInfer<GRPCInferenceService::Service>;

// How a completion-queue server handles its calls, beyond the bare echo:
// the parts of fuseserve's ModelInfer (queued_inference_service.cc) that
// gRPC's cost may depend on.
struct CqOptions {
  // gRPC's default health service (on the callback API): gRPC then runs its
  // callback queue's `nexting` threads beside the completion queues.
  bool health = false;
  // Each call also asks to be told when it is done (AsyncNotifyWhenDone):
  // a third event per call on its queue.
  bool notify = false;
  // The call goes to one of 4 other threads (a ThreadPool, as fuseserve's
  // instances and answer threads are), which sends the answer...
  bool handoff = false;
  // ...or, with handback too, hands the call back to its queue's thread (a
  // grpc::Alarm already due), which sends it.
  bool handback = false;
};

// One call on a completion queue: requested, then answered (and, with
// `notify`, done), then deleted. Its tags are handled on its queue's thread.
class CqCall {
 public:
  CqCall(CqEcho* service, grpc::ServerCompletionQueue* cq, const CqOptions* options,
         fuseserve::ThreadPool* workers)
      : service_(service), cq_(cq), options_(options), workers_(workers), responder_(&context_) {
    if (options_->notify) context_.AsyncNotifyWhenDone(&done_);
    service->RequestModelInfer(&context_, &request_, &responder_, cq, cq, &arrived_);
  }

  // Handles one of a call's tags; deletes the call after its last.
  static void Handle(void* tag, bool ok) {
    const Tag& event = *static_cast<Tag*>(tag);
    CqCall* call = event.call;
    if (event.kind == Tag::kArrived) {
      if (!ok) {
        delete call;
        return;
      }
      new CqCall(call->service_, call->cq_, call->options_, call->workers_);
      call->awaited_ = call->options_->notify ? 2 : 1;
      answered.fetch_add(1, std::memory_order_relaxed);
      if (call->options_->handback) {
        ++call->awaited_;
        call->workers_->Post([call] {
          call->alarm_.Set(call->cq_, gpr_time_0(GPR_CLOCK_MONOTONIC), &call->handed_back_);
        });
      } else if (call->options_->handoff) {
        call->workers_->Post([call] { call->Answer(); });
      } else {
        call->Answer();
      }
      return;
    }
    if (event.kind == Tag::kHandedBack) call->Answer();
    if (--call->awaited_ == 0) delete call;
  }

 private:
  struct Tag {
    enum Kind { kArrived, kAnswered, kDone, kHandedBack };
    CqCall* call;
    Kind kind;
  };

  void Answer() { responder_.Finish(request_, grpc::Status::OK, &answered_); }

  CqEcho* const service_;
  grpc::ServerCompletionQueue* const cq_;
  const CqOptions* const options_;
  fuseserve::ThreadPool* const workers_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  int awaited_ = 0;
  Tag arrived_{this, Tag::kArrived};
  Tag answered_{this, Tag::kAnswered};
  Tag done_{this, Tag::kDone};
  Tag handed_back_{this, Tag::kHandedBack};
  grpc::Alarm alarm_;
};

void ServeQueue(CqEcho* service, grpc::ServerCompletionQueue* cq, const CqOptions* options,
                fuseserve::ThreadPool* workers) {
  for (int i = 0; i < 64; ++i) new CqCall(service, cq, options, workers);  // calls waiting
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) CqCall::Handle(tag, ok);
}

// "callback", or "cq" with any of "+health", "+notify", "+handoff" or
// "+handback" (CqOptions).
bool ParseApi(const std::string& api, CqOptions* options) {
  if (api == "callback") return true;
  std::vector<std::string> parts;
  std::stringstream stream(api);
  for (std::string part; std::getline(stream, part, '+');) parts.push_back(part);
  if (parts.empty() || parts[0] != "cq") return false;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "health") {
      options->health = true;
    } else if (parts[i] == "notify") {
      options->notify = true;
    } else if (parts[i] == "handoff") {
      options->handoff = true;
    } else if (parts[i] == "handback") {
      options->handoff = options->handback = true;
    } else {
      return false;
    }
  }
  return true;
}

int Server(const std::string& api, const CqOptions& options, int port, int threads) {
  grpc::EnableDefaultHealthCheckService(options.health);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials());
  CallbackEcho callback;
  CqEcho cq_service;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  if (api == "callback") {
    builder.RegisterService(&callback);
  } else {
    builder.RegisterService(&cq_service);
    for (int i = 0; i < threads; ++i) queues.push_back(builder.AddCompletionQueue());
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  std::unique_ptr<fuseserve::ThreadPool> workers =
      options.handoff ? std::make_unique<fuseserve::ThreadPool>(4, "echo-answer") : nullptr;
  std::vector<std::thread> loops;
  for (auto& queue : queues) {
    loops.emplace_back(ServeQueue, &cq_service, queue.get(), &options, workers.get());
  }
  std::signal(SIGTERM, [](int) { stopping = 1; });
  while (stopping == 0) {
    std::printf("%.3f %ld\n", ProcessCpuSeconds(), answered.load());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  server->Shutdown(std::chrono::system_clock::now());
  for (auto& queue : queues) queue->Shutdown();
  for (std::thread& loop : loops) loop.join();
  return 0;
}

// Closed loop: each of `concurrency` slots sends its next call from the
// previous one's callback until stopped.
class ClosedLoop {
 public:
  ClosedLoop(const std::string& target, int concurrency, int bytes) : slots_(concurrency) {
    for (int i = 0; i < 4; ++i) {
      grpc::ChannelArguments arguments;
      arguments.SetInt("grpc_api_cpu.channel", i);  // a connection per channel
      arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      channels_.push_back(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments));
      stubs_.push_back(GRPCInferenceService::NewStub(channels_.back()));
    }
    request_.set_model_name("echo");
    request_.add_raw_input_contents(std::string(static_cast<size_t>(bytes), 'x'));
  }

  // False when a channel does not connect within 10 s.
  bool Start() {
    for (const auto& channel : channels_) {
      if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
        return false;
      }
    }
    for (size_t i = 0; i < slots_.size(); ++i) Send(i);
    return true;
  }

  // Stops sending and waits for the calls in flight.
  bool Stop() {
    absl::MutexLock lock(&mu_);
    running_ = false;
    mu_.Await(absl::Condition(
        +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
    return failed_ == 0;
  }

  long completed() const { return completed_.load(); }

 private:
  struct Slot {
    std::unique_ptr<grpc::ClientContext> context;
    inference::ModelInferResponse response;
  };

  void Send(size_t i) {
    {
      absl::MutexLock lock(&mu_);
      if (!running_) return;
      ++in_flight_;
    }
    Slot& slot = slots_[i];
    slot.context = std::make_unique<grpc::ClientContext>();
    stubs_[i % stubs_.size()]->async()->ModelInfer(
        slot.context.get(), &request_, &slot.response, [this, i](grpc::Status status) {
          completed_.fetch_add(1);
          {
            absl::MutexLock lock(&mu_);
            --in_flight_;
            if (!status.ok()) {
              if (failed_++ == 0) std::fprintf(stderr, "grpc_api_cpu: %s\n", status.error_message().c_str());
            }
          }
          Send(i);
        });
  }

  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<GRPCInferenceService::Stub>> stubs_;
  inference::ModelInferRequest request_;
  std::vector<Slot> slots_;
  std::atomic<long> completed_{0};
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = true;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
};

int Client(const std::string& target, int concurrency, double seconds, int bytes) {
  ClosedLoop loop(target, concurrency, bytes);
  if (!loop.Start()) {
    std::fprintf(stderr, "grpc_api_cpu: cannot connect to %s\n", target.c_str());
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // warm-up
  const double cpu_before = ProcessCpuSeconds();
  const long before = loop.completed();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double cpu_after = ProcessCpuSeconds();
  const long calls = loop.completed() - before;
  if (!loop.Stop() || calls == 0) {
    std::fprintf(stderr, "grpc_api_cpu: calls failed\n");
    return 1;
  }
  std::printf("%.0f %.1f\n", static_cast<double>(calls) / seconds,
              1e6 * (cpu_after - cpu_before) / static_cast<double>(calls));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As fuseserve and fuseserve-cli do: gRPC's locks without Abseil's debug
  // deadlock graph (common/release_mutexes.h).
  fuseserve::DisableMutexDeadlockDetection();
  const std::vector<std::string> args(argv + 1, argv + argc);
  CqOptions options;
  if (args.size() >= 3 && args[0] == "server" && ParseApi(args[1], &options)) {
    return Server(args[1], options, std::atoi(args[2].c_str()),
                  args.size() > 3 ? std::atoi(args[3].c_str()) : 1);
  }
  if (args.size() == 5 && args[0] == "client") {
    return Client(args[1], std::atoi(args[2].c_str()), std::atof(args[3].c_str()),
                  std::atoi(args[4].c_str()));
  }
  std::fprintf(stderr,
               "usage: grpc_api_cpu server callback|cq[+health][+notify][+handoff|+handback] PORT [THREADS]\n"
               "       grpc_api_cpu client HOST:PORT CONCURRENCY SECONDS BYTES\n");
  return 2;
}
