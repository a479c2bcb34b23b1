// Shared by the benchmark programs: the model-shape flags, and a ModelRunner over a generated Llama model
// written to a temporary directory (removed once loaded). Not thread-safe; call from main().
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"

namespace autouvm::bench {

// --dim, --layers, --heads, --kv-heads, --ffn-dim, --dtype; call FinishModelFlags after parsing.
inline void AddModelFlags(CLI::App& app, engine::ModelConfig* c) {
  app.add_option("--dim", c->dim, "hidden size")->capture_default_str();
  app.add_option("--layers", c->n_layers)->capture_default_str();
  app.add_option("--heads", c->n_heads)->capture_default_str();
  app.add_option("--kv-heads", c->n_kv_heads)->capture_default_str();
  app.add_option("--ffn-dim", c->ffn_dim)->capture_default_str();
  app.add_option("--dtype", c->dtype)->capture_default_str();
}

inline void FinishModelFlags(engine::ModelConfig* c) {
  if (c->n_heads > 0) c->head_dim = c->dim / c->n_heads;
}

inline absl::StatusOr<std::unique_ptr<engine::ModelRunner>> MakeBenchRunner(const engine::ModelConfig& c,
                                                                            int max_batch) {
  const auto dir = std::filesystem::temp_directory_path() / ("autouvm-bench-" + std::to_string(getpid()));
  if (absl::Status s = engine::WriteLlamaModel(c, 1, dir.string()); !s.ok()) return s;
  auto runner = engine::ModelRunner::Create((dir / c.name).string(), c, max_batch);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return runner;
}

}  // namespace autouvm::bench
