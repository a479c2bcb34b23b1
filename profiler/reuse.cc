#include "profiler/reuse.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace autouvm::profiler {

std::vector<autouvm::v1::TensorReuse> ReuseDistances(const runtime::AccessTrace& trace) {
  const int64_t n = static_cast<int64_t>(trace.ops.size());
  // Per op, the distinct tensors it touches; per tensor, its size and the ops that touch it.
  std::vector<std::vector<int>> touched(static_cast<size_t>(n));
  std::unordered_map<std::string, int> index;
  std::vector<autouvm::v1::TensorReuse> out;
  std::vector<std::vector<int64_t>> uses;
  for (int64_t i = 0; i < n; ++i) {
    const runtime::OpRecord& op = trace.ops[static_cast<size_t>(i)];
    for (const auto* list : {&op.reads, &op.writes}) {
      for (const runtime::TensorUse& u : *list) {
        auto [it, fresh] = index.try_emplace(u.id, static_cast<int>(out.size()));
        if (fresh) {
          out.emplace_back();
          out.back().set_id(u.id);
          out.back().set_first_use(static_cast<int32_t>(i));
          uses.emplace_back();
        }
        auto& r = out[static_cast<size_t>(it->second)];
        r.set_bytes(std::max<int64_t>(r.bytes(), u.end()));
        auto& u_list = uses[static_cast<size_t>(it->second)];
        if (u_list.empty() || u_list.back() != i) {
          u_list.push_back(i);
          touched[static_cast<size_t>(i)].push_back(it->second);
        }
      }
    }
  }
  for (size_t t = 0; t < out.size(); ++t) {
    const std::vector<int64_t>& at = uses[t];
    out[t].set_uses(static_cast<int32_t>(at.size()));
    int64_t max_gap = 0, max_stack = 0;
    for (size_t k = 0; k < at.size(); ++k) {
      // From this use to the next one, the last use wrapping to the first of the next iteration.
      const int64_t from = at[k], to = k + 1 < at.size() ? at[k + 1] : at[0] + n;
      max_gap = std::max(max_gap, to - from - 1);
      std::unordered_set<int> between;
      int64_t bytes = 0;
      for (int64_t j = from + 1; j < to; ++j) {
        for (int other : touched[static_cast<size_t>(j % n)]) {
          if (other != static_cast<int>(t) && between.insert(other).second)
            bytes += out[static_cast<size_t>(other)].bytes();
        }
      }
      max_stack = std::max(max_stack, bytes);
    }
    out[t].set_max_gap_ops(max_gap);
    out[t].set_max_stack_bytes(max_stack);
  }
  return out;
}

}  // namespace autouvm::profiler
