// TextStream over the byte tokenizer (one token per byte) and a byte-fallback BPE one, and the UTF-8
// helpers.
#include "tokenizer/text_stream.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/bpe_fixture.h"
#include "tokenizer/bpe_tokenizer.h"

namespace autouvm::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD

// True if `s` is one or more U+FFFD and nothing else. (SanitizeUtf8 replaces invalid input byte by byte,
// so a truncated sequence may become one U+FFFD per byte; these tests accept either count.)
bool OnlyReplacementCharacters(const std::string& s) {
  if (s.empty() || s.size() % 3 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 3) {
    if (s.compare(i, 3, kFffd) != 0) return false;
  }
  return true;
}

class TextStreamTest : public ::testing::Test {
 protected:
  // Pushes each byte of `text` as a token; returns the chunk each push produced.
  std::vector<std::string> PushAll(TextStream& ts, const std::string& text) {
    std::vector<std::string> chunks;
    for (unsigned char c : text) chunks.push_back(ts.Push(c));
    return chunks;
  }

  ByteTokenizer tok_{320, kByteBosId, kByteEosId};
};

TEST_F(TextStreamTest, ChunksConcatenateToTheFullText) {
  const std::string text = "Hello, w\xC3\xB6rld! \xE2\x9C\x93 \xF0\x9F\x98\x80 done";  // ö ✓ 😀
  TextStream ts(&tok_, {});
  std::string joined;
  for (const auto& c : PushAll(ts, text)) joined += c;
  joined += ts.Flush();
  EXPECT_EQ(joined, text);
  EXPECT_EQ(ts.text(), text);
  EXPECT_FALSE(ts.stopped());
}

TEST_F(TextStreamTest, AsciiIsReleasedImmediately) {
  TextStream ts(&tok_, {});
  EXPECT_EQ(PushAll(ts, "abc"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ts.Flush(), "");
}

TEST_F(TextStreamTest, SpecialTokensProduceNoText) {
  TextStream ts(&tok_, {});
  EXPECT_EQ(ts.Push('a'), "a");
  EXPECT_EQ(ts.Push(static_cast<int32_t>(kByteEosId)), "");
  EXPECT_EQ(ts.text(), "a");
}

TEST_F(TextStreamTest, MultibyteCharacterIsHeldBackUntilComplete) {
  TextStream ts(&tok_, {});
  EXPECT_EQ(PushAll(ts, "x\xC3\xA9"), (std::vector<std::string>{"x", "", "\xC3\xA9"}));                    // é
  EXPECT_EQ(PushAll(ts, "\xF0\x9F\x98\x80"), (std::vector<std::string>{"", "", "", "\xF0\x9F\x98\x80"}));  // 😀
  EXPECT_EQ(ts.text(), "x\xC3\xA9\xF0\x9F\x98\x80");
}

TEST_F(TextStreamTest, StopStringSpanningTwoTokensStopsAndCutsBeforeIt) {
  TextStream ts(&tok_, {"\n\n"});
  EXPECT_EQ(ts.Push('a'), "a");
  EXPECT_EQ(ts.Push('b'), "b");
  EXPECT_EQ(ts.Push('\n'), "");  // could be the start of "\n\n"
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.Push('\n'), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.text(), "ab");
  // Nothing comes out after the stop.
  EXPECT_EQ(ts.Push('c'), "");
  EXPECT_EQ(ts.Flush(), "");
  EXPECT_EQ(ts.text(), "ab");
}

TEST_F(TextStreamTest, StopStringInsideOneTokenCutsBeforeIt) {
  // A tokenizer that decodes token 1 to a whole multi-byte string.
  class WordTokenizer : public Tokenizer {
   public:
    absl::StatusOr<std::vector<int32_t>> Encode(std::string_view) const override { return std::vector<int32_t>{}; }
    std::string Decode(absl::Span<const int32_t> ids) const override {
      std::string out;
      for (int32_t id : ids) out += id == 1 ? "xyEND!" : "ab";
      return out;
    }
    int64_t vocab_size() const override { return 2; }
    std::string kind() const override { return "word"; }
  } words;
  TextStream ts(&words, {"END"});
  EXPECT_EQ(ts.Push(0), "ab");
  EXPECT_EQ(ts.Push(1), "xy");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.text(), "abxy");
}

TEST_F(TextStreamTest, EarliestOfSeveralStopStringsWins) {
  TextStream ts(&tok_, {"cd", "bc"});
  EXPECT_EQ(ts.Push('a'), "a");
  EXPECT_EQ(ts.Push('b'), "");  // start of "bc"
  EXPECT_EQ(ts.Push('c'), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.text(), "a");
}

TEST_F(TextStreamTest, DivergingStopPrefixIsReleased) {
  TextStream ts(&tok_, {"\n\n", "STOP"});
  EXPECT_EQ(ts.Push('\n'), "");
  EXPECT_EQ(ts.Push('x'), "\nx");
  EXPECT_EQ(PushAll(ts, "STO"), (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(ts.Push('P' + 1), "STOQ");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.text(), "\nxSTOQ");
}

TEST_F(TextStreamTest, EmptyStopStringsAreIgnored) {
  TextStream ts(&tok_, {""});
  EXPECT_EQ(ts.Push('a'), "a");
  EXPECT_FALSE(ts.stopped());
}

TEST_F(TextStreamTest, FlushReturnsHeldBackStopPrefix) {
  TextStream ts(&tok_, {"\n\n"});
  EXPECT_EQ(ts.Push('a'), "a");
  EXPECT_EQ(ts.Push('\n'), "");
  EXPECT_EQ(ts.Flush(), "\n");
  EXPECT_EQ(ts.text(), "a\n");
  EXPECT_FALSE(ts.stopped());
}

TEST_F(TextStreamTest, FlushOfIncompleteCharacterGivesReplacementCharacter) {
  TextStream ts(&tok_, {});
  EXPECT_EQ(ts.Push('a'), "a");
  EXPECT_EQ(ts.Push(0xE2), "");  // first byte of ✓
  EXPECT_EQ(ts.Push(0x9C), "");
  const std::string rest = ts.Flush();
  EXPECT_TRUE(OnlyReplacementCharacters(rest)) << rest;  // never invalid UTF-8 on the wire
}

// text() is what was sent: sanitized, even where the decoded bytes were not valid UTF-8.
TEST_F(TextStreamTest, TextIsTheConcatenationOfEmittedChunksEvenAfterInvalidBytes) {
  TextStream ts(&tok_, {});
  std::string joined;
  for (int32_t id : std::vector<int32_t>{'a', 0x80, 'b', 0xE2}) joined += ts.Push(id);
  joined += ts.Flush();
  EXPECT_EQ(joined.substr(0, 1 + kFffd.size() + 1), "a" + kFffd + "b");
  EXPECT_EQ(ts.text(), joined);
}

TEST_F(TextStreamTest, InvalidBytesAreReleasedAsReplacementCharacters) {
  TextStream ts(&tok_, {});
  EXPECT_EQ(ts.Push(0x80), kFffd);  // a lone continuation byte can never become valid
  EXPECT_EQ(ts.Push('a'), "a");
}

TEST(Utf8Test, CompleteUtf8PrefixStopsBeforeIncompleteSequence) {
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xC3"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xC3\xA9"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x9C"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x9C\x93"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98"), 1u);  // truncated 4-byte sequence
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98\x80"), 5u);
}

TEST(Utf8Test, CompleteUtf8PrefixTreatsInvalidBytesAsFinal) {
  EXPECT_EQ(CompleteUtf8Prefix("a\x80"), 2u);      // lone continuation byte
  EXPECT_EQ(CompleteUtf8Prefix("a\xC0\xAF"), 3u);  // overlong '/'
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F"
                               "b"),
            4u);  // truncated, then ASCII: cannot complete
}

TEST(Utf8Test, CompleteUtf8PrefixLeavesOutTrailingReplacementCharacters) {
  EXPECT_EQ(CompleteUtf8Prefix("ab" + kFffd), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab" + kFffd + "c"), 6u);                    // only trailing ones are held back
  EXPECT_EQ(CompleteUtf8Prefix("ab" + kFffd + kFffd + kFffd), 2u);          // three bytes of a four-byte character
  EXPECT_EQ(CompleteUtf8Prefix("ab" + kFffd + kFffd + kFffd + kFffd), 5u);  // four: the first is final
}

// A four-byte character that a byte-fallback tokenizer spells as four <0xAB> tokens (Llama 2's
// tokenizer.json: tokenizer/bpe_tokenizer.h) streams out whole, never as replacement characters.
TEST(TextStreamBpeTest, ByteFallbackCharactersStreamOutWhole) {
  auto bpe = BpeTokenizer::Parse(testing::SentencePieceStyleJson("llama2").dump(), "tokenizer.json");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  TextStream ts(bpe->get(), {});
  std::string out;
  for (const int32_t id : {testing::kSpMetaHe, testing::SpByte(0xF0), testing::SpByte(0x9F), testing::SpByte(0x98),
                           testing::SpByte(0x80), testing::kSpMetaHello}) {
    const std::string chunk = ts.Push(id);
    EXPECT_EQ(chunk.find(kFffd), std::string::npos) << "after id " << id;
    out += chunk;
  }
  out += ts.Flush();
  EXPECT_EQ(out, "he\xF0\x9F\x98\x80 hello");
  EXPECT_EQ(ts.text(), out);
}

// Note [Decoding a window]: a Tokenizer around another that counts the ids it is given to decode.
class CountingTokenizer final : public Tokenizer {
 public:
  explicit CountingTokenizer(const Tokenizer* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override { return inner_->Encode(text); }
  std::string Decode(absl::Span<const int32_t> ids) const override {
    decoded_ids += static_cast<int64_t>(ids.size());
    return inner_->Decode(ids);
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::string kind() const override { return inner_->kind(); }
  mutable int64_t decoded_ids = 0;

 private:
  const Tokenizer* inner_;
};

// Every kind of tokenizer TextStream meets here: bytes, byte-level BPE (Llama 3's kind), and
// sentencepiece's kind as tokenizer.json spells it (Llama 2's decoders; Metaspace). The sentencepiece
// library's own decoding is checked the same way in tokenizer_test.cc.
std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> EveryKind() {
  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> kinds;
  kinds.emplace_back("byte", std::make_unique<ByteTokenizer>(320, kByteBosId, kByteEosId));
  for (const auto& [name, json] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"byte-level BPE", testing::TokenizerJson()},
           {"llama2", testing::SentencePieceStyleJson("llama2")},
           {"metaspace", testing::SentencePieceStyleJson("metaspace")}}) {
    auto bpe = BpeTokenizer::Parse(json.dump(), "tokenizer.json");
    EXPECT_TRUE(bpe.ok()) << name << ": " << bpe.status();
    if (bpe.ok()) kinds.emplace_back(name, *std::move(bpe));
  }
  return kinds;
}

// Pushes `ids` one by one; after each, what the stream holds decoded must be the whole decode of the ids
// so far. (What it emits follows from that as it did when each push decoded every id; where the decoder
// revises text already sent, what was sent stands, so the emitted text is compared only in the tests above.)
void ExpectWholeDecodesAfterEveryPush(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::string& what) {
  TextStream ts(&tok, {});
  std::vector<int32_t> so_far;
  for (size_t i = 0; i < ids.size(); ++i) {
    so_far.push_back(ids[i]);
    ts.Push(ids[i]);
    ASSERT_EQ(ts.decoded(), tok.Decode(so_far)) << what << ": after push " << i << " (id " << ids[i] << ")";
  }
}

const std::string kVariedText =
    "Hello hello, he said.  Two  spaces;\ttab\nnew line \xC3\xA9t\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x98\x80 "
    "end hello  hello\n\n \xE4\xBD\xA0\xE5\xA5\xBD ";

TEST(TextStreamWindowTest, EncodedTextDecodesAsAWholeAfterEveryPushInAFewIdsEach) {
  for (const auto& [name, tok] : EveryKind()) {
    std::string text;
    for (int i = 0; i < 20; ++i) text += kVariedText;  // about 2000 ids for the byte tokenizer
    auto ids = tok->Encode(text);
    ASSERT_TRUE(ids.ok()) << name << ": " << ids.status();
    ExpectWholeDecodesAfterEveryPush(*tok, *ids, name);
    // The cost: decoding every id at each push gives n (n + 1) / 2 ids to the tokenizer; a window, a few
    // per push.
    CountingTokenizer counting(tok.get());
    TextStream ts(&counting, {});
    for (const int32_t id : *ids) ts.Push(id);
    EXPECT_LE(counting.decoded_ids, 8 * static_cast<int64_t>(ids->size())) << name << ": " << ids->size() << " ids";
    EXPECT_EQ(ts.decoded(), tok->Decode(*ids)) << name;
  }
}

// Any ids at all, special ones, lone bytes of characters cut short and invalid bytes included: the
// window's result is still the whole decode's (where a decode would not extend the window's, the stream
// decodes every id).
TEST(TextStreamWindowTest, RandomIdsDecodeAsAWholeAfterEveryPush) {
  std::mt19937 rng(29);
  for (const auto& [name, tok] : EveryKind()) {
    std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(tok->vocab_size()) - 1);
    for (int round = 0; round < 20; ++round) {
      std::vector<int32_t> ids(200);
      for (int32_t& id : ids) id = any(rng);
      ExpectWholeDecodesAfterEveryPush(*tok, ids, name + ", round " + std::to_string(round));
    }
  }
}

// Sentencepiece's kind: the first token's leading space is dropped only at the start of the text, and a
// character spelled in byte tokens comes out whole, the window starting on a token of its own.
TEST(TextStreamWindowTest, LeadingSpacesAndByteRunsComeOutAsTheWholeDecodeHasThem) {
  auto bpe = BpeTokenizer::Parse(testing::SentencePieceStyleJson("llama2").dump(), "tokenizer.json");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  const std::vector<int32_t> ids = {testing::kSpMetaHello, testing::kSpMetaHello, testing::kSpMeta,
                                    testing::kSpMetaMeta,  testing::SpByte(0xE4), testing::SpByte(0xBD),
                                    testing::SpByte(0xA0), testing::kSpMetaHe,    testing::kSpL};
  TextStream ts(bpe->get(), {});
  std::string out;
  for (const int32_t id : ids) out += ts.Push(id);
  out += ts.Flush();
  EXPECT_EQ(out, "hello hello   \xE4\xBD\xA0 hel");
  ExpectWholeDecodesAfterEveryPush(**bpe, ids, "llama2");
}

TEST(Utf8Test, SanitizeKeepsValidText) {
  const std::string valid = "h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF";  // incl. U+10FFFF
  EXPECT_EQ(SanitizeUtf8(valid), valid);
  EXPECT_EQ(SanitizeUtf8(""), "");
}

TEST(Utf8Test, SanitizeReplacesLoneContinuationByte) {
  EXPECT_EQ(SanitizeUtf8("a\x80z"), "a" + kFffd + "z");
  EXPECT_EQ(SanitizeUtf8("\xBF"), kFffd);
}

TEST(Utf8Test, SanitizeReplacesOverlongEncodings) {
  // "/" as overlong 2-byte (C0 AF) and 3-byte (E0 80 AF) sequences must not decode to "/".
  for (const std::string& bad : {std::string("\xC0\xAF"), std::string("\xE0\x80\xAF"), std::string("\xC1\xBF")}) {
    const std::string out = SanitizeUtf8("a" + bad + "z");
    EXPECT_EQ(out.find('/'), std::string::npos);
    EXPECT_EQ(out.front(), 'a');
    EXPECT_EQ(out.back(), 'z');
    EXPECT_TRUE(OnlyReplacementCharacters(out.substr(1, out.size() - 2))) << out;
  }
}

TEST(Utf8Test, SanitizeReplacesSurrogatesAndOutOfRange) {
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80").substr(0, 3), kFffd);      // U+D800
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80").substr(0, 3), kFffd);  // > U+10FFFF
  EXPECT_EQ(SanitizeUtf8("\xF5\x80\x80\x80").substr(0, 3), kFffd);
  EXPECT_EQ(SanitizeUtf8("\xFF"), kFffd);
}

TEST(Utf8Test, SanitizeReplacesTruncatedFourByteSequence) {
  // At the end of the string, and followed by ASCII: replaced, and the ASCII survives.
  for (const std::string& in : {std::string("\xF0\x9F\x98"), std::string("\xF0\x9F\x98") + "a"}) {
    const std::string out = SanitizeUtf8(in);
    const bool tail_a = in.back() == 'a';
    ASSERT_EQ(out.substr(0, 3), kFffd);
    if (tail_a) ASSERT_EQ(out.back(), 'a');
    EXPECT_TRUE(OnlyReplacementCharacters(tail_a ? out.substr(0, out.size() - 1) : out)) << out;
    EXPECT_EQ(SanitizeUtf8(out), out);  // the result is valid UTF-8
  }
}

}  // namespace
}  // namespace autouvm::tokenizer
