#!/usr/bin/env bash
# Builds what the daemon needs and starts it on its embedded defaults (config/autouvmd.yaml): gRPC on
# 127.0.0.1:50051, CPU backend, models under ./models (a tiny generated Llama on first start), state
# under ./state. Extra arguments go to autouvmd (e.g. --listen 0.0.0.0:50051). Ctrl-C drains and stops.
# It installs the build packages only (tools/debian-packages.txt) and builds only the daemon, the
# sentencepiece plugin the daemon loads and the CLI; tools/test.sh builds the rest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/tools/build.sh" autouvmd autouvm_sentencepiece autouvm-cli
cd "$root"
cli=${build_dir#"$root/"}/clients/autouvm-cli
cat <<MSG

autouvmd is starting. In another terminal:
  $cli health
  $cli models
  $cli generate --model tiny-llama --prompt "Hello" --max-tokens 32

MSG
exec "$build_dir/server/autouvmd" "$@"
