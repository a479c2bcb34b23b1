#include "server/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/status_macros.h"
#include "runtime/yaml_fields.h"

namespace autouvm::server {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& origin, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

// Note [Byte-level symbols]: byte-level BPE (GPT-2's) works on text where every byte is one printable
// character: bytes that are printable Latin-1 stand for themselves, the others (controls, space, ...)
// for U+0100 onwards in byte order (the space is "Ġ", U+0120). The vocabulary and merges are written in
// those characters.
struct ByteLevelTable {
  std::string of_byte[256];                       // a byte's character, UTF-8
  std::unordered_map<uint32_t, uint8_t> to_byte;  // a character's byte
  ByteLevelTable() {
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
};

const ByteLevelTable& ByteLevel() {
  static const ByteLevelTable* const kTable = new ByteLevelTable();
  return *kTable;
}

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

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false;
};

// A piece of the input: text to tokenize, or an added token already matched.
struct Segment {
  std::string text;
  int32_t added = -1;
  bool at_start = false;  // the text begins the input
};

// A pre-tokenizer step: a regex to split by (Isolated), ByteLevel's prefix space, or Metaspace's.
struct PreStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
  std::unique_ptr<icu::RegexPattern> split;  // kSplit
  bool add_prefix_space = false;             // kByteLevel
  std::string replacement;                   // kMetaspace: spaces become this ("▁")
  enum class Prepend { kNever, kAlways, kFirst } prepend = Prepend::kAlways;
  bool split_on_replacement = false;  // kMetaspace: each piece starts at a replacement
};

// A normalizer step: NFC, Prepend (a string before the segment) or Replace (a string by another).
struct NormStep {
  enum class Kind { kNfc, kPrepend, kReplace } kind = Kind::kNfc;
  std::string from, to;
};

// A decoder step, over the list of token strings as tokenizers' decode chains them.
struct DecodeStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind = Kind::kByteLevel;
  std::string from, to;                // kReplace; kMetaspace: from = the replacement
  std::string strip;                   // kStrip: the character
  int start = 0, stop = 0;             // kStrip: how many at each end
  bool metaspace_strips_first = true;  // kMetaspace: its prepend scheme is not "never"
};

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

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsWordByte(unsigned char c) { return c >= 0x80 || std::isalnum(c) || c == '_'; }

}  // namespace

struct BpeTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> token_of;  // id -> its text (byte-level for the vocabulary, plain for added)
  std::vector<bool> is_added;
  std::unordered_map<std::string, int32_t> merge_rank;  // "a b" -> rank
  bool ignore_merges = false;
  // Note [Two kinds of BPE]: byte-level (GPT-2, Llama 3, Qwen2): symbols are bytes written as characters;
  // otherwise sentencepiece's kind as tokenizers writes it (Llama 2, Mistral): symbols are characters, a
  // space is "▁" (a Metaspace pre-tokenizer or Prepend/Replace normalizers), and a character not in the
  // vocabulary is its UTF-8 bytes as <0xAB> tokens (byte_fallback) or the unknown token.
  bool byte_level = true;
  bool byte_fallback = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  std::vector<AddedToken> added;
  std::vector<std::vector<size_t>> added_by_first_byte = std::vector<std::vector<size_t>>(256);
  std::vector<NormStep> normalizer;
  std::vector<PreStep> steps;  // the pre-tokenizer, in order
  std::vector<DecodeStep> decoder;
  int32_t template_bos = -1;

  absl::Status Normalize(std::string* text) const;
  // `at_start`: the segment begins the input (Metaspace's prepend scheme "first").
  absl::StatusOr<std::vector<std::string>> PreTokenize(const std::string& text, bool at_start) const;
  absl::Status Bpe(const std::string& piece, std::vector<int32_t>* out) const;
  // The piece's symbols before any merge (Note [Two kinds of BPE]).
  absl::StatusOr<std::vector<std::string>> Symbols(const std::string& piece) const;
};

namespace {

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

absl::Status ParsePreTokenizer(const json& p, const std::string& origin, const std::string& key,
                               std::vector<PreStep>* steps);

}  // namespace

absl::Status BpeTokenizer::Impl::Normalize(std::string* text) const {
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

absl::StatusOr<std::vector<std::string>> BpeTokenizer::Impl::PreTokenize(const std::string& text, bool at_start) const {
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

absl::StatusOr<std::vector<std::string>> BpeTokenizer::Impl::Symbols(const std::string& piece) const {
  std::vector<std::string> symbols;
  if (byte_level) {
    const ByteLevelTable& bl = ByteLevel();
    for (unsigned char b : piece) symbols.push_back(bl.of_byte[b]);
    return symbols;
  }
  bool last_unk = false;
  for (int32_t i = 0, n = static_cast<int32_t>(piece.size()); i < n;) {
    const int32_t at = i;
    UChar32 cp = 0;
    U8_NEXT(piece.data(), i, n, cp);
    std::string ch = piece.substr(static_cast<size_t>(at), static_cast<size_t>(i - at));
    if (vocab.count(ch)) {
      symbols.push_back(std::move(ch));
      last_unk = false;
      continue;
    }
    if (byte_fallback) {
      std::vector<std::string> bytes;
      for (unsigned char b : ch) {
        std::string t = absl::StrFormat("<0x%02X>", b);
        if (!vocab.count(t)) break;
        bytes.push_back(std::move(t));
      }
      if (bytes.size() == ch.size()) {
        for (std::string& b : bytes) symbols.push_back(std::move(b));
        last_unk = false;
        continue;
      }
    }
    if (unk_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: \"", ch, "\" is not in the vocabulary and the tokenizer has no unknown token"));
    }
    if (!(fuse_unk && last_unk)) symbols.push_back(token_of[unk_id]);
    last_unk = true;
  }
  return symbols;
}

// Note [BPE merges]: the piece's byte-level symbols are merged pair by pair, always the adjacent pair
// of lowest rank (the leftmost of equal ones), as tokenizers' BPE does — with a heap of candidate pairs
// (stale ones skipped by version), so that a long piece (a prompt of one 100 kB word) costs n log n, not n^2.
absl::Status BpeTokenizer::Impl::Bpe(const std::string& piece, std::vector<int32_t>* out) const {
  ASSIGN_OR_RETURN(std::vector<std::string> text, Symbols(piece));
  if (ignore_merges) {
    if (auto it = vocab.find(absl::StrJoin(text, "")); it != vocab.end()) {
      out->push_back(it->second);
      return absl::OkStatus();
    }
  }
  const size_t n = text.size();
  if (n == 0) return absl::OkStatus();
  std::vector<int64_t> prev(n), next(n);
  std::vector<uint32_t> version(n, 0);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) prev[i] = static_cast<int64_t>(i) - 1, next[i] = i + 1 < n ? i + 1 : -1;
  using Candidate = std::tuple<int32_t, int64_t, uint32_t, int64_t, uint32_t>;  // rank, left, its version, right, ...
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int64_t l, int64_t r) {
    if (l < 0 || r < 0) return;
    auto it = merge_rank.find(absl::StrCat(text[l], " ", text[r]));
    if (it != merge_rank.end()) heap.emplace(it->second, l, version[l], r, version[r]);
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int64_t>(i), static_cast<int64_t>(i + 1));
  while (!heap.empty()) {
    const auto [rank, l, vl, r, vr] = heap.top();
    heap.pop();
    if (!alive[l] || !alive[r] || next[l] != r || version[l] != vl || version[r] != vr) continue;
    text[l] += text[r];
    ++version[l];
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    consider(prev[l], l);
    consider(l, next[l]);
  }
  for (int64_t i = 0; i >= 0; i = next[i]) {
    auto it = vocab.find(text[i]);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: \"", text[i], "\" is not in the vocabulary"));
    }
    out->push_back(it->second);
  }
  return absl::OkStatus();
}

namespace {

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

// The first token a TemplateProcessing puts before a single sequence, or -1.
int32_t TemplateBos(const json& p) {
  if (!p.is_object()) return -1;
  const std::string type = p.value("type", "");
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& q : p["processors"]) {
      if (const int32_t id = TemplateBos(q); id >= 0) return id;
    }
    return -1;
  }
  if (type != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array() || p["single"].empty()) {
    return -1;
  }
  const json& first = p["single"][0];
  if (!first.contains("SpecialToken")) return -1;
  const std::string name = first["SpecialToken"].value("id", "");
  const json& specials = p.value("special_tokens", json::object());
  if (!specials.contains(name)) return -1;
  const json& ids = specials[name].value("ids", json::array());
  return ids.is_array() && !ids.empty() && ids[0].is_number_integer() ? ids[0].get<int32_t>() : -1;
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, runtime::ReadTextFile(path, "the tokenizer"));
  return Parse(text, path);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Parse(const std::string& json_text,
                                                                  const std::string& origin) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(origin, "not a JSON object");
  auto impl = std::make_unique<Impl>();
  const json& model = j.value("model", json());
  if (!model.is_object()) return Bad(origin, "model: missing");
  if (model.value("type", "") != "BPE") {
    return Bad(origin, absl::StrCat("model.type: \"", model.value("type", ""), "\": only BPE is supported"));
  }
  impl->byte_fallback = model.value("byte_fallback", false);
  impl->fuse_unk = model.value("fuse_unk", false);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && !model[k].is_null() && model[k] != "") {
      return Bad(origin, absl::StrCat("model.", k, ": not supported"));
    }
  }
  impl->ignore_merges = model.value("ignore_merges", false);
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) return Bad(origin, "model.vocab: missing or empty");
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > (1 << 24)) {
      return Bad(origin, absl::StrCat("model.vocab[\"", it.key(), "\"]: not an id"));
    }
    const int32_t id = it.value().get<int32_t>();
    impl->vocab[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  const json& merges = model.value("merges", json());
  if (!merges.is_array()) return Bad(origin, "model.merges: missing");
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) return Bad(origin, absl::StrCat("model.merges[", i, "]: not \"a b\""));
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      return Bad(origin, absl::StrCat("model.merges[", i, "]: not a pair"));
    }
    if (!impl->vocab.count(a) || !impl->vocab.count(b) || !impl->vocab.count(a + b)) {
      return Bad(origin, absl::StrCat("model.merges[", i, "]: \"", a, "\" + \"", b, "\" is not in the vocabulary"));
    }
    impl->merge_rank.emplace(absl::StrCat(a, " ", b), static_cast<int32_t>(i));
  }
  const json& added = j.value("added_tokens", json::array());
  if (!added.is_array()) return Bad(origin, "added_tokens: not a list");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string() || a["content"].get<std::string>().empty() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() > (1 << 24)) {
      return Bad(origin, absl::StrCat("added_tokens[", i, "]: needs an id and a content"));
    }
    AddedToken t{a["content"].get<std::string>(), a["id"].get<int32_t>(),   a.value("special", false),
                 a.value("lstrip", false),        a.value("rstrip", false), a.value("single_word", false)};
    max_id = std::max(max_id, t.id);
    impl->added.push_back(std::move(t));
  }
  impl->token_of.assign(static_cast<size_t>(max_id) + 1, "");
  impl->is_added.assign(static_cast<size_t>(max_id) + 1, false);
  for (const auto& [text, id] : impl->vocab) impl->token_of[id] = text;
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    impl->token_of[t.id] = t.content;
    impl->is_added[t.id] = true;
    impl->added_by_first_byte[static_cast<unsigned char>(t.content[0])].push_back(i);
  }
  for (auto& list : impl->added_by_first_byte) {  // the longest first: leftmost-longest matching
    std::sort(list.begin(), list.end(),
              [&](size_t x, size_t y) { return impl->added[x].content.size() > impl->added[y].content.size(); });
  }
  if (const json& unk = model.value("unk_token", json()); !unk.is_null()) {
    if (!unk.is_string()) return Bad(origin, "model.unk_token: not a string");
    const std::string u = unk.get<std::string>();
    if (auto it = impl->vocab.find(u); it != impl->vocab.end()) {
      impl->unk_id = it->second;
    } else {
      return Bad(origin, absl::StrCat("model.unk_token: \"", u, "\" is not in the vocabulary"));
    }
  }
  // Normalizer: none, or NFC (Qwen2), or Prepend and Replace (Llama 2's "▁" for spaces).
  if (const json& normalizer = j.value("normalizer", json()); !normalizer.is_null()) {
    RETURN_IF_ERROR(ParseNormalizer(normalizer, origin, "normalizer", &impl->normalizer));
  }
  if (const json& pre = j.value("pre_tokenizer", json()); !pre.is_null()) {
    RETURN_IF_ERROR(ParsePreTokenizer(pre, origin, "pre_tokenizer", &impl->steps));
  }
  const auto has_step = [&](PreStep::Kind kind) {
    return std::any_of(impl->steps.begin(), impl->steps.end(), [&](const PreStep& s) { return s.kind == kind; });
  };
  impl->byte_level = has_step(PreStep::Kind::kByteLevel);
  const json& decoder = j.value("decoder", json());
  if (decoder.is_null()) return Bad(origin, "decoder: missing");
  RETURN_IF_ERROR(ParseDecoder(decoder, origin, "decoder", &impl->decoder));
  const bool byte_level_decoder = std::any_of(impl->decoder.begin(), impl->decoder.end(), [](const DecodeStep& d) {
    return d.kind == DecodeStep::Kind::kByteLevel;
  });
  if (impl->byte_level) {
    // Every byte must have its symbol, or some text could not be encoded.
    for (const std::string& b : ByteLevel().of_byte) {
      if (!impl->vocab.count(b)) {
        return Bad(origin,
                   absl::StrCat("model.vocab: no symbol \"", b, "\" for one of the 256 bytes (not a byte-level BPE)"));
      }
    }
    if (impl->byte_fallback) return Bad(origin, "model.byte_fallback: with a ByteLevel pre-tokenizer");
    if (impl->decoder.size() != 1 || !byte_level_decoder) {
      return Bad(origin, "decoder: a ByteLevel pre-tokenizer needs the ByteLevel decoder, alone");
    }
  } else {
    if (byte_level_decoder) return Bad(origin, "decoder: ByteLevel without a ByteLevel pre-tokenizer");
    // Sentencepiece's kind: spaces must become a symbol (Metaspace, or a Replace normalizer).
    const bool spaces_mapped = has_step(PreStep::Kind::kMetaspace) ||
                               std::any_of(impl->normalizer.begin(), impl->normalizer.end(), [](const NormStep& n) {
                                 return n.kind == NormStep::Kind::kReplace && n.from == " ";
                               });
    if (!spaces_mapped) {
      return Bad(origin,
                 "pre_tokenizer: neither ByteLevel nor Metaspace, and no normalizer replaces spaces (not a BPE "
                 "tokenizer of the GPT-2 or the sentencepiece kind)");
    }
  }
  impl->template_bos = TemplateBos(j.value("post_processor", json()));
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text) const {
  const Impl& t = *impl_;
  // Added tokens first, leftmost-longest, on the raw text.
  std::vector<Segment> segments;
  std::string pending;
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (size_t k : t.added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = t.added[k];
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word && ((i > 0 && IsWordByte(text[i - 1])) ||
                            (i + a.content.size() < text.size() && IsWordByte(text[i + a.content.size()])))) {
        continue;
      }
      hit = &a;
      break;
    }
    if (hit == nullptr) {
      pending.push_back(text[i++]);
      continue;
    }
    if (hit->lstrip) {
      while (!pending.empty() && IsSpace(pending.back())) pending.pop_back();
    }
    if (!pending.empty()) segments.push_back({std::move(pending), -1, segments.empty()});
    pending.clear();
    segments.push_back({"", hit->id});
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && IsSpace(text[i])) ++i;
    }
  }
  if (!pending.empty()) segments.push_back({std::move(pending), -1, segments.empty()});
  std::vector<int32_t> ids;
  for (Segment& s : segments) {
    if (s.added >= 0) {
      ids.push_back(s.added);
      continue;
    }
    RETURN_IF_ERROR(t.Normalize(&s.text));
    ASSIGN_OR_RETURN(const std::vector<std::string> pieces, t.PreTokenize(s.text, s.at_start));
    for (const std::string& p : pieces) {
      if (!p.empty()) RETURN_IF_ERROR(t.Bpe(p, &ids));
    }
  }
  return ids;
}

namespace {

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

}  // namespace

std::string BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  const Impl& t = *impl_;
  if (!t.byte_level) {
    std::vector<std::string> tokens;
    for (const int32_t id : ids) {
      if (id >= 0 && static_cast<size_t>(id) < t.token_of.size()) tokens.push_back(t.token_of[id]);
    }
    for (const DecodeStep& d : t.decoder) RunDecoder(d, &tokens);
    return absl::StrJoin(tokens, "");
  }
  const ByteLevelTable& bl = ByteLevel();
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= t.token_of.size()) continue;
    const std::string& s = t.token_of[id];
    if (t.is_added[id]) {
      out += s;
      continue;
    }
    // Byte-level characters back to their bytes (Note [Byte-level symbols]); anything else as it is.
    for (int32_t i = 0, n = static_cast<int32_t>(s.size()); i < n;) {
      const int32_t at = i;
      UChar32 cp = 0;
      U8_NEXT(s.data(), i, n, cp);
      auto it = cp >= 0 ? bl.to_byte.find(static_cast<uint32_t>(cp)) : bl.to_byte.end();
      if (it != bl.to_byte.end()) {
        out.push_back(static_cast<char>(it->second));
      } else {
        out.append(s, static_cast<size_t>(at), static_cast<size_t>(i - at));
      }
    }
  }
  return out;
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->token_of.size()); }

int32_t BpeTokenizer::AddedTokenId(std::string_view content) const {
  for (const AddedToken& a : impl_->added) {
    if (a.content == content) return a.id;
  }
  return -1;
}

int32_t BpeTokenizer::template_bos_id() const { return impl_->template_bos; }

}  // namespace autouvm::server
