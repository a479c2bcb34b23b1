#include "runtime/sim/trace_replay.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/driver_eviction.h"
#include "runtime/executor.h"
#include "runtime/sim/sim_backend.h"

namespace autouvm::runtime::sim {
namespace {

constexpr int64_t kSegmentBytes = 2 << 20;
constexpr int64_t kSmallLimit = 1 << 20;
constexpr int64_t kSmallRound = 512;

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Note [Replay layout]: the caching allocator's placement, reduced to what decides which 2 MiB blocks a
// tensor shares: small blocks packed into 2 MiB segments, large ones in their own; freed blocks reused
// by the next request of the same rounded size.
class Layout {
 public:
  using SegmentFn = std::function<absl::StatusOr<uint64_t>(int64_t)>;
  explicit Layout(SegmentFn segment) : segment_(std::move(segment)) {}

  absl::StatusOr<uint64_t> Allocate(int64_t bytes) {
    const int64_t size = Rounded(bytes);
    auto free_it = free_.find(size);
    if (free_it != free_.end() && !free_it->second.empty()) {
      const uint64_t addr = free_it->second.back();
      free_it->second.pop_back();
      return addr;
    }
    if (size >= kSmallLimit) return NewSegment(size);
    if (small_left_ < size) {
      ASSIGN_OR_RETURN(small_next_, NewSegment(kSegmentBytes));
      small_left_ = kSegmentBytes;
    }
    const uint64_t addr = small_next_;
    small_next_ += static_cast<uint64_t>(size);
    small_left_ -= size;
    return addr;
  }
  void Free(uint64_t addr, int64_t bytes) { free_[Rounded(bytes)].push_back(addr); }
  int64_t segment_bytes() const { return segment_bytes_; }

 private:
  static int64_t Rounded(int64_t bytes) {
    return bytes < kSmallLimit ? RoundUp(std::max<int64_t>(bytes, 1), kSmallRound) : RoundUp(bytes, kSegmentBytes);
  }
  absl::StatusOr<uint64_t> NewSegment(int64_t bytes) {
    segment_bytes_ += bytes;
    return segment_(bytes);
  }

  SegmentFn segment_;
  std::map<int64_t, std::vector<uint64_t>> free_;
  uint64_t small_next_ = 0;
  int64_t small_left_ = 0;
  int64_t segment_bytes_ = 0;
};

// Where each tensor of the trace lives and when.
struct Lifetimes {
  std::vector<std::pair<std::string, int64_t>> persistent;  // allocated up front, in order
  std::unordered_map<std::string, int64_t> bytes;           // storage bytes each tensor needs
  std::vector<std::vector<std::string>> born;               // activations allocated at op i
  std::vector<std::vector<std::string>> dead;               // activations freed after op i
};

Lifetimes MakeLifetimes(const AccessTrace& trace) {
  Lifetimes lives;
  std::set<std::string> placed;
  for (const TensorUse& n : trace.named) {
    if (placed.insert(n.id).second) lives.persistent.push_back({n.id, n.bytes});
    lives.bytes[n.id] = std::max(lives.bytes[n.id], n.bytes);
  }
  std::unordered_map<std::string, size_t> first, last;
  std::vector<std::string> order;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    for (const auto* uses : {&trace.ops[i].reads, &trace.ops[i].writes}) {
      for (const TensorUse& u : *uses) {
        if (!first.count(u.id)) {
          first[u.id] = i;
          order.push_back(u.id);
        }
        last[u.id] = i;
        lives.bytes[u.id] = std::max(lives.bytes[u.id], u.end());
      }
    }
  }
  lives.born.resize(trace.ops.size());
  lives.dead.resize(trace.ops.size());
  for (const std::string& id : order) {
    if (absl::StartsWith(id, "act:")) {
      lives.born[first[id]].push_back(id);
      lives.dead[last[id]].push_back(id);
    } else if (placed.insert(id).second) {  // a weight never named, or an input of the iteration
      lives.persistent.push_back({id, lives.bytes[id]});
    }
  }
  for (auto& [id, size] : lives.persistent) size = std::max(size, lives.bytes[id]);
  return lives;
}

// Note [Fault entries per kernel]: how many fault-buffer entries a kernel raises per 64 KiB page it
// faults on depends on how its threads walk the data, so it is measured per kind of ATen kernel
// (bench/fault_probe on the H200), each rate solved for n with the driver costs of Note [H200
// calibration] (per page: 4.836 + 0.358 n µs once n >= 8):
// - a matrix product reading a transposed operand (x @ W.t(), every linear layer of the model
//   contract) walks it row by row. The Llama-2 7B and 13B linears — rows of 8, 10, 21.5 and 27 KiB
//   (K = 4096, 5120, 11008, 13824) — fault in at 5.4-6.2 GB/s, n = 16.0-19.9, mean 17.6, whatever the
//   row's length: about one entry for each 4 KiB of the page (16), the unit the GPU's MMU reports a
//   fault in, and a few for the warps that reach a 4 KiB page while its fault is pending
//   (bench/results/2026-11-30-stock-faults-h200.md). The first model of this note, 2.4 entries per row
//   in the page, came from two shapes (K = 4096 and 8192) and gave the 13B's rows 15.4 and 5.7 entries:
//   its linears faulted in at 8.4-9.3 GB/s in the simulator against 5.4-6.2 on the GPU, and its stock
//   decode steps replayed at 0.74-0.86 of the GPU's. The one shape off the rule is the square K = 8192
//   product (16 KiB rows): 7.3-8.3 GB/s in three runs, n = 9-12; no Llama-2 7B or 13B op has it.
// - other matrix operands (W @ x): 7.05 GB/s, n = 12.5;
// - elementwise and other kernels (W * 2): 5.0 GB/s, n = 23.
constexpr double kRowByRowEntries = 17.6;
constexpr double kMatrixEntries = 12.5;
constexpr double kElementwiseEntries = 23;

bool IsMatrixOp(const std::string& op) {
  static const std::set<std::string> kOps = {"aten::mm",      "aten::addmm",  "aten::bmm",
                                             "aten::baddbmm", "aten::matmul", "aten::linear"};
  return kOps.count(op) > 0;
}

double EntriesPerPage(const std::string& op, const TensorUse& u) {
  constexpr double kPage = 64 * 1024;
  if (!IsMatrixOp(op)) return kElementwiseEntries;
  if (u.run > 0 && u.run < kPage) return kRowByRowEntries;
  return kMatrixEntries;
}

}  // namespace

SimKernel TraceKernel(const OpRecord& op, const std::unordered_map<std::string, uint64_t>& where) {
  SimKernel k{.name = op.kernel, .flops = op.flops, .matrix = IsMatrixOp(op.op)};
  for (const bool write : {false, true}) {
    for (const TensorUse& u : write ? op.writes : op.reads) {
      auto it = where.find(u.id);
      if (it == where.end()) continue;
      k.ranges.push_back({it->second + static_cast<uint64_t>(u.offset), u.span(), write, EntriesPerPage(op.op, u)});
    }
  }
  return k;
}

namespace {

// Runs `iterations` of the trace on `backend` (nullptr: only lays the tensors out) and returns the
// layout's segment bytes.
absl::StatusOr<int64_t> Run(const AccessTrace& trace, const Lifetimes& lives, SimBackend* backend, int iterations,
                            std::vector<IterationReport>* reports, std::vector<double>* op_seconds = nullptr,
                            const Plan* follow = nullptr, int64_t emulated_eviction_budget = 0,
                            const ReplayOptions* hooks = nullptr) {
  uint64_t fake_next = 0;
  Layout layout([&](int64_t bytes) -> absl::StatusOr<uint64_t> {
    if (backend != nullptr) return backend->AllocateManaged(bytes);
    fake_next += static_cast<uint64_t>(bytes);
    return fake_next - static_cast<uint64_t>(bytes);
  });
  std::unordered_map<std::string, uint64_t> where;
  for (const auto& [id, bytes] : lives.persistent) {
    ASSIGN_OR_RETURN(where[id], layout.Allocate(bytes));
  }
  // Note [Coded sizes in the trace]: the weights the trace knows the coded sizes of cross as those.
  if (backend != nullptr) {
    for (const auto& [id, coded] : trace.coded_bytes) {
      if (auto it = where.find(id); it != where.end()) backend->SetCodedBytes(it->second, coded);
    }
  }
  std::unique_ptr<Executor> executor;
  std::unique_ptr<DriverEviction> eviction;
  if (backend != nullptr) {
    DeviceBackend* policy_backend = hooks != nullptr && hooks->through ? hooks->through(backend) : backend;
    std::unordered_map<std::string, TensorRange> ranges;
    for (const auto& [id, bytes] : lives.persistent) ranges[id] = {where.at(id), bytes};
    // The named tensors, as the GPU benchmark's emulator manages them; they are laid out first, in
    // the trace's order.
    if (emulated_eviction_budget > 0) {
      eviction = std::make_unique<DriverEviction>(policy_backend, trace, ranges, emulated_eviction_budget);
    }
    if (follow != nullptr) {
      executor = std::make_unique<Executor>(policy_backend, *follow, trace, std::move(ranges));
      if (eviction != nullptr && follow->driver_evicts) executor->set_driver_eviction(eviction.get());
    }
  }
  for (int it = 0; it < iterations; ++it) {
    const double start = backend != nullptr ? backend->Elapsed() : 0;
    const UvmCounters before = backend != nullptr ? *backend->ReadCounters() : UvmCounters();
    IterationReport report;
    if (hooks != nullptr && hooks->before_iteration) hooks->before_iteration(it);
    // The first iteration pays for bringing the pinned tensors in (a cold start).
    if (executor && it == 0) RETURN_IF_ERROR(executor->Prepare());
    for (size_t i = 0; i < trace.ops.size(); ++i) {
      for (const std::string& id : lives.born[i]) {
        ASSIGN_OR_RETURN(where[id], layout.Allocate(lives.bytes.at(id)));
      }
      if (backend != nullptr) {
        const OpRecord& op = trace.ops[i];
        const SimKernel k = TraceKernel(op, where);
        if (executor) RETURN_IF_ERROR(executor->BeforeOp(static_cast<int64_t>(i)));
        // Without an executor that drives it, the emulated driver makes room for the op's faults.
        if (eviction && !(executor && follow->driver_evicts)) {
          RETURN_IF_ERROR(eviction->BeforeOp(static_cast<int64_t>(i)));
        }
        const KernelTime t = backend->Launch(k, Stream::kCompute, backend->spec().framework_op_s);
        if (executor) RETURN_IF_ERROR(executor->AfterOp(static_cast<int64_t>(i)));
        report.fault_seconds += t.fault_s;
        if (op_seconds != nullptr && it == iterations - 1) op_seconds->push_back(t.end_s - t.start_s);
      }
      for (const std::string& id : lives.dead[i]) layout.Free(where.at(id), lives.bytes.at(id));
    }
    if (backend != nullptr) {
      RETURN_IF_ERROR(backend->Synchronize());
      report.seconds = backend->Elapsed() - start;
      report.moved = *backend->ReadCounters() - before;
      reports->push_back(report);
      if (hooks != nullptr && hooks->after_iteration) hooks->after_iteration(it);
    }
  }
  return layout.segment_bytes();
}

}  // namespace

const std::vector<std::string>& ReplayPolicies() {
  static const std::vector<std::string>* const kPolicies = new std::vector<std::string>{"stock", "paper", "autouvm"};
  return *kPolicies;
}

absl::StatusOr<ReplayReport> ReplayTrace(const AccessTrace& trace, const GpuSpec& spec, const ReplayOptions& options) {
  if (trace.ops.empty()) return absl::InvalidArgumentError("the trace has no ops");
  const auto& policies = ReplayPolicies();
  if (std::find(policies.begin(), policies.end(), options.policy) == policies.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown policy \"", options.policy, "\" (known: ", absl::StrJoin(policies, ", "), ")"));
  }
  if (options.policy != "stock" && !options.make_plan) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy ", options.policy, " needs a plan (ReplayOptions::make_plan)"));
  }
  if (options.iterations < 1 || options.iterations > 1000) {
    return absl::InvalidArgumentError("iterations must be between 1 and 1000");
  }
  if (options.device_bytes <= 0 && !(options.oversubscription > 0 && options.oversubscription <= 1000)) {
    return absl::InvalidArgumentError("oversubscription must be a factor in (0, 1000]");
  }
  const Lifetimes lives = MakeLifetimes(trace);
  ReplayReport report;
  report.ops = static_cast<int64_t>(trace.ops.size());
  ASSIGN_OR_RETURN(report.footprint_bytes, Run(trace, lives, nullptr, 1, nullptr));
  report.device_bytes =
      options.device_bytes > 0
          ? options.device_bytes
          : static_cast<int64_t>(static_cast<double>(report.footprint_bytes) / options.oversubscription);

  // Everything resident: the second iteration on a device twice the footprint.
  {
    ASSIGN_OR_RETURN(auto roomy, SimBackend::Create({.spec = spec, .device_budget_bytes = 2 * report.footprint_bytes}));
    std::vector<IterationReport> warm;
    RETURN_IF_ERROR(Run(trace, lives, roomy.get(), 2, &warm).status());
    report.resident_seconds = warm.back().seconds;
  }
  const double streamed = static_cast<double>(std::max<int64_t>(0, report.footprint_bytes - report.device_bytes));
  report.link_floor_seconds = std::max(report.resident_seconds, streamed / spec.link_bytes_per_s);

  // `autouvm` evicts by itself: the emulated driver is for the policies that leave it to the driver.
  const int64_t emulated_budget = options.policy == "autouvm" ? 0 : options.emulated_eviction_budget;
  const bool emulated = emulated_budget > 0;
  ASSIGN_OR_RETURN(
      auto sim, SimBackend::Create({.spec = spec,
                                    .device_budget_bytes = emulated ? 2 * report.footprint_bytes : report.device_bytes,
                                    .allow_oversubscription = true,
                                    .coded_ratio = options.coded_ratio}));
  Plan follow;
  if (options.policy != "stock") follow = options.make_plan(report.device_bytes);
  RETURN_IF_ERROR(Run(trace, lives, sim.get(), options.iterations, &report.iterations, &report.op_seconds,
                      options.policy != "stock" ? &follow : nullptr, emulated_budget, &options)
                      .status());
  return report;
}

}  // namespace autouvm::runtime::sim
