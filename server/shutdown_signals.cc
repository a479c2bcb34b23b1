#include "server/shutdown_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace autouvm::server {
namespace {

std::atomic<int> g_write_fd{-1};

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Deliberately unchecked: a full pipe already holds a signal the main thread has yet to read.
  const int fd = g_write_fd.load();
  if (fd >= 0) (void)!write(fd, &byte, 1);
  errno = saved;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShutdownSignals>> ShutdownSignals::Install() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("shutdown signals: pipe: ", strerror(errno)));
  }
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, fds[1])) {
    close(fds[0]);
    close(fds[1]);
    return absl::FailedPreconditionError("shutdown signals: installed already");
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT}) {
    if (sigaction(sig, &action, nullptr) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("shutdown signals: sigaction: ", strerror(errno)));
    }
  }
  // Unblocked in this thread (threads started from here inherit it): the handler runs wherever.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  return std::unique_ptr<ShutdownSignals>(new ShutdownSignals(fds[0], fds[1]));
}

ShutdownSignals::~ShutdownSignals() {
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  g_write_fd.store(-1);
  close(read_fd_);
  close(write_fd_);
}

int ShutdownSignals::Wait() {
  pollfd p{read_fd_, POLLIN, 0};
  for (;;) {
    // Deliberately unchecked: EINTR (a signal handled on this thread) and spurious wake-ups poll again.
    (void)poll(&p, 1, -1);
    unsigned char byte = 0;
    if (read(read_fd_, &byte, 1) == 1) return static_cast<int>(byte);
  }
}

void ShutdownSignals::Wake() {
  const unsigned char zero = 0;
  (void)!write(write_fd_, &zero, 1);  // deliberately unchecked: a full pipe wakes the reader already
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

}  // namespace autouvm::server
