#include "engine/model_runner.h"

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "engine/generated_weights.h"
#include "engine/kv_blocks.h"
#include "engine/llama_module.h"
#include "engine/model_runner_impl.h"
#include "engine/step_graphs.h"
#include "engine/torch_dtype.h"
#include "runtime/storage_binding.h"

namespace autouvm::engine {

using runner_internal::CopyInto;
using runner_internal::ToLongTensor;
using runner_internal::TorchError;
using runner_internal::ToVector;

namespace {

// The layer code a rebuilt module runs: kFused where libtorch has it, else kPortable; AUTOUVM_LAYER_KERNELS
// (portable, fused or own) chooses another, to compare them (bench/step_graphs).
absl::StatusOr<LayerKernels> KernelsFor(const ModelConfig& config, bool cuda) {
  const char* env = std::getenv("AUTOUVM_LAYER_KERNELS");
  const std::string asked = env != nullptr ? env : "";
  if (asked.empty()) {
    // Note [Own layer kernels]: on a GPU autouvm's own ops where the model's shape allows them.
    if (cuda && OwnKernelsAvailable(config, true)) return LayerKernels::kOwn;
    return FusedKernelsAvailable() ? LayerKernels::kFused : LayerKernels::kPortable;
  }
  if (asked == "portable") return LayerKernels::kPortable;
  if (asked == "fused") return LayerKernels::kFused;
  if (asked == "own" && OwnKernelsAvailable(config, cuda)) return LayerKernels::kOwn;
  return absl::InvalidArgumentError(
      absl::StrCat("AUTOUVM_LAYER_KERNELS: '", asked, "' is not one of portable, fused, own, or not available here"));
}

// The packed step of docs/model-contract.md takes each token's pool row (kv_rows); the earlier one took
// slots into a max_batch x max_seq cache.
bool HasPackedBlockStep(torch::jit::Module& module) {
  auto method = module.find_method("step");
  if (!method) return false;
  for (const auto& argument : method->function().getSchema().arguments()) {
    if (argument.name() == "kv_rows") return true;
  }
  return false;
}

}  // namespace

ModelRunner::ModelRunner(std::unique_ptr<Impl> impl, ModelConfig config, int max_batch)
    : impl_(std::move(impl)), config_(std::move(config)), max_batch_(max_batch) {}

ModelRunner::~ModelRunner() = default;

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const std::string& entry_dir,
                                                                 const ModelConfig& config, int max_batch,
                                                                 runtime::ComputeDevice* device,
                                                                 const KvCacheOptions& kv, const PlaceWeight& place) {
  if (max_batch < 1) return absl::InvalidArgumentError("max_batch: must be at least 1");
  if (kv.block_tokens < 1) return absl::InvalidArgumentError("kv_block_tokens: must be at least 1");
  if (kv.tokens < 0) return absl::InvalidArgumentError("kv_cache_tokens: must not be negative");
  const int64_t pool_tokens = kv.tokens > 0 ? kv.tokens : static_cast<int64_t>(max_batch) * config.max_seq;
  const KvPoolShape shape{.blocks = BlocksFor(pool_tokens, kv.block_tokens) + 1, .block_tokens = kv.block_tokens};
  const std::string path = (std::filesystem::path(entry_dir) / "model.pt").string();
  if (!std::filesystem::exists(path)) return absl::NotFoundError(absl::StrCat(path, ": missing"));
  auto impl = std::make_unique<Impl>(shape, max_batch);
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
  if (!HasPackedBlockStep(impl->module)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": has no `step` method of the block KV cache's packed form (docs/model-contract.md): it was written for an "
        "earlier model contract; write the entry again with autouvm-mkmodel or autouvm-convert"));
  }
  if (config.module == "autouvm") {
    // Note [Layer kernels] (engine/llama_module.cc): autouvm's own module runs with this build's fastest code.
    ASSIGN_OR_RETURN(const LayerKernels kernels, KernelsFor(config, cuda));
    auto rebuilt = RebuildLlamaModule(config, impl->module, kernels);
    if (!rebuilt.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": model.yaml says module: autouvm, but its weights do not ",
                                                     "make autouvm's Llama module: ", rebuilt.status().message()));
    }
    impl->module = std::move(*rebuilt);
    impl->module.eval();
  }
  // Note [The budget from load] (runtime/unplanned_placement.cc): on a GPU each weight is placed as it
  // arrives, so the model is never more than one weight over its budget.
  std::function<absl::Status(const torch::Tensor&)> placed;
  absl::Status place_error;
  if (cuda && place) {
    int64_t all_bytes = 0;  // generated weights' placeholders have their sizes and dtype too
    for (const at::Tensor& p : impl->module.parameters())
      all_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    placed = [&place, &place_error, all_bytes](const torch::Tensor& t) {
      place_error =
          place(reinterpret_cast<uint64_t>(t.storage().data()), static_cast<int64_t>(t.storage().nbytes()), all_bytes);
      return place_error;
    };
  }
  if (config.generated_weights_seed != 0) {
    if (absl::Status s = GenerateWeights(impl->module, config.generated_weights_seed, impl->torch_device, placed);
        !s.ok()) {
      if (!place_error.ok()) {
        return absl::Status(place_error.code(), absl::StrCat(path, ": placing its weights: ", s.message()));
      }
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
    if (cuda && placed) {
      // As Module::to does it (set_data: weights tied to each other stay one tensor), one at a time.
      torch::NoGradGuard no_grad;
      for (at::Tensor p : impl->module.parameters()) {
        if (p.is_cuda()) continue;
        p.set_data(p.to(torch::kCUDA));
        if (absl::Status s = placed(p); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(path, ": placing its weights: ", s.message()));
        }
      }
    }
    if (cuda) impl->module.to(torch::kCUDA);  // buffers, and every weight where nothing places them
    // Untouched pool rows stay unwritten (Note [Block KV cache]); the null block is zeros.
    const auto options = torch::TensorOptions().dtype(dtype).device(impl->torch_device);
    const int64_t rows = shape.blocks * shape.block_tokens;
    for (int64_t l = 0; l < config.n_layers; ++l) {
      for (auto* pools : {&impl->k_pools, &impl->v_pools}) {
        pools->push_back(torch::empty({rows, config.n_kv_heads, config.head_dim}, options));
        pools->back().narrow(0, 0, shape.block_tokens).zero_();
      }
    }
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": placing the model and its KV cache of ", pool_tokens,
                                                     " positions (kv_cache_tokens) on ", cuda ? "the GPU" : "the CPU",
                                                     ": ", TorchError("allocation", e).message()));
  }
  std::unique_ptr<ModelRunner> runner(new ModelRunner(std::move(impl), config, max_batch));
  runner->parameter_count_ = params;
  runner->parameter_bytes_ = bytes;
  runner->compute_dtype_ = dtype == torch::kFloat ? "fp32" : config.dtype;
  on.reset();  // ForwardAll enters the device itself
  for (const auto* pools : {&runner->impl_->k_pools, &runner->impl_->v_pools}) {
    for (const torch::Tensor& t : *pools) runner->kv_cache_bytes_ += t.numel() * t.element_size();
  }
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
    const int64_t row = runner->impl_->blocks.RowOf(0, 0);
    for (int64_t l = 0; l < config.n_layers; ++l) {
      const size_t i = static_cast<size_t>(l);
      const bool written = runner->impl_->k_pools[i][row].abs().sum().item<double>() > 0 &&
                           runner->impl_->v_pools[i][row].abs().sum().item<double>() > 0;
      if (!written) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": the model wrote no keys or values into layer ", l,
                                                       " of the cache; model.yaml says n_layers ", config.n_layers));
      }
    }
  }
  runner->Release(0);
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
  RETURN_IF_ERROR(RunStep({}, absl::MakeConstSpan(&row, 1), /*every_position=*/true, &logits));
  return logits;
}

absl::Status ModelRunner::Step(absl::Span<const KvShare> shares, absl::Span<const Row> rows,
                               std::vector<float>* logits) {
  last_pass_graph_ = profiler::PassGraph::kNone;
  return RunStep(shares, rows, /*every_position=*/false, logits);
}

// A step of decode rows that each want their logits runs over its bucket's shape (RunDecode), as does a packed
// step on a GPU or with graphs on (RunPacked; both in model_runner_graphs.cc). Otherwise the step packs its
// inputs unpadded as one int64 tensor, in this order: tokens, positions and kv_rows [N] (the decode rows'
// tokens first, then the prompt rows'), d_rows [nd x d_span], p_index [rows x longest chunk], p_flat [prompt
// tokens], p_rows [rows x p_span], logit_ix [wanted logits] (Note [Packed steps], engine/llama_module.cc).
absl::Status ModelRunner::RunStep(absl::Span<const KvShare> shares, absl::Span<const Row> rows, bool every_position,
                                  std::vector<float>* logits) {
  if (rows.empty()) return absl::InvalidArgumentError("a step with no rows");
  std::vector<bool> used(static_cast<size_t>(max_batch_), false);
  std::vector<std::pair<int32_t, int64_t>> lengths;  // the positions each slot holds after the step
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
    lengths.push_back({r.slot, r.start_pos + len});
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
  for (size_t i = 0; i < shares.size(); ++i) {
    for (const int32_t slot : {shares[i].src_slot, shares[i].dst_slot}) {
      if (slot < 0 || slot >= max_batch_) {
        return absl::OutOfRangeError(absl::StrCat("share ", i, ": slot ", slot, " out of range"));
      }
    }
  }
  // A slot grows to hold its row (a share's dst past the blocks it starts with: Note [Identical prompts
  // share their prefill], engine/step_policy.cc); its blocks go back only when it is Released.
  RETURN_IF_ERROR(impl_->blocks.Grow(lengths, shares));
  const KvBlocks& blocks = impl_->blocks;
  if (kv_rows_listener_) kv_rows_listener_(blocks.live_rows(), blocks.shape().blocks * blocks.shape().block_tokens);
  if (nd == static_cast<int64_t>(rows.size()) && shares.empty() && !every_position &&
      std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.logits; })) {
    return RunDecode(rows, d_span, logits);
  }
  // Note [Packed steps by bucket] (step_graph_options.h): padded where a graph may run them.
  if (!every_position && (impl_->graphs != nullptr || impl_->device != nullptr)) {
    return RunPacked(rows, PackedBucketOf(nd, d_span, rp, tp, n - nd, p_span, max_batch_, config_.max_seq), logits);
  }
  // Unpadded: on the CPU without graphs, or every position's logits (ForwardAll).
  if (impl_->graphs != nullptr) impl_->graphs->CountEager();
  last_step_form_ = every_position ? "packed, every position" : "packed";
  std::vector<size_t> order;  // decode rows first
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
  auto packed = torch::empty({3 * n + nd * d_span + rp * tp + np + rp * p_span + nl}, torch::kLong);
  int64_t* tokens = packed.data_ptr<int64_t>();
  int64_t *positions = tokens + n, *kv_rows = positions + n, *d_rows = kv_rows + n, *p_index = d_rows + nd * d_span;
  int64_t *p_flat = p_index + rp * tp, *p_rows = p_flat + np, *logit_ix = p_rows + rp * p_span;
  // A sequence's pool rows, position by position, padded with the null block's row 0 up to `span`.
  auto table = [&blocks](int64_t* out, int32_t slot, int64_t len, int64_t span) {
    for (int64_t j = 0; j < span; ++j) out[j] = j < len ? blocks.RowOf(slot, j) : 0;
  };
  int64_t prow = 0;
  for (size_t i : order) {
    const Row& r = rows[i];
    const int64_t len = static_cast<int64_t>(r.tokens.size());
    for (int64_t k = 0; k < len; ++k) {
      tokens[first[i] + k] = r.tokens[static_cast<size_t>(k)];
      positions[first[i] + k] = r.start_pos + k;
      kv_rows[first[i] + k] = blocks.RowOf(r.slot, r.start_pos + k);
    }
    if (r.decode) {
      table(d_rows, r.slot, r.start_pos + 1, d_span);
      d_rows += d_span;
      continue;
    }
    table(p_rows + prow * p_span, r.slot, r.start_pos + len, p_span);
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
    CopyInto(impl_->Step(packed, n, nd, d_span, rp, tp, np, p_span, nl), logits);
    last_step_launch_s_ = impl_->launch_s;
  } catch (const std::exception& e) {
    return TorchError("forward pass", e);
  }
  return absl::OkStatus();
}

void ModelRunner::Release(int32_t slot) {
  impl_->blocks.Release(slot);
  // The next plan prepared places the rows still in use, not those of the sequences that ended.
  if (kv_rows_listener_) {
    const KvBlocks& blocks = impl_->blocks;
    kv_rows_listener_(blocks.live_rows(), blocks.shape().blocks * blocks.shape().block_tokens);
  }
}

int64_t ModelRunner::kv_block_tokens() const { return impl_->blocks.shape().block_tokens; }
int64_t ModelRunner::kv_blocks() const { return impl_->blocks.usable_blocks(); }
int64_t ModelRunner::kv_blocks_in_use() const { return impl_->blocks.blocks_in_use(); }

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
  for (size_t l = 0; l < impl_->k_pools.size(); ++l) {
    add(impl_->k_pools[l], absl::StrCat("kv_cache.layer", l, ".k"));
    add(impl_->v_pools[l], absl::StrCat("kv_cache.layer", l, ".v"));
  }
  return out;
}

std::unique_ptr<runtime::TensorBinding> ModelRunner::NewTensorBinding() const {
  return std::make_unique<runtime::StorageBinding>(impl_->Storages());
}

void ModelRunner::NameTensors(runtime::Observer* observer) const {
  for (const NamedTensor& t : NamedTensors()) {
    observer->NameTensor(reinterpret_cast<const void*>(t.addr), t.name, t.bytes);
  }
}

std::string_view ModelRunner::device_kind() const { return impl_->device != nullptr ? "cuda" : "cpu"; }

void SetIntraOpThreads(int threads) { at::set_num_threads(threads); }

}  // namespace autouvm::engine
