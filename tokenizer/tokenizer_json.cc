#include "tokenizer/tokenizer_json.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace autouvm::tokenizer::tokenizer_json {

using json = nlohmann::json;

absl::Status Bad(const std::string& origin, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

ByteLevelTable::ByteLevelTable() {
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : 256 + extra++;
    char utf8[U8_MAX_LENGTH];
    int32_t n = 0;
    U8_APPEND_UNSAFE(utf8, n, cp);
    of_byte[b].assign(utf8, static_cast<size_t>(n));
    to_byte[cp] = static_cast<uint8_t>(b);
  }
}

const ByteLevelTable& ByteLevel() {
  static const ByteLevelTable* const kTable = new ByteLevelTable();
  return *kTable;
}

namespace {

// tokenizers' regexes run on Oniguruma, whose \s is Unicode's White_Space; ICU's leaves out U+000B and
// U+0085. Spelled out, the two agree.
std::string ForIcu(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 's' || pattern[i + 1] == 'S') {
        out += pattern[i + 1] == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
      } else {
        out.append(pattern, i, 2);
      }
      ++i;
    } else {
      out.push_back(pattern[i]);
    }
  }
  return out;
}

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s->find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(*s, at, hit - at);
    out += to;
  }
  out.append(*s, at, std::string::npos);
  *s = std::move(out);
}

absl::StatusOr<std::unique_ptr<icu::RegexPattern>> Compile(const std::string& pattern, const std::string& origin) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where;
  std::unique_ptr<icu::RegexPattern> p(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(ForIcu(pattern)), 0, where, status));
  if (U_FAILURE(status) || p == nullptr) {
    return Bad(origin, absl::StrCat("the regex ", pattern, " does not compile (", u_errorName(status), " at offset ",
                                    where.offset, ")"));
  }
  return p;
}

// Splits `text` by the matches of `pattern`, keeping matches and the text between them as pieces.
absl::Status SplitIsolated(const icu::RegexPattern& pattern, const std::string& text, std::vector<std::string>* out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  std::unique_ptr<icu::RegexMatcher> m(pattern.matcher(u, status));
  if (U_FAILURE(status)) return absl::InternalError(absl::StrCat("regex matcher: ", u_errorName(status)));
  int32_t last = 0;
  auto piece = [&](int32_t from, int32_t to) {
    std::string s;
    u.tempSubStringBetween(from, to).toUTF8String(s);
    out->push_back(std::move(s));
  };
  while (m->find(status) && U_SUCCESS(status)) {
    const int32_t start = m->start(status), end = m->end(status);
    if (end == start) continue;  // an empty match splits nothing
    if (start > last) piece(last, start);
    piece(start, end);
    last = end;
  }
  if (U_FAILURE(status)) return absl::InternalError(absl::StrCat("regex match: ", u_errorName(status)));
  if (last < u.length()) piece(last, u.length());
  return absl::OkStatus();
}

// "<0xAB>" -> 0xAB, or -1.
int ByteFallbackToken(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Strips up to `n` copies of `c` from one end of `s`.
void StripEnd(std::string* s, const std::string& c, int n, bool front) {
  for (int i = 0; i < n && !c.empty() && s->size() >= c.size(); ++i) {
    const size_t at = front ? 0 : s->size() - c.size();
    if (s->compare(at, c.size(), c) != 0) return;
    s->erase(at, c.size());
  }
}

// A Sequence's parts (`list` names them: "pretokenizers", "normalizers", "decoders"), each through
// `parse` with its key ("pre_tokenizer.pretokenizers[1]").
template <typename Step>
absl::Status ParseSequence(const json& j, const char* list, const std::string& origin, const std::string& key,
                           std::vector<Step>* steps,
                           absl::Status (*parse)(const json&, const std::string&, const std::string&,
                                                 std::vector<Step>*)) {
  if (!j.contains(list) || !j[list].is_array()) return Bad(origin, absl::StrCat(key, ".", list, ": not a list"));
  for (size_t i = 0; i < j[list].size(); ++i) {
    RETURN_IF_ERROR(parse(j[list][i], origin, absl::StrCat(key, ".", list, "[", i, "]"), steps));
  }
  return absl::OkStatus();
}

// A Metaspace pre-tokenizer's or decoder's prepend scheme; tokenizers before 0.19 wrote add_prefix_space.
std::string PrependScheme(const json& j) {
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) return j["prepend_scheme"].get<std::string>();
  return j.value("add_prefix_space", true) ? "always" : "never";
}

// A string pattern ({"String": " "}); tokenizers' Regex patterns are not supported in normalizers and
// decoders (no Llama-family tokenizer has one).
absl::StatusOr<std::string> StringPattern(const json& p, const std::string& origin, const std::string& key) {
  const json& pattern = p.value("pattern", json());
  if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
    return Bad(origin, absl::StrCat(key, ".pattern: only a String pattern is supported"));
  }
  if (!p.contains("content") || !p["content"].is_string()) return Bad(origin, absl::StrCat(key, ".content: missing"));
  return pattern["String"].get<std::string>();
}

}  // namespace

absl::Status ParsePreTokenizer(const json& p, const std::string& origin, const std::string& key,
                               std::vector<PreStep>* steps) {
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    return Bad(origin, absl::StrCat(key, ": not a pre-tokenizer object"));
  }
  const std::string type = p["type"].get<std::string>();
  if (type == "Sequence") return ParseSequence(p, "pretokenizers", origin, key, steps, &ParsePreTokenizer);
  if (type == "Split") {
    const json& pattern = p.value("pattern", json());
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = pattern["Regex"].get<std::string>();
    } else {
      return Bad(origin, absl::StrCat(key, ".pattern: only a Regex pattern is supported"));
    }
    if (p.value("behavior", "") != "Isolated" || p.value("invert", false)) {
      return Bad(origin, absl::StrCat(key, ": only behavior Isolated, not inverted, is supported"));
    }
    PreStep step;
    ASSIGN_OR_RETURN(step.split, Compile(regex, absl::StrCat(origin, ": ", key, ".pattern")));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    PreStep step;
    step.kind = PreStep::Kind::kByteLevel;
    step.add_prefix_space = p.value("add_prefix_space", false);
    steps->push_back(std::move(step));
    if (p.value("use_regex", true)) {
      PreStep split;
      ASSIGN_OR_RETURN(split.split, Compile(kGpt2Pattern, absl::StrCat(origin, ": ", key)));
      steps->push_back(std::move(split));
    }
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    PreStep step;
    step.kind = PreStep::Kind::kMetaspace;
    step.replacement = p.value("replacement", "\u2581");
    if (step.replacement.empty()) return Bad(origin, absl::StrCat(key, ".replacement: empty"));
    step.split_on_replacement = p.value("split", true);
    const std::string scheme = PrependScheme(p);
    if (scheme == "always") {
      step.prepend = PreStep::Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend = PreStep::Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend = PreStep::Prepend::kNever;
    } else {
      return Bad(origin, absl::StrCat(key, ".prepend_scheme: \"", scheme, "\" is not always, first or never"));
    }
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  return Bad(origin, absl::StrCat(key, ": pre-tokenizer ", type,
                                  " is not supported (Split, ByteLevel and Metaspace are, and Sequences of them)"));
}

absl::Status ParseNormalizer(const json& n, const std::string& origin, const std::string& key,
                             std::vector<NormStep>* steps) {
  const std::string type = n.is_object() ? n.value("type", "") : "";
  if (type == "Sequence") return ParseSequence(n, "normalizers", origin, key, steps, &ParseNormalizer);
  if (type == "NFC") {
    steps->push_back({NormStep::Kind::kNfc, "", ""});
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    if (!n.contains("prepend") || !n["prepend"].is_string()) return Bad(origin, absl::StrCat(key, ".prepend: missing"));
    steps->push_back({NormStep::Kind::kPrepend, "", n["prepend"].get<std::string>()});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(std::string from, StringPattern(n, origin, key));
    steps->push_back({NormStep::Kind::kReplace, std::move(from), n["content"].get<std::string>()});
    return absl::OkStatus();
  }
  return Bad(origin, absl::StrCat(key, ": normalizer \"", type,
                                  "\" is not supported (NFC, Prepend, Replace and Sequences are)"));
}

absl::Status ParseDecoder(const json& d, const std::string& origin, const std::string& key,
                          std::vector<DecodeStep>* steps) {
  const std::string type = d.is_object() ? d.value("type", "") : "";
  DecodeStep step;
  if (type == "Sequence") {
    return ParseSequence(d, "decoders", origin, key, steps, &ParseDecoder);
  } else if (type == "ByteLevel") {
    step.kind = DecodeStep::Kind::kByteLevel;
  } else if (type == "Replace") {
    step.kind = DecodeStep::Kind::kReplace;
    ASSIGN_OR_RETURN(step.from, StringPattern(d, origin, key));
    step.to = d["content"].get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = DecodeStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecodeStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecodeStep::Kind::kStrip;
    step.strip = d.value("content", " ");
    step.start = d.value("start", 0);
    step.stop = d.value("stop", 0);
    if (step.start < 0 || step.stop < 0) return Bad(origin, absl::StrCat(key, ": negative start or stop"));
  } else if (type == "Metaspace") {
    step.kind = DecodeStep::Kind::kMetaspace;
    step.from = d.value("replacement", "\u2581");
    step.metaspace_strips_first = PrependScheme(d) != "never";
  } else {
    return Bad(origin, absl::StrCat(key, ": decoder \"", type,
                                    "\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace "
                                    "and Sequences are)"));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status Normalize(const std::vector<NormStep>& normalizer, std::string* text) {
  for (const NormStep& n : normalizer) {
    switch (n.kind) {
      case NormStep::Kind::kNfc: {
        UErrorCode status = U_ZERO_ERROR;
        const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
        if (U_FAILURE(status)) return absl::InternalError("tokenizer: ICU has no NFC normalizer");
        const icu::UnicodeString normalized = nfc->normalize(icu::UnicodeString::fromUTF8(*text), status);
        if (U_FAILURE(status)) return absl::InternalError(absl::StrCat("tokenizer: NFC: ", u_errorName(status)));
        text->clear();
        normalized.toUTF8String(*text);
        break;
      }
      case NormStep::Kind::kPrepend:
        if (!text->empty()) text->insert(0, n.to);
        break;
      case NormStep::Kind::kReplace:
        ReplaceAll(text, n.from, n.to);
        break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PreTokenize(const std::vector<PreStep>& steps, const std::string& text,
                                                     bool at_start) {
  std::vector<std::string> pieces = {text};
  for (const PreStep& step : steps) {
    std::vector<std::string> next;
    for (std::string& p : pieces) {
      switch (step.kind) {
        case PreStep::Kind::kByteLevel:  // its prefix space (its own regex, if any, came as a split)
          if (step.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
          next.push_back(std::move(p));
          break;
        case PreStep::Kind::kSplit:
          RETURN_IF_ERROR(SplitIsolated(*step.split, p, &next));
          break;
        case PreStep::Kind::kMetaspace: {
          // Spaces become the replacement, which starts the piece unless it does already (tokenizers'
          // rule: "first" only where the piece begins the input).
          ReplaceAll(&p, " ", step.replacement);
          const bool prepend = step.prepend == PreStep::Prepend::kAlways ||
                               (step.prepend == PreStep::Prepend::kFirst && at_start && &p == &pieces.front());
          if (prepend && p.compare(0, step.replacement.size(), step.replacement) != 0) p.insert(0, step.replacement);
          if (!step.split_on_replacement) {
            next.push_back(std::move(p));
            break;
          }
          size_t from = 0;  // each replacement starts a piece
          for (size_t hit = p.find(step.replacement, 1); hit != std::string::npos;
               hit = p.find(step.replacement, hit + step.replacement.size())) {
            if (hit > from) next.push_back(p.substr(from, hit - from));
            from = hit;
          }
          if (from < p.size()) next.push_back(p.substr(from));
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

// tokenizers' decoders other than ByteLevel, over the list of token strings in order.
void RunDecoder(const DecodeStep& d, std::vector<std::string>* tokens) {
  switch (d.kind) {
    case DecodeStep::Kind::kByteLevel:
      return;  // the byte-level kind decodes on its own path
    case DecodeStep::Kind::kReplace:
      for (std::string& t : *tokens) ReplaceAll(&t, d.from, d.to);
      return;
    case DecodeStep::Kind::kByteFallback: {
      // Runs of <0xAB> tokens become their bytes when those are UTF-8; otherwise one U+FFFD per token.
      std::vector<std::string> out;
      std::string bytes;
      size_t count = 0;
      auto flush = [&] {
        if (count == 0) return;
        int32_t i = 0;
        bool valid = true;
        for (const int32_t n = static_cast<int32_t>(bytes.size()); i < n && valid;) {
          UChar32 cp = 0;
          U8_NEXT(bytes.data(), i, n, cp);
          valid = cp >= 0;
        }
        if (valid) {
          out.push_back(bytes);
        } else {
          for (size_t k = 0; k < count; ++k) out.push_back("\xEF\xBF\xBD");
        }
        bytes.clear();
        count = 0;
      };
      for (std::string& t : *tokens) {
        if (const int b = ByteFallbackToken(t); b >= 0) {
          bytes.push_back(static_cast<char>(b));
          ++count;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      *tokens = std::move(out);
      return;
    }
    case DecodeStep::Kind::kFuse: {
      std::string all = absl::StrJoin(*tokens, "");
      tokens->assign(1, std::move(all));
      return;
    }
    case DecodeStep::Kind::kStrip:
      for (std::string& t : *tokens) {
        StripEnd(&t, d.strip, d.start, /*front=*/true);
        StripEnd(&t, d.strip, d.stop, /*front=*/false);
      }
      return;
    case DecodeStep::Kind::kMetaspace:
      for (size_t i = 0; i < tokens->size(); ++i) {
        std::string& t = (*tokens)[i];
        ReplaceAll(&t, d.from, " ");
        if (i == 0 && d.metaspace_strips_first && !t.empty() && t[0] == ' ') t.erase(0, 1);
      }
      return;
  }
}

}  // namespace autouvm::tokenizer::tokenizer_json
