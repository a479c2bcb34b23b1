#include "tokenizer/chat_template_text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace autouvm::tokenizer::chat_template {

uint32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  *len = 1;
  if (b < 0x80) return b;
  size_t n = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((b & 0xE0) == 0xC0) {
    n = 2, cp = b & 0x1F, min = 0x80;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3, cp = b & 0x0F, min = 0x800;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4, cp = b & 0x07, min = 0x10000;
  } else {
    return b;
  }
  if (i + n > s.size()) return b;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return b;
    cp = cp << 6 | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return b;
  *len = n;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | cp >> 6));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | cp >> 12));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | cp >> 18));
    out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<std::string_view> Chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    DecodeAt(s, i, &len);
    out.push_back(s.substr(i, len));
  }
  return out;
}

size_t CharCount(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++count) DecodeAt(s, i, &len);
  return count;
}

bool IsSpace(uint32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return true;
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t SpaceAt(std::string_view s, size_t i) {
  size_t len = 0;
  return IsSpace(DecodeAt(s, i, &len)) ? len : 0;
}

bool IsPrintable(uint32_t c) {
  if (c < 0x80) return c >= 0x20 && c < 0x7F;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

namespace {

// Strips the characters `strip` says yes to from the ends of `s`.
template <typename Pred>
std::string_view StripIf(std::string_view s, bool left, bool right, Pred strip) {
  const std::vector<std::string_view> chars = Chars(s);
  size_t begin = 0;
  size_t end = chars.size();
  if (left)
    while (begin < end && strip(chars[begin])) ++begin;
  if (right)
    while (end > begin && strip(chars[end - 1])) --end;
  if (begin == end) return s.substr(0, 0);
  const size_t from = chars[begin].data() - s.data();
  const size_t to = chars[end - 1].data() + chars[end - 1].size() - s.data();
  return s.substr(from, to - from);
}

std::string ToUtf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

// Python's "cased" characters: those with an upper, lower or title case form.
bool IsCased(UChar32 c) { return u_hasBinaryProperty(c, UCHAR_CASED); }

}  // namespace

std::string_view StripSpace(std::string_view s, bool left, bool right) {
  return StripIf(s, left, right, [](std::string_view c) {
    size_t len = 0;
    return IsSpace(DecodeAt(c, 0, &len));
  });
}

std::string_view StripChars(std::string_view s, std::string_view chars, bool left, bool right) {
  const std::vector<std::string_view> set = Chars(chars);
  return StripIf(s, left, right, [&set](std::string_view c) {
    for (std::string_view x : set)
      if (x == c) return true;
    return false;
  });
}

std::string Upper(std::string_view s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  return ToUtf8(u.toUpper(icu::Locale::getRoot()));
}

std::string Lower(std::string_view s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  return ToUtf8(u.toLower(icu::Locale::getRoot()));
}

namespace {

// One character title-cased with its full mapping, as Python's: "ß" is "Ss", "ﬁ" is "Fi".
std::string TitleChar(UChar32 c) {
  icu::UnicodeString u(c);
  return ToUtf8(u.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT));
}

}  // namespace

std::string Title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const uint32_t c = DecodeAt(s, i, &len);
    if (len == 1 && c >= 0x80) {  // not UTF-8: as it is
      out.push_back(s[i]);
      previous_cased = false;
      continue;
    }
    const auto u = static_cast<UChar32>(c);
    out += previous_cased ? Lower(s.substr(i, len)) : TitleChar(u);
    previous_cased = IsCased(u);
  }
  return out;
}

std::string JinjaTitle(std::string_view s) {
  auto separator = [](uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsSpace(c); };
  std::string out;
  for (size_t i = 0, len = 0; i < s.size();) {
    const uint32_t c = DecodeAt(s, i, &len);
    if (separator(c)) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    size_t end = i + len;  // the word: up to the next separator
    for (size_t n = 0; end < s.size() && !separator(DecodeAt(s, end, &n)); end += n) {
    }
    out += Upper(s.substr(i, len)) + Lower(s.substr(i + len, end - i - len));
    i = end;
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  if (s.empty()) return std::string();
  size_t len = 0;
  const uint32_t c = DecodeAt(s, 0, &len);
  std::string out;
  if (len == 1 && c >= 0x80) {
    out.push_back(s[0]);
  } else {
    out = TitleChar(static_cast<UChar32>(c));
  }
  return out + Lower(s.substr(len));
}

}  // namespace autouvm::tokenizer::chat_template
