#!/usr/bin/env bash
# Fails (and lists the files) when any C++ source differs from what clang-format (.clang-format) makes of it.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files -- '*.cc' '*.h' 2>/dev/null || find proto runtime profiler server clients tools bench tests -name '*.cc' -o -name '*.h')
bad=()
for f in $files; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not clang-formatted (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format ok: $(echo "$files" | wc -w) files"
