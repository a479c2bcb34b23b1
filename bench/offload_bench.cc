// offload_bench (GPU host): decode of a Llama-architecture model in managed memory under a device
// budget, on the real GPU, policy against policy, with the link floor and the simulator's prediction
// beside each row. The model's weights are generated on the GPU from a seed (docs/model-contract.md),
// so a 7B or 13B model needs no checkpoint.
//
//   build-gpu/bench/offload_bench --preset 7b --batches 1,16 --factors 1.0,1.5,2.0 --policies stock,autouvm
//
// For each batch: a prompt is prefilled into every slot with everything resident, one decode step is
// recorded (the Observer), and the reference tokens are decoded resident. Then for each budget
// (named bytes / factor) and policy, every weight and the KV cache go back to the host and --steps
// decode steps run from there: the first is the cold step (everything crosses the link; the policy's
// preparation counted), the median of the others the steady step. Tokens must equal the reference.
//
// Policies: `stock` — no hints; under a budget the driver's eviction is emulated (DriverEviction,
// runtime/driver_eviction.h: chunks given GPU memory first go back first, migrated to the host, at the
// op that needs room), since the card itself is never oversubscribed (../shared/gpu/NOTES.md).
// `autouvm` — the profiler's plan for the budget, followed by the Executor at each op. `paper` — AutoUVM
// as published (profiler::MakePaperPlan), the driver's eviction emulated as for stock; `paper-prefetch`
// and `paper-pin` are its ablation (tensor prefetch only; + affinity pinning; `paper` adds the roofline
// gate). `explicit` — FlexGen-style offloading (bench/explicit_offload.h). `prefetched` — a diagnostic:
// everything prefetched back to the device, no plan.
//
// The link floor is max(resident step, (named bytes - budget) / 55.4 GB/s); the resident step is the
// best median of three resident runs (the host's timing of this dispatch-bound step is noisy).
//
// "sim steady": the simulator's replay of the recorded step under the same plan (for stock and paper
// under a budget, with the same emulated driver eviction).
//
// Device memory: cudaMemGetInfo does not count managed memory (the probe below shows it), so residency
// is the policy's own account (Executor / DriverEviction peak), checked by CUPTI: pages reach the device
// only by the policy's prefetches or by faults, and the "other arrivals" column (host->device bytes by
// faults and by the driver's own prefetching, per steady step) must be 0 for the account to be whole.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/explicit_offload.h"
#include "profiler/analysis.h"
#include "profiler/planner.h"
#include "profiler/profile_key.h"
#include "profiler/reuse.h"
#include "profiler/roofline.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/managed_memory.h"
#include "runtime/driver_eviction.h"
#include "runtime/executor.h"
#include "runtime/observer.h"
#include "runtime/sim/trace_replay.h"
#include "server/generated_weights.h"
#include "server/llama_builder.h"
#include "server/torch_dtype.h"

namespace {

using autouvm::runtime::AccessTrace;
using autouvm::runtime::Location;
using autouvm::runtime::MigrationCause;
using autouvm::runtime::Stream;
using autouvm::runtime::TensorRange;
using autouvm::runtime::UvmCounters;
using Clock = std::chrono::steady_clock;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kLinkBytesPerSecond = 55.4e9;  // pinned copies, ../shared/gpu/NOTES.md

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "offload_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(std::string(what) + ": " + std::string(v.status().message()));
  return std::move(v).value();
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + std::string(s.message()));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int64_t DeviceUsed() {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return static_cast<int64_t>(total - free);
}

struct Model {
  autouvm::server::ModelConfig config;
  torch::jit::Module module;
  torch::Tensor k_cache, v_cache;
  std::vector<std::pair<std::string, TensorRange>> named;  // in allocation order
  int64_t named_bytes = 0;
};

torch::Tensor OnGpu(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(torch::kCUDA); }

// One decode step for slots 0..B-1 at `pos`; returns the greedy tokens.
std::vector<int64_t> DecodeStep(Model& m, const std::vector<int64_t>& tokens, int64_t pos) {
  const int64_t b = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> slots(b), positions(b, pos);
  for (int64_t i = 0; i < b; ++i) slots[i] = i;
  auto logits =
      m.module.forward({OnGpu(tokens).view({b, 1}), OnGpu(slots), OnGpu(positions), m.k_cache, m.v_cache}).toTensor();
  auto next = logits.select(1, 0).argmax(-1).to(torch::kCPU);
  return std::vector<int64_t>(next.data_ptr<int64_t>(), next.data_ptr<int64_t>() + b);
}

// What the driver does with the calls the executor makes, measured before the runs: how long a
// prefetch call holds the calling thread, and whether a read-mostly range prefetched to the host keeps
// its device copy (device memory in use, cudaMemGetInfo).
void ProbeDriver(autouvm::runtime::DeviceBackend* backend) {
  using autouvm::runtime::Advice;
  const int64_t bytes = int64_t{1} << 30;
  const uint64_t a = Check(backend->AllocateManaged(bytes), "probe allocation");
  const UvmCounters start = Check(backend->ReadCounters(), "counters");
  cudaMemset(reinterpret_cast<void*>(a), 1, static_cast<size_t>(bytes));
  cudaDeviceSynchronize();
  Check(backend->Prefetch(a, bytes, Location::kHost, Stream::kCopy), "probe");
  Check(backend->Synchronize(), "probe");
  const int64_t base = DeviceUsed();
  Check(backend->Advise(a, bytes, Advice::kReadMostly, true), "probe");
  auto t0 = Clock::now();
  Check(backend->Prefetch(a, bytes, Location::kDevice, Stream::kCopy), "probe");
  const double call_s = Seconds(t0, Clock::now());
  Check(backend->Synchronize(), "probe");
  const double done_s = Seconds(t0, Clock::now());
  const int64_t in = DeviceUsed() - base;
  t0 = Clock::now();
  Check(backend->Prefetch(a, bytes, Location::kHost, Stream::kCopy), "probe");
  Check(backend->Synchronize(), "probe");
  const double back_s = Seconds(t0, Clock::now());
  const int64_t after_host_prefetch = DeviceUsed() - base;
  t0 = Clock::now();
  Check(backend->Advise(a, bytes, Advice::kPreferredLocation, true, Location::kHost), "probe");
  Check(backend->Advise(a, bytes, Advice::kReadMostly, false), "probe");
  const double unset_s = Seconds(t0, Clock::now());
  const int64_t after_unset = DeviceUsed() - base;
  // Is the device copy gone? A GPU write faults it back in if so (CUPTI counts the bytes).
  const UvmCounters before_touch = Check(backend->ReadCounters(), "counters");
  cudaMemsetAsync(reinterpret_cast<void*>(a), 2, static_cast<size_t>(bytes), nullptr);
  cudaDeviceSynchronize();
  const UvmCounters touched = Check(backend->ReadCounters(), "counters") - before_touch;
  (void)start;
  std::printf(
      "driver probe, 1 GiB read-mostly: prefetch to the device holds the calling thread %.2f ms of %.2f ms; "
      "device memory in use +%.2f GiB. Prefetch back to the host: %.2f ms, +%.2f GiB still in use. "
      "Preferred location host + unset read-mostly: %.2f ms, +%.2f GiB in use; a GPU write after it "
      "moved %.2f GiB host->device (%lld fault groups).\n",
      1e3 * call_s, 1e3 * done_s, in / kGiB, 1e3 * back_s, after_host_prefetch / kGiB, 1e3 * unset_s,
      after_unset / kGiB, touched.h2d_total() / kGiB, (long long)touched.gpu_fault_groups);
  Check(backend->Advise(a, bytes, Advice::kPreferredLocation, false), "probe");
  Check(backend->FreeManaged(a), "probe");
}

struct RunResult {
  double cold_s = 0, steady_s = 0, prepare_s = 0;
  bool tokens_match = true;
  int64_t accounted_peak = 0;
  UvmCounters steady_moved;  // per steady step (the last)
  std::string note;
};

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "7b", batches_flag = "1,16", factors_flag = "1.0,1.5,1.75,2.0", policies_flag = "stock,autouvm";
  int steps = 6, prompt_len = 16;
  int64_t seed = 1;
  bool explicit_sync = false;
  CLI::App app{"Decode under a device budget on the real GPU: stock UVM against the autouvm executor"};
  app.add_option("--preset", preset, "7b | 13b | small (Llama-2 dimensions; small for a quick check)")
      ->check(CLI::IsMember({"7b", "13b", "small"}))
      ->capture_default_str();
  app.add_option("--batches", batches_flag)->capture_default_str();
  app.add_option("--factors", factors_flag, "oversubscription factors: named bytes / budget")->capture_default_str();
  app.add_option("--policies", policies_flag)->capture_default_str();
  app.add_option("--steps", steps, "decode steps per run (the first is the cold one)")
      ->check(CLI::Range(3, 1000))
      ->capture_default_str();
  app.add_option("--prompt-len", prompt_len)->check(CLI::Range(1, 512))->capture_default_str();
  app.add_option("--seed", seed)->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->capture_default_str();
  app.add_flag("--explicit-sync", explicit_sync,
               "diagnostic: explicit offloading synchronizes the device around every copy");
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> batches;
  for (auto s : absl::StrSplit(batches_flag, ',')) batches.push_back(std::stoll(std::string(s)));
  std::vector<double> factors;
  for (auto s : absl::StrSplit(factors_flag, ',')) factors.push_back(std::stod(std::string(s)));
  std::vector<std::string> policies = absl::StrSplit(policies_flag, ',');
  for (const auto& p : policies) {
    if (p != "stock" && p != "autouvm" && p != "explicit" && p != "prefetched" && p != "paper" &&
        p != "paper-prefetch" && p != "paper-pin") {
      Die("unknown policy " + p + " (known: stock, paper-prefetch, paper-pin, paper, autouvm, explicit, prefetched)");
    }
  }

  autouvm::server::ModelConfig c = autouvm::server::DefaultTinyModelConfig("offload-bench");
  c.vocab_size = 32000;
  c.dtype = "bf16";
  c.max_seq = prompt_len + steps + 8;
  if (preset == "7b") {
    c.dim = 4096, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 32, c.ffn_dim = 11008;
  } else if (preset == "13b") {
    c.dim = 5120, c.n_layers = 40, c.n_heads = 40, c.n_kv_heads = 40, c.ffn_dim = 13824;
  } else {
    c.dim = 1024, c.n_layers = 8, c.n_heads = 8, c.n_kv_heads = 8, c.ffn_dim = 2816;
  }
  c.head_dim = c.dim / c.n_heads;
  c.generated_weights_seed = seed;
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());

  const int64_t cap = Check(autouvm::runtime::cuda::ManagedMemoryPool::CapFromEnvironment(), "cap");
  if (cap == 0) Die("set AUTOUVM_MAX_MANAGED_BYTES (source .gpu/env.sh)");
  auto pool = Check(autouvm::runtime::cuda::ManagedMemoryPool::Create(0, {.cap_bytes = cap}), "pool");
  c10::cuda::CUDAStream compute = c10::cuda::getStreamFromPool(/*isHighPriority=*/true);
  c10::cuda::CUDAStreamGuard stream_guard(compute);
  const auto spec = *autouvm::runtime::FindGpuSpec("h200-pcie5");
  auto backend = Check(autouvm::runtime::cuda::CudaBackend::Create({.spec = spec, .compute_stream = compute.stream()}),
                       "CUDA backend");
  autouvm::runtime::DeviceBackend* gpu = backend.get();  // the interface (its default arguments)
  auto observer = Check(autouvm::runtime::Observer::Create(), "observer");
  autouvm::runtime::Observer::MakeExecutionRepeatable();
  torch::NoGradGuard no_grad;
  ProbeDriver(backend.get());
  autouvm::runtime::cuda::ManagedMemoryPool::Scope scope(pool.get());

  // The model, its weights generated on the GPU in managed memory.
  Model m;
  m.config = c;
  const auto dir = std::filesystem::temp_directory_path() / ("offload-bench-" + std::to_string(getpid()));
  Check(autouvm::server::WriteLlamaModel(c, static_cast<uint64_t>(seed), dir.string()), "writing the model");
  const auto t_load = Clock::now();
  m.module = torch::jit::load((dir / c.name / "model.pt").string());
  std::filesystem::remove_all(dir);
  Check(autouvm::server::GenerateWeights(m.module, seed, torch::kCUDA), "generating weights");
  m.module.to(torch::kCUDA);
  const auto dtype = autouvm::server::TorchDtype(c.dtype);
  m.k_cache = torch::zeros({c.n_layers, max_batch, c.n_kv_heads, c.max_seq, c.head_dim},
                           torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
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
  cudaDeviceSynchronize();
  std::printf(
      "model: %s preset (dim %lld, %lld layers, ffn %lld, vocab %lld, bf16), weights generated on the GPU "
      "in %.1f s; %.2f GiB named (weights, rope tables, KV cache for %lld slots x %lld positions)\n",
      preset.c_str(), (long long)c.dim, (long long)c.n_layers, (long long)c.ffn_dim, (long long)c.vocab_size,
      Seconds(t_load, Clock::now()), m.named_bytes / kGiB, (long long)max_batch, (long long)c.max_seq);

  std::unordered_map<std::string, TensorRange> ranges(m.named.begin(), m.named.end());
  auto all_to_host = [&] {
    for (const auto& [id, r] : m.named) {
      Check(gpu->Advise(r.addr, r.bytes, autouvm::runtime::Advice::kReadMostly, false), "advice");
      Check(gpu->Advise(r.addr, r.bytes, autouvm::runtime::Advice::kPreferredLocation, false), "advice");
      Check(gpu->Advise(r.addr, r.bytes, autouvm::runtime::Advice::kAccessedBy, false), "advice");
      Check(backend->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCopy), "prefetch to host");
    }
    Check(backend->Synchronize(), "synchronize");
    cudaDeviceSynchronize();
  };

  std::printf(
      "\n| model | batch | factor | policy | budget GiB | cold step ms (of it preparing) | steady step ms | tokens/s | "
      "link floor ms | floor / steady | sim steady ms | sim / real | tokens = reference | "
      "resident peak GiB | H2D GiB/step | other arrivals GiB/step | D2H GiB/step | fault groups/step | "
      "plan: pinned / remote / streamed GiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const int64_t batch : batches) {
    // Prefill every slot (resident), keep the cache state, then record one decode step.
    std::vector<int64_t> prompt(prompt_len * batch);
    for (int64_t i = 0; i < prompt_len * batch; ++i) prompt[i] = 1 + (i * 7919) % (c.vocab_size - 1);
    std::vector<int64_t> slots(batch), zero(batch, 0);
    for (int64_t i = 0; i < batch; ++i) slots[i] = i;
    auto prefill =
        m.module.forward({OnGpu(prompt).view({batch, prompt_len}), OnGpu(slots), OnGpu(zero), m.k_cache, m.v_cache})
            .toTensor();
    std::vector<int64_t> first_tokens;
    {
      auto next = prefill.select(1, prompt_len - 1).argmax(-1).to(torch::kCPU);
      first_tokens.assign(next.data_ptr<int64_t>(), next.data_ptr<int64_t>() + batch);
    }
    auto run_steps = [&](autouvm::runtime::OpSubscriber* follow, std::vector<std::vector<int64_t>>* out,
                         std::vector<double>* times) {
      std::vector<int64_t> tok = first_tokens;
      if (follow) observer->AddSubscriber(follow);
      for (int s = 0; s < steps; ++s) {
        const auto t0 = Clock::now();
        if (follow) observer->BeginIteration(autouvm::runtime::IterationMode::kObserve);
        tok = DecodeStep(m, tok, prompt_len + s);  // .to(kCPU) synchronizes
        if (follow) observer->EndIteration();
        if (times) times->push_back(Seconds(t0, Clock::now()));
        out->push_back(tok);
      }
      if (follow) observer->RemoveSubscriber(follow);
    };
    // The recorded step (warm), then the reference tokens and the resident step time.
    observer->BeginIteration();
    DecodeStep(m, first_tokens, prompt_len);
    const AccessTrace trace = observer->EndIteration();
    // The simulator's capacity for a budget: the budget plus the activations' room, which its layout of
    // the step gives (footprint beyond the named tensors).
    const int64_t activations = [&]() -> int64_t {
      auto layout = autouvm::runtime::sim::ReplayTrace(trace, spec, {.iterations = 1});
      return layout.ok() ? std::max<int64_t>(0, layout->footprint_bytes - m.named_bytes) : 0;
    }();
    // Everything on the device (prefetched there first: the previous batch's runs left it elsewhere);
    // the host's timing noise is large at this step length, so the best median of three runs.
    all_to_host();
    for (const auto& [id, rg] : m.named)
      Check(backend->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
    Check(backend->Synchronize(), "synchronize");
    std::vector<std::vector<int64_t>> reference;
    double resident_s = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<double> resident_times;
      reference.clear();
      run_steps(nullptr, &reference, &resident_times);
      resident_times.erase(resident_times.begin());
      resident_s = std::min(resident_s, Median(resident_times));
    }
    std::printf("| %s | %lld | resident | - | - | - | %.2f | %.1f | %zu ops per step |\n", preset.c_str(),
                (long long)batch, 1e3 * resident_s, batch / resident_s, trace.ops.size());
    std::fflush(stdout);

    for (const double factor : factors) {
      const auto budget = static_cast<int64_t>(static_cast<double>(m.named_bytes) / factor);
      const double floor_s = std::max(resident_s, static_cast<double>(m.named_bytes - budget) / kLinkBytesPerSecond);
      autouvm::v1::Plan plan;
      for (const std::string& policy : policies) {
        RunResult r;
        all_to_host();
        std::unique_ptr<autouvm::runtime::Executor> executor;
        std::unique_ptr<autouvm::runtime::PlanFollower> follower;
        std::unique_ptr<autouvm::runtime::DriverEviction> eviction;
        std::unique_ptr<autouvm::bench::ExplicitOffload> offload;
        struct EvictionHook : autouvm::runtime::OpSubscriber {
          autouvm::runtime::DriverEviction* ev;
          absl::Status status;
          void BeforeOp(int64_t i) override {
            if (status.ok()) status = ev->BeforeOp(i);
          }
          void OnOp(const autouvm::runtime::OpEvent&) override {}
        } hook;
        autouvm::runtime::OpSubscriber* follow = nullptr;
        std::vector<std::vector<int64_t>> tokens;
        std::vector<double> times;
        UvmCounters before_last;
        {
          const auto t_prepare = Clock::now();
          const bool paper = policy.rfind("paper", 0) == 0;
          if (policy == "autouvm" || paper) {
            const auto key = autouvm::profiler::DecodeKey("offload-bench", static_cast<int32_t>(batch), "h200-pcie5",
                                                          budget, paper ? "paper" : "autouvm");
            if (paper) {
              // The paper's plan and its ablation: tensor prefetch only, + affinity pinning, + roofline gate.
              autouvm::v1::Profile stock_classes;
              autouvm::profiler::Classify(trace, spec, autouvm::profiler::PinnedResidency(autouvm::v1::Plan()),
                                          &stock_classes);
              plan = autouvm::profiler::MakePaperPlan(
                  key, trace, autouvm::profiler::ReuseDistances(trace), stock_classes,
                  {.affinity_pinning = policy != "paper-prefetch", .roofline_gate = policy == "paper"});
            } else {
              plan = autouvm::profiler::Analyze(key, trace, spec, absl::Now()).plan;
            }
            executor = std::make_unique<autouvm::runtime::Executor>(backend.get(), plan, trace, ranges);
            if (paper && factor > 1.0) {
              eviction = std::make_unique<autouvm::runtime::DriverEviction>(backend.get(), trace, ranges, budget);
              executor->set_driver_eviction(eviction.get());
            }
            Check(executor->Prepare(), "executor prepare");
            if (executor->follows_ops()) {
              follower = std::make_unique<autouvm::runtime::PlanFollower>(executor.get(), trace);
              follow = follower.get();
            }
          } else if (policy == "explicit" || policy == "prefetched") {
            // prefetched: everything back on the device by plain prefetches, no plan (a diagnostic
            // row: the resident step after migration, whatever the factor).
            if (policy == "explicit") {
              offload = Check(
                  autouvm::bench::ExplicitOffload::Create(m.module, c.n_layers, m.named, trace, budget, explicit_sync),
                  "explicit offloading");
              follow = offload.get();
            }
            const std::vector<TensorRange> everything = [&] {
              std::vector<TensorRange> v;
              for (const auto& [id, rg] : m.named) v.push_back(rg);
              return v;
            }();
            for (const TensorRange& rg : offload ? offload->resident_ranges() : everything) {
              Check(backend->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
            }
            Check(backend->Synchronize(), "synchronize");
          } else if (factor > 1.0) {
            eviction = std::make_unique<autouvm::runtime::DriverEviction>(backend.get(), trace, ranges, budget);
            hook.ev = eviction.get();
            follow = &hook;
          }
          const double prepare_s = Seconds(t_prepare, Clock::now());
          r.prepare_s = prepare_s;
          std::vector<int64_t> tok = first_tokens;
          if (follow) observer->AddSubscriber(follow);
          for (int s = 0; s < steps; ++s) {
            if (s == steps - 1) before_last = Check(backend->ReadCounters(), "counters");
            const auto t0 = Clock::now();
            if (follow) observer->BeginIteration(autouvm::runtime::IterationMode::kObserve);
            tok = DecodeStep(m, tok, prompt_len + s);
            if (follow) observer->EndIteration();
            if (follower) {
              if (absl::Status why = follower->EndIteration(); !why.ok()) r.note = std::string(why.message());
            }
            times.push_back(Seconds(t0, Clock::now()) + (s == 0 ? prepare_s : 0.0));
            tokens.push_back(tok);
          }
          if (follow) observer->RemoveSubscriber(follow);
          cudaDeviceSynchronize();
        }
        if (!hook.status.ok()) r.note = std::string(hook.status.message());
        r.steady_moved = Check(backend->ReadCounters(), "counters") - before_last;
        r.cold_s = times.front();
        r.steady_s = Median(std::vector<double>(times.begin() + 1, times.end()));
        r.tokens_match = tokens == reference;
        r.accounted_peak = eviction   ? eviction->peak_resident_bytes()
                           : executor ? executor->peak_resident_bytes()
                           : offload  ? offload->accounted()
                                      : 0;
        // The simulator on the same trace, capacity = the budget plus the activations' room.
        double sim_s = 0;
        {
          autouvm::runtime::sim::ReplayOptions o{
              .policy = policy, .device_bytes = budget + activations, .iterations = 3};
          if (policy == "autouvm" || policy.rfind("paper", 0) == 0) {
            o.policy = policy == "autouvm" ? "autouvm" : "paper";
            o.make_plan = [&](int64_t) { return plan; };
          }
          // What this program does to stock and paper under a budget: the emulated driver, not the
          // simulator's own.
          if (policy != "autouvm" && factor > 1.0) o.emulated_eviction_budget = budget;
          if (policy != "explicit" && policy != "prefetched") {
            auto sim = autouvm::runtime::sim::ReplayTrace(trace, spec, o);
            if (sim.ok()) sim_s = sim->iterations.back().seconds;
          }
        }
        const UvmCounters& mv = r.steady_moved;
        const double other =
            static_cast<double>(mv.h2d(MigrationCause::kFault) + mv.h2d(MigrationCause::kDriverPrefetch));
        const std::string plan_cell = policy == "autouvm" || policy.rfind("paper", 0) == 0
                                          ? absl::StrFormat("%.2f / %.2f / %.2f", plan.pinned_bytes() / kGiB,
                                                            plan.remote_bytes() / kGiB, plan.streamed_bytes() / kGiB)
                                      : policy == "explicit"
                                          ? absl::StrFormat("copied per step: %.2f", offload->offloaded_bytes() / kGiB)
                                          : "-";
        std::printf(
            "| %s | %lld | %.2f | %s | %.2f | %.1f (%.1f) | %.2f | %.1f | %.2f | %.0f%% | %.2f | %.2f | %s | %.2f | "
            "%.2f | %.2f | %.2f | %lld | %s |%s\n",
            preset.c_str(), (long long)batch, factor, policy.c_str(), budget / kGiB, 1e3 * r.cold_s, 1e3 * r.prepare_s,
            1e3 * r.steady_s, batch / r.steady_s, 1e3 * floor_s, 100 * floor_s / r.steady_s, 1e3 * sim_s,
            sim_s / r.steady_s, r.tokens_match ? "yes" : "NO", r.accounted_peak / kGiB, mv.h2d_total() / kGiB,
            other / kGiB, mv.d2h_total() / kGiB, (long long)mv.gpu_fault_groups, plan_cell.c_str(),
            r.note.empty() ? "" : (" " + r.note).c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
