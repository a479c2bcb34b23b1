// Observer: sees every aten op the TorchScript interpreter runs (a global at::RecordFunction callback),
// numbers the leaf ops of an iteration, hands each to its subscribers and, when recording, turns the
// iteration into an AccessTrace with stable tensor and kernel identities (access_trace.h).
//
//   auto obs = Observer::Create();                       // one per model: several may exist at once
//   obs->NameTensor(param.storage().data(), "layer0.wq", param.storage().nbytes());  // each weight, cache
//   obs->BeginIteration();  module.forward(...);  AccessTrace t = obs->EndIteration();   // recording
//   obs->BeginIteration(IterationMode::kObserve);  ...  obs->EndIteration();   // op boundaries only
//
// Composite ops (aten::matmul → aten::mm, aten::to → aten::copy_) are attributed to the leaf ops that
// do the work: an op counts only if no counted op ran inside it, and views and allocations never count
// (Note [Leaf ops]). Boxed inputs and outputs are asked of libtorch only while recording, through a
// callback on the recording thread alone; an observed iteration sees op names and nesting only, and ops
// outside an iteration cost one thread-local check in the global callback (bench/observer_bench).
//
// Several observers may exist at once (one per model session), each with its own names, subscribers
// and iterations; a thread runs one observer's iteration at a time (Note [One global callback]).
//
// Thread-safety: NameTensor and the subscriber calls may be made from any thread; BeginIteration and
// EndIteration must be called from the thread that runs the iteration, where subscribers are called.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/access_trace.h"
#include "runtime/tensor_binding.h"

namespace autouvm::runtime {

// One tensor an op touched (recording iterations only).
struct TensorAccess {
  const void* data = nullptr;  // the op's view of it
  int64_t bytes = 0;
  std::string_view dtype;  // e.g. "BFloat16"
  std::vector<int64_t> shape;
  bool write = false;
  bool on_host = false;  // in CPU memory (a scalar libtorch wrapped, or a CPU run)
  std::string_view id;   // its identity in the trace (Note [Tensor identity])
};

// A leaf op that just finished, numbered as in the trace.
struct OpEvent {
  int64_t index = 0;
  std::string_view op;                // e.g. "aten::mm"
  std::string_view kernel;            // "<op>#<n>"
  std::vector<TensorAccess> tensors;  // empty in observed (not recorded) iterations
  double flops = 0;                   // 0 in observed iterations
};

class OpSubscriber {
 public:
  virtual ~OpSubscriber() = default;
  // Before the leaf op numbered `index` launches anything: called once per index, at the start of the
  // first op that may contain it (a composite op, or the leaf itself). Observed and recorded iterations
  // alike: an iteration recorded for its own profile may follow another shape's plan meanwhile (Note
  // [Planned from the nearest profile], profiler/model_session.cc).
  virtual void BeforeOp(int64_t /*index*/) {}
  virtual void OnOp(const OpEvent& op) = 0;
};

enum class IterationMode {
  kRecord,   // inputs and outputs of every op: the AccessTrace, and subscribers see tensors
  kObserve,  // op boundaries only: subscribers see each op's index and kernel id
};

class Observer {
 public:
  // An observer of its own for a model (or a tool); others may exist (Note [One global callback]).
  static absl::StatusOr<std::unique_ptr<Observer>> Create();
  ~Observer();

  // Names the tensor whose storage starts at `storage_data` (a parameter, buffer or cache) and holds
  // `storage_bytes`. Name them in allocation order: traces list them so (AccessTrace::named).
  void NameTensor(const void* storage_data, const std::string& name, int64_t storage_bytes);
  // Tensors `binding` points at a device buffer for a while (runtime/tensor_binding.h) keep their names
  // while bound: a recorded op that reads a buffer names the tensor bound there. `binding` (null for
  // none) outlives the observer; it is read on the iteration's thread.
  void ResolveBoundStorage(const TensorBinding* binding);
  // Fixes TorchScript's graph executor so that every run executes the same op sequence (no profiling
  // executor re-specialising the graph over the first runs, no fusion groups hiding ops). Call before
  // loading models; process-wide.
  static void MakeExecutionRepeatable();

  // Subscribers are called, in the order added, on the iteration's thread before (observed iterations)
  // and after each leaf op.
  void AddSubscriber(OpSubscriber* subscriber);
  void RemoveSubscriber(OpSubscriber* subscriber);

  void BeginIteration(IterationMode mode = IterationMode::kRecord);
  // The recorded trace (ops empty for an observed iteration; `named` always filled).
  AccessTrace EndIteration();
  // Leaf ops counted in the last (or current) iteration.
  int64_t ops_counted() const;

  struct Impl;

 private:
  explicit Observer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autouvm::runtime
