#include "profiler/reuse.h"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace autouvm::profiler {

std::vector<std::vector<int>> TensorsPerOp(const runtime::AccessTrace& trace,
                                           const std::vector<autouvm::v1::TensorReuse>& tensors) {
  std::unordered_map<std::string, int> index;
  for (size_t t = 0; t < tensors.size(); ++t) index.emplace(tensors[t].id(), static_cast<int>(t));
  std::vector<std::vector<int>> touched(trace.ops.size());
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    for (const auto* list : {&trace.ops[i].reads, &trace.ops[i].writes}) {
      for (const runtime::TensorUse& u : *list) {
        auto it = index.find(u.id);
        if (it == index.end()) continue;
        auto& t = touched[i];
        if (std::find(t.begin(), t.end(), it->second) == t.end()) t.push_back(it->second);
      }
    }
  }
  return touched;
}

std::vector<autouvm::v1::TensorReuse> ReuseDistances(const runtime::AccessTrace& trace) {
  const int64_t n = static_cast<int64_t>(trace.ops.size());
  // Each tensor in order of first use, with the most of it any op reaches.
  std::unordered_map<std::string, int> index;
  std::vector<autouvm::v1::TensorReuse> out;
  for (int64_t i = 0; i < n; ++i) {
    const runtime::OpRecord& op = trace.ops[static_cast<size_t>(i)];
    for (const auto* list : {&op.reads, &op.writes}) {
      for (const runtime::TensorUse& u : *list) {
        auto [it, fresh] = index.try_emplace(u.id, static_cast<int>(out.size()));
        if (fresh) {
          out.emplace_back();
          out.back().set_id(u.id);
          out.back().set_first_use(static_cast<int32_t>(i));
        }
        auto& r = out[static_cast<size_t>(it->second)];
        r.set_bytes(std::max<int64_t>(r.bytes(), u.end()));
      }
    }
  }
  // A named weight is placed whole, whatever part of it this iteration reached: its bytes are its
  // storage's. A KV-cache pool is placed by the rows the iteration reached (Note [KV pools by their live
  // rows], runtime/access_trace.cc).
  for (const runtime::TensorUse& n : trace.named) {
    if (runtime::IsKvCacheId(n.id)) continue;
    if (auto it = index.find(n.id); it != index.end()) {
      auto& r = out[static_cast<size_t>(it->second)];
      r.set_bytes(std::max(r.bytes(), n.bytes));
    }
  }
  // Per op, the distinct tensors it touches; per tensor, the ops that touch it.
  const std::vector<std::vector<int>> touched = TensorsPerOp(trace, out);
  std::vector<std::vector<int64_t>> uses(out.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int t : touched[static_cast<size_t>(i)]) uses[static_cast<size_t>(t)].push_back(i);
  }
  // Note [Stack distances]: the distinct bytes between two uses are a distinct-elements range query over
  // the sequence unrolled twice (so a gap can wrap into the next iteration). Sweeping it left to right,
  // a Fenwick tree holds each tensor's bytes at its latest touch only; the bytes in [l, r] once the sweep
  // reaches r are then exactly those of the distinct tensors touched there. O(touches · log n).
  struct Query {
    int64_t l, r;
    size_t tensor;
  };
  std::vector<Query> queries;
  for (size_t t = 0; t < out.size(); ++t) {
    const std::vector<int64_t>& at = uses[t];
    out[t].set_uses(static_cast<int32_t>(at.size()));
    int64_t max_gap = 0;
    for (size_t k = 0; k < at.size(); ++k) {
      // From this use to the next one, the last use wrapping to the first of the next iteration.
      const int64_t from = at[k], to = k + 1 < at.size() ? at[k + 1] : at[0] + n;
      max_gap = std::max(max_gap, to - from - 1);
      if (to - from > 1) queries.push_back({from + 1, to - 1, t});
    }
    out[t].set_max_gap_ops(max_gap);
  }
  std::sort(queries.begin(), queries.end(), [](const Query& a, const Query& b) { return a.r < b.r; });
  std::vector<int64_t> tree(static_cast<size_t>(2 * n) + 1, 0);  // Fenwick, 1-based
  auto add = [&](int64_t pos, int64_t v) {
    for (int64_t i = pos + 1; i <= 2 * n; i += i & -i) tree[static_cast<size_t>(i)] += v;
  };
  auto prefix = [&](int64_t pos) {  // sum over [0, pos]
    int64_t sum = 0;
    for (int64_t i = pos + 1; i > 0; i -= i & -i) sum += tree[static_cast<size_t>(i)];
    return sum;
  };
  std::vector<int64_t> last(out.size(), -1), max_stack(out.size(), 0);
  size_t q = 0;
  for (int64_t p = 0; p < 2 * n && q < queries.size(); ++p) {
    for (int u : touched[static_cast<size_t>(p % n)]) {
      const int64_t bytes = out[static_cast<size_t>(u)].bytes();
      if (last[static_cast<size_t>(u)] >= 0) add(last[static_cast<size_t>(u)], -bytes);
      add(p, bytes);
      last[static_cast<size_t>(u)] = p;
    }
    for (; q < queries.size() && queries[q].r == p; ++q) {
      const int64_t bytes = prefix(queries[q].r) - prefix(queries[q].l - 1);
      max_stack[queries[q].tensor] = std::max(max_stack[queries[q].tensor], bytes);
    }
  }
  for (size_t t = 0; t < out.size(); ++t) out[t].set_max_stack_bytes(max_stack[t]);
  return out;
}

}  // namespace autouvm::profiler
