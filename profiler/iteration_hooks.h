// IterationHooks: what a model's scheduler calls around every forward pass (a prefill or a decode
// step), so that the model's session (profiler/model_session.h) can record it, check it against a
// stored profile, or follow its plan.
//
// Thread-safety: called on the model's scheduler thread only.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace autouvm::profiler {

// kMixed: a pass with decode rows and prompt chunks both (engine/step_policy.h).
enum class IterationPhase { kPrefill, kDecode, kMixed };

// How an observed pass ran as a CUDA graph with its plan's copies (Note [Staged passes captured],
// runtime/executor_capture.cc): not at all, captured (its ops observed as they were captured, then the
// graph launched), replayed (no op observed), or its capture failed (nothing ran).
enum class PassGraph { kNone, kCaptured, kReplayed, kCaptureFailed };

class IterationHooks {
 public:
  virtual ~IterationHooks() = default;
  // batch: the pass's rows; prompt_len: its longest prompt chunk (0 for decode).
  virtual void BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) = 0;
  // After BeforeIteration: whether nothing observes the pass about to run, so that it may run as a
  // captured graph, which launches its ops without the observer seeing them (Note [Captured steps],
  // engine/step_graphs.cc).
  virtual bool PassMayBeCaptured() const { return false; }
  // After BeforeIteration, asked by the runner as the pass is launched (its KV rows placed): nonzero where
  // the pass, observed, may be captured as a graph with the copies its plan issues, or replayed from a
  // graph captured under the same key (Note [Staged passes captured]): the key of the plan's state.
  virtual uint64_t StagedCaptureKey() const { return 0; }
  // After a pass captured under `key` ran its last op, before its graph is kept: OK where the pass
  // followed its plan throughout and ended in the state it began in; else why the graph must go.
  virtual absl::Status StagedCaptureHeld(uint64_t /*key*/) const {
    return absl::FailedPreconditionError("these hooks capture no passes");
  }
  // How the pass just run used such a graph; before AfterIteration.
  virtual void RanAsGraph(PassGraph /*how*/) {}
  // True: the iteration's result must not be used, run it again (once; its hooks are called again).
  virtual bool AfterIteration(const absl::Status& status) = 0;
  // The model has had nothing to run for SchedulerOptions::idle_sleep: it may give its device memory
  // back (Note [A model asleep], profiler/model_execution.cc); its next pass wakes it.
  virtual void Sleep() {}
};

}  // namespace autouvm::profiler
