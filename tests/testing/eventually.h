// Eventually: polls a condition until it holds or a timeout passes — for tests that wait on another
// process (a daemon's background profiling, a Prometheus scrape).
//
//   ASSERT_TRUE(Eventually([&] { return Ready(d); })) << d.Log();
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace autouvm::testing {

// True as soon as `done` returns true; false if it still does not after `seconds` (checked once more).
inline bool Eventually(const std::function<bool()>& done, double seconds = 60,
                       std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

}  // namespace autouvm::testing
