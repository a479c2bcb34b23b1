// ProfileKey: what a profile is of — {model digest, phase, shape bucket, GPU spec, device budget,
// policy, schema version} — its shape buckets, its encoding as a store key, and the model digest.
//
//   ASSIGN_OR_RETURN(std::string digest, ModelDigest(entry_dir));     // sha256(model.pt ‖ model.yaml)
//   autouvm::v1::ProfileKey key = DecodeKey(digest, /*batch=*/4, ...);
//   std::string k = EncodeKey(key);    // "v1/<digest>/decode/b4/p0/h200-pcie5/<budget>/autouvm"
//
// Shapes (ARCHITECTURE.md "Shapes"): a decode profile serves every position of the batches in its
// bucket, the batch rounded up to a power of two (a batch of 5 is b8); prefill is bucketed by batch and
// the prompt length, each rounded up to a power of two; a mixed pass by its rows and its longest prompt
// chunk, both rounded up to powers of two. docs/profile-store.md.
//
// Plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "autouvm/v1/profile.pb.h"

namespace autouvm::profiler {

// The smallest power of two >= n (n >= 1); 1 for n <= 1.
int32_t PromptBucket(int64_t prompt_len);

autouvm::v1::ProfileKey PrefillKey(std::string model_digest, int32_t batch, int64_t prompt_len, std::string gpu,
                                   int64_t device_budget_bytes, std::string policy);
autouvm::v1::ProfileKey DecodeKey(std::string model_digest, int32_t batch, std::string gpu, int64_t device_budget_bytes,
                                  std::string policy);
// A mixed pass (decode rows and prompt chunks): its rows and its longest chunk, each rounded up to a
// power of two.
autouvm::v1::ProfileKey MixedKey(std::string model_digest, int32_t rows, int64_t prompt_len, std::string gpu,
                                 int64_t device_budget_bytes, std::string policy);
// "prefill", "decode", "mixed" (as in encoded keys).
const char* PhaseName(autouvm::v1::Phase phase);

// The store key: "v<schema>/<digest>/<phase>/b<batch>/p<bucket>/<gpu>/<budget>/<policy>". Keys of one
// model share the prefix "v<schema>/<digest>/" (KeyPrefix), so a model's profiles are one range scan.
std::string EncodeKey(const autouvm::v1::ProfileKey& key);
std::string KeyPrefix(int32_t schema_version, std::string_view model_digest);
// INVALID_ARGUMENT naming the part that is wrong.
absl::StatusOr<autouvm::v1::ProfileKey> ParseKey(std::string_view encoded);

// sha256 over the bytes of <entry_dir>/model.pt followed by those of <entry_dir>/model.yaml, as 64 hex
// digits. NOT_FOUND naming a file that cannot be read.
absl::StatusOr<std::string> ModelDigest(const std::string& entry_dir);
// The same over a model.pt file and model.yaml text already read (the text the config was parsed from,
// so that the digest names exactly what was loaded).
absl::StatusOr<std::string> ModelDigest(const std::string& model_pt, std::string_view model_yaml_text);
// sha256 of `bytes`, raw (32 bytes).
std::string Sha256(std::string_view bytes);

}  // namespace autouvm::profiler
