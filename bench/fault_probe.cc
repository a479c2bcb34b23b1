// fault_probe (GPU host): how fast single ATen ops fault a bf16 weight in from the host, by the layout
// in which they read it and by the pages' history (written by the CPU, or returned from the GPU by a
// prefetch to the host, as an evicted weight is). Each case times one op on a fresh managed weight, and
// prints beside it the simulator's figure for the same op (runtime/sim/trace_replay.cc Note [Fault entries
// per kernel]).
//
//   build-gpu/bench/fault_probe --repeats 3
#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/sim/trace_replay.h"

namespace {

using autouvm::runtime::Location;
using autouvm::runtime::Stream;

struct Case {
  std::string what;
  int64_t rows, cols;  // the weight, row-major [rows, cols]
  std::function<void(const at::Tensor& w)> op;
  bool transposed = false;  // the op reads W.t(): row by row (the trace's contiguous run is one row)
  std::string aten = "aten::mm";
};

// The simulator's rate for the case: one op reading the weight, everything on the host before it.
double SimulatedGBs(const Case& c, const autouvm::runtime::GpuSpec& spec) {
  const int64_t bytes = c.rows * c.cols * 2;
  autouvm::runtime::AccessTrace t;
  t.named.push_back({.id = "param:w", .bytes = bytes});
  autouvm::runtime::OpRecord op;
  op.op = c.aten;
  op.kernel = c.aten + "#0";
  op.reads = {{.id = "param:w", .bytes = bytes, .extent = bytes, .run = c.transposed ? c.cols * 2 : bytes}};
  op.flops = static_cast<double>(bytes);
  t.ops.push_back(op);
  auto r = autouvm::runtime::sim::ReplayTrace(t, spec, {.policy = "stock", .oversubscription = 0.5, .iterations = 1});
  return r.ok() ? static_cast<double>(bytes) / r->iterations.front().seconds / 1e9 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3;
  CLI::App app{"Fault-driven read rate of single ATen ops by weight layout"};
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto gpu = autouvm::runtime::cuda::CudaBackend::Create({.spec = *autouvm::runtime::FindGpuSpec("h200-pcie5")});
  if (!gpu.ok()) {
    std::fprintf(stderr, "fault_probe: %s\n", std::string(gpu.status().message()).c_str());
    return 1;
  }
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  auto x = [&](int64_t r, int64_t c) { return at::randn({r, c}, bf16); };
  // x[n, k] @ W.t() with W [m, k]: a Llama linear layer, which reads W row by row.
  auto linear = [&](int64_t n, int64_t m, int64_t k, const std::string& what) {
    return Case{absl::StrFormat("x[%d,%d] @ W.t(), W [%d,%d] (%s)", n, k, m, k, what), m, k,
                [=](const at::Tensor& w) { at::mm(x(n, k), w.t()); }, /*transposed=*/true};
  };
  const std::vector<Case> cases = {
      linear(1, 11008, 4096, "7B gate, up"),
      linear(16, 11008, 4096, "7B gate, up"),
      linear(1, 4096, 11008, "7B down"),
      linear(1, 13824, 5120, "13B gate, up"),
      linear(1, 5120, 5120, "13B attention"),
      linear(1, 5120, 13824, "13B down"),
      {"x[1,4096] @ W, W [4096,11008]", 4096, 11008, [&](const at::Tensor& w) { at::mm(x(1, 4096), w); }},
      {"W @ x[8192,1], W [8192,8192]", 8192, 8192, [&](const at::Tensor& w) { at::mm(w, x(8192, 1)); }},
      linear(1, 8192, 8192, "square"),
      {"W * 2 (elementwise), W [8192,8192]", 8192, 8192, [&](const at::Tensor& w) { at::mul(w, 2); },
       /*transposed=*/false, "aten::mul"},
  };
  const autouvm::runtime::GpuSpec spec = *autouvm::runtime::FindGpuSpec("h200-pcie5");
  // Two histories of the same host pages: written by the CPU and never on the GPU (fresh), or written
  // on the GPU and prefetched back to the host (returned) — what an evicted weight looks like.
  std::printf(
      "| op reading a bf16 weight that is on the host | MiB | fresh ms | fresh GB/s | returned ms |"
      " returned GB/s | sim GB/s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Case& c : cases) {
    const int64_t bytes = c.rows * c.cols * 2;
    std::vector<double> fresh, returned;
    for (int r = 0; r < repeats + 1; ++r) {
      for (bool from_gpu : {false, true}) {
        auto addr = (*gpu)->AllocateManaged(bytes);
        if (!addr.ok()) {
          std::fprintf(stderr, "fault_probe: %s\n", std::string(addr.status().message()).c_str());
          return 1;
        }
        at::Tensor w = at::from_blob(reinterpret_cast<void*>(*addr), {c.rows, c.cols}, bf16);
        if (from_gpu) {
          w.normal_();
          // normal_ runs on PyTorch's stream, the prefetch on the backend's copy stream: order them.
          if (cudaDeviceSynchronize() != cudaSuccess) return 1;
          if (!(*gpu)->Prefetch(*addr, bytes, Location::kHost, Stream::kCopy).ok()) return 1;
        } else {
          std::memset(reinterpret_cast<void*>(*addr), 0x3c, static_cast<size_t>(bytes));  // bf16 ~0.01
        }
        if (!(*gpu)->Synchronize().ok() || cudaDeviceSynchronize() != cudaSuccess) return 1;
        const auto t0 = std::chrono::steady_clock::now();
        c.op(w);
        if (cudaDeviceSynchronize() != cudaSuccess) return 1;
        const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) (from_gpu ? returned : fresh).push_back(ms);
        w = at::Tensor();
        if (!(*gpu)->FreeManaged(*addr).ok()) return 1;
      }
    }
    std::sort(fresh.begin(), fresh.end());
    std::sort(returned.begin(), returned.end());
    const double f = fresh[fresh.size() / 2], t = returned[returned.size() / 2];
    std::printf("| %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f |\n", c.what.c_str(),
                static_cast<long long>(bytes >> 20), f, bytes / f / 1e6, t, bytes / t / 1e6, SimulatedGBs(c, spec));
  }
  return 0;
}
