// Logits compared to a tolerance: the largest absolute difference over the largest magnitude of `b`.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace autouvm::testing {

inline double MaxRelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

}  // namespace autouvm::testing
