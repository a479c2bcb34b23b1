#!/usr/bin/env python3
"""autouvm-convert against transformers, on the GPU host (where transformers is installed).

Builds small random-initialised LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM models from
configs (no download), saves them with save_pretrained (safetensors), converts each with
autouvm-convert, loads the entry's model.pt and compares, on the same tokens: the logits of `full`
against transformers' (relative error of the whole tensor: < 1e-4 in fp32, < 2e-2 in bf16) and 64
greedy tokens (ours: argmax of `full` over the growing sequence; transformers: generate with greedy
decoding and no end-of-sequence stop). Prints a Markdown table; exits 1 if any row misses its bound.

With --tokenize-dump (tests/integration/tokenize_dump_main.cc), also trains small byte-level BPE
tokenizers with transformers' `tokenizers` library — GPT-2's pre-tokenizer, Llama 3's (Split regex,
ignore_merges), Qwen2's (NFC, its regex) — on text at hand, saves their tokenizer.json, and compares
our ids and decoded text with theirs on a few hundred varied strings (special tokens, digits, spaces,
newlines, accents, combining marks, CJK, emoji). Then trains sentencepiece models as Llama 2's and
Mistral v0.3's were (BPE, byte fallback, control symbols) and compares, on the same strings: their
tokenizer.json as transformers writes it (legacy True and False) and in Llama 2's layout, served by our
BpeTokenizer, against transformers; their tokenizer.model, served by libsentencepiece, against the
sentencepiece Python binding. With --diffs, every string whose ids differ is written out.

    python3 tests/gpu/hf_verify.py build-gpu/tools/autouvm-convert --tokenize-dump build-gpu/tests/tokenize_dump
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

SMALL = dict(vocab_size=320, hidden_size=128, intermediate_size=344, num_hidden_layers=3, num_attention_heads=8,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=1,
             eos_token_id=2)

CASES = [
    ("llama", LlamaForCausalLM, LlamaConfig(**SMALL, rope_theta=10000.0, tie_word_embeddings=False)),
    ("llama-3.1-rope", LlamaForCausalLM,
     LlamaConfig(**SMALL, rope_theta=500000.0, tie_word_embeddings=False,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    ("llama-linear-rope", LlamaForCausalLM,
     LlamaConfig(**SMALL, rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0})),
    ("mistral", MistralForCausalLM, MistralConfig(**SMALL, rope_theta=1000000.0, sliding_window=4096)),
    ("qwen2-tied", Qwen2ForCausalLM, Qwen2Config(**SMALL, rope_theta=1000000.0, tie_word_embeddings=True)),
    ("qwen2", Qwen2ForCausalLM, Qwen2Config(**SMALL, rope_theta=1000000.0, tie_word_embeddings=False)),
]

BOUND = {"fp32": 1e-4, "bf16": 2e-2}

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"]


def corpus():
    # Text at hand on a host without a network: the standard library's sources, and some of every script.
    import glob
    lines = []
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:60]:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines += f.read().splitlines()
    extra = ["Café, naïve, résumé, Ångström, Œuvre, ß, İstanbul", "日本語のテキストと中文文本，한국어 텍스트",
             "Привет, мир! Γειά σου κόσμε. שלום עולם. مرحبا بالعالم", "emoji 😀🚀👍🏽 and ✓ ✗ ★",
             "numbers 1234567890 3.14159 1,000,000 2026-11-30", "I'm, you're, he'll, they've, she'd, it's, DON'T"]
    return lines + extra * 50


def test_strings(lines):
    cases = ["", " ", "  ", "\n", "\n\n", "\t\t", "a  b", "a   b  ", "end\n", " lead", "   three lead",
             "Hello world", "hello World HELLO", "I'm I'M i'M", "you'RE we'Ve", "123", "1234", "12345678901",
             "3.14 and 2,718", "e\u0301 vs \u00e9", "a\u0308o\u0308u\u0308", "😀😀😀", "👍🏽", "日本語", "中文，标点。",
             "tab\tand\r\nCRLF", "mixed\u00a0nbsp", "x\u2028y", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
             "<|begin_of_text|>text<|eot_id|>", "<|eot_id", "a<|eot_id|>b", "   <|im_end|>   ", "$$$ ### !!!",
             "def f(x):\n    return x ** 2\n", "snake_case CamelCase kebab-case", "http://example.com/a?b=c&d=e",
             "\u0000nul", "\x7f del", "ÿþ", "\u00ad soft hyphen"]
    rng = __import__("random").Random(7)
    pool = [l for l in lines if l.strip()]
    for _ in range(300):
        k = rng.randint(1, 3)
        cases.append("\n".join(rng.choice(pool) for _ in range(k)))
    return cases


def train_tokenizer(kind, path, lines):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
        regex = LLAMA3_REGEX if kind == "llama3" else QWEN2_REGEX
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
    tok.save(path)
    return tok


def verify_tokenizers(dump):
    lines = corpus()
    strings = test_strings(lines)
    print(f"\n| tokenizer.json | strings | ids identical | decoded text identical | first difference |")
    print("|---|---:|---:|---:|---|")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("gpt2", "llama3", "qwen2"):
            path = os.path.join(tmp, f"{kind}.json")
            tok = train_tokenizer(kind, path, lines)
            run = subprocess.run([dump, path], input=json.dumps(strings), capture_output=True, text=True)
            if run.returncode != 0:
                print(f"| {kind} | {len(strings)} | tokenize_dump failed: {run.stderr.strip()} | | |")
                ok = False
                continue
            ours = json.loads(run.stdout)
            same_ids = same_text = 0
            first = "-"
            for s, o in zip(strings, ours):
                theirs = tok.encode(s, add_special_tokens=False).ids
                if o.get("ids") == theirs:
                    same_ids += 1
                elif first == "-":
                    first = f"{json.dumps(s)[:60]}: ours {o.get('ids', o)[:8]} theirs {theirs[:8]}"
                if o.get("text") == tok.decode(theirs, skip_special_tokens=False):
                    same_text += 1
            good = same_ids == len(strings) and same_text == len(strings)
            ok &= good
            print(f"| {kind} | {len(strings)} | {same_ids} | {same_text} | {first} |" + ("" if good else " MISSED"))
    return ok


# Sentencepiece models trained as Llama 2's and Mistral's were (their trainer_spec): BPE, byte fallback,
# digits split, no normalisation, whitespace kept, a dummy prefix; Mistral v0.3's also has control
# symbols for its chat format.
SPM_COMMON = dict(model_type="bpe", vocab_size=2000, byte_fallback=True, split_digits=True,
                  normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
                  allow_whitespace_only_pieces=True, character_coverage=0.99995, unk_id=0, bos_id=1, eos_id=2,
                  pad_id=-1, max_sentencepiece_length=16, num_threads=8, minloglevel=2)
DIFFS = []  # every string whose ids differ, for --diffs
SPM_KINDS = {"llama2": {}, "mistral-v0.3": {"control_symbols": ["[INST]", "[/INST]", "[TOOL_CALLS]"]}}


def hf_sentencepiece(directory, legacy):
    # transformers' tokenizer for a checkpoint that ships tokenizer.model, as a Llama 2 checkpoint's
    # tokenizer_config.json sets it up.
    from transformers import AutoTokenizer
    config = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "add_bos_token": True, "add_eos_token": False, "legacy": legacy, "clean_up_tokenization_spaces": False}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return AutoTokenizer.from_pretrained(directory)


def llama2_layout(path):
    # Llama 2's own tokenizer.json: Prepend and Replace normalizers instead of the Metaspace pre-tokenizer,
    # the Replace / ByteFallback / Fuse / Strip decoders.
    with open(path) as f:
        j = json.load(f)
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def compare(kind, ref_name, dump, path, strings, enc, dec):
    """One row: our ids and decoded text for `path` against the reference's encode / decode."""
    run = subprocess.run([dump, path], input=json.dumps(strings), capture_output=True, text=True)
    if run.returncode != 0:
        print(f"| {kind} | {ref_name} | {len(strings)} | tokenize_dump failed: {run.stderr.strip()} | | |")
        return False
    ours = json.loads(run.stdout)
    same_ids = same_text = 0
    first = "-"
    for s, o in zip(strings, ours):
        theirs = enc(s)
        if o.get("ids") == theirs:
            same_ids += 1
        else:
            DIFFS.append({"tokenizer": kind, "reference": ref_name, "string": s, "ours": o, "theirs": theirs})
            if first == "-":
                first = f"{json.dumps(s)[:60]}: ours {o.get('ids', o)[:8]} theirs {theirs[:8]}"
        if o.get("text") == dec(theirs):
            same_text += 1
    print(f"| {kind} | {ref_name} | {len(strings)} | {same_ids} | {same_text} | {first} |")
    return same_ids == len(strings) and same_text == len(strings)


def verify_sentencepiece(dump):
    """Sentencepiece models trained here as Llama 2's and Mistral's were. What we serve for such a
    checkpoint is its tokenizer.json (as transformers does): three layouts of it against transformers.
    Its tokenizer.model (served when there is no tokenizer.json) against the sentencepiece library's
    Python binding; and, for the record, against transformers 5's conversion of it (not gating: that
    conversion does not prepend the dummy "▁" to text that starts with a space, sentencepiece does)."""
    import sentencepiece as spm
    from transformers import PreTrainedTokenizerFast
    lines = corpus()
    strings = test_strings(lines) + ["<s>", "</s>", "a</s>b", "<s> [INST] hi [/INST]", "[INST]x[/INST] y",
                                     "<unk>", " <s>x", "</s> </s>", "éè€😀 byte fallback"]
    print("\n| sentencepiece kind | ours against | strings | ids identical | decoded text identical | first difference |")
    print("|---|---|---:|---:|---:|---|")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(l for l in lines if l.strip()))
        for kind, extra in SPM_KINDS.items():
            d = os.path.join(tmp, kind)
            os.makedirs(d)
            spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(d, "tokenizer"), **SPM_COMMON, **extra)
            model = os.path.join(d, "tokenizer.model")
            proc = spm.SentencePieceProcessor(model_file=model)
            ok &= compare(kind, "tokenizer.model: sentencepiece (Python)", dump, model, strings, proc.encode,
                          proc.decode)
            for legacy in (True, False):
                tok = hf_sentencepiece(d, legacy)
                enc = lambda s, t=tok: t.encode(s, add_special_tokens=False)
                dec = lambda ids, t=tok: t.decode(ids, skip_special_tokens=False)
                if legacy:  # the record: tokenizer.model against transformers' own conversion of it
                    compare(kind, f"tokenizer.model: transformers {type(tok).__name__} (not gating)", dump, model,
                            strings, enc, dec)
                saved = os.path.join(tmp, f"{kind}-legacy-{legacy}")
                tok.save_pretrained(saved)
                ok &= compare(kind, f"tokenizer.json, transformers' layout, legacy={legacy}", dump,
                              os.path.join(saved, "tokenizer.json"), strings, enc, dec)
            llama2 = os.path.join(tmp, f"{kind}-llama2-layout")
            os.makedirs(llama2)
            path = os.path.join(llama2, "tokenizer.json")
            with open(os.path.join(saved, "tokenizer.json")) as f_in, open(path, "w") as f_out:
                f_out.write(f_in.read())
            llama2_layout(path)
            fast = PreTrainedTokenizerFast(tokenizer_file=path, clean_up_tokenization_spaces=False)
            ok &= compare(kind, "tokenizer.json, Llama 2's layout (Prepend, Replace)", dump, path, strings,
                          lambda s: fast.encode(s, add_special_tokens=False),
                          lambda ids: fast.decode(ids, skip_special_tokens=False))
    return ok


DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def randomize(model):
    # transformers initialises norms to 1 and biases to 0: make every parameter matter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.05)


def ours_greedy(module, tokens, n):
    seq = tokens
    for _ in range(n):
        nxt = module.full(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq[:, tokens.shape[1]:]


def entry_dtype(entry):
    # The dtype model.yaml gives the converted entry.
    with open(os.path.join(entry, "model.yaml")) as f:
        for line in f:
            if line.startswith("dtype:"):
                return line.split(":", 1)[1].strip()
    return "?"


def bf16_step(x):
    # The spacing of bf16 numbers at magnitude |x| (8 significant bits).
    return 2.0 ** (torch.floor(torch.log2(x.abs().clamp_min(1e-30))) - 7)


def teacher_forced(ours, ref, seq, start):
    """Both models on transformers' own greedy sequence: at every generated position, is our argmax its?
    A position is a tie when transformers' top two logits are within two bf16 steps of each other."""
    want = ref(seq).logits[0, start - 1:-1].float()
    got = ours.full(seq)[0, start - 1:-1].float()
    top = want.topk(2, dim=-1).values
    margin = top[:, 0] - top[:, 1]
    tie = margin <= 2 * bf16_step(top[:, 0])
    agree = got.argmax(-1) == want.argmax(-1)
    worst = "-"
    if (~agree).any():
        worst = f"{margin[~agree].min().item():.3f}"
    return {"n": int(agree.numel()), "agree": int(agree.sum()), "ties": int(tie.sum()),
            "clear_disagree": int((~agree & ~tie).sum()), "worst": worst}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("convert")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokenize-dump", default="")
    ap.add_argument("--diffs", default="", help="write the strings whose ids differ here (JSON)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    transformers.utils.logging.disable_progress_bar()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {dev}\n")
    print("| model | dtype | logits rel. err | bound | greedy 64 tokens identical | teacher-forced argmax "
          "agrees | positions that are bf16 ties | disagreements off ties | smallest margin where we disagree "
          "| transformers eager = sdpa (greedy) |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|---|")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls, config in CASES:
            torch.manual_seed(0)
            model = cls(config).eval()
            randomize(model)
            for dt in ("fp32", "bf16"):
                hf_dir = os.path.join(tmp, f"{name}-{dt}-hf")
                model.to(DTYPE[dt]).save_pretrained(hf_dir, safe_serialization=True)
                if dt == "fp32":  # what this transformers writes about the rotary embedding
                    with open(os.path.join(hf_dir, "config.json")) as f:
                        saved = json.load(f)
                    rope = {k: v for k, v in saved.items() if k.startswith("rope")}
                    print(f"config.json of {name}: {json.dumps(rope)}", file=sys.stderr)
                repo = os.path.join(tmp, "repo")
                entry = f"{name}-{dt}"
                run = subprocess.run([args.convert, "--hf", hf_dir, "--repo", repo, "--name", entry,
                                      "--byte-tokenizer", "--max-seq", "128"], capture_output=True, text=True)
                if run.returncode != 0:
                    print(f"| {name} | {dt} | conversion failed: {run.stderr.strip()} | | | |")
                    ok = False
                    continue
                if entry_dtype(os.path.join(repo, entry)) != dt:  # the checkpoint's dtype, as saved
                    print(f"| {name} | {dt} | converted to {entry_dtype(os.path.join(repo, entry))} | | | |")
                    ok = False
                    continue
                ours = torch.jit.load(os.path.join(repo, entry, "model.pt"), map_location=dev)
                ref = model.to(dev)
                g = torch.Generator().manual_seed(1)
                tokens = torch.randint(0, SMALL["vocab_size"], (1, 48), generator=g).to(dev)
                with torch.no_grad():
                    want = ref(tokens).logits.float()
                    got = ours.full(tokens).float()
                    rel = ((got - want).norm() / want.norm()).item()
                    mine = ours_greedy(ours, tokens[:, :16], 64)
                    ref.generation_config.eos_token_id = None  # 64 tokens whatever they are, as ours
                    theirs = ref.generate(tokens[:, :16], max_new_tokens=64, do_sample=False, pad_token_id=0)[:, 16:]
                    same = torch.equal(mine, theirs)
                    forced = teacher_forced(ours, ref, torch.cat([tokens[:, :16], theirs], dim=1), 16)
                    self_same = "-"
                    if dt == "bf16":  # does transformers agree with itself under another attention kernel?
                        try:
                            ref.set_attn_implementation("eager")
                            eager = ref.generate(tokens[:, :16], max_new_tokens=64, do_sample=False,
                                                 pad_token_id=0)
                            ref.set_attn_implementation("sdpa")
                            self_same = "yes" if torch.equal(eager[:, 16:], theirs) else "NO"
                        except Exception as e:  # an older transformers without set_attn_implementation
                            self_same = f"n/a ({type(e).__name__})"
                # fp32: the 64 greedy tokens identical. bf16: where transformers' own top two are more than
                # two bf16 steps apart (not a tie at bf16's resolution), our argmax on its sequence is its.
                good = rel < BOUND[dt] and (same if dt == "fp32" else forced["clear_disagree"] == 0)
                ok &= good
                print(f"| {name} | {dt} | {rel:.2e} | {BOUND[dt]:.0e} | {'yes' if same else 'NO'} | "
                      f"{forced['agree']}/{forced['n']} | {forced['ties']} | {forced['clear_disagree']} | "
                      f"{forced['worst']} | {self_same} |" + ("" if good else " MISSED"))
                model = model.to("cpu").float()
    if args.tokenize_dump:
        ok &= verify_tokenizers(args.tokenize_dump)
        ok &= verify_sentencepiece(args.tokenize_dump)
        if args.diffs:
            with open(args.diffs, "w") as f:
                json.dump(DIFFS, f, indent=1, ensure_ascii=False)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
