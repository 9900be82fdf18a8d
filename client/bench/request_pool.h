#pragma once

// What the bench sends: the input shapes derived from the model's metadata
// and config plus the options, and a pool of pre-built requests with random
// inputs (built once, before any load, so the client is not the bottleneck).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench/bench_options.h"
#include "client/client.h"
#include "client/shared_memory_registry.h"
#include "common/shape.h"
#include "proto/grpc_service.pb.h"

namespace fuseserve::client {

struct InputSpec {
  std::string name;
  Shape shape;  // the full request shape, batch dimension included when the model batches
};

struct OutputSpec {
  std::string name;
  uint64_t shared_memory_byte_size = 0;  // the room reserved for it in shared memory
};

struct RequestPlan {
  std::string model;
  std::string model_version;  // as requested (empty = the server's choice)
  int64_t max_batch_size = 0;
  int64_t inferences_per_request = 1;  // the batch size; 1 for a model that does not batch
  std::vector<InputSpec> inputs;
  // Only with --shared-memory system (the outputs need regions then); empty
  // otherwise, and the server answers every output.
  std::vector<OutputSpec> outputs;
};

// Derives the request shapes. The model must take FP32 inputs only. For a
// batching model (max_batch_size > 0) the metadata shape is [-1, dims...] and
// the request is [batch_size, dims...]; otherwise the metadata shape is the
// request shape and batch_size must be 1. `options.shape` replaces the
// non-batch dims (it must keep the rank and every fixed dim); without it no
// dim may be -1. With --shared-memory system, every output gets its region
// size: --output-shared-memory-size, or its size from the metadata (none of
// its non-batch dims may then be -1). InvalidArgument says what to change.
absl::StatusOr<RequestPlan> PlanRequests(const inference::ModelMetadataResponse& metadata,
                                         const inference::ModelConfigResponse& config,
                                         const BenchOptions& options);

// Where one in-flight slot's tensors lie in shared memory: `inputs` in the
// order of plan.inputs, `outputs` in the order of plan.outputs.
struct SlotLocations {
  std::vector<SharedMemoryLocation> inputs;
  std::vector<SharedMemoryLocation> outputs;
};

// The in-flight slots of --shared-memory system: the largest concurrency
// (closed loop), or --inputs (open loop).
int SharedMemorySlots(const BenchOptions& options);

// Creates and registers (in `registry`) an input region per plan input and an
// output region per plan output for each of `slots` slots; slot i's inputs
// hold those of pool[i % pool.size()] (a BuildRequestPool result).
absl::StatusOr<std::vector<SlotLocations>> CreateSlotRegions(
    const RequestPlan& plan, const std::vector<inference::ModelInferRequest>& pool, int slots,
    SharedMemoryRegistry& registry);

// One request per slot, reading its inputs from and writing its outputs to
// that slot's regions: no tensor bytes in the messages.
absl::StatusOr<std::vector<inference::ModelInferRequest>> BuildSharedMemoryRequests(
    const RequestPlan& plan, const std::vector<SlotLocations>& slots);

// `count` requests with inputs drawn from U[0, 1) (a fixed seed: the same
// pool every run), sent as raw_input_contents.
std::vector<inference::ModelInferRequest> BuildRequestPool(const RequestPlan& plan, int count,
                                                           uint64_t seed);

}  // namespace fuseserve::client
