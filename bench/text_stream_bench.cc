// text_stream_bench: what detokenizing a stream costs per token as the output grows (Note [Decoding a
// window], tokenizer/text_stream.cc), against decoding every id at each token (what TextStream did before).
// The scheduler does this for every row of every pass, on the model's thread.
//
//   build/bench/text_stream_bench [--tokens 64,512,2048,8192] [--tokenizer-json PATH]
//
// Tokenizers: bytes; a sentencepiece model trained here (vocabulary 2000) on generated text with some
// multibyte characters (byte fallback); and a tokenizer.json given with --tokenizer-json (Llama 3's,
// Mistral's, ...). The text streamed is the same generated text, encoded by each.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace {

using autouvm::tokenizer::Tokenizer;

// Made-up words of one to four syllables, punctuation, and now and then a word of multibyte characters
// (accents, CJK, an emoji: byte fallback for sentencepiece).
std::string GeneratedText(size_t bytes) {
  const std::string consonants = "bcdfghklmnprstvwz", vowels = "aeiou";
  const std::vector<std::string> multibyte = {"h\xC3\xA9llo",     "w\xC3\xB6rld", "\xE4\xBD\xA0\xE5\xA5\xBD",
                                              "\xF0\x9F\x98\x80", "na\xC3\xAFve", "\xE2\x9C\x93"};
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> c(0, consonants.size() - 1), v(0, vowels.size() - 1), syllables(1, 4),
      punct(0, 9), rare(0, 19), mb(0, multibyte.size() - 1);
  std::string text;
  while (text.size() < bytes) {
    if (rare(rng) == 0) {
      text += multibyte[mb(rng)];
    } else {
      for (size_t k = syllables(rng); k > 0; --k) {
        text += consonants[c(rng)];
        text += vowels[v(rng)];
      }
    }
    const size_t p = punct(rng);
    text += p == 0 ? ", " : p == 1 ? ".\n" : " ";
  }
  return text;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Row(const std::string& name, const Tokenizer& tok, const std::vector<int32_t>& all, size_t n) {
  const std::vector<int32_t> ids(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(n, all.size())));
  auto t0 = std::chrono::steady_clock::now();
  autouvm::tokenizer::TextStream ts(&tok, {});
  size_t emitted = 0;
  for (const int32_t id : ids) emitted += ts.Push(id).size();
  emitted += ts.Flush().size();
  const double stream_s = SecondsSince(t0);
  // The cost of the old push: the whole decode of the ids so far, at every token.
  t0 = std::chrono::steady_clock::now();
  size_t whole_bytes = 0;
  for (size_t k = 1; k <= ids.size(); ++k) {
    whole_bytes += tok.Decode(absl::Span<const int32_t>(ids.data(), k)).size();
  }
  const double whole_s = SecondsSince(t0);
  const bool same = ts.decoded() == tok.Decode(ids);
  std::printf("| %s | %zu | %.2f | %.2f | %.1f | %s |\n", name.c_str(), ids.size(), 1e6 * stream_s / ids.size(),
              1e6 * whole_s / ids.size(), whole_s / stream_s, same ? "yes" : "NO");
  (void)emitted;
  (void)whole_bytes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Detokenizing a stream: cost per token against decoding every id at each token"};
  std::string tokens_flag = "64,512,2048,8192";
  std::string tokenizer_json;
  app.add_option("--tokens", tokens_flag, "stream lengths (tokens), comma-separated")->capture_default_str();
  app.add_option("--tokenizer-json", tokenizer_json, "also a Hugging Face tokenizer.json");
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> lengths;
  for (const std::string& t : std::vector<std::string>(absl::StrSplit(tokens_flag, ',')))
    lengths.push_back(std::stoul(t));
  const size_t longest = *std::max_element(lengths.begin(), lengths.end());
  const std::string text = GeneratedText(8 * longest + 4096);

  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> tokenizers;
  tokenizers.emplace_back("byte", std::make_unique<autouvm::tokenizer::ByteTokenizer>(
                                      320, autouvm::tokenizer::kByteBosId, autouvm::tokenizer::kByteEosId));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("text-stream-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "entry");
  {
    std::ofstream corpus(dir / "corpus.txt");
    corpus << GeneratedText(1 << 20);
  }
  const std::string trained =
      autouvm::tokenizer::TrainSentencePieceModel((dir / "corpus.txt").string(), (dir / "sp").string(), 2000);
  if (!trained.empty()) {
    std::fprintf(stderr, "text_stream_bench: training sentencepiece: %s\n", trained.c_str());
    return 1;
  }
  std::filesystem::copy_file(dir / "sp.model", dir / "entry" / "tokenizer.model");
  auto sp = autouvm::tokenizer::CreateTokenizer({.kind = "sentencepiece", .vocab_size = 2000, .bos_id = 1, .eos_id = 2},
                                                (dir / "entry").string());
  if (!sp.ok()) {
    std::fprintf(stderr, "text_stream_bench: %s\n", std::string(sp.status().message()).c_str());
    return 1;
  }
  tokenizers.emplace_back("sentencepiece (trained here, 2000)", *std::move(sp));
  if (!tokenizer_json.empty()) {
    auto bpe = autouvm::tokenizer::BpeTokenizer::Load(tokenizer_json);
    if (!bpe.ok()) {
      std::fprintf(stderr, "text_stream_bench: %s\n", std::string(bpe.status().message()).c_str());
      return 1;
    }
    tokenizers.emplace_back(tokenizer_json, *std::move(bpe));
  }
  std::filesystem::remove_all(dir);

  std::printf(
      "Detokenizing one stream, us per token: TextStream::Push (the window from its anchor) against the whole "
      "decode of the ids so far at every token (what Push did before)\n\n"
      "| tokenizer | tokens | stream us / token | whole decode us / token | whole / stream | same text |\n"
      "|---|---|---|---|---|---|\n");
  for (const auto& [name, tok] : tokenizers) {
    auto ids = tok->Encode(text);
    if (!ids.ok()) {
      std::fprintf(stderr, "text_stream_bench: %s: %s\n", name.c_str(), std::string(ids.status().message()).c_str());
      return 1;
    }
    for (const size_t n : lengths) Row(name, *tok, *ids, n);
  }
  return 0;
}
