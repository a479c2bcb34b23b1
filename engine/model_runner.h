// Runs a model repository entry's TorchScript module: packed steps (decode rows and prompt chunks in
// one forward pass, through the module's `step`) against a KV cache of blocks (Note [Block KV cache],
// engine/kv_blocks.cc): a pool per layer that each slot's sequence takes blocks of as it grows and gives
// back when it ends (Release), written in place by the model.
//
//   ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(entry_dir, config, /*max_batch=*/8, device));
//   RETURN_IF_ERROR(runner->Step(rows, &logits));                          // StepRunner: packed rows
//   RETURN_IF_ERROR(runner->Step(shares, rows, &logits));                  // some slots start with others' blocks
//   ASSIGN_OR_RETURN(auto logits, runner->Prefill(slot, prompt_ids));      // last position's logits
//   RETURN_IF_ERROR(runner->Prefill({{slot, prompt, 0}, ...}, &logits));  // several prompts in one pass
//   RETURN_IF_ERROR(runner->Decode({{slot, token, pos}, ...}, &logits));   // one row per slot
//   runner->Release(slot);                                                 // its sequence ended
//
// On a CUDA ComputeDevice the weights (generated ones made on the GPU), the caches and every activation
// live in managed memory, and each call computes on the device's compute stream; tokens go in and logits
// come out through host memory.
//
// The scheduler drives it as a StepRunner (engine/step_runner.h). libtorch stays inside model_runner.cc and
// model_runner_graphs.cc (and model_runner_impl.h, their private header).
// Not thread-safe: one scheduler thread drives a runner.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model_config.h"
#include "engine/step_graph_options.h"
#include "engine/step_runner.h"
#include "runtime/compute_device.h"
#include "runtime/named_tensor.h"
#include "runtime/observer.h"
#include "runtime/tensor_binding.h"

namespace autouvm::engine {

struct KvCacheOptions {
  int64_t tokens = 0;  // positions the pool holds, over all sequences at once (0: max_batch x max_seq)
  int64_t block_tokens = 16;
};

// Called on a GPU for each weight as it reaches the device (its copy or draw queued on the compute
// stream), with its storage's address and bytes and the bytes of all the model's weights: where the
// caller keeps the model within its budget from load on (Note [The budget from load],
// runtime/unplanned_placement.cc).
using PlaceWeight = std::function<absl::Status(uint64_t addr, int64_t bytes, int64_t all_bytes)>;

class ModelRunner final : public StepRunner {
 public:
  // `device` (null: the CPU) outlives the runner.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const std::string& entry_dir, const ModelConfig& config,
                                                             int max_batch, runtime::ComputeDevice* device = nullptr,
                                                             const KvCacheOptions& kv = {},
                                                             const PlaceWeight& place = nullptr);
  ~ModelRunner() override;

  // StepRunner (engine/step_runner.h).
  using StepRunner::Step;
  absl::Status Step(absl::Span<const KvShare> shares, absl::Span<const Row> rows, std::vector<float>* logits) override;
  // A step of prompt rows only: each row's last position's logits.
  absl::Status Prefill(absl::Span<const PrefillRow> rows, std::vector<float>* logits);
  // One prompt: its last position's logits.
  absl::StatusOr<std::vector<float>> Prefill(int32_t slot, absl::Span<const int32_t> tokens, int64_t start_pos = 0);
  // A step of decode rows only.
  absl::Status Decode(absl::Span<const DecodeRow> rows, std::vector<float>* logits);
  void Release(int32_t slot) override;
  // Note [Captured steps] (engine/step_graphs.cc): decode steps run by graphs of their bucket, where the
  // scheduler allows it pass by pass (set_graphs_allowed). kDevice needs a CUDA device (UNIMPLEMENTED
  // on the CPU); kEmulated runs the same path eagerly, for tests. Call before the first step.
  absl::Status EnableStepGraphs(const StepGraphOptions& options);
  void set_graphs_allowed(bool allowed) override { graphs_allowed_ = allowed; }
  void set_staged_capture(const profiler::IterationHooks* hooks) override { staged_hooks_ = hooks; }
  profiler::PassGraph last_pass_graph() const override { return last_pass_graph_; }
  std::string_view last_step_form() const override { return last_step_form_; }
  double last_step_launch_s() const override { return last_step_launch_s_; }
  StepGraphStats step_graph_stats() const;  // zeros while graphs are off; from any thread
  // Called in every step once its KV blocks are taken, before the forward pass, and after a Release:
  // the pools' rows in use
  // (one past the highest block taken) and their rows in all (Note [KV blocks taken as sequences grow],
  // engine/kv_blocks.cc). The model's ModelExecution places its pools by them.
  void set_kv_rows_listener(std::function<void(int64_t live_rows, int64_t pool_rows)> listener) {
    kv_rows_listener_ = std::move(listener);
  }
  int max_batch() const override { return max_batch_; }
  int64_t kv_block_tokens() const override;
  int64_t kv_blocks() const override;
  int64_t kv_blocks_in_use() const;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_seq() const override { return config_.max_seq; }
  int64_t bos_id() const override { return config_.bos_id; }
  // Cached forward returning every position's logits (T × vocab), for verification.
  absl::StatusOr<std::vector<float>> ForwardAll(int32_t slot, absl::Span<const int32_t> tokens, int64_t start_pos);
  // The model's `full` method: no cache, causal attention over `tokens`; T × vocab logits.
  absl::StatusOr<std::vector<float>> FullForward(absl::Span<const int32_t> tokens);

  // The tensors this runner owns, in allocation order: every parameter and buffer by its dotted name
  // ("layer0.wq"), the KV pools as "kv_cache.layer<i>.k" / ".v"; where their storage starts and its bytes.
  using NamedTensor = runtime::NamedTensor;
  std::vector<NamedTensor> NamedTensors() const;
  // Gives the observer those names (its tensor ids are "param:" + name).
  void NameTensors(runtime::Observer* observer) const;
  // Binds those tensors to other device memory for an executor (runtime/tensor_binding.h); the runner
  // outlives it.
  std::unique_ptr<runtime::TensorBinding> NewTensorBinding() const;

  const ModelConfig& config() const { return config_; }
  int64_t parameter_count() const { return parameter_count_; }
  int64_t parameter_bytes() const { return parameter_bytes_; }
  int64_t kv_cache_bytes() const { return kv_cache_bytes_; }  // the pools' (touched or not)
  // "cpu" or "cuda".
  std::string_view device_kind() const;
  // The dtype the model computes in here (fp16 models compute in fp32 on the CPU backend).
  const std::string& compute_dtype() const { return compute_dtype_; }

 private:
  struct Impl;
  ModelRunner(std::unique_ptr<Impl> impl, ModelConfig config, int max_batch);
  // Step's work; every_position: all of each row's tokens' logits (ForwardAll).
  absl::Status RunStep(absl::Span<const KvShare> shares, absl::Span<const Row> rows, bool every_position,
                       std::vector<float>* logits);
  // A step of decode rows alone, each wanting its logits, over its bucket's shape (Note [Decode steps by
  // bucket], step_graph_options.h): by the bucket's graph where graphs are on and allowed, else eagerly.
  absl::Status RunDecode(absl::Span<const Row> rows, int64_t d_span, std::vector<float>* logits);
  // A step with prompt chunks (rows checked; `b` their bucket) over its bucket's shape (Note [Packed steps by
  // bucket]): by the bucket's graph where graphs are on and allowed, else eagerly; the logits its rows want.
  absl::Status RunPacked(absl::Span<const Row> rows, StepBucket b, std::vector<float>* logits);

  std::unique_ptr<Impl> impl_;
  ModelConfig config_;
  int max_batch_;
  int64_t parameter_count_ = 0;
  int64_t parameter_bytes_ = 0;
  int64_t kv_cache_bytes_ = 0;
  std::string compute_dtype_;
  std::function<void(int64_t, int64_t)> kv_rows_listener_;
  bool graphs_allowed_ = true;
  const profiler::IterationHooks* staged_hooks_ = nullptr;
  profiler::PassGraph last_pass_graph_ = profiler::PassGraph::kNone;
  const char* last_step_form_ = "";
  double last_step_launch_s_ = -1;
};

// Sets libtorch's intra-op thread pool size for the process (call once, before models run).
void SetIntraOpThreads(int threads);

}  // namespace autouvm::engine
