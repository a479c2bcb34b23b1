// Clock: the time source, injected so that tests can control it.
//
// RealClock reads absl::Now(). Implementations must be safe to call from any thread.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace autouvm::base {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace autouvm::base
