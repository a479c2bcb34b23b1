// Observer: sees every aten op the TorchScript interpreter runs on the recording thread and turns one
// iteration into an AccessTrace with stable tensor and kernel identities (access_trace.h).
//
//   auto obs = Observer::Create();                       // one per process at a time
//   obs->NameTensor(param.data_ptr(), "layer0.wq");      // for each parameter, buffer, KV cache
//   obs->BeginIteration();  module.forward(...);  AccessTrace t = obs->EndIteration();
//
// Composite ops (aten::matmul → aten::mm, aten::to → aten::copy_) are attributed to the leaf ops that
// do the work: an op is recorded only if no other op ran inside it. Inputs are asked of libtorch only
// between BeginIteration and EndIteration, through a callback on that thread alone, so ops run outside
// a recording (and on other threads) pay nothing.
//
// Thread-safety: NameTensor may be called from any thread; BeginIteration and EndIteration must be
// called from the thread that runs the iteration.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/access_trace.h"

namespace autouvm::runtime {

class Observer {
 public:
  // Fails if another Observer exists in the process.
  static absl::StatusOr<std::unique_ptr<Observer>> Create();
  ~Observer();

  // Names the tensor whose storage starts at `storage_data` (a parameter, buffer or cache).
  void NameTensor(const void* storage_data, const std::string& name);
  // Fixes TorchScript's graph executor so that every run executes the same op sequence (no profiling
  // executor re-specialising the graph over the first runs, no fusion groups hiding ops). Call before
  // loading models; process-wide.
  static void MakeExecutionRepeatable();

  void BeginIteration();
  AccessTrace EndIteration();

  struct Impl;

 private:
  explicit Observer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autouvm::runtime
