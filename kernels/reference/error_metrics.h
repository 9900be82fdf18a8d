#pragma once

// How far a float32 result is from its float64 reference, in the two measures
// of SPEC.md §1.4: relative L2 error ||y - ref|| / ||ref|| and max abs error.

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/types/span.h"

namespace fuseserve {
namespace reference {

// The SPEC.md §1.4 tolerances.
struct Tolerance {
  double rel_l2;
  double max_abs;
};
inline constexpr Tolerance kFp32Tolerance{5e-6, 1e-4};
inline constexpr Tolerance kTf32Tolerance{1e-3, 1e-2};

struct ErrorStats {
  double rel_l2 = 0;
  double max_abs = 0;
  int64_t worst_index = -1;  // where max_abs occurs; -1 when nothing differs
  double worst_actual = 0;
  double worst_expected = 0;

  bool Within(const Tolerance& tolerance) const {
    return rel_l2 <= tolerance.rel_l2 && max_abs <= tolerance.max_abs;
  }
  // "rel L2 1.2e-07, max abs 3.4e-06 at [17] (actual 0.5, expected 0.500003)".
  std::string ToString() const;
};

std::ostream& operator<<(std::ostream& os, const ErrorStats& stats);

// Sizes that differ, or any NaN/infinity in `actual`, give infinite errors.
// A zero reference gives rel_l2 0 when `actual` is zero too, else infinity.
ErrorStats CompareToReference(absl::Span<const float> actual, absl::Span<const double> expected);

}  // namespace reference
}  // namespace fuseserve
