// What the benchmark programs share: units, the link's measured rate, a median, a duration, and dying
// with a message on an error (a benchmark that cannot do what it was asked prints why and exits 1).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace autouvm::bench {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kLinkBytesPerSecond = 55.4e9;  // pinned copies, ../shared/gpu/NOTES.md

// The middle element (the upper one of an even count); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The largest element; 0 for none.
inline double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

inline double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Prints "<program>: <what>" to stderr and exits 1. Set the program's name with BenchName.
inline std::string& BenchName() {
  static std::string name = "bench";
  return name;
}
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", BenchName().c_str(), what.c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(what + ": " + std::string(v.status().message()));
  return std::move(v).value();
}

inline void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(what + ": " + std::string(s.message()));
}

}  // namespace autouvm::bench
