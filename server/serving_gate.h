// ServingGate: counts the RPCs in flight and turns new ones away once the daemon drains (SIGTERM).
//
//   if (!gate->TryEnter()) return UNAVAILABLE;   ... gate->Exit();     // around each generation call
//   gate->StartDraining(); gate->WaitIdle(timeout);                     // at shutdown
//
// Thread-safe.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace autouvm::server {

class ServingGate {
 public:
  bool TryEnter() {
    absl::MutexLock lock(&mu_);
    if (draining_) return false;
    ++inflight_;
    return true;
  }
  void Exit() {
    absl::MutexLock lock(&mu_);
    --inflight_;
  }
  void StartDraining() {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  bool draining() const {
    absl::MutexLock lock(&mu_);
    return draining_;
  }
  // True if every call finished within `timeout`.
  bool WaitIdle(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return inflight_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }

 private:
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace autouvm::server
