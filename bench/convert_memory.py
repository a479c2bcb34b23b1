#!/usr/bin/env python3
"""How much memory autouvm-convert holds while converting a checkpoint (issue 8).

Writes a Llama checkpoint of random BF16 weights (safetensors, no torch needed) of about --gib GiB,
converts it with each given autouvm-convert binary to a BF16 entry (no dtype change: the weights can stay
in the checkpoint's mapping) and to an F32 one (every weight converted), and prints, per run, the peak of
the process's anonymous resident memory (RssAnon from /proc, sampled every 5 ms: what the machine must
really hold; file pages of the mapping are the page cache's and can be dropped) and of all its resident
memory (VmHWM), with the wall time.

    python3 bench/convert_memory.py --gib 4 build/tools/autouvm-convert [OTHER_BINARY ...]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time


def write_checkpoint(path, layers, dim, ffn, heads, kv_heads, vocab):
    head_dim = dim // heads
    shapes = {"model.embed_tokens.weight": [vocab, dim], "model.norm.weight": [dim], "lm_head.weight": [vocab, dim]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [dim], p + "post_attention_layernorm.weight": [dim],
                       p + "self_attn.q_proj.weight": [heads * head_dim, dim],
                       p + "self_attn.k_proj.weight": [kv_heads * head_dim, dim],
                       p + "self_attn.v_proj.weight": [kv_heads * head_dim, dim],
                       p + "self_attn.o_proj.weight": [dim, heads * head_dim],
                       p + "mlp.gate_proj.weight": [ffn, dim], p + "mlp.up_proj.weight": [ffn, dim],
                       p + "mlp.down_proj.weight": [dim, ffn]})
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    chunk = bytes(b for i in range(1 << 20) for b in (0x00, 0x3C))  # bf16 0.0078: finite, and not zero pages
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = offset
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
              "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return offset


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(binary, hf, repo, name, dtype):
    start = time.monotonic()
    p = subprocess.Popen([binary, "--hf", hf, "--repo", repo, "--name", name, "--dtype", dtype, "--byte-tokenizer",
                          "--max-seq", "256"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    anon = hwm = 0
    while p.poll() is None:
        anon = max(anon, status_kib(p.pid, "RssAnon"))
        hwm = max(hwm, status_kib(p.pid, "VmHWM"))
        time.sleep(0.005)
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"{binary} failed: {err.strip()}")
    return anon / 2**20, hwm / 2**20, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--gib", type=float, default=4.0, help="checkpoint size, about")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    dim, ffn, heads, kv = 2048, 5632, 16, 4
    per_layer = 2 * (2 * dim * dim + 2 * dim * (dim // heads * kv) + 3 * dim * ffn)
    vocab = 32000
    layers = max(1, int((args.gib * 2**30 - 4 * vocab * dim) / per_layer))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        hf = os.path.join(tmp, "hf")
        os.makedirs(hf)
        size = write_checkpoint(hf, layers, dim, ffn, heads, kv, vocab)
        print(f"checkpoint: {layers} layers, dim {dim}, ffn {ffn}, vocabulary {vocab}, BF16, {size / 2**30:.2f} GiB\n")
        print("| binary | entry dtype | model.pt GiB | peak anonymous memory GiB | peak resident GiB | seconds |")
        print("|---|---|---:|---:|---:|---:|")
        for binary in args.binaries:
            for dtype in ("bf16", "fp32"):
                repo = os.path.join(tmp, "repo")
                anon, hwm, secs = run(binary, hf, repo, "m", dtype)
                pt = os.path.getsize(os.path.join(repo, "m", "model.pt")) / 2**30
                print(f"| {binary} | {dtype} | {pt:.2f} | {anon:.2f} | {hwm:.2f} | {secs:.1f} |")
                shutil.rmtree(repo)


if __name__ == "__main__":
    main()
