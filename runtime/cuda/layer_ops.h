// The CUDA kernels of the autouvm:: TorchScript ops of Note [Own layer kernels] (engine/llama_module.cc; the
// ops' schemas and CPU reference kernels are engine/layer_ops.h's), registered with libtorch's dispatcher for
// CUDA tensors where the kernels are built (runtime/cuda/layer_kernels.cu). Each checks its tensors (devices,
// dtypes, shapes) and throws c10::Error naming what is wrong.
#pragma once

namespace autouvm::runtime::cuda {

// The ops register themselves when this library is linked; calling this makes sure it is (OpenComputeDevice
// does). True.
bool LayerOpsLinked();

}  // namespace autouvm::runtime::cuda
