// See Note [sentencepiece and Abseil] in sentencepiece_model.h: no Abseil header may be included here.
#include "server/sentencepiece_model.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace autouvm::server {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const auto status = impl->sp.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids, std::string* error) const {
  const auto status = impl_->sp.Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

std::string SentencePieceModel::Decode(const std::vector<int>& ids) const {
  std::string out;
  if (!impl_->sp.Decode(ids, &out).ok()) return std::string();
  return out;
}

int SentencePieceModel::size() const { return impl_->sp.GetPieceSize(); }

std::string TrainSentencePieceModel(const std::string& text_file, const std::string& model_prefix, int vocab_size) {
  const std::string args = "--input=" + text_file + " --model_prefix=" + model_prefix +
                           " --vocab_size=" + std::to_string(vocab_size) +
                           " --model_type=bpe --byte_fallback=true --character_coverage=1.0"
                           " --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 --minloglevel=2";
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  return status.ok() ? std::string() : status.ToString();
}

}  // namespace autouvm::server
