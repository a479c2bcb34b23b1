// EventTimer: GPU time between two marks on a CUDA stream (a pair of CUDA events), for the probes of
// bench/uvm_probes.h and bench/staging_probes.cc (GPU host only).
//
//   EventTimer t;  t.Start(stream);  ...work on stream...;  t.Stop(stream);  float ms = t.Ms();
#pragma once

#include <cuda_runtime.h>

namespace autouvm::bench {

class EventTimer {
 public:
  EventTimer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void Start(cudaStream_t s) { cudaEventRecord(start_, s); }
  void Stop(cudaStream_t s) { cudaEventRecord(stop_, s); }
  bool Stopped() const { return cudaEventQuery(stop_) != cudaErrorNotReady; }
  float Ms() const {  // waits for the stop mark
    cudaEventSynchronize(stop_);
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

}  // namespace autouvm::bench
