#include "client/bench/request_pool.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/shared_memory_registry.h"
#include "common/status_macros.h"

namespace fuseserve::client {

namespace {

std::string DimsToString(const Shape& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace

absl::StatusOr<RequestPlan> PlanRequests(const inference::ModelMetadataResponse& metadata,
                                         const inference::ModelConfigResponse& config,
                                         const BenchOptions& options) {
  RequestPlan plan;
  plan.model = options.model;
  plan.model_version = options.model_version;
  plan.max_batch_size = config.config().max_batch_size();
  const bool batching = plan.max_batch_size > 0;
  if (batching && options.batch_size > plan.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("--batch-size ", options.batch_size,
                                                   " exceeds the model's max_batch_size of ",
                                                   plan.max_batch_size));
  }
  if (!batching && options.batch_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", options.model,
                     "\" does not batch (max_batch_size 0): its requests carry the full shape, so "
                     "--batch-size must be 1"));
  }
  plan.inferences_per_request = batching ? options.batch_size : 1;
  if (metadata.inputs().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model \"", options.model, "\" has no inputs"));
  }

  for (const auto& input : metadata.inputs()) {
    if (input.datatype() != "FP32") {
      return absl::InvalidArgumentError(absl::StrCat("input \"", input.name(), "\" is ",
                                                     input.datatype(),
                                                     "; bench generates FP32 inputs only"));
    }
    Shape dims(input.shape().begin(), input.shape().end());
    if (batching) {
      if (dims.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input \"", input.name(), "\" of a batching model has no batch dimension"));
      }
      dims.erase(dims.begin());
    }
    if (options.shape.has_value()) {
      const Shape& given = *options.shape;
      bool compatible = given.size() == dims.size();
      for (size_t i = 0; compatible && i < dims.size(); ++i) {
        compatible = dims[i] < 0 || dims[i] == given[i];
      }
      if (!compatible) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--shape ", DimsToString(given), " does not fit input \"", input.name(),
            "\" with dims ", DimsToString(dims), batching ? " (batch dimension excluded)" : ""));
      }
      dims = given;
    }
    for (int64_t dim : dims) {
      if (dim < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input \"", input.name(),
                                                       "\" has variable dims ", DimsToString(dims),
                                                       "; give the non-batch dims with --shape"));
      }
    }
    InputSpec spec{input.name(), {}};
    spec.shape.reserve(dims.size() + 1);
    if (batching) spec.shape.push_back(options.batch_size);
    for (int64_t dim : dims) spec.shape.push_back(dim);
    plan.inputs.push_back(std::move(spec));
  }
  if (options.shared_memory == SharedMemoryType::kSystem) {
    for (const auto& output : metadata.outputs()) {
      OutputSpec spec{output.name(), 0};
      if (options.output_shared_memory_size.has_value()) {
        spec.shared_memory_byte_size = *options.output_shared_memory_size;
      } else {
        ASSIGN_OR_RETURN(spec.shared_memory_byte_size,
                         OutputByteSize(output, batching ? options.batch_size : 0));
      }
      plan.outputs.push_back(std::move(spec));
    }
  }
  return plan;
}

int SharedMemorySlots(const BenchOptions& options) {
  if (options.mode == LoadMode::kOpenLoop) return options.num_inputs;
  return *std::max_element(options.concurrency.begin(), options.concurrency.end());
}

absl::StatusOr<std::vector<SlotLocations>> CreateSlotRegions(
    const RequestPlan& plan, const std::vector<inference::ModelInferRequest>& pool, int slots,
    SharedMemoryRegistry& registry) {
  if (pool.empty()) return absl::InvalidArgumentError("at least one request is needed");
  std::vector<SlotLocations> locations(slots);
  for (int slot = 0; slot < slots; ++slot) {
    const inference::ModelInferRequest& source = pool[slot % pool.size()];
    for (const std::string& bytes : source.raw_input_contents()) {
      ASSIGN_OR_RETURN(const RegisteredRegion input,
                       registry.Add(absl::StrCat("bench_in", slot), bytes.size()));
      std::memcpy(input.region->data(), bytes.data(), bytes.size());
      locations[slot].inputs.push_back(input.Location(bytes.size()));
    }
    for (const OutputSpec& spec : plan.outputs) {
      ASSIGN_OR_RETURN(const RegisteredRegion output,
                       registry.Add(absl::StrCat("bench_out", slot), spec.shared_memory_byte_size));
      locations[slot].outputs.push_back(output.Location(spec.shared_memory_byte_size));
    }
  }
  return locations;
}

absl::StatusOr<std::vector<inference::ModelInferRequest>> BuildSharedMemoryRequests(
    const RequestPlan& plan, const std::vector<SlotLocations>& slots) {
  std::vector<inference::ModelInferRequest> requests;
  for (const SlotLocations& slot : slots) {
    if (slot.inputs.size() != plan.inputs.size() || slot.outputs.size() != plan.outputs.size()) {
      return absl::InternalError("a slot's regions do not match the request plan");
    }
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
      inputs.push_back({plan.inputs[i].name, plan.inputs[i].shape, {}, slot.inputs[i]});
    }
    InferOptions options;
    options.model_version = plan.model_version;
    for (size_t i = 0; i < plan.outputs.size(); ++i) {
      options.output_shared_memory[plan.outputs[i].name] = slot.outputs[i];
    }
    ASSIGN_OR_RETURN(inference::ModelInferRequest request,
                     BuildInferRequest(plan.model, inputs, options));
    requests.push_back(std::move(request));
  }
  return requests;
}

std::vector<inference::ModelInferRequest> BuildRequestPool(const RequestPlan& plan, int count,
                                                           uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<inference::ModelInferRequest> pool(count);
  for (inference::ModelInferRequest& request : pool) {
    request.set_model_name(plan.model);
    request.set_model_version(plan.model_version);
    for (const InputSpec& spec : plan.inputs) {
      auto* input = request.add_inputs();
      input->set_name(spec.name);
      input->set_datatype("FP32");
      for (int64_t dim : spec.shape) input->add_shape(dim);
      std::vector<float> values(NumElements(spec.shape));
      for (float& value : values) value = uniform(engine);
      request.add_raw_input_contents(reinterpret_cast<const char*>(values.data()),
                                     values.size() * sizeof(float));
    }
  }
  return pool;
}

}  // namespace fuseserve::client
