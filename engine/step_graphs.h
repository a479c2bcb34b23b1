// StepGraphs: a model's decode and packed steps captured once per bucket and replayed (Note [Captured
// steps], step_graphs.cc). ModelRunner owns one while its step graphs are on; it fills the bucket's host
// layout and gets the step's logits back.
//
//   auto graphs = StepGraphs::Create(options, device, torch::kCUDA, storages, forward);
//   const StepBucket b = DecodeBucketOf(rows, span, max_batch, max_seq);   // step_graph_options.h
//   if ((*graphs)->Takes(b)) {
//     ASSIGN_OR_RETURN(at::Tensor logits, (*graphs)->Run(b, rows, fill));   // [rows, vocab] on the host
//   }
//
// Internal to the engine (it names libtorch types). Not thread-safe but for stats(): the runner's one
// thread runs it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/step_graph_options.h"
#include "profiler/iteration_hooks.h"
#include "runtime/compute_device.h"

namespace autouvm::engine {

class StepGraphs {
 public:
  // A decode step's inputs in the module's `step` order (Note [Packed steps], llama_module.cc): views of
  // one tensor that stays where it is, so that a graph reads each step's values where it was captured.
  struct Inputs {
    at::Tensor tokens, positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix;
  };
  // Runs the module's step on `in` over the KV pools' first `live` rows (-1: the whole pools, what a
  // graph of an unobserved step reads: Note [Captured steps]): logits [batch, vocab] on the device.
  using Forward = std::function<at::Tensor(const Inputs& in, int64_t live)>;
  using Bucket = StepBucket;

  // `reads`: the storages of every tensor the step reads or writes but its inputs (weights, buffers, KV
  // pools), which the caller keeps alive while this lives (not owned: a reference here would keep a
  // staged weight's storage past the execution that staged it); a graph is replayed only while each is
  // where it was at the capture. kDevice needs `device`. `vocab`: the logits' width (float32, as the
  // module's step returns them).
  static absl::StatusOr<std::unique_ptr<StepGraphs>> Create(const StepGraphOptions& options,
                                                            runtime::ComputeDevice* device, at::Device on,
                                                            std::vector<const c10::StorageImpl*> reads, Forward forward,
                                                            int64_t vocab);
  ~StepGraphs();

  // Whether steps of bucket `b` (Note [Decode steps by bucket], Note [Packed steps by bucket]) run by
  // graphs: not wider than options.max_batch, no more prompt tokens than options.max_tokens.
  bool Takes(Bucket b) const { return b.batch <= options_.max_batch && b.prompt_tokens <= options_.max_tokens; }
  // One step of bucket `b`. `fill` writes the step's rows into the host layout (StepLayout), which comes to
  // it as ResetStepLayout leaves it (padding throughout, logit_ix 0..batch-1 and then 0s); the logits of
  // the first `rows` of its batch + prompt_rows logit rows, on the host. A decode step runs eagerly the
  // first time (and is then captured), by its graph after; a packed step eagerly the first time, then
  // eagerly and captured, then by its graph. A bucket whose capture failed runs eagerly for good.
  absl::StatusOr<at::Tensor> Run(Bucket b, int64_t rows, const std::function<void(int64_t* host)>& fill);
  // Note [Staged passes captured] (runtime/executor_capture.cc): one observed decode step of bucket `b`,
  // which may follow a plan through the device buffer, the KV pools' first `live` rows in use. Its ops are
  // the same however it runs — the input copy from pinned host memory, the forward pass,
  // the logits' copy back to pinned host memory — so a plan recorded from it is followed op for op:
  // - `key` 0: eagerly, through views of the `live` rows (how: kNone).
  // - `key` nonzero (the plan's state, from which its passes repeat): the pass is captured with the copies
  //   the executor issues at its op boundaries, through views of the whole pools (Note [Staged graphs read
  //   the whole pools], step_graphs.cc), kept if `held()` then says OK, and launched (kCaptured); a later
  //   step of the same bucket and key replays it (kReplayed), whatever its `live`; another key captures
  //   again (one graph per bucket). kCaptureFailed: the error returned is the capture's or held()'s; nothing
  //   ran, and the pass runs again. The bucket is captured again at its next repeating key, until
  //   kStagedCaptureTries of its captures failed; then its staged steps run eagerly for good (TakesStaged()
  //   is false). An ABORTED held() (the plan's state moved under the capture: a coded copy the coder
  //   finished meanwhile, ModelExecution::StagedCaptureHeld) does not count: it is tried again regardless.
  absl::StatusOr<at::Tensor> RunStaged(Bucket b, uint64_t key, int64_t live, int64_t rows,
                                       const std::function<void(int64_t* host)>& fill,
                                       const std::function<absl::Status()>& held, profiler::PassGraph* how);
  static constexpr int kStagedCaptureTries = 3;
  // Whether staged steps of bucket `b` may run by RunStaged (fewer than kStagedCaptureTries of its captures
  // failed, those aborted not counted).
  bool TakesStaged(Bucket b) const;
  // Called by the runner for a step it ran without a graph while they are on.
  void CountEager();
  // How Run's last step ran: "decode: replayed", "decode: eager, then captured", "decode: eager, captured
  // again" (a read storage moved), "decode: eager, capture failed", "decode: eager (its capture failed before)";
  // a packed step's likewise ("packed: replayed", ...), and "packed: eager, the first of its bucket".
  const char* last_form() const { return last_form_; }
  StepGraphStats stats() const;  // from any thread

 private:
  struct Entry {
    at::Tensor host;    // the layout on the host (pinned on a device)
    at::Tensor inputs;  // where the graph reads it (the host tensor itself when emulated)
    Inputs views;
    at::Tensor out;       // the captured step's logits
    at::Tensor out_host;  // a staged pass's, copied to pinned host memory by its graph
    std::unique_ptr<runtime::ComputeDevice::CapturedWork> work;
    std::vector<const void*> addresses;  // of `reads_` at the capture
    bool failed = false;
    int64_t steps = 0;  // run through this entry
  };
  StepGraphs(const StepGraphOptions& options, runtime::ComputeDevice* device, at::Device on,
             std::vector<const c10::StorageImpl*> reads, Forward forward, int64_t vocab);
  Entry& EntryOf(Bucket b);
  void MakeEntry(Bucket b, Entry& e);
  static std::string Describe(Bucket b);  // for the log and last_error
  absl::StatusOr<std::unique_ptr<runtime::ComputeDevice::CapturedWork>> CaptureWork(
      const std::function<absl::Status()>& body);
  std::vector<const void*> Addresses() const;
  void Capture(Bucket b, Entry& e);

  const StepGraphOptions options_;
  runtime::ComputeDevice* const device_;
  const at::Device on_;
  const std::vector<const c10::StorageImpl*> reads_;
  const Forward forward_;
  const int64_t vocab_;
  // Declared before the entries: their captured work and tensors go before the arena they came from.
  std::unique_ptr<runtime::ComputeDevice::CaptureArena> arena_;
  std::map<Bucket, Entry> entries_;
  struct StagedEntry {
    uint64_t key = 0;
    Entry entry;
  };
  std::map<Bucket, StagedEntry> staged_;
  std::map<Bucket, int> staged_failed_;  // a bucket's failed captures, those aborted not counted
  const char* last_form_ = "";
  mutable absl::Mutex mu_;
  StepGraphStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autouvm::engine
