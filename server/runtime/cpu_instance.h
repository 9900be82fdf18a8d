#pragma once

// An instance on the CPU backend: runs a model's RunOnCpu on the process's
// thread pool. Gathering and scattering are skipped for a batch of one
// request (the model reads the request's input and writes straight into its
// response); larger batches are gathered into buffers reused across batches.

#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "server/batching/clock.h"
#include "server/metrics/model_metrics.h"
#include "server/runtime/instance.h"
#include "server/runtime/model.h"

namespace fuseserve {

class CpuInstance : public Instance {
 public:
  // `model`, `pool`, `clock` and `metrics` must outlive the instance.
  CpuInstance(std::string name, const Model* model, ThreadPool* pool, Clock* clock,
              ModelMetrics* metrics);

  const std::string& name() const override { return name_; }
  bool healthy() const override { return true; }
  void Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override;

 private:
  std::string name_;
  const Model* model_;
  ThreadPool* pool_;
  Clock* clock_;
  ModelMetrics* metrics_;
  // Reused between batches; only the batcher thread of this instance uses them.
  std::vector<float> input_buffer_;
  std::vector<float> output_buffer_;
};

}  // namespace fuseserve
