// Bad files in the model repository, table-driven, against the real daemon: a truncated, empty, garbage
// or missing model.pt, a model.yaml that contradicts its model.pt or does not parse or has unknown or
// mistyped keys, a tokenizer or a chat template that does not parse. Each entry must fail alone with an
// error naming what is wrong, and the good model beside them must serve. (Bad daemon configs stop startup
// naming the key: config_test and LifecycleE2E.InvalidConfigStopsStartupNamingTheKey.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/testing/subprocess.h"

namespace autouvm::testing {
namespace {

namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckResponse;

void Write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// Cuts the file to the first 1/`parts` of its bytes.
void Truncate(const fs::path& p, size_t parts) {
  const std::string bytes = ReadFile(p);
  Write(p, bytes.substr(0, bytes.size() / parts));
}

// model.yaml with one `key: value` line replaced (the key must be there).
void ReplaceYamlLine(const fs::path& entry, const std::string& key, const std::string& line) {
  const std::string yaml = ReadFile(entry / "model.yaml");
  const size_t at = yaml.find("\n" + key + ":");
  ASSERT_NE(at, std::string::npos) << key << " not in " << yaml;
  const size_t end = yaml.find('\n', at + 1);
  Write(entry / "model.yaml", yaml.substr(0, at + 1) + line + yaml.substr(end));
}

// A small model entry written by autouvm-mkmodel.
void MakeModel(const std::string& repo, const std::string& name, const std::string& tokenizer) {
  const std::string error = WriteModelEntry(repo, {.name = name, .tokenizer = tokenizer});
  ASSERT_EQ(error, "");
}

struct BadEntry {
  std::string name;
  std::string tokenizer;  // what the entry is made with before it is broken
  std::function<void(const fs::path& entry)> breaks;
  std::vector<std::string> error_names;  // what the model's error must contain
};

TEST(BadFilesE2E, EachBadEntryFailsAloneNamingWhatIsWrongAndTheGoodOneServes) {
  DaemonProcess d({.generate_default_model = false});
  const std::string repo = d.repository();
  const std::vector<BadEntry> entries = {
      {"pt-truncated", "byte", [](const fs::path& e) { Truncate(e / "model.pt", 2); }, {"model.pt"}},
      {"pt-empty", "byte", [](const fs::path& e) { Write(e / "model.pt", ""); }, {"model.pt"}},
      {"pt-garbage", "byte", [](const fs::path& e) { Write(e / "model.pt", std::string(4096, '\x5a')); }, {"model.pt"}},
      {"pt-missing", "byte", [](const fs::path& e) { fs::remove(e / "model.pt"); }, {"model.pt"}},
      {"yaml-contradicts-dim", "byte", [](const fs::path& e) { ReplaceYamlLine(e, "dim", "dim: 128"); }, {"dim"}},
      {"yaml-contradicts-layers",
       "byte",
       [](const fs::path& e) { ReplaceYamlLine(e, "n_layers", "n_layers: 2"); },
       {"layer"}},
      {"yaml-contradicts-vocab",
       "byte",
       [](const fs::path& e) { ReplaceYamlLine(e, "vocab_size", "vocab_size: 300"); },
       {"vocab"}},
      {"yaml-contradicts-ffn",
       "byte",
       [](const fs::path& e) { ReplaceYamlLine(e, "ffn_dim", "ffn_dim: 128"); },
       {"ffn"}},
      {"yaml-not-yaml",
       "byte",
       [](const fs::path& e) { Write(e / "model.yaml", "name: [unclosed\n  dim: {\n"); },
       {"model.yaml"}},
      {"yaml-unknown-key",
       "byte",
       [](const fs::path& e) { Write(e / "model.yaml", ReadFile(e / "model.yaml") + "n_layer: 2\n"); },
       {"n_layer"}},
      {"yaml-mistyped", "byte", [](const fs::path& e) { ReplaceYamlLine(e, "dim", "dim: sixty-four"); }, {"dim"}},
      {"yaml-missing", "byte", [](const fs::path& e) { fs::remove(e / "model.yaml"); }, {"model.yaml"}},
      // A chat template that does not parse (autouvm-mkmodel writes one inline; the new lines go before it).
      {"template-broken",
       "byte",
       [](const fs::path& e) { ReplaceYamlLine(e, "chat_template", "chat_template: |\n  line one\n  {% endif %}"); },
       {"model.yaml: chat_template: chat template line 2"}},
      {"tokenizer-garbage",
       "sentencepiece",
       [](const fs::path& e) { Write(e / "tokenizer.model", "this is not a sentencepiece model"); },
       {"tokenizer.model"}},
      {"tokenizer-truncated",
       "sentencepiece",
       [](const fs::path& e) { Truncate(e / "tokenizer.model", 3); },
       {"tokenizer.model"}},
      {"tokenizer-missing",
       "sentencepiece",
       [](const fs::path& e) { fs::remove(e / "tokenizer.model"); },
       {"tokenizer.model"}},
  };
  MakeModel(repo, "good", "byte");
  for (const BadEntry& b : entries) {
    MakeModel(repo, b.name, b.tokenizer);
    // The entry's name is its directory's; model.yaml names it too.
    if (fs::exists(fs::path(repo) / b.name / "model.yaml")) {
      ASSERT_NO_FATAL_FAILURE(ReplaceYamlLine(fs::path(repo) / b.name, "name", "name: " + b.name));
    }
    b.breaks(fs::path(repo) / b.name);
  }
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING, 120)) << d.Log();

  grpc::ClientContext ctx;
  autouvm::v1::ListModelsResponse list;
  ASSERT_TRUE(d.admin()->ListModels(&ctx, {}, &list).ok());
  std::map<std::string, autouvm::v1::ModelStatus> by_name;
  for (const auto& m : list.models()) by_name[m.name()] = m;
  for (const BadEntry& b : entries) {
    SCOPED_TRACE(b.name);
    auto it = by_name.find(b.name);
    if (it == by_name.end()) {
      // An entry whose model.yaml cannot be read is not a model: the log must say why it was skipped.
      EXPECT_NE(d.Log().find(b.name), std::string::npos) << "neither listed nor logged";
      for (const std::string& n : b.error_names) EXPECT_NE(d.Log().find(n), std::string::npos) << d.Log();
      continue;
    }
    std::cout << b.name << ": " << it->second.error() << "\n";
    EXPECT_EQ(it->second.state(), autouvm::v1::MODEL_STATE_FAILED);
    for (const std::string& n : b.error_names) {
      EXPECT_NE(it->second.error().find(n), std::string::npos) << "error: " << it->second.error();
    }
    autouvm::v1::GenerateResponse out;
    const grpc::Status s = CallGenerate(d, GreedyRequest(b.name, "hi", 2), &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_NE(s.error_message().find(b.name), std::string::npos) << s.error_message();
  }
  ASSERT_TRUE(by_name.count("good"));
  EXPECT_EQ(by_name["good"].state(), autouvm::v1::MODEL_STATE_READY) << by_name["good"].error();
  autouvm::v1::GenerateResponse out;
  const grpc::Status s = CallGenerate(d, GreedyRequest("good", "hello", 3), &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(out.token_ids_size(), 3);
}

}  // namespace
}  // namespace autouvm::testing
