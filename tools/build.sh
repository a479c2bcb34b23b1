#!/usr/bin/env bash
# Installs the Debian packages (tools/debian-packages.txt) and builds everything into ./build.
# Used by tools/run.sh and tools/test.sh; BUILD_DIR and BUILD_TYPE override the defaults.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/tools/install-deps.sh"
jobs=$(( $(nproc) < 2 ? 1 : 2 ))  # libtorch translation units need ~1.5 GB each
[ "$(nproc)" -gt 8 ] && jobs=$(( $(nproc) / 2 ))
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$build_dir" -j "$jobs"
