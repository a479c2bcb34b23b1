// ExplicitOffload: offload_bench's explicit-offloading baseline, as FlexGen-style systems do it: the
// first layers that fit stay resident with everything that is not a layer's weight; the other layers'
// weights live in pinned host memory (one buffer per layer) and are copied, one cudaMemcpyAsync per
// layer on a copy stream, into two device buffers in turn, the next layer's copy running while the
// current layer computes. The model's parameters point at the buffer that holds them (Tensor::set_)
// while it does, and back at their own storage afterwards. Budget: resident part + two buffers.
//
//   ASSIGN_OR_RETURN(auto offload, ExplicitOffload::Create(module, n_layers, named, trace, budget, false));
//   prefetch offload->resident_ranges() to the device; observer->AddSubscriber(offload.get()); decode ...
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

class ExplicitOffload final : public runtime::OpSubscriber {
 public:
  // `named`: every named tensor ("param:<dotted name>" for parameters) with its range; layer weights are
  // the parameters named "layer<N>.*". `synchronous`: a diagnostic, the device synchronized around
  // every copy.
  static absl::StatusOr<std::unique_ptr<ExplicitOffload>> Create(
      torch::jit::Module& module, int64_t n_layers,
      const std::vector<std::pair<std::string, runtime::TensorRange>>& named, const runtime::AccessTrace& trace,
      int64_t budget, bool synchronous);
  ~ExplicitOffload() override;

  // What stays on the device: to be prefetched there before the first step.
  const std::vector<runtime::TensorRange>& resident_ranges() const { return resident_ranges_; }
  int64_t accounted() const { return accounted_; }  // resident part + the two buffers
  int64_t offloaded_bytes() const;                  // copied per step

  void BeforeOp(int64_t index) override;
  void OnOp(const runtime::OpEvent&) override {}

 private:
  struct Layer {
    std::vector<torch::Tensor> params, originals;
    int64_t bytes = 0;
    void* host = nullptr;
    int64_t first_op = 0;
    cudaEvent_t copied{};
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
  int64_t accounted_ = 0;
};

}  // namespace autouvm::bench
