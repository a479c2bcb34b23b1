// ModelRunner, its decode steps: the bucket's layout, run eagerly or by the bucket's graph (Note [Captured
// steps], step_graphs.cc; Note [Staged passes captured], runtime/executor_capture.cc).
#include <torch/script.h>

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/model_runner.h"
#include "engine/model_runner_impl.h"
#include "engine/step_graph_options.h"
#include "engine/step_graphs.h"
#include "profiler/iteration_hooks.h"

namespace autouvm::engine {

using runner_internal::CopyInto;
using runner_internal::TorchError;

absl::Status ModelRunner::EnableStepGraphs(const StepGraphOptions& options) {
  impl_->graphs.reset();
  if (options.mode == StepGraphMode::kOff) return absl::OkStatus();
  Impl* impl = impl_.get();
  // `live` is the whole pool in a graph (Note [Captured steps]).
  const int64_t pool_rows = impl->k_pools.empty() ? 0 : impl->k_pools[0].size(0);
  auto forward = [impl, pool_rows](const StepGraphs::Inputs& in, int64_t live) {
    std::vector<torch::jit::IValue> inputs{in.tokens,
                                           in.positions,
                                           in.kv_rows,
                                           in.d_rows,
                                           in.p_index,
                                           in.p_flat,
                                           in.p_rows,
                                           in.logit_ix,
                                           live < 0 ? pool_rows : live,
                                           c10::List<at::Tensor>(impl->k_pools),
                                           c10::List<at::Tensor>(impl->v_pools)};
    return impl->module.get_method("step")(std::move(inputs)).toTensor();
  };
  // The runner's own tensors, which outlive its graphs: not referenced (StepGraphs::Create).
  std::vector<const c10::StorageImpl*> reads;
  for (const c10::Storage& s : impl->Storages()) reads.push_back(s.unsafeGetStorageImpl());
  ASSIGN_OR_RETURN(impl->graphs, StepGraphs::Create(options, impl->device, impl->torch_device, std::move(reads),
                                                    std::move(forward), config_.vocab_size));
  return absl::OkStatus();
}

StepGraphStats ModelRunner::step_graph_stats() const {
  return impl_->graphs != nullptr ? impl_->graphs->stats() : StepGraphStats{};
}

absl::Status ModelRunner::RunDecode(absl::Span<const Row> rows, int64_t d_span, std::vector<float>* logits) {
  const int64_t nd = static_cast<int64_t>(rows.size());
  const DecodeBucket bucket = DecodeBucketOf(nd, d_span, max_batch_, config_.max_seq);
  const KvBlocks& blocks = impl_->blocks;
  const int64_t B = bucket.batch, S = bucket.span;
  // The first nd rows of the layout; the rest stays as it comes (zeros: padding rows).
  auto fill = [&rows, &blocks, B, S](int64_t* host) {
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      host[i] = r.tokens[0];
      host[B + i] = r.start_pos;
      host[2 * B + i] = blocks.RowOf(r.slot, r.start_pos);
      int64_t* table = host + 3 * B + static_cast<int64_t>(i) * S;
      for (int64_t j = 0; j <= r.start_pos; ++j) table[j] = blocks.RowOf(r.slot, j);  // past it: row 0
    }
  };
  StepGraphs* graphs = impl_->graphs.get();
  try {
    // Note [Staged passes captured] (runtime/executor_capture.cc): an observed step of a bucket the graphs
    // take runs the ops of the staged pass, as the graph of its pass (copies included) where its plan's
    // state repeats, else eagerly: the plans it follows are recorded from the same ops.
    if (graphs != nullptr && !graphs_allowed_ && graphs->Takes(bucket)) {
      const profiler::IterationHooks* hooks = staged_hooks_;
      const uint64_t key = hooks != nullptr && graphs->TakesStaged(bucket) ? hooks->StagedCaptureKey() : 0;
      torch::NoGradGuard no_grad;
      auto on = impl_->Enter();
      absl::StatusOr<at::Tensor> out = graphs->RunStaged(
          bucket, key, blocks.live_rows(), nd, fill, [hooks, key] { return hooks->StagedCaptureHeld(key); },
          &last_pass_graph_);
      last_step_form_ = graphs->last_form();
      last_step_launch_s_ = -1;
      if (!out.ok()) return out.status();
      CopyInto(*out, logits);
      return absl::OkStatus();
    }
    if (graphs != nullptr && graphs_allowed_ && graphs->Takes(bucket)) {
      torch::NoGradGuard no_grad;
      auto on = impl_->Enter();
      ASSIGN_OR_RETURN(const at::Tensor out, graphs->Run(bucket, nd, fill));
      last_step_form_ = graphs->last_form();
      last_step_launch_s_ = -1;  // a replay is launched at once
      CopyInto(out, logits);
      return absl::OkStatus();
    }
    if (graphs != nullptr) graphs->CountEager();
    last_step_form_ = graphs == nullptr ? "decode" : "decode: eager, too wide";
    // The same layout as the graph's.
    auto packed = torch::empty({DecodeLayoutSize(bucket)}, torch::kLong);
    ResetDecodeLayout(bucket, packed.data_ptr<int64_t>());
    fill(packed.data_ptr<int64_t>());
    CopyInto(impl_->Step(packed, B, B, S, 0, 0, 0, 0, B).narrow(0, 0, nd), logits);
    last_step_launch_s_ = impl_->launch_s;
  } catch (const std::exception& e) {
    return TorchError("forward pass", e);
  }
  return absl::OkStatus();
}

}  // namespace autouvm::engine
