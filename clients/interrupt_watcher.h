// Turns Ctrl-C into a clean cancellation of the call in flight.
//
// Usage: call BlockInterrupts() first thing in main(), before gRPC starts any thread, so that every
// thread inherits a mask with SIGINT blocked. Then wrap each call:
//
//   grpc::ClientContext context;
//   InterruptWatcher watcher(&context);
//   ... make the call ...
//   if (watcher.Stop()) return kExitInterrupted;  // SIGINT arrived; the call was cancelled
//
// See Note [Cancelling on SIGINT] in interrupt_watcher.cc. Thread-safety: one watcher at a time per
// process; its methods are called from the thread that made it.
#pragma once

#include <grpcpp/client_context.h>

#include <atomic>
#include <thread>

namespace autouvm::cli {

// Blocks SIGINT in the calling thread (and so in the threads it starts later).
void BlockInterrupts();

class InterruptWatcher {
 public:
  // Starts a thread that waits for SIGINT and then calls context->TryCancel(), unless SIGINT is ignored
  // (SIG_IGN inherited from the parent). `context` must outlive the watcher.
  explicit InterruptWatcher(grpc::ClientContext* context);
  ~InterruptWatcher();

  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  // Stops watching (idempotent); returns whether SIGINT cancelled the call.
  bool Stop();

 private:
  void Watch();

  grpc::ClientContext* const context_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> interrupted_{false};
  std::thread thread_;
};

}  // namespace autouvm::cli
