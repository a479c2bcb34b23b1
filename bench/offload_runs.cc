#include "bench/offload_runs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/transfer_log.h"
#include "bench/uvm_probes.h"
#include "runtime/op_timer.h"
#include "runtime/runtime_monitor.h"
#include "runtime/sim/trace_replay.h"
#include "runtime/trace_proto.h"

namespace autouvm::bench {
namespace {

using runtime::AccessTrace;
using runtime::Location;
using runtime::MigrationCause;
using runtime::Stream;
using runtime::TensorRange;
using runtime::UvmCounters;
using Clock = std::chrono::steady_clock;

// zerocopy's split: which named tensors stay in host memory — the weights of the layers, from the last,
// that do not fit in the budget once everything else is resident (the same rule as explicit offloading's,
// without its two buffers: bench/explicit_offload.h LayersThatFit).
struct ZeroCopy {
  std::vector<bool> host;  // parallel to the named tensors
  int64_t host_bytes = 0, resident_bytes = 0;
};

ZeroCopy ZeroCopySplit(const std::vector<std::pair<std::string, TensorRange>>& named, int64_t n_layers,
                       int64_t budget) {
  auto layer_of = [](const std::string& id) -> int64_t {
    return id.rfind("param:", 0) == 0 ? LayerIndex(id.substr(6)) : -1;
  };
  std::vector<int64_t> layer_bytes(n_layers, 0);
  int64_t rest = 0;
  for (const auto& [id, r] : named) {
    const int64_t l = layer_of(id);
    if (l >= 0 && l < n_layers) {
      layer_bytes[l] += r.bytes;
    } else {
      rest += r.bytes;
    }
  }
  const auto [keep, resident] = LayersThatFit(layer_bytes, rest, budget, /*reserve=*/0);
  ZeroCopy z;
  z.resident_bytes = resident;
  for (const auto& [id, r] : named) {
    const int64_t l = layer_of(id);
    z.host.push_back(l >= keep && l < n_layers);
    if (z.host.back()) z.host_bytes += r.bytes;
  }
  return z;
}

// What a policy that leaves migration to the driver moved in its last step, by cause, beside the
// simulator's last iteration of the same trace: which of the driver's mechanisms the step's time went to.
void PrintByCause(const std::string& policy, const UvmCounters& gpu, const UvmCounters& sim) {
  auto row = [](const UvmCounters& c) {
    return absl::StrFormat(
        "to the device: fault %.2f, driver prefetch %.2f, prefetch %.2f GiB; to the host: prefetch %.2f, eviction "
        "%.2f GiB, dropped %.2f GiB; %lld fault entries in %lld groups",
        c.h2d(MigrationCause::kFault) / kGiB, c.h2d(MigrationCause::kDriverPrefetch) / kGiB,
        c.h2d(MigrationCause::kUserPrefetch) / kGiB, c.d2h(MigrationCause::kUserPrefetch) / kGiB,
        c.d2h(MigrationCause::kEviction) / kGiB, c.dropped_bytes / kGiB, (long long)c.gpu_faults,
        (long long)c.gpu_fault_groups);
  };
  std::printf("  by cause (%s, last step), GPU: %s\n", policy.c_str(), row(gpu).c_str());
  std::printf("  by cause (%s, last step), sim: %s\n", policy.c_str(), row(sim).c_str());
}

bool DriverManaged(const std::string& policy) { return policy == "stock" || policy.rfind("paper", 0) == 0; }
bool Planned(const std::string& policy) { return policy == "autouvm" || policy.rfind("paper", 0) == 0; }

}  // namespace

struct OffloadRuns::BatchState {
  int64_t batch = 0;
  std::vector<int64_t> first_tokens;
  AccessTrace trace;
  int64_t activations = 0;   // the simulator's room for them: its layout's footprint past the named bytes
  int64_t planner_room = 0;  // the planner's own count
  double resident_s = 1e9;   // the best median of the resident runs
  std::vector<std::vector<int64_t>> reference;
  std::vector<std::vector<double>> resident_runs;  // steady step times of each resident run
  // --step-times: steady steps that move nothing (resident, and every policy at factor 1.0 or less)
  // with the host's speed just before each, for PrintByHostSpeed after the batch.
  std::vector<IdleStep> idle;
  double idle_sim_s = 0;  // the simulator's step at factor 1.0
  // Steady step times of each run, by factor and policy: a policy named more than once in --policies
  // runs again, and the runs are pooled after the batch.
  std::map<std::pair<double, std::string>, std::vector<std::vector<double>>> runs_of;

  void KeepIdle(const std::string& who, const std::vector<double>& steady, const std::vector<HostSpeed>& speeds) {
    for (size_t k = 0; k < steady.size() && k + 1 < speeds.size(); ++k) {
      idle.push_back({.who = who, .step_s = steady[k], .speed = speeds[k + 1]});
    }
  }
};

// A policy made ready to run: what it placed, what follows its plan, what it accounts.
struct OffloadRuns::Prepared {
  std::unique_ptr<BudgetPolicy> managed;  // stock, paper (and ablation), autouvm
  std::unique_ptr<ExplicitOffload> offload;
  ZeroCopy zerocopy;
  runtime::Plan plan;
  int64_t staged_bytes = -1;  // what the executor staged once prepared (autouvm)
  runtime::OpSubscriber* follow = nullptr;
  double prepare_s = 0;
};

// What the steps of one run gave.
struct OffloadRuns::Steps {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<double> times;
  std::vector<HostSpeed> speeds;
  std::vector<TransferSummary> transfers;  // --transfer-times: the steady steps'
  std::vector<double> op_seconds;          // --op-times: the last step's
  UvmCounters before_last;
  std::string note;
};

OffloadRuns::OffloadRuns(OffloadOptions options, DecodeModel* m, runtime::cuda::CudaBackend* cuda,
                         runtime::Observer* observer, const runtime::GpuSpec& spec, PinnedArena* pinned)
    : options_(std::move(options)),
      m_(m),
      cuda_(cuda),
      gpu_(cuda),
      observer_(observer),
      spec_(spec),
      pinned_(pinned),
      scratch_(at::zeros({256}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat))),
      probe_stream_(c10::cuda::getStreamFromPool()) {}

// Note [Mappings outlive their advice]: see offload_bench.cc.
void OffloadRuns::AllToHost() {
  Check(MoveAllToHost(gpu_, *m_), "moving everything to the host");
  if (!options_.keep_host_mappings) {
    for (const TensorRange& rg : mapped_from_host_) {
      Check(cuda_->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
      Check(cuda_->Prefetch(rg.addr, rg.bytes, Location::kHost, Stream::kCopy), "prefetch");
    }
    Check(cuda_->Synchronize(), "synchronize");
    mapped_from_host_.clear();
  }
  cudaDeviceSynchronize();
}

void OffloadRuns::Batch(int64_t batch, const std::vector<double>& factors, const std::vector<std::string>& policies) {
  BatchState b;
  b.batch = batch;
  // Prefill every slot (resident), keep the cache state, then record one decode step.
  b.first_tokens = Prefill(*m_, batch, options_.prompt_len);
  Record(&b);
  Resident(&b);
  for (const double factor : factors) {
    for (const std::string& policy : policies) RunPolicy(&b, factor, policy);
  }
  PrintPooled(options_.preset, batch, b.resident_runs, b.runs_of);
  if (options_.step_times) PrintByHostSpeed(batch, b.idle, b.idle_sim_s);
}

void OffloadRuns::Record(BatchState* b) {
  // The recorded step (warm), then the reference tokens and the resident step time.
  observer_->BeginIteration();
  DecodeStep(*m_, b->first_tokens, options_.prompt_len);
  b->trace = observer_->EndIteration();
  if (!options_.save_traces.empty()) {
    const std::string path =
        options_.save_traces + "/" + options_.preset + "-decode-b" + std::to_string(b->batch) + ".trace";
    std::ofstream out(path, std::ios::binary);
    if (!out || !runtime::ToProto(b->trace).SerializeToOstream(&out)) Die("cannot write " + path);
  }
  // The simulator's capacity for a budget: the budget plus the activations' room, which its layout of
  // the step gives (footprint beyond the named tensors).
  auto layout = runtime::sim::ReplayTrace(b->trace, spec_, {.iterations = 1});
  b->activations = layout.ok() ? std::max<int64_t>(0, layout->footprint_bytes - m_->named_bytes) : 0;
  // The room the planner sets aside for activations (its own count, not the simulator's layout).
  b->planner_room = PlannerRoom(b->trace);
}

void OffloadRuns::Resident(BatchState* b) {
  // Everything on the device (prefetched there first: the previous batch's runs left it elsewhere);
  // the host's timing noise is large at this step length, so the best median of several runs.
  AllToHost();
  for (const auto& [id, rg] : m_->named) {
    Check(cuda_->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
  }
  Check(cuda_->Synchronize(), "synchronize");
  for (int rep = 0; rep < options_.resident_runs; ++rep) {
    std::vector<double> times;
    std::vector<HostSpeed> speeds;
    b->reference.clear();
    std::vector<int64_t> tok = b->first_tokens;
    for (int s = 0; s < options_.steps; ++s) {
      if (options_.step_times) speeds.push_back(ProbeHostSpeed(scratch_, probe_stream_));
      const auto t0 = Clock::now();
      tok = DecodeStep(*m_, tok, options_.prompt_len + s);  // .to(kCPU) synchronizes
      times.push_back(Seconds(t0, Clock::now()));
      b->reference.push_back(tok);
    }
    if (options_.step_times) PrintStepTimes("resident", times, speeds);
    times.erase(times.begin());
    if (options_.step_times) b->KeepIdle("resident", times, speeds);
    b->resident_runs.push_back(times);
    b->resident_s = std::min(b->resident_s, Median(times));
  }
  if (options_.copy_beside_decode) {
    Check(ProbeCopyBesideDecode(*m_, b->first_tokens, options_.prompt_len), "copy beside decode");
  }
  std::printf("| %s | %lld | resident | - | - | - | %.2f | %.1f | %zu ops per step |\n", options_.preset.c_str(),
              (long long)b->batch, 1e3 * b->resident_s, b->batch / b->resident_s, b->trace.ops.size());
  std::fflush(stdout);
}

OffloadRuns::Prepared OffloadRuns::Prepare(const BatchState& b, const std::string& policy, int64_t budget,
                                           bool log_transfers, TransferLog* transfer_log) {
  Prepared p;
  const auto t_prepare = Clock::now();
  if (BudgetPolicy::Known(policy)) {
    // Every policy gets `budget` for the named tensors; the planner sets the activations' room aside
    // from the budget it is given, so autouvm's has that room added.
    const int64_t planned_budget = policy == "autouvm" ? budget + b.planner_room : budget;
    p.managed =
        Check(BudgetPolicy::Create(policy, log_transfers ? transfer_log : gpu_, b.trace, *m_, planned_budget, b.batch),
              policy.c_str());
    p.plan = p.managed->plan();
    for (const auto& [id, rg] : m_->named) {
      if (std::find(p.plan.remote.begin(), p.plan.remote.end(), id) != p.plan.remote.end()) {
        mapped_from_host_.push_back(rg);
      }
    }
    p.follow = p.managed->subscriber();
    if (policy == "autouvm") p.staged_bytes = p.managed->staged_bytes();
  } else if (policy == "explicit" || policy == "prefetched") {
    // prefetched: everything back on the device by plain prefetches, no plan (a diagnostic row: the
    // resident step after migration, whatever the factor).
    if (policy == "explicit") {
      p.offload = Check(ExplicitOffload::Create(m_->module, m_->config.n_layers, m_->named, b.trace, budget, pinned_,
                                                options_.explicit_sync),
                        "explicit offloading");
      p.follow = p.offload.get();
    }
    std::vector<TensorRange> everything;
    for (const auto& [id, rg] : m_->named) everything.push_back(rg);
    for (const TensorRange& rg : p.offload ? p.offload->resident_ranges() : everything) {
      Check(cuda_->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
    }
    Check(cuda_->Synchronize(), "synchronize");
  } else if (policy == "zerocopy") {
    p.zerocopy = ZeroCopySplit(m_->named, m_->config.n_layers, budget);
    for (size_t k = 0; k < m_->named.size(); ++k) {
      const TensorRange& rg = m_->named[k].second;
      if (p.zerocopy.host[k]) {
        Check(gpu_->Advise(rg.addr, rg.bytes, runtime::Advice::kPreferredLocation, true, Location::kHost), "advice");
        Check(gpu_->Advise(rg.addr, rg.bytes, runtime::Advice::kAccessedBy, true), "advice");
        mapped_from_host_.push_back(rg);
      } else {
        Check(cuda_->Prefetch(rg.addr, rg.bytes, Location::kDevice, Stream::kCopy), "prefetch");
      }
    }
    Check(cuda_->Synchronize(), "synchronize");
  }
  p.prepare_s = Seconds(t_prepare, Clock::now());
  return p;
}

OffloadRuns::Steps OffloadRuns::RunSteps(const BatchState& b, Prepared& p, bool log_transfers,
                                         TransferLog* transfer_log) {
  Steps r;
  const int steps = options_.steps;
  runtime::OpTimer timer(gpu_, /*every=*/steps - 1);  // times steps 0 and steps - 1
  std::vector<int64_t> tok = b.first_tokens;
  // The timer marks each op before the follower makes the compute stream wait for its copies: a wait
  // counts to the op it delays.
  if (options_.op_times) observer_->AddSubscriber(&timer);
  if (p.follow) observer_->AddSubscriber(p.follow);
  const bool observed = p.follow != nullptr || options_.op_times;
  for (int s = 0; s < steps; ++s) {
    if (s == steps - 1) r.before_last = Check(cuda_->ReadCounters(), "counters");
    if (options_.step_times) r.speeds.push_back(ProbeHostSpeed(scratch_, probe_stream_));
    const auto t0 = Clock::now();
    if (options_.op_times) timer.BeginIteration();
    if (log_transfers && s > 0) transfer_log->Arm();
    if (observed) observer_->BeginIteration(runtime::IterationMode::kObserve);
    tok = DecodeStep(*m_, tok, options_.prompt_len + s);
    if (observed) observer_->EndIteration();
    if (options_.op_times) {
      auto t = Check(timer.EndIteration(), "op times");
      if (s == steps - 1) r.op_seconds = std::move(t);
    }
    if (p.managed) {
      if (absl::Status why = p.managed->EndIteration(); !why.ok()) r.note = std::string(why.message());
    }
    r.times.push_back(Seconds(t0, Clock::now()) + (s == 0 ? p.prepare_s : 0.0));
    if (log_transfers && s > 0) r.transfers.push_back(Check(transfer_log->Summarize(), "transfer times"));
    r.tokens.push_back(tok);
  }
  if (p.follow) observer_->RemoveSubscriber(p.follow);
  if (options_.op_times) observer_->RemoveSubscriber(&timer);
  cudaDeviceSynchronize();
  return r;
}

void OffloadRuns::RunPolicy(BatchState* b, double factor, const std::string& policy) {
  const auto budget = static_cast<int64_t>(static_cast<double>(m_->named_bytes) / factor);
  const double floor_s = std::max(b->resident_s, static_cast<double>(m_->named_bytes - budget) / kLinkBytesPerSecond);
  AllToHost();
  const bool log_transfers = options_.transfer_times && DriverManaged(policy);  // eviction emulated
  TransferLog transfer_log(gpu_);  // before the policy that calls through it (destroyed after it)
  Prepared p = Prepare(*b, policy, budget, log_transfers, &transfer_log);
  Steps s = RunSteps(*b, p, log_transfers, &transfer_log);

  const UvmCounters moved = Check(cuda_->ReadCounters(), "counters") - s.before_last;  // the last step's
  const double cold_s = s.times.front();
  std::vector<double> steady(s.times.begin() + 1, s.times.end());
  const double steady_s = Median(steady);
  if (options_.step_times && factor <= 1.0) b->KeepIdle(policy, steady, s.speeds);
  b->runs_of[{factor, policy}].push_back(std::move(steady));
  const bool tokens_match = s.tokens == b->reference;
  const int64_t accounted_peak = p.managed   ? p.managed->peak_resident_bytes()
                                 : p.offload ? p.offload->accounted()
                                             : p.zerocopy.resident_bytes;
  // The simulator on the same trace, capacity = the budget plus the activations' room.
  const bool planned = Planned(policy);
  UvmCounters sim_moved;
  TransferSummary sim_transfers;
  const double sim_s =
      planned || policy == "stock"
          ? SimulatedSeconds(b->trace, spec_, policy, planned ? &p.plan : nullptr, budget, b->activations, factor,
                             &sim_moved, log_transfers ? &sim_transfers : nullptr)
          : 0;
  if (factor <= 1.0 && sim_s > 0) b->idle_sim_s = sim_s;
  const double other =
      static_cast<double>(moved.h2d(MigrationCause::kFault) + moved.h2d(MigrationCause::kDriverPrefetch));
  const std::string plan_cell =
      planned                ? PlanCell(p.plan, p.staged_bytes)
      : policy == "explicit" ? absl::StrFormat("copied per step: %.2f", p.offload->offloaded_bytes() / kGiB)
      : policy == "zerocopy" ? absl::StrFormat("in host memory: %.2f", p.zerocopy.host_bytes / kGiB)
                             : "-";
  std::printf(
      "| %s | %lld | %.2f | %s | %.2f | %.1f (%.1f) | %.2f | %.1f | %.2f | %.0f%% | %.2f | %.2f | %s | %.2f | "
      "%.2f | %.2f | %.2f | %lld | %s |%s\n",
      options_.preset.c_str(), (long long)b->batch, factor, policy.c_str(), budget / kGiB, 1e3 * cold_s,
      1e3 * p.prepare_s, 1e3 * steady_s, b->batch / steady_s, 1e3 * floor_s, 100 * floor_s / steady_s, 1e3 * sim_s,
      sim_s / steady_s, tokens_match ? "yes" : "NO", accounted_peak / kGiB, moved.h2d_total() / kGiB, other / kGiB,
      moved.d2h_total() / kGiB, (long long)moved.gpu_fault_groups, plan_cell.c_str(),
      s.note.empty() ? "" : (" " + s.note).c_str());
  if (DriverManaged(policy)) PrintByCause(policy, moved, sim_moved);
  if (log_transfers && !s.transfers.empty()) {
    std::printf("%s%s", FormatTransfers(policy + ", GPU, last step", s.transfers.back()).c_str(),
                FormatTransfers(policy + ", simulator, last iteration", sim_transfers, /*host_times=*/false).c_str());
    std::printf("%s\n", FormatStepsAtTheirRate(policy, s.times, s.transfers, [&](double rate) {
                          return SimulatedSeconds(b->trace, runtime::WithDeviceToHostRate(spec_, rate), policy,
                                                  planned ? &p.plan : nullptr, budget, b->activations, factor);
                        }).c_str());
  }
  if (options_.step_times) PrintStepTimes(policy, s.times, s.speeds);
  if (!s.op_seconds.empty()) PrintOpTimes(*b, policy, p, s.op_seconds);
  std::fflush(stdout);
}

// What the GPU spent its last step on; "remote" = tensors that stayed in (or came from) host memory.
void OffloadRuns::PrintOpTimes(const BatchState& b, const std::string& policy, const Prepared& p,
                               const std::vector<double>& op_seconds) {
  std::vector<std::string> remote_ids;
  if (Planned(policy)) {
    remote_ids.assign(p.plan.remote.begin(), p.plan.remote.end());
  } else if (policy == "explicit") {
    remote_ids = p.offload->offloaded_ids();
  } else if (policy == "zerocopy") {
    for (size_t k = 0; k < m_->named.size(); ++k) {
      if (p.zerocopy.host[k]) remote_ids.push_back(m_->named[k].first);
    }
  }
  const auto split = runtime::SplitTime(b.trace, op_seconds, remote_ids);
  if (policy == "autouvm") {
    // The runtime monitor on this step: ops whose measured time puts them in another class than the
    // plan's (none, in a run where nothing else touches the device).
    runtime::RuntimeMonitor monitor(b.trace, p.managed->profile(), p.plan, spec_, {});
    const auto changed = monitor.Observe(op_seconds);
    std::printf("  runtime monitor (autouvm, last step): %zu of %zu ops changed class", changed.size(),
                op_seconds.size());
    for (size_t k = 0; k < changed.size() && k < 3; ++k) {
      std::printf("%s op %lld (%s) %.1f us, planned %.1f us", k == 0 ? ":" : ",", (long long)changed[k].op,
                  b.trace.ops[static_cast<size_t>(changed[k].op)].kernel.c_str(), 1e6 * changed[k].measured_seconds,
                  1e6 * changed[k].expected_seconds);
    }
    std::printf("\n");
  }
  PrintOpSplit(policy, "last step", "host-side tensors", split, p.offload.get());
}

}  // namespace autouvm::bench
