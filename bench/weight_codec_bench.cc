// weight_codec_bench: how small exponent coding (runtime/weight_codec.h, Note [Exponent-coded weights])
// makes the bf16 weights of Llama-2-7B- and Mistral-7B-shaped models, initialised as transformers does
// (every matrix N(0, 0.02^2), norms 1) and as autouvm-mkmodel does (engine/generated_weights.h: a matrix
// N(0, 1/fan_in), the embedding N(0, 1), norms 1 + 0.1 N(0, 1)); and how fast the reference codec runs on
// this CPU. One layer of each is drawn and coded (every layer is drawn alike), and the model's total is
// its layers, embedding, output matrix and final norm. Every coded tensor is decoded and compared.
//
//   weight_codec_bench [--seed N]
//
// With --checkpoint DIR, a Hugging Face checkpoint instead (a save_pretrained directory, as
// autouvm-convert reads it; tests/gpu/hf_scale.py writes one): every bf16 tensor in it coded and decoded,
// the sizes summed by kind (the last part of the tensor's name, layers together) and in all.
//
//   weight_codec_bench --checkpoint /tmp/scale/hf
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "runtime/weight_codec.h"
#include "tools/safetensors.h"

namespace {

namespace wc = autouvm::runtime::weight_codec;

struct Shape {
  const char* model;
  int64_t dim, kv_dim, ffn, vocab, layers;
};

struct Tensor {
  std::string name;
  int64_t rows, cols;  // cols: fan_in
  int per_model;       // how many the model has (layers, or 1)
  enum Kind { kMatrix, kEmbedding, kNorm } kind;
};

std::vector<uint16_t> Draw(const Tensor& t, bool mkmodel, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0, 1);
  const float scale = !mkmodel ? 0.02f : t.kind == Tensor::kEmbedding ? 1.0f : 1.0f / std::sqrt(float(t.cols));
  std::vector<uint16_t> v(static_cast<size_t>(t.rows * t.cols));
  for (auto& x : v) {
    if (t.kind == Tensor::kNorm) {
      x = wc::RoundToBf16(mkmodel ? 1.0f + 0.1f * normal(rng) : 1.0f);
    } else {
      x = wc::RoundToBf16(scale * normal(rng));
    }
  }
  return v;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// `v` coded, then decoded and checked against its bits, each way timed.
struct Coded {
  std::vector<uint8_t> packed;
  wc::Header header;
  double encode_s = 0, decode_s = 0;
};
absl::StatusOr<Coded> CodeAndCheck(const std::vector<uint16_t>& v) {
  Coded c;
  auto t0 = std::chrono::steady_clock::now();
  c.packed = wc::Encode(v);
  c.encode_s = Seconds(t0);
  c.header = *wc::ReadHeader(c.packed);
  std::vector<uint16_t> back(v.size());
  t0 = std::chrono::steady_clock::now();
  const absl::Status decoded = wc::Decode(c.packed, absl::MakeSpan(back));
  c.decode_s = Seconds(t0);
  if (!decoded.ok()) return decoded;
  if (back != v) return absl::DataLossError("does not decode to its bits");
  return c;
}

// A tensor's kind in a Hugging Face Llama checkpoint: its name without the layer ("model.layers.7.mlp.
// up_proj.weight" is "mlp.up_proj.weight").
std::string KindOf(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  std::string kind;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "model" || parts[i] == "layers") continue;
    if (!parts[i].empty() && parts[i].find_first_not_of("0123456789") == std::string::npos) continue;
    kind += (kind.empty() ? "" : ".") + parts[i];
  }
  return kind;
}

int CodeCheckpoint(const std::string& dir) {
  auto ckpt = autouvm::tools::Checkpoint::Open(dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "%s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  struct Sum {
    int tensors = 0;
    double raw = 0, coded = 0, escapes = 0, weights = 0;
    int plain = 0;
  };
  std::map<std::string, Sum> kinds;
  Sum all;
  int skipped = 0;
  for (const std::string& name : (*ckpt)->names()) {
    const autouvm::tools::TensorView t = *(*ckpt)->View(name);
    if (t.dtype != "BF16") {
      ++skipped;
      continue;
    }
    std::vector<uint16_t> v(static_cast<size_t>(t.bytes / 2));
    std::memcpy(v.data(), t.data, static_cast<size_t>(t.bytes));
    const absl::StatusOr<Coded> c = CodeAndCheck(v);
    if (!c.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), c.status().ToString().c_str());
      return 1;
    }
    const std::vector<uint8_t>& packed = c->packed;
    const wc::Header& h = c->header;
    for (Sum* s : {&kinds[KindOf(name)], &all}) {
      ++s->tensors;
      s->raw += static_cast<double>(t.bytes);
      s->coded += static_cast<double>(packed.size());
      s->escapes += static_cast<double>(h.escapes);
      s->weights += static_cast<double>(v.size());
      if (h.mode == wc::Mode::kPlain) ++s->plain;
    }
  }
  std::printf("%s: %d bf16 tensors (%d of other dtypes left out)\n\n", dir.c_str(), all.tensors, skipped);
  std::printf("| kind | tensors | bf16 MB | coded MB | ratio | bits/weight | escaped | stored plain |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  auto row = [](const std::string& kind, const Sum& s) {
    std::printf("| %s | %d | %.1f | %.1f | %.3f | %.2f | %.3f%% | %d |\n", kind.c_str(), s.tensors, s.raw / 1e6,
                s.coded / 1e6, s.raw / s.coded, 16 * s.coded / s.raw, 100 * s.escapes / s.weights, s.plain);
  };
  for (const auto& [kind, s] : kinds) row(kind, s);
  row("**all**", all);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::string(argv[i]) == "--checkpoint" && i + 1 < argc) {
      return CodeCheckpoint(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: weight_codec_bench [--seed N] [--checkpoint DIR]\n");
      return 2;
    }
  }
  const Shape shapes[] = {{"llama-2-7b", 4096, 4096, 11008, 32000, 32}, {"mistral-7b", 4096, 1024, 14336, 32000, 32}};
  std::printf("| model | init | tensor | shape | index bits | escaped | bits/weight | encode MB/s | decode MB/s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  struct Total {
    const char* model;
    const char* init;
    double raw = 0, coded = 0;
  };
  std::vector<Total> totals;
  for (const Shape& s : shapes) {
    const Tensor tensors[] = {
        {"wq", s.dim, s.dim, static_cast<int>(s.layers), Tensor::kMatrix},
        {"wk", s.kv_dim, s.dim, static_cast<int>(s.layers), Tensor::kMatrix},
        {"wv", s.kv_dim, s.dim, static_cast<int>(s.layers), Tensor::kMatrix},
        {"wo", s.dim, s.dim, static_cast<int>(s.layers), Tensor::kMatrix},
        {"w1 (gate)", s.ffn, s.dim, static_cast<int>(s.layers), Tensor::kMatrix},
        {"w3 (up)", s.ffn, s.dim, static_cast<int>(s.layers), Tensor::kMatrix},
        {"w2 (down)", s.dim, s.ffn, static_cast<int>(s.layers), Tensor::kMatrix},
        {"norms", 2, s.dim, static_cast<int>(s.layers), Tensor::kNorm},
        {"embedding", s.vocab, s.dim, 1, Tensor::kEmbedding},
        {"output", s.vocab, s.dim, 1, Tensor::kMatrix},
        {"final norm", 1, s.dim, 1, Tensor::kNorm},
    };
    for (const bool mkmodel : {false, true}) {
      const char* init = mkmodel ? "autouvm-mkmodel" : "transformers";
      Total total{s.model, init};
      std::mt19937_64 rng(seed);
      for (const Tensor& t : tensors) {
        const std::vector<uint16_t> v = Draw(t, mkmodel, rng);
        const absl::StatusOr<Coded> c = CodeAndCheck(v);
        if (!c.ok()) {
          std::fprintf(stderr, "%s %s %s: %s\n", s.model, init, t.name.c_str(), c.status().ToString().c_str());
          return 1;
        }
        const std::vector<uint8_t>& packed = c->packed;
        const wc::Header& h = c->header;
        const double encode_s = c->encode_s, decode_s = c->decode_s;
        const double raw = 2.0 * static_cast<double>(v.size());
        const double coded = static_cast<double>(packed.size());
        total.raw += raw * t.per_model;
        total.coded += coded * t.per_model;
        std::printf("| %s | %s | %s | %lldx%lld | %s | %.3f%% | %.2f | %.0f | %.0f |\n", s.model, init, t.name.c_str(),
                    static_cast<long long>(t.rows), static_cast<long long>(t.cols),
                    h.mode == wc::Mode::kPlain ? "plain" : std::to_string(h.index_bits).c_str(),
                    100.0 * static_cast<double>(h.escapes) / static_cast<double>(v.size()), 8 * coded / (raw / 2),
                    raw / 1e6 / encode_s, raw / 1e6 / decode_s);
        std::fflush(stdout);
      }
      totals.push_back(total);
    }
  }
  std::printf("\n| model | init | bf16 GB | coded GB | ratio | bits/weight | link bytes per sweep |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Total& t : totals) {
    std::printf("| %s | %s | %.2f | %.2f | %.3f | %.2f | %.3f x bf16 |\n", t.model, t.init, t.raw / 1e9, t.coded / 1e9,
                t.raw / t.coded, 16 * t.coded / t.raw, t.coded / t.raw);
  }
  return 0;
}
