// Tokenizers: the byte tokenizer, and a SentencePiece model trained here from a small text file.
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/llama_builder.h"
#include "tests/testing/temp_dir.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/text_stream.h"

namespace autouvm::tokenizer {
namespace {

using ::testing::HasSubstr;

constexpr int kTrainedVocab = 400;  // 256 byte pieces + 3 specials + ~75 characters + merges

TEST(ByteTokenizerTest, RoundTripsMultibyteUtf8) {
  const ByteTokenizer tok(320, kByteBosId, kByteEosId);
  const std::string text = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93";  // "héllo wörld ✓"
  auto ids = tok.Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), text.size());  // one id per byte
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ((*ids)[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(tok.Decode(*ids), text);
  EXPECT_EQ(tok.kind(), "byte");
  EXPECT_EQ(tok.vocab_size(), 320);
}

TEST(ByteTokenizerTest, SpecialsDecodeToNothing) {
  const ByteTokenizer tok(320, kByteBosId, kByteEosId);
  EXPECT_EQ(
      tok.Decode(std::vector<int32_t>{static_cast<int32_t>(kByteBosId), 'o', 'k', static_cast<int32_t>(kByteEosId)}),
      "ok");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{256, 257, 300}), "");
}

TEST(ByteTokenizerTest, CreateTokenizerPicksByteForByteConfig) {
  auto tok =
      CreateTokenizer(engine::TokenizerSpecOf(engine::DefaultTinyModelConfig("m")), "/nonexistent-dir-not-needed");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "byte");
  EXPECT_EQ((*tok)->vocab_size(), 320);
}

// These run sentencepiece through its plugin (Note [sentencepiece plugin] in
// tokenizer/sentencepiece_plugin.h), in a process that also has libprotobuf 3.21 loaded, as the daemon does.
//
// Each test gets its own temp dir; the model is trained only by the tests that need one.
class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    entry_ = dir_.Sub("entry");
    std::filesystem::create_directories(entry_);
    model_path_ = (std::filesystem::path(entry_) / "tokenizer.model").string();
    config_ = engine::DefaultTinyModelConfig("sp-model");
    config_.tokenizer = "sentencepiece";
    config_.vocab_size = kTrainedVocab;
    config_.bos_id = 1;
    config_.eos_id = 2;
  }

  // Trains a tiny BPE model from a text file and copies it to <entry>/tokenizer.model.
  void TrainAndInstall() {
    const std::string corpus = dir_.Sub("corpus.txt");
    {
      std::ofstream out(corpus);
      const char* lines[] = {
          "the quick brown fox jumps over the lazy dog",
          "hello world, hello tokenizer, hello sentencepiece",
          "a small model is trained from this text for the tests",
          "numbers 0123456789 and punctuation: ; ! ? ( ) - _ + =",
          "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
          "generation streams text one token at a time",
      };
      for (int rep = 0; rep < 40; ++rep) {
        for (const char* line : lines) out << line << " " << rep << "\n";
      }
    }
    ASSERT_EQ(TrainSentencePieceModel(corpus, dir_.Sub("sp"), kTrainedVocab), "");
    std::filesystem::copy_file(dir_.Sub("sp.model"), model_path_);
  }

  testing::TempDir dir_;
  std::string entry_;
  std::string model_path_;
  engine::ModelConfig config_;
};

TEST_F(SentencePieceTokenizerTest, RoundTripsText) {
  ASSERT_NO_FATAL_FAILURE(TrainAndInstall());
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece");
  EXPECT_EQ((*tok)->vocab_size(), kTrainedVocab);
  const std::string text = "hello world, the quick brown fox";
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_FALSE(ids->empty());
  EXPECT_LT(ids->size(), text.size());  // BPE merged something
  for (int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, kTrainedVocab);
  }
  EXPECT_EQ((*tok)->Decode(*ids), text);
}

TEST_F(SentencePieceTokenizerTest, RoundTripsUnseenMultibyteTextThroughByteFallback) {
  ASSERT_NO_FATAL_FAILURE(TrainAndInstall());
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93";  // none of é, ö, ✓ is in the corpus
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*tok)->Decode(*ids), text);
}

// Note [Decoding a window] (tokenizer/text_stream.cc) with the sentencepiece library's own decoding: after
// every push the stream holds the whole decode of the ids so far — leading spaces, byte-fallback
// characters, unseen text and ids drawn at random alike.
TEST_F(SentencePieceTokenizerTest, AStreamDecodesFromItsAnchorsAsTheWholeIdsDecode) {
  ASSERT_NO_FATAL_FAILURE(TrainAndInstall());
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<std::vector<int32_t>> sequences;
  auto encoded = (*tok)->Encode(
      "hello world,  the quick  brown fox h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93 \xE4\xBD\xA0\xE5\xA5\xBD"
      "\xF0\x9F\x98\x80 generation   streams text 0123 ( ) - _");
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  sequences.push_back(*encoded);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(0, kTrainedVocab - 1);
  for (int round = 0; round < 10; ++round) {
    std::vector<int32_t> ids(150);
    for (int32_t& id : ids) id = any(rng);
    sequences.push_back(ids);
  }
  for (size_t k = 0; k < sequences.size(); ++k) {
    TextStream ts(tok->get(), {});
    std::vector<int32_t> so_far;
    for (const int32_t id : sequences[k]) {
      so_far.push_back(id);
      ts.Push(id);
      ASSERT_EQ(ts.decoded(), (*tok)->Decode(so_far)) << "sequence " << k << ", after " << so_far.size() << " ids";
    }
  }
}

TEST_F(SentencePieceTokenizerTest, MissingModelFileIsNotFoundNamingThePath) {
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr(model_path_));
}

TEST_F(SentencePieceTokenizerTest, CorruptModelFileIsInvalidArgument) {
  {
    std::ofstream out(model_path_, std::ios::trunc | std::ios::binary);
    out << "this is not a serialized sentencepiece ModelProto \x01\x02\xff";
  }
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr(model_path_));
}

TEST_F(SentencePieceTokenizerTest, MorePiecesThanVocabSizeIsInvalidArgument) {
  ASSERT_NO_FATAL_FAILURE(TrainAndInstall());
  config_.vocab_size = kTrainedVocab - 1;
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("vocab_size"));
}

TEST_F(SentencePieceTokenizerTest, VocabSizeLargerThanPieceCountIsAccepted) {
  ASSERT_NO_FATAL_FAILURE(TrainAndInstall());
  config_.vocab_size = kTrainedVocab + 64;  // models may pad their embedding table
  auto tok = CreateTokenizer(engine::TokenizerSpecOf(config_), entry_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), kTrainedVocab);
}

}  // namespace
}  // namespace autouvm::tokenizer
