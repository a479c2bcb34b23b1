#include "tokenizer/text_stream.h"

#include <algorithm>

#include "absl/types/span.h"

namespace autouvm::tokenizer {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid, or -1 if it is a valid
// start cut short by the end of the string.
int SequenceLength(const std::string& s, size_t i) {
  const unsigned char c = s[i];
  int len;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
    len = 2;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
  } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
    len = 4;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return -1;
    const unsigned char cc = s[i + k];
    if ((cc & 0xC0) != 0x80) return 0;
    if (k == 1) {  // overlong and surrogate forms
      if (c == 0xE0 && cc < 0xA0) return 0;
      if (c == 0xED && cc > 0x9F) return 0;
      if (c == 0xF0 && cc < 0x90) return 0;
      if (c == 0xF4 && cc > 0x8F) return 0;
    }
  }
  return len;
}

}  // namespace

size_t CompleteUtf8Prefix(const std::string& s) { return CompleteUtf8PrefixFrom(s, 0); }

size_t CompleteUtf8PrefixFrom(const std::string& s, size_t from) {
  size_t i = from;
  while (i < s.size()) {
    const int len = SequenceLength(s, i);
    if (len < 0) break;
    i += len == 0 ? 1 : len;  // invalid bytes are final: sanitizing replaces them
  }
  // A byte-fallback tokenizer (sentencepiece, or a tokenizer.json with ByteFallback) decodes each byte
  // of a character it has not finished as U+FFFD: up to three of them can still become one character.
  for (int k = 0; k < 3 && i >= 3 && s.compare(i - 3, 3, kReplacement) == 0; ++k) i -= 3;
  return i;
}

std::string SanitizeUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int len = SequenceLength(s, i);
    if (len > 0) {
      out.append(s, i, len);
      i += len;
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  return out;
}

TextStream::TextStream(const Tokenizer* tokenizer, std::vector<std::string> stop_strings)
    : tokenizer_(tokenizer), stops_(std::move(stop_strings)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) longest_stop_ = std::max(longest_stop_, s.size());
}

std::string TextStream::EmitUpTo(const std::string& decoded, size_t end) {
  if (end <= emitted_.size()) return std::string();
  std::string chunk = SanitizeUtf8(decoded.substr(emitted_.size(), end - emitted_.size()));
  emitted_.append(decoded, emitted_.size(), end - emitted_.size());
  text_ += chunk;
  return chunk;
}

const std::string& TextStream::Decoded() const { return revised_ ? patched_ : whole_; }

// Note [Decoding a window]: a tokenizer's decode is not the concatenation of its tokens' texts —
// sentencepiece (and tokenizer.json's Strip and Metaspace decoders) drop the leading space of the text's
// first token; byte-fallback and byte-level tokens join into characters across tokens, and Hugging Face's
// ByteFallback decoder turns a whole run of byte tokens into U+FFFDs while its bytes are not valid UTF-8
// (a run that was "ét" becomes four U+FFFD when the first byte of the next character arrives) — so
// decoding the new token alone is wrong, and decoding every id at each push (what this did before) is
// right but costs the whole output at every token: quadratic in a long generation, on the scheduler's
// thread, for every row of every pass. So a push decodes only from an anchor: a token that began and
// ended on character boundaries of the whole text (the text ended cleanly both before and after it was
// pushed), whose own decode and whose end in the whole text were kept. The whole text is then the text up
// to the anchor's end followed by what the decode from the anchor has beyond the anchor's own decode: the
// anchor takes the start-of-text rules in both decodes alike, and a character cut across tokens lies
// after it whole. Where the decode from the anchor does not begin with the anchor's own decode, the
// decoder changed text at or before it (a byte run grown invalid that began before an anchor on one of
// its ASCII bytes): an older anchor is tried, and with none left, every id is decoded. A run of byte
// tokens is decoded from the anchor before it at every push until it ends. TextStreamWindowTest checks
// the result against the whole decode after every push, for every kind of tokenizer here.
void TextStream::DecodeGrown() {
  constexpr size_t kAnchors = 16;
  const absl::Span<const int32_t> all(ids_);
  bool decoded = false;
  while (!anchors_.empty() && !decoded) {
    const Anchor& a = anchors_.back();
    const std::string from = tokenizer_->Decode(all.subspan(a.index));
    if (from.compare(0, a.text.size(), a.text) == 0) {
      whole_.resize(a.whole_size);
      whole_.append(from, a.text.size());
      decoded = true;
    } else {
      anchors_.pop_back();
    }
  }
  rewritten_from_ = decoded ? anchors_.back().whole_size : 0;
  if (!decoded) whole_ = tokenizer_->Decode(all);
  const bool clean = CompleteUtf8PrefixFrom(whole_, rewritten_from_) == whole_.size();
  if (clean && end_clean_) {
    const size_t last = ids_.size() - 1;
    anchors_.push_back({.index = last, .whole_size = whole_.size(), .text = tokenizer_->Decode(all.subspan(last))});
    if (anchors_.size() > kAnchors) anchors_.pop_front();
  }
  end_clean_ = clean;
}

std::string TextStream::Push(int32_t id) {
  if (stopped_) return std::string();
  ids_.push_back(id);
  DecodeGrown();
  // Only whole_ from rewritten_from_ on can differ from the last push's: the text already sent is checked
  // from there (from its start while a revision stands).
  const size_t sent = emitted_.size();
  const size_t check_from = revised_ ? 0 : std::min(rewritten_from_, sent);
  revised_ = whole_.compare(check_from, sent - check_from, emitted_, check_from, sent - check_from) != 0;
  if (revised_) {
    // The tokenizer revised text it had already produced (rare); keep what was sent and go on from it.
    patched_ = emitted_ + whole_.substr(std::min(whole_.size(), sent));
  }
  const std::string& decoded = Decoded();
  // A stop string can only newly appear in the tail that was not yet emitted plus its own length.
  const size_t search_from = sent > longest_stop_ ? sent - longest_stop_ : 0;
  size_t first_stop = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = decoded.find(s, search_from);
    if (at != std::string::npos) first_stop = std::min(first_stop, at);
  }
  if (first_stop != std::string::npos) {
    stopped_ = true;
    return EmitUpTo(decoded, std::max(first_stop, sent));
  }
  // What was sent ends on a character boundary: the scan starts there.
  size_t end = CompleteUtf8PrefixFrom(decoded, sent);
  // Hold back a tail that could still grow into a stop string.
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, decoded.size()); k > 0; --k) {
      if (decoded.compare(decoded.size() - k, k, s, 0, k) == 0) {
        end = std::min(end, decoded.size() - k);
        break;
      }
    }
  }
  return EmitUpTo(decoded, end);
}

std::string TextStream::Flush() {
  if (stopped_) return std::string();
  const std::string& decoded = Decoded();
  return EmitUpTo(decoded, decoded.size());
}

}  // namespace autouvm::tokenizer
