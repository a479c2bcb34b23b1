// chat_template_render: renders one chat template (tokenizer/chat_template.h) over many contexts, for
// tests/chat_template/jinja_crosscheck.py, which renders the same with Jinja2 and compares the bytes.
//
//   chat_template_render TEMPLATE_FILE CONTEXTS_JSON   # CONTEXTS_JSON: a JSON array of context objects
//   chat_template_render --print-default-template      # engine::kDefaultChatTemplate, as it is
//
// Output, for each context in order: "OK <n>\n" and the n bytes of the rendering, or "ERROR <n>\n" and the
// n bytes of the error message; each followed by "\n". A template that does not parse: "PARSE_ERROR <n>\n"
// and the message, alone. Exit 0 unless the files cannot be read (2).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/model_config.h"
#include "tokenizer/chat_template.h"

namespace {

bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

void Emit(const char* tag, const std::string& bytes) {
  std::cout << tag << " " << bytes.size() << "\n" << bytes << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--print-default-template") {
    std::cout << autouvm::engine::kDefaultChatTemplate;
    return 0;
  }
  if (argc != 3) {
    std::cerr << "usage: chat_template_render TEMPLATE_FILE CONTEXTS_JSON | --print-default-template\n";
    return 2;
  }
  std::string source, contexts_text;
  if (!ReadFile(argv[1], &source) || !ReadFile(argv[2], &contexts_text)) {
    std::cerr << "chat_template_render: cannot read " << argv[1] << " or " << argv[2] << "\n";
    return 2;
  }
  nlohmann::ordered_json contexts;
  try {
    contexts = nlohmann::ordered_json::parse(contexts_text);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "chat_template_render: " << argv[2] << ": " << e.what() << "\n";
    return 2;
  }
  if (!contexts.is_array()) {
    std::cerr << "chat_template_render: " << argv[2] << ": not a JSON array\n";
    return 2;
  }
  auto parsed = autouvm::tokenizer::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    Emit("PARSE_ERROR", std::string(parsed.status().message()));
    return 0;
  }
  for (const auto& context : contexts) {
    auto text = parsed->Render(context);
    if (text.ok()) {
      Emit("OK", *text);
    } else {
      Emit("ERROR", std::string(text.status().message()));
    }
  }
  return 0;
}
