#pragma once

// The process's Prometheus registry: every metric family registered once
// (names, help and labels as Triton's, units in the names), one ModelMetrics
// per (model, version), process-level gauges, and the text exposition served
// on GET /metrics.

#include <cstdint>
#include <memory>
#include <string>

#include "server/metrics/model_metrics.h"

namespace fuseserve {

class MetricsRegistry {
 public:
  virtual ~MetricsRegistry() = default;

  static std::unique_ptr<MetricsRegistry> Create();

  // The metrics of (model, version), created on first use; the reference
  // stays valid for the registry's lifetime.
  virtual ModelMetrics& ForModel(const std::string& model, const std::string& version) = 0;

  // nv_model_load_duration_secs{model, version}.
  virtual void SetModelLoadDuration(const std::string& model, const std::string& version,
                                    double seconds) = 0;

  // nv_gpu_memory_used_bytes / nv_gpu_memory_total_bytes{gpu_uuid} (device
  // memory fuseserve holds / the device's total).
  virtual void SetGpuMemory(const std::string& gpu_uuid, int64_t used_bytes,
                            int64_t total_bytes) = 0;

  // Prometheus text exposition format (version 0.0.4) of every family.
  virtual std::string SerializeText() const = 0;
};

}  // namespace fuseserve
