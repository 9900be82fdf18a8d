#pragma once

// Latency percentiles and the throughput-stability rule of the measurement.

#include <cstdint>
#include <vector>

namespace fuseserve::client {

// The nearest-rank percentile of `sorted` (ascending): the smallest sample
// such that at least `percent`% of the samples are <= it. Monotone in
// `percent` by construction, so p50 <= p90 <= p95 <= p99 always holds.
// 0 for an empty input; `percent` is clamped to [0, 100].
int64_t NearestRankPercentile(const std::vector<int64_t>& sorted, double percent);

struct LatencySummary {
  int64_t count = 0;
  double avg_us = 0;
  double min_us = 0;
  double max_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p95_us = 0;
  double p99_us = 0;
};

// Summarises latencies given in nanoseconds (any order; sorted in place).
LatencySummary SummarizeLatencies(std::vector<int64_t>* latencies_ns);

// True when every value lies within `tolerance` (relative) of their mean and
// the mean is positive: perf_analyzer's rule for "the measurement is
// stable". Empty input is not stable.
bool WithinTolerance(const std::vector<double>& values, double tolerance);

}  // namespace fuseserve::client
