// SentencePieceModel over the dlmopen'd plugin: see Note [sentencepiece plugin] in sentencepiece_plugin.h.
#include "tokenizer/sentencepiece_model.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "tokenizer/sentencepiece_plugin.h"

namespace autouvm::tokenizer {
namespace {

constexpr char kPluginFile[] = "libautouvm_sentencepiece.so";

// Where the plugin may be: $AUTOUVM_SENTENCEPIECE_PLUGIN, beside the executable, in ../lib/autouvm of
// an installed tree, and where the build put it.
std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("AUTOUVM_SENTENCEPIECE_PLUGIN")) out.emplace_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / kPluginFile).string());
    out.push_back((exe.parent_path() / ".." / "lib" / "autouvm" / kPluginFile).string());
  }
#ifdef AUTOUVM_SENTENCEPIECE_PLUGIN_BUILD_PATH
  out.emplace_back(AUTOUVM_SENTENCEPIECE_PLUGIN_BUILD_PATH);
#endif
  return out;
}

struct Plugin {
  const AutouvmSentencePieceApi* api = nullptr;
  std::string error;
};

// Loaded once per process, on first use; never unloaded.
const Plugin& GetPlugin() {
  static const Plugin plugin = [] {
    Plugin p;
    std::string tried;
    for (const auto& path : Candidates()) {
      if (!std::filesystem::exists(path)) {
        tried += " " + path;
        continue;
      }
      void* handle = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        p.error = "cannot load the sentencepiece plugin " + path + ": " + dlerror();
        return p;
      }
      using Entry = const AutouvmSentencePieceApi* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, "autouvm_sentencepiece_api"));
      p.api = entry ? entry() : nullptr;
      if (p.api == nullptr || p.api->version != kAutouvmSentencePieceApiVersion) {
        p.api = nullptr;
        p.error = "the sentencepiece plugin " + path + " does not match this autouvmd";
      }
      return p;
    }
    p.error = std::string("the sentencepiece plugin ") + kPluginFile + " was not found (looked in" + tried +
              "; set AUTOUVM_SENTENCEPIECE_PLUGIN)";
    return p;
  }();
  return plugin;
}

}  // namespace

struct SentencePieceModel::Impl {
  Impl(const AutouvmSentencePieceApi* a, void* m) : api(a), model(m) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { api->release(model); }

  const AutouvmSentencePieceApi* api;
  void* model;
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path, std::string* error) {
  const Plugin& plugin = GetPlugin();
  if (plugin.api == nullptr) {
    *error = plugin.error;
    return nullptr;
  }
  void* model = nullptr;
  char err[512] = "";
  if (plugin.api->load(path.c_str(), &model, err, sizeof(err)) != 0) {
    *error = err;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::make_unique<Impl>(plugin.api, model)));
}

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids, std::string* error) const {
  // Byte fallback gives at most one id per byte; the retry covers pieces that could still say otherwise.
  ids->resize(text.size() + 16);
  char err[512] = "";
  size_t needed = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int rc =
        impl_->api->encode(impl_->model, text.data(), text.size(), ids->data(), ids->size(), &needed, err, sizeof(err));
    if (rc == 0) {
      ids->resize(needed);
      return true;
    }
    if (rc < 0) break;
    ids->resize(needed);
  }
  *error = err[0] ? err : "sentencepiece: encoding failed";
  return false;
}

std::string SentencePieceModel::Decode(const std::vector<int>& ids) const {
  std::string out(ids.size() * 8 + 16, '\0');
  size_t needed = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int rc = impl_->api->decode(impl_->model, ids.data(), ids.size(), out.data(), out.size(), &needed);
    if (rc == 0) {
      out.resize(needed);
      return out;
    }
    if (rc < 0) break;
    out.resize(needed);
  }
  return std::string();
}

int SentencePieceModel::size() const { return impl_->api->piece_count(impl_->model); }

std::string TrainSentencePieceModel(const std::string& text_file, const std::string& model_prefix, int vocab_size) {
  const Plugin& plugin = GetPlugin();
  if (plugin.api == nullptr) return plugin.error;
  const std::string args = "--input=" + text_file + " --model_prefix=" + model_prefix +
                           " --vocab_size=" + std::to_string(vocab_size) +
                           " --model_type=bpe --byte_fallback=true --character_coverage=1.0"
                           " --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 --minloglevel=2";
  char err[512] = "";
  return plugin.api->train(args.c_str(), err, sizeof(err)) == 0 ? std::string() : std::string(err);
}

}  // namespace autouvm::tokenizer
