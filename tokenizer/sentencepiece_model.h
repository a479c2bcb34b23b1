// A sentencepiece model, through the plugin that isolates Debian's libsentencepiece from the rest of the
// process (Note [sentencepiece plugin] in sentencepiece_plugin.h). The plugin is loaded on first use.
// Immutable after Load; safe to use from several threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace autouvm::tokenizer {

class SentencePieceModel {
 public:
  // nullptr and `*error` set when the file cannot be loaded.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();

  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const;
  std::string Decode(const std::vector<int>& ids) const;  // "" if an id is outside the vocabulary
  int size() const;

 private:
  struct Impl;
  explicit SentencePieceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Trains a small model from a text file (tests, examples). Returns "" or the error.
std::string TrainSentencePieceModel(const std::string& text_file, const std::string& model_prefix, int vocab_size);

}  // namespace autouvm::tokenizer
