// Profiles and plans on a real RocksDB in a temporary directory (and on the in-memory store): written
// together, kept across reopening, listed per model, damaged entries reported and counted.
#include "profiler/profile_repository.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profiler/profile_key.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::profiler {
namespace {

using ::testing::HasSubstr;

const std::string kModelA(64, 'a');
const std::string kModelB(64, 'b');

autouvm::v1::Profile ProfileOf(const autouvm::v1::ProfileKey& key, double seconds) {
  autouvm::v1::Profile p;
  *p.mutable_key() = key;
  p.set_iteration_seconds(seconds);
  p.mutable_trace()->add_ops()->set_kernel("aten::mm#0");
  return p;
}

TEST(ProfileRepositoryTest, ProfilesAndPlansSurviveReopeningTheDatabase) {
  testing::TempDir dir;
  const auto key = DecodeKey(kModelA, 4, "h200-pcie5", 1 << 30, "autouvm");
  {
    auto store = OpenRocksDbProfileStore(dir.Sub("profiles"));
    ASSERT_TRUE(store.ok()) << store.status();
    ProfileRepository repo(store->get());
    ASSERT_TRUE(repo.Put(ProfileOf(key, 0.25), "plan bytes").ok());
  }
  auto store = OpenRocksDbProfileStore(dir.Sub("profiles"));
  ASSERT_TRUE(store.ok()) << store.status();
  ProfileRepository repo(store->get());
  auto got = repo.Get(key);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->iteration_seconds(), 0.25);
  EXPECT_EQ(*repo.GetPlan(key).value(), "plan bytes");
  // Another bucket of the same model has no profile.
  auto other = repo.Get(DecodeKey(kModelA, 8, "h200-pcie5", 1 << 30, "autouvm"));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value());
}

TEST(ProfileRepositoryTest, ADamagedEntryIsDataLossCountedAndReplacedByTheNextPut) {
  testing::TempDir dir;
  auto store = OpenRocksDbProfileStore(dir.Sub("profiles"));
  ASSERT_TRUE(store.ok()) << store.status();
  ProfileRepository repo(store->get());
  const auto key = PrefillKey(kModelA, 1, 100, "h200-pcie5", 1 << 30, "autouvm");
  ASSERT_TRUE(repo.Put(ProfileOf(key, 0.5), "plan").ok());
  // Damage the stored profile: one byte of its value flipped, as a bad disk or a torn write would.
  std::string value = (*store)->Get(Family::kProfiles, EncodeKey(key)).value().value();
  value[value.size() / 2] = static_cast<char>(value[value.size() / 2] ^ 1);
  ASSERT_TRUE((*store)->Write({{Family::kProfiles, EncodeKey(key), value}}).ok());

  auto got = repo.Get(key);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(EncodeKey(key)));
  EXPECT_EQ(repo.corrupt_reads(), 1);
  ASSERT_TRUE(repo.Put(ProfileOf(key, 0.75), "plan 2").ok());  // re-profiled
  EXPECT_EQ(repo.Get(key).value()->iteration_seconds(), 0.75);
}

void ListsPerModel(ProfileStore* store) {
  ProfileRepository repo(store);
  for (int batch : {1, 2, 4}) {
    ASSERT_TRUE(repo.Put(ProfileOf(DecodeKey(kModelA, batch, "h200-pcie5", 0, "autouvm"), batch), "p").ok());
  }
  ASSERT_TRUE(repo.Put(ProfileOf(DecodeKey(kModelB, 1, "h200-pcie5", 0, "autouvm"), 9), "p").ok());
  auto a = repo.List(kModelA);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 3u);
  for (const auto& l : *a) {
    ASSERT_TRUE(l.profile.ok());
    EXPECT_EQ(l.profile->key().model_digest(), kModelA);
  }
  ASSERT_TRUE(repo.Delete(DecodeKey(kModelA, 2, "h200-pcie5", 0, "autouvm")).ok());
  EXPECT_EQ(repo.List(kModelA)->size(), 2u);
  EXPECT_EQ(repo.List(kModelB)->size(), 1u);
  EXPECT_FALSE(repo.GetPlan(DecodeKey(kModelA, 2, "h200-pcie5", 0, "autouvm")).value().has_value());
}

TEST(ProfileRepositoryTest, ListingIsPerModelOnRocksDb) {
  testing::TempDir dir;
  auto store = OpenRocksDbProfileStore(dir.Sub("profiles"));
  ASSERT_TRUE(store.ok()) << store.status();
  ListsPerModel(store->get());
}

TEST(ProfileRepositoryTest, ListingIsPerModelInMemory) { ListsPerModel(NewInMemoryProfileStore().get()); }

}  // namespace
}  // namespace autouvm::profiler
