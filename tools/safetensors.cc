#include "tools/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "tools/json_file.h"

namespace autouvm::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A header past this is not a checkpoint's (real ones are well under 1 MiB: a few hundred tensors).
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

absl::Status Bad(const std::string& origin, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

struct ParsedEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
};

struct ParsedHeader {
  std::vector<ParsedEntry> entries;
  std::map<std::string, std::string> metadata;
};

absl::StatusOr<ParsedHeader> ParseHeader(const std::string& text, int64_t data_bytes, const std::string& origin) {
  const json h = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return Bad(origin, "the header is not JSON");
  if (!h.is_object()) return Bad(origin, "the header is not a JSON object");
  ParsedHeader out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Bad(origin, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return Bad(origin, absl::StrCat("__metadata__.", m.key(), " is not a string"));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor \"", name, "\"");
    if (!v.is_object()) return Bad(origin, absl::StrCat(where, " is not an object"));
    ParsedEntry e;
    e.name = name;
    const auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string()) return Bad(origin, absl::StrCat(where, ": no dtype"));
    e.dtype = dtype->get<std::string>();
    const SafetensorsDtype* d = FindSafetensorsDtype(e.dtype);
    if (d == nullptr) return Bad(origin, absl::StrCat(where, ": unknown dtype \"", e.dtype, "\""));
    const auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array()) return Bad(origin, absl::StrCat(where, ": no shape"));
    int64_t numel = 1;
    for (const json& s : *shape) {
      if (!s.is_number_unsigned()) return Bad(origin, absl::StrCat(where, ": shape ", shape->dump(), " is not sizes"));
      const uint64_t n = s.get<uint64_t>();
      if (n > (uint64_t{1} << 40) || (n != 0 && numel > (int64_t{1} << 50) / static_cast<int64_t>(n))) {
        return Bad(origin, absl::StrCat(where, ": shape ", shape->dump(), " is too large"));
      }
      e.shape.push_back(static_cast<int64_t>(n));
      numel *= static_cast<int64_t>(n);
    }
    const auto offsets = v.find("data_offsets");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return Bad(origin, absl::StrCat(where, ": data_offsets is not [begin, end]"));
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_bytes)) {
      return Bad(origin, absl::StrCat(where, ": bytes [", begin, ", ", end, ") lie outside the ", data_bytes,
                                      " bytes of data after the header (a truncated file?)"));
    }
    e.begin = static_cast<int64_t>(begin);
    e.end = static_cast<int64_t>(end);
    if (e.end - e.begin != numel * d->bytes) {
      return Bad(origin, absl::StrCat(where, ": ", e.end - e.begin, " bytes for shape ", shape->dump(), " of ", e.dtype,
                                      " (", numel * d->bytes, " expected)"));
    }
    out.entries.push_back(std::move(e));
  }
  // No two tensors share bytes.
  std::vector<const ParsedEntry*> by_offset;
  for (const ParsedEntry& e : out.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ParsedEntry* a, const ParsedEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return Bad(origin,
                 absl::StrCat("tensors \"", by_offset[i - 1]->name, "\" and \"", by_offset[i]->name, "\" overlap"));
    }
  }
  return out;
}

}  // namespace

const SafetensorsDtype* FindSafetensorsDtype(const std::string& name) {
  static const SafetensorsDtype kDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                                             {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                                             {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const SafetensorsDtype& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

absl::Status CheckSafetensorsHeader(const std::string& json_text, int64_t data_bytes, const std::string& origin) {
  return ParseHeader(json_text, data_bytes, origin).status();
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  const int64_t size = st.st_size;
  if (size < 8) {
    close(fd);
    return Bad(path, absl::StrCat("not a safetensors file: ", size, " bytes, shorter than its 8-byte header length"));
  }
  void* map = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": cannot map: ", std::strerror(errno)));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;
  f->map_bytes_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian
  if (header_len > kMaxHeaderBytes || header_len > static_cast<uint64_t>(size - 8)) {
    return Bad(path, absl::StrCat("not a safetensors file: its header length (", header_len,
                                  " bytes) does not fit in its ", size, " bytes"));
  }
  const std::string header(reinterpret_cast<const char*>(bytes + 8), header_len);
  const int64_t data_bytes = size - 8 - static_cast<int64_t>(header_len);
  ASSIGN_OR_RETURN(ParsedHeader parsed, ParseHeader(header, data_bytes, path));
  f->data_ = bytes + 8 + header_len;
  for (ParsedEntry& e : parsed.entries) {
    f->entries_[e.name] = Entry{std::move(e.dtype), std::move(e.shape), e.begin, e.end};
  }
  f->metadata_ = std::move(parsed.metadata);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, static_cast<size_t>(map_bytes_));
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

absl::StatusOr<TensorView> SafetensorsFile::View(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat(path_, ": no tensor \"", name, "\""));
  const Entry& e = it->second;
  return TensorView{name, e.dtype, e.shape, data_ + e.begin, e.end - e.begin};
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    if (!fs::exists(single, ec)) {
      return absl::NotFoundError(
          absl::StrCat(dir,
                       ": neither model.safetensors nor model.safetensors.index.json (only safetensors "
                       "checkpoints are read; convert .bin files with transformers first)"));
    }
    ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single.string()));
    for (const std::string& n : f->names()) c->where_[n] = f.get();
    c->files_.push_back(std::move(f));
    return c;
  }
  const std::string origin = index.string();
  ASSIGN_OR_RETURN(const json j, ReadJsonObject(origin));
  const auto map = j.find("weight_map");
  if (map == j.end() || !map->is_object()) return Bad(origin, "no weight_map object");
  std::map<std::string, std::string> shard_of;
  std::set<std::string> shards;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) return Bad(origin, absl::StrCat("weight_map.", it.key(), " is not a file name"));
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Bad(origin, absl::StrCat("weight_map.", it.key(), ": \"", file, "\" is not a file in ", dir));
    }
    shard_of[it.key()] = file;
    shards.insert(file);
  }
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const std::string& s : shards) {
    ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open((fs::path(dir) / s).string()));
    by_file[s] = f.get();
    c->files_.push_back(std::move(f));
  }
  for (const auto& [name, file] : shard_of) {
    const SafetensorsFile* f = by_file.at(file);
    if (!f->has(name)) {
      return Bad(origin, absl::StrCat("weight_map puts \"", name, "\" in ", file, ", which does not hold it"));
    }
    c->where_[name] = f;
  }
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : where_) out.push_back(name);
  return out;
}

absl::StatusOr<TensorView> Checkpoint::View(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return absl::NotFoundError(absl::StrCat("the checkpoint has no tensor \"", name, "\""));
  return it->second->View(name);
}

int64_t Checkpoint::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, f] : where_) total += f->View(name)->bytes;
  return total;
}

}  // namespace autouvm::tools
