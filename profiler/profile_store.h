// ProfileStore: where what the daemon learns about a model (profiles, plans) persists across restarts.
// A key-value store with three families, written atomically in batches:
//
//   ASSIGN_OR_RETURN(auto store, OpenRocksDbProfileStore(state_dir + "/profiles"));
//   RETURN_IF_ERROR(store->Write({{Family::kProfiles, key, profile}, {Family::kPlans, key, plan}}));
//   ASSIGN_OR_RETURN(std::optional<std::string> v, store->Get(Family::kProfiles, key));
//
// The RocksDB store keeps a schema version in the meta family and refuses a database written with
// another one; the in-memory store is the fallback when no database can be opened. docs/profile-store.md
// describes the layout. Implementations are safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace autouvm::profiler {

enum class Family { kProfiles, kPlans, kMeta };

struct StoreEntry {
  Family family;
  std::string key;
  std::string value;
};

class ProfileStore {
 public:
  virtual ~ProfileStore() = default;
  virtual absl::StatusOr<std::optional<std::string>> Get(Family family, std::string_view key) const = 0;
  // All entries become visible together or not at all; once this returns OK they survive the process
  // being killed (not necessarily a power loss: Note [Unsynced writes] in profile_store.cc).
  virtual absl::Status Write(const std::vector<StoreEntry>& entries) = 0;
  virtual absl::Status Delete(Family family, std::string_view key) = 0;
  // Every entry of `family` whose key starts with `prefix`, in key order.
  virtual absl::StatusOr<std::vector<StoreEntry>> List(Family family, std::string_view prefix) const = 0;
  // "rocksdb <path>" or "memory", for logs and status.
  virtual std::string Describe() const = 0;
  // Memory the store holds for what was written: RocksDB's memtables and table readers, or the map's
  // keys and values (Note [Memtables of a small store], profile_store.cc).
  virtual int64_t MemoryBytes() const = 0;
};

inline constexpr int kProfileStoreSchemaVersion = 1;

// Opens (creating if needed) a RocksDB database in `dir`. Errors name the path and what is wrong:
// FAILED_PRECONDITION for another schema version, DATA_LOSS for corruption, UNAVAILABLE for I/O trouble
// (unwritable directory, a lock held by another process).
absl::StatusOr<std::unique_ptr<ProfileStore>> OpenRocksDbProfileStore(const std::string& dir);
std::unique_ptr<ProfileStore> NewInMemoryProfileStore();

}  // namespace autouvm::profiler
