// SIGINT to ClientContext::TryCancel; see interrupt_watcher.h.
#include "clients/interrupt_watcher.h"

#include <pthread.h>
#include <signal.h>

namespace autouvm::cli {

// Note [Cancelling on SIGINT]:
// A signal handler may not call TryCancel (it takes locks), so SIGINT stays blocked in every thread and
// a watcher thread takes it synchronously with sigwait(). On SIGINT it cancels the call: the server sees
// a cancelled RPC, the caller's Read()/Finish() return CANCELLED, and the command exits 130. To stop the
// watcher, the caller sets stopping_ and sends SIGINT to the watcher thread alone; the watcher sees
// stopping_ and returns without cancelling. A Ctrl-C that arrives while no watcher runs stays pending
// and cancels the next call at once (or is dropped at exit).
// If SIGINT was ignored when the process started (a background job of a non-interactive shell), no
// watcher runs, so it stays ignored as the parent asked; Linux would otherwise queue it, since blocked
// signals are never discarded as ignored.

namespace {

sigset_t InterruptSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  return set;
}

bool InterruptsIgnored() {
  struct sigaction action = {};
  sigaction(SIGINT, nullptr, &action);  // deliberately unchecked: only reads, SIGINT is a valid signal
  return action.sa_handler == SIG_IGN;
}

}  // namespace

void BlockInterrupts() {
  const sigset_t set = InterruptSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // deliberately unchecked: fails only for a bad `how`
}

InterruptWatcher::InterruptWatcher(grpc::ClientContext* context) : context_(context) {
  if (!InterruptsIgnored()) thread_ = std::thread([this] { Watch(); });
}

InterruptWatcher::~InterruptWatcher() { Stop(); }

bool InterruptWatcher::Stop() {
  if (thread_.joinable()) {
    stopping_.store(true);
    // Unchecked: the thread is not joined yet, so its handle is valid even if it has already returned.
    if (!interrupted_.load()) pthread_kill(thread_.native_handle(), SIGINT);
    thread_.join();
  }
  return interrupted_.load();
}

void InterruptWatcher::Watch() {
  const sigset_t set = InterruptSet();
  int signal = 0;
  while (sigwait(&set, &signal) == 0) {
    if (stopping_.load()) return;
    if (signal == SIGINT) {
      interrupted_.store(true);
      context_->TryCancel();
      return;
    }
  }
}

}  // namespace autouvm::cli
