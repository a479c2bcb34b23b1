// Python's view of str for the chat-template renderer (tokenizer/chat_template.h): strings are UTF-8 bytes
// here and sequences of code points there, so lengths, indexing, slicing, stripping, splitting and case
// follow code points. A byte that starts no valid UTF-8 sequence counts as one character of its own.
// Pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace autouvm::tokenizer::chat_template {

// The code point at s[i] and, in *len, its length in bytes (1 and the byte itself for invalid UTF-8).
uint32_t DecodeAt(std::string_view s, size_t i, size_t* len);
void AppendUtf8(uint32_t code_point, std::string* out);
// The characters of `s`, each a view into it.
std::vector<std::string_view> Chars(std::string_view s);
size_t CharCount(std::string_view s);

// Python's str.isspace for one code point (the same set as \s in Python's re).
bool IsSpace(uint32_t code_point);
// Bytes of the whitespace character at s[i]; 0 where there is none.
size_t SpaceAt(std::string_view s, size_t i);
// str.strip() / lstrip() / rstrip() without an argument ...
std::string_view StripSpace(std::string_view s, bool left, bool right);
// ... and with one: the characters of `chars`, whichever their order.
std::string_view StripChars(std::string_view s, std::string_view chars, bool left, bool right);

// Python's str.isprintable for one code point (what repr() leaves unescaped).
bool IsPrintable(uint32_t code_point);

// str.upper(), lower(), title(), capitalize() (full Unicode case mappings, through ICU).
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string Title(std::string_view s);
std::string Capitalize(std::string_view s);
// Jinja's title filter, which is not str.title(): each run of characters between [-\s({\[<] has its first
// character upper-cased (not title-cased) and the others lower-cased; "'quoted'" stays as it is.
std::string JinjaTitle(std::string_view s);

}  // namespace autouvm::tokenizer::chat_template
