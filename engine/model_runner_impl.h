// ModelRunner's insides, shared by its files (model_runner.cc: loading and steps; model_runner_graphs.cc:
// decode steps and their graphs). Private to them: it names libtorch's types, which model_runner.h keeps
// out of its includers.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/kv_blocks.h"
#include "engine/model_runner.h"
#include "engine/step_graphs.h"
#include "runtime/compute_device.h"

namespace autouvm::engine {
namespace runner_internal {

// libtorch reports failures as c10::Error, and the TorchScript interpreter as std::runtime_error.
inline absl::Status TorchError(const std::string& what, const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return absl::InternalError(absl::StrCat(what, ": ", c10_error->what_without_backtrace()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

inline torch::Tensor ToLongTensor(absl::Span<const int32_t> ids) {
  auto t = torch::empty({static_cast<int64_t>(ids.size())}, torch::kLong);
  auto* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) p[i] = ids[i];
  return t;
}

// Into `out`, reusing its memory: a step's logits are megabytes (16 rows of a 32000-word vocabulary:
// 2 MB), and a fresh buffer each step is fresh pages, each faulted in on the scheduler's thread.
inline void CopyInto(const torch::Tensor& t, std::vector<float>* out) {
  auto c = t.to(torch::kFloat).contiguous();
  out->assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// Rows `rows` of the 2-D `t`, in that order, into `out`: by the host, after the same ops as CopyInto's whatever
// the rows (an index_select of the rows a step wants would be an op of some steps and not of others, and a
// step whose ops depend on its rows cannot follow a plan recorded from another: Note [Packed steps]).
inline void CopyRowsInto(const torch::Tensor& t, absl::Span<const int64_t> rows, std::vector<float>* out) {
  auto c = t.to(torch::kFloat).contiguous();
  const int64_t width = c.size(1);
  const float* from = c.data_ptr<float>();
  out->resize(rows.size() * static_cast<size_t>(width));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(from + rows[i] * width, from + (rows[i] + 1) * width, out->begin() + static_cast<int64_t>(i) * width);
  }
}

inline std::vector<float> ToVector(const torch::Tensor& t) {
  std::vector<float> out;
  CopyInto(t, &out);
  return out;
}

}  // namespace runner_internal

struct ModelRunner::Impl {
  Impl(KvPoolShape shape, int max_batch) : blocks(shape, max_batch) {}

  torch::jit::Module module;
  std::unique_ptr<StepGraphs> graphs;  // while step graphs are on
  // Note [Block KV cache] (engine/kv_blocks.cc): per layer, [pool rows, n_kv_heads, head_dim].
  std::vector<torch::Tensor> k_pools, v_pools;
  KvBlocks blocks;
  runtime::ComputeDevice* device = nullptr;  // null: the CPU
  torch::Device torch_device = torch::kCPU;

  // On the device's compute stream while it lives (null on the CPU).
  std::unique_ptr<runtime::ComputeDevice::ThreadScope> Enter() const {
    return device != nullptr ? device->Enter() : nullptr;
  }
  torch::Tensor On(const torch::Tensor& t) const { return t.to(torch_device); }

  // Every tensor the module reads but its inputs: parameters, buffers, KV pools.
  std::vector<c10::Storage> Storages() {
    std::vector<c10::Storage> storages;
    for (const auto& p : module.named_parameters()) storages.push_back(p.value.storage());
    for (const auto& b : module.named_buffers()) storages.push_back(b.value.storage());
    for (size_t l = 0; l < k_pools.size(); ++l) {
      storages.push_back(k_pools[l].storage());
      storages.push_back(v_pools[l].storage());
    }
    return storages;
  }

  // Runs the module's step on `packed` (RunStep below, on the host); logits [L, V] on the host.
  torch::Tensor Step(const torch::Tensor& packed, int64_t n, int64_t nd, int64_t d_span, int64_t rp, int64_t tp,
                     int64_t np, int64_t p_span, int64_t nl) {
    const auto started = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    auto on = Enter();
    const torch::Tensor all = On(packed);  // one copy to the device, then views
    int64_t at = 0;
    auto take = [&](int64_t count) {
      torch::Tensor t = all.narrow(0, at, count);
      at += count;
      return t;
    };
    torch::Tensor tokens = take(n), positions = take(n), kv_rows = take(n),
                  d_rows = take(nd * d_span).view({nd, d_span});
    torch::Tensor p_index = take(rp * tp).view({rp, tp}), p_flat = take(np),
                  p_rows = take(rp * p_span).view({rp, p_span});
    torch::Tensor logit_ix = take(nl);
    std::vector<torch::jit::IValue> inputs{tokens,
                                           positions,
                                           kv_rows,
                                           d_rows,
                                           p_index,
                                           p_flat,
                                           p_rows,
                                           logit_ix,
                                           blocks.live_rows(),
                                           c10::List<at::Tensor>(k_pools),
                                           c10::List<at::Tensor>(v_pools)};
    const torch::Tensor out = module.get_method("step")(std::move(inputs)).toTensor();
    launch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return out.to(torch::kCPU);
  }
  double launch_s = -1;  // the last Step's, from its start to its forward pass launched
};

}  // namespace autouvm::engine
