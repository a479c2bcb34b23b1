// PartitionPlan: the planner's pinned partition of one iteration (Note [Pinned partition],
// profiler/planner.cc) — which persistent tensors stay resident within the budget, which are read in
// place from host memory, and which stream through a window, fetched when. MakePlan (planner.h) makes
// it once or several times (staged or read in place, several window widths) and keeps the fastest.
//
// Private to the profiler. A pure function; safe from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"
#include "runtime/plan.h"

namespace autouvm::profiler {

// `stage`: the GPU can stage weights (streamed ones then go through a device buffer); `read_weights_in_place`:
// weights may be read in place (Note [Staged or in place]); `largest_streamed` (0: no limit): weights larger
// than this are pinned first, as far as the room allows (Note [The window's widest weight]).
runtime::Plan PartitionPlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                            const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes, bool stage,
                            bool read_weights_in_place, int64_t largest_streamed = 0);

}  // namespace autouvm::profiler
