// StepPolicy: the scheduler's decisions for one model — which forward pass runs next and what its
// result does — with no thread, lock, clock or model of its own. Time comes in as `now`, passes go out
// as StepPlans for the loop to run on a StepRunner (engine/scheduler.h), results come back through
// Update; the requests' sinks are its only output. Tests drive it with a fake runner and a fake clock.
//
// Each pass: the loop Admits the queued requests that fit the free KV-cache slots, then asks Schedule
// for the next pass, runs it and gives its result to Update. A pass is one packed step (Note [Packed
// steps], engine/llama_module.cc) that carries, within one weight sweep,
//   1. the next token of every generating sequence (a decode row each: continuous batching), and
//   2. the prompts of the admitted requests, in admission order, while the step's prompt-token budget
//      (`prefill_tokens`) lasts: a prompt longer than what is left is split, its first chunk now and the
//      rest in the next passes (chunked prefill); the pass that computes a prompt's last chunk gives the
//      request its first token,
// or, before it, an idle iteration (no request: Reprofile's `now`) once its batch fits the free slots.
// A pass's phase is what it carries: decode rows only (decode), prompt chunks only (prefill), or both
// (mixed); the profiler keys its profiles by it. Before a sequence's part of a pass its stop conditions
// are checked (deadline, cancellation); Update samples from the pass's logits, streams the token and its
// text, stops on a stop token, a stop string, max_tokens or max_seq, and finishes the request with its
// result.
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
#include <utility>
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
  std::vector<int32_t> tokens;    // prompt, then generated tokens
  std::vector<float> raw_logits;  // with logprobs: the pass's logits before the sampler changed them
  int32_t slot = -1;
  int64_t kv_blocks = 0;  // KV-cache blocks reserved for it while it holds its slot
  int32_t pending = -1;   // sampled and emitted, not yet written to the KV cache
  int64_t prefilled = 0;  // prompt tokens in the KV cache
  int32_t generated = 0;
  absl::Time arrived, admitted, first_token, last_token;
  bool done = false;
};

// A forward pass without a request, on free slots (its output is dropped): `batch` rows of prompt_len
// tokens (prefill), of one token (decode), or batch - 1 decode rows and one prompt of prompt_len (mixed).
struct IdleIteration {
  IterationPhase phase;
  int batch;
  int64_t prompt_len;
};
// The KV blocks of `block_tokens` positions its rows take for its pass.
int64_t IdleKvBlocks(const IdleIteration& it, int64_t block_tokens);

struct StepPlan {
  struct Row {
    int32_t slot;
    std::vector<int32_t> tokens;  // a decode row's one token, or a prompt chunk
    int64_t start_pos = 0;
    bool decode = false;
    bool logits = true;  // a decode row, or a prompt's last chunk
  };
  enum class Kind { kServe, kIdle };
  Kind kind = Kind::kServe;
  IterationPhase phase = IterationPhase::kDecode;
  std::vector<Row> rows;             // decode rows first, then prompt chunks
  std::vector<Sequence*> sequences;  // whose each row is (none for an idle iteration)
  int batch() const { return static_cast<int>(rows.size()); }
  int decode_rows() const;
  // The longest prompt chunk (0: none).
  int64_t prompt_len() const;
  // Prompt tokens computed.
  int64_t prompt_tokens() const;
  // Tokens the pass computes.
  int64_t tokens() const { return decode_rows() + prompt_tokens(); }
  // The rows as the runner takes them; they point into `rows`.
  std::vector<StepRunner::Row> RunnerRows() const;
};

struct StepResult {
  absl::Status status;
  std::vector<float>* logits = nullptr;  // vocab floats for each row that wants logits, in row order
};

struct PolicyOptions {
  int slots = 8;  // KV-cache slots: most sequences running at once
  int64_t vocab_size = 0;
  int64_t max_seq = 0;
  int64_t bos_id = -1;
  // The most prompt tokens one pass computes, besides its decode rows; a prompt longer than what is left
  // of it is split into chunks over several passes.
  int64_t prefill_tokens = 2048;
  // The KV cache's blocks (StepRunner::kv_block_tokens, kv_blocks): a sequence is admitted only when the
  // blocks of its whole length are free (0: no blocks to count).
  int64_t kv_block_tokens = 0;
  int64_t kv_blocks = 0;
};

// Counted before the sinks hear of what is counted, so that a client that saw its last token reads
// counters that include it. Atomic: Stats() reads them from any thread.
struct PolicyCounters {
  std::atomic<uint64_t> tokens_generated{0};
  std::atomic<uint64_t> decode_steps{0};    // passes of decode rows only
  std::atomic<uint64_t> prefill_passes{0};  // passes of prompt chunks only
  std::atomic<uint64_t> mixed_passes{0};    // passes of both
  std::atomic<uint64_t> batched_rows{0};    // over all passes, the decode rows in each
  std::atomic<uint64_t> prefill_rows{0};    // over all passes, the prompt chunks in each
  std::atomic<uint64_t> prefill_tokens{0};  // over all passes, the prompt tokens computed
  std::atomic<uint64_t> idle_passes{0};
  // Tokens computed by the passes of each phase (indexed by IterationPhase): decode rows and prompt tokens.
  std::atomic<uint64_t> pass_tokens[3] = {};
  std::atomic<int64_t> prompt_tokens_waiting{0};  // a gauge: of the admitted requests not prefilled yet
  std::atomic<int64_t> kv_blocks_reserved{0};     // a gauge: KV-cache blocks the running requests hold
};

class StepPolicy {
 public:
  // `tokenizer` outlives the policy.
  StepPolicy(PolicyOptions options, const tokenizer::Tokenizer* tokenizer);

  int free_slots() const { return static_cast<int>(free_slots_.size()); }
  // Note [Reserving KV blocks]: the blocks a request's whole length needs (its prompt and max_tokens,
  // within max_seq); those not reserved by admitted sequences.
  int64_t KvBlocksFor(const GenerationParams& params) const;
  int64_t free_kv_blocks() const { return options_.kv_blocks - reserved_kv_blocks_; }
  // Slots given up since the last call (sequences that ended, idle iterations' slots): the runner's to
  // Release.
  std::vector<int32_t> TakeReleased() { return std::exchange(released_, {}); }
  int running() const { return static_cast<int>(active_.size()); }  // sequences holding a slot
  const PolicyCounters& counters() const { return counters_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_; }

  // Sequences taken from the queue (at most free_slots(), their KvBlocksFor within free_kv_blocks()):
  // each gets a slot and its blocks, its prompt prefilled from the next pass on.
  void Admit(std::vector<std::unique_ptr<Sequence>> admitted, absl::Time now);
  // An idle iteration to run once its batch fits the free slots (checked by the caller: batch within
  // 1..slots, a prefill's prompt within max_seq).
  void QueueIdle(const IdleIteration& it) { idle_.push_back(it); }
  bool idle_fits() const;

  // The next pass, or nothing when no sequence runs and no idle iteration fits.
  std::optional<StepPlan> Schedule(absl::Time now);
  // What `plan`'s pass gave.
  void Update(const StepPlan& plan, const StepResult& result, absl::Time now);
  // Finishes every running sequence, and `queued` (taken from the queue, never admitted), with `status`
  // (shutdown past its grace).
  void FinishAll(const absl::Status& status, std::vector<std::unique_ptr<Sequence>> queued, absl::Time now);

 private:
  // A request's prompt and max_tokens, within max_seq.
  int64_t WholeLength(const GenerationParams& params) const;
  bool CheckStopConditions(Sequence* s, absl::Time now);
  void Advance(Sequence* s, float* logits, absl::Time now);
  void Finish(Sequence* s, absl::Status status, FinishReason reason, absl::Time now);
  void RetireFinished();
  StepPlan IdlePlan(const IdleIteration& it) const;

  const PolicyOptions options_;
  const tokenizer::Tokenizer* const tokenizer_;
  std::vector<std::unique_ptr<Sequence>> active_;  // holding a slot
  std::deque<Sequence*> to_prefill_;               // admitted, prompt not wholly in the cache yet
  std::deque<IdleIteration> idle_;
  std::vector<int32_t> free_slots_;
  std::vector<int32_t> released_;
  int64_t reserved_kv_blocks_ = 0;
  PolicyCounters counters_;
};

}  // namespace autouvm::engine
