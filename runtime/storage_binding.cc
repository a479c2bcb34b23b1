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
  } else {
    e.own = e.storage.set_data_ptr(std::move(buffer));
    e.bound = true;
  }
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
  return absl::OkStatus();
}

}  // namespace autouvm::runtime
