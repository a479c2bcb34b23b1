// StorageBinding: the TensorBinding of libtorch tensors — a bound tensor's storage holds a pointer to
// the device buffer (not owned) and gets its own allocation back on Unbind, so every view of it follows.
//
//   StorageBinding binding({param.storage(), ...});   // the storages the executor may bind
//   RETURN_IF_ERROR(binding.Bind(addr, buffer));
//
// Destroying it unbinds whatever is still bound. Not thread-safe (TensorBinding).
#pragma once

#include <c10/core/Storage.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/tensor_binding.h"

namespace autouvm::runtime {

class StorageBinding final : public TensorBinding {
 public:
  explicit StorageBinding(const std::vector<c10::Storage>& storages);
  ~StorageBinding() override;

  absl::Status Bind(uint64_t range_addr, uint64_t device_addr) override;
  absl::Status Unbind(uint64_t range_addr) override;
  uint64_t BoundFrom(uint64_t device_addr) const override;

 private:
  // Drops bound_at_'s entry for device_addr if it is range_addr's.
  void Forget(uint64_t device_addr, uint64_t range_addr);
  struct Entry {
    c10::Storage storage;
    c10::DataPtr own;  // the storage's allocation while it is bound; empty otherwise
    bool bound = false;
    uint64_t device_addr = 0;  // where it is bound
  };
  std::unordered_map<uint64_t, Entry> by_addr_;
  std::unordered_map<uint64_t, uint64_t> bound_at_;  // device_addr → range_addr of the last bound there
};

}  // namespace autouvm::runtime
