#!/usr/bin/env python3
"""The build's layering rule (ARCHITECTURE.md, "Layers"): a folder uses only the folders above it.

Usage: python3 tests/layering/layering_test.py SOURCE_DIR     (ctest runs it as layering_test)
       python3 tests/layering/layering_test.py --self-test  (layering_self_test: a tree made to break
                                                             each rule, which the check must catch)

Every .h/.cc/.cu file under the layered folders is read, and each `#include "folder/..."` is checked
against the table below: a file may include headers of its own folder and of folders above it, never of
a folder below it. The table's "knows nothing of" column is checked too, for the system headers that
stand for it (gRPC, libtorch, CUDA, RocksDB, the HTTP server), and a folder may include only the public
headers another folder's CMakeLists.txt lists (FILE_SET HEADERS ... FILES; tests/ may include any).
Each violation is printed
as `file:line: what`; the test exits 1 if there is one.
"""

import os
import re
import sys

# Top to bottom: a folder may include the folders before it in this list.
LAYERS = ['proto', 'base', 'runtime', 'profiler', 'tokenizer', 'engine', 'http', 'server']
# Folders that use the layers but are not one (their rules: below).
LEAVES = ['clients', 'tools', 'bench', 'tests']

# System headers that stand for a dependency a folder must not know of.
FORBIDDEN = {
    'grpc': re.compile(r'^(grpcpp/|grpc/|grpc\+\+/)|\.grpc\.pb\.h$'),
    'libtorch': re.compile(r'^(torch/|ATen/|c10/)'),
    'CUDA': re.compile(r'^(cuda|cupti|nvml|cuda_runtime)'),
    'RocksDB': re.compile(r'^rocksdb/'),
    'HTTP': re.compile(r'^httplib\.h$'),
}
KNOWS_NOTHING_OF = {
    'base': ['grpc', 'libtorch', 'CUDA', 'RocksDB', 'HTTP'],
    'runtime': ['grpc', 'RocksDB', 'HTTP'],
    'profiler': ['grpc', 'HTTP'],
    'tokenizer': ['grpc', 'libtorch', 'CUDA', 'RocksDB', 'HTTP'],
    'engine': ['grpc', 'RocksDB', 'HTTP'],
    'http': ['grpc', 'libtorch', 'CUDA', 'RocksDB'],
    'clients': ['libtorch', 'CUDA', 'RocksDB'],
}
# CUDA itself only under runtime/cuda/ (and the GPU tests and benchmarks that measure it).
CUDA_ALLOWED = ('runtime/cuda/', 'tests/gpu/', 'bench/')
# What clients/ may include of the project: the wire format and base/ (it talks gRPC only).
CLIENT_ALLOWED = ['proto', 'base', 'clients']

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
FILE_SET = re.compile(r'FILE_SET\s+HEADERS\s+BASE_DIRS\s+\S+\s+FILES\s+(.*?)(?:\bPRIVATE\b(.*?))?\)', re.S)


def public_headers(root, folder):
    """The public headers folder/CMakeLists.txt lists, as 'folder/x.h'; None if it lists none."""
    path = os.path.join(root, folder, 'CMakeLists.txt')
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = re.sub(r'#.*', '', f.read())
    found = None
    for m in FILE_SET.finditer(text):
        found = found or set()
        found.update(folder + '/' + h for h in m.group(1).split())
    return found


def files_under(root, folder):
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
        dirnames[:] = [d for d in dirnames if not d.startswith('build')]
        for name in filenames:
            if name.endswith(('.h', '.cc', '.cu', '.in')):
                yield os.path.join(dirpath, name)


def check(root):
    problems = []
    publics = {f: public_headers(root, f) for f in LAYERS}
    for folder in LAYERS + LEAVES:
        if not os.path.isdir(os.path.join(root, folder)):
            continue
        for path in files_under(root, folder):
            rel = os.path.relpath(path, root)
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = f.read().split('\n')
            for number, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                header = m.group(2)
                where = f'{rel}:{number}'
                for dep in KNOWS_NOTHING_OF.get(folder, []):
                    if FORBIDDEN[dep].search(header):
                        problems.append(f'{where}: {folder}/ knows nothing of {dep}, but includes {header}')
                if FORBIDDEN['CUDA'].search(header) and not rel.startswith(CUDA_ALLOWED):
                    problems.append(f'{where}: a CUDA header ({header}) outside runtime/cuda/')
                target = header.split('/', 1)[0] if '/' in header else None
                if m.group(1) != '"' or target not in LAYERS + LEAVES:
                    continue
                if folder in LAYERS:
                    if target in LEAVES:
                        problems.append(f'{where}: {folder}/ includes {header}, of {target}/, which is not a library')
                    elif LAYERS.index(target) > LAYERS.index(folder):
                        problems.append(f'{where}: {folder}/ includes {header}, of {target}/, a folder below it')
                elif folder == 'clients' and target not in CLIENT_ALLOWED:
                    problems.append(f'{where}: clients/ talks gRPC only, but includes {header}')
                # Tests may reach a folder's private headers: unit tests test them.
                if (target != folder and folder != 'tests' and target in LAYERS and publics.get(target) is not None
                        and header not in publics[target]):
                    problems.append(f'{where}: {header} is not a public header of {target}/ '
                                    f'(its CMakeLists.txt lists them)')
    return problems


def self_test():
    """Writes a small tree that breaks each rule once and checks that each is reported."""
    import tempfile
    cases = {
        'runtime/a.cc': ('#include "engine/model_runner.h"', 'a folder below it'),
        'base/b.cc': ('#include <torch/torch.h>', 'knows nothing of libtorch'),
        'tokenizer/c.cc': ('#include <grpcpp/grpcpp.h>', 'knows nothing of grpc'),
        'engine/d.cc': ('#include "tokenizer/private.h"', 'not a public header of tokenizer/'),
        'server/e.cc': ('#include <cuda_runtime.h>', 'outside runtime/cuda/'),
        'profiler/f.cc': ('#include "tests/testing/temp_dir.h"', 'not a library'),
        'clients/g.cc': ('#include "server/config.h"', 'talks gRPC only'),
    }
    allowed = {
        'engine/ok.cc': '#include "tokenizer/tokenizer.h"',
        'runtime/cuda/ok.cc': '#include <cuda_runtime.h>',
        'server/ok.cc': '#include "engine/model_runner.h"',
    }
    with tempfile.TemporaryDirectory(prefix='layering_self_test.') as root:
        for rel, text in list(allowed.items()) + [(r, t) for r, (t, _) in cases.items()]:
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), 'w') as f:
                f.write(text + '\n')
        with open(os.path.join(root, 'tokenizer', 'CMakeLists.txt'), 'w') as f:
            f.write('target_sources(t PUBLIC FILE_SET HEADERS BASE_DIRS x FILES tokenizer.h PRIVATE private.h)\n')
        problems = check(root)
    failed = 0
    for rel, (_, says) in cases.items():
        if not any(p.startswith(rel + ':') and says in p for p in problems):
            print(f'not caught: {rel} ({says})')
            failed += 1
    for rel in allowed:
        for p in problems:
            if p.startswith(rel + ':'):
                print(f'wrongly reported: {p}')
                failed += 1
    print(f'{len(cases) - failed} of {len(cases)} violations caught, {len(problems)} reported')
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    print(f'{len(problems)} layering violation(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
