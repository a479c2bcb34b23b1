// Plan: what a runtime::Executor follows for one (model, shape) under a device budget — the tensors it
// keeps resident, those it streams and when each fetch is issued, those left in host memory and read
// there. The profiler's planner makes it (profiler/planner.h); the executor, the runtime monitor and
// the simulator's replay read it. Its protobuf form (autouvm.v1.Plan) is only what the profile store
// keeps and the Admin API returns: runtime/plan_proto.h converts at those boundaries, and nothing
// inside the runtime sees the message.
//
// Plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace autouvm::runtime {

// Fetch `tensors` (not pinned) for op `for_op`, issued when op `issue_at_op` starts. issue_at_op >
// for_op means the fetch is issued during the previous iteration (the sequence is cyclic).
struct Prefetch {
  int64_t for_op = 0;
  int64_t issue_at_op = 0;
  std::vector<std::string> tensors;
  int64_t bytes = 0;

  bool operator==(const Prefetch&) const = default;
};

// The most FLOPs per byte of a tensor at which its one reader may read it in place from host memory:
// at bf16, a product with up to 32 rows reads each weight tile once (Note [Remote tensors],
// profiler/planner.cc). The planner's remote tensors and the executor's displaced pins keep to it.
inline constexpr double kMaxRemoteFlopsPerByte = 32.0;

struct Plan {
  int64_t budget_bytes = 0;         // the device budget planned for
  int64_t window_bytes = 0;         // of it, set aside for tensors streamed through
  std::vector<std::string> pinned;  // tensor ids kept resident across iterations, by first use
  int64_t pinned_bytes = 0;
  int64_t streamed_bytes = 0;  // bytes fetched over the link per iteration under this plan
  std::vector<Prefetch> prefetches;
  // Tensors left in host memory and read there by the GPU over the link (zero-copy): read by one op per
  // iteration, at low arithmetic intensity, never written (Note [Remote tensors], profiler/planner.cc).
  std::vector<std::string> remote;
  int64_t remote_bytes = 0;
  // A `paper` plan: the executor never evicts (the driver does) and advises the `affinity` tensors to
  // stay on the device instead of pinning them.
  bool driver_evicts = false;
  std::vector<std::string> affinity;
  // Streamed weights are staged: kept as host copies outside managed memory, copied in for their op and
  // discarded after it (Note [Staged streaming], runtime/device_backend.h).
  bool staged = false;
  // Staged weights are copied into one device buffer of window_bytes, in turn, and the model's tensor
  // points there for its ops (Note [Streaming through a device buffer], runtime/device_backend.h).
  // Needs `staged`.
  bool device_buffer = false;

  bool operator==(const Plan&) const = default;
};

}  // namespace autouvm::runtime
