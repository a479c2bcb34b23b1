#include "runtime/device_backend.h"

#include <cstdlib>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace autouvm::runtime {

std::string_view MigrationCauseName(MigrationCause cause) {
  switch (cause) {
    case MigrationCause::kUserPrefetch:
      return "prefetch";
    case MigrationCause::kFault:
      return "fault";
    case MigrationCause::kDriverPrefetch:
      return "driver_prefetch";
    case MigrationCause::kEviction:
      return "eviction";
    case MigrationCause::kOther:
      return "other";
    case MigrationCause::kStaged:
      return "staged";
  }
  return "other";
}

namespace {

absl::Status Cannot(std::string_view kind, std::string_view what) {
  return absl::UnimplementedError(absl::StrCat("the ", std::string(kind), " backend ", std::string(what)));
}

}  // namespace

absl::Status DeviceBackend::StageOut(uint64_t, int64_t) { return Cannot(kind(), "cannot stage tensors"); }
absl::Status DeviceBackend::StageIn(uint64_t, int64_t, Stream) { return Cannot(kind(), "cannot stage tensors"); }
absl::Status DeviceBackend::Unstage(uint64_t, int64_t, Location) { return Cannot(kind(), "cannot stage tensors"); }
absl::Status DeviceBackend::ForgetHostCopies(uint64_t, int64_t, WhenStaged) { return absl::OkStatus(); }  // none kept
absl::StatusOr<uint64_t> DeviceBackend::AllocateDevice(int64_t) { return Cannot(kind(), "has no device buffers"); }
absl::Status DeviceBackend::FreeDevice(uint64_t) { return Cannot(kind(), "has no device buffers"); }
absl::Status DeviceBackend::StageInto(uint64_t, int64_t, uint64_t, Stream) {
  return Cannot(kind(), "has no device buffers");
}
absl::Status DeviceBackend::EndStageInto(uint64_t, int64_t) { return Cannot(kind(), "has no device buffers"); }
absl::Status DeviceBackend::KeepHostCopy(uint64_t, int64_t) { return Cannot(kind(), "has no device buffers"); }

bool WithinOne(const std::map<uint64_t, int64_t>& allocations, uint64_t addr, int64_t bytes) {
  auto it = allocations.upper_bound(addr);
  return it != allocations.begin() &&
         addr + static_cast<uint64_t>(bytes) <= std::prev(it)->first + static_cast<uint64_t>(std::prev(it)->second);
}

int64_t UvmCounters::h2d_total() const {
  int64_t sum = 0;
  for (int64_t b : h2d_bytes) sum += b;
  return sum;
}

int64_t UvmCounters::d2h_total() const {
  int64_t sum = 0;
  for (int64_t b : d2h_bytes) sum += b;
  return sum;
}

// Note [Counter arithmetic]: both operators go field by field; a field added to UvmCounters is added to
// ForEachField and nowhere else.
namespace {
template <typename F>
void ForEachField(UvmCounters& out, const UvmCounters& in, F f) {
  f(out.gpu_fault_groups, in.gpu_fault_groups);
  f(out.gpu_faults, in.gpu_faults);
  f(out.cpu_faults, in.cpu_faults);
  for (int i = 0; i < kMigrationCauses; ++i) {
    f(out.h2d_bytes[i], in.h2d_bytes[i]);
    f(out.d2h_bytes[i], in.d2h_bytes[i]);
  }
  f(out.dropped_bytes, in.dropped_bytes);
  f(out.evictions, in.evictions);
  f(out.thrashing, in.thrashing);
  f(out.throttling, in.throttling);
  f(out.remote_bytes, in.remote_bytes);
  f(out.coded_bytes, in.coded_bytes);
  f(out.decoded_bytes, in.decoded_bytes);
  f(out.decode_ns, in.decode_ns);
}
}  // namespace

UvmCounters operator-(const UvmCounters& a, const UvmCounters& b) {
  UvmCounters d = a;
  ForEachField(d, b, [](int64_t& x, int64_t y) { x -= y; });
  return d;
}

UvmCounters& operator+=(UvmCounters& a, const UvmCounters& b) {
  ForEachField(a, b, [](int64_t& x, int64_t y) { x += y; });
  return a;
}

absl::StatusOr<int64_t> ManagedBytesCapFromEnvironment() {
  const char* value = std::getenv("AUTOUVM_MAX_MANAGED_BYTES");
  if (value == nullptr || *value == '\0') return 0;
  int64_t cap = 0;
  if (!absl::SimpleAtoi(value, &cap) || cap < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUTOUVM_MAX_MANAGED_BYTES: '", value, "' is not a non-negative number of bytes"));
  }
  return cap;
}

}  // namespace autouvm::runtime
