#include "runtime/sim/sim_backend.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace autouvm::runtime::sim {
namespace {

constexpr int64_t kBlockBytes = 2 << 20;
constexpr int64_t kPageBytes = 64 << 10;
constexpr uint64_t kFirstAddress = uint64_t{1} << 40;  // far from anything real, never dereferenced

uint64_t BlockOf(uint64_t addr) { return addr / kBlockBytes * kBlockBytes; }
// The address space `bytes` take: whole blocks.
uint64_t BlocksFor(int64_t bytes) {
  return (static_cast<uint64_t>(bytes) + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SimBackend>> SimBackend::Create(SimOptions options) {
  const GpuSpec& s = options.spec;
  if (s.memory_bytes <= 0 || s.hbm_bytes_per_s <= 0 || s.peak_flops <= 0 || s.link_bytes_per_s <= 0 ||
      s.uvm.remote_bytes_per_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("GPU spec \"", s.name, "\" lacks a memory size or a bandwidth"));
  }
  if (options.device_budget_bytes < 0) return absl::InvalidArgumentError("device budget must not be negative");
  if (options.coded_ratio < 0 || options.coded_ratio > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a coded ratio of ", options.coded_ratio, " (0: plain; else (0, 1])"));
  }
  if (options.coded_ratio > 0 && s.decode_bytes_per_s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU spec \"", s.name, "\" has no decoder rate (decode_gb_per_s) to decode coded copies at"));
  }
  return std::unique_ptr<SimBackend>(new SimBackend(std::move(options)));
}

SimBackend::SimBackend(SimOptions options)
    : options_(std::move(options)),
      budget_(options_.device_budget_bytes > 0 ? options_.device_budget_bytes : options_.spec.memory_bytes),
      model_(UvmModelConfig{.device_capacity_bytes = budget_}),
      next_addr_(kFirstAddress) {}

absl::StatusOr<uint64_t> SimBackend::AllocateManaged(int64_t bytes) {
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  if (!options_.allow_oversubscription && allocated_ + bytes > budget_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "managed allocation of ", bytes, " bytes would bring the total to ", allocated_ + bytes,
        ", past the simulated device's ", budget_, " bytes; set memory.allow_oversubscription to allow it"));
  }
  const uint64_t base = next_addr_;
  next_addr_ += BlocksFor(bytes);
  model_.Allocate(base, bytes);
  allocations_[base] = bytes;
  allocated_ += bytes;
  return base;
}

absl::Status SimBackend::FreeManaged(uint64_t addr) {
  auto it = allocations_.find(addr);
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("0x", absl::Hex(addr), " is not a managed allocation"));
  }
  model_.Free(addr);
  for (uint64_t b = addr; b < addr + static_cast<uint64_t>(it->second); b += kBlockBytes) {
    ready_at_.erase(b);
    advice_.erase(b);
  }
  for (auto* copies : {&staged_, &kept_, &reusable_}) {
    copies->erase(copies->lower_bound(addr), copies->lower_bound(addr + static_cast<uint64_t>(it->second)));
  }
  allocated_ -= it->second;
  allocations_.erase(it);
  return absl::OkStatus();
}

template <typename Change>
double SimBackend::Charge(Change change, bool prefetch_to_device) {
  const UvmCounters before = model_.counters();
  const UvmWork work_before = model_.work();
  change();
  const UvmCosts& c = options_.spec.uvm;
  const double link = options_.spec.link_bytes_per_s;
  const UvmCounters d = model_.counters() - before;
  const UvmWork& w = model_.work();
  const double page_copy = kPageBytes / link;
  const double faulted = static_cast<double>(w.faulted_pages - work_before.faulted_pages);
  const double blocks = static_cast<double>(w.serviced_blocks - work_before.serviced_blocks);
  const double d2h_pages = static_cast<double>(w.d2h_pages - work_before.d2h_pages);
  const double d2h_clean = static_cast<double>(w.d2h_clean_pages - work_before.d2h_clean_pages);
  const double dropped = static_cast<double>(w.dropped_pages - work_before.dropped_pages);
  double t = d.gpu_fault_groups * c.fault_batch_s + d.gpu_faults * c.fault_entry_s +
             faulted * (c.fault_page_s + page_copy) + blocks * c.fault_block_s +
             d2h_pages * (c.d2h_page_s + page_copy) + d2h_clean * (c.d2h_clean_page_s + page_copy) +
             dropped * c.drop_block_s * kPageBytes / kBlockBytes;
  if (prefetch_to_device) {
    t += (w.prefetch_blocks - work_before.prefetch_blocks) * c.prefetch_block_s +
         d.h2d(MigrationCause::kUserPrefetch) / link;
  }
  return t;
}

KernelTime SimBackend::Launch(const SimKernel& kernel, Stream stream, double host_s) {
  KernelTime t;
  double& clock = clock_[Index(stream)];
  if (host_s > 0) {
    host_clock_ += host_s;
    clock = std::max(clock, host_clock_);
  }
  t.start_s = clock;
  double ready = clock;
  double bytes = 0;
  for (const GpuRange& r : kernel.ranges) {
    bytes += static_cast<double>(r.bytes);
    if (ready_at_.empty() || r.bytes <= 0) continue;
    for (uint64_t b = BlockOf(r.addr); b < r.addr + static_cast<uint64_t>(r.bytes); b += kBlockBytes) {
      auto it = ready_at_.find(b);
      if (it != ready_at_.end()) ready = std::max(ready, it->second);
    }
  }
  t.wait_s = ready - clock;
  const int64_t remote_before = model_.counters().remote_bytes;
  t.fault_s = Charge([&] { model_.Kernel(kernel.ranges); }, /*prefetch_to_device=*/false);
  const GpuSpec& s = options_.spec;
  const double remote = static_cast<double>(model_.counters().remote_bytes - remote_before);
  const double local = std::max(0.0, bytes - remote);
  const double remote_rate =
      kernel.matrix && s.uvm.remote_matrix_bytes_per_s > 0 ? s.uvm.remote_matrix_bytes_per_s : s.uvm.remote_bytes_per_s;
  t.compute_s = std::max(kernel.flops / s.peak_flops, local / s.hbm_bytes_per_s + remote / remote_rate);
  t.end_s = ready + t.fault_s + s.kernel_launch_s + t.compute_s;
  clock = t.end_s;
  return t;
}

void SimBackend::Copy(int64_t bytes, Stream stream) {
  clock_[Index(stream)] += static_cast<double>(bytes) / options_.spec.link_bytes_per_s;
}

absl::Status SimBackend::WithinOneAllocation(std::string_view what, uint64_t addr, int64_t bytes) const {
  if (!WithinOne(allocations_, addr, bytes)) {
    auto it = allocations_.upper_bound(addr);
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " of ", bytes, " bytes at ", addr, ": not within one managed allocation",
                     it == allocations_.begin() ? std::string(" (none starts before it)")
                                                : absl::StrCat(" (the one before it holds ", std::prev(it)->second,
                                                               " bytes from ", std::prev(it)->first, ")")));
  }
  return absl::OkStatus();
}

absl::Status SimBackend::Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) {
  if (bytes < 0) return absl::InvalidArgumentError("prefetch of a negative size");
  // As CUDA (cudaErrorInvalidValue): one prefetch stays within one managed allocation.
  if (bytes > 0) RETURN_IF_ERROR(WithinOneAllocation("prefetch", addr, bytes));
  // Note [Prefetches hold the host]: a prefetch starts once the host has issued it and its stream is
  // free. One issued to a stream with nothing pending is done in the call: to the device it holds the
  // calling thread for most of its transfer (UvmCosts::prefetch_host_hold), to the host for all of it,
  // so the host issues nothing else — no kernel, no other prefetch — meanwhile. One queued behind work
  // on its stream (or a wait for another stream) returns at once, its migration left to the driver for
  // when the stream gets to it, and costs the host what a resident range's checks do. On the H200
  // (offload_bench's queued probe, 1 GiB): idle, 11-16 ms of a 22 ms prefetch to the device and all of
  // 63-107 ms back; queued behind matrix products, 0.02-0.5 ms either way. paper's prefetches, each
  // behind a wait for the compute stream's evictions, held the host 10 µs per call (295 calls of 44 MiB
  // in a 7B step) and ran beside those evictions; holding the host through them had the simulator run
  // the two directions one after the other, 1.2-1.4x paper's steps
  // (bench/results/2026-11-30-paper-transfers-h200.md). One that finds its range already there costs
  // only its checks (prefetch_resident_*).
  const UvmCosts& c = options_.spec.uvm;
  double& clock = clock_[Index(stream)];
  const bool queued = clock > host_clock_;
  const double start = std::max(clock, host_clock_);
  const UvmWork before = model_.work();
  const double work = Charge([&] { model_.Prefetch(addr, bytes, to); }, to == Location::kDevice);
  const UvmWork& after = model_.work();
  const bool moved = after.prefetch_blocks != before.prefetch_blocks || after.d2h_pages != before.d2h_pages ||
                     after.d2h_clean_pages != before.d2h_clean_pages || after.dropped_pages != before.dropped_pages;
  const double blocks =
      bytes > 0
          ? static_cast<double>((BlockOf(addr + static_cast<uint64_t>(bytes) - 1) - BlockOf(addr)) / kBlockBytes + 1)
          : 0.0;
  const double checks_on_host = c.prefetch_resident_call_s + blocks * c.prefetch_resident_host_block_s;
  if (moved) {
    clock = start + c.prefetch_call_s + work;
    if (to == Location::kDevice) {
      host_clock_ =
          queued ? host_clock_ + checks_on_host : std::max(host_clock_, start + c.prefetch_host_hold * (clock - start));
    } else if (!queued) {
      host_clock_ = std::max(host_clock_, clock);
    }
  } else {
    clock = start + c.prefetch_resident_call_s + blocks * c.prefetch_resident_block_s;
    host_clock_ = queued ? host_clock_ + checks_on_host : std::max(host_clock_, start + checks_on_host);
  }
  if (to == Location::kDevice) {
    for (uint64_t b = BlockOf(addr); b < addr + static_cast<uint64_t>(bytes); b += kBlockBytes) ready_at_[b] = clock;
  }
  return absl::OkStatus();
}

void SimBackend::UpdateRemote(uint64_t addr, int64_t bytes) {
  for (uint64_t b = BlockOf(addr); b < addr + static_cast<uint64_t>(bytes); b += kBlockBytes) {
    const BlockAdvice& a = advice_[b];
    const uint64_t lo = std::max(b, addr);
    const uint64_t hi = std::min(b + kBlockBytes, addr + static_cast<uint64_t>(bytes));
    model_.SetRemote(lo, static_cast<int64_t>(hi - lo), a.preferred_host && a.accessed_by);
  }
}

absl::Status SimBackend::Advise(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) {
  if (bytes < 0) return absl::InvalidArgumentError("advice on a negative size");
  double& clock = clock_[Index(Stream::kCompute)];  // cudaMemAdvise is synchronous
  clock += Charge([&] { ApplyAdvice(addr, bytes, advice, set, location); }, false);
  return absl::OkStatus();
}

void SimBackend::ApplyAdvice(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) {
  switch (advice) {
    case Advice::kReadMostly: {
      auto it = advice_.find(BlockOf(addr));
      const bool host = it != advice_.end() && it->second.preferred_host;
      model_.SetReadMostly(addr, bytes, set, host ? Location::kHost : Location::kDevice);
      break;
    }
    case Advice::kPreferredLocation:
    case Advice::kAccessedBy:
      for (uint64_t b = BlockOf(addr); b < addr + static_cast<uint64_t>(bytes); b += kBlockBytes) {
        BlockAdvice& a = advice_[b];
        if (advice == Advice::kAccessedBy) {
          a.accessed_by = set;
        } else {
          a.preferred_host = set && location == Location::kHost;
        }
      }
      UpdateRemote(addr, bytes);
      break;
  }
}

absl::Status SimBackend::Discard(uint64_t addr, int64_t bytes, Stream stream) {
  if (bytes < 0) return absl::InvalidArgumentError("discard of a negative size");
  const UvmCosts& c = options_.spec.uvm;
  const int64_t dropped = model_.work().dropped_pages;
  double t = Charge([&] { model_.DropDeviceCopies(addr, bytes, /*discard=*/true); }, false);
  double& clock = clock_[Index(stream)];
  const double start = clock;
  if (c.discard_block_s > 0) {
    t = static_cast<double>(model_.work().dropped_pages - dropped) * kPageBytes / kBlockBytes * c.discard_block_s;
    // The driver does one thing at a time: a copy in flight on the other stream loses the discard's time.
    double& other = clock_[1 - Index(stream)];
    if (other > start) other += t;
  }
  clock = start + c.prefetch_call_s + t;
  return absl::OkStatus();
}

absl::StatusOr<UvmCounters> SimBackend::ReadCounters() {
  ++exact_counter_reads_;
  return DeliveredCounters();
}

absl::StatusOr<UvmCounters> SimBackend::DeliveredCounters() {
  UvmCounters c = model_.counters();
  c.h2d_bytes[static_cast<int>(MigrationCause::kStaged)] += staged_in_bytes_;
  c.coded_bytes = coded_bytes_;
  c.decoded_bytes = decoded_bytes_;
  c.decode_ns = static_cast<int64_t>(decode_s_ * 1e9);
  return c;
}

absl::Status SimBackend::StageOut(uint64_t addr, int64_t bytes) {
  if (!can_stage()) return DeviceBackend::StageOut(addr, bytes);
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("staging ", bytes, " bytes"));
  RETURN_IF_ERROR(WithinOneAllocation("staging", addr, bytes));
  if (kept_.count(addr) || !staged_.emplace(addr, bytes).second) {
    return absl::FailedPreconditionError(absl::StrCat("the range at ", addr, " is staged already"));
  }
  ReuseOrFillHostCopy(addr, bytes);
  model_.DropDeviceCopies(addr, bytes, /*discard=*/true);
  return absl::OkStatus();
}

void SimBackend::ReuseOrFillHostCopy(uint64_t addr, int64_t bytes) {
  auto it = reusable_.find(addr);
  if (it != reusable_.end() && it->second == bytes) {
    reusable_.erase(it);
    return;
  }
  if (it != reusable_.end()) reusable_.erase(it);  // a copy of another range that began here
  host_copies_filled_bytes_ += bytes;
}

int64_t SimBackend::HostCopyBytes(uint64_t addr) const {
  if (auto it = staged_.find(addr); it != staged_.end()) return it->second;
  if (auto it = kept_.find(addr); it != kept_.end()) return it->second;
  return -1;
}

absl::Status SimBackend::KeepHostCopy(uint64_t addr, int64_t bytes) {
  if (!can_stage_into()) return DeviceBackend::KeepHostCopy(addr, bytes);
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("staging ", bytes, " bytes"));
  RETURN_IF_ERROR(WithinOneAllocation("staging", addr, bytes));
  if (staged_.count(addr) || !kept_.emplace(addr, bytes).second) {
    return absl::FailedPreconditionError(absl::StrCat("the range at ", addr, " is staged already"));
  }
  ReuseOrFillHostCopy(addr, bytes);
  return absl::OkStatus();
}

absl::Status SimBackend::StageIn(uint64_t addr, int64_t bytes, Stream stream) {
  auto it = staged_.find(addr);
  if (it == staged_.end() || it->second != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("no staged range of ", bytes, " bytes at ", addr));
  }
  const UvmCosts& c = options_.spec.uvm;
  double& clock = clock_[Index(stream)];
  const double start = std::max(clock, host_clock_);
  const int64_t populated = model_.work().populated_pages;
  model_.Populate(addr, bytes);
  const double blocks = static_cast<double>(model_.work().populated_pages - populated) * kPageBytes / kBlockBytes;
  clock = start + blocks * c.populate_block_s + static_cast<double>(bytes) / c.staged_copy_bytes_per_s;
  staged_in_bytes_ += bytes;
  for (uint64_t b = BlockOf(addr); b < addr + static_cast<uint64_t>(bytes); b += kBlockBytes) ready_at_[b] = clock;
  return absl::OkStatus();
}

absl::Status SimBackend::Unstage(uint64_t addr, int64_t bytes, Location to) {
  if (auto kept = kept_.find(addr); kept != kept_.end() && kept->second == bytes) {
    kept_.erase(kept);
    reusable_[addr] = bytes;
    model_.DropDeviceCopies(addr, bytes, /*discard=*/true);  // what stood for the buffer
    return to == Location::kDevice ? Prefetch(addr, bytes, Location::kDevice, Stream::kCopy) : absl::OkStatus();
  }
  auto it = staged_.find(addr);
  if (it == staged_.end() || it->second != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("no staged range of ", bytes, " bytes at ", addr));
  }
  if (to == Location::kDevice) {
    // StageIn after what both streams have queued; kernels reading the range wait for it.
    WaitEvent(Stream::kCopy, RecordEvent(Stream::kCompute));
    RETURN_IF_ERROR(StageIn(addr, bytes, Stream::kCopy));
  } else {
    model_.DropDeviceCopies(addr, bytes, /*discard=*/true);  // back on the host, as StageOut found it
    put_back_bytes_ += bytes;
  }
  staged_.erase(addr);
  reusable_[addr] = bytes;
  return absl::OkStatus();
}

absl::Status SimBackend::ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) {
  const uint64_t end = addr + static_cast<uint64_t>(bytes);
  for (const auto* active : {&staged_, &kept_}) {
    if (auto it = active->lower_bound(addr); staged == WhenStaged::kRefuse && it != active->end() && it->first < end) {
      return absl::FailedPreconditionError(
          absl::StrCat("the range at ", it->first, " is still staged: its host copy is its contents"));
    }
  }
  for (auto* copies : {&staged_, &kept_, &reusable_}) {
    copies->erase(copies->lower_bound(addr), copies->lower_bound(end));
  }
  return absl::OkStatus();
}

int64_t SimBackend::HostCopyBytesWithin(uint64_t addr, int64_t bytes) const {
  int64_t sum = 0;
  for (const auto* copies : {&staged_, &kept_, &reusable_}) {
    for (auto it = copies->lower_bound(addr); it != copies->end() && it->first < addr + static_cast<uint64_t>(bytes);
         ++it) {
      sum += it->second;
    }
  }
  return sum;
}

absl::StatusOr<uint64_t> SimBackend::AllocateDevice(int64_t bytes) {
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("a device buffer of ", bytes, " bytes"));
  const uint64_t addr = next_device_addr_;
  next_device_addr_ += BlocksFor(bytes);
  device_buffers_[addr] = bytes;
  return addr;
}

absl::Status SimBackend::FreeDevice(uint64_t addr) {
  const auto it = device_buffers_.find(addr);
  if (it == device_buffers_.end()) return absl::NotFoundError(absl::StrCat("no device buffer at ", addr));
  // The last buffer made is made again where it was, as CUDA's allocator tends to: what keys on a
  // buffer's address (Executor::PassKey) must not mistake the next buffer for the last.
  if (addr + BlocksFor(it->second) == next_device_addr_) next_device_addr_ = addr;
  device_buffers_.erase(it);
  return absl::OkStatus();
}

absl::Status SimBackend::StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream) {
  if (HostCopyBytes(addr) != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("no staged range of ", bytes, " bytes at ", addr));
  }
  if (!WithinOne(device_buffers_, device_addr, bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes, " bytes at ", device_addr, " do not lie in one device buffer"));
  }
  double& clock = clock_[Index(stream)];
  const int64_t crosses = stream == Stream::kCopy ? CodedBytes(addr).value_or(bytes) : bytes;
  const bool coded = crosses < bytes;
  const int64_t link_bytes = coded ? crosses : bytes;
  clock = std::max(clock, host_clock_) + static_cast<double>(link_bytes) / options_.spec.link_bytes_per_s;
  double ready = clock;
  if (coded) {  // decoded once it has crossed (whole: the chunks' overlap with the copy is not modelled)
    const double decode = static_cast<double>(bytes) / options_.spec.decode_bytes_per_s;
    decode_clock_ = std::max(decode_clock_, clock) + decode;
    ready = decode_clock_;
    coded_bytes_ += link_bytes;
    decoded_bytes_ += bytes;
    decode_s_ += decode;
  }
  model_.Populate(addr, bytes);
  staged_in_bytes_ += link_bytes;
  for (uint64_t b = BlockOf(addr); b < addr + static_cast<uint64_t>(bytes); b += kBlockBytes) ready_at_[b] = ready;
  return absl::OkStatus();
}

std::optional<int64_t> SimBackend::CodedBytes(uint64_t addr) {
  const int64_t bytes = HostCopyBytes(addr);
  if (options_.coded_ratio <= 0 || bytes < 0) return std::nullopt;
  if (bytes < options_.coded_min_bytes) return bytes;
  if (auto it = measured_coded_.find(addr); it != measured_coded_.end()) return std::min(bytes, it->second);
  return static_cast<int64_t>(options_.coded_ratio * static_cast<double>(bytes));
}

absl::Status SimBackend::EndStageInto(uint64_t addr, int64_t bytes) {
  if (HostCopyBytes(addr) != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("no staged range of ", bytes, " bytes at ", addr));
  }
  model_.DropDeviceCopies(addr, bytes, /*discard=*/true);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SimBackend::ResidentBytes(uint64_t addr, int64_t bytes) {
  return model_.ResidentBytes(addr, bytes);
}

EventId SimBackend::RecordEvent(Stream stream) {
  // The copy side's events follow its decodes too (CudaBackend records them after both).
  events_[static_cast<size_t>(next_event_ % kEventRing)] =
      stream == Stream::kCopy ? std::max(clock_[1], decode_clock_) : clock_[Index(stream)];
  return next_event_++;
}

void SimBackend::WaitEvent(Stream stream, EventId event) {
  if (event < 0 || event >= next_event_ || event < next_event_ - kEventRing) return;  // Note [Events in a ring]
  double& clock = clock_[Index(stream)];
  clock = std::max(clock, events_[static_cast<size_t>(event % kEventRing)]);
}

absl::StatusOr<double> SimBackend::ElapsedSeconds(EventId from, EventId to) {
  for (const EventId e : {from, to}) {
    if (e < 0 || e >= next_event_ || e < next_event_ - kEventRing) {
      return absl::NotFoundError(
          absl::StrCat("no timed event ", e, " (", next_event_, " recorded, the last ", kEventRing, " held)"));
    }
  }
  return events_[static_cast<size_t>(to % kEventRing)] - events_[static_cast<size_t>(from % kEventRing)];
}

absl::Status SimBackend::Synchronize() {
  ++synchronizations_;
  const double t = Elapsed();
  clock_ = {t, t};
  decode_clock_ = t;
  host_clock_ = t;
  return absl::OkStatus();
}

double SimBackend::Elapsed() const { return std::max({clock_[0], clock_[1], host_clock_, decode_clock_}); }

}  // namespace autouvm::runtime::sim
