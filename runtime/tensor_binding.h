// TensorBinding: points a model's tensor at other device memory for a while, and back (Note [Streaming
// through a device buffer], device_backend.h). The executor binds a streamed weight to the device
// buffer its copy went to before the ops that read it, and unbinds it after its last use; the ops
// launched in between read the buffer, those launched after read the tensor's own (managed) range.
//
//   binding->Bind(range.addr, buffer);   // the tensor whose storage starts at range.addr reads `buffer`
//   ... launch the ops that read it ...
//   binding->Unbind(range.addr);
//
// Tensors are named by the address their storage had when the binding was made (TensorRange::addr).
// Implementations: StorageBinding (runtime/storage_binding.h, libtorch tensors).
// Not thread-safe: the thread that launches the model's ops binds and unbinds.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace autouvm::runtime {

class TensorBinding {
 public:
  virtual ~TensorBinding() = default;
  // NOT_FOUND when no tensor's storage started at `range_addr`.
  virtual absl::Status Bind(uint64_t range_addr, uint64_t device_addr) = 0;
  virtual absl::Status Unbind(uint64_t range_addr) = 0;
  // The range_addr of the tensor bound to `device_addr` now (the last bound there), 0 if none: what an
  // observer recording meanwhile names the buffer by (Observer::ResolveBoundStorage).
  virtual uint64_t BoundFrom(uint64_t device_addr) const = 0;
};

}  // namespace autouvm::runtime
