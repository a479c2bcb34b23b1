// Scheduler: one per model. Queues generation requests and runs them with continuous batching: each
// request is prefilled alone into a free KV-cache slot, then joins the batch that shares every decode
// step, and leaves it when it finishes, freeing the slot for the next queued request.
//
//   Scheduler sched(runner, tokenizer, options, clock);                      // starts its thread
//   ASSIGN_OR_RETURN(auto handle, sched.Submit(std::move(params), sink));    // RESOURCE_EXHAUSTED if full
//   handle->Cancel();                                                        // e.g. the client went away
//
// Thread-safety: Submit, Cancel, Stats and Shutdown may be called from any thread. The sink's methods are
// called from the scheduler's own thread, in order, OnFinish exactly once and last.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/clock.h"
#include "server/model_runner.h"
#include "server/sampler.h"
#include "server/tokenizer.h"

namespace autouvm::server {

enum class FinishReason { kStop, kLength, kCancelled };

struct GenerationParams {
  std::string request_id;
  std::vector<int32_t> prompt;  // already tokenized, bos included, validated
  int32_t max_tokens = 16;
  SamplingConfig sampling;
  std::vector<int32_t> stop_token_ids;  // eos is added here by the caller unless ignore_eos
  std::vector<std::string> stop_strings;
  absl::Time deadline = absl::InfiniteFuture();
};

struct GenerationResult {
  absl::Status status;  // OK, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE (shutdown) or INTERNAL
  FinishReason reason = FinishReason::kStop;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double queue_ms = 0;
  double time_to_first_token_ms = 0;
  double per_token_ms = 0;
  double total_ms = 0;
};

class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // One generated token (never a stop token) and the text it completed (possibly empty).
  virtual void OnToken(int32_t token, const std::string& text) = 0;
  // Final call: any held-back text, then the result. The sink may be destroyed once this returns.
  virtual void OnFinish(const std::string& tail_text, const GenerationResult& result) = 0;
};

class RequestHandle {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

enum class IterationPhase { kPrefill, kDecode };

// Called on the scheduler's thread around every model iteration (a prefill or a decode step): what the
// profiler uses to record or check an iteration (server/model_profiler.h).
class IterationHooks {
 public:
  virtual ~IterationHooks() = default;
  virtual void BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) = 0;
  // True: the iteration's result must not be used, run it again (once; its hooks are called again).
  virtual bool AfterIteration(const absl::Status& status) = 0;
};

struct SchedulerOptions {
  int max_batch = 8;                // KV-cache slots = most requests generating at once
  int max_queue = 64;               // requests waiting for a slot before Submit says RESOURCE_EXHAUSTED
  IterationHooks* hooks = nullptr;  // must outlive the scheduler
};

struct SchedulerStats {
  int active = 0;
  int queued = 0;
  uint64_t requests_total = 0;
  uint64_t tokens_generated_total = 0;
  uint64_t decode_steps_total = 0;
  uint64_t batched_rows_total = 0;  // sum over decode steps of the rows in the step
};

class Scheduler {
 public:
  // `runner`, `tokenizer` and `clock` must outlive the scheduler.
  Scheduler(ModelRunner* runner, const Tokenizer* tokenizer, SchedulerOptions options, const runtime::Clock* clock);
  ~Scheduler();  // Shutdown(absl::ZeroDuration())

  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit(GenerationParams params, GenerationSink* sink);
  // Runs one iteration of this shape on free slots, with no request (its output is dropped), as soon as
  // enough slots are free: what Reprofile's `now` uses to profile without waiting for traffic.
  // INVALID_ARGUMENT if the shape cannot run here (batch above the slots, prompt beyond max_seq).
  absl::Status RunIdleIteration(IterationPhase phase, int batch, int64_t prompt_len);
  // Stops accepting work, lets running and queued requests finish for up to `grace`, then finishes the
  // rest with UNAVAILABLE and joins the thread.
  void Shutdown(absl::Duration grace);
  SchedulerStats Stats() const;

 private:
  struct Request;
  enum class Step { kRun, kAbort, kStop };  // serve the batch; finish everything (grace over); exit
  void Loop();
  Step AdmitQueued(std::vector<std::unique_ptr<Request>>* admitted);
  void RunPrefill(Request* r);
  void RunDecodeStep();
  // Samples from `logits`, emits the token, and decides whether `r` is done.
  void Advance(Request* r, std::vector<float>::iterator logits_begin);
  void Finish(Request* r, absl::Status status, FinishReason reason);
  bool CheckStopConditions(Request* r);
  void RetireFinished();
  struct IdleIteration {
    IterationPhase phase;
    int batch;
    int64_t prompt_len;
  };
  void RunIdle(const IdleIteration& it);
  absl::StatusOr<std::vector<float>> Prefill(int32_t slot, absl::Span<const int32_t> tokens);
  absl::Status Decode(absl::Span<const ModelRunner::DecodeRow> rows);

  ModelRunner* const runner_;
  const Tokenizer* const tokenizer_;
  const SchedulerOptions options_;
  const runtime::Clock* const clock_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Request>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time force_stop_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int active_count_ ABSL_GUARDED_BY(mu_) = 0;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
  std::deque<IdleIteration> idle_ ABSL_GUARDED_BY(mu_);

  // Owned by the scheduler thread only.
  std::vector<std::unique_ptr<Request>> active_;
  std::vector<int32_t> free_slots_;
  std::vector<float> logits_;

  std::thread thread_;
};

}  // namespace autouvm::server
