#include "engine/step_graphs.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace autouvm::engine {

// Note [Captured steps]: when a model (nearly) fits, its decode step is the host's dispatch — a 7B's
// 1691 TorchScript ops take 17-29 ms on the H200 where its weights take 3 ms to read (issue 29). So a
// decode step the session lets run unobserved (Note [Plans with nothing to do per op],
// profiler/model_execution.cc: IterationHooks::PassMayBeCaptured) is run by a CUDA graph of its bucket:
// - One graph per bucket (Note [Decode steps by bucket], step_graph_options.h), whose padding the eager
//   step has too: a graph replays the step the runner would run eagerly. `live` is the whole pool: the
//   graph's views do not change with the rows in use (the pool's rows are the same either way).
// - Packed steps too — prompt chunks, alone (prefills) or with decode rows (mixed steps) — by the bucket of
//   Note [Packed steps by bucket], up to options.max_tokens prompt tokens: the host's dispatch of a 7B's
//   step is 17-29 ms on the H200 whatever its tokens, where 512 prompt tokens are 7 TFLOP (~10 ms at 700
//   TFLOP/s, an estimate, not measured). A packed bucket is captured at its second step: its shapes vary
//   more than decode steps', and one seen once should cost no capture.
// - Inputs through one static tensor per bucket, filled from a pinned host copy before each replay;
//   the logits come out of the graph's own output tensor. Sampling stays outside, on the host.
// - The first step of a decode bucket (a packed one's second) runs eagerly on the static inputs (its result
//   is the step's, and it is the capture's warm-up), then the bucket is captured; the next ones replay. A capture that
//   fails leaves its bucket eager for good, counted, logged once.
// - The capture's allocations come from an arena of the graphs' own (Note [Captured steps'
//   allocations], runtime/cuda/managed_memory.cc), which holds them: the graphs' device memory, counted
//   and reported (stats().bytes), in managed memory under the process's limits.
// - A graph reads the weights and the KV pools at the addresses they had at its capture. A plan that
//   streams through a device buffer rebinds them op by op (runtime/tensor_binding.h): such a pass is
//   captured only as Note [Staged passes captured] (runtime/executor_capture.cc) says. A replay checks
//   every storage's address anyway and captures again where one moved. Where the pages of those
//   storages are (device, host, in flight) does not matter to a graph: it reads managed memory as any
//   kernel does.
//
// Note [Staged graphs read the whole pools]: a staged pass run eagerly reads the KV pools through views
// of their rows in use (`live`), so that a plan recorded from it reaches only those (Note [KV pools by
// their live rows], runtime/access_trace.cc). Its graph's views are the whole pools, as a resident
// graph's are: every op of the step reads and writes the pools by row index (kv_rows, d_rows, p_rows, all
// below the rows in use), so the view's length changes which rows the step may address, not which it
// touches, and one capture serves while the rows in use grow. The follower checks ops, not their extents
// (runtime/executor_follower.cc), and a captured pass records no trace. Keyed on the rows in use, the
// H100's 7B captured again at every block of 16 tokens (4 captures a 64-token request, ~5 ms each: 2.6%
// of its step at factor 1.1, batch 1, 2026-12-06-staged-captures-held-h100.md). The plan's state still
// keys the graph (Executor::PassKey): where a pool is streamed, its bytes grow with the rows and a new
// state captures again.

namespace {

class EmulatedWork final : public runtime::ComputeDevice::CapturedWork {
 public:
  explicit EmulatedWork(std::function<absl::Status()> body) : body_(std::move(body)) {}
  absl::Status Replay() override {
    // A graph's replay dispatches no op: nothing observes it (a staged pass's observer is live).
    at::RecordFunctionGuard unobserved(/*is_enabled=*/false);
    return body_();
  }

 private:
  const std::function<absl::Status()> body_;
};

// How a step ran (StepGraphs::last_form), a decode step's and a packed step's.
struct Forms {
  const char *replayed, *captured, *captured_again, *capture_failed, *failed_before, *observed, *staged_captured,
      *staged_replayed, *staged_failed;
};
constexpr Forms kDecodeForms{"decode: replayed",
                             "decode: eager, then captured",
                             "decode: eager, captured again",
                             "decode: eager, capture failed",
                             "decode: eager (its capture failed before)",
                             "decode: eager, observed",
                             "decode: staged, captured",
                             "decode: staged, replayed",
                             "decode: staged, capture failed"};
constexpr Forms kPackedForms{"packed: replayed",
                             "packed: eager, then captured",
                             "packed: eager, captured again",
                             "packed: eager, capture failed",
                             "packed: eager (its capture failed before)",
                             "packed: eager, observed",
                             "packed: staged, captured",
                             "packed: staged, replayed",
                             "packed: staged, capture failed"};
const Forms& FormsOf(StepBucket b) { return b.packed() ? kPackedForms : kDecodeForms; }

}  // namespace

absl::StatusOr<std::unique_ptr<StepGraphs>> StepGraphs::Create(const StepGraphOptions& options,
                                                               runtime::ComputeDevice* device, at::Device on,
                                                               std::vector<const c10::StorageImpl*> reads,
                                                               Forward forward, int64_t vocab) {
  if (options.mode == StepGraphMode::kOff) return absl::InvalidArgumentError("step graphs: the mode is off");
  if (options.max_batch < 1) return absl::InvalidArgumentError("cuda_graph_max_batch: must be at least 1");
  if (options.mode == StepGraphMode::kDevice && device == nullptr) {
    return absl::UnimplementedError("step graphs: the CPU captures no graphs");
  }
  // The arena is made by the first capture: a model whose steps are never captured (under a budget
  // every decode step is observed) holds none.
  return std::unique_ptr<StepGraphs>(new StepGraphs(options, device, on, std::move(reads), std::move(forward), vocab));
}

StepGraphs::StepGraphs(const StepGraphOptions& options, runtime::ComputeDevice* device, at::Device on,
                       std::vector<const c10::StorageImpl*> reads, Forward forward, int64_t vocab)
    : options_(options),
      device_(device),
      on_(on),
      reads_(std::move(reads)),
      forward_(std::move(forward)),
      vocab_(vocab) {}

StepGraphs::~StepGraphs() {
  // The captured work and its tensors go back to the arena before it goes, the staged passes' too (their
  // graphs, their outputs in the arena's pool, their pinned buffers used on its stream). Left until after
  // it, they are the likely cause of the H100's graphs-on daemons ending with SIGABRT after "stopped"
  // ("CUDA error: context is destroyed" from a tensor's destructor; not yet run there since).
  entries_.clear();
  staged_.clear();
  arena_.reset();
}

std::vector<const void*> StepGraphs::Addresses() const {
  std::vector<const void*> out;
  out.reserve(reads_.size());
  for (const c10::StorageImpl* s : reads_) out.push_back(s->data());
  return out;
}

StepGraphs::Entry& StepGraphs::EntryOf(Bucket b) {
  Entry& e = entries_[b];
  if (!e.host.defined()) MakeEntry(b, e);
  return e;
}

void StepGraphs::MakeEntry(Bucket b, Entry& e) {
  const StepLayout l = LayoutOf(b);
  const bool device = options_.mode == StepGraphMode::kDevice;
  e.host = at::empty({l.size}, at::TensorOptions().dtype(at::kLong).pinned_memory(device));
  e.inputs = device ? at::empty({l.size}, at::TensorOptions().dtype(at::kLong).device(on_)) : e.host;
  const at::Tensor& in = e.inputs;
  const int64_t n = b.batch + b.prompt_tokens;
  e.views.tokens = in.narrow(0, 0, n);
  e.views.positions = in.narrow(0, l.positions, n);
  e.views.kv_rows = in.narrow(0, l.kv_rows, n);
  e.views.d_rows = in.narrow(0, l.d_rows, b.batch * b.span).view({b.batch, b.span});
  e.views.p_index = in.narrow(0, l.p_index, b.prompt_rows * b.chunk).view({b.prompt_rows, b.chunk});
  e.views.p_flat = in.narrow(0, l.p_flat, b.prompt_tokens);
  e.views.p_rows = in.narrow(0, l.p_rows, b.prompt_rows * b.prompt_span).view({b.prompt_rows, b.prompt_span});
  e.views.logit_ix = in.narrow(0, l.logit_ix, b.batch + b.prompt_rows);
}

std::string StepGraphs::Describe(Bucket b) {
  std::string out = absl::StrCat("batch ", b.batch, ", span ", b.span);
  if (b.packed()) {
    absl::StrAppend(&out, "; ", b.prompt_rows, " prompt rows of ", b.chunk, ", ", b.prompt_tokens,
                    " prompt tokens, prompt span ", b.prompt_span);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<runtime::ComputeDevice::CapturedWork>> StepGraphs::CaptureWork(
    const std::function<absl::Status()>& body) {
  if (options_.mode == StepGraphMode::kEmulated) return std::make_unique<EmulatedWork>(body);
  if (arena_ == nullptr) {
    ASSIGN_OR_RETURN(arena_, device_->NewCaptureArena());
  }
  return arena_->Capture(body);
}

void StepGraphs::Capture(Bucket b, Entry& e) {
  const auto began = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<runtime::ComputeDevice::CapturedWork>> work =
      CaptureWork([this, &e]() -> absl::Status {
        e.out = forward_(e.views, -1);
        return absl::OkStatus();
      });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  absl::MutexLock lock(&mu_);
  stats_.capture_seconds += seconds;
  if (!work.ok()) {
    e.failed = true;
    e.out = at::Tensor();
    ++stats_.capture_failures;
    stats_.last_error = absl::StrCat(Describe(b), ": ", work.status().message());
    AUTOUVM_LOG(WARNING) << "capturing the " << (b.packed() ? "packed" : "decode") << " step of " << Describe(b)
                         << " failed (" << work.status().message() << "); that bucket runs eagerly";
    return;
  }
  e.work = std::move(*work);
  e.addresses = Addresses();
  ++stats_.captures;
  ++stats_.graphs;
  if (b.packed()) ++stats_.packed_captures;
}

absl::StatusOr<at::Tensor> StepGraphs::Run(Bucket b, int64_t rows, const std::function<void(int64_t* host)>& fill) {
  if (rows < 1 || rows > b.batch + b.prompt_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step of ", rows, " logit rows in a bucket of ", b.batch + b.prompt_rows));
  }
  Entry& e = EntryOf(b);
  ++e.steps;
  const bool packed = b.packed();
  ResetStepLayout(b, e.host.data_ptr<int64_t>());
  fill(e.host.data_ptr<int64_t>());
  if (!e.inputs.is_same(e.host)) e.inputs.copy_(e.host, /*non_blocking=*/true);
  at::Tensor out;
  bool again = false;
  if (e.work != nullptr && e.addresses != Addresses()) {
    // A tensor the graph reads has moved: its capture is stale.
    e.work.reset();
    e.out = at::Tensor();
    absl::MutexLock lock(&mu_);
    ++stats_.recaptures;
    --stats_.graphs;
    again = true;
  }
  if (e.work != nullptr) {
    if (absl::Status s = e.work->Replay(); !s.ok()) return s;
    out = e.out;
    last_form_ = FormsOf(b).replayed;
    absl::MutexLock lock(&mu_);
    ++stats_.replays;
    if (packed) ++stats_.packed_replays;
  } else if (packed && e.steps == 1) {
    // Note [Packed steps by bucket]: a packed shape may not come again; captured when it does.
    out = forward_(e.views, -1);
    CountEager();
    last_form_ = "packed: eager, the first of its bucket";
  } else {
    out = forward_(e.views, -1);  // this step's result, and the warm-up of the capture that follows
    const bool tried = !e.failed;
    if (tried) Capture(b, e);
    if (e.failed) CountEager();
    const Forms& f = FormsOf(b);
    last_form_ = e.failed ? (tried ? f.capture_failed : f.failed_before) : again ? f.captured_again : f.captured;
  }
  // The copy to the host waits for the step; the next step's fill may then rewrite the pinned copy.
  at::Tensor logits = out.narrow(0, 0, rows).to(at::kCPU);
  if (arena_ != nullptr) {
    absl::MutexLock lock(&mu_);
    stats_.bytes = arena_->bytes();
  }
  return logits;
}

absl::StatusOr<at::Tensor> StepGraphs::RunStaged(Bucket b, uint64_t key, int64_t live, int64_t rows,
                                                 const std::function<void(int64_t* host)>& fill,
                                                 const std::function<absl::Status()>& held, profiler::PassGraph* how) {
  *how = profiler::PassGraph::kNone;
  if (rows < 1 || rows > b.batch + b.prompt_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step of ", rows, " logit rows in a bucket of ", b.batch + b.prompt_rows));
  }
  const bool device = options_.mode == StepGraphMode::kDevice;
  const bool packed = b.packed();
  StagedEntry& staged = staged_[b];
  Entry& e = staged.entry;
  if (!e.host.defined()) {
    // Unobserved: the bucket's first pass has the ops of every other.
    at::RecordFunctionGuard unobserved(/*is_enabled=*/false);
    MakeEntry(b, e);
    // Pinned, made before any capture (an allocation of pinned memory cannot be captured).
    if (device) {
      e.out_host =
          at::empty({b.batch + b.prompt_rows, vocab_}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    }
  }
  ResetStepLayout(b, e.host.data_ptr<int64_t>());
  fill(e.host.data_ptr<int64_t>());
  // The pass's ops, the same whether captured or run eagerly: a plan recorded from the eager pass is the
  // plan the captured one follows, op for op. On a device the input and output copies are among them (one
  // copy to the device, one back: Note [Leaf ops] counts both). `out` is where the logits land on the
  // device: a captured pass's stays with its graph (the arena's memory), an eager pass's is its own.
  auto body = [this, &e, device](int64_t rows_read, at::Tensor* out) -> absl::Status {
    if (device) e.inputs.copy_(e.host, /*non_blocking=*/true);
    *out = forward_(e.views, rows_read);
    if (!device) {
      e.out_host = *out;
    } else {
      if (!e.out_host.sizes().equals(out->sizes())) {
        return absl::InternalError("the staged step's logits have no host buffer of their shape");
      }
      e.out_host.copy_(*out, /*non_blocking=*/true);
      // A replay's logits are read once they are on the host, not once its copies for the next pass are
      // done: those overlap the host's sampling and the next launch, as an eager pass's do.
      RETURN_IF_ERROR(device_->MarkCapturedOutputs());
    }
    return absl::OkStatus();
  };
  if (key == 0) {
    // Not (yet) from a state its passes repeat: eagerly, with the captured pass's ops.
    at::Tensor out;
    RETURN_IF_ERROR(body(live, &out));
    if (device) RETURN_IF_ERROR(device_->WaitForStream());
    CountEager();
    last_form_ = FormsOf(b).observed;
    at::Tensor logits = e.out_host.narrow(0, 0, rows);
    // A packed bucket too large for a graph runs here only for its ops (ModelRunner::RunPacked): its buffers
    // go back (to the caching allocators) rather than stay, one set per shape seen.
    if (!Takes(b)) staged_.erase(b);
    return logits;
  }
  if (e.work != nullptr && (staged.key != key || e.addresses != Addresses())) {
    // Another state of the plan (or another plan), or a tensor it reads has moved: captured again.
    AUTOUVM_LOG(DEBUG) << "step graphs: the staged graph of " << Describe(b) << " is captured again: "
                       << (staged.key != key
                               ? absl::StrFormat("its key was %016x, the pass's is %016x", staged.key, key)
                               : std::string("a tensor it reads has moved"));
    e.work.reset();
    absl::MutexLock lock(&mu_);
    ++stats_.recaptures;
    --stats_.graphs;
  }
  staged.key = key;
  if (e.work == nullptr) {
    // Note [Staged graphs read the whole pools]: the graph's views are the whole KV pools, so that it
    // serves on while the rows in use grow.
    auto capture = [&]() { return body(-1, &e.out); };
    const auto began = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<runtime::ComputeDevice::CapturedWork>> work;
    if (device) {
      work = CaptureWork(capture);
    } else {
      // Emulated: the pass runs here, observed, as the capture would have issued it; replays run it
      // unobserved.
      absl::Status ran = capture();
      work = ran.ok() ? CaptureWork(capture) : ran;
    }
    // Note [Staged passes captured]: kept only where the pass followed its plan to the end, from and back
    // to the state of its key; a pass that stopped following (its ops not the plan's, a call the capture
    // refused) would replay without its copies.
    if (work.ok()) {
      if (absl::Status kept = held(); !kept.ok()) {
        work = absl::Status(kept.code(), absl::StrCat("the captured pass cannot be replayed: ", kept.message()));
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    absl::MutexLock lock(&mu_);
    stats_.capture_seconds += seconds;
    if (!work.ok()) {
      int& failures = staged_failed_[b];
      if (work.status().code() != absl::StatusCode::kAborted) ++failures;
      staged_.erase(b);
      ++stats_.capture_failures;
      stats_.last_error = absl::StrCat("a staged pass of ", Describe(b), ": ", work.status().message());
      AUTOUVM_LOG(WARNING) << "capturing a staged " << (packed ? "packed" : "decode") << " pass of " << Describe(b)
                           << " failed (" << work.status().message() << "; "
                           << (work.status().code() == absl::StatusCode::kAborted
                                   ? std::string("not counted against its tries")
                                   : absl::StrCat(failures, " of ", kStagedCaptureTries, " tries failed"))
                           << (failures < kStagedCaptureTries
                                   ? "); it runs again, and is captured again where it repeats"
                                   : "); that bucket's staged passes run eagerly");
      *how = profiler::PassGraph::kCaptureFailed;
      last_form_ = FormsOf(b).staged_failed;
      return absl::Status(work.status().code(), absl::StrCat("capturing a staged pass: ", work.status().message()));
    }
    e.work = std::move(*work);
    e.addresses = Addresses();
    ++stats_.captures;
    ++stats_.staged_captures;
    ++stats_.graphs;
    if (packed) ++stats_.packed_captures;
    *how = profiler::PassGraph::kCaptured;
    last_form_ = FormsOf(b).staged_captured;
    AUTOUVM_LOG(DEBUG) << "step graphs: captured a staged " << (packed ? "packed" : "decode") << " pass of "
                       << Describe(b) << " at key " << absl::StrFormat("%016x", key) << " in "
                       << absl::StrFormat("%.1f", 1e3 * seconds) << " ms";
  } else {
    *how = profiler::PassGraph::kReplayed;
    last_form_ = FormsOf(b).staged_replayed;
    absl::MutexLock lock(&mu_);
    ++stats_.replays;
    ++stats_.staged_replays;
    if (packed) ++stats_.packed_replays;
  }
  // A device's capture ran nothing: the captured pass runs now, as every replay does.
  if (device) {
    RETURN_IF_ERROR(e.work->Replay());
    RETURN_IF_ERROR(e.work->Wait());
  } else if (*how == profiler::PassGraph::kReplayed) {
    RETURN_IF_ERROR(e.work->Replay());
  }
  if (arena_ != nullptr) {
    absl::MutexLock lock(&mu_);
    stats_.bytes = arena_->bytes();
  }
  return e.out_host.narrow(0, 0, rows);
}

bool StepGraphs::TakesStaged(Bucket b) const {
  if (!Takes(b)) return false;
  const auto it = staged_failed_.find(b);
  return it == staged_failed_.end() || it->second < kStagedCaptureTries;
}

void StepGraphs::CountEager() {
  absl::MutexLock lock(&mu_);
  ++stats_.eager_steps;
}

StepGraphStats StepGraphs::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace autouvm::engine
