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
// Sequences of identical prompts compute the prompt's whole blocks once: the later ones start with the
// first one's KV blocks and compute only their tails, in the pass of its last chunk (or, admitted after
// it, in their own first pass; Note [Identical prompts share their prefill], engine/step_policy.cc).
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
#include "engine/step_cost.h"
#include "engine/step_runner.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::engine {

struct Sequence;

// Note [Identical prompts share their prefill] (step_policy.cc): a prompt's whole blocks, short of its
// last token, that the running sequences of that prompt share: computed once, by the leader, reserved
// once for all of them.
struct SharedPrefix {
  int64_t tokens = 0;     // positions: a whole number of blocks
  int64_t kv_blocks = 0;  // tokens / block_tokens; no holder's Sequence::kv_blocks counts them
  int holders = 0;        // running sequences that hold them, or will once the leader computed them
  // Computes them; null once the pass of its last prompt chunk (and its siblings' tails) is planned, and
  // from the start when the group formed around a sequence that had them computed already.
  Sequence* leader = nullptr;
};

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
  int64_t kv_blocks = 0;  // KV-cache blocks reserved for it while it holds its slot (prefix aside)
  int32_t pending = -1;   // sampled and emitted, not yet written to the KV cache
  int64_t prefilled = 0;  // prompt tokens in the KV cache (a sibling's shared ones: its leader computes them)
  std::shared_ptr<SharedPrefix> prefix;  // the prompt blocks it shares with identical prompts (null: none)
  bool share_pending = false;            // to take them, in its first pass, from a holder that has them
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
  // Slots that start with another's blocks before the rows run (Note [Identical prompts share their
  // prefill], step_policy.cc): a sibling's, from its leader in the pass of the leader's last chunk, or
  // from a member that has them in the sibling's first pass.
  std::vector<KvShare> shares;
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
  std::vector<float>* logits = nullptr;        // vocab floats for each row that wants logits, in row order
  absl::Duration took = absl::ZeroDuration();  // the pass's wall time (zero: not measured)
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
  // Note [Steps sized by their cost] (engine/step_cost.cc): while sequences decode, a pass takes the
  // prompt tokens predicted to keep it within max(step_growth x the pass floor, max_step), and at least
  // min_prefill_tokens (and at most prefill_tokens). Off: prefill_tokens always.
  bool size_steps = false;
  double step_growth = 2.0;
  absl::Duration max_step = absl::ZeroDuration();
  int64_t min_prefill_tokens = 64;
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
  // Their time (StepResult::took: the pass and the hooks around it, a plan switch included; not the wait
  // for a turn), in seconds; written by the scheduler's thread alone.
  std::atomic<double> pass_seconds[3] = {};
  std::atomic<int64_t> prompt_tokens_waiting{0};  // a gauge: of the admitted requests not prefilled yet
  std::atomic<int64_t> kv_blocks_reserved{0};     // a gauge: KV-cache blocks the running requests hold
  // Note [Steps sized by their cost]: a pass of decode rows only, and what a token adds to a pass that
  // outgrows it (0: not known yet), in seconds; the prompt tokens the last pass could take.
  std::atomic<double> pass_floor_s{0};
  std::atomic<double> pass_token_s{0};
  std::atomic<int64_t> prompt_budget{0};
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
  const StepCost& cost() const { return cost_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_; }

  // Sequences taken from the queue (at most free_slots(), their KvBlocksFor within free_kv_blocks()):
  // each gets a slot and its blocks, its prompt prefilled from the next pass on; one whose prompt is a
  // running sequence's shares that one's blocks of it (and reserves fewer).
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
  // The prompt tokens a pass with `decode_rows` decode rows may take (Note [Steps sized by their cost]).
  int64_t PromptBudget(int64_t decode_rows) const;
  void Advance(Sequence* s, float* logits, absl::Time now);
  void Finish(Sequence* s, absl::Status status, FinishReason reason, absl::Time now);
  void RetireFinished();
  StepPlan IdlePlan(const IdleIteration& it) const;
  // Note [Identical prompts share their prefill]: `s` (being admitted) joins a running sequence of its
  // prompt, if any: one whose prefill is still to come (and waits for it) or done (and shares at once).
  void JoinIdenticalPrompt(Sequence* s);
  // A running member of `s`'s group other than `s` whose blocks hold the shared positions (its prefill
  // finished in an earlier pass; it may end in this one), or null.
  Sequence* PrefixHolder(const Sequence* s) const;
  // A sibling's prefill waits for its leader's last chunk.
  static bool WaitsForLeader(const Sequence* s) {
    return s->prefix != nullptr && s->prefix->leader != nullptr && s->prefix->leader != s;
  }
  // Adds `s`'s prompt rows to `plan`, from its next chunk on, within `budget`; false when the rows
  // behind it wait for the next pass. The pass of a leader's last chunk carries its siblings' tails.
  bool PlanPrompt(Sequence* s, StepPlan* plan, int64_t* budget, std::vector<Sequence*>* planned, absl::Time now);
  // `s` ended: it holds its prefix no more; when no running member holds the shared blocks (nor leads to
  // compute them), the first that waits for them leads.
  void LeavePrefix(Sequence* s);

  const PolicyOptions options_;
  const tokenizer::Tokenizer* const tokenizer_;
  std::vector<std::unique_ptr<Sequence>> active_;  // holding a slot
  std::deque<Sequence*> to_prefill_;               // admitted, prompt not wholly in the cache yet
  std::deque<IdleIteration> idle_;
  std::vector<int32_t> free_slots_;
  std::vector<int32_t> released_;
  int64_t reserved_kv_blocks_ = 0;
  PolicyCounters counters_;
  StepCost cost_;  // of the passes run so far
};

}  // namespace autouvm::engine
