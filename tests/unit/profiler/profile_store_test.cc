// ProfileStore on a real RocksDB in a temp dir, and its in-memory twin.
#include "profiler/profile_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace autouvm::profiler {
namespace {

TEST(RocksDbProfileStoreTest, WritesSurviveReopening) {
  testing::TempDir dir;
  {
    auto store = OpenRocksDbProfileStore(dir.Sub("db"));
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write({{Family::kProfiles, "k1", "profile-1"}, {Family::kPlans, "k1", "plan-1"}}).ok());
    EXPECT_EQ((*store)->Describe(), "rocksdb " + dir.Sub("db"));
  }
  auto store = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto profile = (*store)->Get(Family::kProfiles, "k1");
  ASSERT_TRUE(profile.ok());
  EXPECT_EQ(profile->value_or(""), "profile-1");
  auto plan = (*store)->Get(Family::kPlans, "k1");
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->value_or(""), "plan-1");
  // Families are separate key spaces.
  auto missing = (*store)->Get(Family::kPlans, "profile-1");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE((*store)->Delete(Family::kProfiles, "k1").ok());
  EXPECT_FALSE((*store)->Get(Family::kProfiles, "k1")->has_value());
  EXPECT_EQ((*store)->Get(Family::kMeta, "schema_version")->value_or(""), std::to_string(kProfileStoreSchemaVersion));
}

// Note [Memtables of a small store]: a profile and plan rewritten under their key (a re-profile) kept
// every old value in RocksDB's 64 MiB memtables: ~49 KiB of the daemon's memory per re-profile.
TEST(RocksDbProfileStoreTest, RewritingOneKeyKeepsTheStoresMemoryBounded) {
  testing::TempDir dir;
  auto store = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_TRUE(store.ok()) << store.status();
  std::string profile(40 << 10, 'p'), plan(9 << 10, 'q');
  int64_t most = 0;
  for (int i = 0; i < 600; ++i) {  // 600 re-profiles: 29 MiB written
    profile[0] = plan[0] = static_cast<char>('a' + i % 26);
    ASSERT_TRUE((*store)->Write({{Family::kProfiles, "k", profile}, {Family::kPlans, "k", plan}}).ok());
    most = std::max(most, (*store)->MemoryBytes());
  }
  EXPECT_GT(most, 0);
  EXPECT_LT(most, int64_t{8} << 20);
  EXPECT_EQ((*store)->Get(Family::kProfiles, "k")->value_or(""), profile);
  EXPECT_EQ((*store)->Get(Family::kPlans, "k")->value_or(""), plan);
}

TEST(RocksDbProfileStoreTest, RefusesAnotherSchemaVersion) {
  testing::TempDir dir;
  {
    auto store = OpenRocksDbProfileStore(dir.Sub("db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Write({{Family::kMeta, "schema_version", "999"}}).ok());
  }
  auto store = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("999"), std::string::npos) << store.status();
}

TEST(RocksDbProfileStoreTest, ADirectoryThatIsAFileIsAnErrorNamingIt) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("db")) << "not a directory";
  auto store = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(dir.Sub("db")), std::string::npos) << store.status();
}

TEST(RocksDbProfileStoreTest, ACorruptDatabaseIsReportedNotFatal) {
  testing::TempDir dir;
  { ASSERT_TRUE(OpenRocksDbProfileStore(dir.Sub("db")).ok()); }
  // Point CURRENT at a manifest that does not exist.
  std::ofstream(dir.Sub("db/CURRENT"), std::ios::trunc) << "MANIFEST-999999\n";
  auto store = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(dir.Sub("db")), std::string::npos) << store.status();
}

TEST(RocksDbProfileStoreTest, ASecondOpenOfTheSameDatabaseIsUnavailable) {
  testing::TempDir dir;
  auto first = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_TRUE(first.ok());
  auto second = OpenRocksDbProfileStore(dir.Sub("db"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(InMemoryProfileStoreTest, BehavesLikeTheDatabase) {
  auto store = NewInMemoryProfileStore();
  ASSERT_TRUE(store->Write({{Family::kProfiles, "k", "v"}}).ok());
  EXPECT_EQ(store->Get(Family::kProfiles, "k")->value_or(""), "v");
  EXPECT_FALSE(store->Get(Family::kPlans, "k")->has_value());
  ASSERT_TRUE(store->Delete(Family::kProfiles, "k").ok());
  EXPECT_FALSE(store->Get(Family::kProfiles, "k")->has_value());
  EXPECT_EQ(store->Describe(), "memory");
}

}  // namespace
}  // namespace autouvm::profiler
