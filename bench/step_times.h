// offload_bench's step statistics (GPU host only): --step-times' probe of the host's speed before each
// step and its printouts, and the pooled table of runs of one policy against the resident runs.
//
//   HostSpeed h = ProbeHostSpeed(scratch, side_stream);  // before a step, outside its timing
//   PrintStepTimes("autouvm", times, speeds);
//   PrintByHostSpeed(batch, idle_steps, sim_s);
//   PrintOpSplit("autouvm", "last step", "host-side tensors", split, nullptr);   // --op-times
//
// Not thread-safe: prints to stdout; the probe issues device ops from the calling thread.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/explicit_offload.h"
#include "runtime/op_timer.h"

namespace autouvm::bench {

// --step-times: before each step (outside its timing), how fast the host is at that moment — a fixed
// piece of CPU work, and the host's side of dispatching small device ops through libtorch (what a step
// that moves nothing is made of), issued on a stream of their own so that the step's streams are not
// waited for. On the GPU host (a VM) such steps move between discrete levels from one run to the next;
// these say whether the host's own speed moves with them.
struct HostSpeed {
  double cpu_ms = 0;       // the fixed CPU work
  double dispatch_us = 0;  // per small device op, host side
  int cpu = -1;            // the CPU the thread ran on
};

HostSpeed ProbeHostSpeed(at::Tensor& scratch, const c10::cuda::CUDAStream& side);

// A steady step that moves nothing, with the host's speed just before it.
struct IdleStep {
  std::string who;  // resident, or the policy
  double step_s = 0;
  HostSpeed speed;
};

// Steps that move nothing depend on the host's speed alone: how closely they follow it, then each
// policy's steps against the resident ones at the same speed, with the simulator's step beside each level.
void PrintByHostSpeed(int64_t batch, const std::vector<IdleStep>& idle, double sim_s);

// Every step's time, with the wall-clock time the first began and the host's speed before each.
void PrintStepTimes(const std::string& what, const std::vector<double>& times, const std::vector<HostSpeed>& speeds);

// Each policy that ran more than once: its runs' steady steps pooled, against the resident runs'.
void PrintPooled(const std::string& preset, int64_t batch, const std::vector<std::vector<double>>& resident_runs,
                 const std::map<std::pair<double, std::string>, std::vector<std::vector<double>>>& runs_of);

// --op-times: one line saying where a timed step's (or prefill's) GPU time went — the ops reading
// `crossing` (tensors that cross the link, their waits for copies included) against the others — and,
// for explicit offloading (`offload` not null), how busy its copy engine was.
void PrintOpSplit(const std::string& policy, const std::string& step, const std::string& crossing,
                  const runtime::TimeSplit& split, const ExplicitOffload* offload);

}  // namespace autouvm::bench
