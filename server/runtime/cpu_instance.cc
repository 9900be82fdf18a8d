#include "server/runtime/cpu_instance.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/runtime/batch_io.h"
#include "server/runtime/parallel_gather.h"

namespace fuseserve {
namespace {

// Large inputs are staged by the pool's workers in pieces of this size.
constexpr size_t kGatherPieceBytes = size_t{4} << 20;

}  // namespace

CpuInstance::CpuInstance(std::string name, const Model* model, ThreadPool* pool,
                         Clock* clock, ModelMetrics* metrics)
    : name_(std::move(name)), model_(model), pool_(pool), clock_(clock), metrics_(metrics) {}

void CpuInstance::Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) {
  if (batch.empty()) return;
  const absl::Time start = clock_->Now();
  const Shape input_shape = StackedInputShape(batch);
  const absl::StatusOr<Shape> output_shape = model_->OutputShape(input_shape);
  if (!output_shape.ok()) {
    CompleteBatch(batch, output_shape.status());
    return;
  }
  const bool single = batch.size() == 1;

  // Stage: a single request with a contiguous input is computed in place.
  const float* input = batch.front()->input;
  if (!single || input == nullptr) {
    input_buffer_.resize(NumElements(input_shape));
    ParallelGather(batch, PlanGather(batch, kGatherPieceBytes, /*skip_page_locked=*/false), pool_)
        .CopyAllTo(reinterpret_cast<char*>(input_buffer_.data()));
    input = input_buffer_.data();
  }
  const absl::Time input_done = clock_->Now();

  float* output = nullptr;
  if (single) {
    output = batch.front()->allocate_output(*output_shape);
  } else {
    output_buffer_.resize(NumElements(*output_shape));
    output = output_buffer_.data();
  }
  const absl::Status run = model_->RunOnCpu(input, input_shape, output, *pool_);
  const absl::Time infer_done = clock_->Now();
  int64_t batch_size = 0;
  for (const auto& request : batch) batch_size += request->batch_size;
  if (!run.ok()) {
    if (metrics_ != nullptr) {
      metrics_->RecordExecution(batch_size, input_done - start, infer_done - input_done,
                                absl::ZeroDuration());
    }
    CompleteBatch(batch, absl::Status(run.code(), absl::StrCat("instance ", name_,
                                                                " failed: ", run.message())));
    return;
  }

  if (!single) {
    const float* cursor = output_buffer_.data();
    for (auto& request : batch) {
      const Shape shape = RequestOutputShape(*output_shape, *request, batch.size());
      const int64_t count = NumElements(shape);
      std::memcpy(request->allocate_output(shape), cursor, count * sizeof(float));
      ++request->host_copies;
      cursor += count;
    }
  }
  const absl::Time output_done = clock_->Now();

  for (auto& request : batch) {
    request->timestamps.input_done = input_done;
    request->timestamps.infer_done = infer_done;
    request->timestamps.output_done = output_done;
  }
  if (metrics_ != nullptr) {
    metrics_->RecordExecution(batch_size, input_done - start, infer_done - input_done,
                              output_done - infer_done);
  }
  CompleteBatch(batch, absl::OkStatus());
}

}  // namespace fuseserve
