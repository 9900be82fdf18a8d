#pragma once

// Owns every model version of the repository: loads them at start-up (one
// model failing does not stop the others), resolves (name, version) for the
// front ends, and drains them at shutdown. A loaded version is its config,
// its Model (family bound to weights), its instances behind one
// DynamicBatcher, and its metrics. Two config parameters exist for
// fuseserve's own tests only (fault injection, see model_manager.cc); a model
// using them fails its load unless FUSESERVE_ENABLE_TEST_PARAMETERS=1 is set.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <atomic>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "proto/model_config.pb.h"
#include "server/batching/clock.h"
#include "server/batching/dynamic_batcher.h"
#include "server/metrics/metrics_registry.h"
#include "server/runtime/batch_trace.h"
#include "server/runtime/model.h"

namespace fuseserve {

enum class ModelState { kReady, kUnavailable };

// One version of one model, loaded or failed. Immutable after loading except
// for the batcher's own state.
class ModelVersionRecord {
 public:
  const std::string& name() const { return name_; }
  // 0 when the model failed before its versions were known.
  int64_t version() const { return version_; }
  std::string version_string() const;
  // The normalised config as the ModelConfig RPC reports it, with the
  // effective `precision` filled in.
  const inference::ModelConfig& config() const { return config_; }
  // Ready: loaded, all instances healthy, not shutting down.
  bool ready() const;
  // Why the version is unavailable ("" when ready).
  std::string reason() const;
  // Where its instances run: "cpu", "gpu0", "gpu0,gpu1", ...
  const std::string& device() const { return device_; }

  // Valid only for loaded versions.
  const Model& model() const { return *model_; }
  DynamicBatcher& batcher() const { return *batcher_; }
  ModelMetrics& metrics() const { return *metrics_; }
  bool loaded() const { return batcher_ != nullptr; }

 private:
  friend class ModelManager;

  std::string name_;
  int64_t version_ = 0;
  inference::ModelConfig config_;
  std::string failure_;  // load error; empty when loaded
  std::string device_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DynamicBatcher> batcher_;
  ModelMetrics* metrics_ = nullptr;
  const std::atomic<bool>* shutting_down_ = nullptr;  // the manager's flag
};

struct ModelManagerOptions {
  std::string repository;
  Clock* clock = nullptr;
  MetricsRegistry* metrics = nullptr;
  // The CPU backend's compute pool; GPU instances copy pieces of large
  // inputs on its workers.
  ThreadPool* cpu_pool = nullptr;
  // Receives the phases of every GPU batch (--batch-trace-file); may be null.
  BatchTraceSink* batch_trace = nullptr;
  // Each model's answer-sending threads (BatcherOptions::response_threads).
  int response_threads = 0;
};

class ModelManager {
 public:
  // Loads every model of the repository. Fails only when the repository
  // itself cannot be read; per-model failures are logged and recorded.
  static absl::StatusOr<std::unique_ptr<ModelManager>> Load(const ModelManagerOptions& options);

  ~ModelManager();

  // The version to serve: `version` empty = the highest loaded version.
  // NotFound for an unknown model or version; InvalidArgument for a version
  // that is not a non-negative integer; Unavailable when the version exists
  // but is not ready (message gives the reason).
  absl::StatusOr<const ModelVersionRecord*> FindReady(const std::string& name,
                                                      const std::string& version) const;

  // Like FindReady but also returns versions that are not ready (for
  // metadata, config, readiness and statistics).
  absl::StatusOr<const ModelVersionRecord*> Find(const std::string& name,
                                                 const std::string& version) const;

  // All versions of `name` (NotFound if unknown), ascending.
  absl::StatusOr<std::vector<const ModelVersionRecord*>> Versions(const std::string& name) const;

  // Every record, sorted by (name, version).
  std::vector<const ModelVersionRecord*> All() const;

  // Every loaded version is ready (and, when `strict`, no version failed).
  bool Ready(bool strict) const;

  // Sets nv_gpu_memory_{used,total}_bytes for every CUDA device.
  void RefreshGpuMemoryMetrics(MetricsRegistry& metrics) const;

  // The drain's first step: the server's readiness (Ready) goes false, and
  // every loaded model's queued requests run without waiting for fuller
  // batches (DynamicBatcher::Flush). The models still accept requests and
  // report themselves ready until Shutdown.
  void BeginDrain();

  // Readiness goes false, batchers stop accepting and drain until `deadline`.
  void Shutdown(absl::Time deadline);
  bool shutting_down() const;

 private:
  ModelManager() = default;
  void LoadModel(const std::string& name, const std::string& directory,
                 const ModelManagerOptions& options);
  void AddFailure(const std::string& name, int64_t version, inference::ModelConfig config,
                  const std::string& reason);

  // name -> version -> record. Written only during Load, read-only after.
  std::map<std::string, std::map<int64_t, std::unique_ptr<ModelVersionRecord>>> models_;
  // Set by BeginDrain and Shutdown: the server is not ready. Only Shutdown
  // also stops the models (shutting_down_).
  std::atomic<bool> draining_{false};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace fuseserve
