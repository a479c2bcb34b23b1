#include "runtime/storage_binding.h"

#include "absl/strings/str_cat.h"

namespace autouvm::runtime {

StorageBinding::StorageBinding(const std::vector<c10::Storage>& storages) {
  for (const c10::Storage& s : storages) {
    if (s.data() == nullptr) continue;
    by_addr_.emplace(reinterpret_cast<uint64_t>(s.data()), Entry{s, c10::DataPtr(), false});
  }
}

StorageBinding::~StorageBinding() {
  for (auto& [addr, e] : by_addr_) {
    if (e.bound) (void)Unbind(addr);
  }
}

absl::Status StorageBinding::Bind(uint64_t range_addr, uint64_t device_addr) {
  auto it = by_addr_.find(range_addr);
  if (it == by_addr_.end()) {
    return absl::NotFoundError(absl::StrCat("no tensor's storage starts at 0x", absl::Hex(range_addr)));
  }
  Entry& e = it->second;
  const c10::Device device = e.storage.device();
  c10::DataPtr buffer(reinterpret_cast<void*>(device_addr), device);  // not owned: no deleter
  if (e.bound) {
    e.storage.set_data_ptr_noswap(std::move(buffer));
    Forget(e.device_addr, range_addr);
  } else {
    e.own = e.storage.set_data_ptr(std::move(buffer));
    e.bound = true;
  }
  e.device_addr = device_addr;
  bound_at_[device_addr] = range_addr;
  return absl::OkStatus();
}

absl::Status StorageBinding::Unbind(uint64_t range_addr) {
  auto it = by_addr_.find(range_addr);
  if (it == by_addr_.end()) {
    return absl::NotFoundError(absl::StrCat("no tensor's storage starts at 0x", absl::Hex(range_addr)));
  }
  Entry& e = it->second;
  if (!e.bound) return absl::OkStatus();
  e.storage.set_data_ptr_noswap(std::move(e.own));
  e.own = c10::DataPtr();
  e.bound = false;
  Forget(e.device_addr, range_addr);
  return absl::OkStatus();
}

void StorageBinding::Forget(uint64_t device_addr, uint64_t range_addr) {
  auto it = bound_at_.find(device_addr);
  if (it != bound_at_.end() && it->second == range_addr) bound_at_.erase(it);
}

uint64_t StorageBinding::BoundFrom(uint64_t device_addr) const {
  auto it = bound_at_.find(device_addr);
  return it == bound_at_.end() ? 0 : it->second;
}

}  // namespace autouvm::runtime
