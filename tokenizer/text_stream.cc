#include "tokenizer/text_stream.h"

#include <algorithm>

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

size_t CompleteUtf8Prefix(const std::string& s) {
  size_t i = 0;
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

std::string TextStream::EmitUpTo(size_t end) {
  if (end <= emitted_.size()) return std::string();
  std::string chunk = SanitizeUtf8(decoded_.substr(emitted_.size(), end - emitted_.size()));
  emitted_.append(decoded_, emitted_.size(), end - emitted_.size());
  text_ += chunk;
  return chunk;
}

std::string TextStream::Push(int32_t id) {
  if (stopped_) return std::string();
  ids_.push_back(id);
  // Note [Whole-sequence decode]: decoding all ids each time is what makes sentencepiece's leading-space
  // and byte-fallback rules come out right; it is linear per token in the output length.
  decoded_ = tokenizer_->Decode(ids_);
  if (decoded_.compare(0, emitted_.size(), emitted_) != 0) {
    // The tokenizer revised text it had already produced (rare); keep what was sent and go on from it.
    decoded_ = emitted_ + decoded_.substr(std::min(decoded_.size(), emitted_.size()));
  }
  // A stop string can only newly appear in the tail that was not yet emitted plus its own length.
  const size_t search_from = emitted_.size() > longest_stop_ ? emitted_.size() - longest_stop_ : 0;
  size_t first_stop = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = decoded_.find(s, search_from);
    if (at != std::string::npos) first_stop = std::min(first_stop, at);
  }
  if (first_stop != std::string::npos) {
    stopped_ = true;
    return EmitUpTo(std::max(first_stop, emitted_.size()));
  }
  size_t end = CompleteUtf8Prefix(decoded_);
  // Hold back a tail that could still grow into a stop string.
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, decoded_.size()); k > 0; --k) {
      if (decoded_.compare(decoded_.size() - k, k, s, 0, k) == 0) {
        end = std::min(end, decoded_.size() - k);
        break;
      }
    }
  }
  return EmitUpTo(end);
}

std::string TextStream::Flush() {
  if (stopped_) return std::string();
  return EmitUpTo(decoded_.size());
}

}  // namespace autouvm::tokenizer
