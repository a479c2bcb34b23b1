// uvm_sim_check (GPU host): how close the simulated h200-pcie5 comes to the real H200 on a whole
// Llama-shaped decode step, beyond the calibration figures it was fitted to. Generates a Llama model,
// runs it in managed memory, records the decode step's trace, times the step resident and cold (every
// weight and cache prefetched back to the host first, so the step faults them in), and replays the
// trace on the simulator; prints both, with the real CUPTI counters beside the simulated ones.
//
//   build-gpu/bench/uvm_sim_check --dim 4096 --layers 4 --heads 32 --kv-heads 32 --ffn-dim 11008
#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "bench/bench_model.h"
#include "bench/bench_util.h"
#include "engine/llama_builder.h"
#include "engine/torch_dtype.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/managed_memory.h"
#include "runtime/observer.h"
#include "runtime/sim/trace_replay.h"

namespace {

using autouvm::runtime::MigrationCause;
using autouvm::runtime::UvmCounters;

using autouvm::bench::Median;

int Fail(const std::string& what) {
  std::fprintf(stderr, "uvm_sim_check: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto c = autouvm::engine::DefaultTinyModelConfig("uvm-sim-check");
  c.dim = 4096;
  c.n_layers = 4;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.ffn_dim = 11008;
  c.vocab_size = 32000;
  c.max_seq = 512;
  c.dtype = "bf16";
  int repeats = 3;
  CLI::App app{"Real H200 against the simulated h200-pcie5 on a Llama-shaped decode step"};
  autouvm::bench::AddModelFlags(app, &c);
  app.add_option("--vocab-size", c.vocab_size)->capture_default_str();
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  autouvm::bench::FinishModelFlags(&c);

  const std::string dir = std::filesystem::temp_directory_path() / "uvm_sim_check";
  if (auto s = autouvm::engine::WriteLlamaModel(c, 1, dir); !s.ok()) return Fail(std::string(s.message()));
  auto cap = autouvm::runtime::cuda::ManagedMemoryPool::CapFromEnvironment();
  if (!cap.ok() || *cap == 0) return Fail("set AUTOUVM_MAX_MANAGED_BYTES (source .gpu/env.sh)");
  auto pool = autouvm::runtime::cuda::ManagedMemoryPool::Create(0, {.cap_bytes = *cap});
  if (!pool.ok()) return Fail(std::string(pool.status().message()));
  auto backend = autouvm::runtime::cuda::CudaBackend::Create({.spec = *autouvm::runtime::FindGpuSpec("h200-pcie5")});
  if (!backend.ok()) return Fail(std::string(backend.status().message()));
  auto observer = autouvm::runtime::Observer::Create();
  if (!observer.ok()) return Fail(std::string(observer.status().message()));
  autouvm::runtime::Observer::MakeExecutionRepeatable();

  torch::NoGradGuard no_grad;
  autouvm::runtime::cuda::ManagedMemoryPool::Scope scope(pool->get());
  torch::jit::Module m = torch::jit::load(dir + "/" + c.name + "/model.pt");
  m.to(torch::kCUDA);
  const auto dtype = autouvm::engine::TorchDtype(c.dtype);
  auto k_cache = torch::zeros({c.n_layers, 1, c.n_kv_heads, c.max_seq, c.head_dim},
                              torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
  auto v_cache = torch::zeros_like(k_cache);
  auto on_gpu = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kLong).to(torch::kCUDA); };
  auto slots = on_gpu({0});
  m.forward({on_gpu({256, 1, 2, 3, 4, 5, 6, 7}).view({1, 8}), slots, on_gpu({0}), k_cache, v_cache});
  auto token = on_gpu({9}).view({1, 1});
  auto pos = on_gpu({8});
  auto step = [&] {
    cudaDeviceSynchronize();  // checked by the timing it bounds; errors surface in the next forward
    const auto t0 = std::chrono::steady_clock::now();
    m.forward({token, slots, pos, k_cache, v_cache});
    cudaDeviceSynchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  step();

  // Name everything the model owns, in the order it was allocated, and record one step.
  std::vector<std::pair<uint64_t, int64_t>> owned;
  auto name = [&](const at::Tensor& t, const std::string& n) {
    (*observer)->NameTensor(t.storage().data(), n, static_cast<int64_t>(t.storage().nbytes()));
    owned.push_back({reinterpret_cast<uint64_t>(t.storage().data()), static_cast<int64_t>(t.storage().nbytes())});
  };
  for (const auto& p : m.named_parameters()) name(p.value, p.name);
  for (const auto& b : m.named_buffers()) name(b.value, b.name);
  name(k_cache, "kv_cache.k");
  name(v_cache, "kv_cache.v");
  (*observer)->BeginIteration();
  m.forward({token, slots, pos, k_cache, v_cache});
  cudaDeviceSynchronize();
  const autouvm::runtime::AccessTrace trace = (*observer)->EndIteration();

  std::vector<double> resident, cold;
  UvmCounters cold_moved;
  for (int r = 0; r < repeats; ++r) resident.push_back(step());
  for (int r = 0; r < repeats; ++r) {
    for (const auto& [addr, bytes] : owned) {
      if (!(*backend)->Prefetch(addr, bytes, autouvm::runtime::Location::kHost, autouvm::runtime::Stream::kCopy).ok()) {
        return Fail("prefetch to the host failed");
      }
    }
    if (!(*backend)->Synchronize().ok()) return Fail("synchronize failed");
    const UvmCounters before = *(*backend)->ReadCounters();
    cold.push_back(step());
    cold_moved = *(*backend)->ReadCounters() - before;
  }

  auto sim = autouvm::runtime::sim::ReplayTrace(trace, (*backend)->spec(), {.oversubscription = 1.0, .iterations = 2});
  if (!sim.ok()) return Fail(std::string(sim.status().message()));
  const UvmCounters& s = sim->iterations.front().moved;
  int64_t weights = 0;
  for (const auto& [addr, bytes] : owned) weights += bytes;
  std::printf(
      "model: dim %lld, %lld layers, ffn %lld, vocab %lld, %s; %.2f GiB owned; %zu ops per decode step; "
      "median of %d\n\n",
      static_cast<long long>(c.dim), static_cast<long long>(c.n_layers), static_cast<long long>(c.ffn_dim),
      static_cast<long long>(c.vocab_size), c.dtype.c_str(), weights / double(1 << 30), trace.ops.size(), repeats);
  std::printf("| decode step | real H200 | simulated h200-pcie5 | sim / real |\n| --- | ---: | ---: | ---: |\n");
  const double real_resident = Median(resident), real_cold = Median(cold);
  std::printf("| resident (ms) | %.2f | %.2f | %.2f |\n", 1e3 * real_resident, 1e3 * sim->resident_seconds,
              sim->resident_seconds / real_resident);
  std::printf("| cold: weights and cache on the host (ms) | %.2f | %.2f | %.2f |\n", 1e3 * real_cold,
              1e3 * sim->iterations.front().seconds, sim->iterations.front().seconds / real_cold);
  auto gib = [](int64_t b) { return b / double(1 << 30); };
  std::printf("| cold: host->device on faults (GiB) | %.3f | %.3f | |\n", gib(cold_moved.h2d(MigrationCause::kFault)),
              gib(s.h2d(MigrationCause::kFault)));
  std::printf("| cold: host->device by the driver's prefetcher (GiB) | %.3f | %.3f | |\n",
              gib(cold_moved.h2d(MigrationCause::kDriverPrefetch)), gib(s.h2d(MigrationCause::kDriverPrefetch)));
  std::printf("| cold: host->device, all causes (GiB) | %.3f | %.3f | |\n", gib(cold_moved.h2d_total()),
              gib(s.h2d_total()));
  std::printf("| cold: GPU fault groups | %lld | %lld | |\n", static_cast<long long>(cold_moved.gpu_fault_groups),
              static_cast<long long>(s.gpu_fault_groups));
  return 0;
}
