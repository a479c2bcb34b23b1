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
#include <deque>
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
  // The ids pushed so far decoded as the tokenizer decodes them all at once (Note [Decoding a window]),
  // emitted or not, revisions of text already sent included.
  const std::string& decoded() const { return whole_; }

 private:
  std::string EmitUpTo(const std::string& decoded, size_t end);
  // The text emission works on: whole_, or where the tokenizer revised text already sent, that text
  // followed by the rest of whole_.
  const std::string& Decoded() const;
  // whole_ after ids_ grew by one (Note [Decoding a window]).
  void DecodeGrown();

  const Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  size_t longest_stop_ = 0;
  std::vector<int32_t> ids_;
  // Note [Decoding a window]: a token that began and ended on character boundaries, from which the ids
  // after it may be decoded: its index, whole_'s size after it, and its own decode. Newest last.
  struct Anchor {
    size_t index = 0;
    size_t whole_size = 0;
    std::string text;
  };
  std::deque<Anchor> anchors_;
  bool end_clean_ = true;      // whole_ ended on a character boundary before the push
  std::string whole_;          // the ids decoded all at once
  size_t rewritten_from_ = 0;  // whole_ is as before up to here (this push's anchor's end)
  bool revised_ = false;       // whole_ does not begin with the text already sent
  std::string patched_;        // then: that text, and whole_ after it
  std::string emitted_;        // the text already sent, as decoded (may hold invalid bytes)
  std::string text_;           // what was sent, sanitized
  bool stopped_ = false;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary, leaving out a trailing
// incomplete sequence and a trailing U+FFFD (which sentencepiece yields for a partial byte sequence).
size_t CompleteUtf8Prefix(const std::string& s);
// The same, where s[0, from) is known to end on a character boundary: the scan starts at `from`.
size_t CompleteUtf8PrefixFrom(const std::string& s, size_t from);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string SanitizeUtf8(const std::string& s);

}  // namespace autouvm::tokenizer
