// A small Llama configuration for tests: fast to build and run, big enough to have every part (two
// layers by default, grouped-query attention with 4 query and 2 key/value heads).
#pragma once

#include <string>

#include "engine/llama_builder.h"

namespace autouvm::testing {

inline engine::ModelConfig SmallLlamaConfig(const std::string& name, int64_t layers = 2,
                                            const std::string& dtype = "fp32") {
  engine::ModelConfig c = engine::DefaultTinyModelConfig(name);
  c.dim = 64;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 96;
  c.max_seq = 64;
  c.dtype = dtype;
  return c;
}

}  // namespace autouvm::testing
