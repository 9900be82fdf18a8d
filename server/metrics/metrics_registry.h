#pragma once

// The process's Prometheus registry: every metric family registered once
// (names, help and labels as Triton's, units in the names), one ModelMetrics
// per (model, version), process-level gauges, and the text exposition served
// on GET /metrics.
//
// Families (labels model, version unless noted; see model_metrics.h for when
// each is updated):
//   counters   nv_inference_request_success
//              nv_inference_request_failure            (+ reason = REJECTED |
//                                                        CANCELED | BACKEND | OTHER)
//              nv_inference_count, nv_inference_exec_count
//              nv_inference_request_duration_us, nv_inference_queue_duration_us,
//              nv_inference_compute_{input,infer,output}_duration_us (cumulative µs)
//   gauges     nv_inference_pending_request_count
//              nv_model_load_duration_secs
//              nv_gpu_memory_used_bytes, nv_gpu_memory_total_bytes (gpu_uuid only)
//              nv_pinned_memory_pool_total_bytes, nv_pinned_memory_pool_used_bytes
//                (no labels; the page-locked pool of answer buffers)
//   histograms nv_inference_{request,queue,compute_infer}_duration_histogram_us
//                (µs; buckets 50, 100, 250, 500, 1000, ... 10000000: 1-2.5-5 per
//                decade from 50 µs to 10 s, the names of Triton core PR #474)
//              nv_inference_batch_size (batch size of each execution; buckets
//                1, 2, 4, ..., 1024; not a Triton family: named like
//                nv_inference_count, whose unit, inferences, it shares)
// Every series of a model appears as soon as ForModel creates it, at zero, so
// rate() and dashboards see the model before its first request.

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
  // stays valid for the registry's lifetime. Takes a lock and a map lookup:
  // call it once per model version and keep the reference.
  virtual ModelMetrics& ForModel(const std::string& model, const std::string& version) = 0;

  // nv_model_load_duration_secs{model, version}.
  virtual void SetModelLoadDuration(const std::string& model, const std::string& version,
                                    double seconds) = 0;

  // nv_gpu_memory_used_bytes / nv_gpu_memory_total_bytes{gpu_uuid} (device
  // memory fuseserve holds / the device's total).
  virtual void SetGpuMemory(const std::string& gpu_uuid, int64_t used_bytes,
                            int64_t total_bytes) = 0;

  // nv_pinned_memory_pool_total_bytes / nv_pinned_memory_pool_used_bytes
  // (Triton's names): the page-locked memory the pool of answers' buffers
  // holds, and the part of it in answers now. Both 0 until set.
  virtual void SetPinnedMemoryPool(int64_t total_bytes, int64_t used_bytes) = 0;

  // Prometheus text exposition format (version 0.0.4) of every family.
  virtual std::string SerializeText() const = 0;
};

}  // namespace fuseserve
