// Small BPE tokenizer.json files (byte-level, and sentencepiece's kind below) for the tests of
// tokenizer/bpe_tokenizer.h and tools/hf_import.h: Llama 3's pre-tokenizer regex, the 256 byte symbols (byte b is id
// b), a few merges whose results take ids from 256 in order, three special tokens from 300, and a template that starts
// with
// <|begin_of_text|>.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace autouvm::testing {

inline constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte-level character for a byte, as UTF-8 (the table is the format's, restated here).
inline std::string Sym(unsigned char b) {
  uint32_t cp = b;
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  if (!printable) {
    uint32_t extra = 0;
    for (uint32_t x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++extra;
    }
    cp = 256 + extra;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

inline const std::string kSpace = Sym(' ');  // "Ġ"

// Ids: byte b is b; then the merges' results in order from 256; added tokens from 300.
inline const std::vector<std::pair<std::string, std::string>> kMerges = {
    {kSpace, "t"}, {"h", "e"}, {kSpace + "t", "he"}, {"l", "l"}, {"ll", "o"}, {"he", "llo"}, {"a", "a"}, {"aa", "aa"}};
inline constexpr int32_t kGt = 256, kHe = 257, kGthe = 258, kHello = 261, kAaaa = 263;
inline constexpr int32_t kBegin = 300, kEot = 301, kImStart = 302;

// added_tokens entries for special tokens (content, id), as tokenizers writes them.
inline nlohmann::json SpecialTokens(const std::vector<std::pair<std::string, int32_t>>& tokens) {
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [content, id] : tokens) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return added;
}

inline nlohmann::json TokenizerJson() {
  using json = nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Sym(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  int32_t id = 256;
  for (const auto& [a, b] : kMerges) {
    vocab[a + b] = id++;
    merges.push_back(a + " " + b);
  }
  const json added = SpecialTokens({{"<|begin_of_text|>", kBegin}, {"<|eot_id|>", kEot}, {"<|im_start|>", kImStart}});
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"<|begin_of_text|>",
           {{"id", "<|begin_of_text|>"}, {"ids", {kBegin}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
}

// A tokenizer.json of sentencepiece's kind (Llama 2, Mistral): symbols are characters, a space is "▁",
// a character outside the vocabulary is its bytes as <0xAB> tokens. Ids: <unk> 0, <s> 1, </s> 2, the
// byte tokens 3..258, then the characters and the merges' results in order.
inline const std::string kMeta = "\u2581";  // "▁"
inline const std::vector<std::pair<std::string, std::string>> kSpMerges = {
    {"h", "e"}, {"l", "l"}, {kMeta, "he"}, {kMeta + "he", "ll"}, {kMeta + "hell", "o"}, {kMeta, kMeta}};
inline constexpr int32_t kSpUnk = 0, kSpBos = 1, kSpEos = 2, kSpMeta = 259, kSpH = 260, kSpE = 261, kSpL = 262,
                         kSpO = 263, kSpHe = 264, kSpLl = 265, kSpMetaHe = 266, kSpMetaHello = 268, kSpMetaMeta = 269;
inline int32_t SpByte(unsigned char b) { return 3 + b; }

// `layout`: "llama2" (Prepend and Replace normalizers, no pre-tokenizer, the Replace / ByteFallback /
// Fuse / Strip decoders, as Llama 2's file) or "metaspace" (a Metaspace pre-tokenizer and decoder with
// prepend_scheme "first", as transformers 5 writes Mistral's).
inline nlohmann::json SentencePieceStyleJson(const std::string& layout) {
  using json = nlohmann::json;
  json vocab = {{"<unk>", kSpUnk}, {"<s>", kSpBos}, {"</s>", kSpEos}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = SpByte(static_cast<unsigned char>(b));
  }
  int32_t id = kSpMeta;
  for (const std::string c : {kMeta, std::string("h"), std::string("e"), std::string("l"), std::string("o")}) {
    vocab[c] = id++;
  }
  json merges = json::array();
  for (const auto& [a, b] : kSpMerges) {
    vocab[a + b] = id++;
    merges.push_back(json::array({a, b}));
  }
  const json added = SpecialTokens({{"<unk>", kSpUnk}, {"<s>", kSpBos}, {"</s>", kSpEos}});
  json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single",
               {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
              {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {kSpBos}}, {"tokens", {"<s>"}}}}}}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", "<unk>"},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", true},
              {"byte_fallback", true},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  if (layout == "llama2") {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Prepend"}, {"prepend", kMeta}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}};
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  } else {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", false}};
    j["decoder"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", false}};
  }
  return j;
}

}  // namespace autouvm::testing
