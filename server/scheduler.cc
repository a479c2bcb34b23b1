#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/text_stream.h"

namespace autouvm::server {

struct Scheduler::Request {
  Request(GenerationParams p, GenerationSink* s, const Tokenizer* tok, absl::Time now)
      : params(std::move(p)),
        sink(s),
        handle(std::make_shared<RequestHandle>()),
        sampler(params.sampling),
        text(tok, params.stop_strings),
        tokens(params.prompt),
        arrived(now) {}

  GenerationParams params;
  GenerationSink* sink;
  std::shared_ptr<RequestHandle> handle;
  Sampler sampler;
  TextStream text;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t slot = -1;
  int32_t pending = -1;  // sampled and emitted, not yet written to the KV cache
  int32_t generated = 0;
  absl::Time arrived, admitted, first_token, last_token;
  bool done = false;
};

Scheduler::Scheduler(ModelRunner* runner, const Tokenizer* tokenizer, SchedulerOptions options,
                     const runtime::Clock* clock)
    : runner_(runner), tokenizer_(tokenizer), options_(options), clock_(clock) {
  const int slots = std::min(options_.max_batch, runner_->max_batch());
  for (int s = slots - 1; s >= 0; --s) free_slots_.push_back(s);
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::shared_ptr<RequestHandle>> Scheduler::Submit(GenerationParams params, GenerationSink* sink) {
  auto r = std::make_unique<Request>(std::move(params), sink, tokenizer_, clock_->Now());
  std::shared_ptr<RequestHandle> handle = r->handle;
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the model's queue is full (", options_.max_queue, " requests waiting); retry later"));
  }
  queue_.push_back(std::move(r));
  ++stats_.requests_total;
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
  SchedulerStats s = stats_;
  s.active = active_count_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

Scheduler::Step Scheduler::AdmitQueued(std::vector<std::unique_ptr<Request>>* admitted) {
  // Waits for work unless requests are active.
  auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || (!queue_.empty() && !free_slots_.empty()) ||
           (!idle_.empty() && static_cast<size_t>(idle_.front().batch) <= free_slots_.size());
  };
  absl::MutexLock lock(&mu_);
  if (active_.empty()) mu_.Await(absl::Condition(&has_work));
  if (stopping_ && clock_->Now() >= force_stop_at_) {
    // Past the grace period: everything still queued is taken out to be finished, slot or no slot.
    while (!queue_.empty()) {
      admitted->push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return active_.empty() && admitted->empty() ? Step::kStop : Step::kAbort;
  }
  while (!queue_.empty() && admitted->size() < free_slots_.size()) {
    admitted->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  active_count_ = static_cast<int>(active_.size() + admitted->size());
  const bool idle = queue_.empty() && active_.empty() && admitted->empty();
  return stopping_ && idle ? Step::kStop : Step::kRun;
}

void Scheduler::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<Request>> admitted;
    const Step step = AdmitQueued(&admitted);
    if (step == Step::kStop) break;
    if (step == Step::kAbort) {
      const absl::Status shut = absl::UnavailableError("the server is shutting down");
      for (auto& r : active_) Finish(r.get(), shut, FinishReason::kCancelled);
      for (auto& r : admitted) Finish(r.get(), shut, FinishReason::kCancelled);
      RetireFinished();
      continue;
    }
    for (auto& r : admitted) {
      r->admitted = clock_->Now();
      r->slot = free_slots_.back();
      free_slots_.pop_back();
      Request* raw = r.get();
      active_.push_back(std::move(r));
      if (!CheckStopConditions(raw)) RunPrefill(raw);
    }
    RetireFinished();
    std::vector<IdleIteration> idle;
    {
      absl::MutexLock lock(&mu_);
      while (!idle_.empty() && static_cast<size_t>(idle_.front().batch) <= free_slots_.size()) {
        idle.push_back(idle_.front());
        idle_.pop_front();
      }
    }
    for (const IdleIteration& it : idle) RunIdle(it);
    RunDecodeStep();
    RetireFinished();
  }
}

absl::Status Scheduler::RunIdleIteration(IterationPhase phase, int batch, int64_t prompt_len) {
  const int slots = std::min(options_.max_batch, runner_->max_batch());
  if (batch < 1 || batch > slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " is not within 1..", slots, " (the model's slots)"));
  }
  if (phase == IterationPhase::kPrefill && (prompt_len < 1 || prompt_len >= runner_->config().max_seq)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt length ", prompt_len, " is not within 1..", runner_->config().max_seq - 1));
  }
  if (phase == IterationPhase::kPrefill && batch != 1) {
    return absl::InvalidArgumentError("prefill runs one request at a time: batch must be 1");
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  idle_.push_back({phase, batch, prompt_len});
  return absl::OkStatus();
}

// Free slots only: their KV-cache rows are rewritten from position 0 by the next prefill, and attention
// never reads past a sequence's own position.
void Scheduler::RunIdle(const IdleIteration& it) {
  const int32_t bos = static_cast<int32_t>(std::max<int64_t>(runner_->config().bos_id, 0));
  if (it.phase == IterationPhase::kPrefill) {
    std::vector<int32_t> prompt(static_cast<size_t>(it.prompt_len), bos);
    (void)Prefill(free_slots_.back(), prompt);  // output dropped; a failure shows in the profile state
    return;
  }
  std::vector<ModelRunner::DecodeRow> rows;
  for (int i = 0; i < it.batch; ++i) rows.push_back({free_slots_[free_slots_.size() - 1 - i], bos, 0});
  (void)Decode(rows);
}

absl::StatusOr<std::vector<float>> Scheduler::Prefill(int32_t slot, absl::Span<const int32_t> tokens) {
  for (int attempt = 0;; ++attempt) {
    if (options_.hooks) {
      options_.hooks->BeforeIteration(IterationPhase::kPrefill, 1, static_cast<int64_t>(tokens.size()));
    }
    auto logits = runner_->Prefill(slot, tokens, 0);
    if (!options_.hooks || !options_.hooks->AfterIteration(logits.status()) || attempt > 0) return logits;
  }
}

absl::Status Scheduler::Decode(absl::Span<const ModelRunner::DecodeRow> rows) {
  // A decode step writes its rows' cache positions and nothing else: running it again is safe.
  for (int attempt = 0;; ++attempt) {
    if (options_.hooks) options_.hooks->BeforeIteration(IterationPhase::kDecode, static_cast<int>(rows.size()), 0);
    absl::Status s = runner_->Decode(rows, &logits_);
    if (!options_.hooks || !options_.hooks->AfterIteration(s) || attempt > 0) return s;
  }
}

bool Scheduler::CheckStopConditions(Request* r) {
  if (r->done) return true;
  // Note [A deadline is not a cancellation]: gRPC cancels a call when its deadline passes, so a request
  // past its deadline is usually also cancelled by the time this runs; it is counted as what the client
  // sees, DEADLINE_EXCEEDED (autouvm_requests_total counted 16 of 20 such calls as CANCELLED). gRPC's
  // timer runs on the monotonic clock and the deadline is wall time: a cancellation within a few
  // milliseconds of the deadline is the deadline's.
  const absl::Time now = clock_->Now();
  const bool cancelled = r->handle->cancelled();
  if (now >= r->params.deadline || (cancelled && now + absl::Milliseconds(5) >= r->params.deadline)) {
    Finish(r, absl::DeadlineExceededError("the request's deadline passed during generation"), FinishReason::kCancelled);
    return true;
  }
  if (cancelled) {
    Finish(r, absl::CancelledError("cancelled by the client"), FinishReason::kCancelled);
    return true;
  }
  return false;
}

void Scheduler::RunPrefill(Request* r) {
  auto logits = Prefill(r->slot, r->params.prompt);
  if (!logits.ok()) {
    Finish(r, logits.status(), FinishReason::kStop);
    return;
  }
  Advance(r, logits->begin());
}

void Scheduler::RunDecodeStep() {
  std::vector<Request*> batch;
  std::vector<ModelRunner::DecodeRow> rows;
  for (auto& r : active_) {
    if (r->done || r->pending < 0 || CheckStopConditions(r.get())) continue;
    batch.push_back(r.get());
    rows.push_back({r->slot, r->pending, static_cast<int64_t>(r->tokens.size()) - 1});
  }
  if (rows.empty()) return;
  absl::Status s = Decode(rows);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.decode_steps_total;
    stats_.batched_rows_total += rows.size();
  }
  const size_t vocab = static_cast<size_t>(runner_->config().vocab_size);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!s.ok()) {
      Finish(batch[i], s, FinishReason::kStop);
    } else {
      Advance(batch[i], logits_.begin() + i * vocab);
    }
  }
}

void Scheduler::Advance(Request* r, std::vector<float>::iterator logits_begin) {
  const size_t vocab = static_cast<size_t>(runner_->config().vocab_size);
  r->pending = -1;
  const int32_t token = r->sampler.Sample(absl::MakeSpan(&*logits_begin, vocab), r->tokens);
  const auto& stops = r->params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    Finish(r, absl::OkStatus(), FinishReason::kStop);
    return;
  }
  r->tokens.push_back(token);
  ++r->generated;
  const absl::Time now = clock_->Now();
  if (r->generated == 1) r->first_token = now;
  r->last_token = now;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.tokens_generated_total;
  }
  r->sink->OnToken(token, r->text.Push(token));
  if (r->text.stopped()) {
    Finish(r, absl::OkStatus(), FinishReason::kStop);
  } else if (r->generated >= r->params.max_tokens ||
             static_cast<int64_t>(r->tokens.size()) >= runner_->config().max_seq) {
    Finish(r, absl::OkStatus(), FinishReason::kLength);
  } else {
    r->pending = token;
  }
}

void Scheduler::Finish(Request* r, absl::Status status, FinishReason reason) {
  if (r->done) return;
  r->done = true;
  const absl::Time now = clock_->Now();
  GenerationResult result;
  result.status = std::move(status);
  result.reason = reason;
  result.prompt_tokens = static_cast<int32_t>(r->params.prompt.size());
  result.completion_tokens = r->generated;
  const absl::Time admitted = r->admitted == absl::Time() ? now : r->admitted;
  result.queue_ms = absl::ToDoubleMilliseconds(admitted - r->arrived);
  result.total_ms = absl::ToDoubleMilliseconds(now - r->arrived);
  if (r->generated > 0) result.time_to_first_token_ms = absl::ToDoubleMilliseconds(r->first_token - r->arrived);
  if (r->generated > 1) {
    result.per_token_ms = absl::ToDoubleMilliseconds(r->last_token - r->first_token) / (r->generated - 1);
  }
  r->sink->OnFinish(r->text.Flush(), result);
  r->sink = nullptr;
}

void Scheduler::RetireFinished() {
  auto done = [](const std::unique_ptr<Request>& r) { return r->done; };
  for (auto& r : active_) {
    if (r->done && r->slot >= 0) {
      free_slots_.push_back(r->slot);
      r->slot = -1;
    }
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(), done), active_.end());
  absl::MutexLock lock(&mu_);
  active_count_ = static_cast<int>(active_.size());
}

}  // namespace autouvm::server
