#pragma once

// A model family bound to one version's weights: the backend-independent
// description of "the function" the server computes for a model. Created by
// the family factories in server/models/ at load time (after every weight has
// been checked against the config), then shared read-only by all instances.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shape.h"
#include "common/thread_pool.h"
#include "server/runtime/gpu_executor.h"

namespace fuseserve {

// Numerical precision of the matrix part of a model (SPEC.md §1.4).
enum class Precision { kFp32, kTf32 };

// "fp32" / "tf32".
const char* PrecisionName(Precision precision);
absl::StatusOr<Precision> ParsePrecision(const std::string& text);

class Model {
 public:
  virtual ~Model() = default;

  // The family name, as in config.pbtxt's `platform`.
  virtual const std::string& family() const = 0;

  // The precision the model computes in (reported in config and metadata).
  virtual Precision precision() const = 0;

  // Shape of the output for a full input shape (including the batch
  // dimension when the model batches). InvalidArgument, with a message naming
  // the offending dimension, when the input shape is not valid for the model.
  virtual absl::StatusOr<Shape> OutputShape(const Shape& input_shape) const = 0;

  // Computes the output on the CPU backend. `input` holds
  // NumElements(input_shape) floats, `output` room for
  // NumElements(*OutputShape(input_shape)) floats; both row-major, no
  // aliasing. Thread-safe: several instances may run the same model at once.
  virtual absl::Status RunOnCpu(const float* input, const Shape& input_shape,
                                float* output, ThreadPool& pool) const = 0;

  // The model's GPU path on the current CUDA device (the caller has selected
  // it): uploads the weights in the kernels' layout. FailedPrecondition in a
  // build without CUDA; Unimplemented for a model without a GPU path.
  virtual absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateGpuExecutor() const {
    return absl::UnimplementedError("model family " + family() + " has no GPU path");
  }
};

}  // namespace fuseserve
