#include "client/bench/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fuseserve::client {

int64_t NearestRankPercentile(const std::vector<int64_t>& sorted, double percent) {
  if (sorted.empty()) return 0;
  const double clamped = std::clamp(percent, 0.0, 100.0);
  const auto n = static_cast<double>(sorted.size());
  // Rank in 1..n; the epsilon keeps exact products (e.g. 0.9 * 10) from
  // rounding up to the next rank through floating-point error.
  const auto rank = static_cast<size_t>(std::ceil(clamped / 100.0 * n - 1e-9));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

LatencySummary SummarizeLatencies(std::vector<int64_t>* latencies_ns) {
  LatencySummary summary;
  if (latencies_ns->empty()) return summary;
  std::sort(latencies_ns->begin(), latencies_ns->end());
  const std::vector<int64_t>& sorted = *latencies_ns;
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  const long double total = std::accumulate(sorted.begin(), sorted.end(), 0.0L);
  summary.count = static_cast<int64_t>(sorted.size());
  summary.avg_us = static_cast<double>(total / sorted.size() / 1000.0L);
  summary.min_us = us(sorted.front());
  summary.max_us = us(sorted.back());
  summary.p50_us = us(NearestRankPercentile(sorted, 50));
  summary.p90_us = us(NearestRankPercentile(sorted, 90));
  summary.p95_us = us(NearestRankPercentile(sorted, 95));
  summary.p99_us = us(NearestRankPercentile(sorted, 99));
  return summary;
}

bool WithinTolerance(const std::vector<double>& values, double tolerance) {
  if (values.empty()) return false;
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  if (!(mean > 0)) return false;
  return std::all_of(values.begin(), values.end(),
                     [&](double value) { return std::abs(value - mean) <= tolerance * mean; });
}

}  // namespace fuseserve::client
