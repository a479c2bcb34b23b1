// Shape-bucket options and their validation; see shape_flags.h.
#include "clients/shape_flags.h"

#include <CLI/CLI.hpp>

namespace autouvm::cli {

void AddShapeOptions(CLI::App* cmd, ShapeFlags* flags, ShapeChoice choice) {
  CLI::Option* phase =
      cmd->add_option("--phase", flags->phase, "Shape bucket: the phase")->check(CLI::IsMember({"prefill", "decode"}));
  CLI::Option* batch = cmd->add_option("--batch", flags->batch, "Shape bucket: rows in the step (>= 1)");
  CLI::Option* prompt_len =
      cmd->add_option("--prompt-len", flags->prompt_len, "Shape bucket: prompt length, prefill only (>= 1)");
  CLI::Option* key = nullptr;
  if (choice == ShapeChoice::kKeyOrShape) {
    key = cmd->add_option("--key", flags->key, "The store key, as `profiles list` shows it");
    key->excludes(phase)->excludes(batch)->excludes(prompt_len);
  }
  // Checked once every option is in: the rules involve several options at once.
  cmd->callback([flags, phase, batch, prompt_len, key] {
    if (key != nullptr && key->count() > 0 && flags->key.empty()) {
      throw CLI::ValidationError("--key", "must not be empty");
    }
    if (phase->count() == 0) {
      if (batch->count() > 0 || prompt_len->count() > 0) {
        throw CLI::ValidationError("--phase", "must be given with --batch and --prompt-len");
      }
      if (key != nullptr && key->count() == 0) {
        throw CLI::ValidationError("--key", "name the profile with --key KEY, or with --phase and --batch");
      }
      return;
    }
    if (batch->count() == 0 || flags->batch < 1) throw CLI::ValidationError("--batch", "must be given and >= 1");
    if (flags->phase == "prefill" && (prompt_len->count() == 0 || flags->prompt_len < 1)) {
      throw CLI::ValidationError("--prompt-len", "must be given and >= 1 for --phase prefill");
    }
    if (flags->phase == "decode" && prompt_len->count() > 0) {
      throw CLI::ValidationError("--prompt-len", "applies to --phase prefill only");
    }
  });
}

autouvm::v1::ShapeBucket ToShapeBucket(const ShapeFlags& flags) {
  autouvm::v1::ShapeBucket shape;
  shape.set_phase(flags.phase == "prefill" ? autouvm::v1::PHASE_PREFILL : autouvm::v1::PHASE_DECODE);
  shape.set_batch(flags.batch);
  if (flags.phase == "prefill") shape.set_prompt_len(flags.prompt_len);
  return shape;
}

}  // namespace autouvm::cli
