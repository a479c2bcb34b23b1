// ModelManager: the models the daemon serves. It scans the model repository (writing the embedded tiny
// default model first if configured and missing), loads each entry into a ServedModel — digest,
// tokenizer, chat template, ModelRunner, ModelSession (profiler/model_session.h), Scheduler — and keeps the
// ones that fail to load listed with their error, so one bad model never stops the others.
//
// Thread-safety: LoadAll runs once, on any thread; Find, List and Shutdown may be called concurrently
// with it and with each other. A ServedModel's scheduler and tokenizer are immutable once it is READY.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "engine/generation_frontend.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "profiler/model_execution.h"
#include "profiler/model_session.h"
#include "runtime/gpu_spec.h"
#include "server/config.h"
#include "server/device_budgets.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::server {

enum class ModelState { kLoading, kReady, kFailed, kUnloading };

struct ServedModel {
  std::string name;
  std::string dir;
  ModelSettings settings;
  // Set before the state becomes kReady, then never changed.
  engine::ModelConfig config;
  std::string digest;  // profiler::ModelDigest of model.pt and model.yaml
  // Its device budget, taken from the device's (Note [Budgets that hold together], server/device_budgets.cc);
  // 0 when the daemon plans nothing (profiling off).
  int64_t device_budget_bytes = 0;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // The config's chat template, parsed once at load (none: the model has no template); a template that
  // does not parse fails the model's load. The texts it sees as bos_token and eos_token: the config's, or
  // the tokenizer's text of bos_id / eos_id.
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::string bos_token, eos_token;
  std::unique_ptr<engine::ModelRunner> runner;
  bool graphs_on = false;  // its decode steps may run as CUDA graphs (runtime.cuda_graphs)
  // The model's AutoUVM loop: null when profiling is off; outlives the scheduler.
  std::unique_ptr<profiler::ModelSession> session;
  profiler::ModelExecution* execution = nullptr;  // the session's, when plans are followed
  // Its turn at the device's forward passes (Note [Passes by shares], engine/step_turns.cc): left after
  // the scheduler, which is destroyed first, has stopped.
  std::unique_ptr<engine::StepTurns::Seat> turns;
  std::unique_ptr<engine::Scheduler> scheduler;
};

// What models need to be profiled; jobs == nullptr turns profiling off.
struct ProfilingServices {
  profiler::ProfileJobs* jobs = nullptr;
  runtime::GpuSpec gpu;   // keys and device budgets are for this GPU
  bool executor = false;  // follow plans (on the CPU backend: through a simulated mirror on `gpu`)
  profiler::ExecutionOptions execution;
};

struct ModelView {
  // Held alive by the view: an unloaded model's memory goes with its last view and request.
  std::shared_ptr<const ServedModel> model;  // runner/scheduler/tokenizer usable only when state == kReady
  ModelState state;
  std::string error;
};

class ModelManager final : public engine::ModelDirectory {
 public:
  // `device` (null: the CPU) outlives the manager.
  ModelManager(const ServerConfig& config, const base::Clock* clock, ProfilingServices profiling = {},
               runtime::ComputeDevice* device = nullptr);
  ~ModelManager() override;

  // Loads every entry of the repository; returns an error only if the repository itself is unusable.
  absl::Status LoadAll();
  // Admin LoadModel: reads the repository's entry `name` again and loads it, returning once it is READY,
  // or its error (the entry then listed FAILED): NOT_FOUND without an entry, ALREADY_EXISTS if it is
  // loaded (or loading, or unloading), RESOURCE_EXHAUSTED if its budget does not fit.
  absl::Status LoadModel(const std::string& name);
  // Admin UnloadModel: the model takes no new request; its running and queued ones finish within
  // `grace` (the rest end UNAVAILABLE); then it is no longer served and its budget is free. NOT_FOUND if
  // it is not served, FAILED_PRECONDITION while it loads.
  absl::Status UnloadModel(const std::string& name, absl::Duration grace);
  // Admin SleepModel (Note [A model asleep], profiler/model_execution.cc): asks the model's scheduler to
  // put it to sleep once nothing runs and waits for it, up to `timeout` (DEADLINE_EXCEEDED past it);
  // FAILED_PRECONDITION for a model that keeps no device budget, UNAVAILABLE while it loads.
  absl::Status SleepModel(const std::string& name, absl::Duration timeout);
  // Admin WakeModel: one idle decode pass (batch 1) wakes a sleeping model; waits for it, up to `timeout`.
  absl::Status WakeModel(const std::string& name, absl::Duration timeout);
  bool loaded() const;
  // The model by name; model == nullptr when no such model is served.
  ModelView Find(const std::string& name) const;
  // ... for a client that named it: INVALID_ARGUMENT for a name no model can have (CheckModelName),
  // NOT_FOUND saying it is not served.
  absl::StatusOr<ModelView> Lookup(const std::string& name) const;
  // ... and ready to serve: `while_loading` (the caller's code) while it loads, FAILED_PRECONDITION
  // with its error if it failed to.
  absl::StatusOr<std::shared_ptr<const ServedModel>> Ready(const std::string& name,
                                                           absl::StatusCode while_loading) const;
  // Ready(name, UNAVAILABLE), as the front door takes a model (engine/generation_frontend.h).
  absl::StatusOr<engine::GenerationTarget> ReadyTarget(const std::string& name) const override;
  std::vector<ModelView> List() const;
  std::vector<Listing> ListModels() const override;
  // Stops every scheduler (see Scheduler::Shutdown).
  void Shutdown(absl::Duration grace);

 private:
  // Takes the model's budget (its own, else `share`) and loads it; its entry ends READY or FAILED with the
  // error returned.
  absl::Status LoadEntry(const std::shared_ptr<ServedModel>& model, int64_t share);
  absl::Status LoadOne(ServedModel* model);
  void PlanAtLoad(ServedModel* model);  // Note [Plans before the first request], model_manager.cc

  struct Entry {
    std::shared_ptr<ServedModel> model;
    ModelState state = ModelState::kLoading;
    std::string error;               // why loading failed
    absl::Time found = absl::Now();  // when the repository's entry was found
  };

  const ServerConfig config_;
  const base::Clock* clock_;
  const ProfilingServices profiling_;
  runtime::ComputeDevice* const device_;
  const bool budgeted_;  // models have device budgets (profiling on, a GPU spec known)
  const int64_t reserve_bytes_;
  // The turns the models' passes take on the device (Note [Passes by shares]); each model's seat holds it.
  const std::shared_ptr<engine::StepTurns> turns_ = std::make_shared<engine::StepTurns>();
  mutable absl::Mutex mu_;
  DeviceBudgets budgets_ ABSL_GUARDED_BY(mu_);
  // A model's share of what the explicit budgets left at start (Note [Budgets that hold together]).
  int64_t share_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace autouvm::server
