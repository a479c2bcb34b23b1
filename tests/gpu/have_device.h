// Whether this machine has a usable CUDA device: the GPU tests skip, saying so, where it has none (a
// development or CI machine with the toolkit but no GPU).
#pragma once

#include <cuda_runtime.h>

namespace autouvm::testing {

inline bool HaveCudaDevice() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();  // clear the error a machine without a device leaves
  return ok;
}

}  // namespace autouvm::testing
