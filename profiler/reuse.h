// Reuse of each tensor across the cyclic sequence of iterations: how often an iteration touches it,
// the longest gap between two uses (wrapping into the next iteration), and the stack distance — the
// distinct bytes of other tensors touched in that gap, which is what a cache of a given size must hold
// besides it for the tensor to still be there at its next use (Belady). The planner's input.
//
//   std::vector<autouvm::v1::TensorReuse> r = ReuseDistances(trace);
//
// A pure function; thread-safe.
#pragma once

#include <vector>

#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"

namespace autouvm::profiler {

// One entry per distinct tensor, in order of first use.
std::vector<autouvm::v1::TensorReuse> ReuseDistances(const runtime::AccessTrace& trace);

// Per op, the distinct tensors it touches (reads, then writes), as indices into `tensors`; tensors not
// listed there are left out.
std::vector<std::vector<int>> TensorsPerOp(const runtime::AccessTrace& trace,
                                           const std::vector<autouvm::v1::TensorReuse>& tensors);

}  // namespace autouvm::profiler
