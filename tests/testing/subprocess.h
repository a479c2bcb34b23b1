// Child processes for tests: spawn with output to files, wait with a timeout, run a command to the end.
// Not thread-safe with respect to the same pid; otherwise plain functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace autouvm::testing {

// The whole file, or "" if it cannot be read.
std::string ReadFile(const std::string& path);
// Starts argv[0] (a path) with stdin from /dev/null and stdout/stderr into the given files; -1 on failure.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path);
// Polls for the exit of *pid (then sets it to -1); the exit code, or -1 on timeout or death by a signal.
int WaitExit(pid_t* pid, double timeout_s);
// Runs a command line, capturing stdout and stderr (up to `timeout_s`); returns the exit code.
int RunCommand(const std::vector<std::string>& argv, std::string* out, std::string* err, double timeout_s = 60);

}  // namespace autouvm::testing
