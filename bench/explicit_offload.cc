#include "bench/explicit_offload.h"

#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace autouvm::bench {
namespace {

int64_t Align(int64_t b) { return (b + 255) / 256 * 256; }

}  // namespace

int64_t LayerIndex(const std::string& parameter_name) {
  if (parameter_name.rfind("layer", 0) != 0) return -1;
  return std::stoll(parameter_name.substr(5, parameter_name.find('.') - 5));
}

LayerFit LayersThatFit(const std::vector<int64_t>& layer_bytes, int64_t rest, int64_t budget, int64_t reserve) {
  const auto n = static_cast<int64_t>(layer_bytes.size());
  LayerFit fit{.keep = 0, .resident = rest};
  while (fit.keep < n && fit.resident + layer_bytes[fit.keep] + (fit.keep + 1 < n ? reserve : 0) <= budget) {
    fit.resident += layer_bytes[fit.keep++];
  }
  return fit;
}

absl::StatusOr<std::unique_ptr<PinnedArena>> PinnedArena::Create(int64_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cudaHostAlloc of ", bytes, " bytes failed"));
  }
  return std::unique_ptr<PinnedArena>(new PinnedArena(static_cast<char*>(p), bytes));
}

PinnedArena::~PinnedArena() { cudaFreeHost(data_); }

absl::StatusOr<std::unique_ptr<ExplicitOffload>> ExplicitOffload::Create(
    torch::jit::Module& module, int64_t n_layers,
    const std::vector<std::pair<std::string, runtime::TensorRange>>& named, const runtime::AccessTrace& trace,
    int64_t budget, PinnedArena* arena, bool synchronous) {
  std::unique_ptr<ExplicitOffload> self(new ExplicitOffload(synchronous));
  std::vector<std::vector<torch::Tensor>> params(n_layers);
  std::vector<std::vector<std::string>> ids(n_layers);
  for (const auto& p : module.named_parameters()) {
    const int64_t l = LayerIndex(p.name);
    if (l < 0) continue;
    if (l >= n_layers) return absl::InvalidArgumentError(absl::StrCat(p.name, ": no such layer"));
    params[l].push_back(p.value);
    ids[l].push_back("param:" + p.name);
  }
  std::vector<int64_t> layer_bytes(n_layers, 0);
  for (int64_t l = 0; l < n_layers; ++l) {
    for (const auto& t : params[l]) layer_bytes[l] += Align(t.nbytes());
  }
  const int64_t widest = *std::max_element(layer_bytes.begin(), layer_bytes.end());
  int64_t rest = 0;
  for (const auto& [id, r] : named) rest += r.bytes;
  for (int64_t b : layer_bytes) rest -= b;
  // Keep layers resident from the first while they and two buffers fit.
  const auto [keep, resident] = LayersThatFit(layer_bytes, rest, budget, 2 * widest);
  self->accounted_ = resident + (keep < n_layers ? 2 * widest : 0);
  int64_t arena_used = 0;
  for (int64_t l = keep; l < n_layers; ++l) {
    Layer L;
    L.params = params[l];
    for (const auto& t : L.params) L.originals.push_back(t.detach());
    L.bytes = layer_bytes[l];
    if (arena_used + L.bytes > arena->bytes()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the pinned arena (", arena->bytes(), " bytes) cannot hold the offloaded layers"));
    }
    L.host = arena->data() + arena_used;
    arena_used += L.bytes;
    self->layers_.push_back(std::move(L));  // restored by the destructor from here on
    Layer& added = self->layers_.back();
    int64_t off = 0;
    for (const auto& t : added.params) {
      if (cudaMemcpy(added.host + off, t.data_ptr(), t.nbytes(), cudaMemcpyDefault) != cudaSuccess) {
        return absl::InternalError(absl::StrCat("copying layer ", l, " to pinned memory failed"));
      }
      off += Align(t.nbytes());
    }
    // Its first op in the step.
    added.first_op = -1;
    for (size_t i = 0; i < trace.ops.size() && added.first_op < 0; ++i) {
      for (const auto& u : trace.ops[i].reads) {
        if (std::find(ids[l].begin(), ids[l].end(), u.id) != ids[l].end()) added.first_op = static_cast<int64_t>(i);
      }
    }
    if (added.first_op < 0) return absl::InvalidArgumentError(absl::StrCat("the step does not read layer ", l));
    cudaEventCreateWithFlags(&added.copied, cudaEventDisableTiming);
    cudaEventCreate(&added.started);
    cudaEventCreate(&added.ended);
  }
  for (int k = 0; k < 2 && !self->layers_.empty(); ++k) {
    if (cudaMalloc(&self->slot_[k], static_cast<size_t>(widest)) != cudaSuccess) {
      return absl::ResourceExhaustedError("cudaMalloc for the two layer buffers failed");
    }
  }
  cudaStreamCreateWithFlags(&self->copy_, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&self->compute_mark_, cudaEventDisableTiming);
  // Everything not offloaded stays on the device.
  std::unordered_set<std::string> offloaded;
  for (int64_t l = keep; l < n_layers; ++l) offloaded.insert(ids[l].begin(), ids[l].end());
  self->offloaded_ids_.assign(offloaded.begin(), offloaded.end());
  for (const auto& [id, r] : named) {
    if (!offloaded.count(id)) self->resident_ranges_.push_back(r);
  }
  return self;
}

ExplicitOffload::~ExplicitOffload() {
  for (auto& L : layers_) {
    for (size_t j = 0; j < L.params.size(); ++j) L.params[j].set_(L.originals[j]);
    for (cudaEvent_t e : {L.copied, L.started, L.ended}) {
      if (e) cudaEventDestroy(e);
    }
  }
  cudaDeviceSynchronize();
  for (void* p : slot_) {
    if (p) cudaFree(p);
  }
  if (compute_mark_) cudaEventDestroy(compute_mark_);
  if (copy_) cudaStreamDestroy(copy_);
}

int64_t ExplicitOffload::offloaded_bytes() const {
  int64_t b = 0;
  for (const auto& L : layers_) b += L.bytes;
  return b;
}

// A layer's parameters point at its buffer from the moment its copy is issued until the buffer is given
// to another layer; then they point back at their own storage. Ops that take views of a weight before
// the layer's first counted op (a transpose) therefore see either the buffer that will hold it — read
// after the wait below, in stream order — or the original, never another layer's.
void ExplicitOffload::BeforeOp(int64_t index) {
  if (layers_.empty()) return;
  if (index == 0) Copy(0);
  for (size_t o = 0; o < layers_.size(); ++o) {
    if (layers_[o].first_op != index) continue;
    cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream().stream(), layers_[o].copied, 0);
    if (o + 1 < layers_.size()) Copy(o + 1);
  }
}

// Copies layer `o` into its buffer once the compute stream is past every op issued so far (the buffer's
// previous user among them).
void ExplicitOffload::Copy(size_t o) {
  if (synchronous_) cudaDeviceSynchronize();
  // The buffer's previous holder goes back to its own storage; this layer points at the buffer.
  if (holder_[o % 2] >= 0) Bind(static_cast<size_t>(holder_[o % 2]), nullptr);
  Bind(o, static_cast<char*>(slot_[o % 2]));
  holder_[o % 2] = static_cast<int64_t>(o);
  cudaEventRecord(compute_mark_, c10::cuda::getCurrentCUDAStream().stream());
  cudaStreamWaitEvent(copy_, compute_mark_, 0);
  cudaEventRecord(layers_[o].started, copy_);
  cudaMemcpyAsync(slot_[o % 2], layers_[o].host, static_cast<size_t>(layers_[o].bytes), cudaMemcpyHostToDevice, copy_);
  cudaEventRecord(layers_[o].copied, copy_);
  cudaEventRecord(layers_[o].ended, copy_);
  if (synchronous_) cudaDeviceSynchronize();
}

ExplicitOffload::CopyTimes ExplicitOffload::LastStepCopies() const {
  CopyTimes t;
  if (layers_.empty()) return t;
  float ms = 0;
  for (const Layer& L : layers_) {
    if (cudaEventElapsedTime(&ms, L.started, L.ended) == cudaSuccess) t.busy_s += ms / 1e3;
  }
  if (cudaEventElapsedTime(&ms, layers_.front().started, layers_.back().ended) == cudaSuccess) t.span_s = ms / 1e3;
  return t;
}

void ExplicitOffload::Bind(size_t o, char* base) {
  Layer& L = layers_[o];
  int64_t off = 0;
  for (size_t j = 0; j < L.params.size(); ++j) {
    torch::Tensor& t = L.params[j];
    if (base == nullptr) {
      t.set_(L.originals[j]);
    } else {
      t.set_(torch::from_blob(base + off, t.sizes(), t.options()));
    }
    off += Align(t.nbytes());
  }
}

}  // namespace autouvm::bench
