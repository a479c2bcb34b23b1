#include "runtime/observer.h"

#include <ATen/record_function.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace autouvm::runtime {
namespace {

// Note [One global callback]: libtorch's callbacks carry no pointer of ours, so the observed
// iterations' global callback is registered once for every observer of the process — by the first
// Create, removed with the last observer — and finds the observer of the iteration in progress through
// the thread-local t_observing. Each model session has an observer of its own and runs its iterations
// on its own thread, so models observe and follow their plans at once, none waiting for another.
std::mutex g_global_mu;
int g_observers = 0;                     // guarded by g_global_mu
at::CallbackHandle g_global_handle = 0;  // guarded by g_global_mu

// What an op saw when it started; lives from the start callback to the end callback.
struct OpContext : at::ObserverContext {
  bool had_child = false;  // a child op was recorded inside it
  bool inside_op = false;  // it runs inside another op
  bool bookkeeping = false;
  std::vector<at::Tensor> inputs;
  std::chrono::steady_clock::time_point start;
};

// Note [Leaf ops]: a kernel allocates its output and resolves views through the dispatcher too (aten::mm
// calls aten::empty and aten::resolve_conj), so "an op with no child op" would lose every real kernel.
// An op counts unless one of its children counted; these ops never count themselves (they only
// allocate, alias their inputs, or convert through a child that does the copy), so they do not make
// their parent composite. A recorded iteration also drops any other op whose outputs all alias its
// inputs; an observed one cannot see that, so this list names every view the model contract's ops use
// and the observer test checks that both modes number the same ops. aten::is_pinned only asks: libtorch's
// copy from the host asks it of its source while a CUDA graph is captured and not otherwise, so a captured
// pass would run one op more than the eager pass its plan was recorded from (the H100's first staged
// captures stopped at their op 0 for it: Note [Staged passes captured], runtime/executor_capture.cc).
bool IsBookkeeping(std::string_view op) {
  static const std::set<std::string_view> kOps = {
      "aten::empty",      "aten::empty_strided",  "aten::resize_",    "aten::result_type",  "aten::as_strided",
      "aten::view",       "aten::_reshape_alias", "aten::t",          "aten::transpose",    "aten::expand",
      "aten::select",     "aten::slice",          "aten::unsqueeze",  "aten::squeeze",      "aten::permute",
      "aten::detach",     "aten::alias",          "aten::reshape",    "aten::_unsafe_view", "aten::contiguous",
      "aten::empty_like", "aten::lift_fresh",     "aten::is_nonzero", "aten::item",         "aten::_local_scalar_dense",
      "aten::to",         "aten::type_as",        "aten::view_as",    "aten::resolve_conj", "aten::resolve_neg",
      "aten::conj",       "aten::_conj",          "aten::narrow",     "aten::is_pinned"};
  return kOps.count(op) > 0;
}

// Note [Kernels that depend on size]: an op's identity is its name and launch counter, so every length
// within a shape bucket must run the same op names. libtorch's CPU aten::zero_ writes a small tensor
// itself but calls aten::fill_ for one of GRAIN_SIZE (32768) elements or more: the prefill mask
// [1, 1, T, max_seq] of tiny-llama (max_seq 512) ran op 7 as aten::fill_ at T = 64 and as aten::zero_
// at T = 33..63, one bucket, and each alternation cost the key its profile. A leaf zero_ is named as the
// fill_ it stands for: both write every element of their tensor and read nothing.
// ObserverTest.EveryLengthOfAPrefillBucketRunsTheSameOps runs every length of every bucket. Likewise
// CUDA's index_select (and the embedding, which calls it) runs as a child aten::gather once it picks
// enough rows: on the H200 a decode step of 32 sequences ran op 16 as aten::gather#0 where one of 1 ran
// aten::index_select#0, so no decode or mixed batch could follow its neighbour's plan past its first
// gather (each such pass then ran again without a plan, 2.3-4.2 s, bench/results/2026-12-02-*). A leaf
// gather is named as the index_select it stands for: both read rows of a table at given indices
// (Note [Gather ops]) and write a fresh output. ObserverTest.AGatherIsNamedAsTheIndexSelectItStandsFor.
std::string_view CanonicalOp(std::string_view op) {
  if (op == "aten::zero_") return "aten::fill_";
  if (op == "aten::gather") return "aten::index_select";
  return op;
}

void CollectTensors(const c10::IValue& v, std::vector<at::Tensor>* out) {
  if (v.isTensor()) {
    out->push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) out->push_back(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) out->push_back(e.toTensor());
    }
  }
}

// The interpreter hands RecordFunction its whole stack; the op's own values are the last ones.
template <typename Values>
void CollectLast(const Values& values, size_t n, std::vector<at::Tensor>* out) {
  const size_t size = values.size();
  for (size_t i = size > n ? size - n : 0; i < size; ++i) CollectTensors(values[i], out);
}

bool IsGather(std::string_view op) {
  return op == "aten::index_select" || op == "aten::embedding" || op == "aten::index" || op == "aten::gather";
}

const void* StorageKey(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  return t.storage().data();
}

int64_t Bytes(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// A use of `t` under `id`: its bytes, and the span of its storage it reaches (strided views reach more
// than they use).
TensorUse Use(std::string id, const at::Tensor& t) {
  TensorUse u{std::move(id), Bytes(t), 0, 0, 0};
  if (u.bytes == 0) return u;
  const int64_t elem = static_cast<int64_t>(t.element_size());
  u.offset = (static_cast<const char*>(t.data_ptr()) - static_cast<const char*>(t.storage().data()));
  int64_t last = 0;  // the farthest element from the first, in elements
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * std::abs(t.stride(d));
  u.extent = (last + 1) * elem;
  u.run = elem;
  if (t.is_contiguous()) {
    u.run = u.bytes;
  } else {
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.stride(d) == 1) u.run = std::max(u.run, t.size(d) * elem);
    }
  }
  return u;
}

bool IsAttention(std::string_view op) {
  return op == "aten::_scaled_dot_product_flash_attention" || op == "aten::_scaled_dot_product_efficient_attention" ||
         op == "aten::_scaled_dot_product_cudnn_attention" || op == "aten::_scaled_dot_product_attention_math" ||
         op == "aten::_scaled_dot_product_flash_attention_for_cpu";
}

// Note [FLOPs of an op]: matrix products count 2·M·K·N (per batch); a convolution 2 per weight element
// per output element and output channel (2·out·Cin/groups·kernel); fused attention 2·L·S·(E + Ev) per
// batch and head (QKᵀ and PV); anything else one per output element, which is what elementwise ops,
// reductions and copies roughly cost.
double Flops(const std::string& op, const std::vector<at::Tensor>& in, const std::vector<at::Tensor>& out) {
  auto dims = [](const at::Tensor& t, int64_t i) { return static_cast<double>(t.size(i)); };
  const bool has_out = !out.empty() && out[0].defined();
  if (absl::StrContains(op, "conv") && in.size() >= 2 && in[1].defined() && in[1].dim() >= 3 && has_out &&
      in[1].size(0) > 0) {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[1].numel() / in[1].size(0));
  }
  if (IsAttention(op) && in.size() >= 3 && in[0].dim() == 4 && in[1].dim() == 4 && in[2].dim() == 4) {
    // q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]
    return 2.0 * dims(in[0], 0) * dims(in[0], 1) * dims(in[0], 2) * dims(in[1], 2) * (dims(in[0], 3) + dims(in[2], 3));
  }
  if (op == "aten::mm" && in.size() >= 2) return 2 * dims(in[0], 0) * dims(in[0], 1) * dims(in[1], 1);
  if (op == "aten::addmm" && in.size() >= 3) return 2 * dims(in[1], 0) * dims(in[1], 1) * dims(in[2], 1);
  if (op == "aten::bmm" && in.size() >= 2) {
    return 2 * dims(in[0], 0) * dims(in[0], 1) * dims(in[0], 2) * dims(in[1], 2);
  }
  if (op == "aten::baddbmm" && in.size() >= 3) {
    return 2 * dims(in[1], 0) * dims(in[1], 1) * dims(in[1], 2) * dims(in[2], 2);
  }
  return has_out ? static_cast<double>(out[0].numel()) : 0.0;
}

}  // namespace

struct Observer::Impl {
  // Appends the op to the trace; false for ops that move no data (views), which are left out.
  bool Record(const std::string& op, bool out_variant, const std::vector<at::Tensor>& inputs,
              const std::vector<at::Tensor>& outputs, double seconds) {
    std::set<const void*> input_storages;
    for (const auto& t : inputs) {
      if (const void* key = StorageKey(t)) input_storages.insert(key);
    }
    bool all_alias = !outputs.empty();
    for (const auto& t : outputs) all_alias = all_alias && input_storages.count(StorageKey(t)) > 0;
    // Views (t, view, select, unsqueeze, ...) move no data: their outputs alias their inputs and they are
    // neither in-place (which aten spells with a trailing underscore) nor out= overloads, which write the
    // output they are given (CUDA's index_select of many rows calls aten::gather.out: dropping it as a
    // view numbered the recorded prefill's ops differently from an observed one's).
    if (all_alias && !out_variant && !absl::EndsWith(op, "_")) return false;
    if (inputs.empty() && outputs.empty()) return false;

    OpRecord r;
    r.index = static_cast<int64_t>(trace.ops.size());
    r.op = op;
    r.kernel = absl::StrCat(op, "#", launches[op]++);
    // Note [Fresh destinations]: a conversion (aten::to, contiguous) allocates its result in a
    // bookkeeping op and fills it with an in-place child (aten::copy_), whose `self` is then a tensor no
    // counted op has produced. It is this op's output, not something the iteration read: an activation
    // made here (it was "input:<k>", which the planner took for a persistent tensor and streamed).
    const void* fresh_destination = nullptr;
    if (absl::EndsWith(op, "_") && !inputs.empty() && StorageKey(inputs.front()) != nullptr &&
        !KnownId(inputs.front())) {
      fresh_destination = StorageKey(inputs.front());
      Remember(inputs.front(), absl::StrCat("act:", op, "@", r.index, ".0"));
    }
    std::set<std::string> seen;
    for (const auto& t : inputs) {
      const void* key = StorageKey(t);
      if (key == nullptr || key == fresh_destination) continue;
      std::string id = IdOf(t);
      if (seen.insert(id).second) r.reads.push_back(Use(std::move(id), t));
    }
    int k = 0;
    for (const auto& t : outputs) {
      const void* key = StorageKey(t);
      if (key == nullptr) continue;
      if (input_storages.count(key)) {
        r.writes.push_back(Use(IdOf(t), t));  // in place
      } else {
        std::string id = absl::StrCat("act:", op, "@", r.index, ".", k);
        Remember(t, id);
        r.writes.push_back(Use(std::move(id), t));
      }
      ++k;
    }
    r.flops = Flops(op, inputs, outputs);
    r.seconds = seconds;
    if (IsGather(op) && !r.reads.empty() && !outputs.empty()) {
      // Note [Gather ops]: an embedding lookup or index_select reads the rows it gathers, not its whole
      // table: the table's use is the output's size (where in the table is not known; from its start).
      TensorUse& table = r.reads.front();
      table.bytes = std::min(table.bytes, Bytes(outputs.front()));
      table.offset = 0;
      table.extent = table.bytes;
    }
    if (!subscribers.empty()) Notify(r, inputs, outputs);
    ++counted;
    trace.ops.push_back(std::move(r));
    return true;
  }

  // Hands a recorded op to the subscribers, its tensors in the order of its reads, then its writes.
  void Notify(const OpRecord& r, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
    OpEvent e{r.index, r.op, r.kernel, {}, r.flops};
    auto add = [&](const at::Tensor& t, bool write, std::string_view id) {
      e.tensors.push_back(TensorAccess{t.data_ptr(), Bytes(t), c10::toString(t.scalar_type()),
                                       std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), write, t.is_cpu(),
                                       id});
    };
    size_t read = 0;
    for (const auto& t : inputs) {
      if (StorageKey(t) != nullptr && read < r.reads.size() && IdOf(t) == r.reads[read].id)
        add(t, false, r.reads[read++].id);
    }
    size_t written = 0;
    for (const auto& t : outputs) {
      if (StorageKey(t) != nullptr && written < r.writes.size()) add(t, true, r.writes[written++].id);
    }
    for (OpSubscriber* s : subscribers) s->OnOp(e);
  }

  // The next leaf op will be numbered `counted`: tells the subscribers once, before it can launch.
  void Announce() {
    if (announced == counted) return;
    announced = counted;
    for (OpSubscriber* s : subscribers) s->BeforeOp(announced);
  }

  // An observed (not recorded) leaf op: numbered and handed to the subscribers by name.
  void Observe(const char* op) {
    const std::string name(CanonicalOp(op));
    const std::string kernel = absl::StrCat(name, "#", launches[name]++);
    OpEvent e{counted++, name, kernel, {}, 0};
    for (OpSubscriber* s : subscribers) s->OnOp(e);
  }

  // Note [Recycled addresses]: the allocator hands a freed tensor's memory to the next one, often within
  // the same iteration and inside ops that are not recorded (the scalar a reduction allocates). An
  // address therefore names a tensor only while the storage seen there is still alive and the same: each
  // entry keeps a weak reference to its storage, and a mismatch makes a new identity.
  std::string IdOf(const at::Tensor& t) {
    if (std::optional<std::string> id = KnownId(t)) return *std::move(id);
    std::string id = absl::StrCat("input:", inputs_seen++);
    Remember(t, id);
    return id;
  }

  // The tensor's identity if it has one already (named — then counted as touched by the iteration — or
  // produced or read earlier in it).
  std::optional<std::string> KnownId(const at::Tensor& t) {
    const void* key = StorageKey(t);
    {
      std::lock_guard<std::mutex> lock(names_mu);
      auto it = names.find(key);
      if (it == names.end() && binding != nullptr) {
        // A named tensor bound to a device buffer (Note [Streaming through a device buffer]).
        if (const uint64_t from = binding->BoundFrom(reinterpret_cast<uint64_t>(key))) {
          it = names.find(reinterpret_cast<const void*>(from));
        }
      }
      if (it != names.end()) {
        touched_named.insert(it->second.index);
        return it->second.id;
      }
    }
    auto it = live.find(key);
    if (it != live.end() && SameStorage(it->second.storage, t)) return it->second.id;
    return std::nullopt;
  }

  void Remember(const at::Tensor& t, const std::string& id) {
    live.insert_or_assign(StorageKey(t), Live{id, t.storage().getWeakStorageImpl()});
  }

  static bool SameStorage(const c10::weak_intrusive_ptr<c10::StorageImpl>& weak, const at::Tensor& t) {
    c10::intrusive_ptr<c10::StorageImpl> alive = weak.lock();
    return alive && alive.get() == t.storage().unsafeGetStorageImpl();
  }

  std::mutex names_mu;
  struct Name {
    std::string id;
    size_t index;  // in `named`
  };
  std::unordered_map<const void*, Name> names;  // guarded by names_mu
  const TensorBinding* binding = nullptr;       // ResolveBoundStorage's
  std::vector<TensorUse> named;                 // guarded by names_mu
  // Indices into `named` of the tensors the iteration being recorded touched (Note [Named per trace]).
  std::set<size_t> touched_named;

  struct Live {
    std::string id;
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  };
  // The recording thread's state for the iteration in progress.
  std::unordered_map<const void*, Live> live;
  std::unordered_map<std::string, int64_t> launches;
  int64_t inputs_seen = 0;
  AccessTrace trace;
  std::vector<OpSubscriber*> subscribers;  // the iteration's copy of all_subscribers
  std::atomic<int64_t> counted{0};
  int64_t announced = -1;         // the last index Announce() told the subscribers of
  at::CallbackHandle handle = 0;  // the recording thread's callback, while recording

  std::mutex subscribers_mu;
  std::vector<OpSubscriber*> all_subscribers;  // guarded by subscribers_mu
};

namespace {

thread_local Observer::Impl* t_recording = nullptr;
thread_local Observer::Impl* t_observing = nullptr;
thread_local std::vector<OpContext*> t_stack;

std::unique_ptr<at::ObserverContext> OnOpStart(const at::RecordFunction& fn) {
  if (t_recording == nullptr) return nullptr;
  auto ctx = std::make_unique<OpContext>();
  ctx->bookkeeping = IsBookkeeping(fn.name());
  ctx->inside_op = !t_stack.empty();
  // Before anything of the op launches, as in an observed iteration: a followed plan acts here.
  if (!ctx->bookkeeping) t_recording->Announce();
  CollectLast(fn.inputs(), fn.num_inputs(), &ctx->inputs);
  t_stack.push_back(ctx.get());
  ctx->start = std::chrono::steady_clock::now();
  return ctx;
}

void OnOpEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
  if (t_recording == nullptr || base == nullptr) return;
  auto* ctx = static_cast<OpContext*>(base);
  if (!t_stack.empty() && t_stack.back() == ctx) t_stack.pop_back();
  OpContext* parent = t_stack.empty() ? nullptr : t_stack.back();
  bool recorded = ctx->had_child;  // a composite op: its children were recorded
  if (!recorded && !ctx->bookkeeping) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx->start).count();
    std::vector<at::Tensor> outputs;
    CollectLast(fn.outputs(), fn.num_outputs(), &outputs);
    const auto name = fn.operator_name();
    const bool out_variant = name.has_value() && absl::StartsWith(name->overload_name, "out");
    recorded = t_recording->Record(std::string(CanonicalOp(fn.name())), out_variant, ctx->inputs, outputs, seconds);
  }
  if (recorded && parent != nullptr) parent->had_child = true;
}

// The global callback: outside an observed iteration it costs one thread-local load per op.
std::unique_ptr<at::ObserverContext> OnObservedStart(const at::RecordFunction& fn) {
  if (t_observing == nullptr) return nullptr;
  auto ctx = std::make_unique<OpContext>();
  ctx->bookkeeping = IsBookkeeping(fn.name());
  if (!ctx->bookkeeping) t_observing->Announce();
  t_stack.push_back(ctx.get());
  return ctx;
}

void OnObservedEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
  if (t_observing == nullptr || base == nullptr) return;
  auto* ctx = static_cast<OpContext*>(base);
  if (!t_stack.empty() && t_stack.back() == ctx) t_stack.pop_back();
  const bool counted = ctx->had_child || !ctx->bookkeeping;
  if (!ctx->had_child && !ctx->bookkeeping) t_observing->Observe(fn.name());
  if (counted && !t_stack.empty()) t_stack.back()->had_child = true;
}

}  // namespace

Observer::Observer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Observer::~Observer() {
  if (impl_->handle != 0) at::removeCallback(impl_->handle);
  if (t_recording == impl_.get()) t_recording = nullptr;
  if (t_observing == impl_.get()) t_observing = nullptr;
  std::lock_guard<std::mutex> lock(g_global_mu);
  if (--g_observers == 0) {
    at::removeCallback(g_global_handle);
    g_global_handle = 0;
  }
}

absl::StatusOr<std::unique_ptr<Observer>> Observer::Create() {
  auto impl = std::make_unique<Impl>();
  std::lock_guard<std::mutex> lock(g_global_mu);
  if (g_observers++ == 0) {
    g_global_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(OnObservedStart, OnObservedEnd).scopes({at::RecordScope::FUNCTION}));
  }
  return std::unique_ptr<Observer>(new Observer(std::move(impl)));
}

void Observer::AddSubscriber(OpSubscriber* subscriber) {
  std::lock_guard<std::mutex> lock(impl_->subscribers_mu);
  impl_->all_subscribers.push_back(subscriber);
}

void Observer::RemoveSubscriber(OpSubscriber* subscriber) {
  std::lock_guard<std::mutex> lock(impl_->subscribers_mu);
  auto& v = impl_->all_subscribers;
  v.erase(std::remove(v.begin(), v.end(), subscriber), v.end());
}

int64_t Observer::ops_counted() const { return impl_->counted.load(); }

void Observer::NameTensor(const void* storage_data, const std::string& name, int64_t storage_bytes) {
  std::lock_guard<std::mutex> lock(impl_->names_mu);
  std::string id = absl::StrCat("param:", name);
  impl_->names[storage_data] = {id, impl_->named.size()};
  impl_->named.push_back({std::move(id), storage_bytes});
}

void Observer::ResolveBoundStorage(const TensorBinding* binding) { impl_->binding = binding; }

void Observer::MakeExecutionRepeatable() {
  torch::jit::getProfilingMode() = false;
  torch::jit::setGraphExecutorOptimize(false);
  torch::jit::setTensorExprFuserEnabled(false);
}

void Observer::BeginIteration(IterationMode mode) {
  impl_->live.clear();
  impl_->launches.clear();
  impl_->inputs_seen = 0;
  impl_->counted = 0;
  impl_->announced = -1;
  impl_->trace = AccessTrace();
  {
    std::lock_guard<std::mutex> lock(impl_->names_mu);
    impl_->touched_named.clear();
  }
  {
    std::lock_guard<std::mutex> lock(impl_->subscribers_mu);
    impl_->subscribers = impl_->all_subscribers;
  }
  t_stack.clear();
  if (mode == IterationMode::kObserve) {
    t_observing = impl_.get();
    return;
  }
  // A callback on this thread only, with inputs and outputs, for the length of the iteration.
  impl_->handle = at::addThreadLocalCallback(at::RecordFunctionCallback(OnOpStart, OnOpEnd)
                                                 .needsInputs(true)
                                                 .needsOutputs(true)
                                                 .scopes({at::RecordScope::FUNCTION}));
  t_recording = impl_.get();
}

AccessTrace Observer::EndIteration() {
  const bool recorded = t_recording != nullptr;
  t_recording = nullptr;
  t_observing = nullptr;
  if (impl_->handle != 0) at::removeCallback(impl_->handle);
  impl_->handle = 0;
  t_stack.clear();
  // Note [Named per trace]: an observer may be given the tensors of several models (a tool's), which
  // name the same parameters ("layer0.wq"). A recorded trace lists the named tensors its iteration touched,
  // in naming order; an observed one, which resolves no tensor, lists all.
  {
    std::lock_guard<std::mutex> lock(impl_->names_mu);
    if (recorded) {
      for (size_t i : impl_->touched_named) impl_->trace.named.push_back(impl_->named[i]);
    } else {
      impl_->trace.named = impl_->named;
    }
  }
  return std::move(impl_->trace);
}

}  // namespace autouvm::runtime
