// ModelRunner, its decode and packed steps: the bucket's layout, run eagerly or by the bucket's graph (Note
// [Captured steps], step_graphs.cc; Note [Staged passes captured], runtime/executor_capture.cc; Note [Packed
// steps by bucket], step_graph_options.h).
#include <torch/script.h>

#include <algorithm>
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
using runner_internal::CopyRowsInto;
using runner_internal::TorchError;

namespace {

// Decode row `d` of bucket `b`'s host layout `l`: row `r`'s token, position, pool row and the pool rows of its
// positions (past them: row 0, as the layout comes).
void FillDecodeRow(const StepBucket& b, const StepLayout& l, const KvBlocks& blocks, int64_t d,
                   const StepRunner::Row& r, int64_t* host) {
  host[d] = r.tokens[0];
  host[l.positions + d] = r.start_pos;
  host[l.kv_rows + d] = blocks.RowOf(r.slot, r.start_pos);
  int64_t* table = host + l.d_rows + d * b.span;
  for (int64_t j = 0; j <= r.start_pos; ++j) table[j] = blocks.RowOf(r.slot, j);
}

}  // namespace

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
  const StepBucket bucket = DecodeBucketOf(nd, d_span, max_batch_, config_.max_seq);
  const KvBlocks& blocks = impl_->blocks;
  const int64_t B = bucket.batch, S = bucket.span;
  const StepLayout layout = LayoutOf(bucket);
  // The first nd rows of the layout; the rest stays as it comes (zeros: padding rows).
  auto fill = [&rows, &blocks, &bucket, &layout](int64_t* host) {
    for (size_t i = 0; i < rows.size(); ++i)
      FillDecodeRow(bucket, layout, blocks, static_cast<int64_t>(i), rows[i], host);
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
    auto packed = torch::empty({layout.size}, torch::kLong);
    ResetStepLayout(bucket, packed.data_ptr<int64_t>());
    fill(packed.data_ptr<int64_t>());
    CopyInto(impl_->Step(packed, B, B, S, 0, 0, 0, 0, B).narrow(0, 0, nd), logits);
    last_step_launch_s_ = impl_->launch_s;
  } catch (const std::exception& e) {
    return TorchError("forward pass", e);
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::RunPacked(absl::Span<const Row> rows, StepBucket b, std::vector<float>* logits) {
  const StepLayout l = LayoutOf(b);
  const KvBlocks& blocks = impl_->blocks;
  // The logit rows (batch + prompt_rows: decode rows first, in the order they come, then prompt rows) each of
  // `rows` that wants its logits reads, in the order of `rows`.
  std::vector<int64_t> wanted;
  for (int64_t d = 0, p = 0; const Row& r : rows) {
    if (r.logits) wanted.push_back(r.decode ? d : b.batch + p);
    ++(r.decode ? d : p);
  }
  auto fill = [&rows, &blocks, &b, &l](int64_t* host) {
    int64_t d = 0, p = 0, at = b.batch;  // the next decode row, prompt row and packed prompt token
    int64_t* flat = host + l.p_flat;
    for (const Row& r : rows) {
      if (r.decode) {
        FillDecodeRow(b, l, blocks, d++, r, host);
        continue;
      }
      const auto len = static_cast<int64_t>(r.tokens.size());
      for (int64_t k = 0; k < len; ++k) {
        host[at + k] = r.tokens[static_cast<size_t>(k)];
        host[l.positions + at + k] = r.start_pos + k;
        host[l.kv_rows + at + k] = blocks.RowOf(r.slot, r.start_pos + k);
      }
      int64_t* table = host + l.p_rows + p * b.prompt_span;
      for (int64_t j = 0; j < r.start_pos + len; ++j) table[j] = blocks.RowOf(r.slot, j);
      for (int64_t t = 0; t < b.chunk; ++t) host[l.p_index + p * b.chunk + t] = at + std::min(t, len - 1);
      for (int64_t t = 0; t < len; ++t) *flat++ = p * b.chunk + t;
      host[l.logit_ix + b.batch + p] = at + len - 1;
      at += len;
      ++p;
    }
  };
  StepGraphs* graphs = impl_->graphs.get();
  const int64_t logit_rows = b.batch + b.prompt_rows;
  try {
    torch::Tensor out;  // [logit_rows, vocab] on the host
    if (graphs != nullptr && !graphs_allowed_) {
      // Note [Staged passes captured], as RunDecode's; every observed packed pass, captured or not, runs the
      // ops of RunStaged's pass: a profile's passes (keyed by rows and longest chunk, not by the prompt
      // tokens that decide Takes) run the same ops, on either side of cuda_graph_max_tokens.
      const profiler::IterationHooks* hooks = staged_hooks_;
      const uint64_t key = hooks != nullptr && graphs->TakesStaged(b) ? hooks->StagedCaptureKey() : 0;
      torch::NoGradGuard no_grad;
      auto on = impl_->Enter();
      ASSIGN_OR_RETURN(out, graphs->RunStaged(
                                b, key, blocks.live_rows(), logit_rows, fill,
                                [hooks, key] { return hooks->StagedCaptureHeld(key); }, &last_pass_graph_));
      last_step_form_ = graphs->last_form();
      last_step_launch_s_ = -1;
    } else if (graphs != nullptr && graphs_allowed_ && graphs->Takes(b)) {
      torch::NoGradGuard no_grad;
      auto on = impl_->Enter();
      ASSIGN_OR_RETURN(out, graphs->Run(b, logit_rows, fill));
      last_step_form_ = graphs->last_form();
      last_step_launch_s_ = -1;  // a replay is launched at once
    } else {
      if (graphs != nullptr) graphs->CountEager();
      last_step_form_ = graphs == nullptr ? "packed"
                        : b.batch > 0 && !graphs->Takes({.batch = b.batch, .span = b.span})
                            ? "packed: eager, too wide"
                            : "packed: eager, too many tokens";
      // The same layout as the graph's.
      auto packed = torch::empty({l.size}, torch::kLong);
      ResetStepLayout(b, packed.data_ptr<int64_t>());
      fill(packed.data_ptr<int64_t>());
      out = impl_->Step(packed, b.batch + b.prompt_tokens, b.batch, b.span, b.prompt_rows, b.chunk, b.prompt_tokens,
                        b.prompt_span, logit_rows);
      last_step_launch_s_ = impl_->launch_s;
    }
    CopyRowsInto(out, wanted, logits);  // none: inner chunks only
  } catch (const std::exception& e) {
    return TorchError("forward pass", e);
  }
  return absl::OkStatus();
}

}  // namespace autouvm::engine
