// GenerationFrontend: the engine's front door, the same for every transport. A transport (the gRPC
// Generation service, the HTTP API) maps its message to a GenerationRequest, and a GenerationCall
// admits it: the serving gate (no new work while draining), the model's readiness, one validation
// (engine/generation_request.h), the model's scheduler, and cancellation from then on.
//
//   GenerationFrontend frontend(&models, limits, &gate);   // one per daemon
//   GenerationCall call(&frontend);                          // one per client call
//   absl::Status s = call.Submit(std::move(request), names, sink);   // OK: sink->OnFinish follows, once
//   call.Cancel();                                           // the client went away (any time, any thread)
//
// A call that Submit refused never reaches the sink. The sink's methods are called on the model's
// scheduler thread (engine/scheduler.h), possibly before Submit returns.
//
// Thread-safety: GenerationFrontend is safe from any thread. A GenerationCall's Submit runs once, on one
// thread; Cancel may race with it and with the scheduler; the accessors are for after Submit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/generation_request.h"
#include "engine/scheduler.h"
#include "engine/serving_gate.h"

namespace autouvm::engine {

// The models a front door serves, by name (the daemon's ModelManager).
class ModelDirectory {
 public:
  virtual ~ModelDirectory() = default;
  // The model ready to serve; INVALID_ARGUMENT for a name no model can have, NOT_FOUND for one not
  // served, UNAVAILABLE while it loads, FAILED_PRECONDITION with its error if it failed to.
  virtual absl::StatusOr<GenerationTarget> ReadyTarget(const std::string& name) const = 0;

  // Every model the directory knows, ready or not, by name (the HTTP API's model list).
  struct Listing {
    std::string name;
    bool ready = false;
    std::string state;         // "ready", "loading", "unloading" or "failed"
    int64_t created_unix = 0;  // when its entry was loaded (seconds since the epoch)
  };
  virtual std::vector<Listing> ListModels() const = 0;
};

class GenerationFrontend {
 public:
  // `models` and `gate` (null: never draining) outlive the front door.
  GenerationFrontend(const ModelDirectory* models, RequestLimits limits, ServingGate* gate = nullptr)
      : models_(models), limits_(limits), gate_(gate) {}

  const ModelDirectory* models() const { return models_; }
  const RequestLimits& limits() const { return limits_; }
  ServingGate* gate() const { return gate_; }

 private:
  const ModelDirectory* const models_;
  const RequestLimits limits_;
  ServingGate* const gate_;
};

class GenerationCall {
 public:
  explicit GenerationCall(const GenerationFrontend* frontend) : frontend_(frontend) {}
  ~GenerationCall();  // leaves the serving gate
  GenerationCall(const GenerationCall&) = delete;
  GenerationCall& operator=(const GenerationCall&) = delete;

  // Admits the request: UNAVAILABLE while the server drains, the model's own errors (ModelDirectory),
  // INVALID_ARGUMENT naming the field in `names`' spelling, RESOURCE_EXHAUSTED when the model's queue
  // is full. A request id is made when the request has none. `transport_defect`: what the transport
  // found wrong with its message before it could map it (e.g. a field that did not parse); refused as
  // INVALID_ARGUMENT after the gate, as a bad field is.
  absl::Status Submit(GenerationRequest request, const FieldNames& names, GenerationSink* sink,
                      const std::string& transport_defect = "");
  // Stops the request (the client went away): before Submit, the request is cancelled as soon as it is
  // admitted; after OnFinish, nothing happens.
  void Cancel();

  const std::string& request_id() const { return request_id_; }  // "" until Submit made or took one
  const std::string& model() const { return model_; }            // "" until the model was found

 private:
  const GenerationFrontend* const frontend_;
  bool entered_ = false;
  std::string request_id_;
  std::string model_;
  std::shared_ptr<const void> model_alive_;  // the model, alive while the call is (GenerationTarget::keep_alive)
  absl::Mutex mu_;
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace autouvm::engine
