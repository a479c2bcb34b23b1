#include "server/model_manager.h"

#include <algorithm>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "engine/llama_builder.h"
#include "profiler/profile_key.h"
#include "runtime/unplanned_placement.h"
#include "server/request_validation.h"

namespace autouvm::server {

namespace fs = std::filesystem;

namespace {

// The text of token `id` as the chat template sees it ("" for none, and where the tokenizer decodes the
// token to nothing: the byte tokenizer's and sentencepiece's control tokens).
std::string TokenText(const tokenizer::Tokenizer& t, int64_t id) {
  return id < 0 ? "" : t.Decode(std::vector<int32_t>{static_cast<int32_t>(id)});
}

// The model's chat template parsed, and the texts of its bos and eos; a template that does not parse is
// an error naming where it came from and its line.
absl::Status LoadChatTemplate(ServedModel* m) {
  const engine::ModelConfig& c = m->config;
  m->bos_token = c.bos_token.empty() ? TokenText(*m->tokenizer, c.bos_id) : c.bos_token;
  m->eos_token = c.eos_token.empty() ? TokenText(*m->tokenizer, c.eos_id) : c.eos_token;
  if (c.chat_template.empty()) return absl::OkStatus();
  absl::StatusOr<tokenizer::ChatTemplate> parsed = tokenizer::ChatTemplate::Parse(c.chat_template);
  if (!parsed.ok()) {
    const std::string where = c.chat_template_file.empty()
                                  ? (fs::path(m->dir) / "model.yaml").string() + ": chat_template"
                                  : (fs::path(m->dir) / c.chat_template_file).string();
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
  }
  m->chat_template = *std::move(parsed);
  return absl::OkStatus();
}

}  // namespace

ModelManager::ModelManager(const ServerConfig& config, const base::Clock* clock, ProfilingServices profiling,
                           runtime::ComputeDevice* device)
    : config_(config),
      clock_(clock),
      profiling_(std::move(profiling)),
      device_(device),
      budgeted_(profiling_.jobs != nullptr && profiling_.gpu.memory_bytes > 0),
      reserve_bytes_(config_.DeviceReserveBytes(profiling_.gpu.memory_bytes)),
      budgets_(profiling_.gpu.memory_bytes, reserve_bytes_, profiling_.gpu.name) {}

ModelManager::~ModelManager() { Shutdown(absl::ZeroDuration()); }

absl::Status ModelManager::LoadAll() {
  const fs::path repo(config_.model_repository);
  std::error_code ec;
  const bool created = fs::create_directories(repo, ec);
  if (ec)
    return absl::FailedPreconditionError(
        absl::StrCat("repository.path: cannot create ", repo.string(), ": ", ec.message()));
  if (created) {
    AUTOUVM_LOG(INFO) << "created the model repository " << fs::absolute(repo, ec).string()
                      << " (repository.path did not exist)";
  }
  if (!config_.generate_default_model.empty() && !fs::exists(repo / config_.generate_default_model / "model.yaml")) {
    AUTOUVM_LOG(INFO) << "generating the default model " << (repo / config_.generate_default_model).string();
    RETURN_IF_ERROR(
        engine::WriteLlamaModel(engine::DefaultTinyModelConfig(config_.generate_default_model), 0, repo.string()));
  }
  std::vector<std::shared_ptr<ServedModel>> to_load;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& entry : fs::directory_iterator(repo, ec)) {
      if (!entry.is_directory()) continue;
      if (!fs::exists(entry.path() / "model.yaml")) {
        // Not a model entry (a volume's lost+found, a half-copied model): said, so that a model that is
        // not listed can be found out.
        AUTOUVM_LOG(WARNING) << "skipping " << entry.path().string() << ": no model.yaml, not a model entry";
        continue;
      }
      auto m = std::make_shared<ServedModel>();
      m->name = entry.path().filename().string();
      m->dir = entry.path().string();
      m->settings = config_.SettingsFor(m->name);
      to_load.push_back(m);
      entries_[m->name].model = std::move(m);
    }
    if (ec)
      return absl::FailedPreconditionError(
          absl::StrCat("repository.path: cannot list ", repo.string(), ": ", ec.message()));
  }
  // Note [Budgets that hold together] (server/device_budgets.cc): the models without a budget of their own
  // share what the reserve and the others' budgets leave.
  int64_t explicit_bytes = 0, shares = 0;
  for (const auto& m : to_load) {
    if (m->settings.device_budget > 0) {
      explicit_bytes += m->settings.DeviceBudgetBytes(profiling_.gpu.memory_bytes);
    } else {
      ++shares;
    }
  }
  const int64_t share = std::max<int64_t>(
      0, (profiling_.gpu.memory_bytes - reserve_bytes_ - explicit_bytes) / std::max<int64_t>(shares, 1));
  {
    absl::MutexLock lock(&mu_);
    share_bytes_ = share;
  }
  for (const auto& m : to_load) (void)LoadEntry(m, share);
  absl::MutexLock lock(&mu_);
  loaded_ = true;
  return absl::OkStatus();
}

absl::Status ModelManager::LoadEntry(const std::shared_ptr<ServedModel>& m, int64_t share) {
  absl::Status s;
  if (budgeted_) {
    const bool own = m->settings.device_budget > 0;
    const int64_t want = own ? m->settings.DeviceBudgetBytes(profiling_.gpu.memory_bytes) : share;
    absl::MutexLock lock(&mu_);
    absl::StatusOr<int64_t> taken = budgets_.Take(m->name, want, /*share=*/!own);
    if (taken.ok()) {
      m->device_budget_bytes = *taken;
    } else {
      s = taken.status();
    }
  }
  if (s.ok()) s = LoadOne(m.get());
  absl::MutexLock lock(&mu_);
  Entry& entry = entries_[m->name];
  if (s.ok()) {
    entry.state = ModelState::kReady;
    AUTOUVM_LOG(INFO).Model(m->name) << "model " << m->name << " ready (" << m->runner->parameter_count()
                                     << " parameters, " << m->config.dtype << ", max_batch " << m->settings.max_batch
                                     << (budgeted_ ? absl::StrCat(", device budget ", m->device_budget_bytes, " bytes")
                                                   : std::string())
                                     << ")";
  } else {
    budgets_.Give(m->name);
    entry.state = ModelState::kFailed;
    entry.error = std::string(s.message());
    AUTOUVM_LOG(ERROR).Model(m->name) << "model " << m->name << " failed to load: " << s.message();
  }
  return s;
}

absl::Status ModelManager::LoadModel(const std::string& name) {
  RETURN_IF_ERROR(engine::CheckModelName(name));
  const fs::path dir = fs::path(config_.model_repository) / name;
  if (name == "." || name == ".." || name.find('/') != std::string::npos || !fs::exists(dir / "model.yaml")) {
    return absl::NotFoundError(absl::StrCat("the model repository has no entry ", (dir / "model.yaml").string()));
  }
  auto m = std::make_shared<ServedModel>();
  m->name = name;
  m->dir = dir.string();
  m->settings = config_.SettingsFor(name);
  int64_t share = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!loaded_) return absl::UnavailableError("the daemon is still loading its models");
    auto it = entries_.find(name);
    if (it != entries_.end() && it->second.state != ModelState::kFailed) {
      return absl::AlreadyExistsError(absl::StrCat("model '", name, "' is ",
                                                   it->second.state == ModelState::kReady ? "loaded" : "busy",
                                                   "; unload it first to load it again"));
    }
    entries_[name] = Entry{.model = m};
    share = share_bytes_;
  }
  // Note [Budgets that hold together]: without a budget of its own it asks for the share of the start.
  return LoadEntry(m, share);
}

absl::Status ModelManager::UnloadModel(const std::string& name, absl::Duration grace) {
  std::shared_ptr<ServedModel> m;
  bool ready = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("model '", name, "' is not served"));
    if (it->second.state == ModelState::kLoading || it->second.state == ModelState::kUnloading) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", name, "' is ", it->second.state == ModelState::kLoading ? "loading" : "being unloaded already"));
    }
    ready = it->second.state == ModelState::kReady;
    it->second.state = ModelState::kUnloading;
    m = it->second.model;
  }
  // Its queue takes nothing new; what runs and waits finishes within `grace`, the rest with UNAVAILABLE.
  if (ready) m->scheduler->Shutdown(grace);
  AUTOUVM_LOG(INFO).Model(name) << "model " << name << " unloaded";
  absl::MutexLock lock(&mu_);
  entries_.erase(name);
  budgets_.Give(name);
  // The model's memory goes with the last request or status call that still holds it.
  return absl::OkStatus();
}

namespace {

// Polls `done` every 5 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

}  // namespace

absl::Status ModelManager::SleepModel(const std::string& name, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> m, Ready(name, absl::StatusCode::kUnavailable));
  if (m->execution == nullptr || !m->execution->can_sleep()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' keeps no device budget to give back (policy ", m->settings.policy,
                     "; sleep needs policy autouvm with the profiler and runtime.executor on)"));
  }
  if (m->execution->asleep()) return absl::OkStatus();
  m->scheduler->RequestSleep();
  if (!WaitFor([&] { return m->execution->asleep(); }, timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("model '", name, "' still ran requests after ",
                                                    absl::FormatDuration(timeout), " (server.drain_timeout)"));
  }
  return absl::OkStatus();
}

absl::Status ModelManager::WakeModel(const std::string& name, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> m, Ready(name, absl::StatusCode::kUnavailable));
  if (m->execution == nullptr || !m->execution->asleep()) return absl::OkStatus();
  RETURN_IF_ERROR(m->scheduler->RunIdleIteration(profiler::IterationPhase::kDecode, 1, 0));
  if (!WaitFor([&] { return !m->execution->asleep(); }, timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("model '", name, "' did not wake within ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

absl::Status ModelManager::LoadOne(ServedModel* m) {
  // Read once: the config and the digest are of the same text.
  const std::string yaml_path = (fs::path(m->dir) / "model.yaml").string();
  ASSIGN_OR_RETURN(const std::string yaml, base::ReadTextFile(yaml_path, "the model's model.yaml"));
  ASSIGN_OR_RETURN(m->config, engine::ParseModelConfig(yaml, yaml_path));
  if (m->config.name != m->name) {
    return absl::InvalidArgumentError(absl::StrCat(m->dir, "/model.yaml: name '", m->config.name,
                                                   "' differs from the directory name '", m->name, "'"));
  }
  ASSIGN_OR_RETURN(m->tokenizer, tokenizer::CreateTokenizer(engine::TokenizerSpecOf(m->config), m->dir));
  RETURN_IF_ERROR(LoadChatTemplate(m));
  // Note [The budget from load] (runtime/unplanned_placement.cc): under `autouvm` the executor keeps the
  // model within its budget, from its first weight on the device.
  const int64_t budget = m->device_budget_bytes;
  const bool keeps_budget = profiling_.jobs != nullptr && profiling_.executor && m->settings.policy == "autouvm";
  std::unique_ptr<runtime::UnplannedPlacement> placement;
  engine::PlaceWeight place;
  if (keeps_budget && device_ != nullptr && device_->backend() != nullptr) {
    placement = std::make_unique<runtime::UnplannedPlacement>(device_->backend(), budget);
    place = [p = placement.get()](uint64_t addr, int64_t bytes, int64_t all_bytes) {
      return p->Place(addr, bytes, all_bytes);
    };
  }
  ASSIGN_OR_RETURN(m->runner,
                   engine::ModelRunner::Create(
                       m->dir, m->config, static_cast<int>(m->settings.max_batch), device_,
                       {.tokens = m->settings.kv_cache_tokens, .block_tokens = m->settings.kv_block_tokens}, place));
  // Note [Captured steps] (engine/step_graphs.cc): on a GPU, decode and packed steps nothing observes run as
  // graphs.
  if (config_.cuda_graphs && device_ != nullptr && device_->kind() == "cuda") {
    const absl::Status s = m->runner->EnableStepGraphs({.mode = engine::StepGraphMode::kDevice,
                                                        .max_batch = static_cast<int>(config_.cuda_graph_max_batch),
                                                        .max_tokens = static_cast<int>(config_.cuda_graph_max_tokens)});
    if (s.ok()) {
      m->graphs_on = true;
    } else {
      AUTOUVM_LOG(WARNING).Model(m->name) << "decode steps run eagerly: " << s.message();
    }
  }
  // The digest names the model's profiles: a changed model.pt or model.yaml is a new model to them.
  ASSIGN_OR_RETURN(m->digest, profiler::ModelDigest((fs::path(m->dir) / "model.pt").string(), yaml));
  engine::SchedulerOptions options;
  options.max_batch = static_cast<int>(m->settings.max_batch);
  options.max_queue = static_cast<int>(m->settings.max_queue);
  options.prefill_tokens = m->settings.max_prefill_tokens;
  options.max_queue_delay = absl::Milliseconds(m->settings.max_queue_delay_ms);
  options.size_steps = m->settings.size_steps;
  options.step_growth = m->settings.step_growth;
  options.max_step = absl::Milliseconds(m->settings.max_step_ms);
  options.min_prefill_tokens = m->settings.min_prefill_tokens;
  options.idle_sleep = absl::Milliseconds(m->settings.idle_sleep_ms);
  m->turns = std::make_unique<engine::StepTurns::Seat>(turns_, m->settings.share);
  options.turns = m->turns.get();
  if (profiling_.jobs != nullptr) {
    const std::vector<runtime::NamedTensor> named = m->runner->NamedTensors();
    std::unique_ptr<profiler::ModelExecution> execution;
    profiler::ExecutionOptions execution_options = profiling_.execution;
    execution_options.budget_bytes = keeps_budget ? budget : 0;
    execution_options.sleep_keep_bytes = m->settings.SleepFloorBytes(budget);
    // Note [Staged passes captured] (runtime/executor_capture.cc): graphs for the passes that stream too.
    execution_options.capture_passes = m->graphs_on && config_.cuda_graphs_streaming;
    if (profiling_.executor && device_ != nullptr && device_->backend() != nullptr) {
      execution = profiler::ModelExecution::OnDevice(device_->backend(), named, execution_options,
                                                     m->runner->NewTensorBinding(), std::move(placement));
    } else if (profiling_.executor) {
      ASSIGN_OR_RETURN(execution, profiler::ModelExecution::Mirror(profiling_.gpu, named, execution_options));
    }
    ASSIGN_OR_RETURN(m->session,
                     profiler::ModelSession::Create({m->digest, profiling_.gpu.name, budget, m->settings.policy},
                                                    profiling_.jobs, named, std::move(execution)));
    m->execution = m->session->execution();
    if (m->execution != nullptr) {
      // The mirror's weights (and on a GPU any not placed as they were loaded) take their places now.
      if (absl::Status s = m->execution->PlaceUnplanned(); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("placing the model within its device budget: ", s.message()));
      }
      // Note [KV pools follow the rows in use] (runtime/executor_kv_rows.cc).
      m->runner->set_kv_rows_listener(
          [execution = m->execution](int64_t live, int64_t pool) { execution->SetKvRows(live, pool); });
    }
    options.hooks = m->session.get();
  }
  m->scheduler = std::make_unique<engine::Scheduler>(m->runner.get(), m->tokenizer.get(), options, clock_);
  if (m->settings.plan_at_load && m->execution != nullptr) PlanAtLoad(m);
  return absl::OkStatus();
}

// Note [Plans before the first request]: a shape with no plan of its own follows the nearest planned
// shape of its phase (Note [Planned from the nearest profile], profiler/model_session.cc), but a phase's
// very first shape has none to follow: it runs with no plan, faulting the weights in past the budget, and
// the next plan evicts them again. On the H200's 7B at factor 2 the first mixed pass of a growing batch
// took 3.8 s, and the first followed pass 1.1 s, where a planned pass takes 0.1-0.2 s. With
// plan_at_load, a model is profiled before it is served: one idle pass of each phase (decode at batch 1,
// a prefill of 16 tokens, and a mixed pass of one decode row and one 16-token prompt) records or checks its
// profile, the analyses are waited for, and the three run again following their plans, decode last, so the
// model is within its budget when it becomes READY and every phase has a plan from the first request on.
// What cannot run (a model of one slot has no mixed pass) is skipped; a wait past two minutes ends the
// warm-up, said in the log, and the model is served as without it.
void ModelManager::PlanAtLoad(ServedModel* m) {
  const absl::Time started = absl::Now();
  const int64_t len = std::min<int64_t>(16, m->config.max_seq - 1);
  struct Shape {
    engine::IterationPhase phase;
    int batch;
  };
  std::vector<Shape> shapes = {{engine::IterationPhase::kPrefill, 1}, {engine::IterationPhase::kDecode, 1}};
  if (m->settings.max_batch >= 2) shapes.insert(shapes.begin() + 1, {engine::IterationPhase::kMixed, 2});
  // Runs each shape once (decode last) and waits until the scheduler has run them all; false past the deadline.
  const absl::Time deadline = started + absl::Minutes(2);
  uint64_t queued = 0;  // of the last round
  auto run_all = [&]() {
    queued = 0;
    const uint64_t before = m->scheduler->Stats().idle_passes_total;
    for (const Shape& s : shapes) {
      const int64_t prompt = s.phase == engine::IterationPhase::kDecode ? 0 : len;
      if (absl::Status q = m->scheduler->RunIdleIteration(s.phase, s.batch, prompt); !q.ok()) {
        AUTOUVM_LOG(WARNING).Model(m->name) << "planning at load: " << q.message();
        continue;
      }
      ++queued;
    }
    while (m->scheduler->Stats().idle_passes_total < before + queued) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  };
  const bool done = run_all() && (profiling_.jobs->Drain(), run_all());
  if (!done) {
    AUTOUVM_LOG(WARNING).Model(m->name) << "planning at load did not finish within 2 minutes; serving without it";
    return;
  }
  AUTOUVM_LOG(INFO).Model(m->name) << "planned " << queued << " shapes before serving (a " << len
                                   << "-token prompt) in " << absl::ToInt64Milliseconds(absl::Now() - started) << " ms";
}

bool ModelManager::loaded() const {
  absl::MutexLock lock(&mu_);
  return loaded_;
}

ModelView ModelManager::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return {nullptr, ModelState::kFailed, ""};
  return {it->second.model, it->second.state, it->second.error};
}

absl::StatusOr<ModelView> ModelManager::Lookup(const std::string& name) const {
  RETURN_IF_ERROR(CheckModelName(name));
  ModelView view = Find(name);
  if (view.model == nullptr) return absl::NotFoundError(absl::StrCat("model '", name, "' is not served"));
  return view;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelManager::Ready(const std::string& name,
                                                                       absl::StatusCode while_loading) const {
  ASSIGN_OR_RETURN(const ModelView view, Lookup(name));
  if (view.state == ModelState::kLoading) {
    return absl::Status(while_loading, absl::StrCat("model '", name, "' is still loading"));
  }
  if (view.state == ModelState::kUnloading) {
    return absl::UnavailableError(absl::StrCat("model '", name, "' is being unloaded"));
  }
  if (view.state == ModelState::kFailed) {
    return absl::FailedPreconditionError(absl::StrCat("model '", name, "' failed to load: ", view.error));
  }
  return view.model;
}

absl::StatusOr<engine::GenerationTarget> ModelManager::ReadyTarget(const std::string& name) const {
  ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> m, Ready(name, absl::StatusCode::kUnavailable));
  return engine::GenerationTarget{.name = m->name,
                                  .config = &m->config,
                                  .tokenizer = m->tokenizer.get(),
                                  .scheduler = m->scheduler.get(),
                                  .default_max_tokens = m->settings.default_max_tokens,
                                  .max_tokens_limit = m->settings.max_tokens_limit,
                                  .chat_template = m->chat_template ? &*m->chat_template : nullptr,
                                  .bos_token = m->bos_token,
                                  .eos_token = m->eos_token,
                                  .keep_alive = m};
}

std::vector<ModelView> ModelManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<ModelView> out;
  for (const auto& [name, entry] : entries_) out.push_back({entry.model, entry.state, entry.error});
  return out;
}

std::vector<engine::ModelDirectory::Listing> ModelManager::ListModels() const {
  absl::MutexLock lock(&mu_);
  std::vector<Listing> out;
  for (const auto& [name, entry] : entries_) {
    const char* state = entry.state == ModelState::kReady       ? "ready"
                        : entry.state == ModelState::kLoading   ? "loading"
                        : entry.state == ModelState::kUnloading ? "unloading"
                                                                : "failed";
    out.push_back({.name = name,
                   .ready = entry.state == ModelState::kReady,
                   .state = state,
                   .created_unix = absl::ToUnixSeconds(entry.found)});
  }
  return out;
}

void ModelManager::Shutdown(absl::Duration grace) {
  std::vector<std::shared_ptr<ServedModel>> ready;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, entry] : entries_) {
      if (entry.state == ModelState::kReady) ready.push_back(entry.model);
    }
  }
  for (const auto& m : ready) m->scheduler->Shutdown(grace);
}

}  // namespace autouvm::server
