"""Reads the commands, and the output shown under them, out of the fenced code blocks of the docs.

read_docs(SOURCE_DIR) reads README.md and docs/*.md and returns their Items in order; a line is a command
when it starts with `$ ` or with one of PROGRAMS (or build/..., ./tools/..., tools/...), and `\\` at its
end continues it. See doc_commands_test.py for how they are checked.
"""

import os
import re

PROGRAMS = ('autouvm-cli', 'autouvmd', 'autouvm-mkmodel', 'autouvm-convert', 'autouvm-sim')


class Item:
    """A command or an output line of a doc, with the output the doc shows under a `$ ` command."""

    def __init__(self, doc, line, text, kind):
        self.doc, self.line, self.text, self.kind = doc, line, text, kind
        self.shown = []  # lines of output shown under it

    def where(self):
        return f'{self.doc}:{self.line}'


def strip_comment(text):
    """Drops a trailing `# comment` that is outside quotes (bash's rule: `#` after a blank)."""
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif quote == "$'" or quote == '"':
            if c == '\\':
                i += 1
            elif c == quote[-1]:
                quote = None
        elif c == '\\':
            i += 1
        elif c == "'" or c == '"':
            quote = c
        elif c == '$' and text[i + 1:i + 2] == "'":
            quote = "$'"
            i += 1
        elif c == '#' and (i == 0 or text[i - 1] in ' \t'):
            return text[:i].rstrip()
        i += 1
    return text.rstrip()


def starts_with_program(line):
    word = line.split(None, 1)[0] if line.strip() else ''
    return word in PROGRAMS or word.startswith(('build/', './tools/', 'tools/'))


def is_program_output(line):
    """`autouvmd: ...`, or a log line `[...] [info] autouvmd: ...`: what a program prints, not a command."""
    line = re.sub(r'^\[[^\]]*\] \[[a-z]+\] ', '', line)
    return any(line.startswith(p + ':') for p in PROGRAMS)


def fenced_blocks(text):
    """Yields (first line number, [lines]) for each ``` block."""
    block, start = None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith('```'):
            if block is None:
                block, start = [], number + 1
            else:
                yield start, block
                block = None
        elif block is not None:
            block.append(line)


def items_of_block(doc, start, lines):
    items = []
    prompted = any(l.startswith('$ ') for l in lines)
    i = 0
    while i < len(lines):
        line, number = lines[i], start + i
        i += 1
        if prompted and line.startswith('$ '):
            text = line[2:]
        elif not prompted and starts_with_program(line):
            text = line
        else:
            if is_program_output(line):
                items.append(Item(doc, number, line.rstrip(), 'output'))
            elif prompted and line.strip() and items and items[-1].kind == 'command':
                items[-1].shown.append(line.rstrip())
            continue
        text = strip_comment(text)
        while text.endswith('\\') and i < len(lines):  # continued, as bash continues it
            text = text[:-1].rstrip() + ' ' + strip_comment(lines[i].strip())
            i += 1
        while not prompted and i < len(lines) and lines[i][:1] in (' ', '\t') and lines[i].strip():
            text += ' ' + strip_comment(lines[i].strip())  # the indented rest of a usage line
            i += 1
        items.append(Item(doc, number, text, 'command'))
    return items


def read_docs(source_dir):
    docs = ['README.md'] + sorted('docs/' + f for f in os.listdir(os.path.join(source_dir, 'docs'))
                                  if f.endswith('.md'))
    items, texts = [], {}
    for doc in docs:
        with open(os.path.join(source_dir, doc), encoding='utf-8') as f:
            texts[doc] = f.read()
        for start, lines in fenced_blocks(texts[doc]):
            items.extend(items_of_block(doc, start, lines))
    return items, texts


def summary_pattern(cli_md):
    """The generate summary line as docs/cli.md shows it: its keys in its order; times with two decimals."""
    for _, lines in fenced_blocks(cli_md):
        for line in lines:
            if line.startswith('finish_reason='):
                parts = []
                for pair in line.split():
                    key = pair.split('=', 1)[0]
                    value = r'\d+\.\d\d' if key.endswith('_ms') else r'\S+'
                    parts.append(re.escape(key) + '=' + value)
                return re.compile(r'\A' + ' '.join(parts) + r'\n\Z')
    return None
