#include "profiler/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/match.h"
#include "profiler/pinned_partition.h"
#include "profiler/reuse.h"
#include "runtime/sim/trace_replay.h"

namespace autouvm::profiler {

// Note [Pinned partition]: every iteration touches the same tensors in the same order, so the access
// sequence is a loop. When the loop's bytes exceed the device, LRU (and the driver's FIFO) evicts each
// tensor just before it is needed again and moves everything every iteration; what Belady's optimal
// replacement does on a loop is keep a fixed part resident and stream the rest. The plan pins, within
// the budget, the tensors that would cost most to stream per byte: those that cannot be read in place
// (Note [Remote tensors]) first, then those fetched more than once per iteration (uses further apart
// than the window holds), then by first use, so the start of the iteration, where no look-ahead can
// hide a fetch, is resident. The rest is read in place where it can be, and otherwise streamed
// through a window set aside from the budget — twice the streamed bytes of the widest op, so one op's
// tensors arrive while the previous op's are used. Each streamed tensor is fetched for its op, issued as early as the
// window allows: as far back (wrapping into the previous iteration) as the fetches queued up to it still fit. Only
// persistent tensors (weights, caches, inputs) are placed: activations come and go within an iteration wherever the
// allocator puts them, so the budget first sets aside the most of them alive at once (summing every activation instead
// made a model that fits look 30% too big at batch 16).
int64_t PeakActivationBytes(const runtime::AccessTrace& trace, const std::vector<autouvm::v1::TensorReuse>& reuse) {
  const int64_t n = static_cast<int64_t>(trace.ops.size());
  const std::vector<std::vector<int>> touched = TensorsPerOp(trace, reuse);
  std::vector<int64_t> last_use(reuse.size(), -1), live_delta(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int t : touched[static_cast<size_t>(i)]) last_use[static_cast<size_t>(t)] = i;
  }
  for (size_t t = 0; t < reuse.size(); ++t) {
    if (!IsTransient(reuse[t].id()) || last_use[t] < 0) continue;
    live_delta[static_cast<size_t>(reuse[t].first_use())] += reuse[t].bytes();
    live_delta[static_cast<size_t>(last_use[t]) + 1] -= reuse[t].bytes();
  }
  int64_t live = 0, peak = 0;
  for (int64_t i = 0; i < n; ++i) peak = std::max(peak, live += live_delta[static_cast<size_t>(i)]);
  return peak;
}

// Note [Staged or in place]: on a GPU that can stage weights, an unpinned weight read once per
// iteration can be read in place (its op runs at the remote rate, 47.9 GB/s on the H200, and everything
// after it waits) or staged (copied on the copy stream while other ops run, but through a window that
// the pinned partition gives up, populated before and discarded after: 39-40 GB/s pipelined on the
// H200). Staging wins where the step has enough other work to hide the copies behind — a prefill's
// matrix products, whose weights cannot be read in place at all (kMaxRemoteFlopsPerByte) — and reading
// in place where it has little (a decode step: the 7B's staged steps took 201 ms at factor 2.0 against
// 164-167 read in place, bench/results/2026-11-30-staged-ttft-h200.md). The planner makes both and
// keeps the one the simulator's replay of the step finds faster (EstimateStepSeconds where it cannot
// replay), among staged plans of several window widths too (Note [The window's widest weight]).
// EstimateStepSeconds alone took every copy on the copy stream for hidden behind the ops, and chose for
// the 7B at factor 1.0 a staged plan that streamed 0.71 GiB through its window: 34.6 ms a step on the
// H200 against 18.4 resident (the replay said 32.7), where the plan reading 0.24 GiB in place had
// measured 21.7 (bench/results/2026-11-30-staged-ttft-h200.md). A staged plan streams through a device
// buffer of its window (Plan.device_buffer, Note [Streaming through a device buffer] in
// runtime/device_backend.h): copies at the link's rate with nothing populated or discarded, which the
// estimate assumes; an executor that cannot bind the model's tensors stages into their own ranges
// instead.
runtime::Plan MakePlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                       const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes,
                       const PlanOptions& options) {
  const bool stage = options.spec != nullptr && options.spec->uvm.staged_copy_bytes_per_s > 0;
  const double coded = stage && options.spec->decode_bytes_per_s > 0 ? options.coded_ratio : 0;
  runtime::Plan in_place = PartitionPlan(key, trace, reuse, budget_bytes, stage, /*read_weights_in_place=*/true);
  if (!stage) return in_place;
  // Where no weight could be read in place, the plan that may is the staged one already.
  const bool any_in_place = !in_place.remote.empty();
  std::vector<runtime::Plan> plans = {std::move(in_place)};
  if (any_in_place) {
    plans.push_back(PartitionPlan(key, trace, reuse, budget_bytes, stage, /*read_weights_in_place=*/false));
  }
  if (!plans.back().staged) return std::move(plans.front());
  // Note [The window's widest weight]: a staged plan's window is twice the widest op's streamed bytes,
  // and everything in it crosses the link each iteration beyond what the budget forces (pinned bytes
  // are the room less the window). One large weight streamed (the 7B's 250 MiB embedding or output
  // projection among 86 MiB ones) sets a window of 500 MiB: 0.49 GiB more per step, 9 ms at the
  // link's rate. Pinning the largest weights first narrows the window to the next size down, but a
  // narrower window also runs fewer copies ahead of the compute; the simulator's replay decides
  // between the widths below (the two next sizes down from the widest streamed weight).
  {
    std::unordered_map<std::string, int64_t> bytes;
    for (const autouvm::v1::TensorReuse& r : reuse) bytes[r.id()] = r.bytes();
    std::set<int64_t, std::greater<>> sizes;
    for (const runtime::Prefetch& p : plans.back().prefetches) {
      for (const std::string& id : p.tensors) sizes.insert(bytes[id]);
    }
    auto next = sizes.begin();
    for (int k = 0; k < 2 && next != sizes.end() && std::next(next) != sizes.end(); ++k) {
      ++next;
      plans.push_back(PartitionPlan(key, trace, reuse, budget_bytes, stage, /*read_weights_in_place=*/false, *next));
    }
  }
  if (plans.size() == 1) return std::move(plans.front());
  // The simulator's steady iteration under each where it can replay them all, else the estimate.
  auto simulated = [&](const runtime::Plan& plan) {
    runtime::sim::ReplayOptions o{.policy = "autouvm",
                                  .make_plan = [&plan](int64_t) { return plan; },
                                  .device_bytes = budget_bytes,
                                  .iterations = 2,
                                  .coded_ratio = coded};
    auto replay = runtime::sim::ReplayTrace(trace, *options.spec, o);
    return replay.ok() ? replay->iterations.back().seconds : -1.0;
  };
  std::vector<double> seconds;
  for (const runtime::Plan& plan : plans) seconds.push_back(simulated(plan));
  if (*std::min_element(seconds.begin(), seconds.end()) <= 0) {
    for (size_t k = 0; k < plans.size(); ++k) seconds[k] = EstimateStepSeconds(plans[k], trace, *options.spec, coded);
  }
  const size_t best = static_cast<size_t>(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
  return std::move(plans[best]);
}

double EstimateStepSeconds(const runtime::Plan& plan, const runtime::AccessTrace& trace, const runtime::GpuSpec& spec,
                           double coded_ratio) {
  const std::unordered_set<std::string> remote(plan.remote.begin(), plan.remote.end());
  double ops = 0, remote_s = 0;
  const double remote_rate =
      spec.uvm.remote_matrix_bytes_per_s > 0 ? spec.uvm.remote_matrix_bytes_per_s : spec.uvm.remote_bytes_per_s;
  for (const runtime::OpRecord& op : trace.ops) {
    double local = 0;
    for (const auto* list : {&op.reads, &op.writes}) {
      for (const runtime::TensorUse& u : *list) {
        if (remote.count(u.id)) {
          remote_s += static_cast<double>(u.bytes) / remote_rate;
        } else {
          local += static_cast<double>(u.bytes);
        }
      }
    }
    ops += std::max({spec.framework_op_s, op.flops / spec.peak_flops, local / spec.hbm_bytes_per_s});
  }
  constexpr double kBlock = 2 << 20;
  double copies = 0, discards = 0, last_decode = 0;
  const bool coded = coded_ratio > 0 && spec.decode_bytes_per_s > 0;
  std::unordered_map<std::string, int64_t> named;
  if (coded) {
    for (const runtime::TensorUse& t : trace.named) named[t.id] = t.bytes;
  }
  for (const runtime::Prefetch& f : plan.prefetches) {
    const double blocks = std::ceil(static_cast<double>(f.bytes) / kBlock);
    if (plan.staged && plan.device_buffer && coded) {
      // Each weight at its measured coded size where the trace has it (Note [Coded sizes in the trace]),
      // the rest at the ratio; decoded only where some of it crossed coded.
      int64_t measured = 0, measured_link = 0;
      for (const std::string& id : f.tensors) {
        auto it = named.find(id);
        if (it == named.end() || !trace.coded_bytes.count(id)) continue;
        measured += it->second;
        measured_link += runtime::CodedLinkBytes(trace, id, it->second, coded_ratio);
      }
      const double rest = static_cast<double>(std::max<int64_t>(0, f.bytes - measured));
      const double link = static_cast<double>(measured_link) + coded_ratio * rest;
      copies += link / spec.link_bytes_per_s;
      last_decode = link < static_cast<double>(f.bytes) ? static_cast<double>(f.bytes) / spec.decode_bytes_per_s : 0;
    } else if (plan.staged && plan.device_buffer) {
      copies += static_cast<double>(f.bytes) / spec.link_bytes_per_s;
    } else if (plan.staged) {
      copies += static_cast<double>(f.bytes) / spec.uvm.staged_copy_bytes_per_s + blocks * spec.uvm.populate_block_s;
      discards += blocks * spec.uvm.discard_block_s;
    } else {
      copies += static_cast<double>(f.bytes) / spec.link_bytes_per_s;
    }
  }
  copies += last_decode;  // the decodes run beside the copies, but for the last one
  return std::max(ops + remote_s + discards, copies + discards);  // copies in flight lose the discards' time
}

// Note [The paper's plan]: AutoUVM as published knows each op's roofline class and each tensor's reuse
// but not the budget, and leaves eviction to the driver. It prefetches, on a copy stream, the persistent
// tensors of the ops the roofline calls link-bound (CGI-bound: the roofline gate; without it, of every
// op), issued as many ops ahead as the ops in between take, by their roofline (their own copies
// included), while the copy crosses the link — a decode step's weight one op ahead;
// it advises the tensors reused within a window of ops to stay on the device (affinity pinning:
// preferred location device), which the driver then avoids evicting; everything else faults.
runtime::Plan MakePaperPlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                            const std::vector<autouvm::v1::TensorReuse>& reuse,
                            const autouvm::v1::Profile& stock_classes, const PaperOptions& options) {
  runtime::Plan plan;
  plan.budget_bytes = key.device_budget_bytes();
  plan.driver_evicts = true;
  const int64_t n = static_cast<int64_t>(trace.ops.size());
  const std::vector<std::vector<int>> touched = TensorsPerOp(trace, reuse);
  std::vector<bool> affinity(reuse.size(), false);
  if (options.affinity_pinning) {
    for (size_t t = 0; t < reuse.size(); ++t) {
      if (IsTransient(reuse[t].id()) || reuse[t].uses() < 2 || reuse[t].max_gap_ops() > options.affinity_window_ops) {
        continue;
      }
      affinity[t] = true;
      plan.affinity.push_back(reuse[t].id());
    }
  }
  auto op_seconds = [&](int64_t i) {  // the op's time by its roofline, its own link time included
    if (i >= stock_classes.ops_size()) return 0.0;
    const autouvm::v1::OpClass& c = stock_classes.ops(static_cast<int>(i));
    return std::max({c.compute_seconds(), c.hbm_seconds(), c.link_seconds()});
  };
  for (int64_t i = 0; i < n; ++i) {
    if (options.roofline_gate && i < stock_classes.ops_size() &&
        stock_classes.ops(static_cast<int>(i)).bound() != autouvm::v1::BOUND_LINK) {
      continue;
    }
    runtime::Prefetch f;
    for (int t : touched[static_cast<size_t>(i)]) {
      const auto u = static_cast<size_t>(t);
      if (IsTransient(reuse[u].id()) || affinity[u]) continue;
      f.tensors.push_back(reuse[u].id());
      f.bytes += reuse[u].bytes();
    }
    if (f.tensors.empty()) continue;
    f.for_op = i;
    // Look ahead as far as the ops in between take to compute while this copy crosses the link.
    const double copy_s = i < stock_classes.ops_size() ? stock_classes.ops(static_cast<int>(i)).link_seconds() : 0;
    double covered = 0;
    int64_t issue = i;
    for (int64_t step = 1; step < n && covered < copy_s; ++step) {
      issue = ((i - step) % n + n) % n;
      covered += op_seconds(issue);
    }
    f.issue_at_op = issue;
    plan.streamed_bytes += f.bytes;
    plan.prefetches.push_back(std::move(f));
  }
  return plan;
}

bool IsTransient(const std::string& id) { return absl::StartsWith(id, "act:"); }

Residency PinnedResidency(const runtime::Plan& plan) {
  auto ids = std::make_shared<std::unordered_set<std::string>>(plan.pinned.begin(), plan.pinned.end());
  ids->insert(plan.affinity.begin(), plan.affinity.end());
  return [ids](const std::string& id) { return IsTransient(id) || ids->count(id) > 0; };
}

}  // namespace autouvm::profiler
