// The sentencepiece plugin: see Note [sentencepiece plugin] in sentencepiece_plugin.h. Built as its own
// shared module and loaded into a namespace of its own; no Abseil, gRPC or libtorch header may be here.
#include "tokenizer/sentencepiece_plugin.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

int Fail(const std::string& message, char* err, size_t err_cap) {
  if (err_cap > 0) {
    const size_t n = std::min(message.size(), err_cap - 1);
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
  }
  return -1;
}

int Load(const char* path, void** model, char* err, size_t err_cap) {
  try {
    auto sp = std::make_unique<Processor>();
    const auto status = sp->Load(path);
    if (!status.ok()) return Fail(status.ToString(), err, err_cap);
    *model = sp.release();
    return 0;
  } catch (const std::exception& e) {
    return Fail(e.what(), err, err_cap);
  }
}

void Release(void* model) { delete static_cast<Processor*>(model); }

int Encode(const void* model, const char* text, size_t text_len, int* ids, size_t ids_cap, size_t* needed, char* err,
           size_t err_cap) {
  try {
    std::vector<int> out;
    const auto status = static_cast<const Processor*>(model)->Encode(std::string(text, text_len), &out);
    if (!status.ok()) return Fail(status.ToString(), err, err_cap);
    *needed = out.size();
    if (out.size() > ids_cap) return 1;
    std::copy(out.begin(), out.end(), ids);
    return 0;
  } catch (const std::exception& e) {
    return Fail(e.what(), err, err_cap);
  }
}

int Decode(const void* model, const int* ids, size_t n_ids, char* text, size_t text_cap, size_t* needed) {
  try {
    std::string out;
    if (!static_cast<const Processor*>(model)->Decode(std::vector<int>(ids, ids + n_ids), &out).ok()) return -1;
    *needed = out.size();
    if (out.size() > text_cap) return 1;
    std::memcpy(text, out.data(), out.size());
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

int PieceCount(const void* model) { return static_cast<const Processor*>(model)->GetPieceSize(); }

int Train(const char* args, char* err, size_t err_cap) {
  try {
    const auto status = sentencepiece::SentencePieceTrainer::Train(args);
    return status.ok() ? 0 : Fail(status.ToString(), err, err_cap);
  } catch (const std::exception& e) {
    return Fail(e.what(), err, err_cap);
  }
}

constexpr AutouvmSentencePieceApi kApi = {
    kAutouvmSentencePieceApiVersion, Load, Release, Encode, Decode, PieceCount, Train};

}  // namespace

extern "C" __attribute__((visibility("default"))) const AutouvmSentencePieceApi* autouvm_sentencepiece_api(void) {
  return &kApi;
}
