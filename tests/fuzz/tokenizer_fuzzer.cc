// libFuzzer target: the byte tokenizer, the BPE tokenizer (tokenizer/bpe_tokenizer.h, on the tests' small
// tokenizer.json files: byte-level, and sentencepiece's kind in Llama 2's layout) and streaming
// detokenization (tokenizer/tokenizer.h, tokenizer/text_stream.h). Text round-trips through all three (valid
// UTF-8 text through the BPE ones; for sentencepiece's kind, text without "▁" or special-token text,
// which transformers does not give back either); ids of any value stream out as valid UTF-8 whatever
// they are; the stop string never appears in what was sent.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/testing/bpe_fixture.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
bool ValidUtf8(const std::string& s) { return autouvm::tokenizer::SanitizeUtf8(s) == s; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const autouvm::tokenizer::ByteTokenizer tokenizer(320, 256, 257);
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = tokenizer.Encode(text);
  Check(ids.ok() && tokenizer.Decode(*ids) == text);
  // The same bytes as a stream of ids (two bytes each, any value), with a stop string.
  autouvm::tokenizer::TextStream stream(&tokenizer, {"\n\n"});
  std::string sent;
  for (size_t i = 0; i + 1 < size && !stream.stopped(); i += 2) {
    const int32_t id = static_cast<int32_t>((data[i] << 8 | data[i + 1]) % 400) - 40;  // some outside 0..319
    sent += stream.Push(id);
  }
  sent += stream.Flush();
  Check(sent == stream.text());
  Check(ValidUtf8(sent));
  Check(sent.find("\n\n") == std::string::npos);
  Check(ValidUtf8(autouvm::tokenizer::SanitizeUtf8(text)));
  // The BPE tokenizer: what requests give it is valid UTF-8 (request validation), which comes back whole.
  static const auto bpe = autouvm::tokenizer::BpeTokenizer::Parse(autouvm::testing::TokenizerJson().dump(), "fuzz");
  Check(bpe.ok());
  if (ValidUtf8(text)) {
    auto bpe_ids = (*bpe)->Encode(text);
    Check(bpe_ids.ok() && (*bpe)->Decode(*bpe_ids) == text);
  }
  static const auto sp = autouvm::tokenizer::BpeTokenizer::Parse(
      autouvm::testing::SentencePieceStyleJson("llama2").dump(), "fuzz-sentencepiece-kind");
  Check(sp.ok());
  if (ValidUtf8(text)) {
    auto sp_ids = (*sp)->Encode(text);  // byte fallback: every character has ids
    Check(sp_ids.ok());
    const std::string back = (*sp)->Decode(*sp_ids);
    Check(ValidUtf8(back));
    const bool plain = text.find("\xE2\x96\x81") == std::string::npos && text.find("<s>") == std::string::npos &&
                       text.find("</s>") == std::string::npos && text.find("<unk>") == std::string::npos;
    if (plain) Check(back == text);
  }
  return 0;
}
