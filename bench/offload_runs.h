// OffloadRuns: offload_bench's runs for one model (bench/offload_bench.cc says what they measure): for
// each batch, the recorded step and the resident runs, then each budget and policy — prepared, run for
// --steps decode steps from the host, and reported as one row of the table (with the lines that
// --op-times, --step-times and --transfer-times add after it).
//
//   OffloadRuns runs(options, &model, cuda, observer, spec, pinned);
//   for (int64_t batch : batches) runs.Batch(batch, factors, policies);
//
// GPU host only. Not thread-safe.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autouvm/v1/profile.pb.h"
#include "bench/decode_harness.h"
#include "bench/explicit_offload.h"
#include "bench/step_times.h"
#include "bench/transfer_log.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"

namespace autouvm::bench {

struct OffloadOptions {
  std::string preset;
  int steps = 6;
  int prompt_len = 16;
  int resident_runs = 3;
  bool explicit_sync = false;
  bool op_times = false;
  bool step_times = false;
  bool transfer_times = false;
  bool keep_host_mappings = false;
  bool copy_beside_decode = false;
  std::string save_traces;  // "" : none
};

class OffloadRuns {
 public:
  // All outlive the runs; `pinned` (explicit's host copy) may be null when explicit is not run.
  OffloadRuns(OffloadOptions options, DecodeModel* m, runtime::cuda::CudaBackend* cuda, runtime::Observer* observer,
              const runtime::GpuSpec& spec, PinnedArena* pinned);

  // Everything for one batch: its rows of the table, and the pooled table after them.
  void Batch(int64_t batch, const std::vector<double>& factors, const std::vector<std::string>& policies);

 private:
  struct BatchState;
  struct Prepared;
  struct Steps;

  // Moves every named tensor to the host (and remaps what runs mapped from it, Note [Mappings outlive
  // their advice] in offload_bench.cc).
  void AllToHost();
  // The recorded step, the simulator's and the planner's room for activations.
  void Record(BatchState* b);
  // The resident runs: the reference tokens and the floor's resident step.
  void Resident(BatchState* b);
  // One budget and policy: prepared, run, reported.
  void RunPolicy(BatchState* b, double factor, const std::string& policy);
  Prepared Prepare(const BatchState& b, const std::string& policy, int64_t budget, bool log_transfers,
                   TransferLog* transfer_log);
  Steps RunSteps(const BatchState& b, Prepared& p, bool log_transfers, TransferLog* transfer_log);
  void PrintOpTimes(const BatchState& b, const std::string& policy, const Prepared& p,
                    const std::vector<double>& op_seconds);

  const OffloadOptions options_;
  DecodeModel* const m_;
  runtime::cuda::CudaBackend* const cuda_;
  runtime::DeviceBackend* const gpu_;  // the interface (its default arguments)
  runtime::Observer* const observer_;
  const runtime::GpuSpec spec_;
  PinnedArena* const pinned_;
  at::Tensor scratch_;  // --step-times: a few floats on the device for the host speed probe
  c10::cuda::CUDAStream probe_stream_;
  std::vector<runtime::TensorRange> mapped_from_host_;
};

}  // namespace autouvm::bench
