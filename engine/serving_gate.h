// ServingGate: counts the RPCs in flight and turns new ones away once the daemon drains (SIGTERM).
//
//   if (!gate->TryEnter()) return UNAVAILABLE;   ... gate->Exit();     // around each generation call
//   gate->StartDraining(); gate->WaitIdle(timeout);                     // at shutdown
//   gate->EndDrainNow();            // a second SIGTERM: the drain's WaitIdle returns at once
//
// Thread-safe.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace autouvm::engine {

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
  // True if every call finished within `timeout`. The drain's wait (interruptible) also returns, false,
  // once EndDrainNow is called; the wait for the last calls to send their status does not.
  enum class Wait { kInterruptible, kToTheEnd };
  bool WaitIdle(absl::Duration timeout, Wait wait = Wait::kInterruptible) {
    absl::MutexLock lock(&mu_);
    auto done = [this, wait]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return inflight_ == 0 || (wait == Wait::kInterruptible && end_now_);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout) && inflight_ == 0;
  }
  void EndDrainNow() {
    absl::MutexLock lock(&mu_);
    end_now_ = true;
  }

 private:
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool end_now_ ABSL_GUARDED_BY(mu_) = false;
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace autouvm::engine
