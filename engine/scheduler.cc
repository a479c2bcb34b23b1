#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/kv_blocks.h"

namespace autouvm::engine {

Scheduler::Scheduler(StepRunner* runner, const tokenizer::Tokenizer* tokenizer, SchedulerOptions options,
                     const base::Clock* clock)
    : runner_(runner),
      options_(options),
      clock_(clock),
      policy_({.slots = std::min(options.max_batch, runner->max_batch()),
               .vocab_size = runner->vocab_size(),
               .max_seq = runner->max_seq(),
               .bos_id = runner->bos_id(),
               .prefill_tokens = options.prefill_tokens,
               .kv_block_tokens = runner->kv_block_tokens(),
               .kv_blocks = runner->kv_blocks(),
               .size_steps = options.size_steps,
               .step_growth = options.step_growth,
               .max_step = options.max_step,
               .min_prefill_tokens = options.min_prefill_tokens},
              tokenizer) {
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::shared_ptr<RequestHandle>> Scheduler::Submit(GenerationParams params, GenerationSink* sink) {
  // Note [Reserving KV blocks]: a request longer than the whole pool would wait for ever.
  if (const int64_t need = policy_.KvBlocksFor(params); need > runner_->kv_blocks()) {
    const int64_t block = runner_->kv_block_tokens();
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: the prompt's ", params.prompt.size(), " tokens and max_tokens ", params.max_tokens,
                     " need ", need * block, " KV-cache positions, and this model's KV cache holds ",
                     runner_->kv_blocks() * block, " (its kv_cache_tokens); ask for fewer tokens"));
  }
  auto s = std::make_unique<Sequence>(std::move(params), sink, policy_.tokenizer(), clock_->Now());
  std::shared_ptr<RequestHandle> handle = s->handle;
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the model's queue is full (", options_.max_queue, " requests waiting); retry later"));
  }
  queue_.push_back(std::move(s));
  ++requests_total_;
  return handle;
}

void Scheduler::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ || clock_->Now() + grace < force_stop_at_) force_stop_at_ = clock_->Now() + grace;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::Stats() const {
  absl::MutexLock lock(&mu_);
  SchedulerStats s;
  s.requests_total = requests_total_;
  s.active = active_count_;
  s.queued = static_cast<int>(queue_.size());
  const PolicyCounters& c = policy_.counters();
  s.tokens_generated_total = c.tokens_generated.load(std::memory_order_relaxed);
  s.decode_steps_total = c.decode_steps.load(std::memory_order_relaxed);
  s.batched_rows_total = c.batched_rows.load(std::memory_order_relaxed);
  s.prefill_passes_total = c.prefill_passes.load(std::memory_order_relaxed);
  s.mixed_passes_total = c.mixed_passes.load(std::memory_order_relaxed);
  auto tokens_of = [&c](IterationPhase p) {
    return c.pass_tokens[static_cast<int>(p)].load(std::memory_order_relaxed);
  };
  s.prefill_pass_tokens_total = tokens_of(IterationPhase::kPrefill);
  s.decode_pass_tokens_total = tokens_of(IterationPhase::kDecode);
  s.mixed_pass_tokens_total = tokens_of(IterationPhase::kMixed);
  auto seconds_of = [&c](IterationPhase p) {
    return c.pass_seconds[static_cast<int>(p)].load(std::memory_order_relaxed);
  };
  s.prefill_pass_seconds_total = seconds_of(IterationPhase::kPrefill);
  s.decode_pass_seconds_total = seconds_of(IterationPhase::kDecode);
  s.mixed_pass_seconds_total = seconds_of(IterationPhase::kMixed);
  s.prefill_rows_total = c.prefill_rows.load(std::memory_order_relaxed);
  s.prefill_tokens_total = c.prefill_tokens.load(std::memory_order_relaxed);
  s.idle_passes_total = c.idle_passes.load(std::memory_order_relaxed);
  s.prompt_tokens_waiting = c.prompt_tokens_waiting.load(std::memory_order_relaxed);
  s.kv_blocks_reserved = c.kv_blocks_reserved.load(std::memory_order_relaxed);
  s.kv_blocks_total = runner_->kv_blocks();
  s.pass_floor_seconds = c.pass_floor_s.load(std::memory_order_relaxed);
  s.pass_token_seconds = c.pass_token_s.load(std::memory_order_relaxed);
  s.turn_wait_seconds_total = absl::ToDoubleSeconds(stats_turn_wait_);
  for (const auto& q : queue_) s.prompt_tokens_waiting += static_cast<int64_t>(q->params.prompt.size());
  return s;
}

absl::Status Scheduler::RunIdleIteration(IterationPhase phase, int batch, int64_t prompt_len) {
  const int slots = std::min(options_.max_batch, runner_->max_batch());
  if (batch < 1 || batch > slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " is not within 1..", slots, " (the model's slots)"));
  }
  const bool prompts = phase != IterationPhase::kDecode;
  if (prompts && (prompt_len < 1 || prompt_len >= runner_->max_seq())) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt length ", prompt_len, " is not within 1..", runner_->max_seq() - 1));
  }
  if (phase == IterationPhase::kMixed && batch < 2) {
    return absl::InvalidArgumentError("a mixed iteration needs a batch of 2 or more (a decode row and a prompt)");
  }
  // It runs on free slots, taking their KV blocks for its pass: one the whole pool cannot hold would
  // never run.
  const int64_t block = runner_->kv_block_tokens();
  const int64_t need = IdleKvBlocks({phase, batch, prompt_len}, block);
  if (need > runner_->kv_blocks()) {
    const std::string what =
        phase == IterationPhase::kPrefill ? absl::StrCat("batch ", batch, " x ", prompt_len, " positions")
        : phase == IterationPhase::kMixed
            ? absl::StrCat("a mixed pass of ", batch - 1, " decode rows and a prompt of ", prompt_len, " positions")
            : absl::StrCat("a decode step of batch ", batch);
    return absl::InvalidArgumentError(absl::StrCat(what, " needs ", need * block,
                                                   " KV-cache positions, and the model's KV cache holds ",
                                                   runner_->kv_blocks() * block, " (its kv_cache_tokens)"));
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  idle_.push_back({phase, batch, prompt_len});
  return absl::OkStatus();
}

void Scheduler::RequestSleep() {
  absl::MutexLock lock(&mu_);
  sleep_requested_ = true;
}

Scheduler::Step Scheduler::TakeWork(std::vector<std::unique_ptr<Sequence>>* admitted) {
  // The policy is read here only while the loop waits (it is the loop's; the condition may be checked
  // on the thread that releases mu_).
  auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || (!queue_.empty() && policy_.free_slots() > 0) || !idle_.empty() || policy_.idle_fits() ||
           sleep_requested_;
  };
  absl::MutexLock lock(&mu_);
  if (policy_.running() == 0) {
    if (options_.idle_sleep <= absl::ZeroDuration() || options_.hooks == nullptr || asleep_) {
      mu_.Await(absl::Condition(&has_work));
    } else if (!mu_.AwaitWithTimeout(absl::Condition(&has_work), options_.idle_sleep)) {
      return Step::kSleep;
    }
    // Note [Waiting for company]: under a budget every pass streams the weights, so a request that
    // arrives just after an idle model's first pass began pays a whole pass of TTFT for the lateness
    // (a burst of 16 gRPC calls reaches the daemon over a few milliseconds; its first arrival's pass ran
    // alone, 1.9 sweeps on the H200's 7B at factor 2). An idle model's first request therefore waits for
    // company — until the free slots are taken or a short delay passes: at most max_queue_delay and at
    // most kQueueDelayShare of the last pass's time, so that what a lone request gives up is bounded by a
    // small share of one pass (nothing on a fast model: a pass of the CPU's tiny model takes milliseconds).
    const absl::Duration wait = std::min(options_.max_queue_delay, last_pass_ * kQueueDelayShare);
    auto company = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || static_cast<int>(queue_.size()) >= policy_.free_slots();
    };
    if (wait > absl::ZeroDuration() && !queue_.empty()) mu_.AwaitWithTimeout(absl::Condition(&company), wait);
  }
  if (sleep_requested_ && !stopping_ && policy_.running() == 0 && queue_.empty() && idle_.empty() &&
      !policy_.idle_fits()) {
    sleep_requested_ = false;
    return Step::kSleep;
  }
  while (!idle_.empty()) {
    policy_.QueueIdle(idle_.front());
    idle_.pop_front();
  }
  if (stopping_ && clock_->Now() >= force_stop_at_) {
    // Past the grace period: everything still queued is taken out to be finished, slot or no slot.
    while (!queue_.empty()) {
      admitted->push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return policy_.running() == 0 && admitted->empty() ? Step::kStop : Step::kAbort;
  }
  // In order: a request whose KV blocks are not free waits for them, and those behind it with it.
  for (int64_t blocks = policy_.free_kv_blocks(); !queue_.empty() &&
                                                  static_cast<int>(admitted->size()) < policy_.free_slots() &&
                                                  policy_.KvBlocksFor(queue_.front()->params) <= blocks;) {
    blocks -= policy_.KvBlocksFor(queue_.front()->params);
    admitted->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  active_count_ = policy_.running() + static_cast<int>(admitted->size());
  const bool idle = queue_.empty() && policy_.running() == 0 && admitted->empty();
  return stopping_ && idle ? Step::kStop : Step::kRun;
}

// Note [Arrivals between passes]: every pass begins by admitting what has arrived (up to the free
// slots), so that a burst's later arrivals join the very next pass — under a budget each pass is a
// weight sweep, and a request admitted one pass late pays a sweep of TTFT for it (admitting a burst's
// stragglers only after the first arrival's prefill and decode cost them 4.6 sweeps of TTFT on the
// H200's 7B at factor 2, bench/results/2026-12-01-arrivals-h200.md). With packed steps there is no
// round to wait for: a new prompt shares the pass with every running sequence's next token.
void Scheduler::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<Sequence>> admitted;
    const Step step = TakeWork(&admitted);
    if (step == Step::kStop) break;
    if (step == Step::kSleep) {
      if (options_.hooks != nullptr) options_.hooks->Sleep();
      asleep_ = true;
      continue;
    }
    asleep_ = false;
    if (step == Step::kAbort) {
      policy_.FinishAll(absl::UnavailableError("the server is shutting down"), std::move(admitted), clock_->Now());
    } else {
      policy_.Admit(std::move(admitted), clock_->Now());
      if (std::optional<StepPlan> plan = policy_.Schedule(clock_->Now())) Run(*plan);
    }
    for (const int32_t slot : policy_.TakeReleased()) runner_->Release(slot);
    absl::MutexLock lock(&mu_);
    active_count_ = policy_.running();
  }
}

void Scheduler::Run(const StepPlan& plan) {
  StepResult result;
  result.logits = &logits_;
  // A pass writes its rows' cache positions (and makes its shares) and nothing else: running it again is
  // safe. Only the forward pass takes a turn (Note [Passes by shares]): a hook's plan switch, which can
  // take seconds of host work (host copies made, weights staged), does not hold up the other models.
  const absl::Time started = clock_->Now();
  absl::Duration waited;  // for turns: not the pass's own cost, which the policy learns from `took`
  absl::Duration before_hooks, stepping, after_hooks;  // the last attempt's, for the debug line
  for (int attempt = 0;; ++attempt) {
    const absl::Time hooked = clock_->Now();
    if (options_.hooks) options_.hooks->BeforeIteration(plan.phase, plan.batch(), plan.prompt_len());
    // Note [Captured steps] (engine/step_graphs.cc): only a pass nothing observes may run as a graph.
    runner_->set_graphs_allowed(options_.hooks == nullptr || options_.hooks->PassMayBeCaptured());
    // Note [Staged passes captured] (runtime/executor_capture.cc): asked by the runner at the launch.
    runner_->set_staged_capture(options_.hooks);
    const absl::Time asked = clock_->Now();
    before_hooks = asked - hooked;
    if (options_.turns != nullptr) options_.turns->turns()->Begin(options_.turns->id());
    const absl::Time began = clock_->Now();
    waited += began - asked;
    result.status = runner_->Step(plan.shares, plan.RunnerRows(), &logits_);
    const absl::Time stepped = clock_->Now();
    stepping = stepped - began;
    if (options_.turns != nullptr) options_.turns->turns()->End(options_.turns->id(), stepped - began);
    if (options_.hooks) options_.hooks->RanAsGraph(runner_->last_pass_graph());
    const bool again = options_.hooks && options_.hooks->AfterIteration(result.status) && attempt == 0;
    after_hooks = clock_->Now() - stepped;
    if (!again) break;
  }
  result.took = clock_->Now() - started - waited;
  {
    absl::MutexLock lock(&mu_);
    last_pass_ = result.took;
    stats_turn_wait_ += waited;
  }
  const absl::Time updating = clock_->Now();
  policy_.Update(plan, result, updating);
  if (base::LogEnabled(base::LogLevel::kDebug)) {
    // Where a pass's time goes on the host, to tell the forward pass from the work around it.
    const absl::Time now = clock_->Now();
    AUTOUVM_LOG(DEBUG) << "scheduler: pass of " << plan.batch() << " rows (" << runner_->last_step_form()
                       << "): hooks before " << absl::FormatDuration(before_hooks) << ", step "
                       << absl::FormatDuration(stepping)
                       << (runner_->last_step_launch_s() >= 0
                               ? absl::StrCat(" (launched in ",
                                              absl::FormatDuration(absl::Seconds(runner_->last_step_launch_s())), ")")
                               : std::string())
                       << ", hooks after " << absl::FormatDuration(after_hooks) << ", update "
                       << absl::FormatDuration(now - updating) << "; between the last pass's end and this one's "
                       << (last_run_end_ == absl::InfinitePast() ? std::string("-")
                                                                 : absl::FormatDuration(started - last_run_end_));
    last_run_end_ = now;
  }
}

}  // namespace autouvm::engine
