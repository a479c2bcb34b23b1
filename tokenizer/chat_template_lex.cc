#include "tokenizer/chat_template_lex.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template_text.h"

namespace autouvm::tokenizer::chat_template {

absl::Status LineError(int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", std::string(what)));
}

namespace {

// Note [Whitespace control]: transformers renders with jinja2.Environment(trim_blocks=True,
// lstrip_blocks=True) and Jinja's other defaults, so, as Jinja's lexer does:
//  - "\r\n" and "\r" are read as "\n", and one newline that ends the source is dropped
//    (keep_trailing_newline=False);
//  - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}", "-}}", "-#}" all whitespace after it;
//  - trim_blocks: the first newline after "%}" or "#}" is dropped (not after "}}"; not after "+%}");
//  - lstrip_blocks: spaces and tabs between the start of a line and "{%" or "{#" are dropped (not before
//    "{{"; not before "{%+").
// The text between tags is one kText token; "{% raw %}...{% endraw %}" is text as it stands (and, as in
// Jinja, trim_blocks keeps the newline after "{% raw %}").
class Lexer {
 public:
  explicit Lexer(std::string_view source);
  absl::StatusOr<std::vector<Token>> Run() &&;

 private:
  int LineAt(size_t pos);
  void EmitText(std::string_view text, size_t pos);
  // The text before a tag opening at `open` with sign `sign` ('-', '+' or 0), whitespace control applied.
  std::string_view TextBefore(size_t open, char sign, bool print) const;
  // After the closing marker of a tag, which ended at pos_ with sign `sign`.
  void SkipAfter(char sign, bool block);
  absl::Status Comment(size_t open, size_t body);
  absl::Status Tag(size_t open, size_t body, bool block);
  absl::Status Raw(size_t open);
  absl::Status Operand(size_t* p);
  absl::Status String(size_t* p);
  void Number(size_t* p);

  std::string src_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

Lexer::Lexer(std::string_view source) {
  src_.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src_.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src_.push_back(source[i]);
    }
  }
  if (!src_.empty() && src_.back() == '\n') src_.pop_back();
}

int Lexer::LineAt(size_t pos) {
  if (pos < line_pos_) line_pos_ = 0, line_ = 1;
  for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
    if (src_[line_pos_] == '\n') ++line_;
  return line_;
}

void Lexer::EmitText(std::string_view text, size_t pos) {
  if (!text.empty()) out_.push_back(Token{Token::Kind::kText, std::string(text), LineAt(pos)});
}

std::string_view Lexer::TextBefore(size_t open, char sign, bool print) const {
  std::string_view text = std::string_view(src_).substr(pos_, open - pos_);
  if (sign == '-') return StripSpace(text, false, true);
  if (sign == '+' || print) return text;
  const size_t line_start = text.rfind('\n') + 1;  // 0 where there is none
  const bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
  if (line_start == 0 && !line_starting) return text;
  if (text.find_first_not_of(" \t", line_start) != std::string_view::npos) return text;
  return text.substr(0, line_start);
}

void Lexer::SkipAfter(char sign, bool block) {
  if (sign == '-') {
    while (pos_ < src_.size()) {
      const size_t n = SpaceAt(src_, pos_);
      if (n == 0) break;
      pos_ += n;
    }
  } else if (block && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
    ++pos_;
  }
}

absl::StatusOr<std::vector<Token>> Lexer::Run() && {
  while (pos_ < src_.size()) {
    size_t open = pos_;
    while ((open = src_.find('{', open)) != std::string::npos) {
      if (open + 1 < src_.size() && (src_[open + 1] == '{' || src_[open + 1] == '%' || src_[open + 1] == '#')) break;
      ++open;
    }
    if (open == std::string::npos) {
      EmitText(std::string_view(src_).substr(pos_), pos_);
      break;
    }
    const char type = src_[open + 1];
    const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
    EmitText(TextBefore(open, sign, type == '{'), pos_);
    const size_t body = open + 2 + (sign != 0 ? 1 : 0);
    if (type == '#') {
      RETURN_IF_ERROR(Comment(open, body));
    } else {
      RETURN_IF_ERROR(Tag(open, body, type == '%'));
    }
  }
  out_.push_back(Token{Token::Kind::kEnd, "", LineAt(src_.size())});
  return std::move(out_);
}

absl::Status Lexer::Comment(size_t open, size_t body) {
  const size_t close = src_.find("#}", body);
  if (close == std::string::npos) return LineError(LineAt(open), "unterminated comment ('{#' without '#}')");
  const char sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
  pos_ = close + 2;
  SkipAfter(sign, true);
  return absl::OkStatus();
}

absl::Status Lexer::Tag(size_t open, size_t body, bool block) {
  const size_t first = out_.size();
  out_.push_back(Token{block ? Token::Kind::kBlockBegin : Token::Kind::kPrintBegin, "", LineAt(open)});
  const char close = block ? '%' : '}';
  size_t p = body;
  size_t closed = 0;     // just past the tag's "%}" or "}}"
  char close_sign = 0;   // its sign
  std::string brackets;  // the closing brackets expected, innermost last
  while (true) {
    while (p < src_.size() &&
           (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n' || src_[p] == '\v' || src_[p] == '\f'))
      ++p;
    if (p >= src_.size())
      return LineError(LineAt(open),
                       block ? "unterminated tag ('{%' without '%}')" : "unterminated tag ('{{' without '}}')");
    char sign = 0;
    size_t end = p;
    if ((src_[p] == '-' || (block && src_[p] == '+')) && p + 1 < src_.size() && src_[p + 1] == close) {
      sign = src_[p];
      ++end;
    }
    // As Jinja's lexer, the tag ends only outside brackets: {{ {'a': {'b': 1}} }} is one tag.
    if (brackets.empty() && src_[end] == close && end + 1 < src_.size() && src_[end + 1] == '}') {
      out_.push_back(Token{block ? Token::Kind::kBlockEnd : Token::Kind::kPrintEnd, "", LineAt(p)});
      pos_ = closed = end + 2;
      close_sign = sign;
      SkipAfter(sign, block);
      break;
    }
    RETURN_IF_ERROR(Operand(&p));
    if (out_.back().kind == Token::Kind::kOp && out_.back().value.size() == 1) {
      const char op = out_.back().value[0];
      const size_t kind = std::string_view("([{)]}").find(op);
      if (kind != std::string_view::npos && kind < 3) {
        brackets.push_back(")]}"[kind]);
      } else if (kind != std::string_view::npos) {
        if (brackets.empty()) return LineError(out_.back().line, absl::StrCat("unexpected '", std::string(1, op), "'"));
        if (brackets.back() != op)
          return LineError(out_.back().line, absl::StrCat("unexpected '", std::string(1, op), "', expected '",
                                                          std::string(1, brackets.back()), "'"));
        brackets.pop_back();
      }
    }
  }
  if (block && out_.size() == first + 3 && out_[first + 1].kind == Token::Kind::kName &&
      out_[first + 1].value == "raw") {
    out_.resize(first);
    // Jinja's raw_begin has no trim_blocks: the newline after "{% raw %}" stays ("-%}" still strips).
    pos_ = closed;
    if (close_sign == '-') SkipAfter('-', true);
    return Raw(open);
  }
  return absl::OkStatus();
}

// After "{% raw %}" (pos_ just past it): the text up to "{% endraw %}", then that tag.
absl::Status Lexer::Raw(size_t open) {
  for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 2)) {
    size_t p = at + 2;
    const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : 0;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n')) ++p;
    if (src_.compare(p, 6, "endraw") != 0) continue;
    p += 6;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n')) ++p;
    const char end_sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : 0;
    if (src_.compare(p, 2, "%}") != 0) continue;
    EmitText(TextBefore(at, sign, false), pos_);
    pos_ = p + 2;
    SkipAfter(end_sign, true);
    return absl::OkStatus();
  }
  return LineError(LineAt(open), "unterminated raw block ('{% raw %}' without '{% endraw %}')");
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status Lexer::Operand(size_t* p) {
  const size_t start = *p;
  const char c = src_[start];
  if (IsNameStart(c)) {
    size_t e = start;
    while (e < src_.size() && (IsNameStart(src_[e]) || IsDigit(src_[e]))) ++e;
    out_.push_back(Token{Token::Kind::kName, src_.substr(start, e - start), LineAt(start)});
    *p = e;
    return absl::OkStatus();
  }
  if (IsDigit(c)) {
    Number(p);
    return absl::OkStatus();
  }
  if (c == '\'' || c == '"') return String(p);
  static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
  for (std::string_view op : kTwo) {
    if (src_.compare(start, 2, op) == 0) {
      out_.push_back(Token{Token::Kind::kOp, std::string(op), LineAt(start)});
      *p += 2;
      return absl::OkStatus();
    }
  }
  if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) {
    out_.push_back(Token{Token::Kind::kOp, std::string(1, c), LineAt(start)});
    *p += 1;
    return absl::OkStatus();
  }
  const auto byte = static_cast<unsigned char>(c);
  return LineError(LineAt(start), byte >= 0x21 && byte < 0x7F
                                      ? absl::StrCat("unexpected character '", std::string(1, c), "'")
                                      : absl::StrFormat("unexpected character \\x%02x", byte));
}

// Digits with single underscores between them, from *p.
std::string Digits(const std::string& src, size_t* p) {
  std::string out;
  while (*p < src.size()) {
    if (IsDigit(src[*p])) {
      out.push_back(src[(*p)++]);
    } else if (src[*p] == '_' && *p + 1 < src.size() && IsDigit(src[*p + 1]) && !out.empty()) {
      ++*p;
    } else {
      break;
    }
  }
  return out;
}

void Lexer::Number(size_t* p) {
  const int line = LineAt(*p);
  std::string text = Digits(src_, p);
  bool is_float = false;
  // After a dot ("messages.0.content") only an integer: Jinja's float rule looks behind for one.
  const bool after_dot = !out_.empty() && out_.back().kind == Token::Kind::kOp && out_.back().value == ".";
  if (!after_dot && *p + 1 < src_.size() && src_[*p] == '.' && IsDigit(src_[*p + 1])) {
    ++*p;
    text += "." + Digits(src_, p);
    is_float = true;
  }
  if (!after_dot && *p < src_.size() && (src_[*p] == 'e' || src_[*p] == 'E')) {
    size_t q = *p + 1;
    std::string sign;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) sign = src_[q++];
    if (q < src_.size() && IsDigit(src_[q])) {
      text += "e" + sign + Digits(src_, &q);
      *p = q;
      is_float = true;
    }
  }
  out_.push_back(Token{is_float ? Token::Kind::kFloat : Token::Kind::kInt, std::move(text), line});
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape, as Jinja decodes string literals: `s` is what stands between the quotes.
bool Unescape(std::string_view s, std::string* out) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out->push_back(s[i]);
      continue;
    }
    const char e = s[++i];
    static constexpr std::string_view kFrom = "\\'\"abfnrtv\n";
    static constexpr std::string_view kTo = "\\'\"\a\b\f\n\r\t\v";
    if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
      if (e != '\n') out->push_back(kTo[k]);  // a backslash before a newline joins the lines
    } else if (e >= '0' && e <= '7') {
      uint32_t v = 0;
      for (size_t n = 0; n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++n, ++i) v = v * 8 + (s[i] - '0');
      --i;
      AppendUtf8(v, out);
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        const int h = i + k < s.size() ? HexValue(s[i + k]) : -1;
        if (h < 0) return false;
        v = v << 4 | static_cast<uint32_t>(h);
      }
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
      AppendUtf8(v, out);
      i += n;
    } else {
      out->push_back('\\');
      out->push_back(e);
    }
  }
  return true;
}

absl::Status Lexer::String(size_t* p) {
  const size_t start = *p;
  const char quote = src_[start];
  size_t e = start + 1;
  while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
  if (e >= src_.size()) return LineError(LineAt(start), "unterminated string");
  std::string value;
  if (!Unescape(std::string_view(src_).substr(start + 1, e - start - 1), &value))
    return LineError(LineAt(start), "invalid escape sequence in string");
  out_.push_back(Token{Token::Kind::kString, std::move(value), LineAt(start)});
  *p = e + 1;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace autouvm::tokenizer::chat_template
