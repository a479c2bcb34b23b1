#!/usr/bin/env python3
"""Chat templates against transformers, on the GPU host (where transformers and tokenizers are installed).

For templates written in the style of Llama 2, Llama 3.x, Mistral v0.3 and Qwen2.5 checkpoints
(tests/chat_template/templates/), builds a tokenizer the way such a checkpoint carries one: a byte-level
BPE trained here (tests/gpu/hf_verify.py's trainer) with the family's special tokens, wrapped in
PreTrainedTokenizerFast with its bos/eos and the template, saved with save_pretrained (tokenizer.json and
tokenizer_config.json with chat_template). Then over a few hundred generated conversations
(tests/chat_template/jinja_crosscheck.py's generator):
  - the prompt transformers' apply_chat_template renders equals ours byte for byte
    (tests/tools/chat_template_render, our engine, with the tokenizer's bos_token/eos_token), and
  - its token ids (apply_chat_template(tokenize=True), no special tokens added) equal our tokenizer's
    ids for our rendered prompt (tests/integration/tokenize_dump_main.cc on the same tokenizer.json),
    as the daemon tokenizes a chat (add_bos false).
Prints a Markdown table; exits 1 on the first difference (shown).

    python3 tests/gpu/chat_template_hf.py --render build-gpu/tests/chat_template_render \\
        --tokenize-dump build-gpu/tests/tokenize_dump
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "chat_template"))

import hf_verify  # noqa: E402
import jinja_crosscheck  # noqa: E402

# template file, tokenizer kind (hf_verify.train_tokenizer), bos, eos, the family's special tokens
FAMILIES = [
    ("llama2.jinja", "gpt2", "<s>", "</s>", ["<s>", "</s>", "[INST]", "[/INST]"]),
    ("llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>",
     ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
      "<|python_tag|>"]),
    ("mistral_v3.jinja", "gpt2", "<s>", "</s>",
     ["<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]",
      "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]),
    ("qwen25.jinja", "qwen2", None, "<|im_end|>", ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]),
]


def make_tokenizer(directory, kind, bos, eos, specials, template, lines):
    from transformers import PreTrainedTokenizerFast
    path = os.path.join(directory, "trained.json")
    tok = hf_verify.train_tokenizer(kind, path, lines)
    tok.add_special_tokens(specials)
    tok.save(path)
    fast = PreTrainedTokenizerFast(tokenizer_file=path, bos_token=bos, eos_token=eos)
    fast.chat_template = template
    fast.save_pretrained(directory)
    return os.path.join(directory, "tokenizer.json")


def our_ids(dump, tokenizer_json, texts):
    run = subprocess.run([dump, tokenizer_json], input=json.dumps(texts), capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"tokenize_dump: {run.stderr.strip()}")
    return [r["ids"] for r in json.loads(run.stdout)]


def ids_of(result):
    """apply_chat_template(tokenize=True) returns a list, or a BatchEncoding in some versions."""
    if isinstance(result, list):
        return result
    return list(result["input_ids"])


def check_family(args, family, contexts, lines):
    from transformers import AutoTokenizer
    name, kind, bos, eos, specials = family
    with open(os.path.join(ROOT, "tests", "chat_template", "templates", name), encoding="utf-8") as f:
        template = f.read()
    with tempfile.TemporaryDirectory() as d:
        tokenizer_json = make_tokenizer(d, kind, bos, eos, specials, template, lines)
        lenient = []
        if not jinja_crosscheck.check_transformers(args.render, d, contexts, lenient):
            return f"| {name} | prompts differ (above) | | |", False
        tok = AutoTokenizer.from_pretrained(d)
        ours_contexts = [dict(c, bos_token=tok.bos_token or "", eos_token=tok.eos_token or "") for c in contexts]
        with open(os.path.join(d, "template.jinja"), "w", encoding="utf-8") as f:
            f.write(template)
        rendered = jinja_crosscheck.run_ours(args.render, os.path.join(d, "template.jinja"), ours_contexts)
        texts, theirs = [], []
        for context, (tag, text) in zip(ours_contexts, rendered):
            if tag != "OK" or not context["messages"]:
                continue
            extra = {k: v for k, v in context.items()
                     if k not in ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")}
            try:
                want = ids_of(tok.apply_chat_template(context["messages"], tools=context.get("tools"), tokenize=True,
                                                      add_generation_prompt=context["add_generation_prompt"],
                                                      **extra))
            except Exception:  # noqa: BLE001 - refusals were compared by check_transformers
                continue
            texts.append(text)
            theirs.append(want)
        ours = our_ids(args.tokenize_dump, tokenizer_json, texts)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if a != b:
                at = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
                print(f"{name}: ids differ for prompt {i} at {at}: ours {a[at:at + 8]} transformers {b[at:at + 8]}\n"
                      f"prompt: {texts[i]!r}")
                return f"| {name} | {len(texts)} | ids differ at prompt {i} | |", False
        tokens = sum(len(x) for x in theirs)
        return f"| {name} | {len(texts)} | identical | {tokens} tokens identical |", True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", required=True)
    parser.add_argument("--tokenize-dump", required=True)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args()
    import transformers
    rng = random.Random(args.seed)
    contexts = [jinja_crosscheck.conversation(rng) for _ in range(args.conversations)]
    lines = hf_verify.corpus()
    print(f"transformers {transformers.__version__}, {len(contexts)} conversations\n")
    print("| template | prompts rendered by both | prompt bytes | token ids |")
    print("| --- | --- | --- | --- |")
    ok = True
    for family in FAMILIES:
        row, good = check_family(args, family, contexts, lines)
        print(row)
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
