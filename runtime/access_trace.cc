#include "runtime/access_trace.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace autouvm::runtime {
namespace {

std::string Ids(const std::vector<TensorUse>& uses) {
  std::string out;
  for (const auto& u : uses) absl::StrAppend(&out, out.empty() ? "" : ",", u.id);
  return out;
}

std::string Describe(const OpRecord& op) {
  return absl::StrCat(op.kernel, " reads [", Ids(op.reads), "] writes [", Ids(op.writes), "]");
}

}  // namespace

bool IsWeightId(const std::string& id) { return absl::StartsWith(id, "param:") && !IsKvCacheId(id); }

// Note [KV pools by their live rows]: a model's KV cache is a pool per layer whose rows in use lie at its
// start (Note [Block KV cache], engine/kv_blocks.cc), and a step reads and writes it only below its live
// rows. A pool is therefore placed by what an iteration reached of it, not by its storage: a pool sized
// for 64 requests of 264 positions is 8.6 GB for a 7B, and planning it whole pinned it in full at batch 1
// (over a 6.3 GB budget: every weight streamed, 468 ms a token against 140 with a pool for 16 requests,
// bench/results/2026-12-01-block-kv-h200.md). This is what a plan is made for; the executor, told the
// rows in use before each step, places the pools by those (Note [KV pools follow the rows in use],
// executor_kv_rows.cc).
bool IsKvCacheId(const std::string& id) { return absl::StartsWith(id, "param:kv_cache"); }

// Note [Coded sizes in the trace]: issue 30. Staged weights cross the link exponent-coded (Note [Coded host
// copies], runtime/cuda/cuda_backend_coded.cc), and how far each shrinks depends on its values: N(0, s²)
// weights code to 0.70 of their bytes, a tensor of uniform bits does not shrink at all and is sent
// plain. A plan is a choice among partitions by their simulated step (Note [Staged or in place],
// profiler/planner.cc), so it should charge each streamed weight what it really moves. The coder learns
// each size only once a plan has put the weight on the host, after the model's first recording; a
// session records each later shape with the sizes its backend knows by then (ModelSession, from
// ModelExecution::CodedBytes), stored with the trace, and the planner and the simulator charge those
// (CodedLinkBytes); a weight the trace has no size for is charged the planned ratio
// (runtime::weight_codec::kPlannedCodedRatio in the daemon).
int64_t CodedLinkBytes(const AccessTrace& trace, const std::string& id, int64_t bytes, double ratio) {
  if (ratio <= 0) return bytes;
  if (auto it = trace.coded_bytes.find(id); it != trace.coded_bytes.end()) return std::min(bytes, it->second);
  return static_cast<int64_t>(ratio * static_cast<double>(bytes));
}

std::map<std::string, int64_t> CodedBytesOfNamed(const AccessTrace& trace,
                                                 const std::map<std::string, int64_t>& coded) {
  std::map<std::string, int64_t> out;
  for (const TensorUse& t : trace.named) {
    if (auto c = coded.find(t.id); c != coded.end()) out[t.id] = c->second;
  }
  return out;
}

std::unordered_map<std::string, int64_t> KvBytesReached(const AccessTrace& trace) {
  std::unordered_map<std::string, int64_t> reach;
  for (const OpRecord& op : trace.ops) {
    for (const auto* uses : {&op.reads, &op.writes}) {
      for (const TensorUse& u : *uses) {
        if (IsKvCacheId(u.id)) reach[u.id] = std::max(reach[u.id], u.end());
      }
    }
  }
  return reach;
}

std::vector<std::string> CompareTraces(const AccessTrace& expected, const AccessTrace& actual, size_t limit) {
  std::vector<std::string> out;
  const size_t n = std::max(expected.ops.size(), actual.ops.size());
  for (size_t i = 0; i < n && out.size() < limit; ++i) {
    if (i >= expected.ops.size()) {
      out.push_back(absl::StrCat("op ", i, ": unexpected ", Describe(actual.ops[i])));
    } else if (i >= actual.ops.size()) {
      out.push_back(absl::StrCat("op ", i, ": missing ", Describe(expected.ops[i])));
    } else if (!(expected.ops[i] == actual.ops[i])) {
      out.push_back(
          absl::StrCat("op ", i, ": expected ", Describe(expected.ops[i]), ", got ", Describe(actual.ops[i])));
    }
  }
  if (expected.ops.size() != actual.ops.size() && out.size() < limit) {
    out.push_back(absl::StrCat("expected ", expected.ops.size(), " ops, got ", actual.ops.size()));
  }
  return out;
}

}  // namespace autouvm::runtime
