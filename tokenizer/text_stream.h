// Incremental detokenization for streaming: turns the growing list of generated ids into text chunks
// that are always valid UTF-8, and watches for stop strings.
//
//   TextStream ts(&tokenizer, {"\n\n"});
//   std::string chunk = ts.Push(id);     // text that became final with this token (maybe empty)
//   if (ts.stopped()) ...                // a stop string appeared; the text is cut before it
//   std::string rest = ts.Flush();       // at the end: whatever was held back
//
// Text is held back while it ends in an incomplete UTF-8 character or could be the start of a stop
// string. Not thread-safe: one per request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace autouvm::tokenizer {

class TextStream {
 public:
  TextStream(const Tokenizer* tokenizer, std::vector<std::string> stop_strings);

  std::string Push(int32_t id);
  std::string Flush();
  bool stopped() const { return stopped_; }
  // All text emitted so far (Push and Flush results concatenated; valid UTF-8).
  const std::string& text() const { return text_; }

 private:
  std::string EmitUpTo(size_t end);

  const Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  size_t longest_stop_ = 0;
  std::vector<int32_t> ids_;
  std::string decoded_;
  std::string emitted_;  // the prefix of decoded_ already sent, as decoded (may hold invalid bytes)
  std::string text_;     // what was sent, sanitized
  bool stopped_ = false;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary, leaving out a trailing
// incomplete sequence and a trailing U+FFFD (which sentencepiece yields for a partial byte sequence).
size_t CompleteUtf8Prefix(const std::string& s);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string SanitizeUtf8(const std::string& s);

}  // namespace autouvm::tokenizer
