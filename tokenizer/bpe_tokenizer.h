// BpeTokenizer: Hugging Face tokenizer.json files of the BPE model, as transformers' tokenizers library
// encodes and decodes them. Added and special tokens are matched in the text first (the chat templates'
// <|im_start|>, <|eot_id|>, Llama 2's </s>, Mistral's [INST]); then each remaining segment goes through
// the normalizer (none, NFC, Prepend, Replace), the pre-tokenizer (Split by the file's regex, ByteLevel
// with or without GPT-2's regex, Metaspace) and BPE merges by rank. Two kinds (Note [Two kinds of BPE]):
// byte-level (GPT-2, Llama 3, Qwen2), whose symbols are bytes, and sentencepiece's (Llama 2, Mistral),
// whose symbols are characters, a space being "▁", with byte fallback or the unknown token for the
// others; decoding runs the file's decoders (ByteLevel; Replace, ByteFallback, Fuse, Strip, Metaspace).
// The normalizers, pre-tokenizers and decoders are tokenizer/tokenizer_json.h's. Unicode classes and
// normalization come from ICU (libicu), which tokenizers' regexes need.
//
//   ASSIGN_OR_RETURN(auto t, BpeTokenizer::Load(entry_dir + "/tokenizer.json"));
//   ASSIGN_OR_RETURN(std::vector<int32_t> ids, t->Encode("<|im_start|>user\nHello"));
//
// What such a file can hold that this does not implement (another model type, another normalizer,
// pre-tokenizer or decoder, a regex where a string is expected) is refused at load, naming the key: never
// a tokenizer that splits text differently from the one the model was trained with.
//
// Thread-safety: immutable after Load; Encode and Decode may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  // INVALID_ARGUMENT naming the file and the key for anything malformed or not supported.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Parse(const std::string& json_text, const std::string& origin);
  ~BpeTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // Added tokens (special ones too) decode to their text, as transformers' decode does by default.
  std::string Decode(absl::Span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "bpe"; }

  // The id of an added token by its text ("<|eot_id|>"), or -1.
  int32_t AddedTokenId(std::string_view content) const;
  // The token the post-processor puts before a single sequence (Llama 3's <|begin_of_text|>), or -1
  // (Qwen2 adds none).
  int32_t template_bos_id() const;

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autouvm::tokenizer
