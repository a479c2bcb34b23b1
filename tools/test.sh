#!/usr/bin/env bash
# Installs what the tests need, builds everything and runs every test (unit, integration, end-to-end).
# The end-to-end tests start their own autouvmd processes on 127.0.0.1 port 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/tools/build.sh"
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout 300
