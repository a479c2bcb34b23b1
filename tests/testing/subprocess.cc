#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/testing/temp_dir.h"

extern char** environ;

namespace autouvm::testing {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Polls waitpid; the exit code, or -1 on timeout or death by a signal.
int WaitExit(pid_t* pid, double timeout_s) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < until) {
    int status = 0;
    const pid_t r = waitpid(*pid, &status, WNOHANG);
    if (r == *pid) {
      *pid = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

int RunCommand(const std::vector<std::string>& argv, std::string* out, std::string* err, double timeout_s) {
  TempDir tmp;
  pid_t pid = Spawn(argv, tmp.Sub("out"), tmp.Sub("err"));
  if (pid <= 0) return -1;
  int code = WaitExit(&pid, timeout_s);
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  if (out) *out = ReadFile(tmp.Sub("out"));
  if (err) *err = ReadFile(tmp.Sub("err"));
  return code;
}

}  // namespace autouvm::testing
