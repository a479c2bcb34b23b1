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
// gate). `explicit` — FlexGen-style offloading (bench/explicit_offload.h). `zerocopy` — what vLLM's
// cpu-offload does: everything but the weights of the layers that do not fit goes to the device, those
// stay in host memory and the GPU reads them in place (preferred location host, accessed by the device).
// `prefetched` — a diagnostic: everything prefetched back to the device, no plan.
//
// --op-times: the last step of each run is timed op by op (runtime::OpTimer) and a line after the row
// says where its GPU time went: ops reading tensors left in host memory (autouvm's remote part,
// zerocopy's offloaded layers, explicit's copied layers — their first op waits for the copy) against
// the others; for explicit also how long the copy engine was busy.
//
// Before the runs it prints the probes of bench/uvm_probes.h (all, or those --probes names; --probe-only
// stops there; --copy-beside-decode adds one per batch). --step-times prints every step's time after
// each row, with the host's speed just before each step (HostSpeed) and, after the batch, how the steps
// that move nothing follow it. --ttft-prompt N times the first token of an N-token prompt under each budget instead
// (bench/ttft_runs.h).
//
// Budget: named bytes / factor, for the named tensors (weights, rope tables, KV cache) under every
// policy; activations come on top for all of them (the planner, which sets their room aside from the
// budget it is given, gets it added). "budget GiB" is the named part.
//
// The link floor is max(resident step, (named bytes - budget) / 55.4 GB/s); the resident step is the
// best median of the resident runs (three, or --resident-runs): the host's timing of this
// dispatch-bound step is noisy. A policy named more than once runs again, and a table after the
// batch pools each policy's runs against the resident ones (PrintPooled).
//
// "sim steady": the simulator's replay of the recorded step under the same plan (for stock and paper
// under a budget, with the same emulated driver eviction).
//
// Device memory: cudaMemGetInfo does not count managed memory (the driver probe shows it), so residency
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
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "bench/decode_harness.h"
#include "bench/explicit_offload.h"
#include "bench/step_times.h"
#include "bench/ttft_runs.h"
#include "bench/uvm_probes.h"
#include "profiler/planner.h"
#include "profiler/reuse.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/managed_memory.h"
#include "runtime/observer.h"
#include "runtime/op_timer.h"
#include "runtime/runtime_monitor.h"
#include "runtime/sim/trace_replay.h"
#include "runtime/trace_proto.h"

namespace {

using autouvm::runtime::AccessTrace;
using autouvm::runtime::Location;
using autouvm::runtime::MigrationCause;
using autouvm::runtime::Stream;
using autouvm::runtime::TensorRange;
using autouvm::runtime::UvmCounters;
using Clock = std::chrono::steady_clock;

using autouvm::bench::Check;
using autouvm::bench::Die;
using autouvm::bench::FormatStepsAtTheirRate;
using autouvm::bench::FormatTransfers;
using autouvm::bench::HostSpeed;
using autouvm::bench::IdleStep;
using autouvm::bench::kGiB;
using autouvm::bench::kLinkBytesPerSecond;
using autouvm::bench::Median;
using autouvm::bench::PrintByHostSpeed;
using autouvm::bench::PrintPooled;
using autouvm::bench::PrintStepTimes;
using autouvm::bench::ProbeHostSpeed;
using autouvm::bench::Seconds;

// zerocopy's split: which named tensors stay in host memory — the weights of the layers, from the last,
// that do not fit in the budget once everything else is resident (the same rule as explicit offloading's,
// without its two buffers: bench/explicit_offload.h LayersThatFit).
struct ZeroCopy {
  std::vector<bool> host;  // parallel to the named tensors
  int64_t host_bytes = 0, resident_bytes = 0;
};

ZeroCopy ZeroCopySplit(const std::vector<std::pair<std::string, TensorRange>>& named, int64_t n_layers,
                       int64_t budget) {
  auto layer_of = [](const std::string& id) -> int64_t {
    return id.rfind("param:", 0) == 0 ? autouvm::bench::LayerIndex(id.substr(6)) : -1;
  };
  std::vector<int64_t> layer_bytes(n_layers, 0);
  int64_t rest = 0;
  for (const auto& [id, r] : named) {
    const int64_t l = layer_of(id);
    if (l >= 0 && l < n_layers) {
      layer_bytes[l] += r.bytes;
    } else {
      rest += r.bytes;
    }
  }
  const auto [keep, resident] = autouvm::bench::LayersThatFit(layer_bytes, rest, budget, /*reserve=*/0);
  ZeroCopy z;
  z.resident_bytes = resident;
  for (const auto& [id, r] : named) {
    const int64_t l = layer_of(id);
    z.host.push_back(l >= keep && l < n_layers);
    if (z.host.back()) z.host_bytes += r.bytes;
  }
  return z;
}

// What a policy that leaves migration to the driver moved in its last step, by cause, beside the
// simulator's last iteration of the same trace: which of the driver's mechanisms the step's time went to.
void PrintByCause(const std::string& policy, const UvmCounters& gpu, const UvmCounters& sim) {
  auto row = [](const UvmCounters& c) {
    return absl::StrFormat(
        "to the device: fault %.2f, driver prefetch %.2f, prefetch %.2f GiB; to the host: prefetch %.2f, eviction "
        "%.2f GiB, dropped %.2f GiB; %lld fault entries in %lld groups",
        c.h2d(MigrationCause::kFault) / kGiB, c.h2d(MigrationCause::kDriverPrefetch) / kGiB,
        c.h2d(MigrationCause::kUserPrefetch) / kGiB, c.d2h(MigrationCause::kUserPrefetch) / kGiB,
        c.d2h(MigrationCause::kEviction) / kGiB, c.dropped_bytes / kGiB, (long long)c.gpu_faults,
        (long long)c.gpu_fault_groups);
  };
  std::printf("  by cause (%s, last step), GPU: %s\n", policy.c_str(), row(gpu).c_str());
  std::printf("  by cause (%s, last step), sim: %s\n", policy.c_str(), row(sim).c_str());
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
  autouvm::bench::BenchName() = "offload_bench";
  std::string preset = "7b", batches_flag = "1,16", factors_flag = "1.0,1.5,1.75,2.0", policies_flag = "stock,autouvm";
  int steps = 6, prompt_len = 16, ttft_prompt = 0, resident_run_count = 3;
  int64_t seed = 1;
  bool explicit_sync = false, op_times = false, probe_only = false, copy_beside_decode = false, no_probes = false,
       step_times = false, keep_host_mappings = false, transfer_times = false;
  std::string save_traces, probes_flag = "all";
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
  app.add_option("--resident-runs", resident_run_count, "resident runs per batch (the floor: their best median)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--prompt-len", prompt_len)->check(CLI::Range(1, 512))->capture_default_str();
  app.add_option("--seed", seed)->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->capture_default_str();
  app.add_flag("--explicit-sync", explicit_sync,
               "diagnostic: explicit offloading synchronizes the device around every copy");
  app.add_flag("--op-times", op_times,
               "time the last step (with --ttft-prompt: prefill) of each run op by op and say where the time went");
  app.add_flag("--step-times", step_times,
               "print every step's time after each row (the resident runs' too), with the host's speed before "
               "each step (HostSpeed)");
  app.add_flag("--transfer-times", transfer_times,
               "time every steady step's transfers of the driver-managed policies (stock, paper*) by stream "
               "and direction (bench/transfer_log.h), with the simulator's beside them");
  app.add_flag("--probe-only", probe_only, "run the probes, then stop");
  app.add_flag("--keep-host-mappings", keep_host_mappings,
               "diagnostic: between runs, leave ranges that a run mapped from host memory as they are (Note "
               "[Mappings outlive their advice])");
  app.add_flag("--no-probes", no_probes, "skip the probes (they were printed by an earlier run)");
  app.add_option("--probes", probes_flag,
                 "which probes to run: all, or some of driver, queued, link, drop, staged, staged-ring, placement, "
                 "eviction, host-copy, host-alloc, host-copies")
      ->capture_default_str();
  app.add_option("--save-traces", save_traces,
                 "directory to write each batch's recorded decode step to (<preset>-decode-b<batch>.trace, "
                 "for autouvm-sim replay)");
  app.add_option("--ttft-prompt", ttft_prompt,
                 "instead of the decode runs: time to first token for one prompt of this many tokens "
                 "(bench/ttft_runs.h; policies stock, paper*, autouvm, explicit)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--copy-beside-decode", copy_beside_decode,
               "diagnostic: time pinned copies alone and beside resident decode steps");
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> batches;
  for (auto s : absl::StrSplit(batches_flag, ',')) batches.push_back(std::stoll(std::string(s)));
  std::vector<double> factors;
  for (auto s : absl::StrSplit(factors_flag, ',')) factors.push_back(std::stod(std::string(s)));
  std::vector<std::string> policies = absl::StrSplit(policies_flag, ',');
  for (const auto& p : policies) {
    if (p != "stock" && p != "autouvm" && p != "explicit" && p != "zerocopy" && p != "prefetched" && p != "paper" &&
        p != "paper-prefetch" && p != "paper-pin") {
      Die("unknown policy " + p +
          " (known: stock, paper-prefetch, paper-pin, paper, autouvm, explicit, zerocopy, prefetched)");
    }
  }

  const autouvm::engine::ModelConfig c =
      Check(autouvm::bench::LlamaConfig(preset, seed, std::max(prompt_len + steps, ttft_prompt) + 8), "model config");
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
  if (!no_probes) {
    using ProbeFn = absl::Status (*)(autouvm::runtime::DeviceBackend*);
    const std::vector<std::pair<std::string, ProbeFn>> all = {{"driver", autouvm::bench::ProbeDriver},
                                                              {"queued", autouvm::bench::ProbeQueuedPrefetch},
                                                              {"link", autouvm::bench::ProbeLink},
                                                              {"drop", autouvm::bench::ProbeDrop},
                                                              {"staged", autouvm::bench::ProbeStaged},
                                                              {"staged-ring", autouvm::bench::ProbeStagedRing},
                                                              {"placement", autouvm::bench::ProbePlacement},
                                                              {"eviction", autouvm::bench::ProbeEvictionCycles},
                                                              {"host-copy", autouvm::bench::ProbeHostCopyFill},
                                                              {"host-alloc", autouvm::bench::ProbeHostCopyAlloc},
                                                              {"host-copies", autouvm::bench::ProbeHostCopyMany}};
    const std::vector<std::string> wanted = absl::StrSplit(probes_flag, ',');
    for (const std::string& w : wanted) {
      if (w != "all" && std::none_of(all.begin(), all.end(), [&](const auto& p) { return p.first == w; })) {
        Die("unknown probe " + w +
            " (known: all, driver, queued, link, drop, staged, staged-ring, placement, eviction, "
            "host-copy, host-alloc, host-copies)");
      }
    }
    for (const auto& [name, probe] : all) {
      const bool run =
          std::any_of(wanted.begin(), wanted.end(), [&](const std::string& w) { return w == "all" || w == name; });
      if (run) Check(probe(gpu), name + " probe");
    }
  }
  if (probe_only) return 0;
  autouvm::runtime::cuda::ManagedMemoryPool::Scope scope(pool.get());

  // The model, its weights generated on the GPU in managed memory.
  const auto t_load = Clock::now();
  autouvm::bench::DecodeModel m = Check(autouvm::bench::LoadDecodeModel(c, max_batch, observer.get()), "the model");
  cudaDeviceSynchronize();
  std::printf(
      "model: %s preset (dim %lld, %lld layers, ffn %lld, vocab %lld, bf16), weights generated on the GPU "
      "in %.1f s; %.2f GiB named (weights, rope tables, KV cache for %lld slots x %lld positions)\n",
      preset.c_str(), (long long)c.dim, (long long)c.n_layers, (long long)c.ffn_dim, (long long)c.vocab_size,
      Seconds(t_load, Clock::now()), m.named_bytes / kGiB, (long long)max_batch, (long long)c.max_seq);

  // explicit's pinned host copy, allocated before any policy runs (PinnedArena, bench/explicit_offload.h).
  std::unique_ptr<autouvm::bench::PinnedArena> pinned;
  if (std::find(policies.begin(), policies.end(), "explicit") != policies.end()) {
    pinned = Check(autouvm::bench::PinnedArena::Create(m.named_bytes), "pinned host memory for explicit");
  }
  if (ttft_prompt > 0) {
    Check(
        autouvm::bench::RunTtft(
            m, gpu, observer.get(), spec,
            {.prompt_len = ttft_prompt, .factors = factors, .policies = policies, .op_times = op_times}, pinned.get()),
        "time to first token");
    return 0;
  }
  // --step-times: a few floats on the device for the host speed probe before each step.
  at::Tensor scratch = at::zeros({256}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat));
  const c10::cuda::CUDAStream probe_stream = c10::cuda::getStreamFromPool();
  // Note [Mappings outlive their advice]: a range the device was given access to in host memory
  // (zerocopy's layers, a plan's remote tensors) may stay mapped after the advice is unset — CUDA says
  // such mappings "may be removed at any time". On the H200 host (2026-11-30), `stock` at 1.75 run after
  // `zerocopy` in one process (13B) migrated 12.5 GiB per step where alone it migrated 23 GiB: about the
  // 10.6 GiB zerocopy had left in host memory, read (it seems) through the old mappings. Between runs
  // such ranges now go to the device and back, which remaps them; --keep-host-mappings skips that, to
  // compare (not yet run on the GPU).
  std::vector<TensorRange> mapped_from_host;
  auto all_to_host = [&] {
    Check(autouvm::bench::MoveAllToHost(gpu, m), "moving everything to the host");
    if (!keep_host_mappings) {
      for (const TensorRange& rg : mapped_from_host) {
        Check(backend->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
        Check(backend->Prefetch(rg.addr, rg.bytes, Location::kHost, Stream::kCopy), "prefetch");
      }
      Check(backend->Synchronize(), "synchronize");
      mapped_from_host.clear();
    }
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
    const std::vector<int64_t> first_tokens = autouvm::bench::Prefill(m, batch, prompt_len);
    auto run_steps = [&](autouvm::runtime::OpSubscriber* follow, std::vector<std::vector<int64_t>>* out,
                         std::vector<double>* times, std::vector<HostSpeed>* speeds) {
      std::vector<int64_t> tok = first_tokens;
      if (follow) observer->AddSubscriber(follow);
      for (int s = 0; s < steps; ++s) {
        if (speeds) speeds->push_back(ProbeHostSpeed(scratch, probe_stream));
        const auto t0 = Clock::now();
        if (follow) observer->BeginIteration(autouvm::runtime::IterationMode::kObserve);
        tok = autouvm::bench::DecodeStep(m, tok, prompt_len + s);  // .to(kCPU) synchronizes
        if (follow) observer->EndIteration();
        if (times) times->push_back(Seconds(t0, Clock::now()));
        out->push_back(tok);
      }
      if (follow) observer->RemoveSubscriber(follow);
    };
    // The recorded step (warm), then the reference tokens and the resident step time.
    observer->BeginIteration();
    autouvm::bench::DecodeStep(m, first_tokens, prompt_len);
    const AccessTrace trace = observer->EndIteration();
    if (!save_traces.empty()) {
      const std::string path = save_traces + "/" + preset + "-decode-b" + std::to_string(batch) + ".trace";
      std::ofstream out(path, std::ios::binary);
      if (!out || !autouvm::runtime::ToProto(trace).SerializeToOstream(&out)) Die("cannot write " + path);
    }
    // The simulator's capacity for a budget: the budget plus the activations' room, which its layout of
    // the step gives (footprint beyond the named tensors).
    const int64_t activations = [&]() -> int64_t {
      auto layout = autouvm::runtime::sim::ReplayTrace(trace, spec, {.iterations = 1});
      return layout.ok() ? std::max<int64_t>(0, layout->footprint_bytes - m.named_bytes) : 0;
    }();
    // The room the planner sets aside for activations (its own count, not the simulator's layout).
    const int64_t planner_room = autouvm::bench::PlannerRoom(trace);
    // Everything on the device (prefetched there first: the previous batch's runs left it elsewhere);
    // the host's timing noise is large at this step length, so the best median of several runs.
    all_to_host();
    for (const auto& [id, rg] : m.named)
      Check(backend->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
    Check(backend->Synchronize(), "synchronize");
    std::vector<std::vector<int64_t>> reference;
    std::vector<std::vector<double>> resident_runs;  // steady step times of each resident run
    // --step-times: steady steps that move nothing (resident, and every policy at factor 1.0 or less)
    // with the host's speed just before each, for PrintByHostSpeed after the batch.
    std::vector<IdleStep> idle;
    double idle_sim_s = 0;  // the simulator's step at factor 1.0
    auto keep_idle = [&](const std::string& who, const std::vector<double>& steady,
                         const std::vector<HostSpeed>& speeds) {
      for (size_t k = 0; k < steady.size() && k + 1 < speeds.size(); ++k) {
        idle.push_back({.who = who, .step_s = steady[k], .speed = speeds[k + 1]});
      }
    };
    double resident_s = 1e9;
    for (int rep = 0; rep < resident_run_count; ++rep) {
      std::vector<double> resident_times;
      std::vector<HostSpeed> speeds;
      reference.clear();
      run_steps(nullptr, &reference, &resident_times, step_times ? &speeds : nullptr);
      if (step_times) PrintStepTimes("resident", resident_times, speeds);
      resident_times.erase(resident_times.begin());
      if (step_times) keep_idle("resident", resident_times, speeds);
      resident_runs.push_back(resident_times);
      resident_s = std::min(resident_s, Median(resident_times));
    }
    if (copy_beside_decode) {
      Check(autouvm::bench::ProbeCopyBesideDecode(m, first_tokens, prompt_len), "copy beside decode");
    }
    std::printf("| %s | %lld | resident | - | - | - | %.2f | %.1f | %zu ops per step |\n", preset.c_str(),
                (long long)batch, 1e3 * resident_s, batch / resident_s, trace.ops.size());
    std::fflush(stdout);

    // Steady step times of each run, by factor and policy: a policy named more than once in --policies
    // runs again, and the runs are pooled below.
    std::map<std::pair<double, std::string>, std::vector<std::vector<double>>> runs_of;
    for (const double factor : factors) {
      const auto budget = static_cast<int64_t>(static_cast<double>(m.named_bytes) / factor);
      const double floor_s = std::max(resident_s, static_cast<double>(m.named_bytes - budget) / kLinkBytesPerSecond);
      autouvm::v1::Plan plan;
      for (const std::string& policy : policies) {
        RunResult r;
        all_to_host();
        const bool driver_managed = policy == "stock" || policy.rfind("paper", 0) == 0;  // eviction emulated
        const bool log_transfers = transfer_times && driver_managed;
        // Before the policy that calls through it (destroyed after it).
        autouvm::bench::TransferLog transfer_log(gpu);
        std::unique_ptr<autouvm::bench::BudgetPolicy> managed;  // stock, paper (and ablation), autouvm
        int64_t staged_bytes = -1;                              // what the executor staged once prepared (autouvm)
        std::unique_ptr<autouvm::bench::ExplicitOffload> offload;
        ZeroCopy zerocopy;
        autouvm::runtime::OpTimer timer(gpu, /*every=*/steps - 1);  // times steps 0 and steps - 1
        std::vector<double> op_seconds;
        autouvm::runtime::OpSubscriber* follow = nullptr;
        std::vector<std::vector<int64_t>> tokens;
        std::vector<double> times;
        std::vector<autouvm::bench::TransferSummary> step_transfers;  // --transfer-times: steady steps'
        std::vector<HostSpeed> speeds;
        UvmCounters before_last;
        {
          const auto t_prepare = Clock::now();
          if (autouvm::bench::BudgetPolicy::Known(policy)) {
            // Every policy gets `budget` for the named tensors; the planner sets the activations' room
            // aside from the budget it is given, so autouvm's has that room added.
            const int64_t planned_budget = policy == "autouvm" ? budget + planner_room : budget;
            managed = Check(autouvm::bench::BudgetPolicy::Create(policy, log_transfers ? &transfer_log : gpu, trace, m,
                                                                 planned_budget, batch),
                            policy.c_str());
            plan = managed->plan();
            for (const auto& [id, rg] : m.named) {
              if (std::find(plan.remote().begin(), plan.remote().end(), id) != plan.remote().end()) {
                mapped_from_host.push_back(rg);
              }
            }
            follow = managed->subscriber();
            if (policy == "autouvm") staged_bytes = managed->staged_bytes();
          } else if (policy == "explicit" || policy == "prefetched") {
            // prefetched: everything back on the device by plain prefetches, no plan (a diagnostic
            // row: the resident step after migration, whatever the factor).
            if (policy == "explicit") {
              offload = Check(autouvm::bench::ExplicitOffload::Create(m.module, c.n_layers, m.named, trace, budget,
                                                                      pinned.get(), explicit_sync),
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
          } else if (policy == "zerocopy") {
            zerocopy = ZeroCopySplit(m.named, c.n_layers, budget);
            for (size_t k = 0; k < m.named.size(); ++k) {
              const TensorRange& rg = m.named[k].second;
              if (zerocopy.host[k]) {
                Check(
                    gpu->Advise(rg.addr, rg.bytes, autouvm::runtime::Advice::kPreferredLocation, true, Location::kHost),
                    "advice");
                Check(gpu->Advise(rg.addr, rg.bytes, autouvm::runtime::Advice::kAccessedBy, true), "advice");
                mapped_from_host.push_back(rg);
              } else {
                Check(backend->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
              }
            }
            Check(backend->Synchronize(), "synchronize");
          }
          const double prepare_s = Seconds(t_prepare, Clock::now());
          r.prepare_s = prepare_s;
          std::vector<int64_t> tok = first_tokens;
          // The timer marks each op before the follower makes the compute stream wait for its copies:
          // a wait counts to the op it delays.
          if (op_times) observer->AddSubscriber(&timer);
          if (follow) observer->AddSubscriber(follow);
          const bool observed = follow != nullptr || op_times;
          for (int s = 0; s < steps; ++s) {
            if (s == steps - 1) before_last = Check(backend->ReadCounters(), "counters");
            if (step_times) speeds.push_back(ProbeHostSpeed(scratch, probe_stream));
            const auto t0 = Clock::now();
            if (op_times) timer.BeginIteration();
            if (log_transfers && s > 0) transfer_log.Arm();
            if (observed) observer->BeginIteration(autouvm::runtime::IterationMode::kObserve);
            tok = autouvm::bench::DecodeStep(m, tok, prompt_len + s);
            if (observed) observer->EndIteration();
            if (op_times) {
              auto t = Check(timer.EndIteration(), "op times");
              if (s == steps - 1) op_seconds = std::move(t);
            }
            if (managed) {
              if (absl::Status why = managed->EndIteration(); !why.ok()) r.note = std::string(why.message());
            }
            times.push_back(Seconds(t0, Clock::now()) + (s == 0 ? prepare_s : 0.0));
            if (log_transfers && s > 0) step_transfers.push_back(Check(transfer_log.Summarize(), "transfer times"));
            tokens.push_back(tok);
          }
          if (follow) observer->RemoveSubscriber(follow);
          if (op_times) observer->RemoveSubscriber(&timer);
          cudaDeviceSynchronize();
        }
        autouvm::bench::TransferSummary sim_transfers;
        r.steady_moved = Check(backend->ReadCounters(), "counters") - before_last;
        r.cold_s = times.front();
        std::vector<double> steady(times.begin() + 1, times.end());
        r.steady_s = Median(steady);
        if (step_times && factor <= 1.0) keep_idle(policy, steady, speeds);
        runs_of[{factor, policy}].push_back(std::move(steady));
        r.tokens_match = tokens == reference;
        r.accounted_peak = managed   ? managed->peak_resident_bytes()
                           : offload ? offload->accounted()
                                     : zerocopy.resident_bytes;
        // The simulator on the same trace, capacity = the budget plus the activations' room.
        const bool planned = policy == "autouvm" || policy.rfind("paper", 0) == 0;
        UvmCounters sim_moved;
        const double sim_s =
            planned || policy == "stock"
                ? autouvm::bench::SimulatedSeconds(trace, spec, policy, planned ? &plan : nullptr, budget, activations,
                                                   factor, &sim_moved, log_transfers ? &sim_transfers : nullptr)
                : 0;
        if (factor <= 1.0 && sim_s > 0) idle_sim_s = sim_s;
        const UvmCounters& mv = r.steady_moved;
        const double other =
            static_cast<double>(mv.h2d(MigrationCause::kFault) + mv.h2d(MigrationCause::kDriverPrefetch));
        const std::string plan_cell =
            planned                ? autouvm::bench::PlanCell(plan, staged_bytes)
            : policy == "explicit" ? absl::StrFormat("copied per step: %.2f", offload->offloaded_bytes() / kGiB)
            : policy == "zerocopy" ? absl::StrFormat("in host memory: %.2f", zerocopy.host_bytes / kGiB)
                                   : "-";
        std::printf(
            "| %s | %lld | %.2f | %s | %.2f | %.1f (%.1f) | %.2f | %.1f | %.2f | %.0f%% | %.2f | %.2f | %s | %.2f | "
            "%.2f | %.2f | %.2f | %lld | %s |%s\n",
            preset.c_str(), (long long)batch, factor, policy.c_str(), budget / kGiB, 1e3 * r.cold_s, 1e3 * r.prepare_s,
            1e3 * r.steady_s, batch / r.steady_s, 1e3 * floor_s, 100 * floor_s / r.steady_s, 1e3 * sim_s,
            sim_s / r.steady_s, r.tokens_match ? "yes" : "NO", r.accounted_peak / kGiB, mv.h2d_total() / kGiB,
            other / kGiB, mv.d2h_total() / kGiB, (long long)mv.gpu_fault_groups, plan_cell.c_str(),
            r.note.empty() ? "" : (" " + r.note).c_str());
        if (driver_managed) PrintByCause(policy, mv, sim_moved);
        if (log_transfers && !step_transfers.empty()) {
          std::printf(
              "%s%s", FormatTransfers(policy + ", GPU, last step", step_transfers.back()).c_str(),
              FormatTransfers(policy + ", simulator, last iteration", sim_transfers, /*host_times=*/false).c_str());
          std::printf("%s\n", FormatStepsAtTheirRate(policy, times, step_transfers, [&](double rate) {
                                return autouvm::bench::SimulatedSeconds(
                                    trace, autouvm::runtime::WithDeviceToHostRate(spec, rate), policy,
                                    planned ? &plan : nullptr, budget, activations, factor);
                              }).c_str());
        }
        if (step_times) PrintStepTimes(policy, times, speeds);
        if (!op_seconds.empty()) {
          // What the GPU spent its last step on; "remote" = tensors that stayed in (or came from) host memory.
          std::vector<std::string> remote_ids;
          if (policy == "autouvm" || policy.rfind("paper", 0) == 0) {
            remote_ids.assign(plan.remote().begin(), plan.remote().end());
          } else if (policy == "explicit") {
            remote_ids = offload->offloaded_ids();
          } else if (policy == "zerocopy") {
            for (size_t k = 0; k < m.named.size(); ++k) {
              if (zerocopy.host[k]) remote_ids.push_back(m.named[k].first);
            }
          }
          const auto split = autouvm::runtime::SplitTime(trace, op_seconds, remote_ids);
          if (policy == "autouvm") {
            // The runtime monitor on this step: ops whose measured time puts them in another class
            // than the plan's (none, in a run where nothing else touches the device).
            autouvm::runtime::RuntimeMonitor monitor(trace, managed->profile(), plan, spec, {});
            const auto changed = monitor.Observe(op_seconds);
            std::printf("  runtime monitor (autouvm, last step): %zu of %zu ops changed class", changed.size(),
                        op_seconds.size());
            for (size_t k = 0; k < changed.size() && k < 3; ++k) {
              std::printf("%s op %lld (%s) %.1f us, planned %.1f us", k == 0 ? ":" : ",", (long long)changed[k].op,
                          trace.ops[static_cast<size_t>(changed[k].op)].kernel.c_str(),
                          1e6 * changed[k].measured_seconds, 1e6 * changed[k].expected_seconds);
            }
            std::printf("\n");
          }
          autouvm::bench::PrintOpSplit(policy, "last step", "host-side tensors", split, offload.get());
        }
        std::fflush(stdout);
      }
    }
    PrintPooled(preset, batch, resident_runs, runs_of);
    if (step_times) PrintByHostSpeed(batch, idle, idle_sim_s);
  }
  return 0;
}
