#!/usr/bin/env bash
# The daemon's resident memory across re-profiles of one shape: a fresh autouvmd on its embedded
# defaults (tiny-llama, CPU), one 40-token prefill profiled, then ROUNDS x 50 times an admin Reprofile of
# that prefill shape and one request of it (each records, analyses and stores its profile again).
# Prints a table: re-profiles so far, VmRSS, and the profile store's write-ahead log.
# Usage: bench/reprofile_memory.sh [BUILD_DIR] [ROUNDS]      (Note [Memtables of a small store])
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rounds=${2:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$build/server/autouvmd" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --port-file port \
  --model-repository models --state-dir state >daemon.log 2>&1 &
pid=$!
for _ in $(seq 300); do [ -s port ] && break; sleep 0.2; done
cli=("$build/clients/autouvm-cli" --addr "127.0.0.1:$(cat port)")
for _ in $(seq 300); do "${cli[@]}" health >/dev/null 2>&1 && break; sleep 0.2; done
ids="256$(printf ',65%.0s' $(seq 39))"
request() { "${cli[@]}" generate --model tiny-llama --token-ids "$ids" --max-tokens 1 >/dev/null 2>&1; }
request
sleep 1
echo "| re-profiles | VmRSS (KiB) | WAL (KiB) |"
echo "| ---: | ---: | ---: |"
for round in $(seq 0 "$rounds"); do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  wal=$(du -ck state/profiles/*.log 2>/dev/null | tail -1 | awk '{print $1}')
  echo "| $((round * 50)) | $rss | $wal |"
  [ "$round" -eq "$rounds" ] && break
  for _ in $(seq 50); do
    "${cli[@]}" reprofile tiny-llama --phase prefill --batch 1 --prompt-len 40 >/dev/null 2>&1
    request
  done
done
kill -TERM "$pid"
wait "$pid"
