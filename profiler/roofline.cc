#include "profiler/roofline.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace autouvm::profiler {

void Classify(const runtime::AccessTrace& trace, const runtime::GpuSpec& spec, const Residency& resident,
              autouvm::v1::Profile* profile) {
  profile->clear_ops();
  int64_t counts[4] = {0, 0, 0, 0};
  std::vector<double> times;
  times.reserve(trace.ops.size());
  std::unordered_map<std::string, int64_t> span;  // distinct tensors and the most of each touched
  std::unordered_set<std::string> brought;        // non-resident tensors already brought over
  for (const runtime::OpRecord& op : trace.ops) {
    double bytes = 0, link_bytes = 0;
    for (const auto* uses : {&op.reads, &op.writes}) {
      for (const runtime::TensorUse& u : *uses) {
        const int64_t reach = u.end();
        bytes += static_cast<double>(u.span());
        int64_t& s = span[u.id];
        s = std::max(s, reach);
        if (!resident(u.id) && brought.insert(u.id).second) link_bytes += static_cast<double>(reach);
      }
    }
    auto* c = profile->add_ops();
    c->set_index(op.index);
    c->set_compute_seconds(op.flops / spec.peak_flops);
    c->set_hbm_seconds(bytes / spec.hbm_bytes_per_s);
    c->set_link_seconds(link_bytes / spec.link_bytes_per_s);
    autouvm::v1::Bound bound = autouvm::v1::BOUND_COMPUTE;
    double t = c->compute_seconds();
    if (c->hbm_seconds() > t) {
      bound = autouvm::v1::BOUND_HBM;
      t = c->hbm_seconds();
    }
    if (c->link_seconds() > t) {
      bound = autouvm::v1::BOUND_LINK;
      t = c->link_seconds();
    }
    c->set_bound(bound);
    ++counts[bound];
    times.push_back(t + spec.kernel_launch_s);
  }
  double total = 0;
  for (double t : times) total += t;
  std::vector<double> sorted = times;
  const size_t top = std::min<size_t>(20, sorted.size());
  std::partial_sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(top), sorted.end(),
                    std::greater<double>());
  double top_sum = 0;
  for (size_t i = 0; i < top; ++i) top_sum += sorted[i];
  int64_t all = 0, on_device = 0;
  for (const auto& [id, bytes] : span) {
    all += bytes;
    if (resident(id)) on_device += bytes;
  }
  profile->set_compute_bound_ops(counts[autouvm::v1::BOUND_COMPUTE]);
  profile->set_hbm_bound_ops(counts[autouvm::v1::BOUND_HBM]);
  profile->set_link_bound_ops(counts[autouvm::v1::BOUND_LINK]);
  profile->set_iteration_seconds(total);
  profile->set_top20_share(total > 0 ? top_sum / total : 0);
  profile->set_bytes_per_iteration(all);
  profile->set_resident_bytes(on_device);
}

}  // namespace autouvm::profiler
