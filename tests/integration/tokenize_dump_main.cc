// tokenize_dump TOKENIZER: reads a JSON list of strings from stdin and prints, as JSON, each string's
// ids under our tokenizer and the text those ids decode to: [{"ids": [...], "text": "..."}, ...].
// TOKENIZER is a tokenizer.json (tokenizer::BpeTokenizer) or a file named tokenizer.model (sentencepiece,
// through CreateTokenizer as the daemon loads it). tests/gpu/hf_verify.py compares the output with
// transformers' tokenizers on the GPU host, where that library is installed.
#include <filesystem>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

absl::StatusOr<std::unique_ptr<autouvm::tokenizer::Tokenizer>> Load(const std::filesystem::path& path) {
  if (path.filename() == "tokenizer.model") {
    const autouvm::tokenizer::TokenizerSpec spec{.kind = "sentencepiece",
                                                 .vocab_size = std::numeric_limits<int32_t>::max()};
    return autouvm::tokenizer::CreateTokenizer(spec, path.parent_path().string());
  }
  return autouvm::tokenizer::BpeTokenizer::Load(path.string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenize_dump TOKENIZER_JSON|.../tokenizer.model < strings.json\n";
    return 2;
  }
  auto tokenizer = Load(argv[1]);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 1;
  }
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const nlohmann::json strings = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!strings.is_array()) {
    std::cerr << "stdin is not a JSON list of strings\n";
    return 2;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : strings) {
    auto ids = (*tokenizer)->Encode(s.get<std::string>());
    if (!ids.ok()) {
      out.push_back({{"error", std::string(ids.status().message())}});
      continue;
    }
    out.push_back({{"ids", *ids}, {"text", (*tokenizer)->Decode(*ids)}});
  }
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}
