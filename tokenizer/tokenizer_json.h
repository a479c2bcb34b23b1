// The pieces of a Hugging Face tokenizer.json around its BPE model, as the tokenizers library defines
// them: normalizers (NFC, Prepend, Replace), pre-tokenizers (Split by regex, ByteLevel, Metaspace),
// decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace), each parsed from its JSON (what
// is not supported refused naming the key) and run. tokenizer/bpe_tokenizer.h puts them together with the
// vocabulary, merges and added tokens.
#pragma once

#include <unicode/regex.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace autouvm::tokenizer::tokenizer_json {

// INVALID_ARGUMENT "<origin>: <what>".
absl::Status Bad(const std::string& origin, const std::string& what);

// Note [Byte-level symbols]: byte-level BPE (GPT-2's) works on text where every byte is one printable
// character: bytes that are printable Latin-1 stand for themselves, the others (controls, space, ...)
// for U+0100 onwards in byte order (the space is "Ġ", U+0120). The vocabulary and merges are written in
// those characters.
struct ByteLevelTable {
  std::string of_byte[256];                       // a byte's character, UTF-8
  std::unordered_map<uint32_t, uint8_t> to_byte;  // a character's byte
  ByteLevelTable();
};
const ByteLevelTable& ByteLevel();

// A pre-tokenizer step: a regex to split by (Isolated), ByteLevel's prefix space, or Metaspace's.
struct PreStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
  std::unique_ptr<icu::RegexPattern> split;  // kSplit
  bool add_prefix_space = false;             // kByteLevel
  std::string replacement;                   // kMetaspace: spaces become this ("▁")
  enum class Prepend { kNever, kAlways, kFirst } prepend = Prepend::kAlways;
  bool split_on_replacement = false;  // kMetaspace: each piece starts at a replacement
};

// A normalizer step: NFC, Prepend (a string before the segment) or Replace (a string by another).
struct NormStep {
  enum class Kind { kNfc, kPrepend, kReplace } kind = Kind::kNfc;
  std::string from, to;
};

// A decoder step, over the list of token strings as tokenizers' decode chains them.
struct DecodeStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind = Kind::kByteLevel;
  std::string from, to;                // kReplace; kMetaspace: from = the replacement
  std::string strip;                   // kStrip: the character
  int start = 0, stop = 0;             // kStrip: how many at each end
  bool metaspace_strips_first = true;  // kMetaspace: its prepend scheme is not "never"
};

// Each appends the steps `j` describes (a Sequence gives several); `key` names `j` in errors.
absl::Status ParsePreTokenizer(const nlohmann::json& j, const std::string& origin, const std::string& key,
                               std::vector<PreStep>* steps);
absl::Status ParseNormalizer(const nlohmann::json& j, const std::string& origin, const std::string& key,
                             std::vector<NormStep>* steps);
absl::Status ParseDecoder(const nlohmann::json& j, const std::string& origin, const std::string& key,
                          std::vector<DecodeStep>* steps);

// A segment of text through the normalizer's steps.
absl::Status Normalize(const std::vector<NormStep>& normalizer, std::string* text);
// A normalized segment into the pieces BPE merges within. `at_start`: the segment begins the input
// (Metaspace's prepend scheme "first").
absl::StatusOr<std::vector<std::string>> PreTokenize(const std::vector<PreStep>& steps, const std::string& text,
                                                     bool at_start);
// One decoder step over the token strings, in order (ByteLevel is the caller's: it maps whole strings).
void RunDecoder(const DecodeStep& d, std::vector<std::string>* tokens);

}  // namespace autouvm::tokenizer::tokenizer_json
