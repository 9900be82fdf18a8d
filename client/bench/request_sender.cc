#include "client/bench/request_sender.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fuseserve::client {

namespace {

// A slot value for calls that hold none.
constexpr size_t kNoSlot = static_cast<size_t>(-1);

const std::string& ModelInferMethod() {
  static const std::string* const method =
      new std::string("/inference.GRPCInferenceService/ModelInfer");
  return *method;
}

grpc::ByteBuffer Serialize(const inference::ModelInferRequest& request) {
  grpc::ByteBuffer buffer;
  bool own = false;
  // Serialising a message the sender built cannot fail.
  (void)grpc::SerializationTraits<inference::ModelInferRequest>::Serialize(request, &buffer,
                                                                           &own);
  return buffer;
}

}  // namespace

struct RequestSender::Call {
  grpc::ClientContext context;
  size_t slot = kNoSlot;  // the slot the call holds (kPerSlot)
  grpc::ByteBuffer request;  // kTyped: this call's serialisation
  grpc::ByteBuffer response;
  // Completion queues only: the call's reader and where Finish writes.
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
  grpc::Status status;
  // Set by Send once the call is filled in, just before gRPC takes it; read
  // first by Complete. gRPC core hands the call from thread to thread in ways
  // ThreadSanitizer cannot see; this release/acquire pair is the hand-off in
  // our own code.
  std::atomic<bool> started{false};
  std::chrono::steady_clock::time_point start;
  Done done;
};

std::shared_ptr<grpc::Channel> CreateBenchChannel(
    const std::string& target, int channel_index,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxSendMessageSize(INT_MAX);
  arguments.SetMaxReceiveMessageSize(INT_MAX);
  // gRPC reuses a subchannel (one TCP connection) for channels whose
  // arguments are equal; a per-channel argument and a local subchannel pool
  // give every channel its own connection.
  arguments.SetInt("fuseserve.bench_channel_index", channel_index);
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, std::move(credentials), arguments);
}

RequestSender::RequestSender(std::vector<std::shared_ptr<grpc::Channel>> channels,
                             std::vector<inference::ModelInferRequest> requests,
                             RequestAssignment assignment, absl::Duration timeout,
                             Serialization serialization, int completion_queues)
    : channels_(std::move(channels)),
      requests_(std::move(requests)),
      timeout_(timeout),
      serialization_(serialization) {
  for (const auto& channel : channels_) {
    stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
  if (serialization_ == Serialization::kOnce) {
    for (const inference::ModelInferRequest& request : requests_) {
      serialized_.push_back(Serialize(request));
    }
  }
  const bool typed = serialization_ == Serialization::kTyped;
  for (int i = 0; i < completion_queues; ++i) {
    queues_.push_back(std::make_unique<grpc::CompletionQueue>());
    queue_threads_.emplace_back([in_flight = in_flight_, queue = queues_.back().get(), typed] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        Call* call = static_cast<Call*>(tag);
        Complete(in_flight, call, std::move(call->status), typed);
      }
    });
  }
  queues_in_use_.store(queues_.size(), std::memory_order_relaxed);
  if (assignment == RequestAssignment::kPerSlot) {
    absl::MutexLock lock(&in_flight_->mu);
    // Highest first, so that slots are taken from 0 up.
    for (size_t slot = requests_.size(); slot-- > 0;) in_flight_->free_slots.push_back(slot);
  }
}

absl::StatusOr<std::unique_ptr<RequestSender>> RequestSender::Connect(
    const std::string& target, std::shared_ptr<grpc::ChannelCredentials> credentials,
    int num_channels, std::vector<inference::ModelInferRequest> requests,
    RequestAssignment assignment, absl::Duration timeout, Serialization serialization,
    int completion_queues, absl::Duration connect_timeout) {
  if (num_channels <= 0) return absl::InvalidArgumentError("at least one channel is needed");
  if (requests.empty()) return absl::InvalidArgumentError("at least one request is needed");
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const absl::Time deadline = absl::Now() + connect_timeout;
  for (int i = 0; i < num_channels; ++i) {
    channels.push_back(CreateBenchChannel(target, i, credentials));
    if (!channels.back()->WaitForConnected(absl::ToChronoTime(deadline))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", target, " within ",
                                                 absl::FormatDuration(connect_timeout)));
    }
  }
  return std::unique_ptr<RequestSender>(
      new RequestSender(std::move(channels), std::move(requests), assignment, timeout,
                        serialization, completion_queues));
}

RequestSender::~RequestSender() {
  CancelAll();
  {
    absl::MutexLock lock(&in_flight_->mu);
    in_flight_->mu.Await(absl::Condition(
        +[](std::set<Call*>* calls) { return calls->empty(); }, &in_flight_->calls));
  }
  // No call is left to complete on the queues: their threads drain and end.
  for (const auto& queue : queues_) queue->Shutdown();
  for (std::thread& thread : queue_threads_) thread.join();
}

void RequestSender::Complete(const std::shared_ptr<InFlight>& in_flight, Call* call,
                             grpc::Status status, bool typed) {
  (void)call->started.load(std::memory_order_acquire);
  if (typed && status.ok()) {
    // As a typed stub does before its callback.
    inference::ModelInferResponse parsed;
    status = grpc::SerializationTraits<inference::ModelInferResponse>::Deserialize(
        &call->response, &parsed);
  }
  const auto latency = std::chrono::steady_clock::now() - call->start;
  if (call->slot != kNoSlot) {
    absl::MutexLock lock(&in_flight->mu);
    in_flight->free_slots.push_back(call->slot);
  }
  call->done(static_cast<int>(status.error_code()),
             std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count());
  absl::MutexLock lock(&in_flight->mu);
  in_flight->calls.erase(call);
  delete call;
}

void RequestSender::Send(Done done) {
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  size_t index = n % requests_.size();
  auto& stub = *stubs_[n % stubs_.size()];
  auto* call = new Call;
  call->done = std::move(done);
  if (timeout_ > absl::ZeroDuration()) {
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  }
  {
    absl::MutexLock lock(&in_flight_->mu);
    in_flight_->calls.insert(call);
    if (!in_flight_->free_slots.empty()) {
      call->slot = in_flight_->free_slots.back();
      in_flight_->free_slots.pop_back();
      index = call->slot;
    }
  }
  const grpc::ByteBuffer* request = nullptr;
  if (serialization_ == Serialization::kTyped) {
    call->request = Serialize(requests_[index]);
    request = &call->request;
  } else {
    request = &serialized_[index];  // gRPC takes a reference to its slices
  }
  call->start = std::chrono::steady_clock::now();
  // The call leaves the in-flight set last: until then the destructor waits,
  // so `done` may still Send; afterwards only `in_flight` (kept alive by this
  // callback) is touched. Its slot is freed before `done`, whose replacement
  // call (closed loop) then finds it.
  const bool typed = serialization_ == Serialization::kTyped;
  if (!queues_.empty()) {
    const size_t queues = queues_in_use_.load(std::memory_order_relaxed);
    call->reader = stub.PrepareUnaryCall(&call->context, ModelInferMethod(), *request,
                                         queues_[n % queues].get());
    // Our last read of the call is before the release: once StartCall runs,
    // Finish may hand it to a queue's thread that completes and deletes it,
    // and ThreadSanitizer does not see that hand-off inside gRPC core.
    grpc::ClientAsyncResponseReader<grpc::ByteBuffer>* const reader = call->reader.get();
    call->started.store(true, std::memory_order_release);
    reader->StartCall();
    reader->Finish(&call->response, &call->status, call);
    return;
  }
  call->started.store(true, std::memory_order_release);
  stub.UnaryCall(&call->context, ModelInferMethod(), grpc::StubOptions(), request,
                 &call->response, [in_flight = in_flight_, call, typed](grpc::Status status) {
                   Complete(in_flight, call, std::move(status), typed);
                 });
}

int RequestSender::UseQueuesFor(int concurrency) {
  size_t queues = queues_.size();
  if (concurrency > 0) queues = std::min(queues, static_cast<size_t>(concurrency));
  queues_in_use_.store(queues, std::memory_order_relaxed);
  return static_cast<int>(queues);
}

void RequestSender::CancelAll() {
  absl::MutexLock lock(&in_flight_->mu);
  for (Call* call : in_flight_->calls) call->context.TryCancel();
}

}  // namespace fuseserve::client
