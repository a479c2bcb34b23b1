// model.yaml: ParseModelConfig against ModelConfigToYaml, and every rejected field named; chat templates
// inline or from a file beside model.yaml, written back byte for byte.
#include "engine/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/llama_builder.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kOrigin[] = "models/m/model.yaml";

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_dim, b.ffn_dim);
  EXPECT_EQ(a.max_seq, b.max_seq);
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  EXPECT_DOUBLE_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.tokenizer, b.tokenizer);
  EXPECT_EQ(a.rope_scaling, b.rope_scaling);
  EXPECT_DOUBLE_EQ(a.rope_scaling_factor, b.rope_scaling_factor);
  EXPECT_DOUBLE_EQ(a.rope_low_freq_factor, b.rope_low_freq_factor);
  EXPECT_DOUBLE_EQ(a.rope_high_freq_factor, b.rope_high_freq_factor);
  EXPECT_EQ(a.rope_original_max_seq, b.rope_original_max_seq);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.chat_template, b.chat_template);
  EXPECT_EQ(a.chat_template_file, b.chat_template_file);
  EXPECT_EQ(a.bos_token, b.bos_token);
  EXPECT_EQ(a.eos_token, b.eos_token);
  EXPECT_EQ(a.module, b.module);
}

// Serializes `c` and expects the parse to fail with INVALID_ARGUMENT naming `field` right after the origin.
void ExpectRejected(const ModelConfig& c, const std::string& field) {
  const std::string yaml = ModelConfigToYaml(c);
  SCOPED_TRACE(yaml);
  auto parsed = ParseModelConfig(yaml, kOrigin);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), StartsWith(std::string(kOrigin) + ": " + field + ":"));
}

TEST(ModelConfigTest, DefaultTinyConfigRoundTripsThroughYaml) {
  const ModelConfig c = DefaultTinyModelConfig("tiny-llama");
  ASSERT_TRUE(ValidateModelConfig(c).ok());
  auto parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameConfig(*parsed, c);
}

TEST(ModelConfigTest, NonDefaultValuesRoundTrip) {
  ModelConfig c = DefaultTinyModelConfig("other");
  c.vocab_size = 32000;
  c.tokenizer = "sentencepiece";
  c.bos_id = 1;
  c.eos_id = 2;
  c.dtype = "bf16";
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-6;
  c.n_kv_heads = 8;
  c.max_seq = 4096;
  c.module = "autouvm";
  auto parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameConfig(*parsed, c);

  c.bos_id = -1;  // "none"
  c.eos_id = -1;
  c.dtype = "fp16";
  parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameConfig(*parsed, c);
}

TEST(ModelConfigTest, HeadDimIsDerivedWhenAbsent) {
  auto parsed = ParseModelConfig(
      "name: m\nvocab_size: 300\ndim: 64\nn_layers: 1\nn_heads: 4\nn_kv_heads: 2\nffn_dim: 128\nmax_seq: 16\n",
      kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->head_dim, 16);
  EXPECT_EQ(parsed->tokenizer, "byte");
  EXPECT_EQ(parsed->dtype, "fp32");
}

TEST(ModelConfigTest, DimNotDivisibleByHeadsIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.dim = 250;  // 8 heads
  ExpectRejected(c, "n_heads");
}

// Checkpoints may give their heads another size than dim / n_heads (the projections then map dim to
// n_heads * head_dim and back).
TEST(ModelConfigTest, HeadDimMayDifferFromDimOverHeads) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.head_dim = 64;  // 256 / 8 = 32
  auto parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameConfig(*parsed, c);
}

// What imported checkpoints add (tools/autouvm-convert): rotary scaling and attention biases.
TEST(ModelConfigTest, RopeScalingAndAttentionBiasRoundTrip) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.rope_scaling = "llama3";
  c.rope_scaling_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_seq = 8192;
  c.attention_bias = true;
  auto parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameConfig(*parsed, c);
  c.rope_scaling = "linear";
  c.rope_scaling_factor = 2;
  c.attention_bias = false;
  parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->rope_scaling, "linear");
  EXPECT_DOUBLE_EQ(parsed->rope_scaling_factor, 2);
  EXPECT_FALSE(parsed->attention_bias);
}

TEST(ModelConfigTest, BadRopeScalingIsNamed) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.rope_scaling = "yarn";
  ExpectRejected(c, "rope_scaling");
  c.rope_scaling = "llama3";
  c.rope_scaling_factor = 8;
  c.rope_low_freq_factor = 4;
  c.rope_high_freq_factor = 1;
  ExpectRejected(c, "rope_high_freq_factor");
}

TEST(ModelConfigTest, OddHeadDimIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.dim = 24;
  c.head_dim = 3;
  c.n_kv_heads = 4;
  ExpectRejected(c, "head_dim");
}

TEST(ModelConfigTest, KvHeadsNotDividingHeadsIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.n_kv_heads = 3;  // 8 heads
  ExpectRejected(c, "n_kv_heads");
}

TEST(ModelConfigTest, UnknownDtypeIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.dtype = "fp8";
  ExpectRejected(c, "dtype");
}

TEST(ModelConfigTest, EosOutsideVocabularyIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.eos_id = c.vocab_size;
  ExpectRejected(c, "eos_id");
}

TEST(ModelConfigTest, BosOutsideVocabularyIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.bos_id = c.vocab_size + 5;
  ExpectRejected(c, "bos_id");
}

TEST(ModelConfigTest, ByteTokenizerWithSmallVocabIsRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.vocab_size = 257;
  c.bos_id = -1;  // keep bos/eos inside the vocabulary so vocab_size is what fails
  c.eos_id = -1;
  ExpectRejected(c, "vocab_size");
}

TEST(ModelConfigTest, SentencePieceMayHaveSmallVocab) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.vocab_size = 100;
  c.bos_id = 1;
  c.eos_id = 2;
  c.tokenizer = "sentencepiece";
  EXPECT_TRUE(ParseModelConfig(ModelConfigToYaml(c), kOrigin).ok());
}

TEST(ModelConfigTest, UnknownTokenizerAndArchitectureAndEmptyNameAreRejected) {
  ModelConfig c = DefaultTinyModelConfig("m");
  c.tokenizer = "wordpiece";
  ExpectRejected(c, "tokenizer");
  c = DefaultTinyModelConfig("m");
  c.architecture = "gpt2";
  ExpectRejected(c, "architecture");
  c = DefaultTinyModelConfig("");
  ExpectRejected(c, "name");
  c = DefaultTinyModelConfig("m");
  c.module = "mine";
  ExpectRejected(c, "module");
}

TEST(ModelConfigTest, UnknownKeyIsRejected) {
  auto parsed = ParseModelConfig(ModelConfigToYaml(DefaultTinyModelConfig("m")) + "colour: red\n", kOrigin);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), StartsWith(std::string(kOrigin) + ": colour:"));
}

TEST(ModelConfigTest, BadTypesAndRangesAreRejected) {
  const std::string base = "name: m\nvocab_size: 300\nn_layers: 1\nn_heads: 4\nn_kv_heads: 2\nffn_dim: 128\n";
  for (const auto& [extra, field] : {std::pair<std::string, std::string>{"dim: many\nmax_seq: 16\n", "dim"},
                                     {"dim: 64\nmax_seq: 1\n", "max_seq"},
                                     {"dim: 64\nmax_seq: 16\nnorm_eps: 2\n", "norm_eps"},
                                     {"dim: 64\nmax_seq: 16\nrope_theta: .nan\n", "rope_theta"},
                                     {"dim: 64\nmax_seq: 16\ndtype: [fp32]\n", "dtype"}}) {
    SCOPED_TRACE(extra);
    auto parsed = ParseModelConfig(base + extra, kOrigin);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), StartsWith(std::string(kOrigin) + ": " + field + ":"));
  }
}

TEST(ModelConfigTest, InvalidYamlNamesTheOrigin) {
  auto parsed = ParseModelConfig("name: [m\n", kOrigin);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(kOrigin));
}

TEST(ModelConfigTest, LoadReadsTheFileOrReportsNotFound) {
  testing::TempDir dir;
  const std::string path = dir.Sub("model.yaml");
  auto missing = LoadModelConfig(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));

  std::ofstream(path) << ModelConfigToYaml(DefaultTinyModelConfig("from-file"));
  auto loaded = LoadModelConfig(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->name, "from-file");
}

TEST(ModelConfigTest, ChatTemplatesRoundTripByteForByte) {
  ModelConfig c = DefaultTinyModelConfig("m");
  // The default is written as a literal block, as a person would write one (Note [Chat templates in model.yaml]).
  EXPECT_THAT(ModelConfigToYaml(c), HasSubstr("chat_template: |"));
  const std::vector<std::string> sources = {
      kDefaultChatTemplate,
      "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",  // no final newline
      "two final newlines\n\n",
      "  indented first line\n\ttab\ntrailing spaces   \n",
      "windows\r\nline ends\r\n",
      "# a comment? no: text\nkey: value\n- not a list\n'quoted' \"double\" \\ {{ '\\n' }}\n",
      "Unicode ✓ 日本語 \u00a0 nbsp",
      "\n\nleading newlines",
  };
  for (const std::string& source : sources) {
    SCOPED_TRACE(source);
    c.chat_template = source;
    c.bos_token = "<|begin_of_text|>";
    c.eos_token = "<|eot_id|> #";
    auto parsed = ParseModelConfig(ModelConfigToYaml(c), kOrigin);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << ModelConfigToYaml(c);
    ExpectSameConfig(*parsed, c);
  }
}

TEST(ModelConfigTest, ChatTemplateFileIsReadBesideModelYaml) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Sub("templates"));
  const std::string source = "{% for m in messages %}{{ m.content }}{% endfor %}\n";
  std::ofstream(dir.Sub("templates/chat.jinja"), std::ios::binary) << source;
  ModelConfig c = DefaultTinyModelConfig("m");
  c.chat_template.clear();
  const std::string yaml = ModelConfigToYaml(c);
  std::ofstream(dir.Sub("model.yaml")) << yaml << "chat_template_file: templates/chat.jinja\n";
  auto loaded = LoadModelConfig(dir.Sub("model.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->chat_template, source);
  EXPECT_EQ(loaded->chat_template_file, "templates/chat.jinja");
  // Written back as the file's name, not the source.
  EXPECT_THAT(ModelConfigToYaml(*loaded), HasSubstr("chat_template_file: templates/chat.jinja"));
  EXPECT_THAT(ModelConfigToYaml(*loaded), Not(HasSubstr("chat_template:")));

  std::ofstream(dir.Sub("model.yaml")) << yaml << "chat_template_file: missing.jinja\n";
  auto missing = LoadModelConfig(dir.Sub("model.yaml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()),
              StartsWith(dir.Sub("model.yaml") + ": chat_template_file: " + dir.Sub("missing.jinja")));
}

TEST(ModelConfigTest, ChatTemplateGivenTwiceOrMistypedIsRejected) {
  const std::string yaml = ModelConfigToYaml(DefaultTinyModelConfig("m"));  // has chat_template
  auto both = ParseModelConfig(yaml + "chat_template_file: chat_template.jinja\n", kOrigin);
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()),
              StartsWith(std::string(kOrigin) + ": chat_template and chat_template_file: both given"));
  auto mistyped = ParseModelConfig(yaml + "bos_token: [a]\n", kOrigin);
  ASSERT_FALSE(mistyped.ok());
  EXPECT_THAT(std::string(mistyped.status().message()), StartsWith(std::string(kOrigin) + ": bos_token:"));
  ModelConfig c = DefaultTinyModelConfig("m");
  c.chat_template.clear();
  auto not_text = ParseModelConfig(ModelConfigToYaml(c) + "chat_template: not UTF-8 \xff\xfe\n", kOrigin);
  ASSERT_FALSE(not_text.ok());
  EXPECT_THAT(std::string(not_text.status().message()),
              StartsWith(std::string(kOrigin) + ": chat_template: not valid UTF-8"));
}

TEST(ModelConfigTest, AChatTemplateFileMustBeARegularFile) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Sub("a-directory"));
  ModelConfig c = DefaultTinyModelConfig("m");
  c.chat_template.clear();
  std::ofstream(dir.Sub("model.yaml")) << ModelConfigToYaml(c) << "chat_template_file: a-directory\n";
  auto loaded = LoadModelConfig(dir.Sub("model.yaml"));
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("chat_template_file: "));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("a-directory is not a regular file"));
}

}  // namespace
}  // namespace autouvm::engine
