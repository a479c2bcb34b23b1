#include "profiler/profile_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <map>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace autouvm::profiler {
namespace {

constexpr const char* kFamilyNames[] = {"profiles", "plans", "meta"};
constexpr char kSchemaKey[] = "schema_version";

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument() || s.IsNotSupported()) return absl::FailedPreconditionError(message);
  return absl::UnavailableError(message);
}

class RocksDbStore final : public ProfileStore {
 public:
  RocksDbStore(std::string dir, std::unique_ptr<rocksdb::DB> db, std::vector<rocksdb::ColumnFamilyHandle*> handles)
      : dir_(std::move(dir)), db_(std::move(db)), handles_(std::move(handles)) {}

  ~RocksDbStore() override {
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);  // before the DB closes
  }

  absl::StatusOr<std::optional<std::string>> Get(Family family, std::string_view key) const override {
    std::string value;
    rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), Handle(family), rocksdb::Slice(key.data(), key.size()), &value);
    if (s.IsNotFound()) return std::nullopt;
    if (!s.ok()) return FromRocks(s, absl::StrCat("reading ", dir_));
    return value;
  }

  absl::Status Write(const std::vector<StoreEntry>& entries) override {
    rocksdb::WriteBatch batch;
    for (const auto& e : entries) batch.Put(Handle(e.family), e.key, e.value);
    return FromRocks(db_->Write(WalWrite(), &batch), absl::StrCat("writing ", dir_));
  }

  absl::Status Delete(Family family, std::string_view key) override {
    return FromRocks(db_->Delete(WalWrite(), Handle(family), rocksdb::Slice(key.data(), key.size())),
                     absl::StrCat("deleting from ", dir_));
  }

  absl::StatusOr<std::vector<StoreEntry>> List(Family family, std::string_view prefix) const override {
    std::vector<StoreEntry> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), Handle(family)));
    const rocksdb::Slice start(prefix.data(), prefix.size());
    for (it->Seek(start); it->Valid() && it->key().starts_with(start); it->Next()) {
      out.push_back({family, it->key().ToString(), it->value().ToString()});
    }
    RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("listing ", dir_)));
    return out;
  }

  std::string Describe() const override { return absl::StrCat("rocksdb ", dir_); }

  int64_t MemoryBytes() const override {
    uint64_t memtables = 0, readers = 0;
    // Deliberately unchecked: both are properties every RocksDB has; a failed read counts as 0.
    (void)db_->GetAggregatedIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables);
    (void)db_->GetAggregatedIntProperty(rocksdb::DB::Properties::kEstimateTableReadersMem, &readers);
    return static_cast<int64_t>(memtables + readers);
  }

 private:
  // Note [Unsynced writes]: every batch goes to the write-ahead log with write(2) before Write returns,
  // so a process killed at any point (kill -9, OOM) leaves the batch whole or absent on restart; RocksDB's
  // recovery drops a torn log tail. The batch is not fsync'ed: a power loss may forget the last profiles,
  // which only costs profiling them again, while an fsync per profile stalled the iterations served
  // meanwhile by about one iteration on CI's 2-core VM (bench/results/2026-11-29-profiling-cost.md).
  static rocksdb::WriteOptions WalWrite() {
    rocksdb::WriteOptions o;
    o.sync = false;
    return o;
  }
  // handles_[0] is the default family; ours follow in Family order.
  rocksdb::ColumnFamilyHandle* Handle(Family f) const { return handles_[1 + static_cast<int>(f)]; }

  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

class InMemoryStore final : public ProfileStore {
 public:
  absl::StatusOr<std::optional<std::string>> Get(Family family, std::string_view key) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find({family, std::string(key)});
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }
  absl::Status Write(const std::vector<StoreEntry>& entries) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries) data_[{e.family, e.key}] = e.value;
    return absl::OkStatus();
  }
  absl::Status Delete(Family family, std::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    data_.erase({family, std::string(key)});
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StoreEntry>> List(Family family, std::string_view prefix) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<StoreEntry> out;
    for (auto it = data_.lower_bound({family, std::string(prefix)});
         it != data_.end() && it->first.first == family && it->first.second.compare(0, prefix.size(), prefix) == 0;
         ++it) {
      out.push_back({family, it->first.second, it->second});
    }
    return out;
  }

  std::string Describe() const override { return "memory"; }

  int64_t MemoryBytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t bytes = 0;
    for (const auto& [k, v] : data_) bytes += static_cast<int64_t>(k.second.size() + v.size());
    return bytes;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<Family, std::string>, std::string> data_;
};

}  // namespace

// Note [Memtables of a small store]: RocksDB keeps every write in a memtable until it flushes it to a
// table file, and its default memtable is 64 MiB per column family. A profile written again under its
// key (re-profiled) leaves the old value beside the new one there, so each re-profile of the tiny model
// kept its ~49 KiB profile and plan in memory (the daemon's resident memory grew by that much per
// re-profile, for tens of thousands of them before the first flush, and its write-ahead log as much).
// The store holds kilobytes to megabytes of live data, written rarely: memtables of 1 MiB (two per
// family), flushed once 4 MiB are held in all, keep what it holds for writes bounded whatever the
// number of re-profiles, and the log is recycled at 8 MiB. profile_store_test checks the bound.
constexpr size_t kMemtableBytes = size_t{1} << 20;

absl::StatusOr<std::unique_ptr<ProfileStore>> OpenRocksDbProfileStore(const std::string& dir) {
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.paranoid_checks = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  options.db_write_buffer_size = 4 * kMemtableBytes;
  options.max_total_wal_size = 8 * kMemtableBytes;
  rocksdb::ColumnFamilyOptions family;
  family.write_buffer_size = kMemtableBytes;
  family.max_write_buffer_number = 2;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {{rocksdb::kDefaultColumnFamilyName, family}};
  for (const char* name : kFamilyNames) families.emplace_back(name, family);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, families, &handles, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening the profile store ", dir));
  auto store = std::make_unique<RocksDbStore>(dir, std::unique_ptr<rocksdb::DB>(raw), std::move(handles));

  auto version = store->Get(Family::kMeta, kSchemaKey);
  if (!version.ok()) return version.status();
  if (!version->has_value()) {
    absl::Status w = store->Write({{Family::kMeta, kSchemaKey, std::to_string(kProfileStoreSchemaVersion)}});
    if (!w.ok()) return w;
  } else {
    int v = 0;
    if (!absl::SimpleAtoi(**version, &v) || v != kProfileStoreSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat("the profile store ", dir, " has schema version '", **version,
                                                        "', this autouvmd uses ", kProfileStoreSchemaVersion));
    }
  }
  return store;
}

std::unique_ptr<ProfileStore> NewInMemoryProfileStore() { return std::make_unique<InMemoryStore>(); }

}  // namespace autouvm::profiler
