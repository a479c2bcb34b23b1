// A repository entry whose ops change with the prompt's length inside one prefill bucket: the default
// tiny Llama wrapped in a module whose step (and forward) runs one more op for an odd number of tokens. What a
// shape whose ops move looks like to the profiler (Note [A shape whose ops move], profiler/profile_jobs.cc),
// made on purpose; the daemon serves it as any other model (its parameters are the Llama's).
//
//   ASSERT_TRUE(WriteWobblyModel("wobbly", d.repository()).ok());
#pragma once

#include <string>

#include "absl/status/status.h"

namespace autouvm::testing {

absl::Status WriteWobblyModel(const std::string& name, const std::string& repo_dir);

}  // namespace autouvm::testing
