// Profile bundles: a store's profiles and plans, as stored (sealed), carried to another daemon — a new
// replica starts with the profiles of a running one instead of profiling again.
//
//   ASSIGN_OR_RETURN(ProfileBundle b, ExportBundle(*store, {digest}, "autouvmd 0.1", now));
//   ImportResult r = ImportBundle(store.get(), b, /*overwrite=*/false);   // r.errors: one line per refusal
//
// An imported entry is checked as a read is: both checksums, both values parse, the entry's key is the
// one its profile and plan carry, and the schema version is this daemon's. An entry that fails is
// refused with the reason and the others are still imported. Each entry's profile and plan are written
// in one batch.
//
// Plain functions; thread-safe as the store is.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autouvm/v1/profile.pb.h"
#include "profiler/profile_store.h"

namespace autouvm::profiler {

// The profiles of the models with these digests (every stored profile of this schema if empty), each
// with its plan. A damaged entry is exported as it is: the importer refuses it.
absl::StatusOr<autouvm::v1::ProfileBundle> ExportBundle(const ProfileStore& store,
                                                        const std::vector<std::string>& model_digests,
                                                        const std::string& exported_by, absl::Time now);

struct ImportResult {
  int imported = 0;
  int skipped = 0;  // already stored and not overwritten
  std::vector<std::string> errors;
  std::vector<autouvm::v1::ProfileKey> keys;  // the keys imported
};

ImportResult ImportBundle(ProfileStore* store, const autouvm::v1::ProfileBundle& bundle, bool overwrite);

}  // namespace autouvm::profiler
