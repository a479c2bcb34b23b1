// What offload_bench and tests/gpu's executor test share (GPU host only): a Llama-architecture model
// whose weights are generated on the GPU in managed memory, its prefill and decode steps, and the
// policies that drive the UVM driver under a device budget — `stock` (no hints; under a budget the
// driver's eviction emulated, runtime/driver_eviction.h), `paper` with its ablation `paper-prefetch`
// and `paper-pin` (profiler::MakePaperPlan, the same emulated eviction), and `autouvm` (the profiler's
// plan, followed by the Executor).
//
//   ASSIGN_OR_RETURN(DecodeModel m, LoadDecodeModel(LlamaConfig("small", seed, max_seq), batch, observer));
//   ASSIGN_OR_RETURN(auto policy, BudgetPolicy::Create("autouvm", backend, trace, m, budget, batch));
//   observer->AddSubscriber(policy->subscriber());   // when not null
//   ... DecodeStep(m, tokens, pos) in observed iterations; RETURN_IF_ERROR(policy->EndIteration()) ...
//
// Not thread-safe: one thread drives a model and its policy.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "autouvm/v1/profile.pb.h"
#include "bench/transfer_log.h"
#include "engine/model_config.h"
#include "profiler/model_execution.h"
#include "profiler/profile_jobs.h"
#include "runtime/access_trace.h"
#include "runtime/device_backend.h"
#include "runtime/driver_eviction.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"
#include "runtime/plan.h"

namespace autouvm::bench {

// Llama-2 dimensions in bf16: "7b", "13b"; "small" (dim 1024, 8 layers) and "tiny" (dim 256, 4 layers,
// vocab 512) for quick checks. Weights generated at load from `seed`.
absl::StatusOr<engine::ModelConfig> LlamaConfig(const std::string& preset, int64_t seed, int64_t max_seq);

struct DecodeModel {
  engine::ModelConfig config;
  torch::jit::Module module;
  torch::Tensor k_cache, v_cache;                                   // [layers, max_batch, kv heads, max_seq, head dim]
  std::vector<std::pair<std::string, runtime::TensorRange>> named;  // in allocation order
  int64_t named_bytes = 0;

  std::unordered_map<std::string, runtime::TensorRange> ranges() const { return {named.begin(), named.end()}; }
};

// Builds the model (server/llama_builder), loads it onto the GPU with its weights generated there and a
// KV cache for `max_batch` slots, and names every parameter, buffer and cache to `observer` ("param:"
// ids). Call inside a ManagedMemoryPool scope to place it in managed memory.
absl::StatusOr<DecodeModel> LoadDecodeModel(const engine::ModelConfig& config, int64_t max_batch,
                                            runtime::Observer* observer);

// Prefills slots 0..batch-1 with a fixed prompt of `prompt_len` tokens; returns each slot's next token.
std::vector<int64_t> Prefill(DecodeModel& m, int64_t batch, int64_t prompt_len);
// One decode step for slots 0..tokens.size()-1 at position `pos`; returns the greedy tokens (synchronizes).
std::vector<int64_t> DecodeStep(DecodeModel& m, const std::vector<int64_t>& tokens, int64_t pos);

// The storages of the model's parameters, buffers and caches (what an executor may bind).
std::vector<c10::Storage> ModelStorages(const DecodeModel& m);

// Every named tensor back in host memory, with no advice left on it (the state a cold start begins in).
absl::Status MoveAllToHost(runtime::DeviceBackend* backend, const DecodeModel& m);

// A driver-managed policy under a device budget (named bytes the device may hold). `paper` and
// `autouvm` follow their plan through profiler::ModelExecution, the daemon's own wiring of the executor
// (no second one here); what the bench fixes is which iterations follow it: every observed one, the
// plan made up front from `trace` (the daemon's ModelSession records and plans in the background,
// bench/daemon_overhead measures that). The runtime monitor is off (its timed iterations would be
// measured as steps).
class BudgetPolicy final : private runtime::OpSubscriber {
 public:
  static bool Known(const std::string& policy);  // stock, paper-prefetch, paper-pin, paper, autouvm
  // The model's named tensors must be on the host (MoveAllToHost). For budgets below the named bytes,
  // stock and paper get the emulated driver eviction. The plan is prepared here, ready for the first
  // iteration.
  static absl::StatusOr<std::unique_ptr<BudgetPolicy>> Create(const std::string& policy,
                                                              runtime::DeviceBackend* backend,
                                                              const runtime::AccessTrace& trace, const DecodeModel& m,
                                                              int64_t budget, int64_t batch);
  // Staged weights go back into managed memory (the model lives on for the next policy).
  ~BudgetPolicy() override;

  // To add to the Observer for observed iterations; null when the policy does nothing per op.
  runtime::OpSubscriber* subscriber() { return forwards_ || hook_.eviction != nullptr ? this : nullptr; }
  // After each observed iteration: why the policy stopped following its plan, or the eviction's error.
  // Readies the plan for the next iteration.
  absl::Status EndIteration();
  // The named bytes the policy has placed on the device, now and at most (its account).
  int64_t resident_bytes() const;
  int64_t peak_resident_bytes() const;
  // The bytes the executor staged (autouvm; 0 for the others).
  int64_t staged_bytes() const { return execution_ != nullptr ? execution_->stats().staged_bytes : 0; }
  const runtime::Plan& plan() const { return follow_->plan; }               // empty for stock
  const autouvm::v1::Profile& profile() const { return follow_->profile; }  // the op classes under plan() (autouvm)

 private:
  struct EvictionHook : runtime::OpSubscriber {
    runtime::DriverEviction* eviction = nullptr;
    absl::Status status;
    void BeforeOp(int64_t index) override;
    void OnOp(const runtime::OpEvent&) override {}
  };
  BudgetPolicy() = default;
  // The iteration's subscribers, in the order the execution gave them (or the eviction hook).
  void BeforeOp(int64_t index) override;
  void OnOp(const runtime::OpEvent& op) override;
  // Makes the plan ready for the next iteration.
  absl::Status Begin();

  std::shared_ptr<profiler::PlanToFollow> follow_ = std::make_shared<profiler::PlanToFollow>();
  std::string key_;                                    // encoded
  std::unique_ptr<runtime::DriverEviction> eviction_;  // outlives the execution, whose executor calls it
  std::unique_ptr<profiler::ModelExecution> execution_;
  std::vector<runtime::OpSubscriber*> iteration_;  // this iteration's, from the execution
  absl::Status begun_;                             // why the plan could not be readied
  bool forwards_ = false;                          // the plan acts at op boundaries
  EvictionHook hook_;
};

// What the benchmarks print beside a measured row (offload_bench's decode, ttft_runs' prefill):
// The simulator's last of three iterations of `trace` for a budget policy (stock, paper and its ablation,
// autouvm) on `spec` with room for `budget` named bytes and `activations` — the plan followed for paper
// and autouvm (`plan`, null for stock), and for stock and paper under a budget (factor > 1) the
// driver's eviction emulated as the GPU benchmark does. 0 if the replay fails. `moved`, if given, gets
// what that iteration moved; `transfers`, its policy's transfers (bench/transfer_log.h).
double SimulatedSeconds(const runtime::AccessTrace& trace, const runtime::GpuSpec& spec, const std::string& policy,
                        const runtime::Plan* plan, int64_t budget, int64_t activations, double factor,
                        runtime::UvmCounters* moved = nullptr, TransferSummary* transfers = nullptr);
// A plan's GiB pinned / remote / streamed, "staged" or "buffered" (Plan.device_buffer) if it stages,
// and the GiB the executor staged when it prepared the plan (`staged_bytes`, unless negative).
std::string PlanCell(const runtime::Plan& plan, int64_t staged_bytes = -1);

// What the planner needs beside a budget for the named tensors: the activations' room it sets aside
// (profiler::PeakActivationBytes) and the step's inputs (token ids, positions: persistent but not
// named), which every policy has on the device beside its budget. Without the inputs the planner found
// the 7B at factor 1.0 some KiB short and read the 250 MiB output projection in place.
int64_t PlannerRoom(const runtime::AccessTrace& trace);

}  // namespace autouvm::bench
