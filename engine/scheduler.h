// Scheduler: one per model. Queues generation requests and runs them with continuous batching on its
// own thread: the loop that drives the model's StepPolicy (engine/step_policy.h: what runs, and what a
// result does) on a StepRunner (engine/step_runner.h: ModelRunner, or a test's fake), with the
// profiler's hooks around each forward pass.
//
//   Scheduler sched(runner, tokenizer, options, clock);                      // starts its thread
//   ASSIGN_OR_RETURN(auto handle, sched.Submit(std::move(params), sink));    // RESOURCE_EXHAUSTED if full
//   handle->Cancel();                                                        // e.g. the client went away
//
// Thread-safety: Submit, RunIdleIteration, Stats and Shutdown may be called from any thread. The sink's
// methods are called from the scheduler's own thread, in order, OnFinish exactly once and last.
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
#include "base/clock.h"
#include "engine/generation_types.h"
#include "engine/step_policy.h"
#include "engine/step_runner.h"
#include "engine/step_turns.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::engine {

struct SchedulerOptions {
  int max_batch = 8;              // KV-cache slots = most requests generating at once
  int max_queue = 64;             // requests waiting for a slot before Submit says RESOURCE_EXHAUSTED
  int64_t prefill_tokens = 2048;  // most prompt tokens in one pass (PolicyOptions::prefill_tokens)
  // Note [Waiting for company]: the most an idle model's first request waits for others to share its
  // pass; the wait is also at most kQueueDelayShare of the last pass's time.
  absl::Duration max_queue_delay = absl::Milliseconds(10);
  IterationHooks* hooks = nullptr;  // must outlive the scheduler
  // Note [Passes by shares] (engine/step_turns.cc): the turn each pass takes among the models of the
  // device; null: passes take none. Must outlive the scheduler.
  const StepTurns::Seat* turns = nullptr;
  // Note [Steps sized by their cost] (engine/step_cost.cc); PolicyOptions' fields of the same names.
  bool size_steps = false;
  double step_growth = 2.0;
  absl::Duration max_step = absl::ZeroDuration();
  int64_t min_prefill_tokens = 64;
  // After this long with nothing to run (no request, no idle iteration), hooks->Sleep() is called once,
  // until the model has run again; zero: never.
  absl::Duration idle_sleep = absl::ZeroDuration();
};

struct SchedulerStats {
  int active = 0;
  int queued = 0;
  uint64_t requests_total = 0;
  uint64_t tokens_generated_total = 0;
  uint64_t decode_steps_total = 0;    // passes of decode rows only
  uint64_t prefill_passes_total = 0;  // passes of prompt chunks only
  uint64_t mixed_passes_total = 0;    // passes of both
  uint64_t batched_rows_total = 0;    // sum over passes of their decode rows
  uint64_t prefill_rows_total = 0;    // sum over passes of their prompt chunks
  uint64_t prefill_tokens_total = 0;  // sum over passes of their prompt tokens
  // Tokens computed (decode rows and prompt tokens) by the passes of each kind.
  uint64_t prefill_pass_tokens_total = 0;
  uint64_t decode_pass_tokens_total = 0;
  uint64_t mixed_pass_tokens_total = 0;
  // Their time: each pass and the hooks around it (a plan switch included), not its wait for a turn.
  double prefill_pass_seconds_total = 0;
  double decode_pass_seconds_total = 0;
  double mixed_pass_seconds_total = 0;
  uint64_t idle_passes_total = 0;     // passes with no request (RunIdleIteration)
  int64_t prompt_tokens_waiting = 0;  // prompt tokens of the requests queued or admitted, not prefilled yet
  int64_t kv_blocks_reserved = 0;     // KV-cache blocks the running requests hold (their whole lengths)
  int64_t kv_blocks_total = 0;        // in the pool (StepRunner::kv_blocks)
  // Note [Steps sized by their cost]: a pass of decode rows only, and what each token adds to a pass
  // that outgrows it (0: none has yet), in seconds, as learned from the passes run.
  double pass_floor_seconds = 0;
  double pass_token_seconds = 0;
  // Note [Passes by shares]: time the passes waited for their turn while other models' passes ran.
  double turn_wait_seconds_total = 0;
};

class Scheduler {
 public:
  // `runner`, `tokenizer` and `clock` must outlive the scheduler.
  Scheduler(StepRunner* runner, const tokenizer::Tokenizer* tokenizer, SchedulerOptions options,
            const base::Clock* clock);
  ~Scheduler();  // Shutdown(absl::ZeroDuration())

  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit(GenerationParams params, GenerationSink* sink);
  // Runs one iteration of this shape on free slots, with no request (its output is dropped), as soon as
  // enough slots are free: what Reprofile's `now` uses to profile without waiting for traffic.
  // INVALID_ARGUMENT if the shape cannot run here (batch above the slots, prompt beyond max_seq).
  absl::Status RunIdleIteration(IterationPhase phase, int batch, int64_t prompt_len);
  // Calls hooks->Sleep() on the scheduler's thread as soon as nothing runs (at once when idle), as
  // idle_sleep would later (Note [A model asleep], profiler/model_execution.cc).
  void RequestSleep();
  // Stops accepting work, lets running and queued requests finish for up to `grace`, then finishes the
  // rest with UNAVAILABLE and joins the thread.
  void Shutdown(absl::Duration grace);
  SchedulerStats Stats() const;

 private:
  // Run the next pass; finish everything (grace over); exit; sleep (idle for options.idle_sleep).
  enum class Step { kRun, kAbort, kStop, kSleep };
  void Loop();
  // Moves what the next pass may take from the shared queues into `admitted` (or, past the grace, out to
  // be finished; Note [Arrivals between passes]); waits for work while nothing runs.
  Step TakeWork(std::vector<std::unique_ptr<Sequence>>* admitted);
  // Runs `plan` on the runner with the hooks around it (again once if they ask), then updates the policy.
  void Run(const StepPlan& plan);

  StepRunner* const runner_;
  const SchedulerOptions options_;
  const base::Clock* const clock_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Sequence>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<IdleIteration> idle_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool sleep_requested_ ABSL_GUARDED_BY(mu_) = false;  // RequestSleep()
  absl::Time force_stop_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int active_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t requests_total_ ABSL_GUARDED_BY(mu_) = 0;  // the rest of the stats are the policy's counters
  absl::Duration last_pass_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();  // the last pass's time
  absl::Duration stats_turn_wait_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();

  // Owned by the scheduler thread; read in TakeWork's wait condition only while that thread waits.
  StepPolicy policy_;
  std::vector<float> logits_;
  absl::Time last_run_end_ = absl::InfinitePast();  // for Run's debug line
  bool asleep_ = false;                             // hooks->Sleep() was called and nothing has run since

  std::thread thread_;
};

// The share of the last pass's time an idle model's first request may wait for company.
inline constexpr double kQueueDelayShare = 0.05;

}  // namespace autouvm::engine
