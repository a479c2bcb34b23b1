// AUTOUVM_CHECK: invariants of our own code. Bad input from a client, a file or the environment is an
// error returned (absl::Status); a broken invariant is a bug, and the process stops at once, loudly,
// rather than serve from a state it was never meant to reach.
//
//   AUTOUVM_CHECK(free_slots_.size() <= max_batch) << "slot list grew to " << free_slots_.size();
//   AUTOUVM_CHECK_EQ(active, expected);
//
// A failure logs (level fatal) "CHECK failed: <condition> at <file>:<line>: <message>" and aborts.
// Always on, in every build type. (Not CHECK: libtorch's c10 defines one of its own.)
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace autouvm::base {

class CheckFailure {
 public:
  CheckFailure(const char* condition, const char* file, int line);
  [[noreturn]] ~CheckFailure();
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace autouvm::base

#define AUTOUVM_CHECK(condition) \
  while (__builtin_expect(!(condition), 0)) ::autouvm::base::CheckFailure(#condition, __FILE__, __LINE__)
#define AUTOUVM_CHECK_OP(a, op, b)                                          \
  for (const auto [autouvm_check_a, autouvm_check_b] = std::pair((a), (b)); \
       __builtin_expect(!(autouvm_check_a op autouvm_check_b), 0);)         \
  ::autouvm::base::CheckFailure(#a " " #op " " #b, __FILE__, __LINE__)      \
      << "(" << autouvm_check_a << " vs " << autouvm_check_b << ") "
#define AUTOUVM_CHECK_EQ(a, b) AUTOUVM_CHECK_OP(a, ==, b)
#define AUTOUVM_CHECK_LE(a, b) AUTOUVM_CHECK_OP(a, <=, b)
#define AUTOUVM_CHECK_LT(a, b) AUTOUVM_CHECK_OP(a, <, b)
#define AUTOUVM_CHECK_GE(a, b) AUTOUVM_CHECK_OP(a, >=, b)
