#include "server/runtime/gpu_instance.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cuda/copy_batch.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "server/runtime/batch_io.h"
#include "server/runtime/cuda_graph_cache.h"
#include "server/runtime/parallel_gather.h"

namespace fuseserve {
namespace {

// Owns a cuBLAS handle and the workspace it is given. cuBLAS would otherwise
// allocate its workspace itself, which stream capture (CUDA graphs) forbids.
class CublasHandle {
 public:
  // NVIDIA's recommended workspace for Hopper.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  static absl::StatusOr<CublasHandle> Create(cudaStream_t stream) {
    CublasHandle handle;
    ASSIGN_OR_RETURN(handle.workspace_, cuda::DeviceBuffer::Allocate(kWorkspaceBytes));
    if (cublasCreate(&handle.handle_) != CUBLAS_STATUS_SUCCESS) {
      handle.handle_ = nullptr;
      return absl::InternalError("cublasCreate failed");
    }
    if (cublasSetStream(handle.handle_, stream) != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError("cublasSetStream failed");
    }
    if (cublasSetWorkspace(handle.handle_, handle.workspace_.data(), kWorkspaceBytes) !=
        CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError("cublasSetWorkspace failed");
    }
    return handle;
  }
  CublasHandle() = default;
  CublasHandle(CublasHandle&& other) noexcept
      : workspace_(std::move(other.workspace_)), handle_(std::exchange(other.handle_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& other) noexcept {
    std::swap(workspace_, other.workspace_);
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~CublasHandle() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  cublasHandle_t get() const { return handle_; }

 private:
  cuda::DeviceBuffer workspace_;
  cublasHandle_t handle_ = nullptr;
};

bool HasUnknownDims(const Shape& shape) {
  for (int64_t dim : shape) {
    if (dim < 0) return true;
  }
  return false;
}

// The pinned pieces a batch's host inputs pass through on their way to the
// device: `slots` pieces of `slot_bytes`, reused in turn. A slot is written
// again only once the device has read it (its event). Fixed at creation, so
// a batch of any size costs no pinned allocation (cudaMallocHost of a whole
// batch of large samples takes up to a second, on the request path).
struct StagingRing {
  // Pieces of this size keep 4 threads copying while earlier pieces cross
  // to the device, at ~80 us of transfer each.
  static constexpr size_t kPieceBytes = size_t{4} << 20;
  static constexpr size_t kSlots = 6;

  // One slot as large as the largest input when that is known and smaller
  // than a piece (every batch is then one piece: one copy to the device),
  // else kSlots of kPieceBytes.
  static absl::StatusOr<StagingRing> Create(const Shape& max_input_shape, bool busy_wait_events) {
    StagingRing ring;
    ring.slot_bytes = kPieceBytes;
    size_t slots = kSlots;
    if (!max_input_shape.empty() && !HasUnknownDims(max_input_shape)) {
      const size_t max_bytes = static_cast<size_t>(NumElements(max_input_shape)) * sizeof(float);
      if (max_bytes <= kPieceBytes) {
        ring.slot_bytes = std::max<size_t>(max_bytes, sizeof(float));
        slots = 1;
      }
    }
    ASSIGN_OR_RETURN(ring.buffer, cuda::PinnedBuffer::Allocate(slots * ring.slot_bytes));
    for (size_t i = 0; i < slots; ++i) {
      ASSIGN_OR_RETURN(cuda::Event read, cuda::Event::Create(/*timing=*/false,
                                                             /*blocking_sync=*/!busy_wait_events));
      ring.read.push_back(std::move(read));
    }
    return ring;
  }

  size_t slots() const { return read.size(); }
  char* slot(size_t piece) const { return buffer.as<char>() + (piece % slots()) * slot_bytes; }

  cuda::PinnedBuffer buffer;
  size_t slot_bytes = 0;
  std::vector<cuda::Event> read;  // per slot: recorded after the copy that reads it
};

class GpuInstance final : public Instance {
 public:
  GpuInstance(GpuInstanceOptions options, cuda::Stream stream, CublasHandle cublas,
              std::unique_ptr<GpuExecutor> executor, cuda::Event start, cuda::Event input_done,
              cuda::Event infer_done, cuda::Event output_done, StagingRing staging)
      : options_(std::move(options)),
        stream_(std::move(stream)),
        cublas_(std::move(cublas)),
        executor_(std::move(executor)),
        start_(std::move(start)),
        input_done_(std::move(input_done)),
        infer_done_(std::move(infer_done)),
        output_done_(std::move(output_done)),
        staging_(std::move(staging)),
        graphs_(options_.cuda_graphs ? kMaxGraphs : 0) {}

  const std::string& name() const override { return options_.name; }
  bool healthy() const override { return healthy_.load(); }

  // Allocates buffers for `input_shape` (and its output) if they are larger
  // than those held. ResourceExhausted, naming the sizes, when they cannot be
  // allocated: memory that is not available for one size is no device fault,
  // so the instance stays healthy (and a request too large for the device
  // cannot take the model out of service).
  absl::Status Reserve(const Shape& input_shape) {
    ASSIGN_OR_RETURN(const Shape output_shape, options_.model->OutputShape(input_shape));
    const size_t in_bytes = NumElements(input_shape) * sizeof(float);
    const size_t out_bytes = NumElements(output_shape) * sizeof(float);
    // Both buffers of a pair are checked: after a failed allocation one of
    // them may be larger than the other.
    const absl::Status allocated = [&]() -> absl::Status {
      if (in_bytes > device_input_.bytes()) {
        ASSIGN_OR_RETURN(device_input_, cuda::DeviceBuffer::Allocate(in_bytes));
      }
      if (out_bytes > device_output_.bytes()) {
        ASSIGN_OR_RETURN(device_output_, cuda::DeviceBuffer::Allocate(out_bytes));
      }
      return absl::OkStatus();
    }();
    if (allocated.ok()) return allocated;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the buffers for input shape ", ShapeToString(input_shape), " (", in_bytes + out_bytes,
        " bytes of device memory) do not fit on GPU ", options_.device, ": ", allocated.message()));
  }

  // Device buffers for a whole batch (max_batch_size) of `input_shape`'s
  // samples, so that the first batch of a new sample shape sizes them for
  // every batch size that can follow and memory stops growing after warm-up
  // (a soak of variable-size models saw memory step up by one sample's
  // buffers each time a larger batch first formed, minutes in).
  // A whole batch larger than kWholeBatchReserveBytes per buffer is reserved
  // in doubling steps instead (the samples held, at least doubled, at most a
  // whole batch): at most log2(max_batch_size) steps, and the first batch
  // does not pay for the largest one (a whole batch of 16 groupnorm samples
  // of 67 MB is 1 GiB each way).
  // Exactly `input_shape` when the reservation does not fit.
  absl::Status ReserveForBatchesOf(const Shape& input_shape) {
    const int64_t max_batch = options_.max_input_shape.empty() ? 0 : options_.max_input_shape[0];
    if (!input_shape.empty() && max_batch > input_shape[0] && input_shape[0] > 0) {
      Shape target = input_shape;
      target[0] = max_batch;
      ASSIGN_OR_RETURN(const Shape whole_output, options_.model->OutputShape(target));
      const int64_t whole_bytes =
          std::max(NumElements(target), NumElements(whole_output)) * int64_t{sizeof(float)};
      if (whole_bytes > kWholeBatchReserveBytes) {
        const int64_t sample_bytes = NumElements(input_shape) / input_shape[0] * sizeof(float);
        const int64_t held = static_cast<int64_t>(device_input_.bytes()) / sample_bytes;
        if (held >= input_shape[0]) return Reserve(input_shape);  // fits already
        target[0] = std::min(max_batch, std::max(input_shape[0], 2 * held));
      }
      if (target != unreservable_) {
        if (Reserve(target).ok()) return absl::OkStatus();
        unreservable_ = target;  // not retried at every batch of this shape
      }
    }
    return Reserve(input_shape);
  }

  void Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override {
    if (batch.empty()) return;
    const absl::Time start = options_.clock->Now();
    int64_t batch_size = 0;
    for (const auto& request : batch) batch_size += request->batch_size;
    Timings timings;
    const absl::Status status = Run(batch, &timings);
    if (!status.ok()) {
      // Copies of a failed batch may still read the staging ring, which the
      // next batch writes: leave the stream idle, as every batch does.
      cudaStreamSynchronize(stream_.get());
    }
    const absl::Time end = options_.clock->Now();
    if (status.code() == absl::StatusCode::kInternal) {
      // A device error may be sticky; stop advertising readiness.
      healthy_.store(false);
      FS_LOG(ERROR) << "instance " << options_.name << " is unhealthy: " << status.message();
    }
    const absl::Time input_done = start + timings.input;
    const absl::Time infer_done = input_done + timings.infer;
    for (auto& request : batch) {
      request->timestamps.input_done = input_done;
      request->timestamps.infer_done = infer_done;
      request->timestamps.output_done = end;
    }
    if (status.ok() && options_.trace != nullptr) {
      options_.trace->Record({options_.name, options_.device, batch_size,
                              static_cast<int>(batch.size()), timings.start, timings.input,
                              timings.input + timings.infer,
                              timings.input + timings.infer + timings.output});
    }
    if (options_.metrics != nullptr) {
      options_.metrics->RecordExecution(batch_size, timings.input, timings.infer, end - infer_done);
    }
    CompleteBatch(batch, status.ok() ? status
                                     : absl::Status(status.code(),
                                                    absl::StrCat("instance ", options_.name,
                                                                 " failed: ", status.message())));
  }

 private:
  struct Timings {
    absl::Time start;                              // host clock, at the start event
    absl::Duration input = absl::ZeroDuration();   // gather + H2D
    absl::Duration infer = absl::ZeroDuration();   // kernels
    absl::Duration output = absl::ZeroDuration();  // D2H
  };

  absl::Status Run(std::vector<std::unique_ptr<InferenceRequest>>& batch, Timings* timings) {
    RETURN_IF_CUDA_ERROR(cudaSetDevice(options_.device));
    const Shape input_shape = StackedInputShape(batch);
    ASSIGN_OR_RETURN(const Shape output_shape, options_.model->OutputShape(input_shape));
    RETURN_IF_ERROR(ReserveForBatchesOf(input_shape));

    cudaStream_t stream = stream_.get();
    timings->start = options_.clock->Now();
    RETURN_IF_ERROR(start_.Record(stream));
    RETURN_IF_ERROR(CopyInputsToDevice(batch, stream));
    RETURN_IF_ERROR(input_done_.Record(stream));
    const GraphMemoryLayout layout{device_input_.data(), device_output_.data(),
                                   executor_->device_bytes()};
    RETURN_IF_ERROR(graphs_.Run(stream, input_shape, layout, [&](cudaStream_t target) {
      const GpuLaunchContext context{target, cublas_.get()};
      return executor_->Enqueue(context, device_input_.as<float>(), input_shape,
                                device_output_.as<float>());
    }));
    RETURN_IF_ERROR(infer_done_.Record(stream));
    RETURN_IF_ERROR(CopyOutputsFromDevice(batch, output_shape, stream));
    RETURN_IF_ERROR(output_done_.Record(stream));
    // Waits for this instance's stream only.
    RETURN_IF_ERROR(output_done_.Synchronize());
    RETURN_IF_CUDA_ERROR(cudaGetLastError());

    ASSIGN_OR_RETURN(const float h2d_ms, input_done_.ElapsedMsSince(start_));
    ASSIGN_OR_RETURN(const float infer_ms, infer_done_.ElapsedMsSince(input_done_));
    ASSIGN_OR_RETURN(const float output_ms, output_done_.ElapsedMsSince(infer_done_));
    // start_ is recorded before the gather, so the events span the whole
    // input phase: the host's gather (the copies it issues wait for it) and
    // the DMA that overlaps and follows it.
    timings->input = absl::Microseconds(static_cast<int64_t>(h2d_ms * 1000));
    timings->infer = absl::Microseconds(static_cast<int64_t>(infer_ms * 1000));
    timings->output = absl::Microseconds(static_cast<int64_t>(output_ms * 1000));
    AnswerStagedOutputs(batch, output_shape);
    return absl::OkStatus();
  }

  // Issues the copies of the batch's inputs, stacked, into device_input_.
  // Page-locked inputs are copied directly. The others pass through the
  // staging ring in pieces (one piece for a batch of small requests), each
  // copied to the device as soon as it is in place, so that the transfers
  // overlap the rest of the gather. While the instance's thread completes
  // one piece, the pool's workers copy the next ones whose slots are free.
  absl::Status CopyInputsToDevice(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                                  cudaStream_t stream) {
    char* device = device_input_.as<char>();
    size_t offset = 0;
    for (const auto& request : batch) {
      const size_t bytes = NumElements(request->input_shape) * sizeof(float);
      if (request->input_pinned && request->input != nullptr) {
        copies_.Add(device + offset, request->input, bytes);
      }
      offset += bytes;
    }
    RETURN_IF_ERROR(copies_.Issue(stream));

    ParallelGather gather(batch, PlanGather(batch, staging_.slot_bytes, /*skip_page_locked=*/true),
                          options_.copy_pool);
    const size_t pieces = gather.size();
    const size_t slots = staging_.slots();
    size_t prepared = 0;  // pieces whose slot is free, offered to the pool
    // Prepares pieces up to `last`: waits for their slots when `wait`, else
    // stops at the first slot the device still reads.
    const auto prepare = [&](size_t last, bool wait) -> absl::Status {
      for (; prepared <= last && prepared < pieces; ++prepared) {
        // A batch's first `slots` pieces find the ring idle: every batch
        // ends with its stream idle (Execute).
        if (prepared >= slots) {
          const cuda::Event& read = staging_.read[prepared % slots];
          if (wait) {
            RETURN_IF_ERROR(read.Synchronize());
          } else {
            const cudaError_t query = cudaEventQuery(read.get());
            if (query == cudaErrorNotReady) break;
            RETURN_IF_CUDA_ERROR(query);
          }
        }
        gather.Offer(prepared, staging_.slot(prepared));
      }
      return absl::OkStatus();
    };
    for (size_t i = 0; i < pieces; ++i) {
      RETURN_IF_ERROR(prepare(i, /*wait=*/true));
      RETURN_IF_ERROR(prepare(i + slots - 1, /*wait=*/false));
      char* slot = staging_.slot(i);
      gather.Complete(i, slot);
      const GatherPiece& piece = gather.piece(i);
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(device + piece.offset, slot, piece.bytes,
                                           cudaMemcpyHostToDevice, stream));
      // The slot is written again within this batch once the device has read it.
      if (i + slots < pieces) RETURN_IF_ERROR(staging_.read[i % slots].Record(stream));
    }
    return absl::OkStatus();
  }

  // Issues the copies of each request's slice of device_output_: straight
  // into the request's own memory when it is page-locked, otherwise into
  // pinned_output_ in contiguous runs, answered after the stream finishes
  // (AnswerStagedOutputs). pinned_output_ grows only when a batch needs it:
  // gRPC's answers and registered shared memory are page-locked already.
  absl::Status CopyOutputsFromDevice(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                                     const Shape& output_shape, cudaStream_t stream) {
    const bool staged = std::any_of(batch.begin(), batch.end(),
                                    [](const auto& request) { return !request->output_pinned; });
    const size_t batch_bytes = NumElements(output_shape) * sizeof(float);
    if (staged && batch_bytes > pinned_output_.bytes()) {
      absl::StatusOr<cuda::PinnedBuffer> grown = cuda::PinnedBuffer::Allocate(batch_bytes);
      if (!grown.ok()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the pinned staging for the batch's output (", batch_bytes,
                         " bytes) cannot be allocated: ", grown.status().message()));
      }
      pinned_output_ = *std::move(grown);
    }
    const char* device = device_output_.as<char>();
    char* staging = pinned_output_.as<char>();
    size_t offset = 0;
    size_t run_start = 0;
    size_t run_bytes = 0;
    const auto flush = [&] {
      copies_.Add(staging + run_start, device + run_start, run_bytes);
      run_bytes = 0;
    };
    for (auto& request : batch) {
      const Shape shape = RequestOutputShape(output_shape, *request, batch.size());
      const size_t bytes = NumElements(shape) * sizeof(float);
      if (request->output_pinned) {
        flush();
        copies_.Add(request->allocate_output(shape), device + offset, bytes);
      } else {
        if (run_bytes == 0) run_start = offset;
        run_bytes += bytes;
      }
      offset += bytes;
    }
    flush();
    return copies_.Issue(stream);
  }

  // Answers the requests whose outputs were staged in pinned_output_.
  void AnswerStagedOutputs(std::vector<std::unique_ptr<InferenceRequest>>& batch,
                           const Shape& output_shape) {
    const char* staging = pinned_output_.as<char>();
    size_t offset = 0;
    for (auto& request : batch) {
      const Shape shape = RequestOutputShape(output_shape, *request, batch.size());
      const size_t bytes = NumElements(shape) * sizeof(float);
      if (!request->output_pinned) {
        std::memcpy(request->allocate_output(shape), staging + offset, bytes);
        ++request->host_copies;
      }
      offset += bytes;
    }
  }

  // One graph per batch shape: every batch size of a fixed-shape model fits.
  static constexpr size_t kMaxGraphs = 256;
  // Largest buffer reserved for a whole batch at once (see
  // ReserveForBatchesOf).
  static constexpr int64_t kWholeBatchReserveBytes = int64_t{256} << 20;

  const GpuInstanceOptions options_;
  cuda::Stream stream_;
  CublasHandle cublas_;
  std::unique_ptr<GpuExecutor> executor_;
  cuda::Event start_, input_done_, infer_done_, output_done_;
  cuda::DeviceBuffer device_input_, device_output_;
  StagingRing staging_;               // inputs on their way to device_input_
  cuda::PinnedBuffer pinned_output_;  // outputs bound for memory that is not page-locked (grown
                                      // by the first batch that has one)
  // The page-locked inputs of a batch, then its outputs: issued as one call
  // each (kernels/cuda/copy_batch.h).
  cuda::CopyBatch copies_;
  CudaGraphCache graphs_;
  Shape unreservable_;  // the last whole-batch shape that did not fit
  std::atomic<bool> healthy_{true};
};

}  // namespace

int GpuDeviceCount() { return cuda::DeviceCount(); }

absl::StatusOr<GpuDeviceMemory> QueryGpuMemory(int device) {
  ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::GetDeviceInfo(device));
  ASSIGN_OR_RETURN(const int64_t used, cuda::DeviceMemoryUsedBytes(device));
  return GpuDeviceMemory{info.uuid, info.name, used, info.total_memory_bytes};
}

absl::StatusOr<std::unique_ptr<Instance>> CreateGpuInstance(const GpuInstanceOptions& options) {
  if (options.device < 0 || options.device >= GpuDeviceCount()) {
    return absl::InvalidArgumentError(absl::StrCat("GPU ", options.device, " does not exist (",
                                                   GpuDeviceCount(), " device(s) present)"));
  }
  RETURN_IF_CUDA_ERROR(cudaSetDevice(options.device));
  ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create());
  ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream.get()));
  ASSIGN_OR_RETURN(std::unique_ptr<GpuExecutor> executor, options.model->CreateGpuExecutor());
  ASSIGN_OR_RETURN(cuda::Event start, cuda::Event::Create());
  ASSIGN_OR_RETURN(cuda::Event input_done, cuda::Event::Create());
  ASSIGN_OR_RETURN(cuda::Event infer_done, cuda::Event::Create());
  // The one event the instance thread waits on.
  ASSIGN_OR_RETURN(cuda::Event output_done,
                   cuda::Event::Create(/*timing=*/true,
                                       /*blocking_sync=*/!options.busy_wait_events));
  ASSIGN_OR_RETURN(StagingRing staging,
                   StagingRing::Create(options.max_input_shape, options.busy_wait_events));
  auto instance = std::make_unique<GpuInstance>(
      options, std::move(stream), std::move(cublas), std::move(executor), std::move(start),
      std::move(input_done), std::move(infer_done), std::move(output_done), std::move(staging));
  if (!HasUnknownDims(options.max_input_shape)) {
    RETURN_IF_ERROR(instance->Reserve(options.max_input_shape));
  }
  return instance;
}

}  // namespace fuseserve
