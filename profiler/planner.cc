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

namespace {

constexpr int64_t kBlockBytes = int64_t{2} << 20;  // a VA block

// `largest_streamed` (0: no limit): weights larger than this are pinned first, as far as the room allows
// (Note [The window's widest weight]).
autouvm::v1::Plan PartitionPlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                                const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes, bool stage,
                                bool read_weights_in_place, int64_t largest_streamed = 0) {
  autouvm::v1::Plan plan;
  *plan.mutable_key() = key;
  plan.set_budget_bytes(budget_bytes);
  if (key.policy() == "stock") return plan;

  const int64_t n = static_cast<int64_t>(trace.ops.size());
  int64_t total = 0;
  std::vector<bool> transient(reuse.size(), false);
  for (size_t t = 0; t < reuse.size(); ++t) {
    transient[t] = IsTransient(reuse[t].id());
    if (!transient[t]) total += reuse[t].bytes();
  }
  const std::vector<std::vector<int>> touched = TensorsPerOp(trace, reuse);
  // Activations live from their first use to their last and are placed anew by the allocator: the plan
  // leaves room for the most of them alive at once and places only the persistent tensors.
  const int64_t room_total = std::max<int64_t>(0, budget_bytes - PeakActivationBytes(trace, reuse));
  std::vector<bool> pinned(reuse.size(), false), remote(reuse.size(), false);
  if (total <= room_total) {
    for (size_t t = 0; t < reuse.size(); ++t) pinned[t] = !transient[t];
  } else {
    // Note [Remote tensors]: a tensor one op reads once per iteration, at an arithmetic intensity low
    // enough that a tiled kernel reads it once (a decode step's weights), costs the same link time read
    // in place from host memory as migrated (../shared/gpu/NOTES.md: 51 GB/s remote reads against 50
    // for large prefetches), and read in place it takes no device memory, no window and no eviction —
    // which on the real driver is the expensive part (a read-mostly copy is not dropped by a prefetch
    // to the host). Such tensors that are not pinned are read remotely; the others are streamed.
    // Where weights can be staged, the plan that streams them instead is made too (Note [Staged or in
    // place]): a staged copy runs on a copy engine beside the compute and the host's op launches (39-40
    // GB/s pipelined on the H200, populate and discard included), while a remote read holds its op (and
    // every op after it) for its whole transfer at 47.9 GB/s.
    std::vector<int> users(reuse.size(), 0), user(reuse.size(), -1);
    for (int64_t i = 0; i < n; ++i) {
      for (int t : touched[static_cast<size_t>(i)]) {
        ++users[static_cast<size_t>(t)];
        user[static_cast<size_t>(t)] = static_cast<int>(i);
      }
    }
    std::unordered_set<std::string> written;
    for (const runtime::OpRecord& op : trace.ops) {
      for (const runtime::TensorUse& w : op.writes) written.insert(w.id);
    }
    std::vector<bool> remote_ok(reuse.size(), false);
    for (size_t t = 0; t < reuse.size(); ++t) {
      if (transient[t] || users[t] != 1 || written.count(reuse[t].id()) || reuse[t].bytes() <= 0) continue;
      if (!read_weights_in_place && runtime::IsWeightId(reuse[t].id())) continue;
      const double intensity = trace.ops[static_cast<size_t>(user[t])].flops / static_cast<double>(reuse[t].bytes());
      remote_ok[t] = intensity <= kMaxRemoteFlopsPerByte;
    }
    // Pins within `room`: tensors that could not be read remotely first (streaming them costs a window
    // and evictions), then those fetched most often per iteration, then by first use — or, in a staged
    // plan, spread over the iteration (Note [Pinned spread over the iteration]).
    auto pin = [&](int64_t room, const std::vector<int>& fetches) {
      std::vector<int> order(reuse.size());
      for (size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
        if (remote_ok[ua] != remote_ok[ub]) return !remote_ok[ua];
        if (fetches[ua] != fetches[ub]) return fetches[ua] > fetches[ub];
        return reuse[ua].first_use() < reuse[ub].first_use();
      });
      std::fill(pinned.begin(), pinned.end(), false);
      // A staged plan's weights that one op reads and that cannot be read in place, by first use: spread.
      std::vector<int> once, in_place_later;
      for (int t : order) {
        const auto u = static_cast<size_t>(t);
        if (transient[u]) continue;
        if (remote_ok[u]) {
          in_place_later.push_back(t);
        } else if (stage && fetches[u] == 1 && users[u] == 1 && reuse[u].bytes() >= kBlockBytes &&
                   runtime::IsWeightId(reuse[u].id()) &&
                   (largest_streamed <= 0 || reuse[u].bytes() <= largest_streamed)) {
          once.push_back(t);
        } else if (reuse[u].bytes() <= room) {
          pinned[u] = true;
          room -= reuse[u].bytes();
        }
      }
      // Note [Pinned spread over the iteration]: staged copies run on the copy engine while the ops
      // compute, but only as far ahead as the window holds. Pinning the first weights of the iteration
      // leaves the copy engine idle through their ops once the window is full (the 7B at factor 1.5:
      // 17 ms of a 109 ms step on the H200); pinning the same bytes spread evenly in op order keeps
      // the stretches between streamed weights short. Each weight is pinned while the pinned share of
      // the weights so far stays at the share the room allows. Weights smaller than a VA block are
      // pinned first instead: they share pages with their neighbours, cannot be staged (Note [Stage
      // whole blocks], runtime/executor.cc), and each fetch of one would be a call for a few KiB
      // (norm weights streamed this way cost the 7B's steps 4-5 fault groups and a third of their time
      // at factor 1.0 on the H200).
      int64_t candidates = 0;
      for (int t : once) candidates += reuse[static_cast<size_t>(t)].bytes();
      const double share = candidates > 0 ? std::min(1.0, static_cast<double>(room) / candidates) : 0;
      double seen = 0, kept = 0;
      for (int t : once) {
        const auto u = static_cast<size_t>(t);
        const double b = static_cast<double>(reuse[u].bytes());
        seen += b;
        if (reuse[u].bytes() > room || kept + b / 2 > share * seen) continue;
        pinned[u] = true;
        kept += b;
        room -= reuse[u].bytes();
      }
      for (int t : in_place_later) {
        const auto u = static_cast<size_t>(t);
        if (reuse[u].bytes() > room) continue;
        pinned[u] = true;
        room -= reuse[u].bytes();
      }
    };
    // Bytes each op touches, as prefix sums: what passes through the window between two uses.
    std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t b = 0;
      for (int t : touched[static_cast<size_t>(i)]) b += reuse[static_cast<size_t>(t)].bytes();
      prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + b;
    }
    auto count_fetches = [&](int64_t window) {
      std::vector<int> fetches(reuse.size(), 1);
      std::vector<int64_t> last(reuse.size(), -1);
      for (int64_t i = 0; i < n; ++i) {
        for (int t : touched[static_cast<size_t>(i)]) {
          const int64_t prev = last[static_cast<size_t>(t)];
          if (prev >= 0 && prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(prev) + 1] > window)
            ++fetches[static_cast<size_t>(t)];
          last[static_cast<size_t>(t)] = i;
        }
      }
      return fetches;
    };
    // What is neither pinned nor readable in place streams through a window: twice the widest op's
    // streamed bytes, so one op's tensors arrive while the previous op's are used. The room left for
    // pinning is the budget less the window, and pinning within less room may leave a wider op
    // streamed (a large weight the spread had pinned): the window is widened until it holds twice the
    // widest op, or half the room.
    auto widest_streamed = [&] {
      int64_t widest = 0;
      for (const auto& op : touched) {
        int64_t b = 0;
        for (int t : op) {
          const auto u = static_cast<size_t>(t);
          if (!transient[u] && !pinned[u] && !remote_ok[u]) b += reuse[u].bytes();
        }
        widest = std::max(widest, b);
      }
      return widest;
    };
    int64_t window = 0;
    pin(room_total, count_fetches(0));
    for (int64_t widest = widest_streamed(); 2 * widest > window && window < room_total / 2;
         widest = widest_streamed()) {
      window = std::min(std::max(2 * widest, window), room_total / 2);
      pin(room_total - window, count_fetches(window));
    }
    plan.set_window_bytes(window);
    for (size_t t = 0; t < reuse.size(); ++t) {
      if (transient[t] || pinned[t] || !remote_ok[t]) continue;
      remote[t] = true;
      plan.add_remote(reuse[t].id());
      plan.set_remote_bytes(plan.remote_bytes() + reuse[t].bytes());
    }
    // Fetches: a streamed tensor is fetched at its first use, and again at a use the window has not
    // kept it for.
    std::vector<int64_t> need(static_cast<size_t>(n), 0);
    std::vector<int64_t> last(reuse.size(), -1);
    for (int64_t i = 0; i < n; ++i) {
      autouvm::v1::Prefetch f;
      for (int t : touched[static_cast<size_t>(i)]) {
        const auto u = static_cast<size_t>(t);
        if (pinned[u] || transient[u] || remote[u]) continue;
        const int64_t prev = last[u];
        last[u] = i;
        if (prev >= 0 && prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(prev) + 1] <= window) continue;
        f.add_tensors(reuse[u].id());
        f.set_bytes(f.bytes() + reuse[u].bytes());
      }
      if (f.tensors_size() == 0) continue;
      f.set_for_op(i);
      need[static_cast<size_t>(i)] = f.bytes();
      *plan.add_prefetches() = std::move(f);
    }
    for (autouvm::v1::Prefetch& f : *plan.mutable_prefetches()) {
      // Walk back while everything fetched for ops issue..for_op still fits in the window.
      int64_t queued = f.bytes(), issue = f.for_op();
      for (int64_t step = 1; step < n; ++step) {
        const int64_t j = ((f.for_op() - step) % n + n) % n;
        if (queued + need[static_cast<size_t>(j)] > window) break;
        queued += need[static_cast<size_t>(j)];
        issue = j;
      }
      f.set_issue_at_op(issue);
      plan.set_streamed_bytes(plan.streamed_bytes() + f.bytes());
    }
  }
  plan.set_staged(stage && plan.prefetches_size() > 0);
  plan.set_device_buffer(plan.staged());
  for (size_t t = 0; t < reuse.size(); ++t) {
    if (!pinned[t]) continue;
    plan.add_pinned(reuse[t].id());
    plan.set_pinned_bytes(plan.pinned_bytes() + reuse[t].bytes());
  }
  return plan;
}

}  // namespace

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
autouvm::v1::Plan MakePlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                           const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes,
                           const PlanOptions& options) {
  const bool stage = options.spec != nullptr && options.spec->uvm.staged_copy_bytes_per_s > 0;
  autouvm::v1::Plan in_place = PartitionPlan(key, trace, reuse, budget_bytes, stage, /*read_weights_in_place=*/true);
  if (!stage) return in_place;
  // Where no weight could be read in place, the plan that may is the staged one already.
  const bool any_in_place = in_place.remote_size() > 0;
  std::vector<autouvm::v1::Plan> plans = {std::move(in_place)};
  if (any_in_place) {
    plans.push_back(PartitionPlan(key, trace, reuse, budget_bytes, stage, /*read_weights_in_place=*/false));
  }
  if (!plans.back().staged()) return std::move(plans.front());
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
    for (const autouvm::v1::Prefetch& p : plans.back().prefetches()) {
      for (const std::string& id : p.tensors()) sizes.insert(bytes[id]);
    }
    auto next = sizes.begin();
    for (int k = 0; k < 2 && next != sizes.end() && std::next(next) != sizes.end(); ++k) {
      ++next;
      plans.push_back(PartitionPlan(key, trace, reuse, budget_bytes, stage, /*read_weights_in_place=*/false, *next));
    }
  }
  if (plans.size() == 1) return std::move(plans.front());
  // The simulator's steady iteration under each where it can replay them all, else the estimate.
  auto simulated = [&](const autouvm::v1::Plan& plan) {
    runtime::sim::ReplayOptions o{.policy = "autouvm",
                                  .make_plan = [&plan](int64_t) { return plan; },
                                  .device_bytes = budget_bytes,
                                  .iterations = 2};
    auto replay = runtime::sim::ReplayTrace(trace, *options.spec, o);
    return replay.ok() ? replay->iterations.back().seconds : -1.0;
  };
  std::vector<double> seconds;
  for (const autouvm::v1::Plan& plan : plans) seconds.push_back(simulated(plan));
  if (*std::min_element(seconds.begin(), seconds.end()) <= 0) {
    for (size_t k = 0; k < plans.size(); ++k) seconds[k] = EstimateStepSeconds(plans[k], trace, *options.spec);
  }
  const size_t best = static_cast<size_t>(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
  return std::move(plans[best]);
}

double EstimateStepSeconds(const autouvm::v1::Plan& plan, const runtime::AccessTrace& trace,
                           const runtime::GpuSpec& spec) {
  const std::unordered_set<std::string> remote(plan.remote().begin(), plan.remote().end());
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
  double copies = 0, discards = 0;
  for (const autouvm::v1::Prefetch& f : plan.prefetches()) {
    const double blocks = std::ceil(static_cast<double>(f.bytes()) / kBlock);
    if (plan.staged() && plan.device_buffer()) {
      copies += static_cast<double>(f.bytes()) / spec.link_bytes_per_s;
    } else if (plan.staged()) {
      copies += static_cast<double>(f.bytes()) / spec.uvm.staged_copy_bytes_per_s + blocks * spec.uvm.populate_block_s;
      discards += blocks * spec.uvm.discard_block_s;
    } else {
      copies += static_cast<double>(f.bytes()) / spec.link_bytes_per_s;
    }
  }
  return std::max(ops + remote_s + discards, copies + discards);  // copies in flight lose the discards' time
}

// Note [The paper's plan]: AutoUVM as published knows each op's roofline class and each tensor's reuse
// but not the budget, and leaves eviction to the driver. It prefetches, on a copy stream, the persistent
// tensors of the ops the roofline calls link-bound (CGI-bound: the roofline gate; without it, of every
// op), issued as many ops ahead as the ops in between take, by their roofline (their own copies
// included), while the copy crosses the link — a decode step's weight one op ahead;
// it advises the tensors reused within a window of ops to stay on the device (affinity pinning:
// preferred location device), which the driver then avoids evicting; everything else faults.
autouvm::v1::Plan MakePaperPlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                                const std::vector<autouvm::v1::TensorReuse>& reuse,
                                const autouvm::v1::Profile& stock_classes, const PaperOptions& options) {
  autouvm::v1::Plan plan;
  *plan.mutable_key() = key;
  plan.set_budget_bytes(key.device_budget_bytes());
  plan.set_driver_evicts(true);
  const int64_t n = static_cast<int64_t>(trace.ops.size());
  const std::vector<std::vector<int>> touched = TensorsPerOp(trace, reuse);
  std::vector<bool> affinity(reuse.size(), false);
  if (options.affinity_pinning) {
    for (size_t t = 0; t < reuse.size(); ++t) {
      if (IsTransient(reuse[t].id()) || reuse[t].uses() < 2 || reuse[t].max_gap_ops() > options.affinity_window_ops) {
        continue;
      }
      affinity[t] = true;
      plan.add_affinity(reuse[t].id());
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
    autouvm::v1::Prefetch f;
    for (int t : touched[static_cast<size_t>(i)]) {
      const auto u = static_cast<size_t>(t);
      if (IsTransient(reuse[u].id()) || affinity[u]) continue;
      f.add_tensors(reuse[u].id());
      f.set_bytes(f.bytes() + reuse[u].bytes());
    }
    if (f.tensors_size() == 0) continue;
    f.set_for_op(i);
    // Look ahead as far as the ops in between take to compute while this copy crosses the link.
    const double copy_s = i < stock_classes.ops_size() ? stock_classes.ops(static_cast<int>(i)).link_seconds() : 0;
    double covered = 0;
    int64_t issue = i;
    for (int64_t step = 1; step < n && covered < copy_s; ++step) {
      issue = ((i - step) % n + n) % n;
      covered += op_seconds(issue);
    }
    f.set_issue_at_op(issue);
    plan.set_streamed_bytes(plan.streamed_bytes() + f.bytes());
    *plan.add_prefetches() = std::move(f);
  }
  return plan;
}

bool IsTransient(const std::string& id) { return absl::StartsWith(id, "act:"); }

Residency PinnedResidency(const autouvm::v1::Plan& plan) {
  auto ids = std::make_shared<std::unordered_set<std::string>>(plan.pinned().begin(), plan.pinned().end());
  ids->insert(plan.affinity().begin(), plan.affinity().end());
  return [ids](const std::string& id) { return IsTransient(id) || ids->count(id) > 0; };
}

}  // namespace autouvm::profiler
