// NamedTensor: a tensor a model owns, known by name — a parameter or buffer by its dotted name
// ("layer0.wq"), the KV caches as "kv_cache.k" / "kv_cache.v" — with where its storage starts and its
// bytes. The engine's ModelRunner lists its own; the observer, the executor and the simulator's mirror
// know a model's tensors by these.
//
// A plain value type.
#pragma once

#include <cstdint>
#include <string>

namespace autouvm::runtime {

struct NamedTensor {
  std::string name;
  uint64_t addr = 0;
  int64_t bytes = 0;
};

}  // namespace autouvm::runtime
