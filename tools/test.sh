#!/usr/bin/env bash
# Installs what the tests need (tools/install-deps.sh --test: both package lists), builds everything with
# the tests and runs every test (unit, integration, end-to-end), then the fuzz targets for a short while
# (tools/fuzz.sh) and the hostile-input tests under sanitizers (tools/sanitize.sh).
# The end-to-end tests start their own autouvmd processes on 127.0.0.1 port 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/tools/build.sh" --test
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout 300
# The libFuzzer targets (tests/fuzz), 30 s each over their corpus, with AddressSanitizer and UBSan.
"$root/tools/fuzz.sh"
# The hostile-input tests again, the daemon and the tests built with AddressSanitizer and UBSan.
"$root/tools/sanitize.sh"
