// Executor, its per-pass counts and times for the daemon's debug line (TakeFetchCounts).
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "runtime/executor.h"

namespace autouvm::runtime {

Executor::FetchCounts Executor::TakeFetchCounts() {
  FetchCounts out = std::exchange(fetch_counts_, FetchCounts{});
  out.in_place_bytes = in_place_bytes_;
  for (size_t t : remote_) out.in_place_bytes += ranges_list_[t].bytes;
  std::vector<std::array<EventId, 4>> timed = std::exchange(timed_fetches_, {});
  const EventId from = std::exchange(pass_from_, -1), to = std::exchange(pass_to_, -1);
  if (!time_copies_) return out;
  // The pass has run (its logits were read back), so every event here has completed: nothing waits.
  auto elapsed = [&](EventId a, EventId b) {
    if (a < 0 || b < 0) return -1.0;
    absl::StatusOr<double> s = backend_->ElapsedSeconds(a, b);
    return s.ok() ? *s : -1.0;
  };
  out.pass_s = elapsed(from, to);
  if (timed.empty()) return out;
  out.copying_s = out.waited_s = 0;
  for (const auto& e : timed) {
    out.copying_s += std::max(0.0, elapsed(e[0], e[1]));
    out.waited_s += std::max(0.0, elapsed(e[2], e[3]));
  }
  out.copy_span_s = elapsed(timed.front()[0], timed.back()[1]);
  return out;
}

}  // namespace autouvm::runtime
