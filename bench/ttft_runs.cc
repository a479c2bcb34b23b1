#include "bench/ttft_runs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/bench_util.h"
#include "bench/step_times.h"
#include "profiler/planner.h"
#include "profiler/reuse.h"
#include "runtime/op_timer.h"
#include "runtime/sim/trace_replay.h"

namespace autouvm::bench {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

absl::Status RunTtft(DecodeModel& m, runtime::DeviceBackend* backend, runtime::Observer* observer,
                     const runtime::GpuSpec& spec, const TtftOptions& o, PinnedArena* arena) {
  using runtime::Location;
  using runtime::MigrationCause;
  using runtime::Stream;
  if (o.prompt_len > m.config.max_seq) {
    return absl::InvalidArgumentError(absl::StrCat("a prompt of ", o.prompt_len, " tokens does not fit the cache's ",
                                                   m.config.max_seq, " positions"));
  }
  if (o.repeats < 2) return absl::InvalidArgumentError("repeats: at least 2 (a cold prefill and a later one)");
  // The prefill recorded (warm), then the resident reference: its first token and best time of three.
  RETURN_IF_ERROR(MoveAllToHost(backend, m));
  for (const auto& [id, r] : m.named)
    RETURN_IF_ERROR(backend->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
  RETURN_IF_ERROR(backend->Synchronize());
  (void)Prefill(m, 1, o.prompt_len);
  observer->BeginIteration();
  const std::vector<int64_t> reference = Prefill(m, 1, o.prompt_len);
  const runtime::AccessTrace trace = observer->EndIteration();
  {
    // Do observed iterations run the recorded op sequence? (The policies' followers check it op by op.)
    struct KernelLog : runtime::OpSubscriber {
      std::vector<std::string> kernels;
      void OnOp(const runtime::OpEvent& op) override { kernels.emplace_back(op.kernel); }
    } log;
    observer->AddSubscriber(&log);
    observer->BeginIteration(runtime::IterationMode::kObserve);
    (void)Prefill(m, 1, o.prompt_len);
    observer->EndIteration();
    observer->RemoveSubscriber(&log);
    observer->BeginIteration();
    (void)Prefill(m, 1, o.prompt_len);
    const runtime::AccessTrace again = observer->EndIteration();
    for (size_t i = 0; i < std::max(log.kernels.size(), trace.ops.size()); ++i) {
      const std::string a = i < trace.ops.size() ? trace.ops[i].kernel : "(none)";
      const std::string b = i < log.kernels.size() ? log.kernels[i] : "(none)";
      const std::string c = i < again.ops.size() ? again.ops[i].kernel : "(none)";
      if (a != b || a != c) {
        std::printf(
            "prefill ops differ from op %zu: recorded %s, observed %s, recorded again %s (ops %zu / %zu / %zu)\n", i,
            a.c_str(), b.c_str(), c.c_str(), trace.ops.size(), log.kernels.size(), again.ops.size());
        for (size_t j = i >= 3 ? i - 3 : 0; j < i + 4 && j < trace.ops.size(); ++j) {
          std::printf("  recorded op %zu: %s (%s)\n", j, trace.ops[j].kernel.c_str(), trace.ops[j].op.c_str());
        }
        break;
      }
    }
  }
  double resident_s = 1e9;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = Clock::now();
    (void)Prefill(m, 1, o.prompt_len);
    resident_s = std::min(resident_s, Seconds(t0, Clock::now()));
  }
  const int64_t activations = [&]() -> int64_t {
    auto layout = runtime::sim::ReplayTrace(trace, spec, {.iterations = 1});
    return layout.ok() ? std::max<int64_t>(0, layout->footprint_bytes - m.named_bytes) : 0;
  }();
  const int64_t planner_room = PlannerRoom(trace);
  std::printf(
      "\nTime to first token, one prompt of %lld tokens (%zu ops; activations' room %.2f GiB): resident %.2f ms\n\n"
      "| model | prompt | factor | policy | budget GiB | first prefill ms (of it preparing) | TTFT ms | link floor ms "
      "| floor / TTFT | sim TTFT ms | sim / real | token = reference | resident peak GiB | H2D GiB (staged) | other "
      "arrivals GiB | fault groups | plan: pinned / remote / streamed GiB |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      (long long)o.prompt_len, trace.ops.size(), activations / kGiB, 1e3 * resident_s);
  std::fflush(stdout);

  for (const double factor : o.factors) {
    const auto budget = static_cast<int64_t>(static_cast<double>(m.named_bytes) / factor);
    const double floor_s = std::max(resident_s, static_cast<double>(m.named_bytes - budget) / kLinkBytesPerSecond);
    for (const std::string& policy : o.policies) {
      RETURN_IF_ERROR(MoveAllToHost(backend, m));
      std::unique_ptr<BudgetPolicy> managed;
      std::unique_ptr<ExplicitOffload> offload;
      runtime::OpSubscriber* follow = nullptr;
      const auto t_prepare = Clock::now();
      if (BudgetPolicy::Known(policy)) {
        // As in the decode runs: the planner gets the room it sets aside for activations on top.
        ASSIGN_OR_RETURN(managed, BudgetPolicy::Create(policy, backend, trace, m,
                                                       policy == "autouvm" ? budget + planner_room : budget, 1));
        follow = managed->subscriber();
      } else if (policy == "explicit") {
        if (arena == nullptr) return absl::InvalidArgumentError("explicit needs the pinned arena");
        ASSIGN_OR_RETURN(offload, ExplicitOffload::Create(m.module, m.config.n_layers, m.named, trace, budget, arena,
                                                          /*synchronous=*/false));
        for (const runtime::TensorRange& r : offload->resident_ranges()) {
          RETURN_IF_ERROR(backend->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
        }
        RETURN_IF_ERROR(backend->Synchronize());
        follow = offload.get();
      } else {
        return absl::InvalidArgumentError(absl::StrCat("policy ", policy, ": not one the TTFT runs know"));
      }
      const double prepare_s = Seconds(t_prepare, Clock::now());
      // The timer marks each op before the follower makes the compute stream wait for its copies: a
      // wait counts to the op it delays.
      runtime::OpTimer timer(backend, /*every=*/o.repeats - 1);  // times prefills 0 and repeats - 1
      std::vector<double> op_seconds;
      if (o.op_times) observer->AddSubscriber(&timer);
      if (follow != nullptr) observer->AddSubscriber(follow);
      const bool observed = follow != nullptr || o.op_times;
      std::vector<double> times;
      bool match = true;
      std::string note;
      ASSIGN_OR_RETURN(runtime::UvmCounters before_last, backend->ReadCounters());
      for (int k = 0; k < o.repeats; ++k) {
        if (k == o.repeats - 1) {
          RETURN_IF_ERROR(backend->Synchronize());
          ASSIGN_OR_RETURN(before_last, backend->ReadCounters());
        }
        const auto t0 = Clock::now();
        if (o.op_times) timer.BeginIteration();
        if (observed) observer->BeginIteration(runtime::IterationMode::kObserve);
        match = Prefill(m, 1, o.prompt_len) == reference && match;  // synchronizes (the token to the host)
        if (observed) observer->EndIteration();
        if (o.op_times) {
          ASSIGN_OR_RETURN(std::vector<double> t, timer.EndIteration());
          if (k == o.repeats - 1) op_seconds = std::move(t);
        }
        times.push_back(Seconds(t0, Clock::now()) + (k == 0 ? prepare_s : 0.0));
        if (managed != nullptr) {
          if (absl::Status why = managed->EndIteration(); !why.ok()) note = std::string(why.message());
        }
      }
      if (follow != nullptr) observer->RemoveSubscriber(follow);
      if (o.op_times) observer->RemoveSubscriber(&timer);
      RETURN_IF_ERROR(backend->Synchronize());
      ASSIGN_OR_RETURN(const runtime::UvmCounters after, backend->ReadCounters());
      const runtime::UvmCounters moved = after - before_last;
      const double ttft_s = Median(std::vector<double>(times.begin() + 1, times.end()));
      const runtime::Plan* plan = managed != nullptr && policy != "stock" ? &managed->plan() : nullptr;
      const double sim_s =
          managed != nullptr ? SimulatedSeconds(trace, spec, policy, plan, budget, activations, factor) : 0;
      const std::string plan_cell = plan != nullptr ? PlanCell(*plan, managed->staged_bytes())
                                    : offload
                                        ? absl::StrFormat("copied per prefill: %.2f", offload->offloaded_bytes() / kGiB)
                                        : "-";
      const int64_t peak = managed ? managed->peak_resident_bytes() : offload ? offload->accounted() : 0;
      std::printf(
          "| %s | %lld | %.2f | %s | %.2f | %.1f (%.1f) | %.2f | %.2f | %.0f%% | %.2f | %.2f | %s | %.2f | "
          "%.2f (%.2f) | %.2f | %lld | %s |%s\n",
          m.config.name.c_str(), (long long)o.prompt_len, factor, policy.c_str(), budget / kGiB, 1e3 * times.front(),
          1e3 * prepare_s, 1e3 * ttft_s, 1e3 * floor_s, 100 * floor_s / ttft_s, 1e3 * sim_s, sim_s / ttft_s,
          match ? "yes" : "NO", peak / kGiB, moved.h2d_total() / kGiB, moved.h2d(MigrationCause::kStaged) / kGiB,
          (moved.h2d(MigrationCause::kFault) + moved.h2d(MigrationCause::kDriverPrefetch)) / kGiB,
          (long long)moved.gpu_fault_groups, plan_cell.c_str(), note.empty() ? "" : (" " + note).c_str());
      if (!op_seconds.empty()) {
        // Weights that cross the link during the prefill: the plan's streamed and in-place ones, or
        // explicit offloading's copied layers.
        std::vector<std::string> crossing;
        if (plan != nullptr) {
          crossing.assign(plan->remote.begin(), plan->remote.end());
          for (const runtime::Prefetch& f : plan->prefetches) {
            crossing.insert(crossing.end(), f.tensors.begin(), f.tensors.end());
          }
        } else if (offload) {
          crossing = offload->offloaded_ids();
        }
        const runtime::TimeSplit split = runtime::SplitTime(trace, op_seconds, crossing);
        PrintOpSplit(policy, "last prefill", "weights that cross the link", split, offload.get());
      }
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace autouvm::bench
