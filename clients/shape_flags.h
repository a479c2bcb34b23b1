// The options that name one profile of a model: --key KEY, or a shape bucket --phase prefill|decode
// --batch N [--prompt-len N]. Used by `profiles show`, `profiles delete` and `reprofile`.
//
// Usage: AddShapeOptions(cmd, &flags, ...) before parsing; an incomplete or contradictory shape is a
// usage error raised while parsing (exit 2). Then request.set_key(flags.key) and, if HasShape(flags),
// *request.mutable_shape() = ToShapeBucket(flags). Thread-safety: none needed (main's thread only).
#pragma once

#include <string>

#include "autouvm/v1/admin.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct ShapeFlags {
  std::string key;    // --key; "": none
  std::string phase;  // "prefill", "decode", or "": no shape given
  int batch = 0;
  int prompt_len = 0;  // prefill only
};

enum class ShapeChoice {
  kKeyOrShape,     // exactly one of --key or a shape (show, delete)
  kOptionalShape,  // a shape or nothing, no --key (reprofile: nothing means every profile)
};

// Adds the options to `cmd` and sets its parse callback to validate them: --batch >= 1 with --phase;
// --prompt-len >= 1 for prefill and absent for decode; --batch/--prompt-len only with --phase.
void AddShapeOptions(CLI::App* cmd, ShapeFlags* flags, ShapeChoice choice);

inline bool HasShape(const ShapeFlags& flags) { return !flags.phase.empty(); }
autouvm::v1::ShapeBucket ToShapeBucket(const ShapeFlags& flags);

}  // namespace autouvm::cli
