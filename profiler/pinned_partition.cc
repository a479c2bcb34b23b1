#include "profiler/pinned_partition.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "profiler/planner.h"
#include "profiler/reuse.h"

namespace autouvm::profiler {
namespace {

constexpr int64_t kBlockBytes = int64_t{2} << 20;  // a VA block

// One iteration's tensors, as the partition sees them, and the partition being made. The steps, in the
// order PartitionPlan runs them: which tensors may be read in place (FindRemoteOk); pin within the room
// left by a window (Pin, with the fetches CountFetches says the window needs); widen the window until
// it holds twice the widest op's streamed bytes (ChooseWindow); then write the plan: read in place what
// may be (AddRemote), fetch what streams (AddFetches), each fetch issued as early as the window allows
// (IssueEarly).
class Partition {
 public:
  Partition(const runtime::AccessTrace& trace, const std::vector<autouvm::v1::TensorReuse>& reuse, bool stage,
            bool read_weights_in_place, int64_t largest_streamed)
      : trace_(trace),
        reuse_(reuse),
        stage_(stage),
        read_weights_in_place_(read_weights_in_place),
        largest_streamed_(largest_streamed),
        n_(static_cast<int64_t>(trace.ops.size())),
        touched_(TensorsPerOp(trace, reuse)),
        transient_(reuse.size(), false),
        pinned_(reuse.size(), false),
        remote_(reuse.size(), false),
        remote_ok_(reuse.size(), false),
        users_(reuse.size(), 0),
        user_(reuse.size(), -1),
        rank_(reuse.size(), 0) {
    for (size_t t = 0; t < reuse_.size(); ++t) {
      transient_[t] = IsTransient(reuse_[t].id());
      if (!transient_[t]) persistent_bytes_ += reuse_[t].bytes();
    }
    RankForSpread();
  }

  int64_t persistent_bytes() const { return persistent_bytes_; }

  // Everything persistent fits: all of it pinned.
  void PinEverything() {
    for (size_t t = 0; t < reuse_.size(); ++t) pinned_[t] = !transient_[t];
  }

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
  void FindRemoteOk() {
    for (int64_t i = 0; i < n_; ++i) {
      for (int t : touched_[static_cast<size_t>(i)]) {
        ++users_[static_cast<size_t>(t)];
        user_[static_cast<size_t>(t)] = static_cast<int>(i);
      }
    }
    std::unordered_set<std::string> written;
    for (const runtime::OpRecord& op : trace_.ops) {
      for (const runtime::TensorUse& w : op.writes) written.insert(w.id);
    }
    for (size_t t = 0; t < reuse_.size(); ++t) {
      if (transient_[t] || users_[t] != 1 || written.count(reuse_[t].id()) || reuse_[t].bytes() <= 0) continue;
      if (!read_weights_in_place_ && runtime::IsWeightId(reuse_[t].id())) continue;
      const double intensity = trace_.ops[static_cast<size_t>(user_[t])].flops / static_cast<double>(reuse_[t].bytes());
      remote_ok_[t] = intensity <= kMaxRemoteFlopsPerByte;
    }
    // Bytes each op touches, as prefix sums: what passes through the window between two uses.
    prefix_.assign(static_cast<size_t>(n_) + 1, 0);
    for (int64_t i = 0; i < n_; ++i) {
      int64_t b = 0;
      for (int t : touched_[static_cast<size_t>(i)]) b += reuse_[static_cast<size_t>(t)].bytes();
      prefix_[static_cast<size_t>(i) + 1] = prefix_[static_cast<size_t>(i)] + b;
    }
  }

  // How many times each tensor is fetched per iteration through a window of `window` bytes: again at
  // each use further from the last than the window holds.
  std::vector<int> CountFetches(int64_t window) const {
    std::vector<int> fetches(reuse_.size(), 1);
    std::vector<int64_t> last(reuse_.size(), -1);
    for (int64_t i = 0; i < n_; ++i) {
      for (int t : touched_[static_cast<size_t>(i)]) {
        const int64_t prev = last[static_cast<size_t>(t)];
        if (prev >= 0 && Between(prev, i) > window) ++fetches[static_cast<size_t>(t)];
        last[static_cast<size_t>(t)] = i;
      }
    }
    return fetches;
  }

  // Pins within `room`: tensors that could not be read remotely first (streaming them costs a window
  // and evictions), then those fetched most often per iteration, then by first use — or, in a staged
  // plan, spread over the iteration (Note [Pinned spread over the iteration]).
  void Pin(int64_t room, const std::vector<int>& fetches) {
    std::vector<int> order(reuse_.size());
    for (size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
      if (remote_ok_[ua] != remote_ok_[ub]) return !remote_ok_[ua];
      if (fetches[ua] != fetches[ub]) return fetches[ua] > fetches[ub];
      return reuse_[ua].first_use() < reuse_[ub].first_use();
    });
    std::fill(pinned_.begin(), pinned_.end(), false);
    // A staged plan's weights that one op reads and that cannot be read in place, by first use: spread.
    std::vector<int> once, in_place_later;
    for (int t : order) {
      const auto u = static_cast<size_t>(t);
      if (transient_[u]) continue;
      if (remote_ok_[u]) {
        in_place_later.push_back(t);
      } else if (StagedOnce(u, fetches)) {
        once.push_back(t);
      } else if (reuse_[u].bytes() <= room) {
        pinned_[u] = true;
        room -= reuse_[u].bytes();
      }
    }
    room = PinSpread(once, room);
    SortByRank(&in_place_later);
    for (int t : in_place_later) {
      const auto u = static_cast<size_t>(t);
      if (reuse_[u].bytes() > room) continue;
      pinned_[u] = true;
      room -= reuse_[u].bytes();
    }
  }

  // What is neither pinned nor readable in place streams through a window: twice the widest op's
  // streamed bytes, so one op's tensors arrive while the previous op's are used. The room left for
  // pinning is the budget less the window, and pinning within less room may leave a wider op
  // streamed (a large weight the spread had pinned): the window is widened until it holds twice the
  // widest op, or half the room.
  int64_t ChooseWindow(int64_t room_total) {
    int64_t window = 0;
    Pin(room_total, CountFetches(0));
    for (int64_t widest = WidestStreamed(); 2 * widest > window && window < room_total / 2; widest = WidestStreamed()) {
      window = std::min(std::max(2 * widest, window), room_total / 2);
      Pin(room_total - window, CountFetches(window));
    }
    // Under half the room, the window still holds the widest op's streamed bytes, pins given up for it
    // where need be: a narrower one has no room for that op's weights when it comes, and the executor
    // would stop following at it every pass (4 MiB weights under an 8 MiB budget did).
    for (int64_t widest = WidestStreamed(); window < widest && widest <= room_total; widest = WidestStreamed()) {
      window = widest;
      Pin(room_total - window, CountFetches(window));
    }
    return window;
  }

  void AddRemote(runtime::Plan* plan) {
    for (size_t t = 0; t < reuse_.size(); ++t) {
      if (transient_[t] || pinned_[t] || !remote_ok_[t]) continue;
      remote_[t] = true;
      plan->remote.push_back(reuse_[t].id());
      plan->remote_bytes += reuse_[t].bytes();
    }
  }

  // A streamed tensor is fetched at its first use, and again at a use the window has not kept it for.
  // The bytes fetched for each op, for IssueEarly.
  std::vector<int64_t> AddFetches(int64_t window, runtime::Plan* plan) const {
    std::vector<int64_t> need(static_cast<size_t>(n_), 0);
    std::vector<int64_t> last(reuse_.size(), -1);
    for (int64_t i = 0; i < n_; ++i) {
      runtime::Prefetch f;
      for (int t : touched_[static_cast<size_t>(i)]) {
        const auto u = static_cast<size_t>(t);
        if (pinned_[u] || transient_[u] || remote_[u]) continue;
        const int64_t prev = last[u];
        last[u] = i;
        if (prev >= 0 && Between(prev, i) <= window) continue;
        f.tensors.push_back(reuse_[u].id());
        f.bytes += reuse_[u].bytes();
      }
      if (f.tensors.empty()) continue;
      f.for_op = i;
      need[static_cast<size_t>(i)] = f.bytes;
      plan->prefetches.push_back(std::move(f));
    }
    return need;
  }

  // Each fetch is issued as far back (wrapping into the previous iteration) as everything fetched for
  // the ops from there to its own still fits in the window.
  void IssueEarly(int64_t window, const std::vector<int64_t>& need, runtime::Plan* plan) const {
    for (runtime::Prefetch& f : plan->prefetches) {
      int64_t queued = f.bytes, issue = f.for_op;
      for (int64_t step = 1; step < n_; ++step) {
        const int64_t j = ((f.for_op - step) % n_ + n_) % n_;
        if (queued + need[static_cast<size_t>(j)] > window) break;
        queued += need[static_cast<size_t>(j)];
        issue = j;
      }
      f.issue_at_op = issue;
      plan->streamed_bytes += f.bytes;
    }
  }

  void AddPinned(runtime::Plan* plan) const {
    for (size_t t = 0; t < reuse_.size(); ++t) {
      if (!pinned_[t]) continue;
      plan->pinned.push_back(reuse_[t].id());
      plan->pinned_bytes += reuse_[t].bytes();
    }
  }

 private:
  // Bytes the ops strictly between `from` and `to` touch.
  int64_t Between(int64_t from, int64_t to) const {
    return prefix_[static_cast<size_t>(to)] - prefix_[static_cast<size_t>(from) + 1];
  }

  // A staged plan's weight that one op reads once and that is large enough to stage whole: spread.
  bool StagedOnce(size_t u, const std::vector<int>& fetches) const {
    return stage_ && fetches[u] == 1 && users_[u] == 1 && reuse_[u].bytes() >= kBlockBytes &&
           runtime::IsWeightId(reuse_[u].id()) && (largest_streamed_ <= 0 || reuse_[u].bytes() <= largest_streamed_);
  }

  // Note [Pinned spread over the iteration]: staged copies run on the copy engine while the ops
  // compute, but only as far ahead as the window holds. Pinning the first weights of the iteration
  // leaves the copy engine idle through their ops once the window is full (the 7B at factor 1.5:
  // 17 ms of a 109 ms step on the H200); pinning the same bytes spread evenly in op order keeps
  // the stretches between streamed weights short (Note [Nested spread] says in what order). Weights
  // smaller than a VA block are
  // pinned first instead: they share pages with their neighbours, cannot be staged (Note [Stage
  // whole blocks], runtime/executor.cc), and each fetch of one would be a call for a few KiB
  // (norm weights streamed this way cost the 7B's steps 4-5 fault groups and a third of their time
  // at factor 1.0 on the H200). Returns the room left.
  //
  // Note [Nested spread]: the daemon switches plans between a model's shapes (a prefill, then decode
  // steps; mixed passes between them), and a switch moves onto the device what the next plan pins and
  // the last did not. Spreading by a running share made plans of nearly the same room pin different
  // weights (a share of 0.45 against 0.5 drifts out of phase with every other weight), so a switch
  // moved most of the pinned set: a prefill pass through the daemon took 1.8-1.9 sweeps on the H200's
  // 7B at factor 2.0, where the same prefill followed alone runs at the link floor. The weights are
  // instead pinned in bit-reversed order of their place among the model's tensors in op order (0, n/2,
  // n/4, 3n/4, ...; RankForSpread): every prefix of that order is spread evenly, and plans with more
  // room pin a superset of what plans with less pin. Weights a plan reads in place are pinned in the
  // same order (for them it costs nothing: an in-place read holds its op wherever it is), so a decode
  // plan that reads in place and a prefill plan that stages share their pins too.
  int64_t PinSpread(std::vector<int> once, int64_t room) {
    SortByRank(&once);
    for (int t : once) {
      const auto u = static_cast<size_t>(t);
      if (reuse_[u].bytes() > room) continue;
      pinned_[u] = true;
      room -= reuse_[u].bytes();
    }
    return room;
  }

  void SortByRank(std::vector<int>* tensors) const {
    std::stable_sort(tensors->begin(), tensors->end(),
                     [&](int a, int b) { return rank_[static_cast<size_t>(a)] < rank_[static_cast<size_t>(b)]; });
  }

  // Each model tensor's ("param:") place in the order PinSpread pins in: the bit-reversed index of its
  // first use among the model's tensors (Note [Nested spread]). It depends on the model's tensors and
  // their order only, the same in every shape of the model, so a decode plan that reads its unpinned
  // weights in place and a prefill plan that stages them pin from the same order.
  void RankForSpread() {
    std::vector<size_t> model;
    for (size_t t = 0; t < reuse_.size(); ++t) {
      if (!transient_[t] && reuse_[t].id().starts_with("param:")) model.push_back(t);
    }
    std::stable_sort(model.begin(), model.end(),
                     [&](size_t a, size_t b) { return reuse_[a].first_use() < reuse_[b].first_use(); });
    int bits = 0;
    while ((size_t{1} << bits) < model.size()) ++bits;
    for (size_t i = 0; i < model.size(); ++i) {
      size_t r = 0;
      for (int k = 0; k < bits; ++k) r |= ((i >> k) & 1) << (bits - 1 - k);
      rank_[model[i]] = r;
    }
    // Other persistent tensors (inputs) after the model's, in first-use order.
    size_t next = size_t{1} << bits;
    for (size_t t = 0; t < reuse_.size(); ++t) {
      if (!transient_[t] && !reuse_[t].id().starts_with("param:")) rank_[t] = next++;
    }
  }

  // The widest op's bytes that are neither pinned nor read in place.
  int64_t WidestStreamed() const {
    int64_t widest = 0;
    for (const auto& op : touched_) {
      int64_t b = 0;
      for (int t : op) {
        const auto u = static_cast<size_t>(t);
        if (!transient_[u] && !pinned_[u] && !remote_ok_[u]) b += reuse_[u].bytes();
      }
      widest = std::max(widest, b);
    }
    return widest;
  }

  const runtime::AccessTrace& trace_;
  const std::vector<autouvm::v1::TensorReuse>& reuse_;
  const bool stage_;
  const bool read_weights_in_place_;
  const int64_t largest_streamed_;
  const int64_t n_;  // ops
  const std::vector<std::vector<int>> touched_;
  int64_t persistent_bytes_ = 0;
  std::vector<bool> transient_, pinned_, remote_, remote_ok_;
  std::vector<int> users_, user_;  // per tensor: ops that touch it, and the last of them
  std::vector<size_t> rank_;       // per tensor: its place in the pinning order (RankForSpread)
  std::vector<int64_t> prefix_;
};

}  // namespace

runtime::Plan PartitionPlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                            const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes, bool stage,
                            bool read_weights_in_place, int64_t largest_streamed) {
  runtime::Plan plan;
  plan.budget_bytes = budget_bytes;
  if (key.policy() == "stock") return plan;
  Partition p(trace, reuse, stage, read_weights_in_place, largest_streamed);
  // Activations live from their first use to their last and are placed anew by the allocator: the plan
  // leaves room for the most of them alive at once and places only the persistent tensors.
  const int64_t room_total = std::max<int64_t>(0, budget_bytes - PeakActivationBytes(trace, reuse));
  if (p.persistent_bytes() <= room_total) {
    p.PinEverything();
  } else {
    p.FindRemoteOk();
    const int64_t window = p.ChooseWindow(room_total);
    plan.window_bytes = window;
    p.AddRemote(&plan);
    const std::vector<int64_t> need = p.AddFetches(window, &plan);
    p.IssueEarly(window, need, &plan);
  }
  plan.staged = stage && !plan.prefetches.empty();
  plan.device_buffer = plan.staged;
  p.AddPinned(&plan);
  return plan;
}

}  // namespace autouvm::profiler
