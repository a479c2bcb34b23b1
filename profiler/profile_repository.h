// ProfileRepository: profiles and plans by ProfileKey on top of a ProfileStore — written together in
// one batch, sealed with their checksums, verified on every read, listed per model.
//
//   ProfileRepository repo(store.get());
//   RETURN_IF_ERROR(repo.Put(profile, plan_bytes));              // profile and plan, atomically
//   ASSIGN_OR_RETURN(std::optional<Profile> p, repo.Get(key));   // DATA_LOSS if damaged (counted)
//
// A damaged value is reported, counted (corrupt_reads) and never returned; the caller re-profiles and
// the new Put replaces it. Thread-safety: as the store's (both shipped stores are thread-safe).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autouvm/v1/profile.pb.h"
#include "profiler/profile_store.h"

namespace autouvm::profiler {

class ProfileRepository {
 public:
  explicit ProfileRepository(ProfileStore* store) : store_(store) {}

  absl::Status Put(const autouvm::v1::Profile& profile, const std::string& plan);
  absl::StatusOr<std::optional<autouvm::v1::Profile>> Get(const autouvm::v1::ProfileKey& key) const;
  // The plan stored with the profile of `key`; DATA_LOSS if damaged.
  absl::StatusOr<std::optional<std::string>> GetPlan(const autouvm::v1::ProfileKey& key) const;

  struct Listed {
    std::string key;                               // the store key
    absl::StatusOr<autouvm::v1::Profile> profile;  // DATA_LOSS for a damaged entry
  };
  // Every profile of the model with this digest (of the current schema), in key order.
  absl::StatusOr<std::vector<Listed>> List(const std::string& model_digest) const;
  // Removes the profile and plan of `key` (both, in that order; a missing one is not an error).
  absl::Status Delete(const autouvm::v1::ProfileKey& key);

  int64_t corrupt_reads() const { return corrupt_reads_.load(); }
  // What the store holds in memory (ProfileStore::MemoryBytes).
  int64_t memory_bytes() const { return store_->MemoryBytes(); }

 private:
  ProfileStore* store_;
  mutable std::atomic<int64_t> corrupt_reads_{0};
};

}  // namespace autouvm::profiler
