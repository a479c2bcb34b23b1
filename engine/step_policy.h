// StepPolicy: the scheduler's decisions for one model — which forward pass runs next and what its
// result does — with no thread, lock, clock or model of its own. Time comes in as `now`, passes go out
// as StepPlans for the loop to run on a StepRunner (engine/scheduler.h), results come back through
// Update; the requests' sinks are its only output. Tests drive it with a fake runner and a fake clock.
//
// A round: the loop Admits the queued requests that fit the free KV-cache slots, then asks Schedule
// for the round's passes one by one until it says the round is over (admitting what arrived meanwhile
// between passes: Note [Arrivals between passes], engine/scheduler.cc) —
//   1. the admitted requests' prefills, in admission order, each into its slot: as many prompts in one
//      pass as its token budget holds (rows × the longest prompt: `prefill_tokens`), so requests arriving
//      together share one weight sweep; a prompt above the budget runs alone;
//   2. idle iterations (no request: Reprofile's `now`) whose batch fits the slots free by then;
//   3. one decode step over every running sequence (continuous batching: a request joins the decode
//      step of the round it was prefilled in, and leaves it when it finishes, freeing its slot).
// Before a sequence's pass its stop conditions are checked (deadline, cancellation); Update samples from
// the pass's logits, streams the token and its text, stops on a stop token, a stop string, max_tokens or
// max_seq, and finishes the request with its result.
//
//   StepPolicy policy({.slots = 8, .vocab_size = 320, .max_seq = 512, .bos_id = 256}, tokenizer);
//   policy.Admit(std::move(sequences), now);
//   while (auto plan = policy.Schedule(now)) policy.Update(*plan, RunOn(runner, *plan), now);
//
// Not thread-safe, but for counters(): the scheduler's loop owns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/generation_types.h"
#include "engine/sampler.h"
#include "engine/step_runner.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::engine {

// One request, from Submit to OnFinish.
struct Sequence {
  Sequence(GenerationParams p, GenerationSink* s, const tokenizer::Tokenizer* tok, absl::Time now);

  GenerationParams params;
  GenerationSink* sink;
  std::shared_ptr<RequestHandle> handle;
  Sampler sampler;
  tokenizer::TextStream text;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t slot = -1;
  int32_t pending = -1;  // sampled and emitted, not yet written to the KV cache
  int32_t generated = 0;
  absl::Time arrived, admitted, first_token, last_token;
  bool done = false;
};

// A forward pass without a request, on free slots (its output is dropped).
struct IdleIteration {
  IterationPhase phase;
  int batch;
  int64_t prompt_len;
};

struct StepPlan {
  struct Prompt {
    int32_t slot;
    std::vector<int32_t> tokens;
  };
  enum class Kind { kPrefill, kDecode, kIdle };
  Kind kind = Kind::kDecode;
  IterationPhase phase = IterationPhase::kDecode;
  std::vector<Prompt> prompts;              // a prefill's, one per sequence in `sequences`
  std::vector<StepRunner::DecodeRow> rows;  // a decode step's, one per sequence in `sequences`
  std::vector<Sequence*> sequences;         // whose pass it is (none for an idle iteration)
  int batch() const { return static_cast<int>(phase == IterationPhase::kPrefill ? prompts.size() : rows.size()); }
  // A prefill's longest prompt: the length its rows are padded to.
  int64_t prompt_len() const;
  // A prefill's prompts as the runner takes them (each from position 0); they point into `prompts`.
  std::vector<StepRunner::PrefillRow> PrefillRows() const;
  // Tokens the pass computes, padding included.
  int64_t tokens() const { return phase == IterationPhase::kPrefill ? batch() * prompt_len() : batch(); }
};

struct StepResult {
  absl::Status status;
  std::vector<float>* logits = nullptr;  // rows × vocab: each prompt's last position, or each decode row's
};

struct PolicyOptions {
  int slots = 8;  // KV-cache slots: most sequences running at once
  int64_t vocab_size = 0;
  int64_t max_seq = 0;
  int64_t bos_id = -1;
  // The most tokens one prefill pass computes, rows × the longest prompt (padding included). A prompt
  // longer than this runs alone.
  int64_t prefill_tokens = 2048;
};

// Counted before the sinks hear of what is counted, so that a client that saw its last token reads
// counters that include it. Atomic: Stats() reads them from any thread.
struct PolicyCounters {
  std::atomic<uint64_t> tokens_generated{0};
  std::atomic<uint64_t> decode_steps{0};
  std::atomic<uint64_t> batched_rows{0};  // over decode steps, the rows in each
  std::atomic<uint64_t> prefill_passes{0};
  std::atomic<uint64_t> prefill_rows{0};    // over prefill passes, the prompts in each
  std::atomic<uint64_t> prefill_tokens{0};  // over prefill passes, the tokens computed (padding included)
  std::atomic<uint64_t> idle_passes{0};
  std::atomic<int64_t> prompt_tokens_waiting{0};  // a gauge: of the admitted requests not prefilled yet
};

class StepPolicy {
 public:
  // `tokenizer` outlives the policy.
  StepPolicy(PolicyOptions options, const tokenizer::Tokenizer* tokenizer);

  int free_slots() const { return static_cast<int>(free_slots_.size()); }
  int running() const { return static_cast<int>(active_.size()); }  // sequences holding a slot
  const PolicyCounters& counters() const { return counters_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_; }

  // Sequences taken from the queue (at most free_slots()): each gets a slot and its prefill this round.
  void Admit(std::vector<std::unique_ptr<Sequence>> admitted, absl::Time now);
  // An idle iteration to run once its batch fits the free slots (checked by the caller: batch within
  // 1..slots, a prefill's prompt within max_seq).
  void QueueIdle(const IdleIteration& it) { idle_.push_back(it); }
  bool idle_fits() const { return !idle_.empty() && idle_.front().batch <= free_slots(); }

  // The round's next pass, or nothing once the round is over.
  std::optional<StepPlan> Schedule(absl::Time now);
  // What `plan`'s pass gave.
  void Update(const StepPlan& plan, const StepResult& result, absl::Time now);
  // Finishes every running sequence, and `queued` (taken from the queue, never admitted), with `status`
  // (shutdown past its grace).
  void FinishAll(const absl::Status& status, std::vector<std::unique_ptr<Sequence>> queued, absl::Time now);

 private:
  bool CheckStopConditions(Sequence* s, absl::Time now);
  void Advance(Sequence* s, float* logits, absl::Time now);
  void Finish(Sequence* s, absl::Status status, FinishReason reason, absl::Time now);
  void RetireFinished();
  StepPlan IdlePlan(const IdleIteration& it) const;

  const PolicyOptions options_;
  const tokenizer::Tokenizer* const tokenizer_;
  std::vector<std::unique_ptr<Sequence>> active_;  // holding a slot
  std::deque<Sequence*> to_prefill_;               // admitted this round, not prefilled yet
  std::deque<IdleIteration> idle_;
  std::vector<int32_t> free_slots_;
  bool decoded_ = false;  // this round's decode step was planned
  PolicyCounters counters_;
};

}  // namespace autouvm::engine
