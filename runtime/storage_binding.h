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

 private:
  struct Entry {
    c10::Storage storage;
    c10::DataPtr own;  // the storage's allocation while it is bound; empty otherwise
    bool bound = false;
  };
  std::unordered_map<uint64_t, Entry> by_addr_;
};

}  // namespace autouvm::runtime
