#include "server/generation_service.h"

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "proto/lenient_parse.h"
#include "server/grpc_status.h"
#include "server/request_validation.h"

namespace autouvm::server {
namespace {

using autouvm::v1::GenerateRequest;
using autouvm::v1::GenerateResponse;
using autouvm::v1::GenerateStreamResponse;

autouvm::v1::FinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop:
      return autouvm::v1::FINISH_REASON_STOP;
    case engine::FinishReason::kLength:
      return autouvm::v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kCancelled:
      return autouvm::v1::FINISH_REASON_CANCELLED;
  }
  return autouvm::v1::FINISH_REASON_UNSPECIFIED;
}

void FillSummary(const std::string& request_id, const std::string& model, const engine::GenerationResult& result,
                 GenerateResponse* out) {
  out->set_request_id(request_id);
  out->set_model(model);
  out->set_finish_reason(ToProto(result.reason));
  out->mutable_usage()->set_prompt_tokens(result.prompt_tokens);
  out->mutable_usage()->set_completion_tokens(result.completion_tokens);
  auto* t = out->mutable_timings();
  t->set_queue_ms(result.queue_ms);
  t->set_time_to_first_token_ms(result.time_to_first_token_ms);
  t->set_per_token_ms(result.per_token_ms);
  t->set_total_ms(result.total_ms);
}

// The token's logprobs as the API sends them; the floats are copied as the engine computed them.
void FillLogprobs(const engine::GeneratedToken& token, autouvm::v1::TokenLogprobs* out) {
  out->set_token_id(token.token);
  out->set_logprob(token.logprob);
  out->mutable_top()->Reserve(static_cast<int>(token.top.size()));
  for (const engine::TokenLogprob& t : token.top) {
    autouvm::v1::TokenLogprob* entry = out->add_top();
    entry->set_token_id(t.token);
    entry->set_logprob(t.logprob);
  }
}

// Note [The last touch of a stream]: a stream's reactor is deleted by OnDone, which follows Finish once
// gRPC's own reactions (OnWriteDone, OnCancel) have returned, but not the scheduler's calls into the sink:
// gRPC does not know of them. So once OnFinish has marked the call finished, any thread's Pump may
// finish it (the writer's OnWriteDone, or Start's), and the scheduler's thread must not touch the
// reactor after that, not even to take its lock: the messages and the mark go in under the lock that
// Pump decides under, and what Pump then starts (a write, or Finish) is the thread's last touch; when a
// write is in flight, it starts nothing and leaves the rest to that write's OnWriteDone. (CI caught it under
// ASan: OnFinish queued the final message, whose write's OnWriteDone finished the call and gRPC deleted
// the reactor, before OnFinish's own Pump after marking it finished; the daemon stopped, heap use after
// free, after 16 of GenerationE2E.ManyOneTokenRequestsAtOnceAllComplete's 128 calls; 2 runs in 30.
// Taking the lock again for a last Pump after the mark was not enough: the writer had finished and
// gRPC freed the reactor by then, 8 times in 40 runs of three tests.)
//
// Note [Finish after admission]: once Submit has handed the call to the scheduler, the scheduler may
// finish it at once (a one-token request), and Finish leads to OnDone, which deletes the reactor. Admit
// still has work to do after Submit, so neither reactor calls Finish until Start is through with Admit.
//
// Admission (engine::GenerationCall, the front door), cancellation and the call's metrics, shared by
// both call shapes. A call owns one of these; the scheduler holds a pointer to the call (as its
// GenerationSink) until OnFinish.
class Call {
 public:
  Call(const engine::GenerationFrontend* frontend, Metrics* metrics) : call_(frontend), metrics_(metrics) {}

  absl::Status Admit(grpc::CallbackServerContext* context, const GenerateRequest& request,
                     engine::GenerationSink* sink) {
    engine::GenerationRequest r = FromProto(request);
    r.deadline = absl::FromChrono(context->deadline());
    logprobs_ = request.has_logprobs();  // before Submit: before any token reaches the sink
    // Note [Requests that do not parse] (proto/lenient_parse.h).
    return call_.Submit(std::move(r), GrpcFieldNames(), sink, autouvm::proto::RequestDefect(request));
  }

  void Cancel() { call_.Cancel(); }
  const std::string& request_id() const { return call_.request_id(); }
  const std::string& model() const { return call_.model(); }
  // The request asked for logprobs: each token carries them (set by Admit).
  bool logprobs() const { return logprobs_; }

  // The call ends with `status`; `result` when the scheduler ran it. The model label is the served
  // model the request named, or "" (an unknown name is not a label: clients choose it).
  void Record(const absl::Status& status, const engine::GenerationResult* result) {
    if (metrics_ != nullptr) metrics_->RecordRequest(call_.model(), status.code(), result);
  }
  // A token was emitted (scheduler thread only).
  void Token() {
    const auto now = std::chrono::steady_clock::now();
    if (metrics_ != nullptr && tokens_++ > 0) {
      metrics_->RecordTokenGap(call_.model(), std::chrono::duration<double>(now - last_token_).count());
    }
    last_token_ = now;
  }

 private:
  engine::GenerationCall call_;
  Metrics* metrics_;
  bool logprobs_ = false;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point last_token_;
};

class StreamReactor final : public grpc::ServerWriteReactor<GenerateStreamResponse>,
                            public engine::GenerationSink,
                            public StreamWriter::Stream {
 public:
  StreamReactor(const engine::GenerationFrontend* frontend, Metrics* metrics, StreamWriter* writer)
      : call_(frontend, metrics), writer_(writer) {}

  void Start(grpc::CallbackServerContext* context, const GenerateRequest& request) {
    if (absl::Status s = call_.Admit(context, request, this); !s.ok()) {
      call_.Record(s, nullptr);
      Finish(ToGrpc(s));  // the scheduler never saw the request
      return;
    }
    Pump([&] { admitting_ = false; });
  }

  // Note [Tokens written off the scheduler's thread]: a write started here would run on the model's
  // scheduler thread, and gRPC does part of a write on the thread that starts it (serializing, the
  // transport's send), between that model's forward passes. So the token is queued, and its write is
  // started by the stream writer's thread (or by the write in flight's OnWriteDone), never here. While
  // a kick is queued the call is not finished (Pump), so the reactor outlives it (Note [The last touch
  // of a stream]). Measured on the H200 (bench/results/2026-12-03-step-graphs-h200.md): between two
  // decode steps of 16 streams the scheduler spent 2.4 ms (p50) before this; the client's step of the
  // resident 7B with graphs was 14.5 ms after it against 14.8 / 15.6 ms in two runs before, within the
  // runs' spread: what those 2.4 ms are is not established.
  void OnToken(const engine::GeneratedToken& token) override {
    call_.Token();
    GenerateStreamResponse msg;
    msg.mutable_chunk()->add_token_ids(token.token);
    msg.mutable_chunk()->set_text(token.text);
    if (call_.logprobs()) FillLogprobs(token, msg.mutable_chunk()->add_logprobs());
    bool kick = false;
    {
      absl::MutexLock lock(&mu_);
      pending_.push_back(std::move(msg));
      kick = !writing_ && !kicked_ && !finish_sent_;
      kicked_ = kicked_ || kick;
    }
    if (kick) writer_->Kick(this);  // this thread's last touch of the reactor
  }

  // The stream writer's thread: start the write queued tokens wait for.
  void Kicked() override {
    Pump([&] { kicked_ = false; });
  }

  // See Note [The last touch of a stream]: the messages and finished_ go in under the lock Pump decides
  // under, and what Pump does then is this thread's last touch of the reactor.
  void OnFinish(const std::string& tail, const engine::GenerationResult& result) override {
    call_.Record(result.status, &result);
    std::vector<GenerateStreamResponse> last;
    if (!tail.empty()) last.emplace_back().mutable_chunk()->set_text(tail);
    if (result.status.ok()) {
      FillSummary(call_.request_id(), call_.model(), result, last.emplace_back().mutable_final());
    }
    Pump([&] {
      for (GenerateStreamResponse& msg : last) pending_.push_back(std::move(msg));
      finished_ = true;
      status_ = ToGrpc(result.status);
    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) call_.Cancel();  // the client is gone; the scheduler still calls OnFinish
    Pump([&] { writing_ = false; });
  }

  void OnCancel() override { call_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  // Applies `change` to the call's state, then, under the same lock, decides: start the next write,
  // finish the call once everything is written, or nothing (a write is in flight: its OnWriteDone
  // pumps). One write at a time. What it starts is the caller's last touch of the reactor
  // (Note [The last touch of a stream]).
  void Pump(absl::FunctionRef<void()> change) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    mu_.Lock();
    change();
    if (writing_ || finish_sent_) {
      mu_.Unlock();
      return;
    }
    if (!pending_.empty()) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      mu_.Unlock();
      StartWrite(&current_);
      return;
    }
    if (finished_ && !admitting_ && !kicked_) {
      finish_sent_ = true;
      grpc::Status status = status_;
      mu_.Unlock();
      Finish(status);
      return;
    }
    mu_.Unlock();
  }

  Call call_;
  StreamWriter* const writer_;
  absl::Mutex mu_;
  std::deque<GenerateStreamResponse> pending_ ABSL_GUARDED_BY(mu_);
  GenerateStreamResponse current_;  // being written; touched only by the writer
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;  // the stream writer will Pump (Note [Tokens written off ...])
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_sent_ ABSL_GUARDED_BY(mu_) = false;
  // See Note [Finish after admission].
  bool admitting_ ABSL_GUARDED_BY(mu_) = true;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

class UnaryReactor final : public grpc::ServerUnaryReactor, public engine::GenerationSink {
 public:
  UnaryReactor(const engine::GenerationFrontend* frontend, Metrics* metrics, GenerateResponse* response)
      : call_(frontend, metrics), response_(response) {}

  void Start(grpc::CallbackServerContext* context, const GenerateRequest& request) {
    if (absl::Status s = call_.Admit(context, request, this); !s.ok()) {
      call_.Record(s, nullptr);
      Finish(ToGrpc(s));  // the scheduler never saw the request
      return;
    }
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      admitting_ = false;
      if (!finished_) return;
      status = status_;
    }
    Finish(status);
  }

  // Called from the scheduler thread only, before OnFinish; gRPC reads response_ after Finish.
  void OnToken(const engine::GeneratedToken& token) override {
    call_.Token();
    response_->add_token_ids(token.token);
    response_->mutable_text()->append(token.text);
    if (call_.logprobs()) FillLogprobs(token, response_->add_logprobs());
  }

  void OnFinish(const std::string& tail, const engine::GenerationResult& result) override {
    call_.Record(result.status, &result);
    response_->mutable_text()->append(tail);
    FillSummary(call_.request_id(), call_.model(), result, response_);
    const grpc::Status status = ToGrpc(result.status);
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
      status_ = status;
      if (admitting_) return;  // Start finishes the call
    }
    Finish(status);
  }

  void OnCancel() override { call_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  Call call_;
  GenerateResponse* response_;
  absl::Mutex mu_;
  // See Note [Finish after admission].
  bool admitting_ ABSL_GUARDED_BY(mu_) = true;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

StreamWriter::StreamWriter() : thread_([this] { Run(); }) {}

StreamWriter::~StreamWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void StreamWriter::Kick(Stream* stream) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(stream);
}

void StreamWriter::Run() {
  for (;;) {
    std::vector<Stream*> kicked;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StreamWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) { return w->stopping_ || !w->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, and every kick delivered
      kicked.swap(queue_);
    }
    for (Stream* s : kicked) s->Kicked();
  }
}

GenerationService::GenerationService(ModelManager* models, const ServerConfig* config, engine::ServingGate* gate,
                                     Metrics* metrics)
    : frontend_(models, RequestLimitsOf(config->limits), gate), metrics_(metrics) {}

GenerationService::~GenerationService() = default;

grpc::ServerWriteReactor<GenerateStreamResponse>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  auto* reactor = new StreamReactor(&frontend_, metrics_, &writer_);
  reactor->Start(context, *request);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const GenerateRequest* request, GenerateResponse* response) {
  auto* reactor = new UnaryReactor(&frontend_, metrics_, response);
  reactor->Start(context, *request);
  return reactor;
}

}  // namespace autouvm::server
