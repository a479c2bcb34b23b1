// A decode-like access trace for runtime and profiler tests: `layers` weights of `weight_mib`, each
// multiplied in turn by the running activation, one aten::mm per weight.
#pragma once

#include <string>

#include "runtime/access_trace.h"

namespace autouvm::testing {

// `rows` rows of activations multiply each weight: 1 is a decode step (the planner reads unpinned
// weights in place), 512 a prefill (it streams them). `elementwise`: small ops on the activation after
// each product (a real decode step's norms, rotations and additions: host time to hide copies behind).
inline runtime::AccessTrace DecodeLikeTrace(int layers, int64_t weight_mib, int rows = 1, int elementwise = 0) {
  constexpr int64_t kMiB = 1 << 20;
  runtime::AccessTrace t;
  std::string x = "input:0";
  for (int i = 0; i < layers; ++i) {
    const std::string w = "param:w" + std::to_string(i);
    t.named.push_back({w, weight_mib * kMiB});
    runtime::OpRecord op;
    op.index = static_cast<int64_t>(t.ops.size());
    op.op = "aten::mm";
    op.kernel = "aten::mm#" + std::to_string(i);
    op.reads = {{x, 8192, 0, 8192}, {w, weight_mib * kMiB, 0, weight_mib * kMiB}};
    const std::string y = "act:aten::mm@" + std::to_string(op.index) + ".0";
    op.writes = {{y, 8192, 0, 8192}};
    op.flops = 2.0 * rows * static_cast<double>(weight_mib * kMiB / 2);
    t.ops.push_back(op);
    x = y;
    for (int e = 0; e < elementwise; ++e) {
      runtime::OpRecord add;
      add.index = static_cast<int64_t>(t.ops.size());
      add.op = "aten::add";
      add.kernel = "aten::add#" + std::to_string(i * elementwise + e);
      add.reads = {{x, 8192, 0, 8192}};
      const std::string z = "act:aten::add@" + std::to_string(add.index) + ".0";
      add.writes = {{z, 8192, 0, 8192}};
      add.flops = 4096;
      t.ops.push_back(add);
      x = z;
    }
  }
  return t;
}

}  // namespace autouvm::testing
