// The engine calls behind one HTTP request: one engine::GenerationCall per choice (prompts x n), their
// sinks, and a queue of what the scheduler threads produced, which the HTTP thread takes in order.
//
//   auto ex = ChoiceExchange::Create(&frontend, observer);
//   RETURN_IF_ERROR(ex->Submit(std::move(requests), names));   // all admitted, or none left running
//   while (!ex->drained()) for (ChoiceEvent& e : ex->Next(absl::Seconds(1))) ...;
//   ex->CancelAll(); ex->WaitFinished();                        // the client went away
//
// Note [Who keeps the exchange]: the scheduler threads call the sinks until each choice's OnFinish,
// and the HTTP side may be gone by then (a client that disconnected). So the exchange is shared: the
// HTTP handler and its stream provider hold it, and each sink takes a reference in OnFinish before it
// touches the queue; the last of them frees it, with the calls (which leave the serving gate then).
//
// Thread-safety: Submit on one thread before anything else; Next, CancelAll, WaitFinished and drained
// from any thread; the sinks are called by the models' scheduler threads.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/generation_frontend.h"

namespace autouvm::http {

// What the transport reports of each call, for the daemon's metrics (server/metrics.h implements it).
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // A call ended: `result` null when it was refused before the scheduler saw it. `model` is "" for a
  // name no served model has.
  virtual void CallEnded(const std::string& model, absl::StatusCode code, const engine::GenerationResult* result) = 0;
  // The time between two tokens of one call.
  virtual void TokenGap(const std::string& model, double seconds) = 0;
};

struct ChoiceEvent {
  int choice = 0;
  bool finished = false;
  engine::GeneratedToken token;     // !finished
  std::string tail;                 // finished: held-back text
  engine::GenerationResult result;  // finished
};

class ChoiceExchange : public std::enable_shared_from_this<ChoiceExchange> {
 public:
  // `frontend` and `observer` (may be null) outlive the exchange.
  static std::shared_ptr<ChoiceExchange> Create(const engine::GenerationFrontend* frontend, CallObserver* observer);
  ~ChoiceExchange();

  // Admits one call per request, in order. On the first refusal the calls already admitted are
  // cancelled and waited for, and that refusal is returned.
  absl::Status Submit(std::vector<engine::GenerationRequest> requests, const engine::FieldNames& names);

  // The events produced since the last call, waiting up to `timeout` for one.
  std::vector<ChoiceEvent> Next(absl::Duration timeout);
  // Every choice finished and every event taken.
  bool drained() const;
  void CancelAll();
  void WaitFinished();

  const std::string& request_id() const { return request_id_; }  // the first call's
  const std::string& model() const { return model_; }            // as the requests name it

 private:
  class Sink;
  struct Choice;
  ChoiceExchange(const engine::GenerationFrontend* frontend, CallObserver* observer);
  void Push(ChoiceEvent event);

  const engine::GenerationFrontend* const frontend_;
  CallObserver* const observer_;
  std::vector<std::unique_ptr<Choice>> choices_;  // set by Submit, then fixed
  std::string request_id_;
  std::string model_;
  mutable absl::Mutex mu_;
  std::deque<ChoiceEvent> events_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // admitted and not finished
};

}  // namespace autouvm::http
