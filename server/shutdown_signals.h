// ShutdownSignals: SIGTERM and SIGINT as events the daemon's main thread waits for, whichever thread
// the kernel delivers them to.
//
//   ASSIGN_OR_RETURN(auto signals, ShutdownSignals::Install());   // before any thread starts
//   int sig = signals->Wait();                                    // the first: drain
//   signals->Wake();                               // from another thread (the drain is over): Wait returns 0
//
// Note [Shutdown signals]: blocking the signals and sigwait()ing for them is not enough. Threads that
// libraries start before main (OpenBLAS' pool) have them unblocked, and while the main thread was busy
// draining a second SIGTERM went to one of those, where abseil's failure handler took it for a crash:
// a stack dump and exit 143 with every stream cut. A handler for both signals, installed over
// abseil's, writes the signal's number to a pipe (async-signal-safe) on whatever thread runs it.
//
// Thread-safety: Install once per process; Wait on one thread; Wake from any thread.
#pragma once

#include <memory>

#include "absl/status/statusor.h"

namespace autouvm::server {

class ShutdownSignals {
 public:
  // FAILED_PRECONDITION if the pipe or the handlers cannot be set up, or if installed already.
  static absl::StatusOr<std::unique_ptr<ShutdownSignals>> Install();
  ~ShutdownSignals();  // restores the default actions

  // The next signal (SIGTERM or SIGINT), or 0 after Wake; in the order they came.
  int Wait();
  void Wake();

 private:
  ShutdownSignals(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  const int read_fd_;
  const int write_fd_;
};

// "SIGTERM", "SIGINT", or "a signal" for any other.
const char* SignalName(int sig);

}  // namespace autouvm::server
