#include "kernels/reference/error_metrics.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fuseserve {
namespace reference {

std::string ErrorStats::ToString() const {
  std::string text = absl::StrCat("rel L2 ", rel_l2, ", max abs ", max_abs);
  if (worst_index >= 0) {
    absl::StrAppend(&text, " at [", worst_index, "] (actual ", worst_actual, ", expected ",
                    worst_expected, ")");
  }
  return text;
}

std::ostream& operator<<(std::ostream& os, const ErrorStats& stats) {
  return os << stats.ToString();
}

ErrorStats CompareToReference(absl::Span<const float> actual, absl::Span<const double> expected) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  ErrorStats stats;
  if (actual.size() != expected.size()) {
    stats.rel_l2 = kInf;
    stats.max_abs = kInf;
    return stats;
  }
  double diff_sq = 0;
  double ref_sq = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!std::isfinite(diff)) diff = kInf;
    diff_sq += diff * diff;
    ref_sq += expected[i] * expected[i];
    if (diff > stats.max_abs || (diff == kInf && stats.worst_index < 0)) {
      stats.max_abs = diff;
      stats.worst_index = static_cast<int64_t>(i);
      stats.worst_actual = actual[i];
      stats.worst_expected = expected[i];
    }
  }
  if (ref_sq == 0) {
    stats.rel_l2 = diff_sq == 0 ? 0 : kInf;
  } else {
    stats.rel_l2 = std::sqrt(diff_sq / ref_sq);
  }
  return stats;
}

}  // namespace reference
}  // namespace fuseserve
