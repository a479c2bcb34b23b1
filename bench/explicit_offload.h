// ExplicitOffload: offload_bench's explicit-offloading baseline, as FlexGen-style systems do it: the
// first layers that fit stay resident with everything that is not a layer's weight; the other layers'
// weights live in pinned host memory (one buffer per layer) and are copied, one cudaMemcpyAsync per
// layer on a copy stream, into two device buffers in turn, the next layer's copy running while the
// current layer computes. The model's parameters point at the buffer that holds them (Tensor::set_)
// while it does, and back at their own storage afterwards. Budget: resident part + two buffers.
//
//   ASSIGN_OR_RETURN(auto arena, PinnedArena::Create(bytes));   // once, before any other policy runs
//   ASSIGN_OR_RETURN(auto offload, ExplicitOffload::Create(module, n_layers, named, trace, budget, arena.get(),
//   false)); prefetch offload->resident_ranges() to the device; observer->AddSubscriber(offload.get()); decode ...
//
// GPU host only. Not thread-safe: the iteration's thread drives it; its destructor restores the model.
#pragma once

#include <cuda_runtime.h>
#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/access_trace.h"
#include "runtime/executor.h"
#include "runtime/observer.h"

namespace autouvm::bench {

// Which layer a parameter belongs to: N for "layer<N>.<rest>", -1 for any other name.
int64_t LayerIndex(const std::string& parameter_name);

// Which layers stay on the device when layers are offloaded whole (explicit offloading; zero-copy):
// everything that is not a layer's weight (`rest` bytes) stays, then layers from the first while they
// fit in `budget` with `reserve` bytes kept free as long as a layer remains offloaded (explicit
// offloading's two buffers; 0 for zero-copy). `keep` layers stay, holding `resident` bytes with the rest.
struct LayerFit {
  int64_t keep = 0;
  int64_t resident = 0;
};
LayerFit LayersThatFit(const std::vector<int64_t>& layer_bytes, int64_t rest, int64_t budget, int64_t reserve);

// Pinned host memory for the offloaded layers, allocated once: a FlexGen-style system pins its host copy
// at load. (Pinned buffers allocated afresh after the other policies had run copied at 37 GB/s instead of
// 55 on the GPU host, bench/results/2026-11-29-offload-h200.md.)
class PinnedArena {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedArena>> Create(int64_t bytes);
  ~PinnedArena();
  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  PinnedArena(char* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  char* data_;
  int64_t bytes_;
};

class ExplicitOffload final : public runtime::OpSubscriber {
 public:
  // `named`: every named tensor ("param:<dotted name>" for parameters) with its range; layer weights are
  // the parameters named "layer<N>.*". `synchronous`: a diagnostic, the device synchronized around
  // every copy.
  static absl::StatusOr<std::unique_ptr<ExplicitOffload>> Create(
      torch::jit::Module& module, int64_t n_layers,
      const std::vector<std::pair<std::string, runtime::TensorRange>>& named, const runtime::AccessTrace& trace,
      int64_t budget, PinnedArena* arena, bool synchronous);
  ~ExplicitOffload() override;

  // What stays on the device: to be prefetched there before the first step.
  const std::vector<runtime::TensorRange>& resident_ranges() const { return resident_ranges_; }
  int64_t accounted() const { return accounted_; }  // resident part + the two buffers
  int64_t offloaded_bytes() const;                  // copied per step
  const std::vector<std::string>& offloaded_ids() const { return offloaded_ids_; }

  void BeforeOp(int64_t index) override;
  void OnOp(const runtime::OpEvent&) override {}

  // The copies of the last step, timed on the copy stream (call after the step has finished): the time
  // the copy engine was busy with them, and from the first copy's start to the last one's end.
  struct CopyTimes {
    double busy_s = 0, span_s = 0;
  };
  CopyTimes LastStepCopies() const;

 private:
  struct Layer {
    std::vector<torch::Tensor> params, originals;
    int64_t bytes = 0;
    char* host = nullptr;  // in the arena
    int64_t first_op = 0;
    cudaEvent_t copied{};
    cudaEvent_t started{}, ended{};  // timed
  };
  explicit ExplicitOffload(bool synchronous) : synchronous_(synchronous) {}
  void Copy(size_t o);
  void Bind(size_t o, char* base);

  const bool synchronous_;
  int64_t holder_[2] = {-1, -1};  // the layer each buffer holds
  std::vector<Layer> layers_;
  void* slot_[2] = {nullptr, nullptr};
  cudaStream_t copy_{};
  cudaEvent_t compute_mark_{};
  std::vector<runtime::TensorRange> resident_ranges_;
  std::vector<std::string> offloaded_ids_;
  int64_t accounted_ = 0;
};

}  // namespace autouvm::bench
