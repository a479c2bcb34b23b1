#include "engine/model_runner.h"

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/generated_weights.h"
#include "engine/torch_dtype.h"
#include "runtime/storage_binding.h"

namespace autouvm::engine {
namespace {

// libtorch reports failures as c10::Error, and the TorchScript interpreter as std::runtime_error.
absl::Status TorchError(const std::string& what, const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return absl::InternalError(absl::StrCat(what, ": ", c10_error->what_without_backtrace()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

torch::Tensor ToLongTensor(absl::Span<const int32_t> ids) {
  auto t = torch::empty({static_cast<int64_t>(ids.size())}, torch::kLong);
  auto* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) p[i] = ids[i];
  return t;
}

std::vector<float> ToVector(const torch::Tensor& t) {
  auto c = t.to(torch::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

struct ModelRunner::Impl {
  torch::jit::Module module;
  torch::Tensor k_cache;  // [n_layers, max_batch, n_kv_heads, max_seq, head_dim]
  torch::Tensor v_cache;
  runtime::ComputeDevice* device = nullptr;  // null: the CPU
  torch::Device torch_device = torch::kCPU;

  // On the device's compute stream while it lives (null on the CPU).
  std::unique_ptr<runtime::ComputeDevice::ThreadScope> Enter() const {
    return device != nullptr ? device->Enter() : nullptr;
  }
  torch::Tensor On(const torch::Tensor& t) const { return t.to(torch_device); }

  // Runs the module's step on `packed` (PackedStep below, on the host); logits [L, V] on the host.
  torch::Tensor Step(const torch::Tensor& packed, int64_t n, int64_t nd, int64_t rp, int64_t tp, int64_t np, int64_t nl,
                     int64_t d_span, int64_t p_span) {
    torch::NoGradGuard no_grad;
    auto on = Enter();
    const torch::Tensor all = On(packed);  // one copy to the device, then views
    int64_t at = 0;
    auto take = [&](int64_t count) {
      torch::Tensor t = all.narrow(0, at, count);
      at += count;
      return t;
    };
    torch::Tensor tokens = take(n), positions = take(n), slots = take(n), d_slots = take(nd), p_slots = take(rp);
    torch::Tensor p_index = take(rp * tp).view({rp, tp}), p_flat = take(np), logit_ix = take(nl);
    std::vector<torch::jit::IValue> inputs{tokens,  positions, slots,  nd,       d_slots, d_span, p_slots,
                                           p_index, p_flat,    p_span, logit_ix, k_cache, v_cache};
    return module.get_method("step")(std::move(inputs)).toTensor().to(torch::kCPU);
  }
};

ModelRunner::ModelRunner(std::unique_ptr<Impl> impl, ModelConfig config, int max_batch)
    : impl_(std::move(impl)), config_(std::move(config)), max_batch_(max_batch) {}

ModelRunner::~ModelRunner() = default;

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const std::string& entry_dir,
                                                                 const ModelConfig& config, int max_batch,
                                                                 runtime::ComputeDevice* device) {
  if (max_batch < 1) return absl::InvalidArgumentError("max_batch: must be at least 1");
  const std::string path = (std::filesystem::path(entry_dir) / "model.pt").string();
  if (!std::filesystem::exists(path)) return absl::NotFoundError(absl::StrCat(path, ": missing"));
  auto impl = std::make_unique<Impl>();
  const bool cuda = device != nullptr && device->kind() == "cuda";
  if (cuda) {
    impl->device = device;
    impl->torch_device = torch::kCUDA;
  }
  auto on = impl->Enter();
  try {
    impl->module = torch::jit::load(path, torch::kCPU);
    impl->module.eval();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a loadable TorchScript model: ", TorchError("load", e).message()));
  }
  if (!impl->module.find_method("step")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": has no `step` method (the packed steps of docs/model-contract.md): it was written for an earlier "
        "model contract; write the entry again with autouvm-mkmodel or autouvm-convert"));
  }
  if (config.generated_weights_seed != 0) {
    if (absl::Status s = GenerateWeights(impl->module, config.generated_weights_seed, impl->torch_device); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
  }
  int64_t params = 0, bytes = 0;
  for (const auto& p : impl->module.parameters()) {
    params += p.numel();
    bytes += p.numel() * p.element_size();
  }
  auto dtype = TorchDtype(config.dtype);
  try {
    // Note [fp16 on CPU]: libtorch's CPU kernels have no fp16 matmul, so fp16 models compute in fp32 there.
    if (dtype == torch::kHalf && !cuda) {
      impl->module.to(torch::kFloat);
      dtype = torch::kFloat;
    }
    if (cuda) impl->module.to(torch::kCUDA);
    impl->k_cache = torch::zeros({config.n_layers, max_batch, config.n_kv_heads, config.max_seq, config.head_dim},
                                 torch::TensorOptions().dtype(dtype).device(impl->torch_device));
    impl->v_cache = torch::zeros_like(impl->k_cache);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": placing the model on ", cuda ? "the GPU" : "the CPU",
                                                     ": ", TorchError("allocation", e).message()));
  }
  std::unique_ptr<ModelRunner> runner(new ModelRunner(std::move(impl), config, max_batch));
  runner->parameter_count_ = params;
  runner->parameter_bytes_ = bytes;
  runner->compute_dtype_ = dtype == torch::kFloat ? "fp32" : config.dtype;
  on.reset();  // ForwardAll enters the device itself
  runner->kv_cache_bytes_ = 2 * runner->impl_->k_cache.numel() * runner->impl_->k_cache.element_size();
  // One tiny step proves the module matches the contract before any request depends on it.
  const int32_t probe[1] = {0};
  auto logits = runner->ForwardAll(0, probe, 0);
  if (!logits.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": does not follow the model contract: ", logits.status().message()));
  }
  if (static_cast<int64_t>(logits->size()) != config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": forward returned ", logits->size(),
                                                   " logits per position, model.yaml says vocab_size ",
                                                   config.vocab_size));
  }
  // Every layer of the cache must hold the probe token's keys and values (position 0 of slot 0).
  {
    auto on_device = runner->impl_->Enter();
    for (int64_t l = 0; l < config.n_layers; ++l) {
      const bool written = runner->impl_->k_cache[l][0].select(1, 0).abs().sum().item<double>() > 0 &&
                           runner->impl_->v_cache[l][0].select(1, 0).abs().sum().item<double>() > 0;
      if (!written) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": the model wrote no keys or values into layer ", l,
                                                       " of the cache; model.yaml says n_layers ", config.n_layers));
      }
    }
  }
  // Note [A model.yaml that contradicts model.pt]: the probe step above catches a wrong vocab_size, dim
  // or head layout (shapes that do not fit) and the cache check a model with fewer layers than model.yaml
  // says, but a wrong ffn_dim (and more) would run. For the Llama architecture the
  // dimensions fix the parameter count (embedding and LM head tied or not); anything else is a model.yaml
  // that describes another model (attention_bias adds the query, key and value projections' biases).
  if (config.architecture == "llama") {
    const int64_t q = config.n_heads * config.head_dim, kv = config.n_kv_heads * config.head_dim;
    const int64_t layer = 2 * config.dim + config.dim * q + 2 * config.dim * kv + q * config.dim +
                          3 * config.dim * config.ffn_dim + (config.attention_bias ? q + 2 * kv : 0);
    const int64_t tied = config.vocab_size * config.dim + config.n_layers * layer + config.dim;
    const int64_t untied = tied + config.vocab_size * config.dim;
    if (params != untied && params != tied) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": has ", params, " parameters, but a Llama of model.yaml's dimensions (vocab_size ",
                       config.vocab_size, ", dim ", config.dim, ", n_layers ", config.n_layers, ", n_heads ",
                       config.n_heads, ", n_kv_heads ", config.n_kv_heads, ", ffn_dim ", config.ffn_dim, ") has ",
                       untied, " (", tied, " with a tied LM head): model.yaml does not describe this model"));
    }
  }
  return runner;
}

absl::StatusOr<std::vector<float>> ModelRunner::ForwardAll(int32_t slot, absl::Span<const int32_t> tokens,
                                                           int64_t start_pos) {
  std::vector<float> logits;
  const Row row{.slot = slot, .tokens = tokens, .start_pos = start_pos};
  RETURN_IF_ERROR(RunStep(absl::MakeConstSpan(&row, 1), /*every_position=*/true, &logits));
  return logits;
}

absl::Status ModelRunner::Step(absl::Span<const Row> rows, std::vector<float>* logits) {
  return RunStep(rows, /*every_position=*/false, logits);
}

// The packed step's inputs as one int64 tensor, in this order: tokens, positions and slots [N] (the
// decode rows' tokens first, then the prompt rows'), d_slots [nd], p_slots [rows], p_index [rows ×
// longest chunk], p_flat [prompt tokens], logit_ix [wanted logits] (Note [Packed steps],
// engine/llama_module.cc).
absl::Status ModelRunner::RunStep(absl::Span<const Row> rows, bool every_position, std::vector<float>* logits) {
  if (rows.empty()) return absl::InvalidArgumentError("a step with no rows");
  std::vector<bool> used(static_cast<size_t>(max_batch_), false);
  std::vector<size_t> order;  // decode rows first
  int64_t n = 0, nd = 0, rp = 0, tp = 0, d_span = 0, p_span = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const int64_t len = static_cast<int64_t>(r.tokens.size());
    if (len == 0) return absl::InvalidArgumentError(absl::StrCat("row ", i, ": no tokens"));
    if (r.decode && len != 1)
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": a decode row of ", len, " tokens"));
    if (r.slot < 0 || r.slot >= max_batch_) {
      return absl::OutOfRangeError(absl::StrCat("row ", i, ": slot ", r.slot, " out of range"));
    }
    if (used[static_cast<size_t>(r.slot)]) {
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": slot ", r.slot, " given twice"));
    }
    used[static_cast<size_t>(r.slot)] = true;
    if (r.start_pos < 0 || r.start_pos + len > config_.max_seq) {
      return absl::OutOfRangeError(absl::StrCat("row ", i, ": positions ", r.start_pos, "..", r.start_pos + len - 1,
                                                " beyond max_seq ", config_.max_seq));
    }
    n += len;
    if (r.decode) {
      ++nd;
      d_span = std::max(d_span, r.start_pos + 1);
    } else {
      ++rp;
      tp = std::max(tp, len);
      p_span = std::max(p_span, r.start_pos + len);
    }
  }
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].decode) order.push_back(i);
  for (size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].decode) order.push_back(i);
  std::vector<int64_t> first(rows.size());  // each row's first packed token
  for (int64_t at = 0; size_t i : order) {
    first[i] = at;
    at += static_cast<int64_t>(rows[i].tokens.size());
  }
  int64_t nl = 0;
  for (const Row& r : rows) nl += every_position ? static_cast<int64_t>(r.tokens.size()) : (r.logits ? 1 : 0);
  const int64_t np = n - nd;
  auto packed = torch::empty({3 * n + nd + rp + rp * tp + np + nl}, torch::kLong);
  int64_t* tokens = packed.data_ptr<int64_t>();
  int64_t *positions = tokens + n, *slots = positions + n, *d_slots = slots + n, *p_slots = d_slots + nd;
  int64_t *p_index = p_slots + rp, *p_flat = p_index + rp * tp, *logit_ix = p_flat + np;
  int64_t prow = 0;
  for (size_t i : order) {
    const Row& r = rows[i];
    const int64_t len = static_cast<int64_t>(r.tokens.size());
    for (int64_t k = 0; k < len; ++k) {
      tokens[first[i] + k] = r.tokens[static_cast<size_t>(k)];
      positions[first[i] + k] = r.start_pos + k;
      slots[first[i] + k] = r.slot;
    }
    if (r.decode) {
      *d_slots++ = r.slot;
      continue;
    }
    p_slots[prow] = r.slot;
    for (int64_t t = 0; t < tp; ++t) p_index[prow * tp + t] = first[i] + std::min(t, len - 1);
    for (int64_t t = 0; t < len; ++t) *p_flat++ = prow * tp + t;
    ++prow;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t len = static_cast<int64_t>(rows[i].tokens.size());
    if (every_position) {
      for (int64_t k = 0; k < len; ++k) *logit_ix++ = first[i] + k;
    } else if (rows[i].logits) {
      *logit_ix++ = first[i] + len - 1;
    }
  }
  try {
    *logits = ToVector(impl_->Step(packed, n, nd, rp, tp, np, nl, d_span, p_span));
  } catch (const std::exception& e) {
    return TorchError("forward pass", e);
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Prefill(absl::Span<const PrefillRow> rows, std::vector<float>* logits) {
  std::vector<Row> step;
  step.reserve(rows.size());
  for (const PrefillRow& r : rows) step.push_back({.slot = r.slot, .tokens = r.tokens, .start_pos = r.start_pos});
  return Step(step, logits);
}

absl::StatusOr<std::vector<float>> ModelRunner::Prefill(int32_t slot, absl::Span<const int32_t> tokens,
                                                        int64_t start_pos) {
  std::vector<float> logits;
  const PrefillRow row{slot, tokens, start_pos};
  RETURN_IF_ERROR(Prefill(absl::MakeConstSpan(&row, 1), &logits));
  return logits;
}

absl::Status ModelRunner::Decode(absl::Span<const DecodeRow> rows, std::vector<float>* logits) {
  std::vector<Row> step;
  step.reserve(rows.size());
  for (const DecodeRow& r : rows) {
    step.push_back({.slot = r.slot, .tokens = absl::MakeConstSpan(&r.token, 1), .start_pos = r.pos, .decode = true});
  }
  return Step(step, logits);
}

absl::StatusOr<std::vector<float>> ModelRunner::FullForward(absl::Span<const int32_t> tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens");
  if (!impl_->module.find_method("full")) return absl::UnimplementedError("the model has no `full` method");
  try {
    torch::NoGradGuard no_grad;
    auto on = impl_->Enter();
    auto t = impl_->On(ToLongTensor(tokens).unsqueeze(0));
    return ToVector(impl_->module.get_method("full")({t}).toTensor()[0].to(torch::kCPU));
  } catch (const std::exception& e) {
    return TorchError("full forward", e);
  }
}

std::vector<ModelRunner::NamedTensor> ModelRunner::NamedTensors() const {
  std::vector<NamedTensor> out;
  auto add = [&out](const at::Tensor& t, const std::string& n) {
    out.push_back({n, reinterpret_cast<uint64_t>(t.storage().data()), static_cast<int64_t>(t.storage().nbytes())});
  };
  for (const auto& p : impl_->module.named_parameters()) add(p.value, p.name);
  for (const auto& b : impl_->module.named_buffers()) add(b.value, b.name);
  add(impl_->k_cache, "kv_cache.k");
  add(impl_->v_cache, "kv_cache.v");
  return out;
}

std::unique_ptr<runtime::TensorBinding> ModelRunner::NewTensorBinding() const {
  std::vector<c10::Storage> storages;
  for (const auto& p : impl_->module.named_parameters()) storages.push_back(p.value.storage());
  for (const auto& b : impl_->module.named_buffers()) storages.push_back(b.value.storage());
  storages.push_back(impl_->k_cache.storage());
  storages.push_back(impl_->v_cache.storage());
  return std::make_unique<runtime::StorageBinding>(storages);
}

void ModelRunner::NameTensors(runtime::Observer* observer) const {
  for (const NamedTensor& t : NamedTensors()) {
    observer->NameTensor(reinterpret_cast<const void*>(t.addr), t.name, t.bytes);
  }
}

std::string_view ModelRunner::device_kind() const { return impl_->device != nullptr ? "cuda" : "cpu"; }

void SetIntraOpThreads(int threads) { at::set_num_threads(threads); }

}  // namespace autouvm::engine
