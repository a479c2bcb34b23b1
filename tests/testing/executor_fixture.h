// What the executor's, the driver eviction's and the runtime monitor's tests share: a decode-like trace,
// a simulated H200 holding the trace's named tensors, the plan the profiler makes for a budget, and
// what crossed the link while a plan was followed.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/time/clock.h"
#include "profiler/analysis.h"
#include "profiler/profile_key.h"
#include "runtime/executor.h"
#include "runtime/sim/sim_backend.h"
#include "tests/testing/decode_like_trace.h"

namespace autouvm::runtime::testing_executor {

inline constexpr int64_t kMiB = 1 << 20;

inline AccessTrace DecodeLike(int layers, int64_t weight_mib, int rows = 1) {
  return ::autouvm::testing::DecodeLikeTrace(layers, weight_mib, rows);
}

struct Fixture {
  std::unique_ptr<sim::SimBackend> sim;
  std::unordered_map<std::string, TensorRange> ranges;
  std::vector<std::string> ids;  // allocation order

  explicit Fixture(const AccessTrace& t, const GpuSpec& spec = *FindGpuSpec("h200-pcie5"))
      : Fixture(t, sim::SimOptions{.spec = spec}) {}
  Fixture(const AccessTrace& t, const sim::SimOptions& options) {
    sim = *sim::SimBackend::Create(options);
    for (const TensorUse& n : t.named) {
      ranges[n.id] = {*sim->AllocateManaged(n.bytes), n.bytes};
      ids.push_back(n.id);
    }
  }
  void Launch(const OpRecord& op) {
    sim::SimKernel k{op.kernel, {}, op.flops};
    for (const auto* list : {&op.reads, &op.writes}) {
      for (const TensorUse& u : *list) {
        if (auto it = ranges.find(u.id); it != ranges.end()) k.ranges.push_back({it->second.addr, it->second.bytes});
      }
    }
    sim->Launch(k);
  }
  int64_t Resident(const std::string& id) { return *sim->ResidentBytes(ranges[id].addr, ranges[id].bytes); }
  int64_t AllResident() {
    int64_t sum = 0;
    for (const std::string& id : ids) sum += Resident(id);
    return sum;
  }
  // Runs `iterations` of `t` with `ex` at the op boundaries; after each op, what the simulated driver
  // holds (not only the executor's own count) stays within `budget` and, if `account`, equals that count.
  void RunWithin(const AccessTrace& t, Executor& ex, int iterations, int64_t budget, bool account = false) {
    for (int iteration = 0; iteration < iterations; ++iteration) {
      for (size_t i = 0; i < t.ops.size(); ++i) {
        ASSERT_TRUE(ex.BeforeOp(static_cast<int64_t>(i)).ok());
        Launch(t.ops[i]);
        ASSERT_TRUE(ex.AfterOp(static_cast<int64_t>(i)).ok());
        ASSERT_TRUE(sim->Synchronize().ok());
        ASSERT_LE(AllResident(), budget) << "iteration " << iteration << " op " << i;
        if (account) ASSERT_EQ(AllResident(), ex.resident_bytes()) << "iteration " << iteration << " op " << i;
      }
    }
  }
};

inline runtime::Plan PlanFor(const AccessTrace& t, int64_t budget, const GpuSpec& spec = *FindGpuSpec("h200-pcie5")) {
  const auto key = profiler::DecodeKey("test", 1, spec.name, budget, "autouvm");
  return profiler::Analyze(key, t, spec, absl::Now()).plan;
}

// What crossed the link while `ex` followed `iterations` of `t` within `budget` (Fixture::RunWithin).
inline UvmCounters MovedWhileFollowing(Fixture& f, const AccessTrace& t, Executor& ex, int iterations, int64_t budget) {
  const UvmCounters before = *f.sim->ReadCounters();
  f.RunWithin(t, ex, iterations, budget, /*account=*/true);
  EXPECT_TRUE(f.sim->Synchronize().ok());
  return *f.sim->ReadCounters() - before;
}

// The H200 on a platform that cannot stage weights (CUDA before 13): what is not pinned is read in place.
inline GpuSpec Unstaged() {
  GpuSpec s = *FindGpuSpec("h200-pcie5");
  s.uvm.staged_copy_bytes_per_s = 0;
  return s;
}

}  // namespace autouvm::runtime::testing_executor
