// Tokenizers: text <-> token ids for a model repository entry.
//
// ByteTokenizer maps each UTF-8 byte to its own id (0..255) with bos/eos after them; it is the default.
// SentencePieceTokenizer wraps Debian's libsentencepiece for entries that ship tokenizer.model;
// BpeTokenizer (tokenizer/bpe_tokenizer.h) reads Hugging Face BPE tokenizer.json files (byte-level,
// sentencepiece-kind). Instances are immutable after Create and safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace autouvm::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to ids, without bos/eos (the caller adds bos).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // Ids to text. The result may end in an incomplete UTF-8 sequence (byte tokenizer) or U+FFFD
  // (sentencepiece byte fallback) when the ids stop mid-character; TextStream holds those back.
  virtual std::string Decode(absl::Span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;
};

// Byte-level tokenizer ids: 0..255 are bytes, then these.
inline constexpr int64_t kByteBosId = 256;
inline constexpr int64_t kByteEosId = 257;
inline constexpr int64_t kByteVocabMin = 258;

class ByteTokenizer : public Tokenizer {
 public:
  ByteTokenizer(int64_t vocab_size, int64_t bos_id, int64_t eos_id);
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  std::string Decode(absl::Span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string kind() const override { return "byte"; }

 private:
  int64_t vocab_size_;
};

// What a model entry says of its tokenizer (engine::TokenizerSpecOf reads it from model.yaml).
struct TokenizerSpec {
  std::string kind = "byte";  // "byte", "bpe" (tokenizer.json) or "sentencepiece" (tokenizer.model)
  int64_t vocab_size = 0;     // the model's; the tokenizer's ids must fit below it
  int64_t bos_id = 0;
  int64_t eos_id = 0;
};

// Picks the tokenizer `spec` names; `entry_dir` holds tokenizer.model or tokenizer.json.
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const TokenizerSpec& spec, const std::string& entry_dir);

}  // namespace autouvm::tokenizer
