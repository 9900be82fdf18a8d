#pragma once

// One execution instance of a model (SPEC.md §4): a device plus everything it
// needs to run batches (for a GPU instance: its stream, library handles,
// device buffers sized for max_batch_size and pinned staging buffers). An
// instance runs one batch at a time; a model's instances run concurrently,
// each on the batcher thread that feeds it.

#include <memory>
#include <string>
#include <vector>

#include "server/runtime/inference_request.h"

namespace fuseserve {

class Instance {
 public:
  virtual ~Instance() = default;

  // For logs: e.g. "cpu#0", "gpu0#1".
  virtual const std::string& name() const = 0;

  // False after a sticky device error; the model then reports not ready.
  virtual bool healthy() const = 0;

  // Runs `batch`: requests whose input shapes agree except in the leading
  // (batch) dimension, with total batch size <= max_batch_size (or a single
  // request when the model does not batch). Stages the inputs, computes,
  // writes each request's slice of the output through its allocate_output,
  // records the execution in the model's metrics and calls every request's
  // on_complete exactly once, OK or with the batch's error, before returning.
  virtual void Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) = 0;
};

}  // namespace fuseserve
