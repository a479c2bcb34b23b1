// FakeClock: a base::Clock that tests move by hand.
//
//   FakeClock clock;                      // starts at 2026-01-01 00:00 UTC
//   clock.Advance(absl::Seconds(2));
//
// Thread-safe.
#pragma once

#include "absl/synchronization/mutex.h"
#include "base/clock.h"

namespace autouvm::testing {

class FakeClock final : public base::Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1767225600);
};

}  // namespace autouvm::testing
