#include "profiler/profile_repository.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "profiler/profile_codec.h"
#include "profiler/profile_key.h"

namespace autouvm::profiler {

absl::Status ProfileRepository::Put(const autouvm::v1::Profile& profile, const std::string& plan) {
  const std::string key = EncodeKey(profile.key());
  return store_->Write({{Family::kProfiles, key, SealValue(profile)}, {Family::kPlans, key, SealBytes(plan)}});
}

absl::StatusOr<std::optional<autouvm::v1::Profile>> ProfileRepository::Get(const autouvm::v1::ProfileKey& key) const {
  const std::string k = EncodeKey(key);
  ASSIGN_OR_RETURN(std::optional<std::string> value, store_->Get(Family::kProfiles, k));
  if (!value.has_value()) return std::optional<autouvm::v1::Profile>();
  auto profile = OpenValue<autouvm::v1::Profile>(*value, absl::StrCat("profile ", k));
  if (!profile.ok()) {
    ++corrupt_reads_;
    return profile.status();
  }
  return std::optional<autouvm::v1::Profile>(std::move(profile).value());
}

absl::StatusOr<std::optional<std::string>> ProfileRepository::GetPlan(const autouvm::v1::ProfileKey& key) const {
  const std::string k = EncodeKey(key);
  ASSIGN_OR_RETURN(std::optional<std::string> value, store_->Get(Family::kPlans, k));
  if (!value.has_value()) return std::optional<std::string>();
  auto plan = OpenPayload(*value, absl::StrCat("plan ", k));
  if (!plan.ok()) {
    ++corrupt_reads_;
    return plan.status();
  }
  return std::optional<std::string>(std::move(plan).value());
}

absl::StatusOr<std::vector<ProfileRepository::Listed>> ProfileRepository::List(const std::string& model_digest) const {
  ASSIGN_OR_RETURN(std::vector<StoreEntry> entries,
                   store_->List(Family::kProfiles, KeyPrefix(kProfileStoreSchemaVersion, model_digest)));
  std::vector<Listed> out;
  for (StoreEntry& e : entries) {
    auto profile = OpenValue<autouvm::v1::Profile>(e.value, absl::StrCat("profile ", e.key));
    if (!profile.ok()) ++corrupt_reads_;
    out.push_back({std::move(e.key), std::move(profile)});
  }
  return out;
}

absl::Status ProfileRepository::Delete(const autouvm::v1::ProfileKey& key) {
  const std::string k = EncodeKey(key);
  RETURN_IF_ERROR(store_->Delete(Family::kProfiles, k));
  return store_->Delete(Family::kPlans, k);
}

}  // namespace autouvm::profiler
