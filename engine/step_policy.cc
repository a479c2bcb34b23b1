#include "engine/step_policy.h"

#include <algorithm>

#include "base/check.h"
#include "engine/kv_blocks.h"
#include "engine/logprobs.h"

namespace autouvm::engine {

Sequence::Sequence(GenerationParams p, GenerationSink* s, const tokenizer::Tokenizer* tok, absl::Time now)
    : params(std::move(p)),
      sink(s),
      handle(std::make_shared<RequestHandle>()),
      sampler(params.sampling),
      text(tok, params.stop_strings),
      tokens(params.prompt),
      arrived(now) {}

StepPolicy::StepPolicy(PolicyOptions options, const tokenizer::Tokenizer* tokenizer)
    : options_(options), tokenizer_(tokenizer) {
  for (int s = options_.slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

// Note [Reserving KV blocks]: the KV cache's pool is sized for the positions live at once (Note [Block
// KV cache], engine/kv_blocks.cc). Admission reserves the blocks of the request's whole length (the
// runner takes them as the sequence grows: Note [KV blocks taken as sequences grow]), so a pass never
// finds the pool full and
// no sequence is ever stopped or recomputed to make room: requests wait in the queue (in order) until
// both a slot and their blocks are free. What a reservation gives up is the blocks of tokens a request
// may not generate (a stop token before max_tokens): they are free again when it ends.
int64_t StepPolicy::KvBlocksFor(const GenerationParams& params) const {
  if (options_.kv_block_tokens <= 0) return 0;
  return BlocksFor(WholeLength(params), options_.kv_block_tokens);
}

int64_t StepPolicy::WholeLength(const GenerationParams& params) const {
  return std::min<int64_t>(static_cast<int64_t>(params.prompt.size()) + params.max_tokens, options_.max_seq);
}

bool StepPolicy::idle_fits() const {
  if (idle_.empty() || idle_.front().batch > free_slots()) return false;
  if (options_.kv_block_tokens <= 0) return true;
  return IdleKvBlocks(idle_.front(), options_.kv_block_tokens) <= free_kv_blocks();
}

int64_t IdleKvBlocks(const IdleIteration& it, int64_t block_tokens) {
  const int64_t one = BlocksFor(1, block_tokens), prompt = BlocksFor(it.prompt_len, block_tokens);
  switch (it.phase) {
    case IterationPhase::kPrefill:
      return it.batch * prompt;
    case IterationPhase::kMixed:
      return (it.batch - 1) * one + prompt;
    default:
      return it.batch * one;
  }
}

void StepPolicy::Admit(std::vector<std::unique_ptr<Sequence>> admitted, absl::Time now) {
  AUTOUVM_CHECK_LE(admitted.size(), free_slots_.size()) << "admitted more requests than there are free slots";
  for (auto& s : admitted) {
    s->kv_blocks = KvBlocksFor(s->params);
    JoinIdenticalPrompt(s.get());
    AUTOUVM_CHECK_LE(s->kv_blocks, free_kv_blocks()) << "admitted a request whose KV blocks are not free";
    reserved_kv_blocks_ += s->kv_blocks;
    counters_.kv_blocks_reserved = reserved_kv_blocks_;
    s->admitted = now;
    s->slot = free_slots_.back();
    free_slots_.pop_back();
    to_prefill_.push_back(s.get());
    counters_.prompt_tokens_waiting += static_cast<int64_t>(s->params.prompt.size()) - s->prefilled;
    active_.push_back(std::move(s));
  }
}

// Note [Identical prompts share their prefill]: OpenAI's `n` (http/openai_generate.cc submits n engine
// requests of one prompt), identical gRPC requests and equal prompts of one batch all compute the same
// keys and values: under causal attention a position's K/V depends on the tokens up to it alone. So a
// sequence admitted with the prompt of a running one shares that one's KV blocks of the prompt: its first
// `shared` = floor((prompt - 1) / block_tokens) x block_tokens positions are the other's blocks (KvShare;
// KvBlocks::Share: a block held by several tables goes back to the pool when the last one gives it up),
// and it computes only its tail [shared, prompt) itself: at least the prompt's last token, whose logits
// give it its first token, sampled by its own sampler (its seed). Whole blocks only: the other goes on
// writing the block of its prompt's last positions, then its own tokens, which a sibling must not see;
// a sibling's own positions start in a block of its own, and the shared blocks are never written again.
// (shared 0, a prompt within one block: nothing is shared.)
//
// Admitted together (or while the other's prefill is still to come), a sibling waits for the other, its
// leader: it is not scheduled while the leader's prompt is prefilled, and the pass that carries the
// leader's last chunk carries the siblings' tails as prompt chunks, with the shares the runner makes
// before it packs the rows (StepPlan::shares), so that all n get their first token in that pass and one
// weight sweep computes prompt + (n - 1) x tail prompt tokens where it computed n x prompt. Every row's
// keys and values are written before any row attends (Note [Packed steps], engine/llama_module.cc), so
// a tail attends to shared positions its leader computes in the same pass. The tails count toward
// prefill_tokens: those that do not fit what the leader's last chunk left of the pass share its blocks
// in the next passes. Admitted after the other's prefill (the n requests of one HTTP call are submitted
// one by one, and an idle model's loop may admit the first alone: Note [Waiting for company]), a sibling
// shares in its own first pass from any running member of its prompt that has the blocks.
//
// Reservation (Note [Reserving KV blocks]): the shared blocks are reserved once, by the group's
// SharedPrefix, not by each member: a sibling reserves its whole length less them, and the group's
// reservation goes when its last holder ends, whichever that is (the leader may finish while siblings
// decode on over its blocks). When no running member has the blocks or computes them any more (a leader
// cancelled, past its deadline or failed before its last chunk; the last holder ending before a sibling
// took them), the first sibling still waiting computes the whole prompt in blocks of its own, the group's
// reservation covering the shared ones, and the others wait for it: every sibling computing its own
// prompt instead would need the shared blocks again for each, more than the leader gives back. The lead
// changes hands when the old one is retired, after its last pass, so its blocks are back in the pool
// before the new leader takes its own. A sibling that stops while it waits leaves as any sequence does.
//
// Nothing is copied and no op is added: a sibling's rows point at the leader's blocks, so the pass's ops,
// and the profiler's traces and plans, are those of any pass of its rows. A prompt is shared only while
// a sequence of it runs (no cache of the prompts of requests that ended).
void StepPolicy::JoinIdenticalPrompt(Sequence* s) {
  const int64_t block = options_.kv_block_tokens;
  const int64_t prompt = static_cast<int64_t>(s->params.prompt.size());
  if (block <= 0 || prompt <= block) return;
  const int64_t shared = (prompt - 1) / block * block;
  auto join = [&](Sequence* other, Sequence* leader) {
    if (other->prefix == nullptr) {
      other->prefix = std::make_shared<SharedPrefix>(
          SharedPrefix{.tokens = shared, .kv_blocks = shared / block, .holders = 1, .leader = leader});
      other->kv_blocks -= other->prefix->kv_blocks;  // the group's now: reserved as before
    }
    s->prefix = other->prefix;
    ++s->prefix->holders;
    s->kv_blocks -= s->prefix->kv_blocks;
    s->prefilled = shared;
    s->share_pending = s->prefix->leader == nullptr;
  };
  // One whose prefill is to come (and that is no sibling itself): s waits for its last chunk.
  for (Sequence* leader : to_prefill_) {
    if (leader->done || (leader->prefix != nullptr && leader->prefix->leader != leader)) continue;
    if (leader->params.prompt != s->params.prompt) continue;
    join(leader, leader);
    return;
  }
  // One whose prefill is done, its blocks computed: s shares them in its first pass.
  for (const auto& other : active_) {
    if (other->done || other->prefilled != prompt || other->params.prompt != s->params.prompt) continue;
    join(other.get(), nullptr);
    return;
  }
}

Sequence* StepPolicy::PrefixHolder(const Sequence* s) const {
  const int64_t prompt = static_cast<int64_t>(s->params.prompt.size());
  for (const auto& t : active_) {
    if (t.get() != s && !t->done && t->prefix == s->prefix && t->prefilled == prompt) return t.get();
  }
  return nullptr;
}

void StepPolicy::LeavePrefix(Sequence* s) {
  SharedPrefix& prefix = *s->prefix;
  --prefix.holders;
  if (prefix.leader == s) prefix.leader = nullptr;  // it ended before its last chunk
  if (prefix.leader == nullptr && prefix.holders > 0 && PrefixHolder(s) == nullptr) {
    // No running member has the blocks or computes them: the first that waits for them computes the
    // prompt, the others wait for its last chunk.
    for (Sequence* next : to_prefill_) {
      if (next->done || next->prefix != s->prefix) continue;
      next->share_pending = false;
      if (prefix.leader != nullptr) continue;
      prefix.leader = next;
      counters_.prompt_tokens_waiting += next->prefilled;
      next->prefilled = 0;
    }
  }
  if (prefix.holders == 0) {
    reserved_kv_blocks_ -= prefix.kv_blocks;
    counters_.kv_blocks_reserved = reserved_kv_blocks_;
  }
  s->prefix.reset();
}

int StepPlan::decode_rows() const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.decode; }));
}

int64_t StepPlan::prompt_len() const {
  size_t longest = 0;
  for (const Row& r : rows) {
    if (!r.decode) longest = std::max(longest, r.tokens.size());
  }
  return static_cast<int64_t>(longest);
}

int64_t StepPlan::prompt_tokens() const {
  int64_t n = 0;
  for (const Row& r : rows) n += r.decode ? 0 : static_cast<int64_t>(r.tokens.size());
  return n;
}

std::vector<StepRunner::Row> StepPlan::RunnerRows() const {
  std::vector<StepRunner::Row> out;
  out.reserve(rows.size());
  for (const Row& r : rows) out.push_back({r.slot, r.tokens, r.start_pos, r.decode, r.logits});
  return out;
}

std::optional<StepPlan> StepPolicy::Schedule(absl::Time now) {
  // Whatever finished is retired already: by the last Update, by FinishAll, or below.
  if (idle_fits()) {
    const IdleIteration it = idle_.front();
    idle_.pop_front();
    return IdlePlan(it);
  }
  StepPlan plan;
  for (auto& s : active_) {
    if (s->done || s->pending < 0 || CheckStopConditions(s.get(), now)) continue;
    plan.rows.push_back({.slot = s->slot,
                         .tokens = {s->pending},
                         .start_pos = static_cast<int64_t>(s->tokens.size()) - 1,
                         .decode = true});
    plan.sequences.push_back(s.get());
  }
  const bool decoding = !plan.rows.empty();
  int64_t budget = PromptBudget(static_cast<int64_t>(plan.rows.size()));
  counters_.prompt_budget = budget;
  std::vector<Sequence*> planned;  // leave to_prefill_: their prompts' last rows are planned, or they stopped
  for (size_t i = 0; i < to_prefill_.size() && budget > 0; ++i) {
    Sequence* s = to_prefill_[i];
    if (std::find(planned.begin(), planned.end(), s) != planned.end()) continue;  // a sibling, with its leader
    if (CheckStopConditions(s, now)) {
      counters_.prompt_tokens_waiting -= static_cast<int64_t>(s->params.prompt.size()) - s->prefilled;
      planned.push_back(s);
      continue;
    }
    if (WaitsForLeader(s)) continue;  // its tail rides in the pass of its leader's last chunk
    if (s->share_pending && PrefixHolder(s) == nullptr) continue;  // computed in this pass: shared in the next
    if (!PlanPrompt(s, &plan, &budget, &planned, now)) break;
  }
  auto leaves = [&planned](const Sequence* s) { return std::find(planned.begin(), planned.end(), s) != planned.end(); };
  to_prefill_.erase(std::remove_if(to_prefill_.begin(), to_prefill_.end(), leaves), to_prefill_.end());
  if (plan.rows.empty()) {
    RetireFinished();
    return std::nullopt;
  }
  const bool prompts = !plan.rows.back().decode;  // decode rows come first
  plan.phase = !prompts ? IterationPhase::kDecode : decoding ? IterationPhase::kMixed : IterationPhase::kPrefill;
  return plan;
}

// Note [Steps sized by their cost] (engine/step_cost.cc).
int64_t StepPolicy::PromptBudget(int64_t decode_rows) const {
  if (!options_.size_steps || decode_rows == 0) return options_.prefill_tokens;
  const int64_t fits = cost_.TokensWithin(std::max(cost_.floor() * options_.step_growth, options_.max_step));
  if (fits < 0) return options_.prefill_tokens;
  return std::clamp(fits, std::min(options_.min_prefill_tokens, options_.prefill_tokens), options_.prefill_tokens);
}

bool StepPolicy::PlanPrompt(Sequence* s, StepPlan* plan, int64_t* budget, std::vector<Sequence*>* planned,
                            absl::Time now) {
  const int64_t prompt = static_cast<int64_t>(s->params.prompt.size());
  const int64_t left = prompt - s->prefilled;
  const int64_t take = std::min(left, *budget);
  const auto from = s->params.prompt.begin() + s->prefilled;
  plan->rows.push_back({.slot = s->slot,
                        .tokens = std::vector<int32_t>(from, from + take),
                        .start_pos = s->prefilled,
                        .logits = take == left});
  plan->sequences.push_back(s);
  if (s->share_pending) {  // its first chunk: the shared blocks are a holder's
    const Sequence* holder = PrefixHolder(s);
    AUTOUVM_CHECK(holder != nullptr) << "a request that shares a prompt's blocks has no one to share them from";
    plan->shares.push_back({.src_slot = holder->slot, .dst_slot = s->slot, .tokens = s->prefix->tokens});
    s->share_pending = false;
  }
  *budget -= take;
  if (take < left) return false;  // its next chunk opens the next pass's prompts
  planned->push_back(s);
  if (s->prefix == nullptr || s->prefix->leader != s) return true;
  // A leader's last chunk (Note [Identical prompts share their prefill]): its siblings' tails ride in
  // its pass as far as the budget goes; the others share its blocks in the next passes.
  s->prefix->leader = nullptr;
  for (const auto& t : active_) {
    if (t.get() == s || t->done || t->prefix != s->prefix) continue;
    const int64_t tail = prompt - t->prefilled;
    if (CheckStopConditions(t.get(), now)) {
      counters_.prompt_tokens_waiting -= tail;
      planned->push_back(t.get());
    } else if (tail > *budget) {
      t->share_pending = true;
    } else {
      const auto at = t->params.prompt.begin() + t->prefilled;
      plan->rows.push_back(
          {.slot = t->slot, .tokens = std::vector<int32_t>(at, t->params.prompt.end()), .start_pos = t->prefilled});
      plan->sequences.push_back(t.get());
      plan->shares.push_back({.src_slot = s->slot, .dst_slot = t->slot, .tokens = s->prefix->tokens});
      *budget -= tail;
      planned->push_back(t.get());
    }
  }
  return true;
}

// Free slots only: the runner takes their blocks for the pass and they are released after it.
StepPlan StepPolicy::IdlePlan(const IdleIteration& it) const {
  const int32_t bos = static_cast<int32_t>(std::max<int64_t>(options_.bos_id, 0));
  StepPlan plan{.kind = StepPlan::Kind::kIdle, .phase = it.phase};
  for (int i = 0; i < it.batch; ++i) {
    const int32_t slot = free_slots_[free_slots_.size() - 1 - i];
    // A mixed iteration: batch - 1 decode rows first, then one prompt.
    if (it.phase == IterationPhase::kPrefill || (it.phase == IterationPhase::kMixed && i == it.batch - 1)) {
      plan.rows.push_back({.slot = slot, .tokens = std::vector<int32_t>(static_cast<size_t>(it.prompt_len), bos)});
    } else {
      plan.rows.push_back({.slot = slot, .tokens = {bos}, .start_pos = 0, .decode = true});
    }
  }
  return plan;
}

void StepPolicy::Update(const StepPlan& plan, const StepResult& result, absl::Time now) {
  if (result.status.ok() && result.took > absl::ZeroDuration()) {
    cost_.Observe(plan.decode_rows(), plan.prompt_tokens(), result.took);
    counters_.pass_floor_s = absl::ToDoubleSeconds(cost_.floor());
    counters_.pass_token_s = absl::ToDoubleSeconds(cost_.per_token().value_or(absl::ZeroDuration()));
  }
  if (plan.kind == StepPlan::Kind::kIdle) {
    ++counters_.idle_passes;
    for (const StepPlan::Row& row : plan.rows) released_.push_back(row.slot);
    return;  // output dropped; a failure shows in the profile state
  }
  switch (plan.phase) {
    case IterationPhase::kDecode:
      ++counters_.decode_steps;
      break;
    case IterationPhase::kPrefill:
      ++counters_.prefill_passes;
      break;
    case IterationPhase::kMixed:
      ++counters_.mixed_passes;
      break;
  }
  const int decode_rows = plan.decode_rows();
  counters_.batched_rows += static_cast<uint64_t>(decode_rows);
  counters_.prefill_rows += plan.rows.size() - static_cast<size_t>(decode_rows);
  counters_.prefill_tokens += static_cast<uint64_t>(plan.prompt_tokens());
  counters_.pass_tokens[static_cast<int>(plan.phase)] += static_cast<uint64_t>(plan.tokens());
  std::atomic<double>& seconds = counters_.pass_seconds[static_cast<int>(plan.phase)];
  seconds.store(seconds.load(std::memory_order_relaxed) + absl::ToDoubleSeconds(result.took),
                std::memory_order_relaxed);
  const size_t vocab = static_cast<size_t>(options_.vocab_size);
  size_t wanted = 0;  // logits rows used so far
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    Sequence* s = plan.sequences[i];
    const StepPlan::Row& row = plan.rows[i];
    if (!row.decode) {  // no longer waiting, whether the pass computed them or failed
      s->prefilled += static_cast<int64_t>(row.tokens.size());
      counters_.prompt_tokens_waiting -= static_cast<int64_t>(row.tokens.size());
    }
    if (!result.status.ok()) {
      Finish(s, result.status, FinishReason::kStop, now);
    } else if (row.logits) {
      Advance(s, result.logits->data() + wanted++ * vocab, now);
    }
  }
  RetireFinished();  // the slots of those that finished are free for the next pass's admissions
}

void StepPolicy::FinishAll(const absl::Status& status, std::vector<std::unique_ptr<Sequence>> queued, absl::Time now) {
  for (auto& s : active_) Finish(s.get(), status, FinishReason::kCancelled, now);
  for (auto& s : queued) Finish(s.get(), status, FinishReason::kCancelled, now);
  to_prefill_.clear();
  counters_.prompt_tokens_waiting = 0;
  RetireFinished();
}

bool StepPolicy::CheckStopConditions(Sequence* s, absl::Time now) {
  if (s->done) return true;
  // Note [A deadline is not a cancellation]: gRPC cancels a call when its deadline passes, so a request
  // past its deadline is usually also cancelled by the time this runs; it is counted as what the client
  // sees, DEADLINE_EXCEEDED (autouvm_requests_total counted 16 of 20 such calls as CANCELLED). gRPC's
  // timer runs on the monotonic clock and the deadline is wall time; and the daemon's deadline is the
  // call's arrival plus the client's timeout, later than the client's own by however long the call took
  // to arrive, when the client's timer cancels it (one of 20 such calls was counted CANCELLED on a
  // loaded CI machine). So a cancellation within a quarter of the request's time (at least 5 ms, at
  // most a second) of its deadline is the deadline's.
  const bool cancelled = s->handle->cancelled();
  const absl::Duration slack =
      std::clamp((s->params.deadline - s->arrived) / 4, absl::Milliseconds(5), absl::Seconds(1));
  if (now >= s->params.deadline || (cancelled && now + slack >= s->params.deadline)) {
    Finish(s, absl::DeadlineExceededError("the request's deadline passed during generation"), FinishReason::kCancelled,
           now);
    return true;
  }
  if (cancelled) {
    Finish(s, absl::CancelledError("cancelled by the client"), FinishReason::kCancelled, now);
    return true;
  }
  return false;
}

void StepPolicy::Advance(Sequence* s, float* logits, absl::Time now) {
  const size_t vocab = static_cast<size_t>(options_.vocab_size);
  s->pending = -1;
  // Note [Raw logprobs]: a request's logprobs are those of the model's own distribution, as vLLM and
  // OpenAI report them by default: log-softmax of the logits before the penalties change them and
  // whatever temperature, top-k and top-p do. The sampler changes the logits in place (they are this
  // pass's, used once), so a request that asks for logprobs keeps a copy; the others pay nothing.
  const bool logprobs = s->params.logprobs >= 0;
  if (logprobs) s->raw_logits.assign(logits, logits + vocab);
  const int32_t token = s->sampler.Sample(absl::MakeSpan(logits, vocab), s->tokens, s->params.prompt.size());
  const auto& stops = s->params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    Finish(s, absl::OkStatus(), FinishReason::kStop, now);
    return;
  }
  s->tokens.push_back(token);
  ++s->generated;
  if (s->generated == 1) s->first_token = now;
  s->last_token = now;
  ++counters_.tokens_generated;
  GeneratedToken out{.token = token, .text = s->text.Push(token)};
  if (logprobs) FillLogprobs(s->raw_logits, s->params.logprobs, &out);
  s->sink->OnToken(out);
  if (s->text.stopped()) {
    Finish(s, absl::OkStatus(), FinishReason::kStop, now);
  } else if (s->generated >= s->params.max_tokens || static_cast<int64_t>(s->tokens.size()) >= options_.max_seq) {
    Finish(s, absl::OkStatus(), FinishReason::kLength, now);
  } else {
    s->pending = token;
  }
}

void StepPolicy::Finish(Sequence* s, absl::Status status, FinishReason reason, absl::Time now) {
  if (s->done) return;
  s->done = true;
  GenerationResult result;
  result.status = std::move(status);
  result.reason = reason;
  result.prompt_tokens = static_cast<int32_t>(s->params.prompt.size());
  result.completion_tokens = s->generated;
  const absl::Time admitted = s->admitted == absl::Time() ? now : s->admitted;
  result.queue_ms = absl::ToDoubleMilliseconds(admitted - s->arrived);
  result.total_ms = absl::ToDoubleMilliseconds(now - s->arrived);
  if (s->generated > 0) result.time_to_first_token_ms = absl::ToDoubleMilliseconds(s->first_token - s->arrived);
  if (s->generated > 1) {
    result.per_token_ms = absl::ToDoubleMilliseconds(s->last_token - s->first_token) / (s->generated - 1);
  }
  AUTOUVM_CHECK(s->sink != nullptr) << "request " << s->params.request_id << " finished twice";
  s->sink->OnFinish(s->text.Flush(), result);
  s->sink = nullptr;
}

void StepPolicy::RetireFinished() {
  // A sequence may finish before its prompt is in (a failed pass, FinishAll): it stops waiting.
  for (auto it = to_prefill_.begin(); it != to_prefill_.end();) {
    if (!(*it)->done) {
      ++it;
      continue;
    }
    counters_.prompt_tokens_waiting -= static_cast<int64_t>((*it)->params.prompt.size()) - (*it)->prefilled;
    it = to_prefill_.erase(it);
  }
  for (auto& s : active_) {
    if (s->done && s->slot >= 0) {
      free_slots_.push_back(s->slot);
      released_.push_back(s->slot);
      s->slot = -1;
      reserved_kv_blocks_ -= s->kv_blocks;
      counters_.kv_blocks_reserved = reserved_kv_blocks_;
      s->kv_blocks = 0;
      if (s->prefix != nullptr) LeavePrefix(s.get());
    }
  }
  AUTOUVM_CHECK_LE(free_slots_.size(), static_cast<size_t>(options_.slots)) << "a slot was freed twice";
  auto done = [](const std::unique_ptr<Sequence>& s) { return s->done; };
  active_.erase(std::remove_if(active_.begin(), active_.end(), done), active_.end());
}

}  // namespace autouvm::engine
