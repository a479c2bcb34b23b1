// tokenizer/bpe_tokenizer.h on a tokenizer.json made here: Llama 3's pre-tokenizer regex over byte-level
// symbols, a few merges, added tokens, NFC; ids worked out by hand from the merges' ranks. (Against
// transformers' own tokenizers on real vocabularies: tests/gpu/hf_verify.py, on the GPU host.)
#include "tokenizer/bpe_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/bpe_fixture.h"

namespace autouvm::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

using testing::kAaaa;
using testing::kBegin;
using testing::kEot;
using testing::kGthe;
using testing::kHe;
using testing::kHello;
using testing::kImStart;
using testing::kMeta;
using testing::SentencePieceStyleJson;
using testing::SpByte;
using testing::Sym;
using testing::TokenizerJson;

std::unique_ptr<BpeTokenizer> Make(const json& j) {
  auto t = BpeTokenizer::Parse(j.dump(), "tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> Bytes(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

std::vector<int32_t> Encode(const BpeTokenizer& t, const std::string& text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// A tokenizer.json spoiled one way: refused as INVALID_ARGUMENT naming the file and the key.
struct RefusalCase {
  std::string what;
  std::function<void(json&)> spoil;
  std::string says;
};

void ExpectRefused(const json& good, const std::vector<RefusalCase>& cases) {
  for (const RefusalCase& c : cases) {
    json j = good;
    c.spoil(j);
    auto t = BpeTokenizer::Parse(j.dump(), "m/tokenizer.json");
    ASSERT_FALSE(t.ok()) << c.what;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("m/tokenizer.json: " + c.says)) << c.what;
  }
}

TEST(BpeTokenizerTest, MergesApplyByRankWithinEachPiece) {
  auto t = Make(TokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Encode(*t, "hello"), ElementsAre(kHello));                     // he, ll, llo, hello
  EXPECT_THAT(Encode(*t, " the"), ElementsAre(kGthe));                       // Ġt, he, Ġthe
  EXPECT_THAT(Encode(*t, "the hello"), ElementsAre('t', kHe, ' ', kHello));  // "the" | " hello": no "Ġ h" merge
  EXPECT_THAT(Encode(*t, "hi"), ElementsAre('h', 'i'));
  EXPECT_EQ(t->vocab_size(), 303);
  EXPECT_EQ(t->template_bos_id(), kBegin);
  EXPECT_EQ(t->AddedTokenId("<|eot_id|>"), kEot);
  EXPECT_EQ(t->AddedTokenId("<|nope|>"), -1);
}

// Llama 3's regex: letters with one leading non-letter, digits in threes, contractions in any case,
// whitespace runs kept off the next word but the last space.
TEST(BpeTokenizerTest, TheSplitRegexCutsAsLlama3Does) {
  auto t = Make(TokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "12345"), Bytes("12345"));
  EXPECT_EQ(Encode(*t, "I'M"), Bytes("I'M"));
  EXPECT_THAT(Encode(*t, "a  hello"), ElementsAre('a', ' ', ' ', kHello));  // "a" | " " | " hello"
  EXPECT_THAT(Encode(*t, "he\n\nhe"), ElementsAre(kHe, '\n', '\n', kHe));
  // A long piece merges fully (Note [BPE merges]): 20000 a's are 5000 "aaaa".
  const auto long_ids = Encode(*t, std::string(20000, 'a'));
  EXPECT_EQ(long_ids.size(), 5000u);
  EXPECT_TRUE(std::all_of(long_ids.begin(), long_ids.end(), [](int32_t id) { return id == kAaaa; }));
}

TEST(BpeTokenizerTest, AddedTokensAreMatchedBeforeAnythingElse) {
  auto t = Make(TokenizerJson());
  ASSERT_NE(t, nullptr);
  std::vector<int32_t> want = {kImStart};
  for (int32_t id : Bytes("user")) want.push_back(id);
  want.push_back('\n');
  want.push_back(kHello);
  want.push_back(kEot);
  EXPECT_EQ(Encode(*t, "<|im_start|>user\nhello<|eot_id|>"), want);
  // Not a whole added token: plain bytes.
  EXPECT_EQ(Encode(*t, "<|eot_i"), Bytes("<|eot_i"));
}

TEST(BpeTokenizerTest, DecodingGivesBackTheBytesAndAddedTokensText) {
  auto t = Make(TokenizerJson());
  ASSERT_NE(t, nullptr);
  for (const std::string text : {std::string("hello, the world"), std::string("tabs\tand\r\nnewlines"),
                                 std::string("\xF0\x9F\x98\x80 emoji"), std::string("caf\xC3\xA9 na\xC3\xAFve"),
                                 std::string("zero\0byte", 9), std::string("<|im_start|>x<|eot_id|>")}) {
    EXPECT_EQ(t->Decode(Encode(*t, text)), text);
  }
  EXPECT_EQ(t->Decode({kGthe, kEot, 9999}), " the<|eot_id|>");  // an unknown id decodes to nothing
}

TEST(BpeTokenizerTest, AnNfcNormalizerComposesBeforeSplitting) {
  json j = TokenizerJson();
  j["normalizer"] = {{"type", "NFC"}};
  auto t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "e\xCC\x81"), Bytes("\xC3\xA9"));  // e + combining acute -> é
  auto plain = Make(TokenizerJson());
  EXPECT_EQ(Encode(*plain, "e\xCC\x81"), Bytes("e\xCC\x81"));
}

TEST(BpeTokenizerTest, WhatItCannotDoFaithfullyIsRefusedNamingTheKey) {
  const std::vector<RefusalCase> cases = {
      {"word piece", [](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type: \"WordPiece\": only BPE"},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; },
       "model.byte_fallback: with a ByteLevel pre-tokenizer"},
      {"metaspace with the byte-level decoder",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
       },
       "decoder: ByteLevel without a ByteLevel pre-tokenizer"},
      {"nfkc",
       [](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer: normalizer \"NFKC\" is not supported"},
      {"no merges", [](json& j) { j["model"].erase("merges"); }, "model.merges: missing"},
      {"a merge of unknown symbols", [](json& j) { j["model"]["merges"].push_back("zz qq"); },
       "model.merges[8]: \"zz\" + \"qq\" is not in the vocabulary"},
      {"no byte symbols", [](json& j) { j["model"]["vocab"].erase(Sym(0)); }, "model.vocab: no symbol"},
      {"another decoder",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder: decoder \"WordPiece\" is not supported"},
      {"a bad regex", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       "pre_tokenizer.pretokenizers[0].pattern: the regex (unclosed does not compile"},
      {"an added token without content", [](json& j) { j["added_tokens"][0].erase("content"); },
       "added_tokens[0]: needs an id and a content"},
  };
  ExpectRefused(TokenizerJson(), cases);
  EXPECT_THAT(std::string(BpeTokenizer::Parse("{", "t.json").status().message()),
              HasSubstr("t.json: not a JSON object"));
}

// Sentencepiece's kind as Llama 2's tokenizer.json writes it: every segment between added tokens gets
// the "▁" prefix (Prepend), even one that starts with a space; characters outside the vocabulary are
// their bytes; the decoders undo both.
TEST(BpeTokenizerTest, Llama2LayoutPrependsToEverySegmentAndFallsBackToBytes) {
  auto t = Make(SentencePieceStyleJson("llama2"));
  ASSERT_NE(t, nullptr);
  using namespace testing;  // NOLINT: the fixture's ids
  EXPECT_THAT(Encode(*t, "hello"), ElementsAre(kSpMetaHello));
  EXPECT_THAT(Encode(*t, " hello"), ElementsAre(kSpMeta, kSpMetaHello));  // "▁▁hello": "▁ ▁" ranks last
  EXPECT_THAT(Encode(*t, "hello</s>hello"), ElementsAre(kSpMetaHello, kSpEos, kSpMetaHello));
  EXPECT_THAT(Encode(*t, "h\u00e9"), ElementsAre(kSpMeta, kSpH, SpByte(0xC3), SpByte(0xA9)));  // é: not in vocab
  EXPECT_THAT(Encode(*t, "he  "), ElementsAre(kSpMetaHe, kSpMetaMeta));
  EXPECT_EQ(t->Decode({kSpBos, kSpMetaHello, SpByte(0xC3), SpByte(0xA9)}), "<s> hello\u00e9");
  EXPECT_EQ(t->Decode({kSpMetaHello, kSpMetaHello}), "hello hello");  // Strip: the first space only
  EXPECT_EQ(t->Decode({kSpMetaHe, SpByte(0xC3)}), "he\uFFFD");        // half a character
  EXPECT_EQ(t->template_bos_id(), kSpBos);
}

// transformers 5's layout (Mistral): a Metaspace pre-tokenizer that prepends "▁" only where the text
// starts the input and does not start with one already, and its decoder.
TEST(BpeTokenizerTest, MetaspaceFirstPrependsOnlyAtTheStartOfTheInput) {
  using namespace testing;  // NOLINT: the fixture's ids
  json j = SentencePieceStyleJson("metaspace");
  auto t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Encode(*t, "hello"), ElementsAre(kSpMetaHello));
  EXPECT_THAT(Encode(*t, " hello"), ElementsAre(kSpMetaHello));  // already starts with a space
  EXPECT_THAT(Encode(*t, "hello</s>hello"), ElementsAre(kSpMetaHello, kSpEos, kSpHe, kSpLl, kSpO));
  EXPECT_THAT(Encode(*t, "</s>hello"), ElementsAre(kSpEos, kSpHe, kSpLl, kSpO));
  EXPECT_EQ(t->Decode({kSpMetaHello, kSpMetaHello}), "hello hello");
  EXPECT_EQ(t->Decode({kSpMeta, kSpMetaHello}), " hello");  // the first token loses one space
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Encode(*t, "hello</s>hello"), ElementsAre(kSpMetaHello, kSpEos, kSpMetaHello));
  j["pre_tokenizer"]["split"] = true;  // every "▁" starts a piece: "▁he", "▁hello" merge apart
  t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Encode(*t, "he hello"), ElementsAre(kSpMetaHe, kSpMetaHello));
}

TEST(BpeTokenizerTest, WithoutByteFallbackUnknownCharactersAreOneUnknownToken) {
  using namespace testing;  // NOLINT: the fixture's ids
  json j = SentencePieceStyleJson("llama2");
  j["model"]["byte_fallback"] = false;
  auto t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Encode(*t, "h\u00e9\u00e9"), ElementsAre(kSpMeta, kSpH, kSpUnk));  // fuse_unk: one for both
  j["model"]["fuse_unk"] = false;
  t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Encode(*t, "h\u00e9\u00e9"), ElementsAre(kSpMeta, kSpH, kSpUnk, kSpUnk));
  j["model"]["unk_token"] = nullptr;
  t = Make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(std::string(t->Encode("h\u00e9").status().message()), HasSubstr("has no unknown token"));
}

TEST(BpeTokenizerTest, SentencePieceKindFilesItCannotServeAreRefusedNamingTheKey) {
  const std::vector<RefusalCase> cases = {
      {"an unknown token outside the vocabulary", [](json& j) { j["model"]["unk_token"] = "<nope>"; },
       "model.unk_token: \"<nope>\" is not in the vocabulary"},
      {"a prepend scheme", [](json& j) { j["pre_tokenizer"]["prepend_scheme"] = "sometimes"; },
       "pre_tokenizer.prepend_scheme: \"sometimes\""},
      {"spaces left as they are", [](json& j) { j["pre_tokenizer"] = nullptr; },
       "pre_tokenizer: neither ByteLevel nor Metaspace"},
      {"a regex replace",
       [](json& j) {
         j["decoder"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}};
       },
       "decoder.pattern: only a String pattern"},
  };
  ExpectRefused(SentencePieceStyleJson("metaspace"), cases);
}

}  // namespace
}  // namespace autouvm::tokenizer
