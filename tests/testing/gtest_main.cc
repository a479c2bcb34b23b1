// main() for every test binary: GoogleTest, plus a crash handler that prints the raw stack (library and
// offset of each frame, which addr2line or c++filt resolve) before the process dies, so that a crash in
// ctest's log says where it happened rather than a bare "SegFault".
#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

namespace {

void PrintStackAndDie(int sig) {
  static const char kHeader[] = "\n*** fatal signal; stack:\n";
  (void)!write(STDERR_FILENO, kHeader, sizeof(kHeader) - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, PrintStackAndDie);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
