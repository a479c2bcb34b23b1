#include "bench/decode_harness.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "bench/bench_util.h"
#include "engine/generated_weights.h"
#include "engine/llama_builder.h"
#include "engine/torch_dtype.h"
#include "profiler/analysis.h"
#include "profiler/planner.h"
#include "profiler/profile_key.h"
#include "profiler/reuse.h"
#include "runtime/sim/trace_replay.h"
#include "runtime/storage_binding.h"

namespace autouvm::bench {
namespace {

torch::Tensor OnGpu(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(torch::kCUDA); }

std::vector<int64_t> Greedy(const torch::Tensor& logits, int64_t position) {
  auto next = logits.select(1, position).argmax(-1).to(torch::kCPU);
  return std::vector<int64_t>(next.data_ptr<int64_t>(), next.data_ptr<int64_t>() + next.size(0));
}

}  // namespace

absl::StatusOr<engine::ModelConfig> LlamaConfig(const std::string& preset, int64_t seed, int64_t max_seq) {
  engine::ModelConfig c = engine::DefaultTinyModelConfig("decode-bench");
  c.vocab_size = 32000;
  c.dtype = "bf16";
  c.max_seq = max_seq;
  if (preset == "7b") {
    c.dim = 4096, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 32, c.ffn_dim = 11008;
  } else if (preset == "mistral7b") {  // Mistral-7B's dimensions: grouped-query attention, 8 KV heads
    c.dim = 4096, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 8, c.ffn_dim = 14336;
  } else if (preset == "13b") {
    c.dim = 5120, c.n_layers = 40, c.n_heads = 40, c.n_kv_heads = 40, c.ffn_dim = 13824;
  } else if (preset == "small") {
    c.dim = 1024, c.n_layers = 8, c.n_heads = 8, c.n_kv_heads = 8, c.ffn_dim = 2816;
  } else if (preset == "tiny") {
    c.dim = 256, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 4, c.ffn_dim = 704, c.vocab_size = 512;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("preset ", preset, ": not one of 7b, mistral7b, 13b, small, tiny"));
  }
  c.head_dim = c.dim / c.n_heads;
  c.generated_weights_seed = seed;
  RETURN_IF_ERROR(engine::ValidateModelConfig(c));
  return c;
}

absl::StatusOr<DecodeModel> LoadDecodeModel(const engine::ModelConfig& c, int64_t max_batch,
                                            runtime::Observer* observer) {
  DecodeModel m;
  m.config = c;
  const auto dir = std::filesystem::temp_directory_path() / ("decode-harness-" + std::to_string(getpid()));
  RETURN_IF_ERROR(engine::WriteLlamaModel(c, static_cast<uint64_t>(c.generated_weights_seed), dir.string()));
  try {
    m.module = torch::jit::load((dir / c.name / "model.pt").string());
  } catch (const c10::Error& e) {
    std::filesystem::remove_all(dir);
    return absl::InternalError(absl::StrCat("loading the built model: ", e.what_without_backtrace()));
  }
  std::filesystem::remove_all(dir);
  RETURN_IF_ERROR(engine::GenerateWeights(m.module, c.generated_weights_seed, torch::kCUDA));
  m.module.to(torch::kCUDA);
  m.k_cache = torch::zeros({c.n_layers, max_batch, c.n_kv_heads, c.max_seq, c.head_dim},
                           torch::TensorOptions().dtype(engine::TorchDtype(c.dtype)).device(torch::kCUDA));
  m.v_cache = torch::zeros_like(m.k_cache);
  auto name = [&](const at::Tensor& t, const std::string& n) {
    const auto bytes = static_cast<int64_t>(t.storage().nbytes());
    observer->NameTensor(t.storage().data(), n, bytes);
    m.named.push_back({"param:" + n, {reinterpret_cast<uint64_t>(t.storage().data()), bytes}});
    m.named_bytes += bytes;
  };
  for (const auto& p : m.module.named_parameters()) name(p.value, p.name);
  for (const auto& b : m.module.named_buffers()) name(b.value, b.name);
  name(m.k_cache, "kv_cache.k");
  name(m.v_cache, "kv_cache.v");
  return m;
}

std::vector<int64_t> Prefill(DecodeModel& m, int64_t batch, int64_t prompt_len) {
  std::vector<int64_t> prompt(prompt_len * batch), slots(batch), zero(batch, 0);
  for (int64_t i = 0; i < prompt_len * batch; ++i) prompt[i] = 1 + (i * 7919) % (m.config.vocab_size - 1);
  for (int64_t i = 0; i < batch; ++i) slots[i] = i;
  auto logits =
      m.module.forward({OnGpu(prompt).view({batch, prompt_len}), OnGpu(slots), OnGpu(zero), m.k_cache, m.v_cache})
          .toTensor();
  return Greedy(logits, prompt_len - 1);
}

std::vector<int64_t> DecodeStep(DecodeModel& m, const std::vector<int64_t>& tokens, int64_t pos) {
  const int64_t b = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> slots(b), positions(b, pos);
  for (int64_t i = 0; i < b; ++i) slots[i] = i;
  auto logits =
      m.module.forward({OnGpu(tokens).view({b, 1}), OnGpu(slots), OnGpu(positions), m.k_cache, m.v_cache}).toTensor();
  return Greedy(logits, 0);
}

std::vector<c10::Storage> ModelStorages(const DecodeModel& m) {
  std::vector<c10::Storage> out;
  for (const auto& p : m.module.named_parameters()) out.push_back(p.value.storage());
  for (const auto& b : m.module.named_buffers()) out.push_back(b.value.storage());
  out.push_back(m.k_cache.storage());
  out.push_back(m.v_cache.storage());
  return out;
}

absl::Status MoveAllToHost(runtime::DeviceBackend* backend, const DecodeModel& m) {
  using runtime::Advice;
  for (const auto& [id, r] : m.named) {
    for (Advice a : {Advice::kReadMostly, Advice::kPreferredLocation, Advice::kAccessedBy}) {
      RETURN_IF_ERROR(backend->Advise(r.addr, r.bytes, a, false));
    }
    RETURN_IF_ERROR(backend->Prefetch(r.addr, r.bytes, runtime::Location::kHost, runtime::Stream::kCopy));
  }
  return backend->Synchronize();
}

bool BudgetPolicy::Known(const std::string& p) {
  return p == "stock" || p == "paper-prefetch" || p == "paper-pin" || p == "paper" || p == "autouvm";
}

void BudgetPolicy::EvictionHook::BeforeOp(int64_t index) {
  if (status.ok()) status = eviction->BeforeOp(index);
}

absl::StatusOr<std::unique_ptr<BudgetPolicy>> BudgetPolicy::Create(const std::string& policy,
                                                                   runtime::DeviceBackend* backend,
                                                                   const runtime::AccessTrace& trace,
                                                                   const DecodeModel& m, int64_t budget,
                                                                   int64_t batch) {
  if (!Known(policy)) return absl::InvalidArgumentError(absl::StrCat("policy ", policy, ": not a budget policy"));
  std::unique_ptr<BudgetPolicy> self(new BudgetPolicy());
  const bool under_budget = budget < m.named_bytes;
  if (under_budget && policy != "autouvm") {
    self->eviction_ = std::make_unique<runtime::DriverEviction>(backend, trace, m.ranges(), budget);
  }
  if (policy == "stock") {
    self->hook_.eviction = self->eviction_.get();
    return self;
  }
  const bool paper = policy != "autouvm";
  const auto key = profiler::DecodeKey(m.config.name, static_cast<int32_t>(batch), std::string(backend->spec().name),
                                       budget, paper ? "paper" : "autouvm");
  self->key_ = profiler::EncodeKey(key);
  self->follow_->trace = trace;
  if (paper) {
    // The paper's plan and its ablation: tensor prefetch only, + affinity pinning, + the roofline gate.
    autouvm::v1::Profile stock_classes;
    profiler::Classify(trace, backend->spec(), profiler::PinnedResidency(runtime::Plan()), &stock_classes);
    self->follow_->plan =
        profiler::MakePaperPlan(key, trace, profiler::ReuseDistances(trace), stock_classes,
                                {.affinity_pinning = policy != "paper-prefetch", .roofline_gate = policy == "paper"});
  } else {
    profiler::Analysis analysis = profiler::Analyze(key, trace, backend->spec(), absl::Now());
    self->follow_->plan = std::move(analysis.plan);
    self->follow_->profile = std::move(analysis.profile);
  }
  std::vector<runtime::NamedTensor> named;
  for (const auto& [id, r] : m.named) {
    if (!absl::StartsWith(id, "param:")) return absl::InternalError(absl::StrCat(id, ": not a param: id"));
    named.push_back({id.substr(6), r.addr, r.bytes});
  }
  self->execution_ =
      profiler::ModelExecution::OnDevice(backend, named, {.monitor_every = 0, .driver_eviction = self->eviction_.get()},
                                         std::make_unique<runtime::StorageBinding>(ModelStorages(m)));
  RETURN_IF_ERROR(self->Begin());
  return self;
}

BudgetPolicy::~BudgetPolicy() {
  // Deliberately unchecked: a benchmark ending its run has no one to tell; the next run's MoveAllToHost
  // and its token check would show weights that did not come back.
  if (execution_ != nullptr) (void)execution_->Suspend();
}

absl::Status BudgetPolicy::Begin() {
  auto subscribers = execution_->Begin(key_, follow_);
  if (!subscribers.ok()) {
    begun_ = subscribers.status();
    iteration_.clear();
    return begun_;
  }
  iteration_ = *std::move(subscribers);
  forwards_ = forwards_ || !iteration_.empty();
  return absl::OkStatus();
}

void BudgetPolicy::BeforeOp(int64_t index) {
  if (hook_.eviction != nullptr) hook_.BeforeOp(index);
  for (runtime::OpSubscriber* s : iteration_) s->BeforeOp(index);
}

void BudgetPolicy::OnOp(const runtime::OpEvent& op) {
  for (runtime::OpSubscriber* s : iteration_) s->OnOp(op);
}

absl::Status BudgetPolicy::EndIteration() {
  if (execution_ == nullptr) return hook_.status;
  if (!begun_.ok()) return begun_;
  absl::Status why = execution_->End();
  absl::Status next = Begin();
  return why.ok() ? next : why;
}

int64_t BudgetPolicy::resident_bytes() const {
  return eviction_ ? eviction_->resident_bytes() : execution_ ? execution_->resident_bytes() : 0;
}

int64_t BudgetPolicy::peak_resident_bytes() const {
  return eviction_ ? eviction_->peak_resident_bytes() : execution_ ? execution_->peak_resident_bytes() : 0;
}

double SimulatedSeconds(const runtime::AccessTrace& trace, const runtime::GpuSpec& spec, const std::string& policy,
                        const runtime::Plan* plan, int64_t budget, int64_t activations, double factor,
                        runtime::UvmCounters* moved, TransferSummary* transfers) {
  runtime::sim::ReplayOptions o{.policy = "stock", .device_bytes = budget + activations, .iterations = 3};
  std::unique_ptr<TransferLog> log;  // over the replay's simulator, summarized before it goes
  if (transfers != nullptr) {
    o.through = [&log](runtime::DeviceBackend* sim) {
      log = std::make_unique<TransferLog>(sim);
      return log.get();
    };
    o.before_iteration = [&log, last = o.iterations - 1](int it) {
      if (it == last && log) log->Arm();
    };
    o.after_iteration = [&log, transfers, last = o.iterations - 1](int it) {
      if (it != last || !log) return;
      if (auto summary = log->Summarize(); summary.ok()) *transfers = *std::move(summary);
    };
  }
  if (plan != nullptr) {
    o.policy = policy == "autouvm" ? "autouvm" : "paper";
    o.make_plan = [plan](int64_t) { return *plan; };
  }
  // What the benchmarks do to stock and paper under a budget: the emulated driver, not the simulator's own.
  if (policy != "autouvm" && factor > 1.0) o.emulated_eviction_budget = budget;
  auto sim = runtime::sim::ReplayTrace(trace, spec, o);
  if (sim.ok() && moved != nullptr) *moved = sim->iterations.back().moved;
  return sim.ok() ? sim->iterations.back().seconds : 0;
}

std::string PlanCell(const runtime::Plan& plan, int64_t staged_bytes) {
  std::string cell = absl::StrFormat("%.2f / %.2f / %.2f", plan.pinned_bytes / kGiB, plan.remote_bytes / kGiB,
                                     plan.streamed_bytes / kGiB);
  if (plan.staged) absl::StrAppend(&cell, plan.device_buffer ? " buffered" : " staged");
  if (plan.staged && staged_bytes >= 0) absl::StrAppendFormat(&cell, " (%.2f staged)", staged_bytes / kGiB);
  return cell;
}

int64_t PlannerRoom(const runtime::AccessTrace& trace) {
  const auto reuse = profiler::ReuseDistances(trace);
  int64_t room = profiler::PeakActivationBytes(trace, reuse);
  for (const autouvm::v1::TensorReuse& r : reuse) {
    if (!profiler::IsTransient(r.id()) && !absl::StartsWith(r.id(), "param:")) room += r.bytes();
  }
  return room;
}

}  // namespace autouvm::bench
