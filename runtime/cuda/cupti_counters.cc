#include "runtime/cuda/cupti_counters.h"

#include <cupti.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

namespace autouvm::runtime::cuda {
namespace {

// Note [One CUPTI subscriber]: CUPTI hands activity buffers to plain C callbacks registered once per
// process, so the live instance is reachable through this pointer and no second one may exist.
std::atomic<CuptiUvmCounters*> g_active{nullptr};

std::string CuptiError(CUptiResult r);

// Note [Activity trace]: a developer's view of what the device ran, for a question the counters cannot
// answer (do a graph's copies overlap its kernels?). With AUTOUVM_CUPTI_TRACE=PATH set, the process
// also records every kernel, copy and memset with its start and end (CUPTI's concurrent-kernel and
// memcpy activity, graph nodes included) and writes them to PATH.<pid>, a line each:
//   K start_ns end_ns stream graph_id correlation name        a kernel
//   C start_ns end_ns stream graph_id correlation bytes kind  a copy (kind: CUPTI's copyKind, 1 = HtoD)
//   S start_ns end_ns stream graph_id correlation bytes       a memset
// A graph's nodes share its launch's correlation. The trace slows the device's work a little and grows
// by ~50 bytes a kernel: for a short diagnostic run, never in service (docs/development.md).
std::mutex g_trace_mu;
std::FILE* g_trace = nullptr;  // guarded by g_trace_mu; open for the process's life once set

void Trace(const CUpti_Activity* record) {
  char line[200];
  int n = 0;
  if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    n = std::snprintf(line, sizeof(line), "K %llu %llu %u %u %u %.60s\n", static_cast<unsigned long long>(k->start),
                      static_cast<unsigned long long>(k->end), k->streamId, k->graphId, k->correlationId,
                      k->name != nullptr ? k->name : "?");
  } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
    const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
    n = std::snprintf(line, sizeof(line), "C %llu %llu %u %u %u %llu %u\n", static_cast<unsigned long long>(c->start),
                      static_cast<unsigned long long>(c->end), c->streamId, c->graphId, c->correlationId,
                      static_cast<unsigned long long>(c->bytes), static_cast<unsigned>(c->copyKind));
  } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
    const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
    n = std::snprintf(line, sizeof(line), "S %llu %llu %u %u %u %llu\n", static_cast<unsigned long long>(m->start),
                      static_cast<unsigned long long>(m->end), m->streamId, m->graphId, m->correlationId,
                      static_cast<unsigned long long>(m->bytes));
  }
  if (n > 0) std::fwrite(line, 1, static_cast<size_t>(std::min<int>(n, sizeof(line) - 1)), g_trace);
}

// Opens the trace where AUTOUVM_CUPTI_TRACE asks for one and enables its kinds; a failure is logged to
// stderr and leaves the counters as they are.
void StartTrace() {
  const char* path = std::getenv("AUTOUVM_CUPTI_TRACE");
  if (path == nullptr || *path == '\0') return;
  const std::string file = absl::StrCat(path, ".", getpid());
  std::lock_guard<std::mutex> lock(g_trace_mu);
  if (g_trace == nullptr) g_trace = std::fopen(file.c_str(), "w");
  if (g_trace == nullptr) {
    std::fprintf(stderr, "AUTOUVM_CUPTI_TRACE: cannot write %s\n", file.c_str());
    return;
  }
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    if (const CUptiResult r = cuptiActivityEnable(kind); r != CUPTI_SUCCESS) {
      std::fprintf(stderr, "AUTOUVM_CUPTI_TRACE: enabling activity kind %d: %s\n", static_cast<int>(kind),
                   CuptiError(r).c_str());
    }
  }
}

constexpr size_t kBufferBytes = 1 << 20;
constexpr size_t kAlignment = 8;

std::string CuptiError(CUptiResult r) {  // declared above
  const char* text = nullptr;
  cuptiGetResultString(r, &text);  // ignored: a null text is printed as the code alone
  return absl::StrCat(text != nullptr ? text : "CUPTI error", " (", static_cast<int>(r), ")");
}

MigrationCause CauseOf(uint32_t flags) {
  switch (flags) {
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER:
      return MigrationCause::kUserPrefetch;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE:
      return MigrationCause::kFault;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH:
      return MigrationCause::kDriverPrefetch;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION:
      return MigrationCause::kEviction;
    default:
      return MigrationCause::kOther;
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  UvmCounters delta;
  CUpti_Activity* record = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_trace_mu);
    while (g_trace != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) Trace(record);
    if (g_trace != nullptr) std::fflush(g_trace);
  }
  record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) continue;
    const auto* um = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
    const auto value = static_cast<int64_t>(um->value);
    switch (um->counterKind) {
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        delta.h2d_bytes[static_cast<int>(CauseOf(um->flags))] += value;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
        delta.d2h_bytes[static_cast<int>(CauseOf(um->flags))] += value;
        if (CauseOf(um->flags) == MigrationCause::kEviction) ++delta.evictions;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        ++delta.gpu_faults;               // one record per faulting page
        delta.gpu_fault_groups += value;  // "the number of page fault groups for the same page"
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT:
        ++delta.cpu_faults;  // value is the faulting instruction's address
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        ++delta.thrashing;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING:
        ++delta.throttling;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
        delta.remote_bytes += value;
        break;
      default:
        break;
    }
  }
  if (CuptiUvmCounters* active = g_active.load()) active->Add(delta);
  std::free(buffer);
}

CUptiResult Configure(int device, const std::vector<CUpti_ActivityUnifiedMemoryCounterKind>& kinds) {
  std::vector<CUpti_ActivityUnifiedMemoryCounterConfig> config(kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    config[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
    config[i].kind = kinds[i];
    config[i].deviceId = static_cast<uint32_t>(device);
    config[i].enable = 1;
  }
  return cuptiActivityConfigureUnifiedMemoryCounter(config.data(), static_cast<uint32_t>(config.size()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CuptiUvmCounters>> CuptiUvmCounters::Start(int device) {
  std::unique_ptr<CuptiUvmCounters> counters(new CuptiUvmCounters());
  CuptiUvmCounters* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, counters.get())) {
    return absl::FailedPreconditionError("CUPTI unified-memory counters are already being collected");
  }
  auto fail = [&](const char* what, CUptiResult r) {
    g_active.store(nullptr);
    return absl::UnavailableError(absl::StrCat("CUPTI unified-memory counters: ", what, ": ", CuptiError(r)));
  };
  CUptiResult r = cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted);
  if (r != CUPTI_SUCCESS) return fail("registering buffers", r);
  // Every kind we report; platforms without CPU-fault or thrashing records still give the transfers.
  r = Configure(device, {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
                         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
                         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
                         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
                         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING,
                         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP});
  if (r != CUPTI_SUCCESS) {
    r = Configure(device, {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
                           CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                           CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT});
  }
  if (r != CUPTI_SUCCESS) return fail("configuring", r);
  r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  if (r != CUPTI_SUCCESS) return fail("enabling", r);
  StartTrace();  // Note [Activity trace]
  // Note [Counters without waiting] (cupti_counters.h).
  counters->flusher_ = std::thread([c = counters.get()] { c->FlushEveryPeriod(); });
  return counters;
}

void CuptiUvmCounters::FlushEveryPeriod() {
  const auto period = std::chrono::duration<double>(kFlushPeriodS);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // unchecked: the next period tries again
    lock.lock();
  }
}

CuptiUvmCounters::~CuptiUvmCounters() {
  if (flusher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    flusher_.join();
  }
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);  // ignored: shutting down
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);           // ignored: shutting down
  {
    std::lock_guard<std::mutex> lock(g_trace_mu);
    if (g_trace != nullptr) std::fflush(g_trace);  // left open: CUPTI may deliver late buffers to it
  }
  CuptiUvmCounters* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

UvmCounters CuptiUvmCounters::Read(bool flush) {
  if (flush) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // warned by its absence: totals lag a flush
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

void CuptiUvmCounters::Add(const UvmCounters& delta) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_ += delta;
}

}  // namespace autouvm::runtime::cuda
