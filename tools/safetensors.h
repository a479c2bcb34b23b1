// Reading Hugging Face checkpoints in the safetensors format (https://huggingface.co/docs/safetensors):
// a file is an 8-byte little-endian header length, a JSON header that maps each tensor's name to its
// dtype, shape and byte range, then the tensors' bytes. A checkpoint directory holds one
// model.safetensors, or shards listed by model.safetensors.index.json ("weight_map": name -> file).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(hf_dir));
//   ASSIGN_OR_RETURN(TensorView w, ckpt->View("model.embed_tokens.weight"));   // bytes in place (mmap)
//
// Every malformed file is an INVALID_ARGUMENT naming the file and what is wrong with it (a header
// longer than the file, a tensor whose bytes lie outside it or overlap another's, a shape that does not
// match its byte count, ...); nothing is trusted before it is checked. Views point into read-only
// mappings that live as long as the Checkpoint.
//
// Thread-safety: immutable after Open; View may be called from several threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace autouvm::tools {

// A tensor's dtype as safetensors names it ("BF16", "F16", "F32", ...) and its bytes per element.
struct SafetensorsDtype {
  std::string name;
  int64_t bytes = 0;
};
// One of the dtypes the format defines, or nullptr for a name it does not.
const SafetensorsDtype* FindSafetensorsDtype(const std::string& name);

struct TensorView {
  std::string name;
  std::string dtype;  // as in the file
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // little-endian, row-major
  int64_t bytes = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // NOT_FOUND naming the tensor and the file when it holds no such tensor.
  absl::StatusOr<TensorView> View(const std::string& name) const;
  // The header's "__metadata__" (string to string), empty if absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // within the data section
  };
  std::string path_;
  void* map_ = nullptr;
  int64_t map_bytes_ = 0;
  const uint8_t* data_ = nullptr;  // the data section, after the header
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Parses a safetensors header (the JSON text) for a data section of `data_bytes`; what Open checks.
// Exposed for the fuzzer and the tests.
absl::Status CheckSafetensorsHeader(const std::string& json, int64_t data_bytes, const std::string& origin);

class Checkpoint {
 public:
  // `dir` holds model.safetensors, or model.safetensors.index.json and the shards it names (each
  // tensor must be in the shard the index says; every shard is opened and checked).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  std::vector<std::string> names() const;  // sorted, across shards
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  absl::StatusOr<TensorView> View(const std::string& name) const;
  int64_t total_bytes() const;

 private:
  Checkpoint() = default;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

}  // namespace autouvm::tools
