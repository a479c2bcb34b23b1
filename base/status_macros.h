// Project-local absl::Status helpers (Debian's Abseil predates absl/status/status_macros.h).
//
//   RETURN_IF_ERROR(DoThing());                  // returns the status if it is not OK
//   ASSIGN_OR_RETURN(auto value, MakeThing());   // unwraps a StatusOr or returns its status
//
// Header-only; no state, safe from any thread.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define AUTOUVM_CONCAT_INNER(a, b) a##b
#define AUTOUVM_CONCAT(a, b) AUTOUVM_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status autouvm_status_ = (expr);           \
    if (!autouvm_status_.ok()) return autouvm_status_; \
  } while (0)

#define AUTOUVM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  AUTOUVM_ASSIGN_OR_RETURN_IMPL(AUTOUVM_CONCAT(autouvm_statusor_, __LINE__), lhs, expr)
