#include "tokenizer/bpe_tokenizer.h"

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
#include "base/file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "tokenizer/tokenizer_json.h"

namespace autouvm::tokenizer {
namespace {

using json = nlohmann::json;
using tokenizer_json::Bad;
using tokenizer_json::ByteLevel;
using tokenizer_json::ByteLevelTable;
using tokenizer_json::DecodeStep;
using tokenizer_json::NormStep;
using tokenizer_json::ParseDecoder;
using tokenizer_json::ParseNormalizer;
using tokenizer_json::ParsePreTokenizer;
using tokenizer_json::PreStep;
using tokenizer_json::RunDecoder;

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

  absl::Status Bpe(const std::string& piece, std::vector<int32_t>* out) const;
  // The piece's symbols before any merge (Note [Two kinds of BPE]).
  absl::StatusOr<std::vector<std::string>> Symbols(const std::string& piece) const;
};

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
  ASSIGN_OR_RETURN(const std::string text, base::ReadTextFile(path, "the tokenizer"));
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
    RETURN_IF_ERROR(tokenizer_json::Normalize(t.normalizer, &s.text));
    ASSIGN_OR_RETURN(const std::vector<std::string> pieces, tokenizer_json::PreTokenize(t.steps, s.text, s.at_start));
    for (const std::string& p : pieces) {
      if (!p.empty()) RETURN_IF_ERROR(t.Bpe(p, &ids));
    }
  }
  return ids;
}

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

}  // namespace autouvm::tokenizer
