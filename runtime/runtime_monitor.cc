#include "runtime/runtime_monitor.h"

#include <algorithm>
#include <unordered_set>

namespace autouvm::runtime {

RuntimeMonitor::RuntimeMonitor(const AccessTrace& trace, const autouvm::v1::Profile& profile, const Plan& plan,
                               const GpuSpec& spec, Options options)
    : options_(options) {
  const std::unordered_set<std::string> pinned(plan.pinned.begin(), plan.pinned.end());
  std::unordered_set<std::string> streamed;
  for (const Prefetch& p : plan.prefetches) streamed.insert(p.tensors.begin(), p.tensors.end());
  std::unordered_set<std::string> named;
  for (const TensorUse& n : trace.named) named.insert(n.id);
  ops_.resize(trace.ops.size());
  for (const autouvm::v1::OpClass& c : profile.ops()) {
    if (c.index() < 0 || c.index() >= static_cast<int64_t>(ops_.size())) continue;
    Expected& e = ops_[static_cast<size_t>(c.index())];
    e.bound = c.bound();
    e.local_seconds = std::max(c.compute_seconds(), c.hbm_seconds());
    e.hbm_bound_locally = c.hbm_seconds() >= c.compute_seconds();
    e.seconds = std::max(e.local_seconds, c.link_seconds());
  }
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    for (const TensorUse& u : trace.ops[i].reads) {
      Expected& e = ops_[i];
      if (streamed.count(u.id)) e.streamed_reads = true;
      if (!pinned.count(u.id) || !named.count(u.id) ||
          std::find(e.pinned_reads.begin(), e.pinned_reads.end(), u.id) != e.pinned_reads.end()) {
        continue;
      }
      e.pinned_reads.push_back(u.id);
      e.pinned_link_seconds += static_cast<double>(u.bytes) / spec.link_bytes_per_s;
    }
  }
}

std::vector<Reclassified> RuntimeMonitor::Observe(const std::vector<double>& op_seconds) {
  ++samples_;
  std::vector<Reclassified> changed;
  for (size_t i = 0; i < op_seconds.size() && i < ops_.size(); ++i) {
    const Expected& e = ops_[i];
    const double t = op_seconds[i];
    if (std::max(t, e.seconds) < options_.min_seconds) continue;
    Reclassified r{
        .op = static_cast<int64_t>(i), .planned = e.bound, .expected_seconds = e.seconds, .measured_seconds = t};
    if (e.bound != autouvm::v1::BOUND_LINK && !e.pinned_reads.empty() &&
        t >= options_.tolerance * std::max(e.seconds, options_.min_seconds / 2) &&
        t - e.seconds >= e.pinned_link_seconds / 2) {
      r.measured = autouvm::v1::BOUND_LINK;
      r.missing = e.pinned_reads;
    } else if (e.bound == autouvm::v1::BOUND_LINK && !e.streamed_reads && t * options_.tolerance <= e.seconds &&
               e.local_seconds < e.seconds) {
      r.measured = e.hbm_bound_locally ? autouvm::v1::BOUND_HBM : autouvm::v1::BOUND_COMPUTE;
    } else {
      continue;
    }
    changed.push_back(std::move(r));
  }
  reclassified_ += static_cast<int64_t>(changed.size());
  return changed;
}

}  // namespace autouvm::runtime
