#include "profiler/profile_bundle.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "profiler/profile_codec.h"
#include "profiler/profile_key.h"
#include "runtime/plan_proto.h"

namespace autouvm::profiler {

absl::StatusOr<autouvm::v1::ProfileBundle> ExportBundle(const ProfileStore& store,
                                                        const std::vector<std::string>& model_digests,
                                                        const std::string& exported_by, absl::Time now) {
  autouvm::v1::ProfileBundle bundle;
  bundle.set_schema_version(kProfileStoreSchemaVersion);
  bundle.set_exported_by(exported_by);
  bundle.set_created_unix_ms(absl::ToUnixMillis(now));
  std::vector<std::string> prefixes;
  for (const std::string& d : model_digests) prefixes.push_back(KeyPrefix(kProfileStoreSchemaVersion, d));
  if (model_digests.empty()) prefixes.push_back(absl::StrCat("v", kProfileStoreSchemaVersion, "/"));
  for (const std::string& prefix : prefixes) {
    ASSIGN_OR_RETURN(std::vector<StoreEntry> profiles, store.List(Family::kProfiles, prefix));
    for (StoreEntry& e : profiles) {
      ASSIGN_OR_RETURN(std::optional<std::string> plan, store.Get(Family::kPlans, e.key));
      autouvm::v1::BundleEntry* out = bundle.add_entries();
      out->set_key(e.key);
      out->set_profile(std::move(e.value));
      if (plan.has_value()) out->set_plan(std::move(*plan));
    }
  }
  return bundle;
}

namespace {

// The entry's key, or why it cannot be imported.
absl::StatusOr<autouvm::v1::ProfileKey> Check(const autouvm::v1::BundleEntry& e) {
  ASSIGN_OR_RETURN(autouvm::v1::ProfileKey key, ParseKey(e.key()));
  if (key.schema_version() != kProfileStoreSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("schema version ", key.schema_version(), ", this daemon has ", kProfileStoreSchemaVersion));
  }
  ASSIGN_OR_RETURN(auto profile, OpenValue<autouvm::v1::Profile>(e.profile(), "profile"));
  if (e.plan().empty()) return absl::InvalidArgumentError("plan: missing");
  ASSIGN_OR_RETURN(auto plan, OpenValue<autouvm::v1::Plan>(e.plan(), "plan"));
  if (EncodeKey(profile.key()) != e.key()) {
    return absl::InvalidArgumentError(absl::StrCat("profile: is of ", EncodeKey(profile.key())));
  }
  if (EncodeKey(plan.key()) != e.key()) {
    return absl::InvalidArgumentError(absl::StrCat("plan: is of ", EncodeKey(plan.key())));
  }
  // A plan no planner makes would only be found damaged when first followed.
  if (auto followed = runtime::FromProto(plan); !followed.ok()) return followed.status();
  return key;
}

}  // namespace

ImportResult ImportBundle(ProfileStore* store, const autouvm::v1::ProfileBundle& bundle, bool overwrite) {
  ImportResult r;
  if (bundle.schema_version() != kProfileStoreSchemaVersion) {
    r.errors.push_back(absl::StrCat("bundle: schema version ", bundle.schema_version(), ", this daemon has ",
                                    kProfileStoreSchemaVersion));
    return r;
  }
  for (const autouvm::v1::BundleEntry& e : bundle.entries()) {
    absl::StatusOr<autouvm::v1::ProfileKey> key = Check(e);
    if (!key.ok()) {
      r.errors.push_back(absl::StrCat(e.key(), ": ", key.status().message()));
      continue;
    }
    if (!overwrite) {
      auto existing = store->Get(Family::kProfiles, e.key());
      if (existing.ok() && existing->has_value()) {
        ++r.skipped;
        continue;
      }
    }
    // Stored exactly as exported: the values were verified above and keep their checksums.
    absl::Status s = store->Write({{Family::kProfiles, e.key(), e.profile()}, {Family::kPlans, e.key(), e.plan()}});
    if (!s.ok()) {
      r.errors.push_back(absl::StrCat(e.key(), ": storing: ", s.message()));
      continue;
    }
    ++r.imported;
    r.keys.push_back(*key);
  }
  return r;
}

}  // namespace autouvm::profiler
