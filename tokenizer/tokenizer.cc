#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_model.h"

namespace autouvm::tokenizer {

ByteTokenizer::ByteTokenizer(int64_t vocab_size, int64_t /*bos_id*/, int64_t /*eos_id*/) : vocab_size_(vocab_size) {}

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c));
  return ids;
}

std::string ByteTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));  // specials decode to nothing
  }
  return out;
}

namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> sp) : sp_(std::move(sp)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int> ids;
    std::string error;
    if (!sp_->Encode(std::string(text), &ids, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("sentencepiece: ", error));
    }
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string Decode(absl::Span<const int32_t> ids) const override {
    return sp_->Decode(std::vector<int>(ids.begin(), ids.end()));
  }

  int64_t vocab_size() const override { return sp_->size(); }
  std::string kind() const override { return "sentencepiece"; }

 private:
  std::unique_ptr<SentencePieceModel> sp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const TokenizerSpec& spec, const std::string& entry_dir) {
  if (spec.kind == "byte") {
    return std::make_unique<ByteTokenizer>(spec.vocab_size, spec.bos_id, spec.eos_id);
  }
  if (spec.kind == "bpe") {
    const std::string json_path = (std::filesystem::path(entry_dir) / "tokenizer.json").string();
    if (!std::filesystem::exists(json_path)) {
      return absl::NotFoundError(absl::StrCat("tokenizer: model.yaml says bpe but ", json_path, " is missing"));
    }
    ASSIGN_OR_RETURN(auto bpe, BpeTokenizer::Load(json_path));
    if (bpe->vocab_size() > spec.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", json_path, " has ids up to ", bpe->vocab_size() - 1,
                                                     ", past the model's vocab_size ", spec.vocab_size));
    }
    return bpe;
  }
  const std::string path = (std::filesystem::path(entry_dir) / "tokenizer.model").string();
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat("tokenizer: model.yaml says sentencepiece but ", path, " is missing"));
  }
  std::string error;
  auto sp = SentencePieceModel::Load(path, &error);
  if (!sp) return absl::InvalidArgumentError(absl::StrCat("tokenizer: cannot load ", path, ": ", error));
  if (sp->size() > spec.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", path, " has ", sp->size(),
                                                   " pieces, more than the model's vocab_size ", spec.vocab_size));
  }
  return std::make_unique<SentencePieceTokenizer>(std::move(sp));
}

}  // namespace autouvm::tokenizer
