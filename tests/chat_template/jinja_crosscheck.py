#!/usr/bin/env python3
"""Renders chat templates with our engine (tokenizer/chat_template.h, through tests/tools/chat_template_render)
and with Jinja2 set up as transformers' apply_chat_template sets it up, over generated conversations, and fails
on the first byte that differs, showing it.

    jinja_crosscheck.py --render build/tests/chat_template_render
    jinja_crosscheck.py --render ... --transformers --tokenizer-dir ~/Llama-3.1-8B-Instruct   # on a GPU host

Templates: tests/chat_template/templates/*.jinja (Llama 2, Llama 3.x, Mistral v0.3 and Qwen2.5 styles and a
file of constructs), the fuzzer's corpus (tests/fuzz/corpus/chat_template) and the daemon's default template
(engine::kDefaultChatTemplate). With --transformers and --tokenizer-dir, the tokenizer's own template is also
rendered by transformers' apply_chat_template and by our engine, and the two compared.

Jinja2 as transformers uses it: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension and a {% generation %} block, a tojson filter that is json.dumps(ensure_ascii=False),
and raise_exception(). Where Jinja2 raises, our engine must fail too (messages are not compared), except that
an attribute of an undefined value is undefined to us where Jinja2 raises (Note [Chat template subset] in
tokenizer/chat_template_render.cc): those are counted and listed, not failures.

Exit status: 0 all agree, 1 a difference, 2 a usage or setup error, 77 (skipped) without jinja2.
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

SKIPPED = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def make_environment():
    """Jinja2's environment as transformers' chat template utilities build it."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """{% generation %}...{% endgeneration %}: transformers marks assistant text with it; it renders its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


# --- generated conversations -------------------------------------------------------------------------------

TEXTS = [
    "", " ", "Hello", "Hello, world!", "  padded on both sides  ", "\n\nnewlines around\n", "line one\nline two\n",
    "tab\tseparated\tvalues", "Ünïcödé – “curly quotes” and 'single' \\ backslash \"double\"",
    "日本語のテキストです。", "emoji 🦙🔥👩‍👩‍👧", "e\u0301 combining and \u00e9 precomposed", "مرحبا بالعالم",
    "non-breaking\u00a0space\u00a0", "\u3000ideographic space\u3000", "line\u2028separator", "ß and ﬁ ligature",
    "{{ not a tag }} {% neither %}", "</s> [INST] <|im_end|> <|eot_id|> <<SYS>>", "control \x07 bell \x1f unit",
    "What is 2 + 2?", "Write a haiku about the sea.", "CAPS and lower and Title Case", "l" * 40, "x",
    "a slash / and a <tag> & ampersand", "1.0e10 and -0.0 and 007",
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city, now.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — \"quoted\" ✓",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "weight": {"type": "number", "default": 0.5}}, "required": ["query", "limit"]},
        "return": {"type": "array"}}},
    {"type": "function", "function": {"name": "noop", "description": "", "parameters": {}}},
]

ARGUMENT_VALUES = ["Zürich", "東京", "a \"quoted\" value", "line\nbreak", 3, -17, 0, 2.5, 0.1, 1e-7, 1e21, 123456.789,
                   -0.0, True, False, None, [1, "two", 3.0], {"nested": {"deeper": ["x", None]}}, "", "\u2028", "\x1f"]


def pick_text(rng):
    if rng.random() < 0.3:
        return " ".join(rng.choice(TEXTS) for _ in range(rng.randint(2, 3)))
    return rng.choice(TEXTS)


def call_id(rng):
    n = 9 if rng.random() < 0.85 else rng.choice([0, 5, 12])
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def tool_call(rng):
    args = {k: rng.choice(ARGUMENT_VALUES) for k in rng.sample(["city", "unit", "query", "limit", "x"], rng.randint(0, 3))}
    name = rng.choice(["get_weather", "search", "noop"])
    arguments = json.dumps(args, ensure_ascii=False) if rng.random() < 0.2 else args
    return {"id": call_id(rng), "type": "function", "function": {"name": name, "arguments": arguments}}


def conversation(rng):
    """One context: messages (system, alternating turns, tool use, sometimes out of order), tools, tokens."""
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": pick_text(rng)})
    turns = rng.choice([1, 1, 2, 3, 4, 6]) if rng.random() < 0.97 else 0
    tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS))) if rng.random() < 0.3 else None
    for i in range(turns):
        messages.append({"role": "user", "content": pick_text(rng)})
        if i == turns - 1 and rng.random() < 0.6:
            break
        if tools and rng.random() < 0.4:
            calls = [tool_call(rng) for _ in range(rng.choice([1, 1, 2]))]
            messages.append({"role": "assistant", "content": rng.choice(["", None]) if rng.random() < 0.8 else
                             pick_text(rng), "tool_calls": calls})
            for c in calls:
                result = rng.choice([pick_text(rng), json.dumps({"temp": 21.5, "sky": "☀"}, ensure_ascii=False)])
                messages.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                                 "content": result})
        messages.append({"role": "assistant", "content": pick_text(rng)})
    if messages and rng.random() < 0.08:  # out of order: templates that check turns raise
        rng.shuffle(messages)
    if rng.random() < 0.03:
        messages.append({"role": rng.choice(["user", "assistant", "narrator"]), "content": pick_text(rng)})
    bos, eos = rng.choice([("<s>", "</s>"), ("<|begin_of_text|>", "<|eot_id|>"), ("", "<|im_end|>"), ("", "")])
    context = {"messages": messages, "add_generation_prompt": rng.random() < 0.5, "bos_token": bos, "eos_token": eos}
    if tools is not None:
        context["tools"] = tools
    if rng.random() < 0.1:
        context["date_string"] = "29 Feb 2028"
    return context


# --- rendering and comparing -------------------------------------------------------------------------------

def run_ours(render, template_path, contexts):
    """Our renderings: a list of ("OK", text) or ("ERROR", message), or [("PARSE_ERROR", message)]."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(contexts, f, ensure_ascii=False)
        path = f.name
    try:
        out = subprocess.run([render, template_path, path], capture_output=True, check=False).stdout
    finally:
        os.unlink(path)
    results, at = [], 0
    while at < len(out):
        eol = out.index(b"\n", at)
        tag, size = out[at:eol].decode().split(" ")
        start = eol + 1
        results.append((tag, out[start:start + int(size)].decode("utf-8", "backslashreplace")))
        at = start + int(size) + 1
    return results


def first_difference(a, b):
    ea, eb = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    for i in range(min(len(ea), len(eb))):
        if ea[i] != eb[i]:
            return i
    return min(len(ea), len(eb))


def show_difference(name, index, context, want, got):
    at = first_difference(want, got)
    wb, gb = want.encode("utf-8"), got.encode("utf-8")
    print(f"DIFFERENCE in {name}, context {index}, at byte {at} (Jinja2 {len(wb)} bytes, ours {len(gb)}):")
    print(f"  Jinja2: ...{wb[max(0, at - 60):at + 60]!r}")
    print(f"  ours:   ...{gb[max(0, at - 60):at + 60]!r}")
    print(f"  context: {json.dumps(context, ensure_ascii=False)}")


def check_template(env, render, name, path, contexts, lenient):
    """Compares every rendering of one template; False at the first difference."""
    import jinja2
    with open(path, encoding="utf-8") as f:
        source = f.read()
    ours = run_ours(render, path, contexts)
    try:
        template = env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        if ours and ours[0][0] == "PARSE_ERROR":
            print(f"{name}: both refuse the template (Jinja2: {e}; ours: {ours[0][1]})")
            return True
        print(f"DIFFERENCE in {name}: Jinja2 refuses the template ({e}), ours parses it")
        return False
    if ours and ours[0][0] == "PARSE_ERROR":
        print(f"DIFFERENCE in {name}: ours refuses the template ({ours[0][1]}), Jinja2 parses it")
        return False
    if len(ours) != len(contexts):
        print(f"{name}: chat_template_render gave {len(ours)} results for {len(contexts)} contexts")
        return False
    agreed = errors = 0
    for i, (context, (tag, got)) in enumerate(zip(contexts, ours)):
        try:
            want, failure = template.render(**context), None
        except jinja2.UndefinedError as e:
            want, failure = None, e
            if tag == "OK":
                lenient.append(f"{name} context {i}: Jinja2 raised {e!s}; ours rendered")
                continue
        except Exception as e:  # raise_exception, a type error: ours must fail too
            want, failure = None, e
        if failure is not None:
            if tag != "ERROR":
                print(f"DIFFERENCE in {name}, context {i}: Jinja2 raised {type(failure).__name__}: {failure}; "
                      f"ours rendered {got!r}\n  context: {json.dumps(context, ensure_ascii=False)}")
                return False
            errors += 1
            continue
        if tag != "OK":
            print(f"DIFFERENCE in {name}, context {i}: ours failed ({got}); Jinja2 rendered {want!r}\n"
                  f"  context: {json.dumps(context, ensure_ascii=False)}")
            return False
        if want != got:
            show_difference(name, i, context, want, got)
            return False
        agreed += 1
    print(f"{name}: {agreed} renderings identical, {errors} refused by both")
    return True


def check_transformers(render, tokenizer_dir, contexts, lenient):
    """The tokenizer's own template: transformers' apply_chat_template against ours."""
    import jinja2
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    source = tok.chat_template if isinstance(tok.chat_template, str) else tok.chat_template["default"]
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False, encoding="utf-8") as f:
        f.write(source)
        path = f.name
    try:
        ours_contexts = [dict(c, bos_token=tok.bos_token or "", eos_token=tok.eos_token or "") for c in contexts]
        ours = run_ours(render, path, ours_contexts)
    finally:
        os.unlink(path)
    same = 0
    for i, (context, (tag, got)) in enumerate(zip(ours_contexts, ours)):
        if not context["messages"]:
            continue  # transformers refuses an empty chat before its template runs (the HTTP API does too)
        # The template's other variables (date_string) as transformers passes them: keyword arguments.
        extra = {k: v for k, v in context.items()
                 if k not in ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")}
        try:
            want = tok.apply_chat_template(context["messages"], tools=context.get("tools"), tokenize=False,
                                           add_generation_prompt=context["add_generation_prompt"], **extra)
        except jinja2.UndefinedError as e:
            if tag == "OK":
                lenient.append(f"transformers context {i}: Jinja2 raised {e!s}; ours rendered")
            continue
        except Exception:  # noqa: BLE001 - any refusal: ours must refuse too
            if tag == "OK":
                print(f"transformers: context {i}: transformers refused, ours rendered")
                return False
            continue
        if tag != "OK" or want != got:
            show_difference(f"transformers {tokenizer_dir}", i, context, want, got if tag == "OK" else "")
            return False
        same += 1
    print(f"transformers {tokenizer_dir}: {same} renderings identical")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", required=True, help="the chat_template_render binary")
    parser.add_argument("--templates", nargs="*", help="template files (default: the templates described above)")
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20250101)
    parser.add_argument("--transformers", action="store_true", help="also compare with transformers (--tokenizer-dir)")
    parser.add_argument("--tokenizer-dir", help="a tokenizer saved by transformers, with a chat template")
    args = parser.parse_args()
    try:
        env = make_environment()
    except ImportError as e:
        print(f"skipped: {e} (install python3-jinja2)")
        return SKIPPED
    if not os.access(args.render, os.X_OK):
        print(f"{args.render}: not an executable")
        return 2
    rng = random.Random(args.seed)
    contexts = [conversation(rng) for _ in range(args.conversations)]
    templates = args.templates
    if not templates:
        templates = sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja")))
        templates += sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz", "corpus", "chat_template", "*")))
    with tempfile.TemporaryDirectory() as tmp:
        default = os.path.join(tmp, "default.jinja")
        with open(default, "wb") as f:
            f.write(subprocess.run([args.render, "--print-default-template"], capture_output=True, check=True).stdout)
        lenient = []
        for path in templates + [default]:
            name = "engine::kDefaultChatTemplate" if path == default else os.path.relpath(path, ROOT)
            if not check_template(env, args.render, name, path, contexts, lenient):
                return 1
    if args.transformers:
        if not args.tokenizer_dir:
            print("--transformers needs --tokenizer-dir")
            return 2
        if not check_transformers(args.render, args.tokenizer_dir, contexts, lenient):
            return 1
    if lenient:
        print(f"{len(lenient)} renderings where Jinja2 raised for an attribute of an undefined value and ours "
              "rendered (Note [Chat template subset]), e.g.:")
        for line in lenient[:5]:
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
