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
// The runs themselves are bench/offload_runs.h's; this file parses the flags, sets the GPU up, runs the
// probes and the model's batches.
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
//
// Note [Mappings outlive their advice]: a range the device was given access to in host memory
// (zerocopy's layers, a plan's remote tensors) may stay mapped after the advice is unset — CUDA says
// such mappings "may be removed at any time". On the H200 host (2026-11-30), `stock` at 1.75 run after
// `zerocopy` in one process (13B) migrated 12.5 GiB per step where alone it migrated 23 GiB: about the
// 10.6 GiB zerocopy had left in host memory, read (it seems) through the old mappings. Between runs
// such ranges now go to the device and back, which remaps them; --keep-host-mappings skips that, to
// compare (not yet run on the GPU).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/decode_harness.h"
#include "bench/explicit_offload.h"
#include "bench/offload_runs.h"
#include "bench/ttft_runs.h"
#include "bench/uvm_probes.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/managed_memory.h"
#include "runtime/observer.h"

namespace {

using autouvm::bench::Check;
using autouvm::bench::Die;
using autouvm::bench::kGiB;
using autouvm::bench::Seconds;
using Clock = std::chrono::steady_clock;

// The probes of bench/uvm_probes.h that `wanted` names ("all", or some by name).
void RunProbes(autouvm::runtime::DeviceBackend* gpu, const std::string& wanted_flag) {
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
  const std::vector<std::string> wanted = absl::StrSplit(wanted_flag, ',');
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
  auto observer = Check(autouvm::runtime::Observer::Create(), "observer");
  autouvm::runtime::Observer::MakeExecutionRepeatable();
  torch::NoGradGuard no_grad;
  if (!no_probes) RunProbes(backend.get(), probes_flag);
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
            m, backend.get(), observer.get(), spec,
            {.prompt_len = ttft_prompt, .factors = factors, .policies = policies, .op_times = op_times}, pinned.get()),
        "time to first token");
    return 0;
  }
  autouvm::bench::OffloadRuns runs({.preset = preset,
                                    .steps = steps,
                                    .prompt_len = prompt_len,
                                    .resident_runs = resident_run_count,
                                    .explicit_sync = explicit_sync,
                                    .op_times = op_times,
                                    .step_times = step_times,
                                    .transfer_times = transfer_times,
                                    .keep_host_mappings = keep_host_mappings,
                                    .copy_beside_decode = copy_beside_decode,
                                    .save_traces = save_traces},
                                   &m, backend.get(), observer.get(), spec, pinned.get());
  std::printf(
      "\n| model | batch | factor | policy | budget GiB | cold step ms (of it preparing) | steady step ms | tokens/s | "
      "link floor ms | floor / steady | sim steady ms | sim / real | tokens = reference | "
      "resident peak GiB | H2D GiB/step | other arrivals GiB/step | D2H GiB/step | fault groups/step | "
      "plan: pinned / remote / streamed GiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const int64_t batch : batches) runs.Batch(batch, factors, policies);
  return 0;
}
