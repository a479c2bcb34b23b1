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
};

// A pre-tokenizer step: a regex to split by (Isolated), or ByteLevel's prefix space (split null).
struct PreStep {
  std::unique_ptr<icu::RegexPattern> split;
  bool add_prefix_space = false;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsWordByte(unsigned char c) { return c >= 0x80 || std::isalnum(c) || c == '_'; }

}  // namespace

struct BpeTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> token_of;  // id -> its text (byte-level for the vocabulary, plain for added)
  std::vector<bool> is_added;
  std::unordered_map<std::string, int32_t> merge_rank;  // "a b" -> rank
  bool ignore_merges = false;
  std::vector<AddedToken> added;
  std::vector<std::vector<size_t>> added_by_first_byte = std::vector<std::vector<size_t>>(256);
  bool nfc = false;
  std::vector<PreStep> steps;  // the pre-tokenizer, in order
  int32_t template_bos = -1;

  absl::StatusOr<std::vector<std::string>> PreTokenize(const std::string& text) const;
  absl::Status Bpe(const std::string& piece, std::vector<int32_t>* out) const;
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

absl::StatusOr<std::vector<std::string>> BpeTokenizer::Impl::PreTokenize(const std::string& text) const {
  std::vector<std::string> pieces = {text};
  for (const PreStep& step : steps) {
    std::vector<std::string> next;
    for (std::string& p : pieces) {
      if (step.split == nullptr) {  // ByteLevel: its prefix space (its own regex, if any, came as a split)
        if (step.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
        next.push_back(std::move(p));
      } else {
        RETURN_IF_ERROR(SplitIsolated(*step.split, p, &next));
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

// Note [BPE merges]: the piece's byte-level symbols are merged pair by pair, always the adjacent pair
// of lowest rank (the leftmost of equal ones), as tokenizers' BPE does — with a heap of candidate pairs
// (stale ones skipped by version), so that a long piece (a prompt of one 100 kB word) costs n log n, not n^2.
absl::Status BpeTokenizer::Impl::Bpe(const std::string& piece, std::vector<int32_t>* out) const {
  const ByteLevelTable& bl = ByteLevel();
  std::string mapped;
  for (unsigned char b : piece) mapped += bl.of_byte[b];
  if (ignore_merges) {
    if (auto it = vocab.find(mapped); it != vocab.end()) {
      out->push_back(it->second);
      return absl::OkStatus();
    }
  }
  const size_t n = piece.size();
  std::vector<std::string> text(n);
  for (size_t i = 0; i < n; ++i) text[i] = bl.of_byte[static_cast<unsigned char>(piece[i])];
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

absl::Status ParsePreTokenizer(const json& p, const std::string& origin, const std::string& key,
                               std::vector<PreStep>* steps) {
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    return Bad(origin, absl::StrCat(key, ": not a pre-tokenizer object"));
  }
  const std::string type = p["type"].get<std::string>();
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
      return Bad(origin, absl::StrCat(key, ".pretokenizers: not a list"));
    }
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i) {
      RETURN_IF_ERROR(
          ParsePreTokenizer(p["pretokenizers"][i], origin, absl::StrCat(key, ".pretokenizers[", i, "]"), steps));
    }
    return absl::OkStatus();
  }
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
    ASSIGN_OR_RETURN(auto compiled, Compile(regex, absl::StrCat(origin, ": ", key, ".pattern")));
    steps->push_back({std::move(compiled), false});
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    steps->push_back({nullptr, p.value("add_prefix_space", false)});
    if (p.value("use_regex", true)) {
      ASSIGN_OR_RETURN(auto compiled, Compile(kGpt2Pattern, absl::StrCat(origin, ": ", key)));
      steps->push_back({std::move(compiled), false});
    }
    return absl::OkStatus();
  }
  return Bad(origin, absl::StrCat(key, ": pre-tokenizer ", type,
                                  " is not supported (byte-level BPE tokenizers: Split and ByteLevel; a Metaspace "
                                  "tokenizer.json is sentencepiece's: use its tokenizer.model)"));
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
  if (model.value("byte_fallback", false)) {
    return Bad(origin, "model.byte_fallback: a sentencepiece-style BPE (use its tokenizer.model)");
  }
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
  // Every byte must have its symbol, or some text could not be encoded.
  for (const std::string& s : ByteLevel().of_byte) {
    if (!impl->vocab.count(s)) {
      return Bad(origin,
                 absl::StrCat("model.vocab: no symbol \"", s, "\" for one of the 256 bytes (not a byte-level BPE)"));
    }
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
  // Normalizer: none, or NFC (Qwen2).
  const json& normalizer = j.value("normalizer", json());
  if (!normalizer.is_null()) {
    const std::string type = normalizer.is_object() ? normalizer.value("type", "") : "";
    if (type != "NFC") return Bad(origin, absl::StrCat("normalizer: \"", type, "\": only none and NFC are supported"));
    impl->nfc = true;
  }
  const json& pre = j.value("pre_tokenizer", json());
  if (pre.is_null()) return Bad(origin, "pre_tokenizer: missing (a byte-level BPE has a ByteLevel one)");
  RETURN_IF_ERROR(ParsePreTokenizer(pre, origin, "pre_tokenizer", &impl->steps));
  if (std::none_of(impl->steps.begin(), impl->steps.end(), [](const PreStep& s) { return s.split == nullptr; })) {
    return Bad(origin, "pre_tokenizer: no ByteLevel step (not a byte-level BPE)");
  }
  const json& decoder = j.value("decoder", json());
  if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel") {
    return Bad(origin, "decoder: only ByteLevel is supported");
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
    if (!pending.empty()) segments.push_back({std::move(pending), -1});
    pending.clear();
    segments.push_back({"", hit->id});
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && IsSpace(text[i])) ++i;
    }
  }
  if (!pending.empty()) segments.push_back({std::move(pending), -1});
  std::vector<int32_t> ids;
  for (Segment& s : segments) {
    if (s.added >= 0) {
      ids.push_back(s.added);
      continue;
    }
    if (t.nfc) {
      UErrorCode status = U_ZERO_ERROR;
      const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
      if (U_FAILURE(status)) return absl::InternalError("tokenizer: ICU has no NFC normalizer");
      const icu::UnicodeString normalized = nfc->normalize(icu::UnicodeString::fromUTF8(s.text), status);
      if (U_FAILURE(status)) return absl::InternalError(absl::StrCat("tokenizer: NFC: ", u_errorName(status)));
      s.text.clear();
      normalized.toUTF8String(s.text);
    }
    ASSIGN_OR_RETURN(const std::vector<std::string> pieces, t.PreTokenize(s.text));
    for (const std::string& p : pieces) {
      if (!p.empty()) RETURN_IF_ERROR(t.Bpe(p, &ids));
    }
  }
  return ids;
}

std::string BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  const Impl& t = *impl_;
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
