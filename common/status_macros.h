#pragma once

// Status propagation helpers. Debian's Abseil (20220623) predates Abseil's own
// versions of these, so they are defined once here and used everywhere.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FUSESERVE_CONCAT_INNER(a, b) a##b
#define FUSESERVE_CONCAT(a, b) FUSESERVE_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status fuseserve_status_ = (expr);         \
    if (!fuseserve_status_.ok()) return fuseserve_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, StatusOrExpr());` binds the value or returns the
// error status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(FUSESERVE_CONCAT(fuseserve_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                          \
  if (!statusor.ok()) return statusor.status();    \
  lhs = std::move(statusor).value()
