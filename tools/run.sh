#!/usr/bin/env bash
# Builds autouvmd and starts it on its embedded defaults (config/autouvmd.yaml): gRPC on
# 127.0.0.1:50051, CPU backend, models under ./models (a tiny generated Llama on first start), state
# under ./state. Extra arguments go to autouvmd (e.g. --listen 0.0.0.0:50051). Ctrl-C drains and stops.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/build.sh"
cd "$root"
cat <<MSG

autouvmd is starting. In another terminal:
  build/clients/autouvm-cli health
  build/clients/autouvm-cli models
  build/clients/autouvm-cli generate --model tiny-llama --prompt "Hello" --max-tokens 32

MSG
exec "$root/build/server/autouvmd" "$@"
