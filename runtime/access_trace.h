// AccessTrace: what one iteration of a model did, op by op — the kernel, the tensors it read and wrote
// (by stable identity, with bytes) and its FLOPs. The Observer records it; the profiler analyses it.
//
// Tensor identities (Note [Tensor identity]):
//   "param:<name>"            a weight, buffer or other tensor named up front (Observer::NameTensor)
//   "input:<k>"               the k-th tensor the iteration read before any op produced it
//   "act:<op>@<index>.<k>"    the k-th output of the op at position <index> in the iteration
// Kernel identity: "<op>#<n>", the n-th launch of that op in the iteration. None of these depend on
// addresses, so the same model and shapes give the same trace in any process.
//
// Plain values; safe to copy between threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace autouvm::runtime {

// A model's weight: a named tensor other than its KV cache ("param:kv_cache.layer0.k"), which ops write.
bool IsWeightId(const std::string& id);
// A KV-cache pool ("param:kv_cache.layer0.k"; Note [KV pools by their live rows], access_trace.cc).
bool IsKvCacheId(const std::string& id);

struct TensorUse {
  std::string id;
  int64_t bytes = 0;   // numel x element size of what the op used
  int64_t offset = 0;  // where the used view starts within the tensor's storage, in bytes
  int64_t extent = 0;  // bytes of storage the view spans from `offset` (> bytes for strided views)
  int64_t run = 0;     // bytes of its longest contiguous run (a transposed weight's row; all of a contiguous one)
  bool operator==(const TensorUse&) const = default;

  int64_t span() const { return extent > bytes ? extent : bytes; }  // bytes of storage the use reaches
  int64_t end() const { return offset + span(); }                   // the storage it needs, from its start
};

struct OpRecord {
  int64_t index = 0;  // position among the iteration's recorded (leaf) ops
  std::string op;     // e.g. "aten::mm"
  std::string kernel;
  std::vector<TensorUse> reads;
  std::vector<TensorUse> writes;
  double flops = 0;
  double seconds = 0;  // measured while recording (CPU wall time) or simulated by a replay
  // What the op is and touches; its time is a measurement, not part of its identity.
  bool operator==(const OpRecord& o) const {
    return index == o.index && op == o.op && kernel == o.kernel && reads == o.reads && writes == o.writes &&
           flops == o.flops;
  }
};

struct AccessTrace {
  std::vector<OpRecord> ops;
  // The named tensors (weights, buffers, caches) the iteration touched, in the order they were named —
  // the order a model allocates them in — with their storage sizes (offset and extent unused).
  std::vector<TensorUse> named;
  // Of the named weights whose host copies the backend had coded when the iteration was recorded
  // (runtime.compress_streamed), the bytes each crosses the link as when staged: its coded size, or its
  // own bytes where the code would not shrink it (Note [Coded sizes in the trace], access_trace.cc).
  std::map<std::string, int64_t> coded_bytes;
};

// What `bytes` of the named tensor `id` move over the link when staged copies cross coded, planned at
// `ratio` (0: they cross plain): its measured size from the trace's coded_bytes where it has one, else
// `ratio` of its bytes.
int64_t CodedLinkBytes(const AccessTrace& trace, const std::string& id, int64_t bytes, double ratio);
// Of `coded` (sizes by id: what a backend knows), those of the trace's named tensors: what its coded_bytes
// are to hold.
std::map<std::string, int64_t> CodedBytesOfNamed(const AccessTrace& trace, const std::map<std::string, int64_t>& coded);

// Of each KV-cache pool the trace's ops touch, the storage bytes they reach from its start.
std::unordered_map<std::string, int64_t> KvBytesReached(const AccessTrace& trace);

// Where two traces of what should be the same iteration part ways: one line per differing op (at most
// `limit`), empty when they match. Used to decide that a profile no longer fits a model.
std::vector<std::string> CompareTraces(const AccessTrace& expected, const AccessTrace& actual, size_t limit = 10);

}  // namespace autouvm::runtime
